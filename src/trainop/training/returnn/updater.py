"""RETURNN's config-driven ``Updater`` (its TF updater's semantics) on PyTorch.

``updater = trainop.Updater(config, model)``; ``updater.step(loss)`` per micro-batch. One step:

1. backward of ``loss`` (no loss scaling; RETURNN's TF updater has none);
2. ``G``: the global norm of this micro-step's raw gradients (only when a global-norm option
   needs it), as RETURNN's TF updater measures it: before accumulation, noise and clipping;
3. ``accum_grad_multiple_step = N > 1``: ``acc += g``; the update runs when ``t mod N ==
   N - 1`` (``t``: ``global_train_step`` before this step), so the window is tied to the step
   counter across epochs; the accumulators are saved in ``state_dict`` (RETURNN does not save
   them). ``backend="torch"`` is RETURNN's torch updater instead (``torch_step``, for every
   class): a window restarts after each update and at a new ``epoch``
   (``set_current_train_step``), which drops a partial window; ``N`` may be a callable;
4. on an update: decoupled L2 (``w *= 1 - 2*L2`` for parameters with
   ``param.RETURNN_constraint_L2``, when ``decouple_constraints``), then the ``GradientPipeline``
   in RETURNN's per-variable order: ``gradient_noise``, ``gradient_clip``,
   ``gradient_clip_norm``, ``gradient_clip_avg_norm``, ``gradient_clip_global_norm`` (by
   ``G``), ``gradient_nan_inf_filter``, ``grad_norm_to_clip_to_zero`` (by ``G``), and
   ``num_allowed_consec_invalid_gradient_steps`` (PyTorch backend's skip and abort); then the
   optimizer's fused update;
5. ``global_train_step += 1`` (micro-steps, as RETURNN counts them).

``docs/updater.md`` lists every option with RETURNN's TF and PyTorch semantics and trainop's
choice; ``spellings`` has the options whose accepted values differ between the backends
(``dynamic_learning_rate``'s calling convention and ``log_grad_norm``'s norm too).
"""

from __future__ import annotations

import fnmatch
import inspect
import math
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import torch

from trainop.configs import Unresolved, check_keys
from trainop.contract.checkpoint import validate_loadable
from trainop.contract.ranges import NON_NEGATIVE, POSITIVE
from trainop.contract.validation import Interval, check_int, check_real, describe
from trainop.processing import (
    ClipByAverageNorm,
    ClipByGlobalNorm,
    ClipByNorm,
    ClipByValue,
    ClipToZero,
    GradientNoise,
    GradientPipeline,
    NanInfFilter,
    SkipNonFinite,
    StepResult,
    global_norm,
)
from trainop.training._params import as_parameters, check_count_tensor
from trainop.training.distributed import reduce_grads_in_place, world_size
from trainop.training.returnn.options import read_config
from trainop.training.returnn.probe import check_optimizer
from trainop.training.returnn.resolve import (
    check_classes,
    optimizer_spec,
    resolve_class,
    with_classes,
)
from trainop.training.returnn.spellings import (
    BACKENDS,
    DYNAMIC_LR_CONVENTIONS,
    accum_steps,
    check_accum_value,
    check_instance_params,
    log_grad_norm_p,
    optimizer_instance,
)
from trainop.training.returnn.summaries import updater_summaries
from trainop.training.returnn.torch_classes import (
    GROUP_KEYS,
    param_groups,
    resolve_torch_class,
)
from trainop.training.returnn.torch_step import TorchClassStep
from trainop.training.step import TrainingStep
from trainop.training.summaries import open_writer

__all__ = ["Updater"]

_I64 = torch.int64
SEED_ADVICE = (
    "If you get NaN/Inf: for Adam-like optimizers try a larger `optimizer_epsilon` (1e-8, 1e-6, "
    "or even 0.1/1.0; RETURNN's TF default is 1e-16); train with a zero learning rate to find "
    "setup bugs; try `gradient_nan_inf_filter`, beta1=0.5, or `debug_add_check_numerics_ops` "
    "(trainop.check_numerics)."
)


#: Options of RETURNN's TF updater that its PyTorch backend rejects (spec §6.1).
TF_ONLY = ("gradient_clip_norm", "gradient_clip_avg_norm", "global_norm_tag",
           "gradient_clip_global_norm_tag", "grad_norm_to_clip_to_zero", "maximize_grad_norm",
           "debug_grad_summaries", "gradient_nan_inf_filter", "tags")


def _number(options: dict[str, Any], key: str) -> float:
    value = options[key]
    if isinstance(value, Unresolved):
        raise ValueError(f"Expected `{key}` to be a number, but it needs code ({value}): pass it "
                         f"from Python, or from the command line: --set {key}=VALUE")
    if value is None or value is False:
        return 0.0
    return check_real(key, value, NON_NEGATIVE)


def _count(options: dict[str, Any], key: str) -> int:
    """An option that counts (an int >= 0; None/False as 0)."""
    value = options[key]
    if value is None or value is False:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"Expected `{key}` to be an int >= 0, got {value!r}")
    return value


class _ClipToZeroByOwnNorm(ClipToZero):
    """``grad_norm_to_clip_to_zero`` by the G of ``global_norm_tag`` where the global-norm clip
    of the same group uses another tag's G (``gradient_clip_global_norm_tag``): the Updater sets
    ``norm`` before each update."""

    def __init__(self, threshold: float) -> None:
        super().__init__(threshold, use_norm="given")
        self.norm: torch.Tensor | None = None

    def process(self, batch):
        clip_norm = getattr(batch, "given_global_norm", None)
        batch.given_global_norm = self.norm
        try:
            return super().process(batch)
        finally:
            batch.given_global_norm = clip_norm


class _Step:
    """One built update: the pipeline, the core and what a step needs (``get_optim_op``)."""

    def __init__(self, updater: Updater, o: dict[str, Any], params: list[torch.Tensor],
                 spec: tuple[type, dict[str, Any], float, dict[str, Any] | None],
                 previous: list[Any], *, shared_norm: bool = False,
                 tags: tuple[str | None, str | None] = (None, None),
                 maximize: bool = False) -> None:
        cls, kwargs, multiplier, group_options = spec
        self.params = params
        self.torch_class = group_options is not None
        if self.torch_class:
            self._init_torch_class(updater, o, cls, kwargs, multiplier, group_options)
        else:
            self.optimizer = cls(learning_rate=updater._lr_fn(multiplier), params=params,
                                 **kwargs)
            self._init_pipeline(o, shared_norm, tags, maximize)
        for old in previous:  # slots of parameters that stay are kept
            if type(old) is not type(self.optimizer):
                continue
            kept = [p for p in params if p in old.state]
            for p in kept:
                self.optimizer.state[p] = old.state[p]
            if kept and not self.torch_class:
                self.optimizer.param_groups[0]["non_slot"] = {
                    k: v.clone() for k, v in old.param_groups[0]["non_slot"].items()}
        self.reduce = bool(o["use_horovod"]) and o["horovod_reduce_type"] == "grad"
        self.average = bool(o["horovod_avg_grad"])

    def _init_torch_class(self, updater: Updater, o: dict[str, Any], cls: type,
                          kwargs: dict[str, Any], multiplier: float,
                          group_options: dict[str, Any]) -> None:
        """A ``torch.optim`` class: RETURNN's PyTorch backend (``torch_classes``,
        ``torch_step``); the options it does not have are errors, as upstream."""
        for key in TF_ONLY:
            if o.get(key) not in (None, 0, 0.0, False, (), []):
                raise ValueError(f"PyTorch updater: option {key} not supported currently "
                                 f"(RETURNN's PyTorch backend, used for {cls.__name__} with "
                                 f"backend='torch'); use backend='tf' (a trainop optimizer) "
                                 f"for RETURNN's TF semantics")
        if o["decouple_constraints"] and any(getattr(p, "RETURNN_constraint_L2", 0)
                                             for p in self.params):
            raise ValueError("Expected no per-parameter `RETURNN_constraint_L2` with a "
                             f"torch.optim class ({cls.__name__}): its decay is the class's "
                             "`weight_decay` (RETURNN's PyTorch backend ignores the marks)")
        kwargs = dict(kwargs)
        if updater._instance is not None:  # RETURNN: an optimizer instance is used as it is
            self.optimizer = updater._instance
            multipliers = [1.0] * len(self.optimizer.param_groups)
        else:
            groups, multipliers = param_groups(updater._model, self.params, cls, kwargs,
                                               group_options)
            self.optimizer = cls(groups, lr=updater._host_lr() * multiplier, **kwargs)
        self.n = updater._accum
        self.tags, self.decay, self.pipeline = (), [], None
        self.clip_tag = self.zero_tag = self.zero_stage = None
        self.clip_norm_needed = self.zero_norm_needed = False
        limit = o["num_allowed_consec_invalid_gradient_steps"]
        self.core = TorchClassStep(
            self.optimizer, self.params, [m * multiplier for m in multipliers],
            noise=_number(o, "gradient_noise"), clip_value=_number(o, "gradient_clip"),
            clip_global_norm=_number(o, "gradient_clip_global_norm"),
            max_invalid=None if limit is None else _count(
                o, "num_allowed_consec_invalid_gradient_steps"), advice=SEED_ADVICE,
            log_norm_p=updater.log_grad_norm_p)

    def _init_pipeline(self, o: dict[str, Any], shared_norm: bool,
                       tags: tuple[str | None, str | None], maximize: bool) -> None:
        """A trainop optimizer: the ``GradientPipeline`` in RETURNN TF's per-variable order.
        ``tags``: the (clip, zero) tags of this group's G (None: every variable);
        ``maximize``: ``maximize_grad_norm`` changes the gradients before the clip."""
        self.n = _count(o, "accum_grad_multiple_step")
        self.tags = tuple(o.get("tags") or ())
        self.clip_tag, self.zero_tag = tags
        clip_global = _number(o, "gradient_clip_global_norm")
        to_zero = _number(o, "grad_norm_to_clip_to_zero")
        torch_backend = o["backend"] == "torch"
        # RETURNN TF measures G on the micro-step's raw gradients; where nothing before the clip
        # changes them (no accumulation, noise, value or per-tensor clip) that is the norm the
        # clip stage measures anyway, so no separate pass is needed
        changed_before_clip = maximize or self.n > 1 or any(_number(o, key) for key in (
            "gradient_noise", "gradient_clip", "gradient_clip_norm", "gradient_clip_avg_norm"))
        # with several groups a stage measures its own group only: G spans every variable
        use = "given" if not torch_backend and (changed_before_clip or shared_norm) else "stage"
        use_zero = "stage" if torch_backend else "given"
        processors: list[Any] = []
        if _number(o, "gradient_noise"):
            processors.append(GradientNoise(_number(o, "gradient_noise")))
        if _number(o, "gradient_clip"):
            c = _number(o, "gradient_clip")
            processors.append(ClipByValue(-c, c))
        if _number(o, "gradient_clip_norm"):
            processors.append(ClipByNorm(_number(o, "gradient_clip_norm")))
        if _number(o, "gradient_clip_avg_norm"):
            processors.append(ClipByAverageNorm(_number(o, "gradient_clip_avg_norm")))
        if clip_global:
            processors.append(ClipByGlobalNorm(clip_global, use_norm=use))
        if o["gradient_nan_inf_filter"]:
            processors.append(NanInfFilter())
        self.zero_stage = None
        if to_zero:
            if use_zero == "given" and clip_global and use == "given" \
                    and self.zero_tag != self.clip_tag:  # G of another tag than the clip's
                self.zero_stage = _ClipToZeroByOwnNorm(to_zero)
                processors.append(self.zero_stage)
            else:
                processors.append(ClipToZero(to_zero, use_norm=use_zero))
        if o["num_allowed_consec_invalid_gradient_steps"] is not None:
            k = _count(o, "num_allowed_consec_invalid_gradient_steps")
            processors.append(SkipNonFinite(max_consecutive_skips=k))
        self.clip_norm_needed = bool(clip_global) and use == "given"
        self.zero_norm_needed = bool(to_zero) and use_zero == "given"
        self.pipeline = GradientPipeline(self.optimizer, processors)
        # use_horovod: every micro-step's gradients are reduced before anything else (RETURNN's
        # TF order: the global norm G is of the reduced gradients), so not again in the core
        self.core = TrainingStep(self.pipeline, divisor=None, accumulate=self.n > 1,
                                 average_over_ranks=False)
        self.decay = [(p, float(p.RETURNN_constraint_L2))
                      for p in self.params if o["decouple_constraints"]
                      and getattr(p, "RETURNN_constraint_L2", 0)]


class Updater:
    """RETURNN's ``Updater`` from a config: optimizer, learning rate, accumulation, noise, five
    kinds of clipping, the NaN/Inf filter, decoupled L2 (see the module doc and
    ``docs/updater.md``).

    Args:
        config: a dict, a path to a ``.yaml``/``.json`` file (strict: unknown keys name the
            closest valid one), or a path to a RETURNN config file (``.config``/``.py``:
            parsed, never executed; keys of other parts of RETURNN are ignored).
        model: a ``torch.nn.Module`` (its trainable parameters) or an iterable of parameters.
        initial_learning_rate: the base learning rate (default: the config's
            ``learning_rate``, 1.0); ``set_learning_rate`` changes it.
        summary_writer: a ``torch.utils.tensorboard.SummaryWriter`` or a log directory for
            ``log_grad_norm`` (``grad_norm:p2``) and ``debug_grad_summaries`` (required by the
            latter); ``None``: no summaries.
        summary_frequency: write them on every N-th update, counted from the first (an int
            >= 1, default 100).
        classes: keyword-only; a dict of name -> class for optimizer classes of your own:
            a config's ``{"class": "mypkg.Lion"}`` means ``classes["mypkg.Lion"]``. Names in a
            config are looked up, never imported (default: trainop's and ``torch.optim``'s
            classes only).

    Example::

        updater = trainop.Updater({"optimizer": {"class": "adam"},
                                   "gradient_clip_global_norm": 5.0,
                                   "accum_grad_multiple_step": 2}, model)
        for x, y in data:
            result = updater.step(loss_fn(model(x), y))
    """

    def __init__(self, config: Any, model: Any, initial_learning_rate: float | None = None,
                 *, summary_writer: Any = None, summary_frequency: int = 100,
                 classes: Any = None) -> None:
        options, unresolved = read_config(config)
        classes = check_classes(classes)  # names a config may use for the caller's classes
        options["optimizer"] = with_classes(options["optimizer"], classes)
        if isinstance(options["updater_opts"], dict):
            options["updater_opts"] = {
                k: {**v, "optimizer": with_classes(v["optimizer"], classes)}
                if isinstance(v, dict) and "optimizer" in v else v
                for k, v in options["updater_opts"].items()}
        if isinstance(summary_frequency, bool) or not isinstance(summary_frequency, int) \
                or summary_frequency < 1:
            raise ValueError(f"Expected `summary_frequency` to be an int >= 1, got "
                             f"{summary_frequency!r}")
        if options["debug_grad_summaries"] and summary_writer is None:
            raise ValueError("Expected a `summary_writer` (a SummaryWriter or a log directory) "
                             "with `debug_grad_summaries`: the summaries are written there")
        if not isinstance(options["backend"], str) or options["backend"] not in BACKENDS:
            raise ValueError(f"Expected `backend` to be one of {sorted(BACKENDS)}, got "
                             f"{options['backend']!r}")
        options["backend"] = BACKENDS[options["backend"]]
        torch_backend = self._torch = options["backend"] == "torch"
        if options["use_horovod"] and options["horovod_reduce_type"] != "grad":
            raise ValueError(f"The Updater supports horovod_reduce_type='grad' (gradients "
                             f"reduced every step) only, got "
                             f"{options['horovod_reduce_type']!r}: RETURNN's 'param' "
                             f"(parameter averaging every horovod_param_sync_step steps) is its "
                             f"engine's, between updates, not its updater's")
        if options["debug_add_check_numerics_on_output"] and not isinstance(
                model, torch.nn.Module):
            raise ValueError("Expected a torch.nn.Module as `model` with "
                             "`debug_add_check_numerics_on_output` (its outputs are checked), "
                             "got a list of parameters")
        self._options = options
        self.log_grad_norm_p = log_grad_norm_p(options["log_grad_norm"], torch_backend)
        self._log_grad_norm = self.log_grad_norm_p is not None
        self._instance = optimizer_instance(options, torch_backend)
        _norm_tag(options)
        if options["decouple_constraints"] and options["decouple_constraints_factor"] is None \
                and not torch_backend:  # RETURNN's TF updater multiplies by it (then unused)
            raise TypeError("Expected `decouple_constraints_factor` to be a number with "
                            "`decouple_constraints` (RETURNN's TF updater keeps a None and "
                            "fails multiplying by it), got None")
        self._maximize = check_real("maximize_grad_norm", _number(options, "maximize_grad_norm"),
                                    NON_NEGATIVE)
        self.last_grad_norm: torch.Tensor | None = None
        self.unresolved = unresolved
        self._spec = optimizer_spec(options)  # validated now; the optimizer is built lazily
        for key in GROUP_KEYS:
            if self._spec[3] is None and (options[key] is not None or key in self._spec[1]):
                raise ValueError(f"Expected no `{key}` with a trainop optimizer and "
                                 f"backend='tf' (TF decays every variable): the PyTorch "
                                 f"backend's weight-decay groups need backend='torch' or a "
                                 f"torch.optim class (e.g. {{'class': 'torch.optim.AdamW', "
                                 f"'weight_decay': 0.01}})")
        self._accum = accum_steps(options["accum_grad_multiple_step"], torch_backend)
        _count(options, "num_allowed_consec_invalid_gradient_steps")
        self._model = model if isinstance(model, torch.nn.Module) else None
        self._trainable = _parameters(model)
        if self._instance is not None:
            check_instance_params(self._instance, self._trainable)
        self._overrides = _check_overrides(options["updater_opts"], self._model)
        like = self._trainable[0] if self._trainable else None
        if self._instance is None:  # the whole optimizer config checked now, not at step 1
            check_optimizer(self._spec, like)
        for overrides in self._overrides.values():
            if "optimizer" in overrides:
                check_optimizer(self._override_spec(overrides), like)
        self._tagged = _check_tags(options, self._overrides)
        base = options["learning_rate"] if initial_learning_rate is None \
            else initial_learning_rate
        self._base_lr = check_real("learning_rate", base, NON_NEGATIVE)
        device = self._trainable[0].device
        self._lr = torch.tensor(self._base_lr, dtype=torch.float32, device=device)
        self._dynamic = self._dynamic_lr(options["dynamic_learning_rate"])
        self.global_train_step = torch.zeros((), dtype=_I64)
        self._step_count = 0  # host mirror of global_train_step (decides the update steps)
        self.epoch, self.epoch_continuous = 1, 0.0  # RETURNN's initial values
        self._optimizer = None
        self._groups: list[_Step] | None = None
        self._groups_before: list[_Step] | None = None
        self._checker = None
        self._summary_frequency = summary_frequency
        self._updates = 0  # update attempts (summaries are written on every N-th)
        self._writer = open_writer(summary_writer)  # opened last: a rejected call makes none

    # ------------------------------------------------------------------ learning rate
    def _dynamic_lr(self, dynamic: Any) -> Callable[[torch.Tensor], torch.Tensor] | None:
        if dynamic is None or dynamic is False:
            return None
        if isinstance(dynamic, Unresolved):
            raise ValueError(f"`dynamic_learning_rate` is a function in the config ({dynamic}): "
                             f"pass it from Python (config dict), or from the command line "
                             f"--set dynamic_learning_rate=None for none")
        if callable(dynamic):
            params = inspect.signature(dynamic).parameters
            if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
                raise ValueError("Expected `dynamic_learning_rate` to accept **kwargs (RETURNN "
                                 "asserts it for future compatibility)")
            backend = self._options["backend"]
            refused, why, gets = DYNAMIC_LR_CONVENTIONS[backend]
            if refused in params:
                raise ValueError(f"Expected no `{refused}` argument of `dynamic_learning_rate` "
                                 f"with backend='{backend}' ({why}); it gets {gets}")
            if self._torch:  # RETURNN's torch backend: host numbers, the epoch
                return lambda lr: self._checked_lr(dynamic(
                    global_train_step=self._step_count, epoch=self.epoch,
                    epoch_continuous=self.epoch_continuous, learning_rate=self._base_lr))
            return lambda lr: dynamic(network=self._model, global_train_step=self.global_train_step,
                                      learning_rate=lr)
        if self._torch:
            raise ValueError(f"Expected `dynamic_learning_rate` to be a callable with "
                             f"backend='torch' (RETURNN's torch backend implements no other "
                             f"kind), got {describe(dynamic)}")
        if isinstance(dynamic, dict):
            if set(dynamic) != {"interval", "decay"}:
                raise ValueError(f"Expected `dynamic_learning_rate` as a dict to have exactly the "
                                 f"keys ['decay', 'interval'], got {sorted(dynamic)}")
            interval = check_int("dynamic_learning_rate['interval']", dynamic["interval"],
                                 POSITIVE)
            # a decay above 1 grows the rate up to decay ** (interval - 1) times: to inf
            decay = check_real("dynamic_learning_rate['decay']", dynamic["decay"],
                               Interval(0.0, 1.0, low_closed=False))

            def cyclic(lr: torch.Tensor) -> torch.Tensor:  # lr * decay ** (t mod interval)
                step = torch.remainder(self.global_train_step.to(lr.device), interval)
                return lr * torch.pow(torch.tensor(decay, dtype=torch.float32,
                                                   device=lr.device), step.to(torch.float32))
            return cyclic
        raise TypeError(f"Expected `dynamic_learning_rate` to be a callable, a dict "
                        f"{{'interval', 'decay'}} or None, got {describe(dynamic)}")

    def _checked_lr(self, value: Any) -> float:
        """A torch-backend ``dynamic_learning_rate``'s result: a finite number >= 0 (NaN, inf
        or a negative rate would train on silently; TF's backend refuses them too)."""
        try:
            lr = float(value)
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(f"Expected `dynamic_learning_rate` to return a number, got "
                            f"{describe(value)} at global_train_step {self._step_count}, "
                            f"epoch {self.epoch}") from None
        if not (math.isfinite(lr) and lr >= 0):
            raise ValueError(f"Expected `dynamic_learning_rate` to return a finite learning "
                             f"rate >= 0, got {lr} at global_train_step {self._step_count}, "
                             f"epoch {self.epoch}")
        return lr

    def _lr_fn(self, multiplier: float) -> Callable[[], torch.Tensor]:
        scale = world_size() if self._options["use_horovod"] and \
            self._options["horovod_scale_lr"] else 1

        def lr() -> torch.Tensor:
            value = self._lr if self._dynamic is None else self._dynamic(self._lr)
            return value * (multiplier * scale) if multiplier * scale != 1 else value
        return lr

    def _host_lr(self) -> float:
        """The effective learning rate as a host float, for ``torch.optim`` classes (the base
        rate kept on the host; a ``dynamic_learning_rate`` is evaluated and read, one host
        read per update, as RETURNN's PyTorch backend sets ``group["lr"]``)."""
        scale = world_size() if self._options["use_horovod"] and \
            self._options["horovod_scale_lr"] else 1
        if self._dynamic is None:
            return self._base_lr * scale
        return float(self._dynamic(self._lr)) * scale

    def set_learning_rate(self, value: float) -> None:
        """The base learning rate (RETURNN's learning-rate control sets it once per epoch); the
        device tensor the optimizer reads is updated in place (no host read in a step)."""
        self._base_lr = check_real("value", value, NON_NEGATIVE)
        self._lr.fill_(self._base_lr)
        self._sync_group_lr()

    def _sync_group_lr(self) -> None:
        """Backend torch: every group's ``lr`` follows the effective learning rate at once, as
        RETURNN's torch updater writes it (so a saved ``state_dict`` shows it)."""
        if self._torch and self._groups is not None:
            lr = self._host_lr()
            for g in self._groups:
                g.core.set_lr(lr)

    def get_current_step_learning_rate(self) -> torch.Tensor:
        """The effective learning rate for the current ``global_train_step``."""
        if self._torch:
            return torch.tensor(self._host_lr(), dtype=torch.float64)
        return self._lr_fn(1.0)()

    def get_effective_learning_rate(self) -> float:
        """The effective learning rate as a host float (RETURNN's torch ``Updater`` method)."""
        return self._host_lr()

    def set_current_train_step(self, *, global_train_step: int | None = None, epoch: int,
                               epoch_continuous: float | None = None) -> None:
        """Where the training stands (RETURNN's ``set_current_train_step``, which its engine
        calls at every epoch start and after every micro-step): ``global_train_step``, when
        given, becomes the Updater's step counter; ``epoch`` (1 for the first) and
        ``epoch_continuous`` go to a ``dynamic_learning_rate`` (backend torch). When ``epoch``
        changes, backend torch starts a new accumulation window: the gradients of a partial
        window are dropped and the invalid-gradient counter restarts, as RETURNN's torch engine
        does; backend tf keeps its windows by ``global_train_step`` (RETURNN's TF rule)."""
        if global_train_step is not None and (isinstance(global_train_step, bool) or not isinstance(
                global_train_step, (int, torch.Tensor)) or int(global_train_step) < 0):
            raise ValueError(f"Expected `global_train_step` to be an int >= 0, got "
                             f"{describe(global_train_step)}")
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"Expected `epoch` to be an int >= 0 (RETURNN counts from 1), got "
                             f"{describe(epoch)}")
        if epoch_continuous is not None:
            check_real("epoch_continuous", epoch_continuous, NON_NEGATIVE)
        if epoch != self.epoch and self._torch and self._groups is not None:
            for g in self._groups:
                g.core.drop_pending()
        self.epoch, self.epoch_continuous = epoch, epoch_continuous
        if global_train_step is not None:
            self._step_count = int(global_train_step)
            self.global_train_step.fill_(self._step_count)
        self._sync_group_lr()

    # ------------------------------------------------------------------ the update op
    @staticmethod
    def get_optimizer_class(class_name: Any) -> type:
        """RETURNN's name resolution (``"adam"``, ``"AdamOptimizer"``, a class, a callable
        returning a name; a dotted name such as ``"torch.optim.AdamW"`` is looked up among
        ``torch.optim``'s classes, never imported; a ``torch.optim`` class returned as is)."""
        return resolve_torch_class(class_name, plain_names=False) or resolve_class(class_name)

    @property
    def optimizer(self):
        """The trainop optimizer of the parameters without per-parameter overrides (built on
        first use)."""
        self.get_optim_op()
        return self._optimizer

    @property
    def optimizers(self) -> list:
        """One optimizer per group of parameters with the same options (``updater_opts``), the
        default group first (RETURNN: ``len(updater.optimizers)``)."""
        self.get_optim_op()
        return [g.optimizer for g in self._groups]

    def _group_params(self) -> list[tuple[dict[str, Any], list[torch.Tensor]]]:
        """``(overrides, params)`` per group, the default (no overrides) first; a parameter
        takes the first pattern of ``updater_opts`` its qualified name matches."""
        names = {} if self._model is None else {
            id(p): n for n, p in self._model.named_parameters()}
        groups: dict[str, tuple[dict[str, Any], list[torch.Tensor]]] = {"": ({}, [])}
        for p in self._trainable:
            name = names.get(id(p), "")
            pattern = next((pat for pat in self._overrides if fnmatch.fnmatchcase(name, pat)),
                           None)
            key = "" if pattern is None else repr(sorted(self._overrides[pattern].items(),
                                                         key=lambda kv: kv[0]))
            groups.setdefault(key, (self._overrides.get(pattern, {}), []))[1].append(p)
        return [(o, ps) for o, ps in groups.values() if ps]

    def get_optim_op(self, callback_on_new: Callable[[], None] | None = None):
        """The callable that performs one update step (what ``step`` runs); built lazily and
        rebuilt after ``reset_optim_op``/``set_trainable_vars``; ``callback_on_new()`` when
        (re)built."""
        if self._groups is None:
            previous = [] if self._groups_before is None else \
                [g.optimizer for g in self._groups_before]
            groups = []
            parts = self._group_params()
            for overrides, params in parts:
                options = {**self._options, **overrides}
                spec = self._spec if "optimizer" not in overrides else \
                    self._override_spec(overrides)
                groups.append(_Step(self, options, params, spec, previous,
                                    shared_norm=len(parts) > 1 or self._tagged,
                                    tags=self._group_tags(overrides),
                                    maximize=bool(self._maximize)))
            self._groups = groups
            self._optimizer = groups[0].optimizer
            self._install_checks()
            if callback_on_new is not None:
                callback_on_new()
        return self._run

    def _override_spec(self, overrides: dict[str, Any]):
        """The optimizer of an ``updater_opts`` group: its ``optimizer`` dict; without
        ``"class"``, the default optimizer's class with (only) the dict's options, as RETURNN's TF
        updater."""
        optimizer = overrides["optimizer"]
        if isinstance(optimizer, dict) and optimizer and "class" not in optimizer:
            optimizer = {"class": self._spec[0], **optimizer}
        return optimizer_spec({**self._options, "optimizer": optimizer})

    def _group_tags(self, overrides: dict[str, Any]) -> tuple[str | None, str | None]:
        """``(clip tag, zero tag)`` of a group, as RETURNN reads them per variable:
        ``global_norm_tag`` (``updater_opts`` first, then the config) for
        ``grad_norm_to_clip_to_zero``; ``gradient_clip_global_norm_tag`` (``updater_opts``, the
        config, then that group's ``global_norm_tag``) for the global-norm clip."""
        zero = overrides.get("global_norm_tag", self._options["global_norm_tag"])
        clip = overrides.get("gradient_clip_global_norm_tag",
                             self._options["gradient_clip_global_norm_tag"])
        return (zero if clip is None else clip), zero

    def _install_checks(self) -> None:
        """``debug_add_check_numerics_ops``: trainop's numerics checks on the model and the
        optimizer's updates, installed with the update op (as RETURNN adds them to it);
        ``debug_add_check_numerics_on_output`` alone: the model's outputs and their gradients
        (the forward and backward phases; RETURNN checks the network's output and its
        gradient). The first NaN/Inf raises ``trainop.NumericsError`` naming the phase,
        module, op and step."""
        every = self._options["debug_add_check_numerics_ops"]
        if not (every or self._options["debug_add_check_numerics_on_output"]):
            return
        from trainop.training.numerics.checker import PHASES, NumericsChecker

        if self._checker is not None:
            self._checker.remove()
        print("Adding checks for inf/nan.")
        watched = [self._model] if self._model is not None else []
        self._checker = NumericsChecker(watched, self._optimizer, phases=PHASES if every else (
            "forward", "backward")).install()

    def reset_optim_op(self) -> None:
        """Mark the update op for rebuilding (the optimizer state of parameters that stay is
        kept)."""
        if self._groups is not None and any(g.core.accumulated_micro_steps
                                            for g in self._groups):
            raise ValueError("Expected no gradients waiting in the accumulators when the update "
                             "op is rebuilt; call it at the end of an accumulation window")
        self._groups_before, self._groups = self._groups, None

    def set_trainable_vars(self, trainable_vars: Iterable[torch.Tensor]) -> None:
        """Train only these parameters from now on (e.g. a pretraining stage)."""
        params = _parameters(trainable_vars)
        if params == self._trainable:
            return
        self.reset_optim_op()
        self._trainable = params

    def step(self, loss: torch.Tensor | None = None, *, update: bool | None = None,
             grad_scaler: Any = None) -> StepResult:
        """One micro-step: backward of ``loss``, accumulation, and on update steps the
        post-processing and the update (see the module doc). ``loss=None``: the gradients are
        already in ``.grad`` (the caller ran the backward, as RETURNN's engine does).
        ``update``: ``None`` lets the accumulation rule decide; ``True``/``False`` is the
        caller's decision (RETURNN's torch engine decides it itself). ``grad_scaler``: the
        ``torch.amp.GradScaler`` that scaled the backward of every micro-step of the window
        (RETURNN's torch engine with ``torch_amp``); backend torch only: on the update its
        ``unscale_`` runs on the accumulated gradients first, its ``step`` makes the update
        (skipped where they hold an Inf/NaN) and its ``update`` follows, as RETURNN's torch
        updater calls them."""
        if loss is not None and (not isinstance(loss, torch.Tensor) or loss.dim() != 0
                                 or not loss.requires_grad):
            raise TypeError(f"Expected `loss` to be a 0-dim tensor that requires grad, got "
                            f"{describe(loss)}")
        if loss is None and self._maximize:
            raise ValueError("Expected a `loss` with `maximize_grad_norm` (its second backprop "
                             "runs through the loss), got None")
        if update not in (None, True, False):
            raise TypeError(f"Expected `update` to be None, True or False, got {describe(update)}")
        if grad_scaler is not None:
            if not self._torch:
                raise ValueError(f"Expected no `grad_scaler` with backend 'tf' (RETURNN's TF "
                                 f"updater has no loss scaling), got {describe(grad_scaler)}")
            if not all(callable(getattr(grad_scaler, name, None))
                       for name in ("unscale_", "step", "update")):
                raise TypeError(f"Expected `grad_scaler` to be a torch.amp.GradScaler (with "
                                f"unscale_, step and update), got {describe(grad_scaler)}")
        return self.get_optim_op()(loss, update, grad_scaler)

    def _decide(self, groups: list[_Step], t: int, update: bool | None) -> list[bool]:
        """Per group, whether this micro-step updates: the caller's ``update``; else backend
        torch's window (restarted after each update and at each epoch change; an update when
        it holds ``N`` micro-steps, ``N`` from a callable evaluated now) or backend tf's
        ``t mod N == N - 1`` (``t``: ``global_train_step``)."""
        if update is not None:
            return [update] * len(groups)
        if self._torch:
            n = self._accum
            if callable(n):
                n = check_accum_value(n(epoch=self.epoch, epoch_continuous=self.epoch_continuous,
                                        global_train_step=t))
            return [groups[0].core.accumulated_micro_steps + 1 >= n] * len(groups)
        return [g.n <= 1 or t % g.n == g.n - 1 for g in groups]

    def _run(self, loss: torch.Tensor | None, update: bool | None = None,
             grad_scaler: Any = None) -> StepResult:
        groups = self._groups
        t = self._step_count
        decisions = self._decide(groups, t, update)
        raw_norm = None
        if loss is not None:
            raw_norm = self._backward_maximizing(loss) if self._maximize else loss.backward()
        if groups[0].reduce:
            reduce_grads_in_place(self._trainable, average=groups[0].average)
        norms: dict[str | None, torch.Tensor] = {} if raw_norm is None else {None: raw_norm}

        def g_of(tag: str | None) -> torch.Tensor:
            """G_all (tag None) or G_tag (the parameters whose updater_opts tags hold it), of
            this micro-step's raw gradients; each measured once."""
            if tag not in norms:
                params = self._trainable if tag is None else [
                    p for g in groups if tag in g.tags for p in g.params]
                grads = [p.grad for p in params if p.grad is not None]
                norms[tag] = global_norm(grads) if grads else torch.zeros(
                    (), device=self._lr.device)
            return norms[tag]

        update_now = any(decisions)
        summary = (self._writer is not None and update_now
                   and self._updates % self._summary_frequency == 0
                   and (self._options["debug_grad_summaries"] or self._log_grad_norm))
        if self._log_grad_norm and not self._torch:  # a tensor: read only when logging
            self.last_grad_norm = g_of(None)
        if summary and not self._torch:
            self._summaries(g_of(None))
        for g in groups:  # measured before any group's update changes its gradients
            if g.clip_norm_needed:
                g_of(g.clip_tag)
            if g.zero_norm_needed:
                g_of(g.zero_tag)
        if update_now:
            self._updates += 1
        results = []
        for g, update in zip(groups, decisions, strict=True):
            if not update:
                results.append(g.core.accumulate())
                continue
            if g.torch_class:  # RETURNN's PyTorch backend: torch.optim takes host floats
                results.append(g.core.update(self._host_lr(), t, grad_scaler=grad_scaler))
                if self._log_grad_norm:  # the norm of the accumulated gradients (torch)
                    self.last_grad_norm = g.core.last_grad_norm
                    if summary:
                        updater_summaries([], self.last_grad_norm, debug=False,
                                          log_grad_norm=True, p=self.log_grad_norm_p).write(
                            self._writer, self._step_count)
                continue
            with torch.no_grad():
                for p, l2 in g.decay:
                    p.mul_(1.0 - 2.0 * l2)
            given = g_of(g.clip_tag) if g.clip_norm_needed else (
                g_of(g.zero_tag) if g.zero_norm_needed else None)
            if g.zero_stage is not None:
                g.zero_stage.norm = g_of(g.zero_tag)
            results.append(g.core.update(given_global_norm=given))
            if self._options["num_allowed_consec_invalid_gradient_steps"] is not None \
                    and not bool(results[-1].applied):  # documented host read (abort counter)
                warnings.warn(f"Invalid gradient in step {t}, skipping. {SEED_ADVICE}",
                              RuntimeWarning, stacklevel=3)
        self.global_train_step.add_(1)
        self._step_count += 1
        self.last_results = results
        return results[0]

    def _summaries(self, raw_norm: torch.Tensor) -> None:
        """Write this update's summaries (``returnn.summaries``): the gradients as the update
        sees them before noise and clipping (with accumulation: the window's sum)."""
        names = {} if self._model is None else {
            id(p): n for n, p in self._model.named_parameters()}
        named = []
        for g in self._groups:
            waiting = {id(v): acc for acc, v in g.core._accumulator.pairs()} \
                if g.core.accumulated_micro_steps else {}
            for i, p in enumerate(g.params):
                grad = p.grad
                if id(p) in waiting:
                    grad = waiting[id(p)] if grad is None else waiting[id(p)] + grad
                named.append((names.get(id(p), f"param_{i}"), p, grad))
        updater_summaries(named, raw_norm, debug=bool(self._options["debug_grad_summaries"]),
                          log_grad_norm=self._log_grad_norm).write(self._writer,
                                                                   self._step_count)

    def _backward_maximizing(self, loss: torch.Tensor) -> torch.Tensor:
        """``maximize_grad_norm`` f: g += d(-f * G_all)/dw, G_all the raw gradients' global
        norm (a second backprop through the gradients); returns G_all (detached)."""
        params = self._trainable
        grads = torch.autograd.grad(loss, params, create_graph=True, allow_unused=True)
        used = [(p, g) for p, g in zip(params, grads, strict=True) if g is not None]
        norm = torch.sqrt(sum((g.float() * g.float()).sum() for _, g in used))
        extra = torch.autograd.grad(-self._maximize * norm, [p for p, _ in used],
                                    allow_unused=True)
        with torch.no_grad():
            for (p, g), e in zip(used, extra, strict=True):
                d = g.detach() if e is None else g.detach() + e
                p.grad = d if p.grad is None else p.grad + d
        return norm.detach()

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self, *, partial_window: bool = True) -> dict[str, Any]:
        """Per group the optimizer and the core (accumulators, pipeline counters), plus
        ``global_train_step`` and the base learning rate; loads with
        ``torch.load(weights_only=True)``. ``partial_window=False`` leaves out the gradients
        of a partial accumulation window (saved as none waiting), for a checkpoint resumed
        in a new epoch under backend torch, which drops them (RETURNN's torch engine)."""
        self.get_optim_op()
        return {"groups": [{"optimizer": g.optimizer.state_dict(),
                            "step": g.core.state_dict(pending=partial_window)}
                           for g in self._groups],
                "global_train_step": self.global_train_step.clone(),
                "learning_rate": self._base_lr}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Validate, then load, a ``state_dict`` of an Updater built from the same config."""
        self.get_optim_op()
        keys = {"groups", "global_train_step", "learning_rate"}
        if not isinstance(state, dict) or set(state) != keys:
            raise ValueError(f"Expected an Updater state_dict with keys {sorted(keys)}, got "
                             f"{describe(state)}")
        saved = state["groups"]
        if not isinstance(saved, list) or len(saved) != len(self._groups) or not all(
                isinstance(g, dict) and set(g) == {"optimizer", "step"} for g in saved):
            raise ValueError(f"Expected {len(self._groups)} groups of {{'optimizer', 'step'}} "
                             f"in the Updater state_dict, got {describe(saved)}")
        t = check_count_tensor("global_train_step", state["global_train_step"])
        lr = check_real("learning_rate", state["learning_rate"], NON_NEGATIVE)
        accumulators = []
        for g, s in zip(self._groups, saved, strict=True):  # every group checked, then loaded
            accumulators.append(g.core.check_state_dict(s["step"]))
            validate_loadable(g.optimizer, s["optimizer"])
        for g, s, acc in zip(self._groups, saved, accumulators, strict=True):
            g.optimizer.load_state_dict(s["optimizer"])
            g.core.load_state_dict(s["step"], acc)
        self.global_train_step = t.clone()
        self._step_count = int(t)
        self.set_learning_rate(lr)


PER_PARAMETER_KEYS = ("optimizer", "accum_grad_multiple_step", "gradient_noise", "gradient_clip",
                      "gradient_clip_norm", "gradient_clip_avg_norm",
                      "gradient_clip_global_norm", "global_norm_tag",
                      "gradient_clip_global_norm_tag", "gradient_nan_inf_filter",
                      "grad_norm_to_clip_to_zero", "tags")


def _norm_tag(options: dict[str, Any]) -> None:
    """``global_norm_tag`` / ``gradient_clip_global_norm_tag``: str or None; none with
    ``backend: torch``."""
    for key in ("global_norm_tag", "gradient_clip_global_norm_tag"):
        tag = options[key]
        if tag is not None and options["backend"] == "torch":
            raise ValueError(f"Expected no `{key}` with backend='torch' (RETURNN's PyTorch "
                             f"backend has no tags), got {tag!r}")
        if tag is not None and not isinstance(tag, str):
            raise TypeError(f"Expected `{key}` to be a str, got {describe(tag)}")


def _check_tags(options: dict[str, Any], overrides: dict[str, dict[str, Any]]) -> bool:
    """Every tag a global norm is measured over (config or ``updater_opts``) must be in some
    ``updater_opts`` ``"tags"`` (RETURNN: a ``KeyError`` when the graph is built); returns
    whether any tag is used."""
    declared: set[str] = set()
    for pattern, over in overrides.items():
        tags = over.get("tags") or ()
        if isinstance(tags, str) or not all(isinstance(t, str) for t in tags):
            raise TypeError(f"Expected updater_opts[{pattern!r}]['tags'] to be a list of str, "
                            f"got {describe(tags)}")
        declared.update(tags)
    used = [(key, options[key]) for key in ("global_norm_tag", "gradient_clip_global_norm_tag")]
    for pattern, over in overrides.items():
        for key in ("global_norm_tag", "gradient_clip_global_norm_tag"):
            if key in over:
                if over[key] is not None and not isinstance(over[key], str):
                    raise TypeError(f"Expected updater_opts[{pattern!r}][{key!r}] to be a str, "
                                    f"got {describe(over[key])}")
                used.append((f"updater_opts[{pattern!r}][{key!r}]", over[key]))
    for key, tag in used:
        if tag is not None and tag not in declared:
            raise ValueError(f"Expected `{key}` to be one of the updater_opts tags "
                             f"{sorted(declared)}, got {tag!r} (no parameter carries it)")
    return any(tag is not None for _, tag in used)


def _check_overrides(updater_opts: Any, model: Any) -> dict[str, dict[str, Any]]:
    """``updater_opts``: parameter-name pattern -> option overrides (RETURNN's per-layer
    ``updater_opts``); every key must be one the per-variable processing reads (RETURNN's
    ``assert_all_read``) and every pattern must match a parameter."""
    if updater_opts in (None, {}):
        return {}
    if not isinstance(updater_opts, dict):
        raise TypeError(f"Expected `updater_opts` to be a dict of parameter-name pattern -> "
                        f"option overrides, got {describe(updater_opts)}")
    if not isinstance(model, torch.nn.Module):
        raise ValueError("Expected a torch.nn.Module as `model` with `updater_opts` (its "
                         "parameter names are matched), got a list of parameters")
    names = [n for n, _ in model.named_parameters()]
    for pattern, overrides in updater_opts.items():
        if not isinstance(pattern, str) or not isinstance(overrides, dict):
            raise TypeError(f"Expected `updater_opts` entries of str -> dict, got "
                            f"{describe(pattern)} -> {describe(overrides)}")
        for key in ("maximize_grad_norm", "debug_grad_summaries"):  # RETURNN: per layer too
            if key in overrides:
                raise ValueError(f"Expected `{key}` as a global option, not in "
                                 f"updater_opts[{pattern!r}] (trainop applies it to every "
                                 f"parameter), got {overrides[key]!r}")
        check_keys(overrides, PER_PARAMETER_KEYS, f"updater_opts[{pattern!r}]")
        if not any(fnmatch.fnmatchcase(n, pattern) for n in names):
            raise ValueError(f"Expected updater_opts pattern {pattern!r} to match a parameter "
                             f"name of the model, got no match (names: {names[:8]}...)")
    return dict(updater_opts)


def _parameters(model: Any) -> list[torch.Tensor]:
    params = as_parameters(model, "model")
    if not params:
        raise ValueError("Expected at least one trainable parameter, got none (RETURNN: 'no "
                         "variables to update/optimize')")
    return params
