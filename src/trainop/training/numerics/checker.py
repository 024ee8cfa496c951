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
   top-level model call and at the end; after a top-level call with gradients disabled
   (inference, validation), at once.
3. Only when a probe is non-finite is it confirmed on its tensor (an overflowed sum of finite
   values is skipped) and the origin explained: the first confirmed probe in execution order
   names the phase, the module and the step, and these stand whatever happens next. Input data
   is reported as such; a backward probe names the module whose backward made the gradient (the
   one whose output gradient was the last finite one before it); an update probe names the
   parameter (or its optimizer state entry) and the optimizer. A forward or backward origin is
   then narrowed to the aten op or autograd node by replaying that model call on a replica of
   the model (``locate.py``: the model is left as it was); when the replay does not reproduce
   the value, the error says so and names no op.

The result is a ``NumericsError``. ``replay=False`` (detection only) never replays.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from trainop.contract.validation import check_bool, check_choice, describe
from trainop.kernels.torch_version import require
from trainop.training.numerics.errors import NumericsError, tensor_stats
from trainop.training.numerics.locate import (
    IGNORED,
    Call,
    Finding,
    contains,
    kind_of,
    locate_backward,
    locate_forward,
    matches,
    replica,
)
from trainop.training.numerics.probes import Bad, Probe, ProbeLog

__all__ = ["NumericsChecker", "check_numerics"]

PHASES = ("forward", "backward", "update")
_EMPTY: dict = {}

#: Why an error names no op although the call was replayed.
NOT_REPRODUCED = ("not reproduced on replay: the module's output depends on state outside its "
                  "arguments")


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

    Args:
        modules (Iterable[Module] | None): the modules to watch (with all their submodules);
            ``None`` watches every module as it is first called.
        optimizer (Any): as ``check_numerics``'s ``optimizer``; ``None``: no update checks.
        ignore (Iterable[Any]): as ``check_numerics``'s ``ignore``: names or patterns let
            through.
        print_tensors (bool): keep the offending tensor's values in
            ``NumericsError.tensor_stats``.
        phases (Iterable[str]): a subset of ``("forward", "backward", "update")``.
        debug_print (bool): print each check as it is added (``add check for: ...``), as
            RETURNN's ``debug_add_check_numerics_ops`` does.
        replay (bool): replay the failing call to name the op; ``False``: detection only.

    Attributes:
        step: optimizer steps seen so far (the ``step`` a ``NumericsError`` reports).
        checked: the qualified names of the watched modules (filled as roots are first called
            when watching every module).
    """

    def __init__(self, modules: Iterable[torch.nn.Module] | None, optimizer: Any = None,
                 ignore: Iterable[Any] = (), print_tensors: bool = False, *,
                 phases: Iterable[str] = PHASES, debug_print: bool = False,
                 replay: bool = True) -> None:
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
        self._forward = "forward" in self._phases
        self._backward = "backward" in self._phases
        self._debug_print = check_bool("debug_print", debug_print)
        self._replay = check_bool("replay", replay)
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
        self._outputs: dict[int, tuple[torch.Tensor, int]] = {}  # id -> (output, probe seq)
        self._seq = 0
        self._locating = False
        self._replay_names: dict[int, str] = {}  # id(replica module) -> name, while replaying
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
        require("numerics checks (global module forward hooks with kwargs)")
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
        if self._locating:  # a replay runs on a replica: its modules go by the originals' names
            name = self._replay_names.get(id(module))
            if name is not None:
                self._stack.append(name)
            return
        name = self._watched(module)
        if name is None:
            return
        top = not self._stack
        self._stack.append(name)
        if not top:
            return
        if self._optimizer is None and self._calls:
            self.check()  # no optimizer: the previous call's probes are read here
        rng = {}
        if self._replay:
            rng["cpu"] = torch.get_rng_state()
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                rng["cuda"] = torch.cuda.get_rng_state_all()
        self._calls.append(Call(module, name, args, {}, rng, torch.is_grad_enabled()))
        self._input_mark = len(self._log)
        if self._forward:
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
        if self._locating:
            if id(module) in self._replay_names and self._stack:
                self._stack.pop()
            return
        name = self._names.get(id(module))
        if name is None or not self._stack:
            return
        self._stack.pop()
        if self._stack:  # an inner module: the common case, kept short
            if not self._ignored[id(module)]:
                if type(output) is torch.Tensor:
                    if output.is_floating_point():
                        self._probe_output(output, name)
                else:
                    for t in tree_leaves(output):
                        if isinstance(t, torch.Tensor) and t.is_floating_point():
                            self._probe_output(t, name)
            return
        record = self._calls[-1]
        record.kwargs = dict(kwargs)
        if self._forward:
            at = self._input_mark
            for key, value in kwargs.items():
                for t in tree_leaves(value):
                    if isinstance(t, torch.Tensor) and t.is_floating_point():
                        self._probe_input(t, key, at)
                        at += 1
        leaves = tree_leaves(output)
        if not self._ignored[id(module)]:
            for t in leaves:
                if isinstance(t, torch.Tensor) and t.is_floating_point():
                    self._probe_output(t, name)
        for i, t in enumerate(leaves):
            if not isinstance(t, torch.Tensor):
                continue
            seen = self._outputs.get(id(t))
            if seen is not None and seen[0] is t:
                record.output_seqs.add(seen[1])
            if self._replay and self._backward and t.requires_grad:
                t.register_hook(self._output_grad_recorder(record, i))
        self._outputs.clear()
        if not record.grad_enabled and len(self._calls) == 1:
            self.check()  # no backward follows (inference, validation): read now, free early

    def _probe_output(self, t: torch.Tensor, name: str) -> None:
        """Probe a module's floating output (forward) and the gradient reaching it (backward),
        unless it is a child's output the module hands on (probed already, under the child)."""
        seen = self._outputs.get(id(t))
        if seen is not None and seen[0] is t:
            return
        self._seq += 1
        self._outputs[id(t)] = (t, self._seq)
        call = len(self._calls) - 1
        if self._forward:
            self._log.add(t, ("forward", name, self.step, call, None, None))
        if self._backward and t.requires_grad:
            t.register_hook(self._grad_probe(name, call, self._seq))

    def _grad_probe(self, name: str, call: int, seq: int):
        meta = ("backward", name, self.step, call, None, None, seq)

        def probe(grad: torch.Tensor) -> None:
            if not self._locating:
                self._log.defer(grad, meta)
        return probe

    @staticmethod
    def _output_grad_recorder(record: Call, index: int):
        def keep(grad: torch.Tensor) -> None:
            record.output_grads[index] = grad.detach()
        return keep

    def _params(self) -> list[torch.Tensor]:
        return [p for g in self._optimizer.param_groups for p in g["params"]]

    def _pre_step(self, optimizer, args, kwargs) -> None:
        if self._backward:
            params = [p for p in self._params() if p.grad is not None]
            meta = ("backward", self.step, max(len(self._calls) - 1, 0))
            self._log.add_many([p.grad for p in params],
                               lambda i: self._param_probe(params[i], meta, None))
        self.check()

    def _post_step(self, optimizer, args, kwargs) -> None:
        if "update" in self._phases:
            state = optimizer.state
            tensors: list[torch.Tensor] = []
            owners: list[tuple[torch.Tensor, str | None]] = []  # (parameter, state key)
            for p in self._params():
                tensors.append(p)
                owners.append((p, None))
                for key, value in state.get(p, _EMPTY).items():
                    if isinstance(value, torch.Tensor) and value.is_floating_point():
                        tensors.append(value)
                        owners.append((p, key))
            meta = ("update", self.step, 0)
            self._log.add_many(tensors, lambda i: self._param_probe(owners[i][0], meta,
                                                                    owners[i][1]))
        self.step += 1

    def _param_probe(self, p: torch.Tensor, meta: tuple, slot: str | None) -> tuple:
        """The probe of parameter ``p`` (or its state entry ``slot``): ``meta`` is (phase,
        step, call)."""
        phase, step, call = meta
        return (phase, self._param_modules.get(p, ""), step, call, self._param_names.get(p), slot)

    # ------------------------------------------------------------------ reading and locating
    def check(self) -> None:
        """Read the probes recorded so far (one host read); raise ``NumericsError`` at the first
        non-finite value, located as precisely as possible."""
        calls, self._calls = self._calls, []
        for bad in self._log.bad_probes():
            error = self._explain(bad, calls)
            if error is not None:
                raise error

    def _stats(self, t: torch.Tensor | None):
        return None if t is None else tensor_stats(t, self._print_tensors)

    def _explain(self, bad: Bad, calls: list[Call]) -> NumericsError | None:
        """The error for a confirmed non-finite probe: its phase, module and step, and the op
        where a replay of the call reproduces the value. ``None`` only where the replay shows
        that every op making it is one the user ignored by name (``ignore=["aten.x"]``)."""
        probe = bad.probe
        if probe.phase == "update":
            return self._explain_update(probe, bad.tensor)
        call = calls[probe.call] if probe.call < len(calls) else None
        if probe.name == "<input>":
            return NumericsError("forward", "<input>", probe.detail, probe.step,
                                 self._stats(bad.tensor))
        notes = []
        if not bad.confirmed:
            notes.append("the tensor was changed in place after it was probed: its probe's sum "
                         "was non-finite")
        if probe.phase == "forward":
            bad_param = self._bad_parameter(probe.name)
            if bad_param is not None:
                name, tensor = bad_param
                return NumericsError(
                    "forward", probe.name, None, probe.step, self._stats(tensor), parameter=name,
                    detail="the parameter was already non-finite when the forward pass used "
                           "it (changed outside the checked updates: loaded, edited or "
                           "initialised so)")
            module = probe.name
        elif probe.detail is not None:  # a parameter's gradient
            module = probe.name
        elif call is not None and probe.seq in call.output_seqs:
            return NumericsError("backward", call.name, None, probe.step,
                                 self._stats(bad.tensor),
                                 detail="the gradient reaching the model's output was already "
                                        "non-finite: it comes from the loss computed outside "
                                        "the model")
        else:
            module = self._backward_module(bad)
        op, tensor = None, bad.tensor
        if not self._replay:
            notes.append("the op is not named: replay=False (detection only)")
        elif call is None:
            notes.append("the call could not be replayed to name the op")
        else:
            finding = self._locate(call, probe, set(bad.kinds))
            if finding is IGNORED:
                return None
            if isinstance(finding, str):
                notes.append(finding)
            elif finding is None:
                notes.append(NOT_REPRODUCED)
            else:
                op = finding.op
                if tensor is None:
                    tensor = finding.tensor
                if finding.detail:
                    notes.append(finding.detail)
                if finding.module != module and (probe.phase == "backward"
                                                 or contains(finding.module, module)):
                    # the replay saw the op run in an enclosing module's own code (forward),
                    # or in the module whose autograd node made the gradient (backward)
                    module = finding.module
        if probe.phase == "backward" and probe.detail is None and module != probe.name:
            notes.insert(0, f"first seen in the gradient of the output of module "
                            f"{probe.name!r}")
        return NumericsError(probe.phase, module, op, probe.step, self._stats(tensor),
                             parameter=probe.detail, detail="; ".join(notes))

    def _backward_module(self, bad: Bad) -> str:
        """The module whose backward made a non-finite gradient first seen at the output of
        ``bad.probe.name``: the module whose output gradient was the last finite one of the same
        call before it (autograd reaches a module's output before its inputs), else the probed
        module."""
        probe = bad.probe
        for prev in reversed(bad.before):
            if (prev.phase == "backward" and prev.call == probe.call and prev.detail is None
                    and prev.step == probe.step):
                return prev.name
        return probe.name

    def _locate(self, call: Call, probe: Probe, kinds: set[str]) -> Finding | str | None:
        """Replay ``call`` on a replica of its module to name the op (``None``: the replay did
        not reproduce the value; a string: why it could not run)."""
        try:
            pairs = replica(call.module)
        except Exception as exc:  # noqa: BLE001 - any failure to copy means: no replay
            return (f"not replayed: the model could not be copied for a replay that leaves it "
                    f"unchanged ({type(exc).__name__}: {exc})")
        self._replay_names = {id(new): self._names[id(old)] for old, new in pairs
                              if id(old) in self._names}
        self._locating = True
        saved_stack, self._stack = self._stack, []
        try:
            if probe.phase == "forward":
                return locate_forward(call, pairs[0][1], probe.name, self._current,
                                      self._op_ignored, self._module_ignored, kinds)
            return locate_backward(call, pairs[0][1], self._current, self._module_ignored)
        finally:
            self._locating = False
            self._stack = saved_stack
            self._replay_names = {}

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

    def _explain_update(self, probe: Probe, tensor: torch.Tensor | None) -> NumericsError:
        op = f"{type(self._optimizer).__name__}.step"
        return NumericsError("update", probe.name, op, probe.step, self._stats(tensor),
                             parameter=probe.detail, slot=probe.slot)


def check_numerics(model: torch.nn.Module | Iterable[torch.nn.Module], optimizer: Any = None,
                   ignore: Iterable[Any] = (), print_tensors: bool = False, *,
                   phases: Iterable[str] = PHASES, replay: bool = True) -> NumericsChecker:
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
    only when a value is non-finite is it confirmed on its tensor and the step's model call
    replayed, on a replica of the model, to name the aten op or autograd node
    (``docs/numerics.md``). The phase, module and step come from the probes and stand whatever
    the replay shows; a replay that does not reproduce the value names no op.

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
        replay: replay the failing call to name the op (default). ``False``: detection only,
            the model is never run again; the error names phase, module and step, ``op=None``
            (op names in ``ignore`` then have no effect).

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
    return NumericsChecker(list(modules), optimizer, ignore, print_tensors, phases=phases,
                           replay=replay)
