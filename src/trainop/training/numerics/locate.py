"""The precise half of the check: replay one model call and name the op that made the value.

Runs only after the cheap probes (``probes.py``) confirmed a non-finite value, and only to name
the op: the phase, module and step come from the probe and stand whatever the replay shows. The
model call that produced it is replayed from what was recorded when it ran (its arguments, the
RNG state and the gradient that reached its outputs), with the parameters as they were (the
check runs before the optimizer's update), on a replica of the module tree (``replica``): the
same parameter objects, copies of the buffers (a replayed BatchNorm counts in the copy) and of
each module's attribute dictionary (a counter rebound in the replay, ``self.calls += 1``, is the
replica's), and the RNG state restored afterwards. So the replay leaves the model as it was;
state kept outside the modules' attributes (a global, a list appended to in place) is the
caller's, and a module whose output depends on such state, or on a counter its replay has
moved on, may not reproduce the value: then the error says so and names no op.

- forward: a ``TorchDispatchMode`` looks at the output of every aten op that runs directly in the
  module the probe named (ops of its children had finite outputs, or their probes would have
  come first). The origin is the first op whose output holds the kind of value the module
  output holds (NaN, else Inf) while none of its inputs does; failing that, the first op with a
  non-finite output.
- backward: a ``TorchFunctionMode`` records which module created each autograd node during the
  replayed forward; hooks on the nodes then see, in the order autograd runs them, the gradients
  each node receives and produces. The origin is the first node that turns finite incoming
  gradients into non-finite ones (failing that, the first node producing a non-finite one). The
  gradients are computed with ``torch.autograd.grad``, so no ``.grad`` changes.
"""

from __future__ import annotations

import contextlib
import copy
import fnmatch
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from trainop.training.numerics.probes import kind_of

__all__ = ["IGNORED", "Call", "Finding", "kind_of", "locate_backward", "locate_forward", "op_name",
           "contains", "replica"]


@dataclass
class Call:
    """One top-level call of a watched module, as recorded for a replay."""

    module: torch.nn.Module
    name: str
    args: tuple
    kwargs: dict = field(default_factory=dict)
    rng: dict[str, Any] = field(default_factory=dict)
    grad_enabled: bool = True
    output_grads: dict[int, torch.Tensor] = field(default_factory=dict)  # leaf index -> grad
    output_seqs: set[int] = field(default_factory=set)  # probe seqs of the call's outputs


#: What ``locate_forward`` returns when the replay reproduced the value and only ops the user
#: ignored by name made it.
IGNORED = "ignored"


@dataclass(frozen=True)
class Finding:
    module: str
    op: str | None
    tensor: torch.Tensor | None
    detail: str = ""


def op_name(func: Any) -> str:
    """``aten.log`` for the OpOverload ``aten.log.default``."""
    packet = getattr(func, "overloadpacket", None)
    return str(packet) if packet is not None else str(func)


def _floats(obj: Any) -> list[torch.Tensor]:
    return [t for t in tree_leaves(obj) if isinstance(t, torch.Tensor) and t.is_floating_point()]


#: Ops whose output is uninitialised memory (whatever bytes were there, NaN patterns included).
_UNINITIALISED = frozenset({"aten.empty", "aten.empty_like", "aten.empty_strided",
                            "aten.new_empty", "aten.new_empty_strided"})


def _target_kind(kinds: set[str]) -> str:
    return "nan" if "nan" in kinds else "inf"


class _OpWatch(TorchDispatchMode):
    """Records every aten op, in order, whose output is non-finite: ``(op, output kinds, input
    kinds, tensor, module)``, ``module`` being the innermost module then running (ops that only
    allocate uninitialised memory, ``aten.empty_like``, are not looked at)."""

    def __init__(self, current: Callable[[], str | None], ignored_op: Callable[[str], bool],
                 ignored_module: Callable[[str], bool]) -> None:
        super().__init__()
        self._current, self._ignored_op, self._ignored_module = (
            current, ignored_op, ignored_module)
        self.ops: list[tuple[str, set[str], set[str], torch.Tensor, str]] = []
        self.ignored_ops: list[str] = []  # modules where an ignored op made a non-finite value

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        module = self._current()
        name = op_name(func)
        if (module is not None and name not in _UNINITIALISED
                and not self._ignored_module(module)):
            outs = _floats(out)
            out_kinds = kind_of(outs)
            if out_kinds and self._ignored_op(name):
                self.ignored_ops.append(module)
            elif out_kinds:
                bad = next(t for t in outs if kind_of([t]))
                self.ops.append((name, out_kinds, kind_of(_floats((args, kwargs))),
                                 bad.detach().clone(), module))
        return out


class _NodeOwners(TorchFunctionMode):
    """Maps each autograd node created during the replay to the innermost module then running."""

    def __init__(self, current: Callable[[], str | None]) -> None:
        super().__init__()
        self._current = current
        self.owner: dict[torch.autograd.graph.Node, str] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        module = self._current()
        if module is not None:
            for t in tree_leaves(out):
                node = getattr(t, "grad_fn", None) if isinstance(t, torch.Tensor) else None
                if node is not None and node not in self.owner:
                    self.owner[node] = module
        return out


def replica(module: torch.nn.Module) -> list[tuple[torch.nn.Module, torch.nn.Module]]:
    """A copy of ``module``'s tree to replay a call on without changing the original: each
    module shallow-copied (its own attribute dictionary), sharing the parameter objects, with
    copies of the buffers. Returns ``(original, copy)`` pairs, the root first."""
    pairs: list[tuple[torch.nn.Module, torch.nn.Module]] = []
    made: dict[int, torch.nn.Module] = {}

    def dup(m: torch.nn.Module) -> torch.nn.Module:
        if id(m) in made:
            return made[id(m)]
        new = copy.copy(m)
        made[id(m)] = new
        pairs.append((m, new))
        new.__dict__["_parameters"] = dict(m._parameters)
        new.__dict__["_buffers"] = {k: None if b is None else b.detach().clone()
                                    for k, b in m._buffers.items()}
        new.__dict__["_modules"] = {k: None if c is None else dup(c)
                                    for k, c in m._modules.items()}
        return new

    dup(module)
    return pairs


@contextlib.contextmanager
def _replaying(call: Call):
    """RNG state of the call during the replay; the RNG state as before afterwards."""
    saved_rng = torch.get_rng_state()
    saved_cuda = torch.cuda.get_rng_state_all() if "cuda" in call.rng else None
    torch.set_rng_state(call.rng["cpu"])
    if saved_cuda is not None:
        torch.cuda.set_rng_state_all(call.rng["cuda"])
    try:
        with torch.set_grad_enabled(call.grad_enabled):
            yield
    finally:
        torch.set_rng_state(saved_rng)
        if saved_cuda is not None:
            torch.cuda.set_rng_state_all(saved_cuda)


def locate_forward(call: Call, module: torch.nn.Module, target: str,
                   current: Callable[[], str | None],
                   ignored_op: Callable[[str], bool], ignored_module: Callable[[str], bool],
                   kinds_seen: set[str]) -> Finding | str | None:
    """Replay ``call`` on ``module`` (a replica of its module) and find the op that produced
    the non-finite value the probe of module ``target`` saw: an op of ``target``'s own code
    that turned finite inputs into a non-finite output; failing that, the nearest such op before
    it in the code of a module containing it (functional code of a parent between its
    children); failing that, the first non-finite op of ``target``. ``IGNORED`` if only ops
    ignored by name made non-finite values in ``target``; ``None`` if the replay shows no
    non-finite value there (it did not reproduce the call)."""
    watch = _OpWatch(current, ignored_op, ignored_module)
    with _replaying(call), watch:
        module(*call.args, **call.kwargs)
    events = watch.ops
    own = [e for e in events if e[4] == target]
    if not own:
        return IGNORED if target in watch.ignored_ops else None
    first_own = events.index(own[0])
    origin = next((e for e in own if e[1] and not e[2]), None)
    if origin is None:
        want = _target_kind(kinds_seen)
        before = [e for e in events[:first_own] if contains(e[4], target) and not e[2]]
        matching = [e for e in before if want in e[1]]
        origin = (matching or before or [None])[-1]
    if origin is None:
        origin = _origin(own, kinds_seen)
    return Finding(origin[4], origin[0], origin[3])


def contains(outer: str, inner: str) -> bool:
    """Whether module ``outer`` contains module ``inner`` (qualified names; ``""`` is the root)."""
    return outer == "" or inner == outer or inner.startswith(outer + ".")


def _origin(events: list[tuple], kinds_seen: set[str]) -> tuple | None:
    """The event that made the value. Events are ``(op, output kinds, input kinds, tensor,
    ...)`` in execution order. The first that turned finite inputs into a non-finite output;
    failing that (every candidate saw a non-finite input, e.g. an ignored ``-inf`` mask), the
    first whose output holds the kind the probe saw (NaN, else Inf) while its inputs do not;
    else the first."""
    if not events:
        return None
    chosen = next((e for e in events if e[1] and not e[2]), None)
    if chosen is None:
        want = _target_kind(kinds_seen or events[0][1])
        chosen = next((e for e in events if want in e[1] and want not in e[2]), events[0])
    return chosen


def locate_backward(call: Call, module: torch.nn.Module, current: Callable[[], str | None],
                    ignored: Callable[[str], bool]) -> Finding | None:
    """Replay ``call`` on ``module`` (a replica of its module) forward and backward (from the
    recorded output gradients) and find the autograd node that first produced a non-finite
    gradient; ``None`` if the replay shows none (it did not reproduce the call)."""
    owners = _NodeOwners(current)
    with _replaying(call):
        with owners:
            out = module(*call.args, **call.kwargs)
        leaves = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        pairs = [(leaves[i], g) for i, g in call.output_grads.items()
                 if i < len(leaves) and leaves[i].requires_grad]
        if not pairs:
            return None
        bad_input = [g for _, g in pairs if kind_of([g])]
        if bad_input:
            return Finding(call.name, None, bad_input[0],
                           "the gradient reaching the model's output was already non-finite: it "
                           "comes from the loss computed outside the model")
        module_of = _owner_lookup(owners.owner, [t.grad_fn for t, _ in pairs], call.name)
        events: list[tuple[str, set[str], set[str], torch.Tensor]] = []
        handles = []

        def hook(node, grad_inputs, grad_outputs):
            produced = kind_of(g for g in grad_inputs if g is not None)
            if produced:
                bad = next(g for g in grad_inputs if g is not None and kind_of([g]))
                events.append((node.name(), produced,
                               kind_of(g for g in grad_outputs if g is not None),
                               bad.detach().clone(), node))

        for node in module_of.nodes:
            handles.append(node.register_hook(lambda gi, go, node=node: hook(node, gi, go)))
        params = [p for p in module.parameters() if p.requires_grad]
        try:
            torch.autograd.grad([t for t, _ in pairs], params, [g for _, g in pairs],
                                allow_unused=True)
        finally:
            for h in handles:
                h.remove()
    if not events:
        return None  # nothing non-finite in the replay: it did not reproduce the call
    kept = [e for e in events if not ignored(module_of(e[4]))]
    if not kept:
        first = events[0]
        return Finding(module_of(first[4]), None, first[3],
                       "the non-finite gradient came out of an ignored module")
    chosen = _origin(kept, set().union(*(e[1] for e in kept)))
    return Finding(module_of(chosen[4]), chosen[0], chosen[3])


class _owner_lookup:  # noqa: N801 - a small callable with the graph's nodes
    """Module of each node of the graph: its recorded owner, else the nearest recorded node on
    the way from the outputs (composite ops create nodes the function mode never sees)."""

    def __init__(self, owner: dict, roots: list, default: str) -> None:
        self.nodes: list = []
        self._module: dict = {}
        stack = [(r, owner.get(r, default)) for r in roots if r is not None]
        while stack:
            node, inherited = stack.pop()
            if node in self._module:
                continue
            module = owner.get(node, inherited)
            self._module[node] = module
            self.nodes.append(node)
            stack.extend((n, module) for n, _ in node.next_functions if n is not None)

    def __call__(self, node) -> str:
        return self._module.get(node, "")


def matches(name: str, patterns: Iterable[str]) -> bool:
    """Whether ``name`` (a module path or op name) matches one of ``patterns``: the whole name, an
    fnmatch pattern, or its last dotted component (``"mask"`` matches ``"layers.0.mask"``)."""
    last = name.rsplit(".", 1)[-1]
    return any(name == p or last == p or fnmatch.fnmatchcase(name, p) for p in patterns)
