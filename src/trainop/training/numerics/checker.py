"""``check_numerics``: find the first NaN or Inf of a run, cheaply enough to leave on.

How it works (see ``docs/numerics.md``):

1. While the checker is active, hooks look at every watched module call. The forward hook
   probes each floating output (``probes.py``: one on-device sum, no host read) and registers a
   gradient hook on it, so the gradient flowing into the module's output in the backward pass is
   probed too; the top-level call also probes its input data and records what a replay needs.
   Just before the optimizer's update (a step pre-hook) the parameters' gradients are probed,
   and just after it (a post-hook) the parameters and the optimizer's state.
2. The probes are read once per step, by one boolean, at the optimizer's step pre-hook (before
   the update can spread a bad value; the previous update's probes are read there too), and at
   ``check()`` and the end of the ``with`` block. Without an optimizer they are read at the next
   top-level model call and at the end.
3. Only when a probe is non-finite is the origin located (``locate.py``): the first such probe
   in execution order names the phase and module; input data is reported as such; a forward or
   backward origin is narrowed to the aten op or autograd node by replaying that model call;
   an update origin names the parameter (or its optimizer state entry) and the optimizer.

The result is a ``NumericsError``. A probe whose replay shows only finite values (an
overflowed sum) or only values of ignored modules/ops is dropped.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from trainop.contract.validation import check_bool, check_choice, describe
from trainop.training.numerics.errors import NumericsError, tensor_stats
from trainop.training.numerics.locate import (
    Call,
    Finding,
    kind_of,
    locate_backward,
    locate_forward,
    matches,
)
from trainop.training.numerics.probes import Probe, ProbeLog

__all__ = ["NumericsChecker", "check_numerics"]

PHASES = ("forward", "backward", "update")


def _torch_optimizer(optimizer: Any) -> torch.optim.Optimizer:
    """The ``torch.optim.Optimizer`` whose steps to watch: the object itself, or the optimizer
    inside a trainop ``GradientPipeline``/wrapper (anything with an ``optimizer`` attribute)."""
    seen = optimizer
    for _ in range(4):
        if isinstance(seen, torch.optim.Optimizer):
            return seen
        seen = getattr(seen, "optimizer", None)
    raise TypeError(f"Expected `optimizer` to be a torch.optim.Optimizer, a trainop "
                    f"GradientPipeline or an optimizer wrapper, or None, got {describe(optimizer)}")


class NumericsChecker:
    """Watches modules (and an optimizer's updates) for the first NaN or Inf; see the module doc.

    Use it as a context manager (``check_numerics``) or ``install()``/``remove()`` it.

    Attributes:
        step: optimizer steps seen so far (the ``step`` a ``NumericsError`` reports).
        checked: the qualified names of the watched modules (filled as roots are first called
            when watching every module).
    """

    def __init__(self, modules: Iterable[torch.nn.Module] | None, optimizer: Any = None,
                 ignore: Iterable[Any] = (), print_tensors: bool = False, *,
                 phases: Iterable[str] = PHASES, debug_print: bool = False) -> None:
        self._roots: list[torch.nn.Module] | None = None if modules is None else list(modules)
        self._optimizer = None if optimizer is None else _torch_optimizer(optimizer)
        self._ignore_names: list[str] = []
        self._ignore_modules: set[int] = set()
        for i, item in enumerate(ignore):
            if isinstance(item, str):
                self._ignore_names.append(item)
            elif isinstance(item, torch.nn.Module):
                self._ignore_modules.add(id(item))
            else:
                raise TypeError(f"Expected ignore[{i}] to be a module name, an op name or pattern "
                                f"(str), or a torch.nn.Module, got {describe(item)}")
        self._print_tensors = check_bool("print_tensors", print_tensors)
        if isinstance(phases, str) or not isinstance(phases, Iterable):
            raise TypeError(f"Expected `phases` to be a tuple of names from {list(PHASES)}, "
                            f"got {describe(phases)}")
        self._phases = tuple(phases)
        if not self._phases:
            raise ValueError(f"Expected `phases` to name at least one of {list(PHASES)}, got ()")
        for i, phase in enumerate(self._phases):
            check_choice(f"phases[{i}]", phase, PHASES)
        self._debug_print = check_bool("debug_print", debug_print)
        self._names: dict[int, str] = {}      # id(module) -> qualified name
        self._modules: dict[str, torch.nn.Module] = {}
        self._ignored: dict[int, bool] = {}   # id(module) -> inside an ignored subtree
        self._param_names: dict[torch.Tensor, str] = {}
        self._param_modules: dict[torch.Tensor, str] = {}
        if self._roots is not None:
            for i, root in enumerate(self._roots):
                if not isinstance(root, torch.nn.Module):
                    raise TypeError(f"Expected the modules to watch to be torch.nn.Module, got "
                                    f"{describe(root)} at index {i}")
                prefix = "" if len(self._roots) == 1 else type(root).__name__
                self._adopt(root, prefix)
        self.step = 0
        self.checked: list[str] = list(self._names.values())
        self._log = ProbeLog()
        self._stack: list[str] = []
        self._calls: list[Call] = []
        self._outputs: dict[int, torch.Tensor] = {}
        self._locating = False
        self._handles: list[Any] = []

    # ------------------------------------------------------------------ names
    def _name_ignored(self, name: str) -> bool:
        return bool(self._ignore_names) and matches(name, self._ignore_names)

    def _adopt(self, root: torch.nn.Module, prefix: str) -> None:
        """Learn the qualified names of ``root``'s modules and parameters; a module inside an
        ignored one is ignored too."""
        ignored_by_name: dict[str, bool] = {}
        for name, module in root.named_modules(remove_duplicate=False):
            full = ".".join(p for p in (prefix, name) if p)
            parent = full.rsplit(".", 1)[0] if "." in full else (prefix if full != prefix else None)
            ignored = (id(module) in self._ignore_modules or self._name_ignored(full)
                       or (parent is not None and ignored_by_name.get(parent, False)))
            ignored_by_name[full] = ignored
            if id(module) not in self._names:
                self._names[id(module)] = full
                self._ignored[id(module)] = ignored
                self._modules.setdefault(full, module)
        for name, p in root.named_parameters(remove_duplicate=False):
            full = ".".join(x for x in (prefix, name) if x)
            self._param_names.setdefault(p, full)
            self._param_modules.setdefault(p, full.rsplit(".", 1)[0] if "." in full else prefix)

    def _module_ignored(self, name: str) -> bool:
        parts = name.split(".") if name else []
        return any(self._name_ignored(".".join(parts[:i])) for i in range(1, len(parts) + 1))

    def _current(self) -> str | None:
        return self._stack[-1] if self._stack else None

    # ------------------------------------------------------------------ install / remove
    def install(self) -> NumericsChecker:
        """Register the hooks (``check_numerics`` does this on entering the ``with`` block)."""
        if self._handles:
            raise RuntimeError("this NumericsChecker is already installed")
        mod = torch.nn.modules.module
        self._handles.append(mod.register_module_forward_pre_hook(self._pre_forward))
        self._handles.append(mod.register_module_forward_hook(
            self._post_forward, with_kwargs=True, always_call=True))
        if self._optimizer is not None:
            self._handles.append(self._optimizer.register_step_pre_hook(self._pre_step))
            self._handles.append(self._optimizer.register_step_post_hook(self._post_step))
        if self._debug_print:
            for name in self.checked:
                print(f"add check for: module {name or '<root>'!r} (outputs, and gradients "
                      f"of its outputs)")
            if self._optimizer is not None:
                print(f"add check for: parameters, gradients and state of "
                      f"{type(self._optimizer).__name__}")
        return self

    def remove(self) -> None:
        """Remove every hook; probes not yet read are dropped (call ``check()`` first)."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._stack.clear()
        self._outputs.clear()

    def __enter__(self) -> NumericsChecker:
        return self.install()

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                self.check()
        finally:
            self.remove()
            self._log.clear()
            self._calls.clear()

    # ------------------------------------------------------------------ hooks
    def _watched(self, module: torch.nn.Module) -> str | None:
        name = self._names.get(id(module))
        if name is None and self._roots is None and not self._stack:
            self._adopt(module, "")  # watching every module: a new top-level module
            self.checked = list(self._names.values())
            name = self._names.get(id(module))
        return name

    def _pre_forward(self, module: torch.nn.Module, args: tuple) -> None:
        name = self._watched(module)
        if name is None:
            return
        top = not self._stack
        self._stack.append(name)
        if not top or self._locating:
            return
        if self._optimizer is None and self._calls:
            self.check()  # no optimizer: the previous call's probes are read here
        rng = {"cpu": torch.get_rng_state()}
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            rng["cuda"] = torch.cuda.get_rng_state_all()
        self._calls.append(Call(module, name, args, {}, rng, torch.is_grad_enabled()))
        self._input_mark = len(self._log)
        if "forward" in self._phases:
            for i, t in enumerate(tree_leaves(args)):
                self._probe_input(t, f"args[{i}]")

    def _probe_input(self, t: Any, arg: str, at: int | None = None) -> None:
        if (isinstance(t, torch.Tensor) and t.is_floating_point()
                and not self._name_ignored(f"<input>.{arg.split('[')[0]}")
                and not self._name_ignored("<input>")):
            probe = ("forward", "<input>", self.step, len(self._calls) - 1, arg, None)
            if at is None:
                self._log.add(t, probe)
            else:
                self._log.insert(at, t, probe)

    def _post_forward(self, module: torch.nn.Module, args: tuple, kwargs: dict,
                      output: Any) -> None:
        name = self._names.get(id(module))
        if name is None or not self._stack:
            return
        self._stack.pop()
        top = not self._stack
        if self._locating:
            return
        call = len(self._calls) - 1
        if top:
            self._calls[-1].kwargs = dict(kwargs)
            if "forward" in self._phases:
                at = self._input_mark
                for key, value in kwargs.items():
                    for t in tree_leaves(value):
                        if isinstance(t, torch.Tensor) and t.is_floating_point():
                            self._probe_input(t, key, at)
                            at += 1
        if not self._ignored.get(id(module), False):
            leaves = [t for t in tree_leaves(output)
                      if isinstance(t, torch.Tensor) and t.is_floating_point()]
            for t in leaves:
                if id(t) in self._outputs and self._outputs[id(t)] is t:
                    continue  # a container returning its child's output: probed already
                self._outputs[id(t)] = t
                if "forward" in self._phases:
                    self._log.add(t, ("forward", name, self.step, call, None, None))
                if "backward" in self._phases and t.requires_grad:
                    t.register_hook(self._grad_probe(name, call))
        if top:
            self._outputs.clear()
            if "backward" in self._phases:
                record = self._calls[-1]
                for i, t in enumerate(tree_leaves(output)):
                    if isinstance(t, torch.Tensor) and t.requires_grad:
                        t.register_hook(self._output_grad_recorder(record, i))

    def _grad_probe(self, name: str, call: int):
        meta = ("backward", name, self.step, call, None, None)

        def probe(grad: torch.Tensor) -> None:
            if not self._locating:
                self._log.add(grad, meta)
        return probe

    @staticmethod
    def _output_grad_recorder(record: Call, index: int):
        def keep(grad: torch.Tensor) -> None:
            record.output_grads[index] = grad.detach()
        return keep

    def _params(self) -> list[torch.Tensor]:
        return [p for g in self._optimizer.param_groups for p in g["params"]]

    def _pre_step(self, optimizer, args, kwargs) -> None:
        if "backward" in self._phases:
            for p in self._params():
                if p.grad is not None:
                    self._log.add(p.grad, ("backward", self._param_modules.get(p, ""),
                                           self.step, max(len(self._calls) - 1, 0),
                                           self._param_names.get(p), None))
        self.check()

    def _post_step(self, optimizer, args, kwargs) -> None:
        if "update" in self._phases:
            state = optimizer.state
            for p in self._params():
                name = self._param_names.get(p)
                module = self._param_modules.get(p, "")
                self._log.add(p, ("update", module, self.step, 0, name, None))
                for key, value in state.get(p, {}).items():
                    if isinstance(value, torch.Tensor) and value.is_floating_point():
                        self._log.add(value, ("update", module, self.step, 0, name, key))
        self.step += 1

    # ------------------------------------------------------------------ reading and locating
    def check(self) -> None:
        """Read the probes recorded so far (one host read); raise ``NumericsError`` at the first
        non-finite value, located as precisely as possible."""
        found = self._log.first_bad()
        calls, self._calls = self._calls, []
        if found is None:
            return
        probe, value = found
        error = self._explain(probe, value, calls)
        if error is not None:
            raise error

    def _explain(self, probe: Probe, value: float, calls: list[Call]) -> NumericsError | None:
        def stats(t: torch.Tensor | None):
            return None if t is None else tensor_stats(t, self._print_tensors)

        if probe.phase == "update":
            return self._explain_update(probe, stats)
        call = calls[probe.call] if probe.call < len(calls) else None
        if probe.name == "<input>":
            tensor = None if call is None else self._input_tensor(call, probe.detail)
            return NumericsError("forward", "<input>", probe.detail, probe.step, stats(tensor))
        if probe.phase == "forward":
            bad_param = self._bad_parameter(probe.name)
            if bad_param is not None:
                name, tensor = bad_param
                return NumericsError(
                    "forward", probe.name, None, probe.step, stats(tensor), parameter=name,
                    detail="the parameter was already non-finite when the forward pass used "
                           "it (changed outside the checked updates: loaded, edited or "
                           "initialised so)")
        kinds = {"nan"} if value != value else {"inf"}
        finding: Finding | None = None
        if call is not None:
            self._locating = True
            saved_stack, self._stack = self._stack, []
            try:
                if probe.phase == "forward":
                    finding = locate_forward(call, probe.name, self._current,
                                             self._op_ignored, self._module_ignored, kinds)
                else:
                    finding = locate_backward(call, self._current, self._module_ignored)
            finally:
                self._locating = False
                self._stack = saved_stack
            if finding is None:
                return None  # the replay saw only finite (or ignored) values: a false alarm
            return NumericsError(probe.phase, finding.module, finding.op, probe.step,
                                 stats(finding.tensor), detail=finding.detail)
        return NumericsError(probe.phase, probe.name, None, probe.step, None,
                             detail="the call could not be replayed to name the op")

    def _bad_parameter(self, module_name: str) -> tuple[str, torch.Tensor] | None:
        """A non-finite parameter owned directly by the module, with its qualified name."""
        module = self._modules.get(module_name)
        if module is None:
            return None
        for pname, p in module.named_parameters(recurse=False):
            if kind_of([p]):
                return ".".join(x for x in (module_name, pname) if x), p
        return None

    def _op_ignored(self, op: str) -> bool:
        return self._name_ignored(op)

    def _explain_update(self, probe: Probe, stats) -> NumericsError:
        op = f"{type(self._optimizer).__name__}.step"
        tensor = None
        for p in self._params():
            if self._param_names.get(p) == probe.detail:
                tensor = p if probe.slot is None else self._optimizer.state[p][probe.slot]
                break
        if tensor is not None and not kind_of([tensor]):
            tensor = None
        return NumericsError("update", probe.name, op, probe.step, stats(tensor),
                             parameter=probe.detail, slot=probe.slot)

    @staticmethod
    def _input_tensor(call: Call, detail: str | None) -> torch.Tensor | None:
        if detail is None:
            return None
        if detail.startswith("args["):
            leaves = tree_leaves(call.args)
            index = int(detail[5:-1])
            return leaves[index] if index < len(leaves) else None
        leaves = [t for t in tree_leaves(call.kwargs.get(detail)) if isinstance(t, torch.Tensor)]
        bad = [t for t in leaves if kind_of([t])]
        return bad[0] if bad else None


def check_numerics(model: torch.nn.Module | Iterable[torch.nn.Module], optimizer: Any = None,
                   ignore: Iterable[Any] = (), print_tensors: bool = False, *,
                   phases: Iterable[str] = PHASES) -> NumericsChecker:
    """Find where the first NaN or Inf of a training run comes from.

    ::

        with trainop.check_numerics(model, optimizer=opt) as checker:
            for x, y in data:
                opt.zero_grad()
                loss_fn(model(x), y).backward()
                opt.step()          # raises trainop.NumericsError at the first NaN/Inf

    Forward: every module's floating outputs; backward: the gradient reaching every module's
    outputs and every parameter's gradient; update: parameters and optimizer state after each
    step. Detection costs one on-device sum per checked tensor and one host read per step;
    only when a value is non-finite is the step's model call replayed to name the aten op or
    autograd node (``docs/numerics.md``).

    Args:
        model: the module to watch (all its submodules), or several.
        optimizer: a ``torch.optim.Optimizer`` (any trainop optimizer included), a trainop
            ``GradientPipeline`` or optimizer wrapper, or ``None`` (no update checks; probes are
            read at the next top-level model call and at the end).
        ignore: module names, op names (``"aten.masked_fill"``) or fnmatch patterns, or module
            objects, where non-finite values are expected (e.g. a masked ``-inf`` attention
            score). A module is ignored with everything inside it; a bare name also matches the
            last component (``"mask"`` matches ``"layers.0.mask"``); ``"<input>.NAME"`` ignores
            the model's keyword argument ``NAME`` (``"<input>.args"`` the positional ones).
        print_tensors: keep the offending tensor's values in ``NumericsError.tensor_stats``
            (and so in its message).
        phases: the phases to check, a subset of ``("forward", "backward", "update")``. With
            dynamic loss scaling the scaled backward pass overflows on purpose: leave out
            ``"backward"`` there.

    Returns:
        The ``NumericsChecker`` (a context manager).

    Raises:
        NumericsError: at the first non-finite value, with ``phase``, ``module``, ``op``,
            ``step`` and ``tensor_stats``.
    """
    modules = [model] if isinstance(model, torch.nn.Module) else model
    if isinstance(modules, torch.Tensor) or not isinstance(modules, Iterable):
        raise TypeError(f"Expected `model` to be a torch.nn.Module or an iterable of modules, "
                        f"got {describe(model)}")
    return NumericsChecker(list(modules), optimizer, ignore, print_tensors, phases=phases)
