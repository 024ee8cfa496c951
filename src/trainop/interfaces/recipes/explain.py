"""A recipe in words: the gradient pipeline in its order, the learning-rate schedule as
``(step, lr)`` rows, and warnings (``trainop check-config`` prints them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from trainop.interfaces.recipes import openseq2seq
from trainop.interfaces.recipes.recipe import Recipe
from trainop.training.returnn.updater import SEED_ADVICE

__all__ = ["Schedule", "optimizer_modes", "pipeline_steps", "schedule", "warnings_for"]


def _fmt(value: Any) -> str:
    return getattr(value, "__name__", None) or repr(value)


def optimizer_modes(recipe: Recipe) -> list[str]:
    """Where the optimizer's behaviour was chosen for an OpenSeq2Seq recipe, and why: the
    upstream behaviour the importer selected (``openseq2seq.UPSTREAM_BEHAVIOUR``), or the
    recipe's own override of it."""
    if recipe.builds != "TrainOp" or recipe.optimizer_class is None:
        return []
    o = recipe.options
    chosen = openseq2seq.upstream_choices(o)
    out = [f"{arg}={value!r} (OpenSeq2Seq's behaviour, chosen for this recipe: {why})"
           for arg, (value, why) in chosen.items()]
    for base, choices in openseq2seq.UPSTREAM_BEHAVIOUR.items():
        if not issubclass(recipe.optimizer_class, base):
            continue
        for arg, (value, _) in choices.items():
            given = o["optimizer_params"].get(arg, value)
            if arg not in chosen and given != value:
                out.append(f"{arg}={given!r} (set by the recipe; OpenSeq2Seq's code behaves "
                           f"as {arg}={value!r})")
    return out


def pipeline_steps(recipe: Recipe) -> list[str]:
    """What one training step does with the gradients, in order."""
    o = recipe.options
    if recipe.builds == "TrainOp":
        mixed = o["dtype"] == "mixed"
        steps = ["loss = float32(model loss)" + (
            f" + {_fmt(o['regularizer'])}({o['regularizer_params']}) on weights"
            if o["regularizer"] is not None else "")]
        steps.append(f"backward of loss * S (loss scale {o['loss_scaling']!r})" if mixed
                     else "backward of loss")
        if mixed:
            steps.append("float16 gradients to float32 masters" + (
                ", regularization gradient of float16 weights added in float32"
                if o["regularizer"] is not None else "") + ", 1/S pending")
        if o["iter_size"] > 1:
            steps.append(f"accumulate g/{o['iter_size']} over iter_size={o['iter_size']} "
                         f"micro-steps (update on micro-steps k % {o['iter_size']} == 0)")
        if o["use_horovod"]:
            steps.append("average over torch.distributed ranks (use_horovod)")
        steps.append("global_gradient_norm (float32)")
        if o["max_grad_norm"] is not None:
            steps.append(f"clip by global norm {o['max_grad_norm']} (max_grad_norm)")
        if o["larc_params"] is not None:
            steps.append(f"LARC {dict(o['larc_params'])}")
        if mixed:
            steps.append("overflow check: skip the update on Inf/NaN, loss-scale update")
        steps.append(f"{_fmt(recipe.optimizer_class)} update"
                     + (" on float32 masters, copied back" if mixed else "")
                     + "; global_step += 1 when applied")
        return steps
    cls = recipe.optimizer_class
    if isinstance(cls, type) and cls.__module__.startswith("torch.optim"):
        return _torch_steps(o, cls)
    steps = ["backward of loss"]
    n = o["accum_grad_multiple_step"] or 0
    if o["gradient_clip_global_norm"] or o["grad_norm_to_clip_to_zero"]:
        steps.append("G = global norm of this micro-step's raw gradients")
    if n > 1:
        steps.append(f"accumulate by sum over accum_grad_multiple_step={n} (update when "
                     f"global_train_step % {n} == {n - 1})")
    if o["use_horovod"]:
        steps.append("average over torch.distributed ranks (use_horovod)")
    if o["decouple_constraints"]:
        steps.append("decoupled L2 on parameters with RETURNN_constraint_L2")
    for key, text in (("gradient_noise", "add Gaussian noise, stddev {}"),
                      ("gradient_clip", "clip values to [-{0}, {0}]"),
                      ("gradient_clip_norm", "clip each gradient's norm to {}"),
                      ("gradient_clip_avg_norm", "clip each gradient's average norm to {}"),
                      ("gradient_clip_global_norm", "clip by global norm {} (using G)"),
                      ("gradient_nan_inf_filter", "replace NaN/Inf gradients by 0"),
                      ("grad_norm_to_clip_to_zero", "zero the gradients when G > {}"),
                      ("num_allowed_consec_invalid_gradient_steps",
                       "skip non-finite steps, abort after {} in a row")):
        value = o[key]
        if value not in (None, False, 0, 0.0):
            steps.append(f"{text.format(value)} ({key})")
    steps.append(f"{_fmt(recipe.optimizer_class)} update; global_train_step += 1")
    return steps


def _torch_steps(o: dict[str, Any], cls: type) -> list[str]:
    """RETURNN's PyTorch-backend update for a ``torch.optim`` class (``torch_step``)."""
    n = o["accum_grad_multiple_step"] or 0
    steps = ["backward of loss"]
    if n > 1:
        steps.append(f"accumulate by sum over accum_grad_multiple_step={n}")
    for key, text in (("gradient_noise", "add truncated Gaussian noise, stddev {}"),
                      ("gradient_clip", "clip_grad_value_({})"),
                      ("gradient_clip_global_norm", "clip_grad_norm_({}), the norm measured "
                                                    "here"),
                      ("num_allowed_consec_invalid_gradient_steps",
                       "skip non-finite steps, abort after {} in a row")):
        if o[key] not in (None, False, 0, 0.0):
            steps.append(f"{text.format(o[key])} ({key})")
    steps.append(f"every group's lr set, {cls.__name__}.step() (RETURNN's PyTorch backend: "
                 f"weight-decay groups, docs/updater.md); global_train_step += 1")
    return steps


class Schedule:
    """The learning rate of a recipe: ``rows`` of ``(x, lr)``; ``unit`` ``"step"`` or
    ``"epoch"``; ``curve(xs)`` evaluates the rate on many points (for the plot);
    ``description`` names the rule."""

    def __init__(self, unit: str, description: str, curve: Callable[[list[int]], list[float]],
                 points: list[int], last: int, notes: list[str]) -> None:
        self.unit, self.description, self.curve = unit, description, curve
        self.last, self.notes = last, notes
        self.rows = list(zip(points, curve(points), strict=True))


def _points(last: int, extra: list[int]) -> list[int]:
    marks = {_tenth(last * k) for k in range(11)} | {e for e in extra if 0 <= e <= last}
    return sorted(marks)


def _tenth(n: int) -> int:
    """``round(n / 10)`` (half to even) in integers: exact where ``n / 10`` is not (2**63)."""
    q, r = divmod(n, 10)
    return q + (r > 5 or (r == 5 and q % 2 == 1))


def schedule(recipe: Recipe, num_steps: int | None = None,
             steps_per_epoch: int | None = None) -> Schedule:
    """The recipe's learning rate as the optimizer sees it (float32, the policy's tensor
    path), over the run (``num_steps``, else the config's ``max_steps`` / ``num_epochs``)."""
    o = recipe.options
    if recipe.builds != "TrainOp":
        return _returnn_schedule(recipe)
    notes = []
    unit = "step"
    length = openseq2seq.run_length(o, num_steps, steps_per_epoch)
    if not length and o["num_epochs"] is not None:
        unit, length = "epoch", {"num_epochs": o["num_epochs"], "steps_per_epoch": 1}
        notes.append(f"the config runs num_epochs={o['num_epochs']}: table in epochs (give "
                     f"--steps-per-epoch for steps)")
    if not length:
        raise ValueError("Expected the run length to show the schedule: the config has "
                         "neither max_steps nor num_epochs; give --num-steps")
    last = length.get("num_steps") or length["num_epochs"] * length["steps_per_epoch"]
    filled = dict(o["lr_policy_params"])
    if openseq2seq._needs_run_length(o["lr_policy"], filled, "num_epochs" in length):
        filled = openseq2seq.fill_for_run(o["lr_policy"], filled, length)
        added = {k: v for k, v in filled.items() if k not in o["lr_policy_params"]
                 or o["lr_policy_params"][k] != v}
        notes.append(f"filled from the run length as OpenSeq2Seq does: {added}")
    lr = openseq2seq.learning_rate_fn(o["lr_policy"], filled)

    def curve(xs: list[int]) -> list[float]:
        values = lr(torch.tensor(xs, dtype=torch.int64))
        return torch.as_tensor(values, dtype=torch.float32).expand(len(xs)).tolist()

    extra = [filled.get("warmup_steps", 0), filled.get("begin_decay_at", 0)]
    description = f"{_fmt(o['lr_policy'])}({filled})"
    return Schedule(unit, description, curve, _points(last, extra), last, notes)


def _returnn_schedule(recipe: Recipe) -> Schedule:
    o = recipe.options
    base = float(o["learning_rate"])
    multiplier = 1.0
    if isinstance(o["optimizer"], dict):
        multiplier = float(o["optimizer"].get("learning_rate_multiplier", 1.0))
    control = o.get("learning_rate_control", "constant")
    if o.get("learning_rates") or control != "constant":
        lrc = recipe.learning_rate_control()
        last = max(lrc.epoch_data, default=0) + 1  # the fixed epochs and the one after
        notes = [] if control == "constant" else [
            f"learning_rate_control={control!r}: epochs without a fixed rate follow the "
            f"scores (here: none yet)"]
        rates = [lrc.get_learning_rate_for_epoch(e) * multiplier for e in range(1, last + 1)]
        return Schedule("epoch", f"learning_rates per epoch, then {control} (x{multiplier})",
                        lambda xs: [rates[min(max(x, 1), last) - 1] for x in xs],
                        list(range(1, last + 1)), last, notes)
    dynamic = o["dynamic_learning_rate"]
    if isinstance(dynamic, dict):
        interval, decay = int(dynamic["interval"]), float(dynamic["decay"])
        return Schedule("step", f"learning_rate * {decay} ** (step % {interval})",
                        lambda xs: [base * multiplier * decay ** (x % interval) for x in xs],
                        _points(interval, []), interval, [])
    notes = [] if dynamic is None else ["dynamic_learning_rate is a function: not evaluated"]
    return Schedule("step", f"constant learning_rate={base} (x{multiplier})",
                    lambda xs: [base * multiplier] * len(xs), [0], 0, notes)


def warnings_for(recipe: Recipe) -> list[str]:
    """Advice on the recipe: its ``notes`` (options listed rather than used), RETURNN's
    epsilon advice, OpenSeq2Seq quirks that apply."""
    o = recipe.options
    out = list(recipe.notes)
    if recipe.builds != "TrainOp":
        optimizer = o["optimizer"] if isinstance(o["optimizer"], dict) else {}
        if optimizer.get("epsilon") == 1e-16:
            out.append(f"epsilon is RETURNN's TF default 1e-16. {SEED_ADVICE}")
        return out
    if o["iter_size"] > 1 and not o["use_horovod"]:
        out.append("iter_size > 1 without use_horovod: OpenSeq2Seq refuses it; trainop "
                   "accumulates on one process")
    if o["dtype"] != "mixed" and o["loss_scaling"] != 1.0:
        out.append(f"loss_scaling={o['loss_scaling']!r} scales the loss only with dtype "
                   f"'mixed' (OpenSeq2Seq's behaviour)")
    cls = recipe.optimizer_class
    if cls is not None and cls.__name__ == "NovoGrad" and o["regularizer"] is not None:
        out.append("NovoGrad with a regularizer: OpenSeq2Seq's docs advise NovoGrad's "
                   "weight_decay instead")
    return out
