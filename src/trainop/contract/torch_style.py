"""torch-style construction for every trainop optimizer, in one place.

torch's wrappers (``ZeroRedundancyOptimizer``, Lightning, HF Transformers, timm factories) build
optimizers as ``cls(params, **kwargs)`` with torch's spellings. Every trainop constructor keeps
its TF signature (``learning_rate`` first) and additionally accepts:

- the parameters (an iterable of tensors, of ``(name, tensor)`` pairs or of param-group dicts)
  as the FIRST positional argument; the positional arguments after them bind to the TF
  signature in order (``AdamOptimizer(params, 0.01)`` is ``learning_rate=0.01``;
  ``AdamWOptimizer(params, 0.01)`` is ``weight_decay=0.01``, TF's first argument);
- ``lr=`` as the torch spelling of ``learning_rate`` (giving both is a ``TypeError``).

The first positional argument counts as parameters when it is an iterable (not a tensor, a
string or a number) whose items are all tensors, param-group dicts or ``(name, tensor)`` pairs,
or an empty iterable (torch then reports the empty parameter list); anything else (a float, a
0-dim tensor, a callable, a ``Policy``) stays the learning rate, as before.

torch spellings whose meaning differs from TF's (``eps``, ``betas``, ``weight_decay`` where the
TF class has none, ``amsgrad``, ``foreach``, ...; see ``TORCH_SPELLINGS``) raise a ``TypeError``
naming the trainop argument to use and how the meaning differs, whether given to the
constructor or as a key of a param group. A spelling that IS the class's own TF argument (e.g.
``weight_decay`` of ``AdamWOptimizer``, ``momentum`` of ``MomentumOptimizer``) is that argument.

``Optimizer.__init_subclass__`` calls ``install`` for each subclass that defines ``__init__``
with a ``params`` keyword, so every optimizer (and a user's subclass) gets this once, with no
per-class code. TF-style calls (no iterable first, no torch spelling) pass through unchanged.

Example:
    >>> import torch, trainop
    >>> model = torch.nn.Linear(2, 1)
    >>> opt = trainop.AdamOptimizer(model.parameters(), lr=1e-3)
    >>> opt.param_groups[0]["lr"]
    0.001
"""

from __future__ import annotations

import functools
import inspect
import numbers
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import torch

__all__ = ["TORCH_SPELLINGS", "check_group_keys", "install"]

_WRAPPED = "__trainop_torch_style__"


class Spelling(NamedTuple):
    """A torch argument name: the trainop arguments that replace it and how the meaning
    differs."""

    use: tuple[str, ...]
    why: str


#: torch argument names that trainop rejects with guidance (unless the class's own TF signature
#: has an argument of that name).
TORCH_SPELLINGS: dict[str, Spelling] = {
    "eps": Spelling(("epsilon",), (
        "torch's eps and TF's epsilon sit at different places in the update (Adam: TF adds "
        "epsilon to sqrt(v) before the bias correction, 'epsilon hat', so eps_tf = eps_torch * "
        "sqrt(1 - beta2^t) changes every step; RMSProp: TF adds it inside the square root, "
        "torch outside); pass TF's value for this class's update rule")),
    "betas": Spelling(("beta1", "beta2"), (
        "torch's betas=(b1, b2) are TF's two arguments beta1=b1, beta2=b2")),
    "weight_decay": Spelling(("weight_decay",), (
        "torch's weight_decay adds weight_decay * param to the gradient (L2; AdamW: "
        "p *= 1 - lr * wd); for a weight decay use AdamWOptimizer or MomentumWOptimizer "
        "(contrib's decoupled decay var -= weight_decay * var, "
        "NOT scaled by the learning rate) or add the L2 term to the loss")),
    "momentum": Spelling(("momentum",), (
        "for momentum use MomentumOptimizer(learning_rate, momentum) "
        "(accum = momentum * accum + g; var -= lr * accum: torch's SGD with dampening=0)")),
    "dampening": Spelling((), "TF's momentum has no dampening (it is torch's dampening=0)"),
    "nesterov": Spelling(("use_nesterov",), (
        "TF spells it use_nesterov (MomentumOptimizer, MomentumWOptimizer); for Adam with a "
        "Nesterov step use NadamOptimizer (contrib's rule, not torch's NAdam schedule)")),
    "amsgrad": Spelling((), "TF1 has no AMSGrad and no trainop optimizer implements it"),
    "foreach": Spelling(("implementation",), (
        "trainop picks its kernels itself (native C, torch fused, foreach, reference); "
        "implementation='foreach' forces the multi-tensor path")),
    "fused": Spelling(("implementation",), (
        "trainop picks its kernels itself (native C, torch fused, foreach, reference); "
        "implementation='fused' forces torch's fused kernel where the class offers it")),
    "capturable": Spelling((), "trainop has no capturable option"),
    "maximize": Spelling((), "trainop minimizes, as TF does; negate the loss to maximize"),
    "differentiable": Spelling((), (
        "trainop's update runs under no_grad, as TF's apply ops have no gradient; there is no "
        "differentiable mode")),
    "alpha": Spelling(("decay",), (
        "torch RMSprop's alpha is TF's decay (same smoothing), but TF's mean-square slot starts "
        "at 1.0 where torch's starts at 0")),
    "lr_decay": Spelling((), (
        "torch Adagrad's lr_decay is a learning-rate schedule; pass a trainop.schedules policy "
        "as learning_rate or use a torch LR scheduler")),
    "momentum_decay": Spelling((), (
        "torch NAdam's momentum schedule; contrib's NadamOptimizer has none")),
    "decoupled_weight_decay": Spelling((), (
        "use AdamWOptimizer (contrib's decoupled decay, NOT scaled by the learning rate)")),
}


def _spelling_error(owner: str, key: str, accepted: Iterable[str], where: str) -> TypeError:
    spelling = TORCH_SPELLINGS[key]
    use = [name for name in spelling.use if name in accepted]
    if use and where == "in a param group":
        hint = "use the key " + " and ".join(f"'{name}'" for name in use)
    elif use:
        hint = "use " + " and ".join(f"`{name}=`" for name in use)
    elif spelling.use:
        hint = f"{owner} has no `{spelling.use[0]}`"
    else:
        hint = f"{owner} has no such option"
    return TypeError(f"{owner} got `{key}` {where}, torch's spelling, which trainop does not "
                     f"accept: {hint}; {spelling.why}")


def check_group_keys(owner: str, group: Mapping[str, Any], accepted: Iterable[str]) -> None:
    """A param group's keys that are torch spellings (and not keys of this optimizer) raise
    ``TypeError``; a torch optimizer would read them, trainop would silently ignore them."""
    accepted = set(accepted)
    for key in group:
        if key in TORCH_SPELLINGS and key not in accepted:
            raise _spelling_error(owner, key, accepted, "in a param group")


def _as_params(first: Any) -> tuple[bool, Any]:
    """``(True, list of items)`` when ``first`` is torch-style parameters, else
    ``(False, first)`` (a consumed iterator is handed on as the list it held)."""
    if isinstance(first, torch.Tensor | str | bytes | numbers.Number | Mapping):
        return False, first
    if not isinstance(first, Iterable):
        return False, first
    items = list(first)
    is_params = all(
        isinstance(item, torch.Tensor | Mapping)
        or (isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], torch.Tensor))
        for item in items)
    if is_params:
        return True, items
    return False, first if isinstance(first, list | tuple) else items


def _normalize(owner: str, signature: inspect.Signature, args: tuple, kwargs: dict):
    """The TF-style ``(args, kwargs)`` for a torch-style call (see the module docstring)."""
    names = signature.parameters
    for key in kwargs:
        if key in TORCH_SPELLINGS and key not in names:
            raise _spelling_error(owner, key, names, "as an argument")
    if args:
        is_params, first = _as_params(args[0])
        if is_params:
            if "params" in kwargs:
                raise TypeError(f"{owner} got the parameters both as the first positional "
                                f"argument and as `params=`; give them once")
            kwargs = {**kwargs, "params": first}
            args = args[1:]
        else:
            args = (first, *args[1:])
    if "lr" in kwargs and "lr" not in names and "learning_rate" in names:
        positional = [n for n, p in list(names.items())[1:]
                      if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
        by_position = ("learning_rate" in positional
                       and positional.index("learning_rate") < len(args))
        if "learning_rate" in kwargs or by_position:
            raise TypeError(f"{owner} got both `lr` (torch's spelling) and `learning_rate`; "
                            f"give one of them")
        kwargs = {("learning_rate" if k == "lr" else k): v for k, v in kwargs.items()}
    return args, kwargs


def install(cls: type) -> None:
    """Let ``cls.__init__`` (a TF-style constructor with a ``params`` keyword) take torch-style
    calls; a no-op for classes that define no ``__init__`` or take ``params`` first."""
    init = cls.__dict__.get("__init__")
    if init is None or getattr(init, _WRAPPED, False):
        return
    try:
        signature = inspect.signature(init)
    except (TypeError, ValueError):
        return
    names = list(signature.parameters)
    if "params" not in names or names[1:2] == ["params"]:
        return

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):  # noqa: N807 - replaces the class's constructor
        args, kwargs = _normalize(type(self).__name__, signature, args, kwargs)
        init(self, *args, **kwargs)

    setattr(__init__, _WRAPPED, True)
    cls.__init__ = __init__
