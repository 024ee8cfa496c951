"""OpenSeq2Seq recipes: the training options of ``base_params`` (merged with ``train_params``),
OpenSeq2Seq's defaults applied, checked, and built into a ``TrainOp`` as OpenSeq2Seq's
``Model.compile`` builds ``optimize_loss``.

Options (OpenSeq2Seq's names; default when absent):

=========================  =====================================================================
``optimizer``              required: a name (``"Adam"``, ``"Momentum"``, ...) or a trainop class
``optimizer_params``       ``{}``; the class's arguments (checked; an unknown one: the closest);
                           ``UPSTREAM_BEHAVIOUR`` fills what OpenSeq2Seq's code does where
                           trainop's default differs (NovoGrad: ``second_moment="openseq2seq"``)
``lr_policy``              required: a policy function (``poly_decay``, ``tf.train.cosine_decay``)
``lr_policy_params``       ``{}``; ``decay_steps``/``begin_decay_at``/``steps_per_epoch`` filled
                           from the run length at ``build`` (``fill_policy_params``)
``max_grad_norm``          ``None`` (``clip_gradients``)
``larc_params``            ``None``
``loss_scaling``           ``1.0`` (a number, ``"Backoff"`` or ``"LogMax"``)
``loss_scaling_params``    ``None``
``dtype``                  ``torch.float32`` (``tf.float32``); ``torch.float16``; ``"mixed"``
``summaries``              ``None`` (optimize_loss's default list)
``iter_size``              ``1`` (trainop accumulates without Horovod too)
``freeze_variables_regex`` ``None``; parameters whose name ``re.match``-es it are not trained
``regularizer``            ``None``; e.g. ``l2_regularizer``, applied to weights (dim >= 2)
``regularizer_params``     ``{}`` (``{"scale": 1e-4}``)
``use_horovod``            ``False`` (``on_horovod``: average over torch.distributed)
``max_steps``              ``None``; the run length (or ``num_epochs`` x steps per epoch)
``num_epochs``             ``None``
``save_summaries_steps``   ``None`` (``summary_frequency``; 100 when None)
=========================  =====================================================================

``build(options, model, loss)``: ``loss(*args) -> model loss`` (default: ``model(*args)``
returns it); the loss handed to ``optimize_loss`` is ``float32(model_loss)`` plus the
regularizer's terms of the weights (``get_regularization_loss``'s sum, OpenSeq2Seq's ``Model``);
in mixed precision the float16 weights are regularized through their float32 masters instead
(``MixedPrecisionOptimizerWrapper.add_regularizer``). Nothing is registered globally, so a
``build`` that raises changes nothing.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping
from typing import Any

import torch

from trainop.configs import Symbol, Unresolved, check_keys, closest
from trainop.contract.optimizer import Optimizer
from trainop.contract.ranges import POSITIVE
from trainop.contract.state import STEP_MAX
from trainop.contract.validation import check_int, check_real, describe
from trainop.interfaces.recipes.names import (
    POLICY_FUNCTIONS,
    REGULARIZERS,
    TF1_POLICY_FUNCTIONS,
    resolve_name,
)
from trainop.interfaces.recipes.overrides import apply_overrides
from trainop.optimizers.novograd import NovoGrad
from trainop.processing import AutomaticLossScaler
from trainop.processing.larc import LARC
from trainop.registry import get_optimizer_class
from trainop.schedules import fill_policy_params, policy
from trainop.training.optimize_loss import TrainOp, check_iter_size, optimize_loss
from trainop.training.summaries import check_summaries

__all__ = ["DEFAULTS", "IGNORED", "UPSTREAM_BEHAVIOUR", "build", "fill_for_run",
           "filled_policy_params", "ignored_keys", "learning_rate_fn", "optimizer_class",
           "optimizer_params", "options_from", "run_length", "upstream_choices",
           "with_overrides"]

DEFAULTS: dict[str, Any] = {
    "optimizer": None, "optimizer_params": {}, "lr_policy": None, "lr_policy_params": {},
    "max_grad_norm": None, "larc_params": None, "loss_scaling": 1.0,
    "loss_scaling_params": None, "dtype": torch.float32, "summaries": None, "iter_size": 1,
    "freeze_variables_regex": None, "regularizer": None, "regularizer_params": {},
    "use_horovod": False, "max_steps": None, "num_epochs": None, "save_summaries_steps": None,
}
#: The options whose value is a dict (a dotted ``--set larc_params.larc_eta=...`` may start one).
MAPPINGS = frozenset({"optimizer_params", "lr_policy_params", "larc_params",
                      "loss_scaling_params", "regularizer_params"})
#: Where trainop's default (for new work) is not what OpenSeq2Seq's code does: optimizer class
#: -> {argument: (the value that reproduces OpenSeq2Seq, why)}. An OpenSeq2Seq recipe gets it
#: unless its ``optimizer_params`` set the argument (the user's override); docs/recipes.md
#: lists every such place.
UPSTREAM_BEHAVIOUR: dict[type, dict[str, tuple[Any, str]]] = {
    NovoGrad: {"second_moment": (
        "openseq2seq", "OpenSeq2Seq's NovoGrad never stores its second moment (v = |g|^2 at "
                       "every step, beta2 unused: open_seq2seq/optimizers/novograd.py); "
                       "optimizer_params second_moment='persistent': the paper's algorithm")},
}
_MODEL = "the model and its data (trainop trains the model you build; trainop train: its own)"
_RUN = "OpenSeq2Seq's run: logging, checkpoints, evaluation"
#: OpenSeq2Seq's other parameters (``Model``, ``EncoderDecoderModel`` and ``Text2Speech``'s
#: ``get_required_params``/``get_optional_params``; ``use_xla_jit`` from its ``run.py``):
#: known, not needed by trainop, listed as ignored with the reason (``check-config``). Any
#: other key is an error, as upstream's ``check_params`` ("Unknown parameter").
IGNORED: dict[str, str] = {
    **dict.fromkeys(("data_layer", "data_layer_params", "batch_size_per_gpu",
                     "eval_batch_size_per_gpu", "encoder", "encoder_params", "decoder",
                     "decoder_params", "loss", "loss_params", "initializer",
                     "initializer_params", "lm_vocab_file", "processed_data_folder",
                     "save_to_tensorboard"), _MODEL),
    **dict.fromkeys(("load_model", "print_loss_steps", "print_samples_steps",
                     "print_bench_info_steps", "save_checkpoint_steps", "num_checkpoints",
                     "restore_best_checkpoint", "eval_steps", "finetune", "hooks",
                     "bench_start"), _RUN),
    "logdir": f"{_RUN} (trainop train: --out)",
    "random_seed": "the model's seed (trainop train: --seed)",
    **dict.fromkeys(("num_gpus", "gpu_ids"), "devices (trainop trains where the model is; "
                                              "several processes: torch.distributed)"),
    **dict.fromkeys(("use_xla_jit", "use_trt", "trt_precision_mode",
                     "trt_max_workspace_size_bytes", "trt_minimum_segment_size",
                     "trt_is_dynamic_op", "trt_maximum_cached_engines"),
                    "TensorFlow graph compilation (XLA, TensorRT)"),
}
_HALF = (torch.float16, torch.bfloat16)
_DICTS = ("optimizer_params", "lr_policy_params", "regularizer_params")
_OPTIONAL_DICTS = ("larc_params", "loss_scaling_params")
_DTYPE_NAMES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
                "mixed": "mixed"}


def _merge(base: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """OpenSeq2Seq's ``nested_update``: dicts merge key by key, other values replace."""
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def options_from(base_params: Mapping[str, Any], train_params: Mapping[str, Any] | None = None,
                 *, strict: bool = False, overrides: Mapping[str, Any] | None = None
                 ) -> tuple[dict[str, Any], dict[str, Unresolved]]:
    """``(options, unresolved)`` of a config: ``base_params`` updated by ``train_params``
    (OpenSeq2Seq's train mode), then by ``overrides`` (``with_overrides``), every key of
    ``DEFAULTS`` present, names resolved and values checked. ``strict``: keys outside
    ``DEFAULTS`` are errors (trainop's format); otherwise the keys of ``IGNORED`` belong to
    the model and the run and are left out of ``options``, and any other key is an error
    naming the closest (upstream's ``check_params``). ``unresolved`` lists every value that
    needs code, by dotted key (``"lr_policy"``, ``"encoder_params.initializer"``)."""
    if not isinstance(base_params, Mapping):
        raise TypeError(f"Expected `base_params` to be a dict, got {describe(base_params)}")
    params = _merge(base_params, train_params or {})
    check_keys(params, DEFAULTS if strict else (*DEFAULTS, *IGNORED),
               "the openseq2seq block" if strict else
               "base_params (OpenSeq2Seq's check_params refuses an unknown parameter)")
    params = with_overrides(params, overrides or {})
    options = {key: params.get(key, default) for key, default in DEFAULTS.items()}
    for key in _DICTS:
        if options[key] is None:
            options[key] = {}
    unresolved = dict(_needing_code(params))
    _normalize(options, unresolved)
    return options, unresolved


def ignored_keys(base_params: Mapping[str, Any],
                 train_params: Mapping[str, Any] | None = None) -> dict[str, str]:
    """``{key: why}`` for the keys of a config that trainop knows and does not need."""
    params = _merge(base_params, train_params or {})
    return {key: IGNORED[key] for key in params if key in IGNORED}


def with_overrides(params: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` with ``overrides`` applied (``overrides.apply_overrides``), as OpenSeq2Seq's
    ``run.py --key=value`` (``--key/sub=value``) sets ``base_params``; an override of a key
    trainop does not use (``IGNORED``) is an error saying so."""
    for dotted in overrides:
        head = str(dotted).partition(".")[0]
        if head in IGNORED:
            raise ValueError(f"Expected a training option to override, got {dotted!r}: it "
                             f"changes nothing trainop uses ({IGNORED[head]})")
    return apply_overrides(params, overrides, DEFAULTS,
                           "the overrides (OpenSeq2Seq's training options)", MAPPINGS)


def _needing_code(params: Mapping[str, Any], prefix: str = ""):
    """``(dotted key, Unresolved)`` for every value of ``params`` (nested dicts too) that
    needs code: training options and the model's settings alike."""
    for key, value in params.items():
        if isinstance(value, Unresolved):
            yield f"{prefix}{key}", value
        elif isinstance(value, Mapping):
            yield from _needing_code(value, f"{prefix}{key}.")


def _normalize(o: dict[str, Any], unresolved: Mapping[str, Any]) -> None:
    """Names to objects, and every option checked (``ValueError``/``TypeError`` naming it)."""
    def needs_code(key: str) -> bool:
        return key in unresolved or any(k.startswith(key + ".") for k in unresolved)

    if not needs_code("optimizer"):
        optimizer_class(o["optimizer"])
    if not needs_code("lr_policy"):
        o["lr_policy"] = _policy_function(o["lr_policy"])
    if not needs_code("dtype"):
        o["dtype"] = _dtype(o["dtype"])
    if not needs_code("regularizer") and o["regularizer"] is not None:
        o["regularizer"] = _regularizer(o["regularizer"])
    for key in (*_DICTS, *_OPTIONAL_DICTS):
        if o[key] is not None and not isinstance(o[key], Mapping):
            raise TypeError(f"Expected `{key}` to be a dict, got {describe(o[key])}")
    if not needs_code("optimizer_params") and not needs_code("optimizer"):
        _check_arguments(optimizer_class(o["optimizer"]), o["optimizer_params"],
                         "optimizer_params", skip=("self", "params", "learning_rate"))
    if not needs_code("lr_policy_params") and not needs_code("lr_policy"):
        _check_arguments(o["lr_policy"], o["lr_policy_params"], "lr_policy_params",
                         skip=("global_step",))
    scaling = o["loss_scaling"]
    if isinstance(scaling, str):
        if scaling not in ("Backoff", "LogMax"):
            raise ValueError(f"Expected `loss_scaling` to be a number > 0, 'Backoff' or "
                             f"'LogMax', got {scaling!r}")
    elif not needs_code("loss_scaling"):
        check_real("loss_scaling", scaling, POSITIVE)
    if o["max_grad_norm"] is not None and not needs_code("max_grad_norm"):
        check_real("max_grad_norm", o["max_grad_norm"], POSITIVE)
    if not needs_code("iter_size"):  # optimize_loss's own check: train's bound at load
        check_iter_size(o["iter_size"])
    for key in ("max_steps", "num_epochs", "save_summaries_steps"):
        if o[key] is not None and not needs_code(key):
            check_int(key, o[key], POSITIVE)
            if o[key] > STEP_MAX:  # counted in int64 steps, as the global step
                raise ValueError(f"Expected `{key}` in [1, 2**63 - 1], got {o[key]!r}")
    if o["max_grad_norm"] is not None and o["larc_params"] is not None:
        raise ValueError("Expected `max_grad_norm` and `larc_params` not to be used together, "
                         "got both (OpenSeq2Seq raises AttributeError)")
    regex = o["freeze_variables_regex"]
    if regex is not None and not isinstance(regex, str | Unresolved):
        raise TypeError(f"Expected `freeze_variables_regex` to be a str or None, got "
                        f"{describe(regex)}")
    if not any(needs_code(k) for k in ("optimizer", "optimizer_params", "larc_params",
                                       "loss_scaling", "loss_scaling_params", "summaries")):
        _construct(o)


def _construct(o: Mapping[str, Any]) -> None:
    """Build the pieces once on a stand-in parameter, so that a bad value (``beta2=1.5``, an
    unknown LARC or loss-scaler key, a summary name) is an error at load, not at ``build``."""
    probe = torch.nn.Parameter(torch.zeros(1))
    params = dict(o["optimizer_params"])
    optimizer_class(o["optimizer"])(learning_rate=0.1, params=[probe], **params)
    if o["larc_params"] is not None:
        LARC.from_params(dict(o["larc_params"]))
    if isinstance(o["loss_scaling"], str):
        AutomaticLossScaler(o["loss_scaling"], o["loss_scaling_params"])
    elif o["loss_scaling_params"] is not None:
        raise ValueError(f"Expected `loss_scaling_params` only with an automatic loss scaling "
                         f"('Backoff', 'LogMax'), got loss_scaling={o['loss_scaling']!r}")
    check_summaries(o["summaries"])


def optimizer_class(optimizer: Any) -> type[Optimizer]:
    """The trainop class of an OpenSeq2Seq ``optimizer`` value (a name or a class)."""
    if isinstance(optimizer, str):
        return get_optimizer_class(optimizer)
    if isinstance(optimizer, type) and issubclass(optimizer, Optimizer):
        return optimizer
    if optimizer is None:
        raise ValueError("Expected `optimizer` in the recipe (a name such as 'Adam' or "
                         "'Momentum', or a class such as tf.contrib.opt.LazyAdamOptimizer), "
                         "got none")
    if isinstance(optimizer, Symbol):
        raise ValueError(f"Expected `optimizer` to be an optimizer trainop has, got "
                         f"{optimizer.name} (an import trainop does not map)")
    raise TypeError(f"Expected `optimizer` to be a name or a trainop.Optimizer subclass, got "
                    f"{describe(optimizer)}")


def upstream_choices(options: Mapping[str, Any]) -> dict[str, tuple[Any, str]]:
    """``{argument: (value, why)}``: what this recipe's optimizer gets from
    ``UPSTREAM_BEHAVIOUR`` because its ``optimizer_params`` leave the argument out."""
    cls = optimizer_class(options["optimizer"])
    given = options["optimizer_params"]
    return {arg: choice for base, choices in UPSTREAM_BEHAVIOUR.items()
            if issubclass(cls, base) for arg, choice in choices.items() if arg not in given}


def optimizer_params(options: Mapping[str, Any]) -> dict[str, Any]:
    """The optimizer's arguments ``build`` passes: the recipe's ``optimizer_params`` (a new
    dict) with ``upstream_choices`` filled in."""
    return {**options["optimizer_params"],
            **{arg: value for arg, (value, _) in upstream_choices(options).items()}}


def _policy_function(fn: Any) -> Callable[..., Any]:
    if isinstance(fn, str):
        name = fn.rpartition(".")[2]
        if name in POLICY_FUNCTIONS:
            return POLICY_FUNCTIONS[name]
        hint = closest(name, POLICY_FUNCTIONS)
        raise ValueError(f"Expected `lr_policy` to be one of {sorted(POLICY_FUNCTIONS)}, got "
                         f"{fn!r}" + (f"; did you mean {hint!r}?" if hint else ""))
    if fn is None:
        raise ValueError("Expected `lr_policy` in the recipe (e.g. poly_decay; OpenSeq2Seq "
                         "crashes without one), got none")
    if isinstance(fn, Symbol):
        raise ValueError(f"Expected `lr_policy` to be one of OpenSeq2Seq's lr_policies "
                         f"{sorted(POLICY_FUNCTIONS)}, got {fn.name} (an import trainop does "
                         f"not map)")
    if not callable(fn):
        raise TypeError(f"Expected `lr_policy` to be a function of the global step, got "
                        f"{describe(fn)}")
    return fn


def _dtype(dtype: Any) -> Any:
    if isinstance(dtype, str) and dtype in _DTYPE_NAMES:
        return _DTYPE_NAMES[dtype]
    if dtype in (torch.float32, torch.float16, torch.bfloat16):
        return dtype
    raise ValueError(f"Expected `dtype` to be one of tf.float32, tf.float16, 'mixed' (trainop "
                     f"also: 'float32', 'float16', 'bfloat16'), got {dtype!r}")


def _regularizer(reg: Any) -> Callable[..., Any]:
    if isinstance(reg, str):
        name = reg.rpartition(".")[2]
        if name not in REGULARIZERS:
            raise ValueError(f"Expected `regularizer` to be one of ['l1_regularizer', "
                             f"'l2_regularizer'], got {reg!r}")
        return REGULARIZERS[name]
    if isinstance(reg, Symbol):
        resolved = resolve_name(reg.name)
        if resolved is None:
            raise ValueError(f"Expected `regularizer` to be tf.contrib.layers.l2_regularizer or "
                             f"l1_regularizer, got {reg.name}")
        return resolved
    if not callable(reg):
        raise TypeError(f"Expected `regularizer` to be a regularizer factory (e.g. "
                        f"l2_regularizer), got {describe(reg)}")
    return reg


def _check_arguments(fn: Any, given: Mapping[str, Any], where: str, skip: tuple[str, ...]) -> None:
    """Unknown keys of ``given`` for ``fn``'s signature: an error naming the closest one."""
    target = fn.__init__ if isinstance(fn, type) else fn
    parameters = inspect.signature(target).parameters
    if any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        return
    valid = [n for n, p in parameters.items() if n not in skip and p.kind is not p.VAR_POSITIONAL]
    name = getattr(fn, "__name__", type(fn).__name__)
    check_keys(given, valid, f"`{where}` ({name} takes {valid})")


def run_length(options: Mapping[str, Any], num_steps: int | None,
               steps_per_epoch: int | None) -> dict[str, int]:
    """The keywords of ``fill_policy_params`` for this run: ``num_steps`` (given, else the
    config's ``max_steps``), or the config's ``num_epochs`` with ``steps_per_epoch``; ``{}``
    when neither is known."""
    if num_steps is not None:
        return {"num_steps": check_int("num_steps", num_steps, POSITIVE)}
    if options["max_steps"] is not None:
        return {"num_steps": options["max_steps"]}
    if options["num_epochs"] is not None and steps_per_epoch is not None:
        return {"num_epochs": options["num_epochs"],
                "steps_per_epoch": check_int("steps_per_epoch", steps_per_epoch, POSITIVE)}
    return {}


def _needs_run_length(fn: Callable[..., Any], params: Mapping[str, Any], epochs: bool) -> bool:
    names = set(inspect.signature(fn).parameters)
    return ("decay_steps" in names and "decay_steps" not in params) or (
        epochs and "steps_per_epoch" in names and "steps_per_epoch" not in params)


def filled_policy_params(options: Mapping[str, Any], num_steps: int | None,
                         steps_per_epoch: int | None) -> dict[str, Any]:
    """``lr_policy_params`` with ``decay_steps``/``begin_decay_at``/``steps_per_epoch`` filled
    from the run length as OpenSeq2Seq's ``Model.compile`` does."""
    fn, params = options["lr_policy"], dict(options["lr_policy_params"])
    length = run_length(options, num_steps, steps_per_epoch)
    epochs = options["max_steps"] is None and num_steps is None \
        and options["num_epochs"] is not None
    if not _needs_run_length(fn, params, epochs):
        return params
    if not length:
        what = ("`steps_per_epoch` (the config runs num_epochs="
                f"{options['num_epochs']})") if epochs else "`num_steps` (or max_steps)"
        raise ValueError(f"Expected {what}: {getattr(fn, '__name__', fn)} needs the run length "
                         f"to fill `lr_policy_params` as OpenSeq2Seq does")
    return fill_for_run(fn, params, length)


def fill_for_run(fn: Callable[..., Any], params: Mapping[str, Any],
                 length: Mapping[str, int]) -> dict[str, Any]:
    """``fill_policy_params(fn, params, **length)``; where the run is too short to fill (the
    decay would start after the last step), the error says which length to pass."""
    try:
        return fill_policy_params(fn, params, **length)
    except ValueError as error:
        if "num_epochs" in length:
            epochs, per_epoch = length["num_epochs"], length["steps_per_epoch"]
            run = (f"the run is num_epochs {epochs} x {per_epoch} step(s) per epoch = "
                   f"{epochs * per_epoch} steps; pass the steps per epoch (--steps-per-epoch, "
                   f"build(steps_per_epoch=)) or the run length (--num-steps, "
                   f"build(num_steps=))")
        else:
            run = (f"the run is {length['num_steps']} steps; pass a longer run length "
                   f"(--num-steps, build(num_steps=))")
        raise ValueError(f"{error}: {run}") from None


def learning_rate_fn(fn: Callable[..., Any], params: Mapping[str, Any]) -> Callable[[Any], Any]:
    """``global_step -> learning rate``: trainop's ``Policy`` for OpenSeq2Seq's policies (one
    object, evaluated on the device), else ``fn(global_step=step, **params)`` as upstream."""
    name = getattr(fn, "__name__", None)
    if name in POLICY_FUNCTIONS and POLICY_FUNCTIONS[name] is fn:
        return policy(f"openseq2seq.{name}", **params)
    if name in TF1_POLICY_FUNCTIONS and TF1_POLICY_FUNCTIONS[name] is fn:
        return policy(f"tf1.{name}", **params)
    return lambda step: fn(global_step=step, **params)


def _trained(model: torch.nn.Module, regex: str | None) -> list[torch.Tensor]:
    return [p for n, p in model.named_parameters()
            if p.requires_grad and (regex is None or re.match(regex, n) is None)]


def build(options: Mapping[str, Any], model: torch.nn.Module,
          loss: Callable[..., torch.Tensor] | None = None, *, num_steps: int | None = None,
          steps_per_epoch: int | None = None, summary_writer: Any = None) -> TrainOp:
    """The ``TrainOp`` OpenSeq2Seq's model builds from these options (see the module doc)."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"Expected `model` to be a torch.nn.Module, got {describe(model)}")
    if loss is not None and not callable(loss):
        raise TypeError(f"Expected `loss` to be a callable returning the model loss or None, "
                        f"got {describe(loss)}")
    o = options
    params = filled_policy_params(o, num_steps, steps_per_epoch)
    lr = learning_rate_fn(o["lr_policy"], params)
    variables = _trained(model, o["freeze_variables_regex"])
    if not variables:
        raise ValueError(f"Expected parameters to train, got none (freeze_variables_regex="
                         f"{o['freeze_variables_regex']!r})")
    mixed = o["dtype"] == "mixed"
    model_loss = model if loss is None else loss
    regularizer = None if o["regularizer"] is None else o["regularizer"](
        **o["regularizer_params"])
    weights = [] if regularizer is None else [p for p in variables if p.dim() >= 2]
    in_loss = [p for p in weights if not (mixed and p.dtype in _HALF)]

    def total_loss(*args: Any, **kwargs: Any) -> torch.Tensor:
        total = model_loss(*args, **kwargs).float()
        terms = None
        for p in in_loss:  # get_regularization_loss's sum, in the parameters' order
            term = regularizer(p).to(torch.float32)
            terms = term if terms is None else terms + term
        return total if terms is None else total + terms

    train_op = optimize_loss(
        total_loss, o["optimizer"], optimizer_params(o), lr, var_list=variables,
        dtype=o["dtype"], clip_gradients=o["max_grad_norm"], summaries=o["summaries"],
        larc_params=o["larc_params"], loss_scaling=o["loss_scaling"],
        loss_scaling_params=o["loss_scaling_params"], on_horovod=bool(o["use_horovod"]),
        iter_size=o["iter_size"], model=model, summary_writer=summary_writer,
        summary_frequency=o["save_summaries_steps"] or 100)
    for p in weights:  # half weights: through their float32 masters (mp_regularizer_wrapper)
        if mixed and p.dtype in _HALF:
            train_op.optimizer.add_regularizer(p, regularizer)
    return train_op
