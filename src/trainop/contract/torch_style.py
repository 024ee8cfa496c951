"""torch-style construction for every trainop optimizer, in one place.

torch's wrappers (``ZeroRedundancyOptimizer``, Lightning, HF Transformers, timm factories,
RETURNN's torch engine) build optimizers as ``cls(params, **kwargs)`` with torch's spellings.
Every trainop constructor keeps its TF signature (``learning_rate`` first) and additionally
accepts:

- the parameters (an iterable of tensors, of ``(name, tensor)`` pairs or of param-group dicts)
  as the FIRST positional argument; the positional arguments after them bind to the TF
  signature in order (``AdamOptimizer(params, 0.01)`` is ``learning_rate=0.01``, as in torch);
  for a class whose TF signature does not start with the learning rate (``AdamWOptimizer``,
  ``MomentumWOptimizer``: ``weight_decay`` first, where torch's ``AdamW`` reads ``lr``) a
  positional argument after the parameters is a ``TypeError``;
- ``lr=`` as the torch spelling of ``learning_rate`` (giving both is a ``TypeError``);
- a required argument that every param group gives (``MomentumOptimizer([{"params": a,
  "momentum": 0.9}, ...], lr=0.1)``; ``lr`` only per group) may be left out: its default is
  then torch's ``required`` marker, and a group added later without it is a ``ValueError``.

The first positional argument counts as parameters when it is an iterable (not a tensor, a
string or a number) whose items are all tensors, param-group dicts or ``(name, tensor)`` pairs,
or an empty iterable (torch then reports the empty parameter list); a ``Parameter``, a tensor
that requires grad or a tensor of several elements is a ``TypeError`` in torch's words (the
parameters without their list: ``AdamOptimizer(model.scale)``); anything else (a float, a
1-element tensor, a callable, a ``Policy``) stays the learning rate (AdamW, MomentumW: the
weight decay), as before.

torch spellings whose meaning differs from TF's (``eps``, ``betas``, ``weight_decay`` where the
TF class has none, ``amsgrad``, ``foreach``, ...; see ``TORCH_SPELLINGS``) raise a ``TypeError``
naming the trainop argument to use and how the meaning differs, whether given to the
constructor or as a key of a param group; ``weight_decay=0`` (timm's factory passes it to every
optimizer and param group) is the no-op it says, accepted and left out of the groups. A
spelling that IS the class's own TF argument (e.g. ``weight_decay`` of ``AdamWOptimizer``,
``momentum`` of ``MomentumOptimizer``) is that argument;
``betas`` is a param-group key (not a constructor argument) of the classes with ``beta1`` and
``beta2``, kept equal to them (``contract/betas.py``).
A class whose constructor has a ``decay_scaled_by_lr`` keyword (the decoupled weight decay
variants) gets ``decay_scaled_by_lr=True`` from a torch-shaped call (the parameters first, or
``lr=``) unless the caller gives it: ``weight_decay`` then means torch's ``w -= lr * wd * w``.

``Optimizer.__init_subclass__`` calls ``install`` for each subclass that defines ``__init__``
with a ``params`` keyword, so every optimizer (and a user's subclass) gets this once, with no
per-class code. TF-style calls (no iterable first, no torch spelling) pass through unchanged.
The wrapper's ``__signature__`` is the TF signature plus the keyword-only ``lr``, so
``inspect.signature`` and ``inspect.getfullargspec`` list the real arguments.

Example:
    >>> import torch, trainop
    >>> model = torch.nn.Linear(2, 1)
    >>> opt = trainop.AdamOptimizer(model.parameters(), lr=1e-3)
    >>> opt.param_groups[0]["lr"]
    0.001
    >>> import inspect
    >>> "lr" in inspect.signature(trainop.AdamOptimizer).parameters
    True
"""

from __future__ import annotations

import functools
import inspect
import numbers
import types
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import torch
from torch.optim.optimizer import required as _torch_required

from trainop.contract.validation import check_hyper_tensor

__all__ = ["CONSTRUCTOR_ARGS", "REQUIRED", "TORCH_SPELLINGS", "check_group_keys",
           "check_wide_keys", "install", "is_required", "no_decay"]

_WRAPPED = "__trainop_torch_style__"

#: torch's marker for a constructor argument that every param group must give.
REQUIRED = _torch_required
_SCALED_DECAY = "decay_scaled_by_lr"


def is_required(value: Any) -> bool:
    """Whether ``value`` is torch's ``required`` marker (also a copy made by ``deepcopy``)."""
    return isinstance(value, type(REQUIRED))


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
        "p *= 1 - lr * wd); weight_decay=0 (no decay) is accepted and ignored; for a weight "
        "decay use AdamWOptimizer or MomentumWOptimizer "
        "(decoupled: torch's var -= lr * weight_decay * var when built torch-style, "
        "contrib's var -= weight_decay * var with TF's call shape), give this class a "
        "decoupled decay with trainop.extend_with_decoupled_weight_decay, or add the L2 term "
        "to the loss")),
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
        "use AdamWOptimizer (decoupled decay; built torch-style its weight_decay is torch's, "
        "scaled by the learning rate)")),
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


def no_decay(key: str, value: Any) -> bool:
    """Whether ``key=value`` is ``weight_decay`` 0 (an int or float), which a class without a
    weight decay accepts as the no-op it is: timm's ``create_optimizer_v2`` passes
    ``weight_decay`` to every optimizer it builds, 0.0 included, and in every param group."""
    return (key == "weight_decay" and isinstance(value, numbers.Real)
            and not isinstance(value, bool) and value == 0)


def check_group_keys(owner: str, group: Mapping[str, Any], accepted: Iterable[str],
                     arg_names: Mapping[str, str] | None = None) -> Mapping[str, Any]:
    """A param group's keys that are torch spellings (and not keys of this optimizer) raise
    ``TypeError``; a torch optimizer would read them, trainop would silently ignore them.
    A hyperparameter given under its constructor argument's name where the group key differs
    (``arg_names``: group key -> argument, e.g. ``learning_rate`` for ``lr``,
    ``l1_regularization_strength`` for ``l1``) is read as that key, as torch reads a group key
    named like the constructor argument; both names in one group are a ``TypeError``.
    Returns the group without a ``weight_decay`` of 0 the optimizer has no key for
    (``no_decay``) and with the argument names renamed: ``group`` itself when it has none of
    them, else a copy."""
    accepted = set(accepted)
    for key in group:
        if key in TORCH_SPELLINGS and key not in accepted and not no_decay(key, group[key]):
            raise _spelling_error(owner, key, accepted, "in a param group")
    renames = {arg: key for key, arg in (arg_names or {}).items()
               if arg != key and arg in group and key in accepted and arg not in accepted}
    for arg, key in renames.items():
        if key in group:
            raise TypeError(f"{owner} got both `{key}` and `{arg}` in a param group (the same "
                            f"hyperparameter: `{arg}` is the constructor's name for the group "
                            f"key `{key}`); give one of them")
    if renames or ("weight_decay" in group and "weight_decay" not in accepted):
        return {renames.get(k, k): v for k, v in group.items()
                if k != "weight_decay" or "weight_decay" in accepted}
    return group


#: The instance attribute holding the constructor's arguments but the parameters (set by the
#: wrapper before the constructor runs, read by ``check_wide_keys``).
CONSTRUCTOR_ARGS = "_trainop_constructor_args"


def _same(a: Any, b: Any) -> bool:
    """The constructor's value: the same tensor (or bool) object, else an equal value."""
    if isinstance(a, torch.Tensor | bool) or isinstance(b, torch.Tensor | bool):
        return a is b
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - an object without a usable ==
        return a is b


def check_wide_keys(owner: str, group: Mapping[str, Any], accepted: Iterable[str],
                    constructor_args: Mapping[str, Any]) -> None:
    """A param group key that names an optimizer-wide constructor argument (not a group key:
    ``initial_accumulator_value``, ``implementation``, ``decay_scaled_by_lr``,
    ``global_step``, ...) with a value other than the constructor's is a ``TypeError``:
    torch would apply it to the group, trainop cannot and would silently ignore it. The
    constructor's own value is accepted (``ZeroRedundancyOptimizer`` copies its keyword
    arguments into every group it hands the local optimizer)."""
    accepted = set(accepted)
    for key, value in group.items():
        if key == "params" or key in accepted or key not in constructor_args:
            continue
        if not _same(value, constructor_args[key]):
            raise TypeError(
                f"{owner} got `{key}` in a param group: it is an optimizer-wide argument "
                f"(one value for all groups: {constructor_args[key]!r}), which a group cannot "
                f"change; give `{key}=` to the constructor, or use one optimizer per value")


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


def _check_not_params(owner: str, first_arg: str, first: Any) -> None:
    """A Parameter, a tensor that requires grad or a tensor of several elements as the first
    positional argument is the parameters given without their list (``Adam(model.scale)``),
    not a hyperparameter: ``TypeError`` in torch's words, plus how to give either."""
    if not isinstance(first, torch.Tensor):
        return
    if not (isinstance(first, torch.nn.Parameter) or first.requires_grad or first.numel() > 1):
        return
    raise TypeError(
        "params argument given to the optimizer should be an iterable of Tensors or dicts, "
        f"but got {torch.typename(first)}: {owner} read it as its first TF argument "
        f"`{first_arg}`; torch style: give the parameters as a list (`{owner}(params=[p], "
        f"...)` or `{owner}([p], lr=...)`); TF style: `{first_arg}` first, the variables at "
        f"`apply_gradients`/`minimize`")


def _looks_like_params(value: Any) -> bool:
    """Parameters given positionally (never consumed): ``model.parameters()`` (a generator),
    a Parameter or a tensor that requires grad, or a list/tuple of them."""
    if isinstance(value, types.GeneratorType):
        return True
    if isinstance(value, torch.Tensor):
        return isinstance(value, torch.nn.Parameter) or value.requires_grad
    return isinstance(value, list | tuple) and bool(value) and all(
        isinstance(v, torch.Tensor) and v.requires_grad for v in value)


def _check_later_params(owner: str, arg_names: list[str], args: tuple) -> None:
    """``AdamOptimizer(0.001, model.parameters())``, TF's order with the parameters after
    it: the parameters landed on the next TF argument (``beta1``); ``TypeError`` saying that
    ``params`` is a keyword."""
    for k, value in enumerate(args[1:], 1):
        if k < len(arg_names) and arg_names[k] != "params" and _looks_like_params(value):
            raise TypeError(
                f"{owner} got the parameters as positional argument {k + 1}, which its TF "
                f"signature reads as `{arg_names[k]}`: `params` is a keyword argument "
                f"(`{owner}({arg_names[0]}, params=model.parameters())`), or give them first, "
                f"torch style (`{owner}(model.parameters(), lr=...)`)")


class _ParamsProbe(torch.optim.Optimizer):
    """torch's own checks of a ``params`` argument (type, empty list, duplicates, names)."""

    def step(self, closure=None):  # pragma: no cover - never stepped
        raise NotImplementedError


def _check_params_first(kwargs: Mapping[str, Any]) -> None:
    """Before the ``TypeError`` of a call that leaves out a required argument: the errors
    (and warnings) torch gives for its ``params`` and a tensor ``lr``, which torch's tests
    expect first."""
    lr = kwargs.get("learning_rate")
    if isinstance(lr, torch.Tensor):
        check_hyper_tensor("learning_rate", lr)
    if kwargs.get("params") is not None:
        _ParamsProbe(kwargs["params"], {})


def _fill_from_groups(cls: type, signature: inspect.Signature, args: tuple,
                      kwargs: dict) -> dict:
    """``kwargs`` with torch's ``required`` marker for each required TF hyperparameter (a key
    of ``_ranges`` or ``_choices``) the call leaves out that every param group gives (under
    its group key, ``lr`` for ``learning_rate``, or under the argument's own name). An
    optimizer-wide argument (AdagradDA's ``global_step``) is not filled: the groups cannot
    stand for it, and the call is Python's missing-argument ``TypeError``."""
    groups = kwargs.get("params")
    if not (isinstance(groups, list) and groups
            and all(isinstance(g, Mapping) for g in groups)):
        return kwargs
    try:
        bound = signature.bind_partial(None, *args, **kwargs).arguments
    except TypeError:
        return kwargs  # the call itself raises the right error
    keys = {arg: key for key, arg in getattr(cls, "_arg_names", {}).items()}
    hyper = {*getattr(cls, "_ranges", {}), *getattr(cls, "_choices", {})}
    filled = dict(kwargs)
    for name, parameter in list(signature.parameters.items())[1:]:
        if (parameter.default is inspect.Parameter.empty and name not in bound
                and keys.get(name, name) in hyper  # not an optimizer-wide one (global_step)
                and parameter.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                       inspect.Parameter.KEYWORD_ONLY)
                and all(keys.get(name, name) in g or name in g for g in groups)):
            filled[name] = REQUIRED
    return filled


def _normalize(cls: type, signature: inspect.Signature, args: tuple, kwargs: dict):
    """The TF-style ``(args, kwargs)`` for a torch-style call (see the module docstring)."""
    owner = cls.__name__
    names = signature.parameters
    for key in kwargs:
        if key in TORCH_SPELLINGS and key not in names and not no_decay(key, kwargs[key]):
            raise _spelling_error(owner, key, names, "as an argument")
    kwargs = {k: v for k, v in kwargs.items() if k in names or not no_decay(k, v)}
    torch_shaped = "lr" in kwargs and "lr" not in names
    if args and args[0] is None and torch_shaped and "params" not in kwargs:
        args = args[1:]  # ``cls(None, lr=...)``: no parameters, as torch reads it
    if args:
        is_params, first = _as_params(args[0])
        if is_params:
            if "params" in kwargs:
                raise TypeError(f"{owner} got the parameters both as the first positional "
                                f"argument and as `params=`; give them once")
            first_arg = list(names)[1]
            if len(args) > 1 and first_arg != "learning_rate" and "learning_rate" in names:
                raise TypeError(
                    f"{owner} got {len(args) - 1} positional argument(s) after the "
                    f"parameters: torch reads the first as `lr`, {owner}'s TF signature as "
                    f"`{first_arg}`; pass them by keyword (`lr=`, `{first_arg}=`)")
            kwargs = {**kwargs, "params": first}
            args = args[1:]
            torch_shaped = True
        else:
            _check_not_params(owner, list(names)[1], first)
            args = (first, *args[1:])
    _check_later_params(owner, list(names)[1:], args)
    if "lr" in kwargs and "lr" not in names and "learning_rate" in names:
        positional = [n for n, p in list(names.items())[1:]
                      if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
        by_position = ("learning_rate" in positional
                       and positional.index("learning_rate") < len(args))
        if "learning_rate" in kwargs or by_position:
            raise TypeError(f"{owner} got both `lr` (torch's spelling) and `learning_rate`; "
                            f"give one of them")
        kwargs = {("learning_rate" if k == "lr" else k): v for k, v in kwargs.items()}
    if torch_shaped and _SCALED_DECAY in names and _SCALED_DECAY not in kwargs:
        kwargs = {**kwargs, _SCALED_DECAY: True}
    return args, _fill_from_groups(cls, signature, args, kwargs)


def _presented(signature: inspect.Signature) -> inspect.Signature:
    """The signature ``inspect`` shows: the TF one plus the keyword-only ``lr`` (torch's
    spelling of ``learning_rate``), placed after the other keyword-only arguments."""
    parameters = list(signature.parameters.values())
    if "learning_rate" not in signature.parameters or "lr" in signature.parameters:
        return signature
    lr = inspect.Parameter("lr", inspect.Parameter.KEYWORD_ONLY, default=None)
    at = next((i for i, p in enumerate(parameters)
               if p.kind is inspect.Parameter.VAR_KEYWORD), len(parameters))
    return signature.replace(parameters=[*parameters[:at], lr, *parameters[at:]])


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
        args, kwargs = _normalize(type(self), signature, args, kwargs)
        try:
            bound = signature.bind(self, *args, **kwargs)
        except TypeError:  # a required argument left out, an unknown keyword: torch's
            _check_params_first(kwargs)  # errors for the params first, then
        else:  # the outermost constructor's arguments (a subclass's, not its parent's)
            if CONSTRUCTOR_ARGS not in self.__dict__:
                bound.apply_defaults()
                self.__dict__[CONSTRUCTOR_ARGS] = {
                    k: v for k, v in list(bound.arguments.items())[1:]
                    if k != "params" and signature.parameters[k].kind not in (
                        inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)}
        init(self, *args, **kwargs)  # the constructor's own TypeError

    setattr(__init__, _WRAPPED, True)
    __init__.__signature__ = _presented(signature)  # what inspect (getfullargspec too) reads
    cls.__init__ = __init__
