"""What ``trainop train --compare-tf`` replays: a built ``TrainOp`` or ``Updater`` described as
data (``ReplayPlan``), or a ``ValueError`` naming what TensorFlow 1 cannot express. No
TensorFlow import: the plan is made (and a recipe refused) before training.

Replayable:

- the update: a TF1 optimizer class (GradientDescent, Momentum, Adam, LazyAdam on dense
  gradients, Adagrad, Adadelta, RMSProp, Ftrl, ProximalGradientDescent, ProximalAdagrad),
  contrib's Nadam (TF's Adam kernel with ``use_nesterov``) or OpenSeq2Seq's NovoGrad (its TF
  code as it behaves, whatever ``second_moment`` trainop runs: per-layer rescaled gradients
  into TF's Momentum), with constant hyperparameters but the learning rate, one parameter
  group; the plan takes the recipe's values and never a trainop mode (``notes`` say where
  trainop is configured unlike upstream);
- OpenSeq2Seq's ``optimize_loss``: ``dtype`` float32 or ``'mixed'`` (float16 weights cast from
  float32 masters, OpenSeq2Seq's wrapper), a static, ``Backoff`` or ``LogMax`` loss scale,
  ``iter_size`` accumulation, ``max_grad_norm``, LARC, the l1/l2 ``regularizer`` on the weights
  (in the loss; in mixed precision on the float32 masters);
- RETURNN's Updater: ``accum_grad_multiple_step``, ``gradient_clip``, ``gradient_clip_norm``,
  ``gradient_clip_avg_norm``, ``gradient_clip_global_norm`` and ``grad_norm_to_clip_to_zero``
  (by the micro-step's raw norm where RETURNN measures it there), ``gradient_nan_inf_filter``.

Refused: gradient noise (random draws TensorFlow cannot repeat), ``torch.optim`` classes
(RETURNN's PyTorch backend: no TF counterpart), optimizers without a TF 1
class, several parameter groups, the skip-and-abort of invalid steps, decoupled constraints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from trainop.processing import ClipByGlobalNorm, MixedPrecisionOptimizerWrapper
from trainop.processing.clipping import ClipByAverageNorm, ClipByNorm, ClipByValue, ClipToZero
from trainop.processing.larc import LARC
from trainop.processing.loss_scale import (
    AutomaticLossScaler,
    BackoffLossScaler,
    LogMaxLossScaler,
    LossScale,
    StaticLossScaler,
)
from trainop.processing.nonfinite import NanInfFilter
from trainop.training.optimize_loss import TrainOp
from trainop.training.returnn.updater import Updater

__all__ = ["TF_CLASSES", "ReplayPlan", "tf_plan"]

#: trainop class name -> TensorFlow 1 class name (LazyAdam: Adam, equal on dense gradients;
#: Nadam: Adam's kernel with use_nesterov, as tf.contrib.opt.NadamOptimizer).
TF_CLASSES = {name: name for name in (
    "GradientDescentOptimizer", "MomentumOptimizer", "AdamOptimizer", "AdagradOptimizer",
    "AdadeltaOptimizer", "RMSPropOptimizer", "FtrlOptimizer",
    "ProximalGradientDescentOptimizer", "ProximalAdagradOptimizer")}
TF_CLASSES["LazyAdamOptimizer"] = "AdamOptimizer"
TF_CLASSES["NadamOptimizer"] = "NadamOptimizer"
#: OpenSeq2Seq's NovoGrad is TF code: per-layer rescaled gradients into TF's Momentum kernel.
TF_CLASSES["NovoGrad"] = "NovoGrad"

#: The upstream constructor's arguments where trainop's class has more (its own modes): the
#: replay takes these values only, never trainop's mode (OpenSeq2Seq's ``NovoGrad.__init__``).
UPSTREAM_ARGUMENTS = {"NovoGrad": ("beta1", "beta2", "epsilon", "weight_decay",
                                   "grad_averaging")}

#: RETURNN's per-gradient steps the replay has (processor class -> its stage's name).
_RETURNN_STEPS = (ClipByValue, ClipByNorm, ClipByAverageNorm, ClipByGlobalNorm, NanInfFilter,
                  ClipToZero)


@dataclass(frozen=True)
class ReplayPlan:
    """One training object's update as data (see the module doc).

    ``front``: ``"openseq2seq"`` or ``"returnn"``; ``tf_class`` and ``kwargs``: TensorFlow's
    optimizer and its arguments but the learning rate; ``accumulate``: micro-steps per update
    (``iter_size`` or ``accum_grad_multiple_step``); ``half``: the weights' dtype name in mixed
    precision (``"float16"``) or ``None``; ``scaler``: ``(kind, arguments)`` with kind
    ``"static"``, ``"backoff"`` or ``"logmax"``, or ``None``; ``clip``: OpenSeq2Seq's
    ``max_grad_norm``; ``larc``: LARC's arguments; ``steps``: RETURNN's per-gradient steps in
    order, ``(stage, arguments)``; ``lr_multiplier``: the optimizer's rate over the recorded
    one (RETURNN's ``learning_rate_multiplier``); ``regularizer``: ``("l2" | "l1", scale)`` on the
    weights (2 or more dimensions), OpenSeq2Seq's ``regularizer``."""

    front: str
    tf_class: str
    kwargs: dict[str, Any]
    accumulate: int = 1
    half: str | None = None
    scaler: tuple[str, dict[str, Any]] | None = None
    clip: float | None = None
    larc: dict[str, Any] | None = None
    steps: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    lr_multiplier: float = 1.0
    regularizer: tuple[str, float] | None = None
    notes: tuple[str, ...] = ()


def _scaler(scaler: Any) -> tuple[str, dict[str, Any]]:
    if isinstance(scaler, AutomaticLossScaler):
        scaler = scaler.scaler
    if isinstance(scaler, StaticLossScaler):
        return "static", {"loss_scale": float(scaler.loss_scale)}
    if isinstance(scaler, BackoffLossScaler):
        return "backoff", {k: getattr(scaler, k) for k in
                           ("scale_min", "scale_max", "step_factor", "step_window")}
    if isinstance(scaler, LogMaxLossScaler):
        return "logmax", {k: getattr(scaler, k) for k in
                          ("scale_min", "scale_max", "log_max", "beta1", "beta2",
                           "overflow_std_dev")}
    raise ValueError(f"the loss scaler {type(scaler).__name__} has no replay")


def _scaler_notes(scaler: Any) -> tuple[str, ...]:
    inner = scaler.scaler if isinstance(scaler, AutomaticLossScaler) else scaler
    if isinstance(inner, LogMaxLossScaler) and not inner.upstream_quirks:
        return ("trainop's LogMax loss scaler runs the fixed rule (overflow sample log_max, "
                "log_max in the exponent, amax 0 ignored); the replay is OpenSeq2Seq's code "
                "(2**log_max, 16; loss_scaling_params upstream_quirks=True in trainop): they "
                "differ from the first overflow on",)
    return ()


def _optimizer(optimizer: Any) -> tuple[str, dict[str, Any], tuple[str, ...]]:
    """``(TF class, its arguments, notes)``: the arguments are the upstream constructor's
    (``UPSTREAM_ARGUMENTS``); a trainop mode that changes the numbers is a note."""
    import inspect

    name = type(optimizer).__name__
    if name not in TF_CLASSES:
        raise ValueError(f"{name} has no TensorFlow 1 counterpart to replay (replayable: "
                         f"{sorted(TF_CLASSES)})")
    if len(optimizer.param_groups) != 1:
        raise ValueError("it replays one parameter group, the optimizer has "
                         f"{len(optimizer.param_groups)}")
    accepted = set(UPSTREAM_ARGUMENTS.get(name, ())) or (
        set(inspect.signature(type(optimizer).__init__).parameters)
        - {"learning_rate", "name", "use_locking", "params"})
    kwargs = {}
    for key, value in optimizer.param_groups[0].items():
        arg = optimizer._arg_names.get(key, key)
        if arg in accepted:
            if callable(value) or isinstance(value, torch.Tensor):
                raise ValueError(f"it replays constant hyperparameters, `{arg}` is "
                                 f"{type(value).__name__}")
            kwargs[arg] = value
    notes = ()
    mode = optimizer.param_groups[0].get("second_moment")
    if name == "NovoGrad" and mode != "openseq2seq":
        notes = (f"trainop's NovoGrad runs second_moment={mode!r} (the paper's stored second "
                 f"moment); the replay is OpenSeq2Seq's code (open_seq2seq/optimizers/"
                 f"novograd.py), which never stores it: they differ from the second update "
                 f"on",)
    return TF_CLASSES[name], kwargs, notes


def _regularizer(regularizer: Any) -> tuple[str, float] | None:
    if regularizer is None:
        return None
    kind, scale = getattr(regularizer, "kind", None), getattr(regularizer, "scale", None)
    if kind not in ("l1", "l2"):
        raise ValueError(f"the regularizer {regularizer!r} has no replay (l1_regularizer and "
                         f"l2_regularizer have)")
    return kind, float(scale)


def _openseq2seq(built: TrainOp, regularizer: Any) -> ReplayPlan:
    front = built.optimizer
    half = None
    inner = front
    if isinstance(front, MixedPrecisionOptimizerWrapper):
        inner = front.optimizer
        dtypes = {p.dtype for p in built._variables}
        if dtypes - {torch.float16, torch.float32}:
            raise ValueError(f"mixed precision is replayed with float16 weights, got "
                             f"{sorted(map(str, dtypes))}")
        half = "float16" if torch.float16 in dtypes else None
    elif any(p.dtype != torch.float32 for p in built._variables):
        raise ValueError("it replays float32 weights, or float16 ones in mixed precision")
    tf_class, kwargs, notes = _optimizer(inner)
    if built._accumulate_first and built._iter_size > 1:
        notes += ("trainop accumulates a full window first (accumulate_first); OpenSeq2Seq "
                  "updates on micro-steps k % iter_size == 0 (quirk Q5), as the replay does",)
    scaler = clip = larc = None
    for processor in built.pipeline.processors:
        if isinstance(processor, LossScale):
            scaler = _scaler(processor.scaler)
            notes += _scaler_notes(processor.scaler)
        elif isinstance(processor, ClipByGlobalNorm):
            clip = float(processor.clip_norm)
        elif isinstance(processor, LARC) and processor.learning_rate is None:
            larc = {k: getattr(processor, k) for k in
                    ("larc_eta", "larc_mode", "min_update", "epsilon")}
        else:
            raise ValueError(f"the gradient step {type(processor).__name__} has no replay")
    return ReplayPlan("openseq2seq", tf_class, kwargs, accumulate=built._iter_size, half=half,
                      scaler=scaler, clip=clip, larc=larc, regularizer=_regularizer(regularizer),
                      notes=notes)


def _returnn(built: Updater) -> ReplayPlan:
    built.get_optim_op()
    groups = built._groups
    if len(groups) != 1:
        raise ValueError("it replays one Updater group (no updater_opts per-parameter "
                         "options)")
    group = groups[0]
    if group.torch_class:
        raise ValueError(f"{type(group.optimizer).__name__} is a torch.optim class (RETURNN's "
                         f"PyTorch backend), which TensorFlow 1 has no counterpart for")
    steps = []
    for processor in group.pipeline.processors:
        name = type(processor).__name__
        if name == "GradientNoise":
            raise ValueError("gradient_noise adds random draws that TensorFlow cannot repeat")
        if not isinstance(processor, _RETURNN_STEPS):
            raise ValueError(f"the gradient step {name} has no replay")
        args = {k: v for k, v in vars(processor).items()  # values only: RETURNN's G is used
                if k in ("clip_value_min", "clip_value_max", "clip_norm", "threshold")}
        steps.append((processor.stage, {k: float(v) if isinstance(v, torch.Tensor) else v
                                        for k, v in args.items()}))
    tf_class, kwargs, notes = _optimizer(group.optimizer)
    base = float(built.get_current_step_learning_rate())
    rate = float(group.optimizer.param_groups[0]["lr"]())
    return ReplayPlan("returnn", tf_class, kwargs, accumulate=max(group.n, 1), steps=steps,
                      lr_multiplier=rate / base if base else 1.0, notes=notes)


def tf_plan(built: TrainOp | Updater, regularizer: Any = None) -> ReplayPlan:
    """The ``ReplayPlan`` of a built training object, or ``ValueError`` saying why TensorFlow 1
    cannot replay it (the message names the piece; no prefix). ``regularizer``: the
    OpenSeq2Seq recipe's regularizer (``l2_regularizer(scale)``; a ``TrainOp`` has it inside
    its loss, where the plan cannot see it)."""
    if isinstance(built, Updater):
        return _returnn(built)
    if isinstance(built, TrainOp):
        return _openseq2seq(built, regularizer)
    raise TypeError(f"Expected a TrainOp or an Updater, got {type(built).__name__}")
