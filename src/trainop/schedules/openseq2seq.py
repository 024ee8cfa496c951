"""OpenSeq2Seq's learning-rate policies (``open_seq2seq/optimizers/lr_policies.py``), exact.

Each policy exists twice:

- a :class:`~trainop.schedules.Policy` class whose arguments are the upstream function's minus
  ``global_step`` (``PolyDecay(learning_rate, decay_steps, power=1.0, ...)``), evaluated as
  ``policy(global_step)``;
- a function with the upstream signature (``poly_decay(global_step, learning_rate,
  decay_steps, power=1.0, begin_decay_at=0, min_lr=0.0, warmup_steps=0)``) returning the value.

``global_step`` counts applied updates (OpenSeq2Seq does not advance it on accumulation
micro-steps or on steps skipped for overflow). Upstream builds these policies from TF1's decay
functions, so the tensor path follows TF's float32 arithmetic and casts; the Python-int path
computes the same formula in double precision.

The upstream quirks are reproduced (they define the reference schedules) and documented on each
class; the ones that matter most:

- warmup starts at **0** (``lr(0) = 0``, a no-op first update) and reaches ``learning_rate`` at
  ``s = warmup_steps``;
- with a user-supplied ``decay_steps`` and no ``begin_decay_at``, the decay runs *during* warmup
  and the rate drops at ``s = warmup_steps`` (:func:`~trainop.schedules.fill_policy_params`,
  like OpenSeq2Seq's model, sets ``begin_decay_at = warmup_steps`` when it fills ``decay_steps``);
- ``cosine_decay``'s ``min_lr`` is a fraction of the rate and its ``power`` is ignored;
- ``inv_poly_decay`` ignores ``begin_decay_at`` and ``warmup_steps`` and keeps falling below
  ``min_lr`` after ``decay_steps``;
- ``exp_decay``'s ``min_lr`` floor applies at every step, also before ``begin_decay_at``.

Differences from upstream, all on input it accepts and then fails or misbehaves on: every
argument is validated at construction, and ``fixed_lr`` returns a tensor for a tensor step
(upstream returns the Python float whatever the step).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch

from trainop.contract.validation import Interval, check_bool, check_int, check_real

from ._base import (
    NON_NEGATIVE,
    POSITIVE,
    UNIT_CLOSED,
    Number,
    Policy,
    Value,
    _check_dtype,
    _check_increasing_steps,
    _check_nonneg_int,
    _check_optional_str,
    _check_sequence,
    _Decay,
    _register,
)
from .tf1 import _cosine, _exponential, _piecewise, _polynomial

__all__ = [
    "CosineDecay",
    "ExpDecay",
    "FixedLR",
    "InvPolyDecay",
    "PiecewiseConstant",
    "PolyDecay",
    "TransformerPolicy",
    "cosine_decay",
    "exp_decay",
    "fixed_lr",
    "inv_poly_decay",
    "piecewise_constant",
    "poly_decay",
    "transformer_policy",
]

_F32 = torch.float32
_INV_POLY_MIN_LR_FLOOR = 1e-8


def _warmup(ops: Any, k: Any, learning_rate: float, warmup_steps: int) -> Value:
    """``learning_rate * s / W`` for ``s < W`` (0 at s = 0), else ``learning_rate``."""
    if warmup_steps <= 0:
        return learning_rate
    return ops.cond(k < warmup_steps,
                    lambda: ops.div(learning_rate * ops.cast(k), ops.cast(warmup_steps)),
                    lambda: learning_rate)


@_register
class FixedLR(Policy):
    r"""OpenSeq2Seq's ``fixed_lr``: a constant rate.

    .. math:: \mathrm{lr}(s) = \mathrm{learning\_rate}

    Args:
        learning_rate: the rate, in [0, inf).
        dtype: keyword-only, the tensor path's dtype. Default ``torch.float32``.

    Example:
        >>> from trainop.schedules import openseq2seq as os2s
        >>> os2s.FixedLR(0.1)(1000)
        0.1

    Reference: OpenSeq2Seq ``lr_policies.fixed_lr``. Upstream returns the Python float even
    for a tensor step; here a tensor step gives a tensor filled with the rate (same device).
    """

    qualified_name = "openseq2seq.fixed_lr"
    hyperparameters = ("learning_rate",)

    def __init__(self, learning_rate: float, *, dtype: torch.dtype = _F32) -> None:
        super().__init__(dtype=dtype)
        self.learning_rate = check_real("learning_rate", learning_rate, NON_NEGATIVE)

    def _compute(self, ops: Any, k: Any) -> Value:
        return self.learning_rate


@_register
class PiecewiseConstant(Policy):
    r"""OpenSeq2Seq's ``piecewise_constant``: the rate times a factor that changes at boundaries.

    .. math::

        B = \text{boundaries} \,(\times \text{steps\_per\_epoch}),\quad
        V = [\mathrm{lr}, \mathrm{lr} \cdot r_0, \dots, \mathrm{lr} \cdot r_{n-1}],\quad
        \mathrm{lr}(s) = V_i \text{ for } B_{i-1} < s \le B_i

    **The boundary belongs to the earlier interval** (TF's rule): with boundaries ``[10]`` the
    rate changes at step 11. The decay rates multiply the *initial* rate, not the previous one.

    Args:
        learning_rate: initial rate, in [0, inf).
        boundaries: ``n >= 1`` integers ``>= 0``, strictly increasing: steps, or epochs when
            ``steps_per_epoch`` is given.
        decay_rates: ``n`` real factors in [0, inf), one per boundary.
        steps_per_epoch: None (boundaries are steps) or an int in [1, inf) (boundaries are
            epochs). OpenSeq2Seq fills it in when the run length is given in epochs, see
            :func:`~trainop.schedules.fill_policy_params`. Default None.
        dtype: keyword-only, the tensor path's dtype. Default ``torch.float32``.

    Example:
        >>> from trainop.schedules import openseq2seq as os2s
        >>> p = os2s.PiecewiseConstant(0.1, [10, 20], [0.5, 0.25])
        >>> p(10), p(11), p(21)
        (0.1, 0.05, 0.025)

    Reference: OpenSeq2Seq ``lr_policies.piecewise_constant`` over
    ``tf.train.piecewise_constant``. The values ``lr * rate`` are computed in double precision,
    as upstream does in Python, then rounded to ``dtype`` in the tensor path.
    """

    qualified_name = "openseq2seq.piecewise_constant"
    hyperparameters = ("learning_rate", "boundaries", "decay_rates", "steps_per_epoch")

    def __init__(self, learning_rate: float, boundaries: list[int], decay_rates: list[float],
                 steps_per_epoch: int | None = None, *, dtype: torch.dtype = _F32) -> None:
        super().__init__(dtype=dtype)
        self.learning_rate = check_real("learning_rate", learning_rate, NON_NEGATIVE)
        self.boundaries = _check_increasing_steps("boundaries", boundaries)
        rates = _check_sequence("decay_rates", decay_rates)
        self.decay_rates = [check_real(f"decay_rates[{i}]", r, NON_NEGATIVE)
                            for i, r in enumerate(rates)]
        if len(self.decay_rates) != len(self.boundaries):
            raise ValueError(
                f"Expected `decay_rates` to have len(boundaries) = {len(self.boundaries)} "
                f"entries, got {len(self.decay_rates)}"
            )
        if steps_per_epoch is not None:
            steps_per_epoch = check_int("steps_per_epoch", steps_per_epoch, POSITIVE)
        self.steps_per_epoch = steps_per_epoch
        scale = 1 if steps_per_epoch is None else steps_per_epoch
        self._step_boundaries = [scale * b for b in self.boundaries]
        self._values = [self.learning_rate * r for r in [1.0, *self.decay_rates]]

    def _compute(self, ops: Any, k: Any) -> Value:
        return _piecewise(ops, k, self._step_boundaries, self._values)


@_register
class ExpDecay(_Decay):
    r"""OpenSeq2Seq's ``exp_decay``: TF's exponential decay from ``begin_decay_at``, with a floor.

    .. math::

        e(s) = \begin{cases} \mathrm{lr} & s < b \\
        \mathrm{lr} \cdot r^{(s - b)/D} \ (\text{exponent floored if staircase}) & s \ge b
        \end{cases},\qquad \mathrm{lr}(s) = \max(\mathrm{min\_lr}, e(s))

    Args:
        learning_rate: initial rate, in [0, inf).
        decay_steps: ``D``, an int or real number in (0, inf).
        decay_rate: ``r``, in [0, inf).
        use_staircase_decay: floor the exponent. **Required** (no default, as upstream).
        begin_decay_at: ``b``, an int in [0, inf). Default 0.
        min_lr: floor of the rate, in [0, inf). Default 0.0.
        dtype: keyword-only, the tensor path's dtype. Default ``torch.float32``.

    Example:
        >>> from trainop.schedules import openseq2seq as os2s
        >>> p = os2s.ExpDecay(1.0, 10, 0.5, use_staircase_decay=False, begin_decay_at=10,
        ...                   min_lr=0.1)
        >>> p(10), p(20), p(50)
        (1.0, 0.5, 0.1)

    Reference: OpenSeq2Seq ``lr_policies.exp_decay`` over ``tf.train.exponential_decay``.
    Quirk reproduced: the ``min_lr`` floor applies at **every** step, so a ``min_lr`` above
    ``learning_rate`` gives ``min_lr`` from step 0.
    """

    qualified_name = "openseq2seq.exp_decay"
    hyperparameters = ("learning_rate", "decay_steps", "decay_rate", "use_staircase_decay",
                       "begin_decay_at", "min_lr")

    def __init__(self, learning_rate: float, decay_steps: Number, decay_rate: float,
                 use_staircase_decay: bool, begin_decay_at: int = 0, min_lr: float = 0.0, *,
                 dtype: torch.dtype = _F32) -> None:
        super().__init__(learning_rate, decay_steps, dtype=dtype)
        self.decay_rate = check_real("decay_rate", decay_rate, NON_NEGATIVE)
        self.use_staircase_decay = check_bool("use_staircase_decay", use_staircase_decay)
        self.begin_decay_at = _check_nonneg_int("begin_decay_at", begin_decay_at)
        self.min_lr = check_real("min_lr", min_lr, NON_NEGATIVE)

    def _compute(self, ops: Any, k: Any) -> Value:
        begin = self.begin_decay_at
        lr = ops.cond(
            k < begin,
            lambda: self.learning_rate,
            lambda: _exponential(ops, self.learning_rate, k - begin, self.decay_steps,
                                 self.decay_rate, self.use_staircase_decay),
        )
        return ops.maximum(ops.cast(self.min_lr), lr)


class _WarmupDecay(_Decay):
    """PolyDecay and CosineDecay: warmup from 0, then ``_decay`` from ``begin_decay_at``.

    Subclasses set the ranges of ``power`` (None: any real number) and ``min_lr`` and implement
    ``_decay(ops, lr, k)``, the decay of ``lr`` at ``k`` steps after ``begin_decay_at``.
    """

    hyperparameters = ("learning_rate", "decay_steps", "power", "begin_decay_at", "min_lr",
                       "warmup_steps")
    _power_range: ClassVar[Interval | None]
    _min_lr_range: ClassVar[Interval]

    def __init__(self, learning_rate: float, decay_steps: Number, power: float = 1.0,
                 begin_decay_at: int = 0, min_lr: float = 0.0, warmup_steps: int = 0, *,
                 dtype: torch.dtype = _F32) -> None:
        super().__init__(learning_rate, decay_steps, dtype=dtype)
        self.power = check_real("power", power, self._power_range)
        self.begin_decay_at = _check_nonneg_int("begin_decay_at", begin_decay_at)
        self.min_lr = check_real("min_lr", min_lr, self._min_lr_range)
        self.warmup_steps = _check_nonneg_int("warmup_steps", warmup_steps)

    def _compute(self, ops: Any, k: Any) -> Value:
        base = _warmup(ops, k, self.learning_rate, self.warmup_steps)
        begin = self.begin_decay_at
        return ops.cond(k < begin, lambda: base, lambda: self._decay(ops, base, k - begin))

    def _decay(self, ops: Any, lr: Value, k: Any) -> Value:  # pragma: no cover - abstract
        raise NotImplementedError


@_register
class PolyDecay(_WarmupDecay):
    r"""OpenSeq2Seq's ``poly_decay``: linear warmup from 0, then polynomial decay to ``min_lr``.

    .. math::

        w(s) = \begin{cases} \mathrm{lr} \cdot s / W & W > 0,\ s < W \\
        \mathrm{lr} & \text{otherwise} \end{cases}

        \mathrm{lr}(s) = \begin{cases} w(s) & s < b \\
        (w(s) - \mathrm{min\_lr}) \cdot (1 - \min(s - b, D)/D)^{\mathrm{power}} + \mathrm{min\_lr}
        & s \ge b \end{cases}

    Args:
        learning_rate: peak rate, in [0, inf).
        decay_steps: ``D``, an int or real number in (0, inf).
        power: in [0, inf). Default 1.0.
        begin_decay_at: ``b``, an int in [0, inf). Default 0.
        min_lr: final rate (TF's ``end_learning_rate``), in [0, inf). Default 0.0.
        warmup_steps: ``W``, an int in [0, inf). Default 0 (no warmup).
        dtype: keyword-only, the tensor path's dtype. Default ``torch.float32``.

    Example:
        >>> from trainop.schedules import openseq2seq as os2s
        >>> p = os2s.PolyDecay(1.0, decay_steps=90, warmup_steps=10, begin_decay_at=10)
        >>> p(0), p(5), p(10), p(55), p(100)
        (0.0, 0.5, 1.0, 0.5, 0.0)

    Reference: OpenSeq2Seq ``lr_policies.poly_decay`` over ``tf.train.polynomial_decay``.
    Quirks reproduced: warmup starts at 0 (``lr(0) = 0``); ``begin_decay_at`` is **not**
    raised to ``warmup_steps``, so without it the decay runs during warmup (the warmup ramp
    is multiplied by the decay factor) and the rate drops at ``s = W`` from ``lr * (W - 1) / W
    * decay`` to ``lr * decay``. :func:`~trainop.schedules.fill_policy_params` sets
    ``begin_decay_at = warmup_steps`` when it fills ``decay_steps``, as OpenSeq2Seq's model does.
    """

    qualified_name = "openseq2seq.poly_decay"
    _power_range = NON_NEGATIVE
    _min_lr_range = NON_NEGATIVE

    def _decay(self, ops: Any, lr: Value, k: Any) -> Value:
        return _polynomial(ops, lr, k, self.decay_steps, self.min_lr, self.power, cycle=False)


@_register
class CosineDecay(_WarmupDecay):
    r"""OpenSeq2Seq's ``cosine_decay``: linear warmup from 0, then TF's cosine decay.

    .. math::

        \mathrm{lr}(s) = \begin{cases} w(s) & s < b \\
        w(s) \cdot \big((1 - m) \cdot \tfrac12 (1 + \cos(\pi \min(s - b, D)/D)) + m\big)
        & s \ge b \end{cases}

    with the warmup ramp ``w(s)`` of :class:`PolyDecay` and ``m = min_lr``.

    Args:
        learning_rate: peak rate, in [0, inf).
        decay_steps: ``D``, an int or real number in (0, inf).
        power: any real number; **ignored** (upstream accepts and ignores it). Default 1.0.
        begin_decay_at: ``b``, an int in [0, inf). Default 0.
        min_lr: the final rate **as a fraction** of ``learning_rate`` (TF's ``alpha``), in
            [0, 1]. Default 0.0.
        warmup_steps: ``W``, an int in [0, inf). Default 0 (no warmup).
        dtype: keyword-only, the tensor path's dtype. Default ``torch.float32``.

    Example:
        >>> from trainop.schedules import openseq2seq as os2s
        >>> p = os2s.CosineDecay(0.5, decay_steps=100, min_lr=0.1)
        >>> p(0), round(p(50), 6), round(p(100), 6)   # ends at 0.5 * 0.1, not at 0.1
        (0.5, 0.275, 0.05)

    Reference: OpenSeq2Seq ``lr_policies.cosine_decay`` over ``tf.train.cosine_decay``.
    Quirks reproduced: ``min_lr`` is a fraction, not an absolute floor; ``power`` is ignored;
    warmup starts at 0 and overlaps the decay unless ``begin_decay_at >= warmup_steps`` (see
    :class:`PolyDecay`).
    """

    qualified_name = "openseq2seq.cosine_decay"
    _power_range = None
    _min_lr_range = UNIT_CLOSED

    def _decay(self, ops: Any, lr: Value, k: Any) -> Value:
        return _cosine(ops, lr, k, self.decay_steps, self.min_lr)


@_register
class TransformerPolicy(Policy):
    r"""OpenSeq2Seq's ``transformer_policy`` ("noam"): linear warmup, then ``1/sqrt(step)`` decay.

    .. math::

        \mathrm{lr}(s) = \mathrm{lr} \cdot c \cdot d^{-1/2} \cdot
        \min\big((s + 1) \cdot W^{-3/2},\ (s + 1)^{-1/2}\big),
        \quad \text{then } \min(\mathrm{max\_lr}, \cdot) \text{ if max\_lr is given}

    The peak is at ``s + 1 = W``, with value ``lr * c / sqrt(d * W)``.

    Args:
        learning_rate: scale factor, in [0, inf).
        d_model: ``d``, the model width, an int in [1, inf).
        warmup_steps: ``W``, an int in [0, inf) (0: no warmup, pure ``1/sqrt(s + 1)``).
        max_lr: None, or a cap in [0, inf). Default None.
        coefficient: ``c``, in [0, inf). Default 1.0.
        dtype: the tensor path's dtype (upstream's ``dtype=tf.float32``). Default
            ``torch.float32``.

    Example:
        >>> from trainop.schedules import openseq2seq as os2s
        >>> p = os2s.TransformerPolicy(2.0, d_model=512, warmup_steps=100)
        >>> round(p(99), 7), round(p(199), 7)
        (0.0088388, 0.00625)

    Reference: OpenSeq2Seq ``lr_policies.transformer_policy``; Vaswani et al., "Attention Is
    All You Need" (2017), eq. 3. Quirks reproduced: the step is offset by one (``s + 1``), so
    step 0 already has a nonzero rate ``lr * c / sqrt(d) * W^{-3/2}`` and the peak is at
    ``s = W - 1``; ``c * d^{-1/2}`` is computed in double precision before the float32
    multiply, as upstream does in Python.
    """

    qualified_name = "openseq2seq.transformer_policy"
    hyperparameters = ("learning_rate", "d_model", "warmup_steps", "max_lr", "coefficient",
                       "dtype")

    def __init__(self, learning_rate: float, d_model: int, warmup_steps: int,
                 max_lr: float | None = None, coefficient: float = 1.0,
                 dtype: torch.dtype = _F32) -> None:
        super().__init__(dtype=_check_dtype("dtype", dtype))
        self.learning_rate = check_real("learning_rate", learning_rate, NON_NEGATIVE)
        self.d_model = check_int("d_model", d_model, POSITIVE)
        self.warmup_steps = _check_nonneg_int("warmup_steps", warmup_steps)
        if max_lr is not None:
            max_lr = check_real("max_lr", max_lr, NON_NEGATIVE)
        self.max_lr = max_lr
        self.coefficient = check_real("coefficient", coefficient, NON_NEGATIVE)

    def _compute(self, ops: Any, k: Any) -> Value:
        s1 = ops.cast(k) + 1
        ws = ops.cast(self.warmup_steps)
        scale = self.coefficient * self.d_model ** -0.5
        decay = scale * ops.minimum(s1 * ops.pow(ws, -1.5), ops.pow(s1, -0.5))
        lr = decay * ops.cast(self.learning_rate)
        if self.max_lr is not None:
            lr = ops.minimum(ops.cast(self.max_lr), lr)
        return lr


@_register
class InvPolyDecay(_Decay):
    r"""OpenSeq2Seq's ``inv_poly_decay``: ``lr / (1 + k s)^power``, reaching ``min_lr`` at ``D``.

    .. math::

        m = \min(\max(\mathrm{min\_lr}, 10^{-8}), \mathrm{lr}),\quad
        k = \frac{(\mathrm{lr}/m)^{1/\mathrm{power}} - 1}{D},\quad
        \mathrm{lr}(s) = \frac{\mathrm{lr}}{(1 + k s)^{\mathrm{power}}}

    Args:
        learning_rate: initial rate, in (0, inf).
        decay_steps: ``D``, an int or real number in (0, inf).
        min_lr: the rate at ``s = D``, in [0, inf); clamped into ``[1e-8, learning_rate]``
            (so ``min_lr >= learning_rate`` gives a constant rate). Required.
        power: in (0, inf) (upstream raises for ``power <= 0``). Default 1.0.
        begin_decay_at: an int in [0, inf); **ignored**. Default 0.
        warmup_steps: an int in [0, inf); **ignored**. Default 0.
        name: a string, upstream's op-name scope; only shown in ``repr``.
            Default ``"learning_rate"``.
        dtype: keyword-only, the tensor path's dtype. Default ``torch.float32``.

    Example:
        >>> from trainop.schedules import openseq2seq as os2s
        >>> p = os2s.InvPolyDecay(1.0, decay_steps=100, min_lr=0.01, power=2.0)
        >>> round(p(100), 8), round(p(1000), 8)   # no floor after decay_steps
        (0.01, 0.00012076)

    Reference: OpenSeq2Seq ``lr_policies.inv_poly_decay``. Quirks reproduced: equals ``m``
    exactly at ``s = D`` and **keeps falling below it** afterwards (``min_lr`` is not a floor);
    ``begin_decay_at`` and ``warmup_steps`` are accepted and ignored (but
    :func:`~trainop.schedules.fill_policy_params` still uses them when it fills
    ``decay_steps``, as OpenSeq2Seq's model does); ``k`` is computed in double precision.
    """

    qualified_name = "openseq2seq.inv_poly_decay"
    hyperparameters = ("learning_rate", "decay_steps", "min_lr", "power", "begin_decay_at",
                       "warmup_steps", "name")
    _learning_rate_range = POSITIVE  # upstream divides by it

    def __init__(self, learning_rate: float, decay_steps: Number, min_lr: float,
                 power: float = 1.0, begin_decay_at: int = 0, warmup_steps: int = 0,
                 name: str = "learning_rate", *, dtype: torch.dtype = _F32) -> None:
        super().__init__(learning_rate, decay_steps, dtype=dtype)
        self.min_lr = check_real("min_lr", min_lr, NON_NEGATIVE)
        self.power = check_real("power", power, POSITIVE)
        self.begin_decay_at = _check_nonneg_int("begin_decay_at", begin_decay_at)
        self.warmup_steps = _check_nonneg_int("warmup_steps", warmup_steps)
        self.name = _check_optional_str("name", name)
        m = min(max(self.min_lr, _INV_POLY_MIN_LR_FLOOR), self.learning_rate)
        self._scale = (math.pow(self.learning_rate / m, 1.0 / self.power) - 1.0) / decay_steps

    def _compute(self, ops: Any, k: Any) -> Value:
        denom = ops.pow(1.0 + self._scale * ops.cast(k), ops.cast(self.power))
        return ops.div(ops.cast(self.learning_rate), denom)


# --------------------------------------------------------------------------------------------
# Functions with the upstream signatures
# --------------------------------------------------------------------------------------------


def fixed_lr(global_step: int | torch.Tensor, learning_rate: float) -> float | torch.Tensor:
    """``learning_rate`` at every step; see :class:`FixedLR`.

    Example:
        >>> from trainop.schedules import openseq2seq as os2s
        >>> os2s.fixed_lr(7, learning_rate=0.1)
        0.1

    Reference: OpenSeq2Seq ``lr_policies.fixed_lr``.
    """
    return FixedLR(learning_rate)(global_step)


def piecewise_constant(global_step: int | torch.Tensor, learning_rate: float,
                       boundaries: list[int], decay_rates: list[float],
                       steps_per_epoch: int | None = None) -> float | torch.Tensor:
    """``learning_rate`` times a factor that changes after each boundary; see
    :class:`PiecewiseConstant`.

    Example:
        >>> from trainop.schedules import openseq2seq as os2s
        >>> os2s.piecewise_constant(31, 0.1, [10, 20], [0.5, 0.25], steps_per_epoch=3)
        0.05

    Reference: OpenSeq2Seq ``lr_policies.piecewise_constant``.
    """
    return PiecewiseConstant(learning_rate, boundaries, decay_rates, steps_per_epoch)(global_step)


def exp_decay(global_step: int | torch.Tensor, learning_rate: float, decay_steps: Number,
              decay_rate: float, use_staircase_decay: bool, begin_decay_at: int = 0,
              min_lr: float = 0.0) -> float | torch.Tensor:
    """Exponential decay from ``begin_decay_at`` with a ``min_lr`` floor; see :class:`ExpDecay`.

    Example:
        >>> from trainop.schedules import openseq2seq as os2s
        >>> os2s.exp_decay(20, 1.0, 10, 0.5, use_staircase_decay=True)
        0.25

    Reference: OpenSeq2Seq ``lr_policies.exp_decay``.
    """
    return ExpDecay(learning_rate, decay_steps, decay_rate, use_staircase_decay, begin_decay_at,
                    min_lr)(global_step)


def poly_decay(global_step: int | torch.Tensor, learning_rate: float, decay_steps: Number,
               power: float = 1.0, begin_decay_at: int = 0, min_lr: float = 0.0,
               warmup_steps: int = 0) -> float | torch.Tensor:
    """Warmup from 0, then polynomial decay to ``min_lr``; see :class:`PolyDecay`.

    Example:
        >>> from trainop.schedules import openseq2seq as os2s
        >>> os2s.poly_decay(50, 1.0, decay_steps=100)
        0.5

    Reference: OpenSeq2Seq ``lr_policies.poly_decay``.
    """
    return PolyDecay(learning_rate, decay_steps, power, begin_decay_at, min_lr,
                     warmup_steps)(global_step)


def cosine_decay(global_step: int | torch.Tensor, learning_rate: float, decay_steps: Number,
                 power: float = 1.0, begin_decay_at: int = 0, min_lr: float = 0.0,
                 warmup_steps: int = 0) -> float | torch.Tensor:
    """Warmup from 0, then cosine decay to ``min_lr * learning_rate``; see :class:`CosineDecay`.

    Example:
        >>> from trainop.schedules import openseq2seq as os2s
        >>> os2s.cosine_decay(100, 1.0, decay_steps=100)
        0.0

    Reference: OpenSeq2Seq ``lr_policies.cosine_decay``.
    """
    return CosineDecay(learning_rate, decay_steps, power, begin_decay_at, min_lr,
                       warmup_steps)(global_step)


def transformer_policy(global_step: int | torch.Tensor, learning_rate: float, d_model: int,
                       warmup_steps: int, max_lr: float | None = None, coefficient: float = 1.0,
                       dtype: torch.dtype = _F32) -> float | torch.Tensor:
    """The Transformer ("noam") schedule; see :class:`TransformerPolicy`.

    Example:
        >>> from trainop.schedules import openseq2seq as os2s
        >>> os2s.transformer_policy(60, 2.0, 512, 100, max_lr=0.005)
        0.005

    Reference: OpenSeq2Seq ``lr_policies.transformer_policy``.
    """
    return TransformerPolicy(learning_rate, d_model, warmup_steps, max_lr, coefficient,
                             dtype)(global_step)


def inv_poly_decay(global_step: int | torch.Tensor, learning_rate: float, decay_steps: Number,
                   min_lr: float, power: float = 1.0, begin_decay_at: int = 0,
                   warmup_steps: int = 0, name: str = "learning_rate") -> float | torch.Tensor:
    """``learning_rate / (1 + k * global_step) ** power``; see :class:`InvPolyDecay`.

    Example:
        >>> from trainop.schedules import openseq2seq as os2s
        >>> round(os2s.inv_poly_decay(10, 1.0, 100, min_lr=0.01, power=2.0), 7)
        0.2770083

    Reference: OpenSeq2Seq ``lr_policies.inv_poly_decay``.
    """
    return InvPolyDecay(learning_rate, decay_steps, min_lr, power, begin_decay_at, warmup_steps,
                        name)(global_step)
