"""trainop's own recipe format (YAML or JSON, or the same as a dict): strict and small.

Either the RETURNN ``Updater``'s options at the top level::

    format: trainop
    optimizer: {class: adam, beta2: 0.98}
    optimizer_epsilon: 1.0e-8
    learning_rate: 0.001
    gradient_clip_global_norm: 1.0
    accum_grad_multiple_step: 2

or one ``openseq2seq`` block with OpenSeq2Seq's training options (names as strings)::

    format: trainop
    openseq2seq:
      optimizer: LazyAdamOptimizer
      optimizer_params: {beta1: 0.9, beta2: 0.997, epsilon: 1.0e-9}
      lr_policy: transformer_policy
      lr_policy_params: {learning_rate: 2.0, warmup_steps: 8000, d_model: 512}
      max_grad_norm: 1.0
      dtype: float32          # float32 | float16 | bfloat16 | mixed
      max_steps: 1000

Every key must be known (the optimizer's arguments too): an unknown key is a ``ValueError``
naming the closest valid key. The
first form builds an ``Updater``, the second a ``TrainOp``.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from trainop.configs import check_keys
from trainop.contract.validation import describe
from trainop.interfaces.recipes import openseq2seq, returnn
from trainop.interfaces.recipes.overrides import apply_overrides
from trainop.training.returnn.options import DEFAULTS, LR_CONTROL_KEYS, MAPPINGS
from trainop.training.returnn.resolve import resolve_class, with_classes
from trainop.training.returnn.torch_classes import resolve_torch_class

__all__ = ["options_from"]


def options_from(data: Mapping[str, Any], classes: Mapping[str, type] | None = None,
                 overrides: Mapping[str, Any] | None = None) -> tuple[str, dict[str, Any], type]:
    """``(kind, options, optimizer class)``: kind ``"openseq2seq"`` or ``"updater"``;
    ``classes``: names of the caller's own optimizer classes (``load_recipe``);
    ``overrides``: set over the options before they are checked (``apply_overrides``)."""
    classes = classes or {}
    if data.get("format") != "trainop":
        raise ValueError(f"Expected `format: trainop` in a trainop recipe, got format="
                         f"{data.get('format')!r}")
    body = {k: v for k, v in data.items() if k != "format"}
    if "openseq2seq" in body:
        others = sorted(k for k in body if k != "openseq2seq")
        if others:
            raise ValueError(f"Expected only `format` and `openseq2seq` in a trainop recipe "
                             f"with an openseq2seq block, got also {others}")
        block = body["openseq2seq"]
        if not isinstance(block, Mapping):
            raise TypeError(f"Expected `openseq2seq` to be a mapping of options, got "
                            f"{describe(block)}")
        if isinstance(block.get("optimizer"), str) and block["optimizer"] in classes:
            block = {**block, "optimizer": classes[block["optimizer"]]}
        options, _ = openseq2seq.options_from(block, strict=True, overrides=overrides)
        return "openseq2seq", options, openseq2seq.optimizer_class(options["optimizer"])
    check_keys(body, ["format", "openseq2seq", *DEFAULTS, *LR_CONTROL_KEYS], "the trainop recipe")
    body = apply_overrides(body, overrides or {}, [*DEFAULTS, *LR_CONTROL_KEYS],
                           "the overrides (options of the trainop recipe)", MAPPINGS)
    if "optimizer" in body:
        body["optimizer"] = with_classes(body["optimizer"], classes)
    _check_optimizer_arguments(body)
    options, _, cls = returnn.options_from({**body, "trainop": 1})
    return "updater", options, cls


def _check_optimizer_arguments(body: Mapping[str, Any]) -> None:
    """The Updater form's ``optimizer: {class: <trainop name>, ...}``: every other key must be
    an argument of that class (or ``learning_rate_multiplier``); an unknown one is a
    ``ValueError`` naming the closest. ``torch.optim`` classes are checked by the Updater."""
    spec = body.get("optimizer")
    if not isinstance(spec, Mapping) or body.get("backend") == "torch":
        return
    name = spec.get("class")
    if not isinstance(name, str) or resolve_torch_class(name, plain_names=False) is not None:
        return
    try:
        cls = resolve_class(name)
    except (TypeError, ValueError):
        return  # the Updater names the valid classes
    params = inspect.signature(cls.__init__).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    valid = [n for n, p in params.items() if n not in ("self", "params", "learning_rate")
             and p.kind is not p.VAR_POSITIONAL]
    check_keys({k: v for k, v in spec.items() if k != "class"},
               [*valid, "learning_rate_multiplier"],
               f"`optimizer` ({cls.__name__} takes {valid})")
