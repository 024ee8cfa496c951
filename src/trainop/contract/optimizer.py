"""The ``tf.train.Optimizer`` contract as a real ``torch.optim.Optimizer``.

``Optimizer`` owns the bookkeeping that every algorithm shares: param groups, slots (TF's name
for per-variable optimizer state, e.g. Adam's ``m``/``v``), non-slot variables (per-group state
such as Adam's ``beta1_power``), validation, sparse dispatch and ``state_dict``. Subclasses supply
the hyperparameter table, the slot table and the update rule (see ``trainop.algorithms``).

Two ways of use, both supported by every optimizer:

TF style: variables are registered, and their slots created, the first time they are seen::

    opt = trainop.AdamOptimizer(learning_rate=0.001)
    opt.minimize(lambda: loss_fn(w), global_step=step, var_list=[w])

torch style: parameters at construction, then ``backward`` and ``step``::

    opt = trainop.AdamOptimizer(params=model.parameters(), learning_rate=0.001)
    opt = trainop.AdamOptimizer(model.parameters(), lr=0.001)  # the same (torch_style.py)
    loss.backward(); opt.step(); opt.zero_grad()

State schema:

- ``param_groups[i]``: ``"lr"`` (TF's ``learning_rate``) and the other hyperparameters under their
  TF argument names, plus ``"non_slot"``: a dict of per-group counters. ``non_slot["step"]`` is an
  int64 count of the updates applied since the group was added (the step at which a
  learning-rate policy is evaluated); algorithms add their own (Adam: float32
  ``beta1_power``/``beta2_power``, as in TF). Every group advances at every applied update,
  also one whose variables got no gradient, as TF's one set of counters advances once per
  ``apply_gradients``.
- ``state[param]``: the slots of that parameter under TF's slot names, same shape and dtype as the
  parameter unless the slot table says otherwise.

Gating: in eager PyTorch every gradient is computed before any is applied, so ``GATE_NONE``,
``GATE_OP`` and ``GATE_GRAPH`` all behave like ``GATE_GRAPH`` (as TF documents for eager mode);
the argument is validated and otherwise has no effect. ``aggregation_method`` and
``colocate_gradients_with_ops`` are likewise validated and ignored (they only change rounding or
placement in TF).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

import numpy as np
import torch

from trainop.contract import betas, llvm_order, scheduled_lr
from trainop.contract.arguments import (
    check_global_step,
    check_gradient,
    check_loss,
    check_variable,
    describe_var,
)
from trainop.contract.checkpoint import validate_optimizer_state
from trainop.contract.checkpoint_load import load_optimizer_state
from trainop.contract.flat_plan import FlatLayout, flat_plan, reattach, relink, zero_flat_grads
from trainop.contract.gate import NO_GATE, Gate, make_gate
from trainop.contract.hyper import Prepared, evaluate_hyper, plain_snapshot
from trainop.contract.implementations import TRITON, Implementations
from trainop.contract.init_step import is_state_init_step
from trainop.contract.outside_load import check_outside_load, noted, state_noted
from trainop.contract.overlap import (
    byte_extents,
    check_memory_written,
    check_no_duplicates,
    check_no_overlap,
)
from trainop.contract.read_first import read_first
from trainop.contract.slots import (
    AggregationMethod,
    SlotSpec,
    check_slot,
    slot_dtype,
    uniform_slots,
)
from trainop.contract.state import OptimizerState, SlotState, adopt
from trainop.contract.step_plan import GroupsSnapshot, StepPlan, build_plan
from trainop.contract.torch_style import (
    CONSTRUCTOR_ARGS,
    check_group_keys,
    check_wide_keys,
    install,
    is_required,
)
from trainop.contract.validation import (
    Interval,
    check_bool,
    check_choice,
    check_hyper,
    check_name,
    check_real,
    describe,
    outside,
)
from trainop.kernels import counters, dispatch, huge_pages
from trainop.kernels.native import metadata
from trainop.kernels.native.boundary import PLAIN_TYPES
from trainop.kernels.row_slices import RowSlices, update_rows

__all__ = ["AggregationMethod", "Gate", "Optimizer", "SlotSpec", "uniform_slots"]

_UNSAVED = "<trainop: callable not saved>"
_CHECKPOINT_BOOKKEEPING = ("params", "param_names", "non_slot", "initial_lr")
#: ``betas`` (torch's spelling of beta1/beta2, ``contract/betas.py``) is derived: not evaluated
#: as a hyperparameter; a checkpoint's ``betas`` is checked against its beta1/beta2.
_GROUP_BOOKKEEPING = (*_CHECKPOINT_BOOKKEEPING, betas.KEY)


class Optimizer(Implementations, torch.optim.Optimizer):
    """Base class: TF1's ``tf.train.Optimizer`` contract on a ``torch.optim.Optimizer``.

    Every optimizer takes the arguments below besides its hyperparameters; they are documented
    here once and listed in each optimizer's table.

    **Implementations.** The same update rule runs as one of five code paths, all tested equal
    to the reference (``implementation=None`` picks one; a name forces it):

    | implementation | what runs | where |
    |---|---|---|
    | ``reference`` | the readable per-tensor rule, the ground truth | everywhere |
    | ``foreach`` | the same rule over lists of tensors (``torch._foreach_*``) | everywhere |
    | ``fused`` | torch's fused kernels, with TF's math | Adam family, Momentum, SGD, Adagrad |
    | ``native`` | trainop's single-pass C kernels | CPU, float32 and float64 |
    | ``triton`` | trainop's Triton kernels | CUDA, with Triton installed |

    The default (``None``) picks ``native`` on the CPU, ``fused`` where the class maps onto
    torch's kernel on CUDA, else ``foreach``. A forced path that cannot run a given tensor
    (a dtype, a device, a hyperparameter held in a tensor) runs ``foreach`` for it. Each
    class lists what it offers in ``IMPLEMENTATIONS`` (``triton`` aside); ``trainop doctor``
    shows which one each optimizer uses on this machine.

    Args:
        params (Iterable | None): the parameters to update, torch style (a module's
            ``parameters()``, or a list of parameter groups as dicts); ``None`` (TF style):
            the variables come with each ``apply_gradients``/``minimize`` call.
        defaults (dict): the hyperparameters by their group key (``lr``, ``beta1``, ...);
            subclasses fill it from their own arguments.
        use_locking (bool): TF's flag; no effect (a torch step is not concurrent).
        name (str): TF's optimizer name: the prefix of slot names in a TF checkpoint.
        implementation (str | None): the code path: ``None`` (the default, picked per tensor
            by device and dtype) or one of ``reference``, ``foreach``, ``fused``, ``native``,
            ``triton``; see [Implementations][trainop.Optimizer].
        lr (float | Tensor | Callable | Policy | None): torch's spelling of
            ``learning_rate``, for a torch-style call (``Cls(model.parameters(), lr=...)``);
            giving both is a ``TypeError``.

    For subclass authors, a subclass declares:

    - ``_ranges``: hyperparameter key -> allowed ``Interval`` (validated eagerly; a key may also
      hold a 0-dim tensor, a callable or a ``trainop.schedules.Policy``);
    - ``_choices``: option key -> allowed strings; boolean options are recognised from defaults;
    - ``_arg_names``: group key -> constructor argument name for messages (``lr`` ->
      ``learning_rate``);
    - ``_non_slot_names`` and ``_non_slot_ranges``: the group's non-slot variables (float32, as
      TF) and their allowed ranges, checked when a checkpoint is loaded (Adam's beta powers in
      [0, 1));
    - ``_slot_specs(group)``, ``_init_non_slot(group_state, hp)``, ``_apply_dense``,
      optionally ``_apply_sparse`` (default: the dense rule on the touched rows only; on the
      native path ``_native_sparse_rule`` names the C rule that does the same in one call
      straight from the gradient's rows; on the Triton path ``_triton_sparse_rule`` names
      the Triton sparse rule, ``kernels.triton.SPARSE_RULES``) and ``_finish`` (after all
      variables of a group were updated, e.g. Adam's beta powers).
    """

    GATE_NONE: ClassVar[int] = 0
    GATE_OP: ClassVar[int] = 1
    GATE_GRAPH: ClassVar[int] = 2

    _ranges: ClassVar[dict[str, Interval]] = {}
    _choices: ClassVar[dict[str, tuple[str, ...]]] = {}
    _arg_names: ClassVar[dict[str, str]] = {"lr": "learning_rate"}
    _exact_keys: ClassVar[tuple[str, ...]] = ()
    _non_slot_names: ClassVar[tuple[str, ...]] = ()
    #: Allowed ranges of non-slot variables (checked when a checkpoint is loaded).
    _non_slot_ranges: ClassVar[dict[str, Interval]] = {}
    #: The implementations this class offers (see ``_choose_implementation``).
    IMPLEMENTATIONS: ClassVar[tuple[str, ...]] = ("reference", "foreach")
    #: Whether the update is elementwise, so the foreach path may cut tensors into pieces.
    _elementwise: ClassVar[bool] = True
    #: Whether the Triton rules decay the variable first by ``hp.weight_decay`` (contrib's
    #: decoupled decay, in a sparse rule of the touched rows only), so that a
    #: ``DecoupledWeightDecayExtension`` of this class may take the Triton path.
    _triton_decays_first: ClassVar[bool] = False
    #: dtypes the fused path supports (checked at construction for an explicit "fused").
    _fused_dtypes: ClassVar[tuple[torch.dtype, ...]] = (torch.float32, torch.float64)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        install(cls)  # torch-style calls: parameters first, ``lr=`` (``_torch_style``)

    def __init__(
        self,
        params: Iterable[Any] | None,
        defaults: dict[str, Any],
        *,
        use_locking: bool,
        name: str,
        implementation: str | None = None,
    ) -> None:
        llvm_order.check(type(self).__name__, implementation)
        self._name = check_name(name)
        if implementation is not None:
            check_choice("implementation", implementation, (*self.IMPLEMENTATIONS, TRITON))
        self._implementation = implementation
        self._use_locking = check_bool("use_locking", use_locking)
        defaults = {**defaults, **self._extra_defaults()}
        self._has_betas = betas.has_betas(defaults)
        self._betas_seen: betas.Seen = {}
        if self._has_betas:  # torch's spelling, read by OneCycleLR/CyclicLR (contract/betas.py)
            defaults[betas.KEY] = (defaults["beta1"], defaults["beta2"])
        self.defaults = defaults  # read by _validate_group_values for boolean options
        self._validate_group_values(defaults, required_ok=True)
        self._param_index_cache: tuple[GroupsSnapshot, dict[int, int]] | None = None
        self._step_plan: StepPlan | None = None
        self._hyper_cache: dict[int, tuple[dict, tuple, Prepared]] = {}
        self._gate = NO_GATE
        self.invalid_hyperparameters: torch.Tensor | None = None
        self._flat: FlatLayout | None = None
        self._tf_group: dict[str, Any] | None = None
        self._counters_seen: tuple = ()  # the groups' non_slot dicts (contract/outside_load.py)
        if params is None:
            super().__init__([torch.nn.Parameter(torch.empty(0))], defaults)
            self.param_groups.clear()
            self.state.clear()
            self._betas_seen.clear()
        else:
            super().__init__(params, defaults)
            self._check_implementation([p for g in self.param_groups for p in g["params"]])
        self.state = adopt(self.state)
        self._state_seen = state_noted(self)  # (contract/outside_load.py)

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        """torch's list of param groups. A torch LR scheduler reading it while a group's lr
        is a trainop schedule is refused before it writes anything, also through a wrapper
        that keeps the list, timm's ``Lookahead`` (``contract/scheduled_lr.py``)."""
        groups = self.__dict__["param_groups"]
        frame = sys._getframe(1)
        if not (torch.compiler.is_compiling() or scheduled_lr.own(frame)):
            scheduled_lr.check_reader(self, groups)
            return scheduled_lr.for_reader(self, groups, frame)
        return groups

    @param_groups.setter
    def param_groups(self, groups: list[dict[str, Any]]) -> None:
        self.__dict__["param_groups"] = groups

    # ------------------------------------------------------------------ subclass hooks
    def _extra_defaults(self) -> dict[str, Any]:
        """Hyperparameters a mixin adds to the subclass's defaults (e.g. ``weight_decay``)."""
        return {}

    @uniform_slots
    def _slot_specs(self, group: Mapping[str, Any]) -> tuple[SlotSpec, ...]:
        return ()

    def _init_non_slot(self, non_slot: dict[str, torch.Tensor], hp: Prepared,
                       device: torch.device) -> None:
        """Create the group's non-slot variables (called once, before its first update)."""

    def _apply_dense(self, var: torch.Tensor, grad: torch.Tensor, slots: dict[str, torch.Tensor],
                     hp: Any, non_slot: dict[str, torch.Tensor]) -> None:
        raise NotImplementedError

    def _apply_sparse(self, var: torch.Tensor, rows: RowSlices, slots: dict[str, torch.Tensor],
                      hp: Any, non_slot: dict[str, torch.Tensor]) -> None:
        """Default sparse rule: the dense rule on the touched rows only (TF's rows-only rule)."""
        update_rows(lambda v, g, s: self._apply_dense(v, g, s, hp, non_slot), var, rows, slots)

    def _slot_invariant(self, group: Mapping[str, Any], slots: Mapping[str, torch.Tensor]
                        ) -> str | None:
        """Checked when a checkpoint is loaded: why one parameter's slots break a relation
        the rule needs between them (the next step would give NaN), or ``None``."""
        return None

    def _finish(self, non_slot: dict[str, torch.Tensor], hp: Prepared,
                applied: torch.Tensor | None) -> None:
        """Runs once per group after all its variables were updated in one apply.

        ``applied`` is ``None`` (the update was applied) or a 0-dim bool tensor; counters must
        not advance where it is False.
        """

    # ------------------------------------------------------------------ validation
    def _validate_group_values(self, values: Mapping[str, Any], *,
                               required_ok: bool = False) -> None:
        """Check hyperparameter values as the constructor does. ``required_ok``: the
        constructor's defaults, where torch's ``required`` marker stands for a value every
        param group gives (``torch_style.py``); anywhere else (a param group, a checkpoint's
        group) the marker is rejected like any other value that is not a hyperparameter."""
        for key, value in values.items():
            if key in _GROUP_BOOKKEEPING or (required_ok and is_required(value)):
                continue
            arg = self._arg_names.get(key, key)
            if key in self._ranges:
                check_hyper(arg, value, self._ranges[key])
            elif key in self._choices:
                check_choice(arg, value, self._choices[key])
            elif key in _boolean_options(type(self)) or isinstance(self.defaults.get(key), bool):
                check_bool(arg, value)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a param group (torch API); its hyperparameters are validated like the defaults."""
        if not isinstance(param_group, dict):
            raise TypeError(f"Expected `param_group` to be a dict, got {describe(param_group)}")
        param_group = check_group_keys(type(self).__name__, param_group, self.defaults,
                                       self._arg_names)
        check_wide_keys(type(self).__name__, param_group, self.defaults,
                        self.__dict__.get(CONSTRUCTOR_ARGS, {}))
        self._check_required(param_group, "the param group")
        self._validate_group_values({k: v for k, v in param_group.items() if k != "params"})
        gives_betas = self._has_betas and betas.KEY in param_group
        if gives_betas:
            betas.check_given(param_group, self._validate_group_values)
        params = param_group.get("params")
        if isinstance(params, torch.Tensor):
            params = [params]
        elif params is not None and not isinstance(params, list | tuple | set):
            params = list(params)
            param_group = {**param_group, "params": params}
        for i, p in enumerate(params or ()):
            if isinstance(p, torch.Tensor):
                check_variable(p, f"params[{i}]")
        super().add_param_group(param_group)
        try:
            check_no_overlap([p for g in self.param_groups for p in g["params"]])
        except ValueError:
            self.param_groups.pop()
            raise
        group = self.param_groups[-1]
        group["non_slot"] = {"step": torch.zeros((), dtype=torch.int64)}
        if self._has_betas:
            betas.adopt_group(self._betas_seen, group, gives_betas)
        self._counters_seen = (*self._counters_seen, group["non_slot"])
        self._invalidate()

    def _check_required(self, group: Mapping[str, Any], where: str) -> None:
        """A constructor argument left out because every param group gave it (torch's
        ``required`` default, see ``torch_style``) must be in ``group`` too."""
        for key, default in self.defaults.items():
            if is_required(default) and is_required(group.get(key, default)):
                arg = self._arg_names.get(key, key)
                raise ValueError(
                    f"Expected {where} to give `{key}`: {type(self).__name__} was built "
                    f"without `{arg}` (every param group gave it), so it has no default")

    # ------------------------------------------------------------------ TF accessors
    def get_name(self) -> str:
        """The optimizer's name (TF: used to name slot variables)."""
        return self._name

    def get_slot(self, var: torch.Tensor, name: str) -> torch.Tensor | None:
        """The slot ``name`` of ``var``, or ``None`` if there is no such slot (never raises)."""
        state = self.state.get(var) if isinstance(var, torch.Tensor) else None
        return None if state is None else state.get(name)

    def get_slot_names(self) -> list[str]:
        """Sorted names of the slots created so far."""
        return sorted({name for state in self.state.values() for name in state})

    def variables(self) -> list[torch.Tensor]:
        """The optimizer's state tensors: non-slot variables (by name), then every slot.

        The per-group ``step`` counter is trainop's own bookkeeping and is not listed, so the
        list matches TF's (e.g. Adam: ``beta1_power``, ``beta2_power``, then ``m``, ``v`` of each
        variable).
        """
        out: list[torch.Tensor] = []
        for group in self.param_groups:
            non_slot = group["non_slot"]
            out.extend(non_slot[k] for k in sorted(non_slot) if k != "step")
        for group in self.param_groups:
            for p in group["params"]:
                out.extend(self.state.get(p, {}).values())
        return out

    # ------------------------------------------------------------------ TF contract
    def compute_gradients(
        self,
        loss: torch.Tensor | Callable[[], torch.Tensor],
        var_list: Iterable[torch.Tensor] | None = None,
        gate_gradients: int = GATE_OP,
        aggregation_method: int | None = None,
        colocate_gradients_with_ops: bool = False,
        grad_loss: torch.Tensor | None = None,
    ) -> list[tuple[torch.Tensor | None, torch.Tensor]]:
        """Gradients of ``loss`` for ``var_list`` as TF's list of ``(gradient or None, var)``.

        A non-scalar loss is summed (TF's ``grad_ys = ones``), or weighted by ``grad_loss``.
        ``var_list=None`` means every variable this optimizer owns. ``.grad`` is not touched.
        Sparse gradients (e.g. ``nn.Embedding(sparse=True)``) come back as sparse COO tensors.
        """
        if gate_gradients not in (self.GATE_NONE, self.GATE_OP, self.GATE_GRAPH):
            raise ValueError(
                "gate_gradients must be one of: Optimizer.GATE_NONE, Optimizer.GATE_OP, "
                f"Optimizer.GATE_GRAPH.  Not {gate_gradients!r}"
            )
        if aggregation_method is not None and aggregation_method not in (0, 1, 2):
            raise ValueError(
                "Expected `aggregation_method` to be None or one of AggregationMethod.ADD_N, "
                f"EXPERIMENTAL_TREE, EXPERIMENTAL_ACCUMULATE_N (0, 1, 2), got "
                f"{aggregation_method!r}"
            )
        check_bool("colocate_gradients_with_ops", colocate_gradients_with_ops)
        given_tensor = isinstance(loss, torch.Tensor)
        if callable(loss) and not given_tensor:
            with torch.enable_grad():
                loss = loss()
        check_loss(loss, "loss")
        if grad_loss is not None:
            check_loss(grad_loss, "grad_loss")
            if tuple(grad_loss.shape) != tuple(loss.shape):
                raise ValueError(f"Expected `grad_loss` to have the loss's shape "
                                 f"{tuple(loss.shape)}, got {tuple(grad_loss.shape)}")
        variables = self._resolve_var_list(var_list)
        if not loss.requires_grad:
            return [(None, v) for v in variables]
        grad_outputs = torch.ones_like(loss) if grad_loss is None else grad_loss
        try:
            grads = torch.autograd.grad(loss, variables, grad_outputs=grad_outputs,
                                        allow_unused=True)
        except RuntimeError as error:
            if given_tensor and "a second time" in str(error):
                raise RuntimeError(_LOSS_USED_TWICE) from error
            raise
        return list(zip(grads, variables, strict=True))

    def _resolve_var_list(self, var_list: Iterable[torch.Tensor] | None) -> list[torch.Tensor]:
        if var_list is None:
            variables = [p for g in self.param_groups for p in g["params"]]
        elif isinstance(var_list, torch.Tensor):
            variables = [var_list]
        else:
            try:
                variables = list(var_list)
            except TypeError:
                raise TypeError(f"Expected `var_list` to be an iterable of tensors or None, "
                                f"got {describe(var_list)}") from None
        if not variables:
            raise ValueError("No variables to optimize.")
        for i, v in enumerate(variables):
            check_variable(v, f"var_list[{i}]")
            if not v.requires_grad:
                raise TypeError(f"Expected var_list[{i}] to require grad: a tensor that does not "
                                f"require grad cannot be optimized ({describe_var(v)})")
        check_no_duplicates(variables, "var_list")
        return variables

    # torch's step hooks (``register_step_pre_hook``/``post_hook``) run around an update given
    # as pairs too: TF's apply_gradients is the update step (what step() is for torch users).
    @torch.optim.Optimizer.profile_hook_step
    def apply_gradients(
        self,
        grads_and_vars: Iterable[tuple[torch.Tensor | None, torch.Tensor]],
        global_step: torch.Tensor | None = None,
        name: str | None = None,
        *,
        grad_multiplier: torch.Tensor | None = None,
        found_inf: torch.Tensor | None = None,
        widen_gradients: bool = False,
    ) -> None:
        """Apply ``(gradient, variable)`` pairs, then increment ``global_step`` by one.

        ``None`` gradients are skipped (those variables get no slots); a sparse COO gradient is
        the counterpart of ``tf.IndexedSlices`` (duplicate indices are summed). Two pairs naming
        the same variable give two updates, as in TF. Everything is validated before anything
        changes: a call that raises leaves params, slots and counters as they were.

        ``grad_multiplier`` and ``found_inf`` (keyword-only, 0-dim tensors) are what the
        gradient-processing stage folds into the update (see ``Gate``): every gradient is
        multiplied by ``grad_multiplier``, and a nonzero ``found_inf`` skips the update entirely
        (``global_step`` included). ``widen_gradients`` (keyword-only): a dense float16/bfloat16
        gradient of a float32 variable is accepted and stands for its float32 widening (exact;
        a mixed-precision master's gradient): the Triton kernels read it as it is, so no float32
        copy is made; every other path widens it first (``kernels.dispatch``).

        Raises:
            ValueError: no pairs, or no pair has a gradient.
            TypeError: a malformed pair, gradient or ``global_step``.
        """
        if name is not None:
            check_name(name)
        check_bool("widen_gradients", widen_gradients)
        pairs = self._validate_pairs(grads_and_vars, widen=widen_gradients)
        check_global_step(global_step)
        with self._gated(make_gate(grad_multiplier, found_inf, widen_gradients)):
            self._apply_pairs_eagerly([(g, v) for g, v in pairs if g is not None])
            applied = self._gate.applied()  # with a tensor hyperparameter's own skip flag
        if global_step is not None:
            with torch.no_grad():
                global_step.add_(1 if applied is None else applied.to(
                    device=global_step.device, dtype=global_step.dtype))

    def minimize(
        self,
        loss: torch.Tensor | Callable[[], torch.Tensor],
        global_step: torch.Tensor | None = None,
        var_list: Iterable[torch.Tensor] | None = None,
        gate_gradients: int = GATE_OP,
        aggregation_method: int | None = None,
        colocate_gradients_with_ops: bool = False,
        name: str | None = None,
        grad_loss: torch.Tensor | None = None,
    ) -> None:
        """``compute_gradients`` then ``apply_gradients`` (through ``self``, so overrides run).

        TF-style, ``loss`` is a callable that computes the loss, called at each ``minimize``:
        a loss tensor is one evaluation, whose graph the call frees (TF1's habit of building
        ``loss`` once and calling ``minimize(loss)`` in a loop fails at the second call)."""
        grads_and_vars = self.compute_gradients(
            loss, var_list=var_list, gate_gradients=gate_gradients,
            aggregation_method=aggregation_method,
            colocate_gradients_with_ops=colocate_gradients_with_ops, grad_loss=grad_loss,
        )
        if all(g is None for g, _ in grads_and_vars):
            names = [describe_var(v) for _, v in grads_and_vars]
            raise ValueError(
                "No gradients provided for any variable, check your graph for ops that do not "
                f"support gradients, between variables {names} and loss {describe_var(loss)}."
            )
        return self.apply_gradients(grads_and_vars, global_step=global_step, name=name)

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None, *,
             grad_multiplier: torch.Tensor | None = None,
             found_inf: torch.Tensor | None = None) -> Any:
        """torch API: apply ``p.grad`` of every parameter that has one (no-op if none has).

        ``grad_multiplier``/``found_inf``: as in ``apply_gradients`` (see ``Gate``).

        Raises:
            ValueError: the optimizer has no parameters (built TF-style, ``AdamOptimizer(0.001)``,
                and never given variables; checked after ``closure`` ran): ``step()`` would
                silently do nothing.
        """
        if closure is None and grad_multiplier is None and found_inf is None \
                and is_state_init_step(self):
            # torch's state initialisation: the state a step would make, without the update
            # (contract/init_step.py)
            self._create_slots(lambda v: v.grad is not None)
            return None
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if not any(group["params"] for group in self.param_groups):
            name = type(self).__name__
            raise ValueError(
                f"{name}.step() has no parameters to update: give them at construction "
                f"(`{name}(model.parameters(), lr=...)` or `params=[...]`), or add them with "
                f"`add_param_group`; TF style (`{name}(learning_rate)`) registers variables "
                f"at `minimize(loss, var_list=...)`/`apply_gradients(pairs)` instead of step()")
        with self._gated(make_gate(grad_multiplier, found_inf)):
            self._step_pairs()
        return loss

    # torch.compile: the update runs eagerly (one graph break per step), on real tensors; the
    # cached plans, flat buffers and C kernels never see fake/functional tensors (docs/dropin.md).
    @torch._disable_dynamo  # = torch.compiler.disable, importing torch._dynamo at the first call
    def _step_pairs(self) -> None:
        self._sync_betas()
        self._check_outside_load()
        plan = self._current_plan()
        prepared = None
        if plan is not None:
            prepared = self._run_plan(plan)
            if prepared is None:
                return
        pairs = []
        for group in self.param_groups:
            for i, p in enumerate(group["params"]):
                if p.grad is not None:
                    check_gradient(p.grad, p, f"params[{i}].grad")
                    pairs.append((p.grad, p))
        if pairs:
            self._apply_pairs(pairs, prepared)

    @contextlib.contextmanager
    def _gated(self, gate: Gate):
        self._gate = gate
        try:
            yield
        finally:
            self._gate = NO_GATE

    def _check_outside_load(self) -> None:
        """A state loaded around ``load_state_dict`` (``ZeroRedundancyOptimizer``'s load)
        is validated as ``load_state_dict`` validates a checkpoint (contract/outside_load.py)."""
        check_outside_load(self, unsaved=_UNSAVED, bookkeeping=_CHECKPOINT_BOOKKEEPING)

    def _ensure_non_slot(self, group: dict[str, Any], hp: Prepared,
                         device: torch.device | None = None) -> None:
        """Create the group's non-slot variables if it has none yet (on its parameters'
        device; ``device`` for a group without parameters)."""
        non_slot = group["non_slot"]
        if any(name not in non_slot for name in self._non_slot_names):
            self._init_non_slot(non_slot, hp, group["params"][0].device if group["params"]
                                else device)

    # ------------------------------------------------------------------ pickling, deepcopy
    def __getstate__(self) -> dict[str, Any]:
        """Everything but torch's hook tables (which torch does not pickle either) and the
        caches derived from the groups and the state (rebuilt at the next step)."""
        return {k: v for k, v in self.__dict__.items()
                if not k.endswith("_hooks") and k not in _DERIVED}

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        if "defaults" not in state:  # torch's load_state_dict passes the state and groups only
            return
        self._gate = NO_GATE
        self._counters_seen = noted(self)
        self._state_seen = state_noted(self)
        self._betas_seen = {}  # keyed by the groups' ids, which a copy changes
        self._invalidate()
        if self._flat is not None:  # the copied buffers live at new addresses
            relink(self._flat)

    def _invalidate(self) -> None:
        """Forget the caches derived from the param groups and the state."""
        self._param_index_cache = None
        self._step_plan = None
        self._hyper_cache = {}
        self._apart_checked = None

    def _tracked_state(self) -> OptimizerState:
        """``self.state``, adopted into an ``OptimizerState`` if something assigned another
        mapping (the user resetting the optimizer, torch's ``load_state_dict``)."""
        state = self.state
        if type(state) is not OptimizerState:
            state = self.state = adopt(state)
        return state

    def _current_plan(self) -> StepPlan | None:
        """The cached step plan, rebuilt when the param groups or the state changed (a slot or
        an entry replaced, the state reset: see ``_state``)."""
        state = self._tracked_state()
        plan = self._step_plan
        if (plan is None or not plan.groups.matches(self.param_groups)
                or plan.state is not state or plan.state_version != state.version):
            if self._flat is not None:
                reattach(self._flat, self)
            state.wrap_entries()
            slot_names = [[spec.name for spec in self._slot_specs(g)] for g in self.param_groups]
            plan = build_plan(self.param_groups, state, slot_names)
            if plan is not None:
                for group in self.param_groups:
                    for p in group["params"]:
                        self._check_slots(p, state[p], group)
                self._check_written_apart()
            if self._flat is not None:
                plan = flat_plan(self._flat, plan)
            if plan is not None:
                plan.state, plan.state_version = state, state.version
            self._step_plan = plan
        return plan

    def zero_grad(self, set_to_none: bool = True) -> None:
        """torch API. After ``trainop.flatten`` the gradient buffers are zeroed instead and the
        gradient views stay attached (``set_to_none`` applies to unflattened parameters)."""
        if self._flat is None:
            return super().zero_grad(set_to_none=set_to_none)
        zero_flat_grads(self._flat)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None and not self._flat.owns_grad(p):
                    if set_to_none:
                        p.grad = None
                    else:
                        p.grad.zero_()

    def _run_plan(self, plan: StepPlan) -> dict[int, Prepared] | None:
        """A step over every parameter through the cached buckets (see ``_step_plan``);
        ``None`` once done, or, where the plan cannot take this step (a gradient missing,
        sparse or malformed, a parameter changed), nothing done and the hyperparameters
        evaluated so far, for the general path to reuse (a callable is called once per step).

        The gradient pass also reads what the C boundary needs of the parameters and
        gradients (``StepPlan.read_for``), so from there only trainop's own code may run until
        the kernels have them: where a group's hyperparameters are callables, tensors or
        policies (whose evaluation or range guard may run the user's code), the pass is
        made again after them."""
        grads = plan.gradients()
        if grads is None:
            if plan.moved():  # `p.data = t`: the general path checks this step, then a new plan
                self._step_plan = None
            return {}
        prepared: dict[int, Prepared] = {}
        user_code = False
        for bucket in plan.buckets:
            if bucket.group_index not in prepared:
                group = self.param_groups[bucket.group_index]
                prepared[bucket.group_index] = hp = self._step_hyper(group)
                user_code = user_code or not self._plain_hyper(group, hp)
        idle = self._idle_groups(prepared)
        user_code = user_code or not all(self._plain_hyper(self.param_groups[gi], hp)
                                         for gi, hp in idle.items())
        device = plan.buckets[0].params[0].device if plan.buckets else None
        for gi, hp in (*prepared.items(), *idle.items()):
            self._ensure_non_slot(self.param_groups[gi], hp, device)
        gate = self._gate
        self._guard_tensor_hypers(prepared, ((b.group_index, b.params[0], False)
                                             for b in plan.buckets))
        if user_code:
            grads = plan.gradients()
            if grads is None:
                self._gate = gate  # the general path guards its own updates
                return {**prepared, **idle}
        dispatch.begin_step(self)
        for bucket in plan.buckets:
            group = self.param_groups[bucket.group_index]
            hp = prepared[bucket.group_index].for_tensor(bucket.params[0])
            dispatch.update_bucket(self, bucket.params, grads[bucket.start:bucket.stop],
                                   bucket.slots, hp, group["non_slot"], self._gate,
                                   bucket=bucket, read=plan.read_for(bucket))
        self._finish_groups({**prepared, **idle})
        return None

    def _idle_groups(self, prepared: dict[int, Prepared],
                     evaluated: dict[int, Prepared] | None = None) -> dict[int, Prepared]:
        """The groups this step updates no variable of (a group without parameters, e.g. on a
        ``ZeroRedundancyOptimizer`` rank that holds none of its tensors, or whose parameters
        got no gradient), with their hyperparameters for this step: their counters advance with
        the others', as TF advances its beta powers and step once per ``apply_gradients``,
        whatever got a gradient (``evaluated``: already evaluated for this step)."""
        evaluated = evaluated or {}
        return {gi: evaluated[gi] if gi in evaluated else self._step_hyper(group)
                for gi, group in enumerate(self.param_groups) if gi not in prepared}

    def _finish_groups(self, prepared: dict[int, Prepared]) -> None:
        """``_finish`` and the step counter of every group in ``prepared`` (the groups this
        step updated and the idle ones, ``_idle_groups``): on the Triton path one launch for
        every group (``kernels.counters``), else a few torch operations per group."""
        if self._implementation == TRITON and self._fold_counters(prepared):
            return
        applied = self._gate.applied()
        for gi, hp in prepared.items():
            non_slot = self.param_groups[gi]["non_slot"]
            self._finish(non_slot, hp, applied)
            if applied is None:
                non_slot["step"] += 1
            else:
                non_slot["step"] += applied.to(device=non_slot["step"].device,
                                               dtype=non_slot["step"].dtype)

    def _fold_counters(self, prepared: dict[int, Prepared]) -> bool:
        """``_finish_groups`` in one Triton launch (``kernels.counters.advance``), where every
        group's ``_finish`` is a product by Python numbers (``_finish_factors``); False
        (nothing done) elsewhere."""
        products, factors, steps = [], [], []
        for gi, hp in prepared.items():
            non_slot = self.param_groups[gi]["non_slot"]
            pairs = self._finish_factors(non_slot, hp)
            if pairs is None:
                return False
            for name, factor in pairs:
                products.append(non_slot[name])
                factors.append(factor)
            steps.append(non_slot["step"])
        return counters.advance(self, products, factors, steps, self._gate.found_inf)

    def _finish_factors(self, non_slot: dict[str, torch.Tensor], hp: Prepared
                        ) -> list[tuple[str, float]] | None:
        """What ``_finish`` does, as ``(non-slot counter, Python number)`` pairs it multiplies
        the float32 counter by where the update was applied (so a kernel can do it for every
        group at once), or ``None`` where it is something else (a subclass's own
        ``_finish``, a tensor factor)."""
        return [] if type(self)._finish is Optimizer._finish else None

    # ------------------------------------------------------------------ the update
    def _validate_pairs(self, grads_and_vars: Any, *, widen: bool = False
                        ) -> list[tuple[torch.Tensor | None, Any]]:
        """The pairs as a list, each checked (``widen``: see ``check_gradient``). A pair is a
        tuple or list of two (a tensor is not one: ``[g]`` for a gradient ``g`` of 2 elements
        would unpack into two rows and update the gradient itself)."""
        try:
            if isinstance(grads_and_vars, torch.Tensor):
                raise TypeError
            pairs = tuple(grads_and_vars)
        except TypeError:
            raise TypeError("Expected `grads_and_vars` to be an iterable of (gradient, variable) "
                            f"pairs, got {_shown(grads_and_vars)}") from None
        if not pairs:
            raise ValueError("No variables provided.")
        out = []
        for i, pair in enumerate(pairs):
            if not isinstance(pair, tuple | list) or len(pair) != 2:
                hint = (" (a tensor, not a pair: pass [(gradient, variable), ...])"
                        if isinstance(pair, torch.Tensor) else "")
                raise TypeError(f"Expected grads_and_vars[{i}] to be a (gradient, variable) pair, "
                                f"got {_shown(pair)}{hint}")
            g, v = pair
            check_variable(v, f"the variable of grads_and_vars[{i}]")
            if g is not None:
                check_gradient(g, v, f"the gradient of grads_and_vars[{i}]", widen=widen)
            out.append((g, v))
        if all(g is None for g, _ in out):
            names = [describe_var(v) for _, v in out]
            raise ValueError(f"No gradients provided for any variable: {names}.")
        return out

    def _param_index(self) -> dict[int, int]:
        """``id(param) -> group index``, rebuilt when the groups were edited directly."""
        cached = self._param_index_cache
        if cached is None or not cached[0].matches(self.param_groups):
            index = {id(p): gi for gi, group in enumerate(self.param_groups)
                     for p in group["params"]}
            cached = self._param_index_cache = (GroupsSnapshot(self.param_groups), index)
        return cached[1]

    def _prepare(self, values: Mapping[str, Any], step: torch.Tensor) -> Prepared:
        """Evaluate the group's hyperparameters once for this apply (TF's ``_prepare``), and
        check them as the constructor does: a value edited in ``param_groups`` after
        construction (NaN, -1, 1.5 where the range is [0, 1), ``use_nesterov='yes'``) or a
        callable's result raises here, before anything changes. Plain values are checked when
        they change (``_step_hyper`` reuses the result); a 0-dim tensor is not read (no host
        synchronisation): see ``docs/design.md`` for a tensor learning rate holding NaN."""
        prepared = {}
        for key, value in values.items():
            if key in _GROUP_BOOKKEEPING:
                continue
            arg = self._arg_names.get(key, key)
            if key in self._ranges:
                value = evaluate_hyper(arg, value, step)
                if not isinstance(value, torch.Tensor):  # a tensor is not read (no host sync)
                    check_real(arg, value, self._ranges[key])
            else:
                self._validate_group_values({key: value})
            prepared[key] = value
        return Prepared(prepared, exact=self._exact_keys)

    def _guard_tensor_hypers(self, prepared: dict[int, Prepared],
                             updates: Iterable[tuple[int, torch.Tensor, bool]]) -> None:
        """A 0-dim tensor hyperparameter (a tensor learning rate, or a callable's or policy's
        tensor result) out of its range (``NaN``, ``-1``, ``inf``...) skips this step's update,
        as a nonzero ``found_inf`` does (nothing moves, counters included), without a device
        synchronisation. ``updates`` (group index, a variable, sparse) say which kernels run:

        - every update on the native kernels and the value on the CPU: read on the host (as
          the native kernels read CPU scalars anyway; nothing joins the gate when in range);
        - else the range check runs on the value's device and the flag joins the gate wherever
          that costs no host read: every update on a kernel that takes the skip flag
          (``native``, ``fused``, ``triton``, the last sparse updates too), or a ``found_inf``
          given (the ``foreach``, ``reference`` and other sparse paths read it anyway);
          otherwise it is not checked.

        ``invalid_hyperparameters``: the step's 0-dim bool flag, or ``None`` when nothing was
        flagged on a device (host-checked values in range, or not checked)."""
        self.invalid_hyperparameters = None
        if not any(hp.has_tensors for hp in prepared.values()):
            return  # plain values only: checked on the host by _prepare, nothing to do
        tensors = [(key, value) for hp in prepared.values() for key, value in hp.values.items()
                   if isinstance(value, torch.Tensor) and key in self._ranges]
        if not tensors:
            return
        kinds = {(gi, v.dtype, v.device, sparse): (gi, v, sparse) for gi, v, sparse in updates}
        kernels = [self._choose_implementation(v.dtype, v.device, prepared[gi].for_tensor(v))
                   for gi, v, _ in kinds.values()]
        # a sparse update takes the skip flag on the device on the Triton path only
        kernels = [k if k == TRITON or not sparse else None
                   for k, (_, _, sparse) in zip(kernels, kinds.values(), strict=True)]
        native_only = all(k == "native" for k in kernels)
        bad, host_bad = None, False
        for key, value in tensors:
            if native_only and value.device.type == "cpu":
                host_bad = host_bad or float(value) not in self._ranges[key]
                continue
            flag = outside(value, self._ranges[key])
            bad = flag if bad is None else bad | flag.to(bad.device)
        if bad is not None and self._gate.found_inf is None and not all(
                k in ("native", "fused", TRITON) for k in kernels):
            bad = None  # the flag would cost a host read on this path: not checked
        if host_bad:
            device = next(iter(kinds.values()))[1].device
            bad = torch.ones((), dtype=torch.bool, device=device)
        self.invalid_hyperparameters = bad
        if bad is not None:
            self._gate = self._gate.also_skipped_if(bad)

    def _step_hyper(self, group: dict[str, Any]) -> Prepared:
        """``_prepare`` for one step of ``group``, reused while each of its hyperparameters is
        the same plain value as before (a scheduler that writes ``group["lr"]`` gets a new one;
        groups with tensors, callables or policies are evaluated at every step). ``betas``
        is reconciled with ``beta1``/``beta2`` first (``contract/betas.py``)."""
        if self._has_betas and not betas.reconciled(group):
            self._sync_betas()
        snapshot = plain_snapshot(group, _GROUP_BOOKKEEPING)
        if snapshot is None:
            return self._prepare(group, group["non_slot"]["step"])
        cached = self._hyper_cache.get(id(group))
        if cached is not None and cached[0] is group and cached[1] == snapshot:
            return cached[2]
        prepared = self._prepare(group, group["non_slot"]["step"])
        self._hyper_cache[id(group)] = (group, snapshot, prepared)
        return prepared

    def _sync_betas(self) -> None:
        """``betas`` reconciled with ``beta1``/``beta2`` in every group, each checked before any
        is written (``contract/betas.py``)."""
        if self._has_betas:
            betas.sync(self._betas_seen, self.param_groups, self._validate_group_values)

    def _plain_hyper(self, group: dict[str, Any], prepared: Prepared) -> bool:
        """Whether ``prepared`` (``_step_hyper``'s result for ``group``) came from plain values
        (then no user code ran to make it): only those are kept in the hyper cache."""
        cached = self._hyper_cache.get(id(group))
        return cached is not None and cached[2] is prepared

    def _apply_pairs(self, pairs: list[tuple[torch.Tensor, torch.Tensor]],
                     evaluated: dict[int, Prepared] | None = None) -> None:
        """Register new variables, create slots, update every pair, finish every group.
        ``evaluated``: groups' hyperparameters already evaluated for this step."""
        self._sync_betas()
        self._check_outside_load()
        index = self._param_index()
        new_vars = list({id(v): v for _, v in pairs if id(v) not in index}.values())
        states = self._tracked_state()
        # Evaluate every hyperparameter before mutating anything (a callable may raise).
        prepared: dict[int, Prepared] = {}
        for gi in dict.fromkeys(index[id(v)] for _, v in pairs if id(v) in index):
            if evaluated is not None and gi in evaluated:
                prepared[gi] = evaluated[gi]
            else:
                prepared[gi] = self._step_hyper(self.param_groups[gi])
        tf_prepared = None
        if new_vars:
            tf_group = self._tf_group
            if tf_group is not None and any(tf_group is g for g in self.param_groups):
                tf_prepared = self._prepare(tf_group, tf_group["non_slot"]["step"])
            else:
                self._check_required(self.defaults,
                                     "the param group of variables new to the optimizer")
                tf_prepared = self._prepare(self.defaults, torch.zeros((), dtype=torch.int64))
        idle = self._idle_groups(prepared, evaluated)
        # (step() runs without autograd already; apply_gradients may not)
        with torch.no_grad() if torch.is_grad_enabled() else contextlib.nullcontext():
            if new_vars:
                self._register(new_vars)
                index = self._param_index()
                gi = index[id(new_vars[0])]
                prepared.setdefault(gi, tf_prepared)
            for _, v in pairs:
                group = self.param_groups[index[id(v)]]
                if self._lacks_slots(states.get(v), group):
                    states[v] = SlotState(states, self._make_slots(v, group))
            for _, v in pairs:
                self._check_slots(v, states[v], self.param_groups[index[id(v)]])
            self._check_written_apart()
            pairs = self._read_first(pairs, states)
            idle = {gi: hp for gi, hp in idle.items() if gi not in prepared}
            for gi, hp in (*prepared.items(), *idle.items()):
                self._ensure_non_slot(self.param_groups[gi], hp, pairs[0][1].device)
            self._guard_tensor_hypers(prepared, ((index[id(v)], v, g.is_sparse)
                                                 for g, v in pairs))
            self._update(pairs, index, prepared)
            self._finish_groups({**prepared, **idle})

    @staticmethod
    def _read_first(pairs: list[tuple[torch.Tensor, torch.Tensor]], states: OptimizerState
                    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """``pairs`` with each gradient that shares memory with a variable or slot of the pairs
        copied first (TF reads every gradient before any variable is written:
        ``contract/read_first.py``)."""
        copied = read_first([g for g, _ in pairs], lambda: [
            *(v for _, v in pairs),
            *(s for _, v in pairs for s in states[v].values() if isinstance(s, torch.Tensor))])
        return pairs if copied is None else list(zip(copied, (v for _, v in pairs), strict=True))

    # apply_gradients' entry to the update: eager under torch.compile, as _step_pairs (which
    # calls _apply_pairs itself, already outside any trace).
    _apply_pairs_eagerly = torch._disable_dynamo(_apply_pairs)

    @torch.no_grad()
    def create_slots(self) -> None:
        """Create the slots of every parameter of the groups and the groups' non-slot variables
        now, without an update (TF creates them when the update op is built; trainop otherwise
        on a variable's first update). For loaders that expect a populated ``state`` before
        they load one, e.g. ``torch.distributed.checkpoint``'s ``set_optimizer_state_dict`` on
        a fresh optimizer (without it they call ``step()`` with every ``lr`` 0 and zero
        gradients, which trainop recognises and takes as this call for the parameters given
        a gradient: ``contract/init_step.py``)."""
        self._create_slots(lambda v: True)

    def _create_slots(self, wanted: Callable[[torch.Tensor], bool]) -> None:
        """``create_slots`` for the parameters ``wanted`` accepts (the groups' non-slot
        variables for every group with parameters)."""
        self._check_outside_load()
        states = self._tracked_state()
        prepared = {gi: self._step_hyper(group) for gi, group in enumerate(self.param_groups)}
        for gi, group in enumerate(self.param_groups):
            for v in group["params"]:
                if wanted(v) and self._lacks_slots(states.get(v), group):
                    states[v] = SlotState(states, self._make_slots(v, group))
            if group["params"]:
                self._ensure_non_slot(group, prepared[gi])

    def _lacks_slots(self, entry: Mapping[str, Any] | None, group: Mapping[str, Any]) -> bool:
        """Whether a parameter's state ``entry`` is still to be made: missing, or empty (as
        reading ``opt.state[p]`` leaves it) for a group whose rule has slots. An optimizer
        without slots keeps its empty entry: replacing it every step would count as a state
        change and rebuild the step plan."""
        return entry is None or (not entry and bool(self._slot_specs(group)))

    def _sparse_is_dense_on_rows(self) -> bool:
        """Whether this class's sparse update is its dense rule on the touched rows (the
        default ``_apply_sparse``, an elementwise rule)."""
        return type(self)._apply_sparse is Optimizer._apply_sparse and self._elementwise

    def _native_sparse_rule(self, var, slots, hp, non_slot):
        """``(rule, slot tensors, hyper)`` of the native sparse-row kernel, or None. By default
        the dense native rule, for a class whose sparse update is that rule on the touched rows
        (the default ``_apply_sparse``); a class with its own sparse rule has none unless it
        says so."""
        if not self._sparse_is_dense_on_rows():
            return None
        return self._native_rule_of(var, slots, hp, non_slot)

    def _triton_sparse_rule(self, var, slots, hp, non_slot):
        """``(rule, slot tensors, hyper)`` of the Triton sparse update (a rule of
        ``kernels.triton.SPARSE_RULES``), or None (the reference sparse rule runs): by default
        the dense Triton rule on the touched rows, for a class whose sparse update is that
        (as ``_native_sparse_rule``'s default); a class with its own sparse rule names its
        Triton form (Adam's every-row rule, LazyAdam's and RMSProp's row forms, NovoGrad's
        densified gradient)."""
        if not self._sparse_is_dense_on_rows():
            return None
        return self._triton_rule_of(var, slots, hp, non_slot)

    def _register(self, new_vars: list[torch.Tensor]) -> None:
        """TF style: variables seen for the first time join the optimizer's TF group."""
        self._check_implementation(new_vars)
        check_no_overlap([p for g in self.param_groups for p in g["params"]] + new_vars)
        group = self._tf_group
        if group is None or not any(group is g for g in self.param_groups):
            self.add_param_group({"params": [new_vars[0]]})
            self._tf_group = self.param_groups[-1]
            new_vars = new_vars[1:]
        self._tf_group["params"].extend(new_vars)
        self._invalidate()

    def _check_slots(self, var: torch.Tensor, slots: Mapping[str, Any],
                     group: Mapping[str, Any]) -> None:
        """Every slot of ``var`` its slot table asks for is a tensor of ``var``'s shape (a
        0-dim one where the table says ``scalar``, of the table's dtype where it fixes one), on
        ``var``'s device: a slot replaced by hand or loaded with another shape would be
        broadcast, or written past its end by the C kernels. Raises ``ValueError`` before
        anything changes."""
        if getattr(type(self)._slot_specs, "uniform_slots", False):
            reader = metadata.load()
            if reader is not None and reader.like(var, list(slots.values()), PLAIN_TYPES):
                return  # every slot plain, contiguous, of the variable's kind
        for spec in self._slot_specs(group):
            slot = slots.get(spec.name)
            if slot is not None:  # (None: made at the first step)
                check_slot(var, spec, slot)

    def _check_written_apart(self) -> None:
        """No parameter or slot shares memory with another one an update writes (a slot
        replaced by a view of its parameter, of another slot, of another parameter; ``c.data =
        b.data``), nor with itself (an expanded tensor): one sort of byte ranges, repeated only
        when the state, the groups' parameters or the tensors' memory (``p.data = t``, one
        C pass over their byte ranges) changed."""
        state = self.state
        written = [(p, i, None) for i, p in enumerate(
            p for g in self.param_groups for p in g["params"])]
        written += [(slot, i, name) for p, i, _ in list(written)
                    for name, slot in state.get(p, {}).items() if isinstance(slot, torch.Tensor)]
        start, end = byte_extents([t for t, _, _ in written])
        ranges = np.concatenate((start, end))
        done = self._apart_checked
        if (done is not None and done[0] is state and done[1] == state.version
                and done[2].matches(self.param_groups) and np.array_equal(done[3], ranges)):
            return
        check_memory_written([(t, f"parameter {i} (shape {tuple(t.shape)})" if name is None
                               else f"the slot {name!r} of parameter {i}")
                              for t, i, name in written])
        self._apart_checked = (state, state.version, GroupsSnapshot(self.param_groups), ranges)

    def _make_slots(self, var: torch.Tensor, group: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        slots = {}
        for spec in self._slot_specs(group):
            dtype = slot_dtype(spec, var)
            if spec.scalar:
                slots[spec.name] = torch.full((), spec.fill, dtype=dtype, device=var.device)
            else:
                slots[spec.name] = huge_pages.empty_like(var, dtype).fill_(spec.fill)
        return slots

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """torch's ``state_dict`` with slots under TF names; loads with ``weights_only=True``.

        Callable hyperparameters (functions, policies) are not serialised: they are saved as a
        marker, and ``load_state_dict`` keeps the loading optimizer's own value for them.
        """
        invalid = {}
        if self._has_betas:  # saved reconciled (contract/betas.py)
            invalid = betas.sync_valid(self._betas_seen, self.param_groups,
                                       self._validate_group_values)
        sd = super().state_dict()
        for i, reason in invalid.items():  # saved as the updates so far used them
            group = sd["param_groups"][i]
            group[betas.KEY] = (group["beta1"], group["beta2"])
            warnings.warn(f"{type(self).__name__}.state_dict(): {reason}; saved "
                          f"beta1/beta2 = {group[betas.KEY]!r}, the values the updates so far "
                          f"used (the group is left as it is: give it a valid pair)",
                          stacklevel=2)
        # Plain dicts (not the tracked entries), and with flat buffers per-parameter tensors
        # rather than views of the buffers.
        copy = self._flat is not None
        # Non-parameter entries (``opt.state["note"] = ...``) are saved as they are, as torch
        # saves them.
        sd["state"] = {k: {n: (t.clone() if copy and isinstance(t, torch.Tensor) else t)
                           for n, t in st.items()} if isinstance(st, Mapping) else st
                       for k, st in sd["state"].items()}
        for group in sd["param_groups"]:
            for key, value in group.items():
                if key != "params" and callable(value) and not isinstance(value, torch.Tensor):
                    group[key] = _UNSAVED
        return sd

    def validate_state_dict(self, state_dict: Any) -> None:
        """Raise ``ValueError``/``TypeError`` naming the group, parameter index and key if
        ``load_state_dict(state_dict)`` would not load exactly
        (see ``trainop.contract.checkpoint``)."""
        validate_optimizer_state(self, state_dict, unsaved=_UNSAVED,
                                 bookkeeping=_CHECKPOINT_BOOKKEEPING)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """torch's ``load_state_dict`` (pre-hooks, load, post-hooks), copying every tensor and
        casting slots to their parameter's dtype as torch does; the whole checkpoint is
        validated after the pre-hooks and before anything changes
        (``trainop.contract.checkpoint``), so a rejected one changes nothing."""
        load_optimizer_state(self, state_dict, unsaved=_UNSAVED,
                             bookkeeping=_CHECKPOINT_BOOKKEEPING)

    def _after_load(self) -> None:
        """Re-derive what depends on the loaded groups and state (tracked state, flat buffers,
        the TF-style group, the caches)."""
        self.state = adopt(self.state)
        if self._has_betas:
            betas.reset(self._betas_seen, self.param_groups)
        if self._flat is not None:
            reattach(self._flat, self)
        tf_params = None if self._tf_group is None else self._tf_group["params"]
        self._tf_group = next((g for g in self.param_groups if g["params"] is tf_params), None)
        self._counters_seen = noted(self)
        self._state_seen = state_noted(self)
        self._invalidate()


#: The error of TF1's habit ``loss = ...`` once, then ``opt.minimize(loss)`` in a loop.
_LOSS_USED_TWICE = (
    "The loss tensor's graph was used and freed by an earlier minimize/compute_gradients: "
    "TF-style minimize takes a callable that computes the loss, "
    "`opt.minimize(lambda: loss_fn(...), var_list=...)`, evaluated at each call (a tensor is "
    "one evaluation of the loss; torch's retain_graph=True would re-apply its stale gradient)")

# Caches an optimizer derives from its groups and state (not pickled, rebuilt when needed).
_DERIVED = frozenset({"_step_plan", "_param_index_cache", "_hyper_cache", "_gate",
                      "_apart_checked", "_betas_seen", "_counters_seen", "_state_seen",
                      "_triton_entry"})


def _shown(value: Any) -> str:
    """A value for a message: a tensor by its shape and dtype, anything else as ``describe``."""
    return describe_var(value) if isinstance(value, torch.Tensor) else describe(value)


@functools.cache
def _boolean_options(cls: type) -> frozenset[str]:
    """Constructor arguments of ``cls`` and its bases whose default is a bool (e.g. ``centered``):
    the options ``check_bool`` validates, whatever value the caller passed."""
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        try:
            parameters = inspect.signature(init).parameters
        except (TypeError, ValueError):
            continue
        names.update(n for n, p in parameters.items() if isinstance(p.default, bool))
    return frozenset(names)
