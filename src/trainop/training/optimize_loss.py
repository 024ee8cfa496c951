"""OpenSeq2Seq's ``optimize_loss``: one call builds the whole training operation.

``train_op = optimize_loss(loss, "Adam", {...}, lr_fn, ...)`` returns a ``TrainOp``;
``train_op(*batch)`` is one micro-step and returns the loss, as upstream's op. The order of
operations is OpenSeq2Seq's (spec §2.4, §10):

1. ``loss(*args, **kwargs)``; backward of ``loss * S`` (``S``: the loss scale in mixed mode);
2. mixed mode: float16/bfloat16 gradients to float32, paired with the float32 masters, the
   float32 regularization gradient ``S * dR/dv32`` added, ``1/S`` pending;
3. ``iter_size > 1``: ``acc += g / iter_size`` (unscaled, dense), and on update micro-steps the
   accumulators are what is processed (then zeroed, even if the update is skipped);
4. ``on_horovod``: gradients averaged over torch.distributed's default group, once per update;
5. summary ``global_gradient_norm`` (float32, before clipping), clipping by the global norm
   (``clip_gradients``), per-variable summaries, ``global_clipped_gradient_norm``, LARC
   (``larc_params``);
6. overflow check and loss-scale update (mixed mode), the update on the float32 masters,
   ``global_step += 1`` only when applied, masters copied back with saturation.

Steps 5-6 are the ``GradientPipeline`` (one norm pass, one fused update); 3-4 the shared
``TrainingStep`` core.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Mapping
from typing import Any

import torch

from trainop.contract.checkpoint import validate_loadable
from trainop.contract.optimizer import Optimizer
from trainop.contract.ranges import POSITIVE
from trainop.contract.state import STEP_MAX
from trainop.contract.validation import Interval, check_bool, check_real, describe
from trainop.processing import (
    AutomaticLossScaler,
    ClipByGlobalNorm,
    GradientPipeline,
    MixedPrecisionOptimizerWrapper,
    StepResult,
)
from trainop.processing.larc import LARC
from trainop.processing.loss_scale import LossScale
from trainop.registry import get_optimizer_class
from trainop.training._params import as_parameters
from trainop.training.regularization import regularized
from trainop.training.step import TrainingStep
from trainop.training.summaries import SummaryLog, check_summaries, open_writer

__all__ = ["OPTIMIZER_CLS_NAMES", "TrainOp", "optimize_loss"]

#: OpenSeq2Seq's optimizer names (any other registry name or a trainop class works too).
OPTIMIZER_CLS_NAMES = {
    "Adagrad": "AdagradOptimizer", "Adam": "AdamOptimizer", "Ftrl": "FtrlOptimizer",
    "Momentum": "MomentumOptimizer", "RMSProp": "RMSPropOptimizer",
    "SGD": "GradientDescentOptimizer", "AdamW": "AdamWOptimizer",
}
_HALF = (torch.float16, torch.bfloat16)
_POSITIVE = POSITIVE
_DTYPES = (torch.float32, torch.float16, torch.bfloat16, "mixed")


def _optimizer_class(optimizer: Any) -> type[Optimizer]:
    if isinstance(optimizer, str):
        return get_optimizer_class(optimizer)
    if isinstance(optimizer, type) and issubclass(optimizer, Optimizer):
        return optimizer
    raise TypeError(f"Expected `optimizer` to be an optimizer name (e.g. 'Adam', 'SGD', "
                    f"'Momentum', 'RMSProp', 'Adagrad', 'Ftrl', 'AdamW') or a trainop.Optimizer "
                    f"subclass, got {describe(optimizer)}")


def _variables(var_list: Any, model: Any) -> tuple[list[torch.Tensor], dict[int, str]]:
    names: dict[int, str] = {}
    if model is not None:
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"Expected `model` to be a torch.nn.Module or None, got "
                            f"{describe(model)}")
        names = {id(p): n for n, p in model.named_parameters()}
    if var_list is None:
        if model is None:
            raise ValueError("Expected `var_list` or `model` (whose trainable parameters are "
                             "optimized), got neither")
        variables = as_parameters(model, "model")
    else:
        variables = as_parameters(var_list, "var_list")
    if not variables:
        raise ValueError("No variables to optimize.")
    for i, v in enumerate(variables):
        names.setdefault(id(v), f"var_{i}")
    return variables, names


def _check_dtype(dtype: Any, variables: list[torch.Tensor]) -> None:
    if dtype not in _DTYPES:
        raise ValueError(f"Expected `dtype` to be one of torch.float32, torch.float16, "
                         f"torch.bfloat16, 'mixed', got {dtype!r}")
    if dtype == "mixed" or not isinstance(dtype, torch.dtype):
        return
    for i, v in enumerate(variables):
        if v.is_floating_point() and v.dtype != dtype:
            raise ValueError(f"Expected every variable to have dtype {dtype} (dtype={dtype}), "
                             f"got {v.dtype} for variable {i}; use dtype='mixed' for float16 "
                             f"parameters with float32 masters")


def _learning_rate(fn: Any, global_step: Callable[[], torch.Tensor]) -> Callable[[], Any]:
    if isinstance(fn, bool) or not (callable(fn) or isinstance(fn, int | float)):
        raise TypeError(f"Expected `learning_rate_decay_fn` to be a callable of the global step "
                        f"(e.g. a trainop.schedules policy) or a number, got {describe(fn)}")
    if not callable(fn):
        value = check_real("learning_rate_decay_fn", fn, Interval(0.0, float("inf")))
        return lambda: value
    return lambda: fn(global_step())


def _loss_scale(loss_scaling: Any, params: Any) -> Any:
    if isinstance(loss_scaling, str):
        if loss_scaling.strip().lower() not in ("backoff", "logmax"):
            raise ValueError(f"Expected `loss_scaling` to be a number > 0, 'Backoff' or "
                             f"'LogMax' (case-insensitive), got {loss_scaling!r}")
        try:
            return AutomaticLossScaler(loss_scaling, params)
        except (TypeError, ValueError) as exc:  # name optimize_loss's argument
            raise type(exc)(f"Invalid `loss_scaling_params` for {loss_scaling!r}: {exc}") \
                from None
    if params is not None:
        raise ValueError(f"Expected `loss_scaling_params` only with an automatic loss scaling "
                         f"('Backoff', 'LogMax'), got loss_scaling={loss_scaling!r}")
    return check_real("loss_scaling", loss_scaling, _POSITIVE)


class TrainOp:
    """What ``optimize_loss`` returns: call it once per micro-step.

    ``train_op(*args, **kwargs)`` calls ``loss(*args, **kwargs)``, runs the micro-step and
    returns the loss (detached), as upstream's training op; ``skip_update=True`` only
    accumulates (upstream's ``skip_update_ph`` feed).

    Attributes:
        global_step: 0-dim int64 tensor: updates applied (not skipped).
        optimizer: the trainop optimizer, or with ``dtype="mixed"`` the
            ``MixedPrecisionOptimizerWrapper`` around it (``master(var)``, ``loss_scale``,
            ``add_regularizer(var, fn)``).
        pipeline: the ``GradientPipeline`` (``print(train_op.pipeline)`` shows the order).
        last_result: the ``StepResult`` of the last micro-step (``skip_reason`` 8 on
            micro-steps that only accumulated).
        micro_step: micro-steps run so far (host int).
    """

    def __init__(self, loss: Callable[..., torch.Tensor], core: TrainingStep, optimizer: Any,
                 *, iter_size: int, accumulate_first: bool, feed_required: bool,
                 lr: Callable[[], Any], summaries: list[str], writer: Any, frequency: int,
                 names: dict[int, str], variables: list[torch.Tensor], larc: bool,
                 scaler: Any) -> None:
        self._loss = loss
        self._core = core
        self.optimizer = optimizer
        self._iter_size = iter_size
        self._accumulate_first = accumulate_first
        self._feed_required = feed_required
        self._lr = lr
        self._summaries = summaries
        self._writer = writer
        self._frequency = frequency
        self._names = names
        self._variables = variables
        self._larc = larc
        self._scaler = scaler  # the automatic scaler, for the loss_scale summary

    @property
    def pipeline(self) -> GradientPipeline:
        return self._core.pipeline

    @property
    def global_step(self) -> torch.Tensor:
        return self._core.global_step

    def current_learning_rate(self) -> torch.Tensor | float:
        """The learning rate the next update uses (the schedule at ``global_step``)."""
        return self._lr()

    @property
    def micro_step(self) -> int:
        return self._core.micro_steps

    @property
    def last_result(self) -> StepResult | None:
        return self._core.last_result

    def _updates_now(self, skip_update: Any) -> bool:
        if skip_update is None:
            if self._feed_required:
                raise ValueError("Expected `skip_update` on every call: optimize_loss was given "
                                 "skip_update_ph=True (the caller feeds it)")
            k = self._core.micro_steps
            if self._accumulate_first:
                return (k + 1) % self._iter_size == 0
            return k % self._iter_size == 0  # OpenSeq2Seq's driver (quirk Q5)
        return not check_bool("skip_update", skip_update)

    def __call__(self, *args: Any, skip_update: bool | None = None, **kwargs: Any) -> torch.Tensor:
        update = self._updates_now(skip_update)
        loss = self._loss(*args, **kwargs)
        if not isinstance(loss, torch.Tensor) or loss.dim() != 0 or not loss.is_floating_point():
            raise TypeError(f"Expected `loss(...)` to return a 0-dim floating-point tensor, got "
                            f"{describe(loss)}")
        self._core.backward(loss)
        if not update:
            self._core.accumulate()
            return loss.detach()
        log = None
        observe = None
        if self._writer is not None and self._core.update_steps % self._frequency == 0:
            log = SummaryLog()
            step = int(self.global_step)  # the step the values belong to (read: summary step)
            self._before_update(log)
            if {"gradients", "gradient_norm"} & set(self._summaries) or (
                    self._larc and "larc_summaries" in self._summaries):
                observe = self._observe_gradients
        result = self._core.update(observe=observe)
        if log is not None:
            self._after_update(log, result, loss)
            log.write(self._writer, step)
        return loss.detach()

    # ------------------------------------------------------------------ summaries
    def _masters(self) -> list[torch.Tensor]:
        """The variables the update reads: masters in mixed mode."""
        if isinstance(self.optimizer, MixedPrecisionOptimizerWrapper):
            return [self.optimizer.master(v) if v.dtype in _HALF else v for v in self._variables]
        return self._variables

    def _before_update(self, log: SummaryLog) -> None:
        """Pre-update values (OpenSeq2Seq computes these summaries before ``apply``)."""
        # the learning rate of this update (at global_step before it advances): also LARC's
        self._summary_lr = torch.as_tensor(self._lr(), dtype=torch.float32)
        if "learning_rate" in self._summaries:
            log.scalar("learning_rate", self._summary_lr)
        self._grads = None
        for v, name in zip(self._masters(), self._variable_names(), strict=True):
            if "variables" in self._summaries:
                log.histogram(f"variables/{name}", v.detach().clone())
            if "variable_norm" in self._summaries:
                log.scalar(f"variable_norm/{name}", torch.linalg.vector_norm(v.detach().float()))

    def _observe_gradients(self, pairs: list[tuple[torch.Tensor | None, torch.Tensor]],
                           pending_scale: torch.Tensor | None) -> None:
        """Float32 copies of the gradients the pipeline processes on this update (accumulated,
        averaged over ranks, regularization included, unscaled), in the variables' order."""
        # the variables with a gradient, in the pipeline's order (LARC's per-tensor stats)
        self._present = [id(v) for g, v in pairs if g is not None]
        if not {"gradients", "gradient_norm"} & set(self._summaries):
            return
        inverse = None if pending_scale is None else torch.reciprocal(pending_scale.float())
        by_var = {}
        for g, v in pairs:
            if g is None:
                continue
            g = (g.coalesce().to_dense() if g.is_sparse else g).detach().float().clone()
            by_var[id(v)] = g if inverse is None else g * inverse.to(g.device)
        self._grads = [by_var.get(id(v)) for v in self._masters()]

    def _variable_names(self) -> list[str]:
        return [self._names[id(v)] for v in self._variables]

    def _after_update(self, log: SummaryLog, result: StepResult, loss: torch.Tensor) -> None:
        log.scalar("train_loss", loss)
        if "global_gradient_norm" in self._summaries:
            log.scalar("global_gradient_norm", result.global_norm)
            if result.clipped_global_norm is not None:
                log.scalar("global_clipped_gradient_norm", result.clipped_global_norm)
        if self._grads is not None:
            coef = (None if result.clipped_global_norm is None
                    else result.clipped_global_norm / result.global_norm)
            for g, name in zip(self._grads, self._variable_names(), strict=True):
                if g is None:
                    continue
                if coef is not None:
                    g = g * coef
                if "gradients" in self._summaries:
                    log.histogram(f"gradients/{name}", torch.nan_to_num(
                        g, nan=0.0, posinf=0.0, neginf=0.0))
                if "gradient_norm" in self._summaries:
                    log.scalar(f"gradient_norm/{name}", torch.linalg.vector_norm(g))
            self._grads = None
        if "larc_summaries" in self._summaries and self._larc:
            trust = result.stats.get("larc_trust")
            clip_on = result.stats.get("larc_clip_on")
            lr = self._summary_lr
            name_of = {id(m): n for m, n in zip(self._masters(), self._variable_names(),
                                                strict=True)}
            for i, name in enumerate(name_of[key] for key in self._present):
                if trust is not None:
                    log.scalar(f"larc_grad_update/{name}", trust[i])
                    log.scalar(f"larc_final_lr/{name}", lr * trust[i])
                if clip_on is not None:
                    log.scalar(f"larc_clip_on/{name}", clip_on[i])
        if "loss_scale" in self._summaries and self._scaler is not None:
            # upstream writes it whenever the scaling is automatic, also where (float32) the
            # scaler exists but does not scale the loss
            log.scalar("loss_scale", result.loss_scale if result.loss_scale is not None
                       else self._scaler.loss_scale)

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Everything a bit-exact resume needs at any micro-step: the optimizer (and masters,
        scaler in mixed mode), the accumulators, the counters. Loads with
        ``torch.load(weights_only=True)``."""
        return {"optimizer": self.optimizer.state_dict(), "step": self._core.state_dict()}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Validate, then load, a ``state_dict`` of a ``TrainOp`` built the same way."""
        if not isinstance(state_dict, Mapping) or set(state_dict) != {"optimizer", "step"}:
            raise ValueError(f"Expected a TrainOp state_dict with keys ['optimizer', 'step'], "
                             f"got {describe(state_dict)}")
        accumulator = self._core.check_state_dict(state_dict["step"])  # nothing changed yet
        validate_loadable(self.optimizer, state_dict["optimizer"])
        self.optimizer.load_state_dict(state_dict["optimizer"])
        self._core.load_state_dict(state_dict["step"], accumulator)


def optimize_loss(loss: Callable[..., torch.Tensor], optimizer: Any,
                  optimizer_params: Mapping[str, Any] | None, learning_rate_decay_fn: Any,
                  var_list: Any = None, dtype: Any = torch.float32, clip_gradients: Any = None,
                  summaries: Any = None, larc_params: Mapping[str, Any] | None = None,
                  loss_scaling: Any = 1.0, loss_scaling_params: Mapping[str, Any] | None = None,
                  on_horovod: bool = False, iter_size: int = 1, skip_update_ph: Any = None,
                  model: torch.nn.Module | None = None, summary_writer: Any = None,
                  summary_frequency: int = 100, *,
                  accumulate_first: bool = False,
                  apply_loss_scaling: bool | None = None) -> TrainOp:
    """OpenSeq2Seq's ``optimize_loss`` on PyTorch: the whole training step in one object.

    ::

        train_op = trainop.optimize_loss(
            lambda x, y: loss_fn(model(x), y), "Adam", {"beta2": 0.98},
            trainop.schedules.policy("transformer_policy", ...), model=model,
            clip_gradients=1.0)
        for x, y in data:
            loss = train_op(x, y)

    Args:
        loss: ``callable(*args, **kwargs) -> 0-dim loss`` (model loss plus regularization; see
            ``get_regularization_loss``).
        optimizer: ``"Adam"``, ``"SGD"``, ``"Momentum"``, ``"RMSProp"``, ``"Adagrad"``,
            ``"Ftrl"``, ``"AdamW"`` (OpenSeq2Seq's names), any registry name, or a
            ``trainop.Optimizer`` subclass (``NovoGrad``, ``LazyAdamOptimizer``). Built as
            ``cls(learning_rate=lr, **optimizer_params)``.
        optimizer_params: the optimizer's other arguments (never mutated). ``"AdamW"`` by name
            multiplies ``weight_decay`` by the learning rate at each step, as upstream.
        learning_rate_decay_fn: ``callable(global_step) -> learning rate`` (a float or 0-dim
            tensor; trainop's policies evaluate on the device without a host read), or a
            number for a constant rate.
        var_list: the parameters; ``None``: every parameter of ``model`` that requires grad.
        dtype: ``torch.float32``; ``"mixed"`` (float16/bfloat16 parameters with float32
            masters and slots, loss scaling); ``torch.float16``/``torch.bfloat16`` (pure half
            precision: every floating variable must have that dtype).
        clip_gradients: clip by the global norm (float32) at this value; not with LARC.
        summaries: names from ``OPTIMIZER_SUMMARIES``; ``None``: ``["learning_rate",
            "global_gradient_norm", "loss_scale"]``.
        larc_params: OpenSeq2Seq's LARC dict (``larc_eta``, ``larc_mode``, ``min_update``,
            ``epsilon``).
        loss_scaling: a number > 0 (static), ``"Backoff"`` or ``"LogMax"``; used with
            ``dtype="mixed"`` (as upstream; see ``apply_loss_scaling``).
        loss_scaling_params: the automatic scaler's parameters (``{"upstream_quirks": True}``
            for LogMax's upstream behaviour).
        on_horovod: average the gradients over torch.distributed's default process group once
            per update (no-op at world size 1).
        iter_size: micro-steps per update (``acc += g / iter_size``); works without a
            distributed context.
        skip_update_ph: ``None`` (OpenSeq2Seq's driver schedule: micro-step ``k`` updates when
            ``k % iter_size == 0``, so micro-step 0 updates at once, quirk Q5) or ``True`` (the
            caller passes ``skip_update=`` on every call).
        model: the ``torch.nn.Module`` (parameter names for summaries; ``var_list`` default).
        summary_writer: a ``torch.utils.tensorboard.SummaryWriter`` or a log directory; no
            summaries without one.
        summary_frequency: write summaries on every N-th update attempt (applied or skipped),
            counted from the first (default 100; OpenSeq2Seq's ``save_summaries_steps``). Steps
            in between read nothing from the device.
        accumulate_first: keyword-only, trainop's option: update on micro-steps ``k`` with
            ``(k + 1) % iter_size == 0`` (full windows from the start) instead of Q5's schedule.
        apply_loss_scaling: keyword-only, trainop's option. ``None`` (default, upstream):
            ``loss_scaling`` scales the loss only with ``dtype="mixed"`` (OpenSeq2Seq applies it
            in its mixed-precision wrapper; otherwise only the ``loss_scale`` summary sees it).
            ``True``: with every dtype, e.g. PyTorch's autocast recipe (float32 weights,
            half-precision compute) or pure float16 weights.

    Returns:
        a ``TrainOp``.
    """
    variables, names = _variables(var_list, model)
    _check_dtype(dtype, variables)
    cls = _optimizer_class(optimizer)
    if optimizer_params is None:
        optimizer_params = {}
    if not isinstance(optimizer_params, Mapping):
        raise TypeError(f"Expected `optimizer_params` to be a dict, got "
                        f"{describe(optimizer_params)}")
    for key in ("learning_rate", "params"):
        if key in optimizer_params:
            raise ValueError(f"Expected no `{key}` in `optimizer_params` (optimize_loss sets "
                             f"it), got {key}={optimizer_params[key]!r}")
    if clip_gradients is not None and larc_params is not None:
        raise ValueError("Expected clip_gradients and larc_params not to be used together, got "
                         "both (OpenSeq2Seq raises AttributeError)")
    chosen = check_summaries(summaries)
    iter_size = check_iter_size(iter_size)
    check_bool("on_horovod", on_horovod)
    check_bool("accumulate_first", accumulate_first)
    if apply_loss_scaling is not None:
        check_bool("apply_loss_scaling", apply_loss_scaling)
    if skip_update_ph is not None and skip_update_ph is not True:
        raise ValueError(f"Expected `skip_update_ph` to be None or True, got {skip_update_ph!r}")
    if isinstance(summary_frequency, bool) or not isinstance(summary_frequency, int) \
            or summary_frequency < 1:
        raise ValueError(f"Expected `summary_frequency` to be an int >= 1, got "
                         f"{summary_frequency!r}")
    if not callable(loss):
        raise TypeError(f"Expected `loss` to be a callable returning the loss, got "
                        f"{describe(loss)}")
    scale = _loss_scale(loss_scaling, loss_scaling_params)
    if summary_writer is not None and not (hasattr(summary_writer, "add_scalar")
                                           or isinstance(summary_writer, str | os.PathLike)):
        open_writer(summary_writer)  # raises the TypeError before anything is built

    holder: dict[str, TrainingStep] = {}
    lr = _learning_rate(learning_rate_decay_fn, lambda: holder["core"].global_step)
    params = dict(optimizer_params)
    if optimizer == "AdamW" and "weight_decay" not in params:
        raise ValueError(f"Expected `optimizer_params` to contain 'weight_decay' for 'AdamW' "
                         f"(multiplied by the learning rate, as OpenSeq2Seq), got keys "
                         f"{sorted(params)}")
    if optimizer == "AdamW":
        wd = params["weight_decay"]
        params["weight_decay"] = lambda: wd * lr()
    _check_params(cls, params)
    opt = cls(learning_rate=lr, params=variables, **params)
    processors: list[Any] = []
    if dtype == "mixed":
        wrapped = MixedPrecisionOptimizerWrapper(opt, loss_scale=scale)
        for v, fn in regularized(variables):
            if v.dtype in _HALF:
                wrapped.add_regularizer(v, fn)
        front: Any = wrapped
    else:
        wrapped = None
        front = opt
        if apply_loss_scaling:
            processors.append(LossScale(scale))
    if clip_gradients is not None:
        processors.append(ClipByGlobalNorm(clip_gradients))
    if larc_params is not None:
        processors.append(LARC.from_params(dict(larc_params)))
    pipeline = GradientPipeline(front, processors)
    core = TrainingStep(pipeline, divisor=iter_size, accumulate=iter_size > 1,
                        average_over_ranks=on_horovod)
    holder["core"] = core
    writer = open_writer(summary_writer)  # last: it creates the log directory
    return TrainOp(loss, core, front, iter_size=iter_size, accumulate_first=accumulate_first,
                   feed_required=skip_update_ph is True, lr=lr, summaries=chosen,
                   writer=writer, frequency=summary_frequency, names=names,
                   variables=variables, larc=larc_params is not None,
                   scaler=scale if isinstance(loss_scaling, str) else None)


def check_iter_size(iter_size: Any) -> int:
    """``iter_size`` checked: an int in [1, 2**63 - 1] (also a recipe's, at load)."""
    if isinstance(iter_size, bool) or not isinstance(iter_size, int) or iter_size < 1:
        raise ValueError(f"Expected `iter_size` to be an int >= 1, got {iter_size!r}")
    if iter_size > STEP_MAX:  # gradients are divided by it as an int64 scalar
        raise ValueError(f"Expected `iter_size` in [1, 2**63 - 1], got {iter_size!r}")
    return iter_size


def _check_params(cls: type, params: dict[str, Any]) -> None:
    """An unknown optimizer argument is an error naming the class's arguments."""
    accepted = [n for n, p in inspect.signature(cls.__init__).parameters.items()
                if n not in ("self", "learning_rate", "params")
                and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    for key in params:
        if key not in accepted:
            raise ValueError(f"Unknown argument {key!r} in `optimizer_params` for "
                             f"{cls.__name__}; valid: {accepted}")

