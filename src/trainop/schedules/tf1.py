"""TensorFlow 1's learning-rate decay functions (``tf.compat.v1.train.*_decay``), exact.

Each decay exists twice:

- a :class:`~trainop.schedules.Policy` class built once from the hyperparameters, whose
  arguments are TF's minus ``global_step`` (``ExponentialDecay(learning_rate, decay_steps,
  decay_rate, staircase=False, name=None)``), evaluated as ``policy(global_step)``;
- a function with TF's exact signature (``exponential_decay(learning_rate, global_step,
  decay_steps, decay_rate, staircase=False, name=None)``) that returns the value directly.
  (TF 2's eager mode returns a ``functools.partial`` instead; graph-mode TF 1 returned a
  tensor.)

The tensor path computes in float32 with TF's order of operations and TF's casts (hyperparameters
are cast to the learning-rate dtype; ``cosine_decay``'s ``alpha`` is not), so it matches
``tf.compat.v1.train`` to float32 rounding; the Python-int path computes the same formula in
double precision.

Differences from TF, all on invalid input that TF accepts silently: every argument is validated
at construction (``decay_steps > 0``, ``learning_rate >= 0``, ``alpha`` in [0, 1], strictly
increasing integer boundaries, ...); TF's ``name`` is accepted for signature compatibility and
only kept for ``repr``.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from trainop.contract.validation import check_bool, check_real, describe

from ._base import (
    NON_NEGATIVE,
    POSITIVE,
    UNIT_CLOSED,
    Number,
    Policy,
    Value,
    _check_increasing_steps,
    _check_optional_str,
    _check_sequence,
    _check_steps,
    _Decay,
    _register,
)

__all__ = [
    "CosineDecay",
    "CosineDecayRestarts",
    "ExponentialDecay",
    "InverseTimeDecay",
    "LinearCosineDecay",
    "NaturalExpDecay",
    "NoisyLinearCosineDecay",
    "PiecewiseConstant",
    "PolynomialDecay",
    "cosine_decay",
    "cosine_decay_restarts",
    "exponential_decay",
    "inverse_time_decay",
    "linear_cosine_decay",
    "natural_exp_decay",
    "noisy_linear_cosine_decay",
    "piecewise_constant",
    "polynomial_decay",
]

_F32 = torch.float32


# --------------------------------------------------------------------------------------------
# The TF math, written once over `ops` (shared with the OpenSeq2Seq policies, which call TF's
# decay functions with a shifted step and sometimes a tensor learning rate).
# --------------------------------------------------------------------------------------------


def _exponential(ops: Any, lr: Value, k: Any, decay_steps: Number, decay_rate: Value,
                 staircase: bool) -> Value:
    lr = ops.cast(lr)
    p = ops.div(ops.cast(k), ops.cast(decay_steps))
    if staircase:
        p = ops.floor(p)
    return lr * ops.pow(ops.cast(decay_rate), p)


def _polynomial(ops: Any, lr: Value, k: Any, decay_steps: Number, end: Number, power: Number,
                cycle: bool) -> Value:
    lr = ops.cast(lr)
    end = ops.cast(end)
    power = ops.cast(power)
    s = ops.cast(k)
    d = ops.cast(decay_steps)
    if cycle:
        # the first multiple of decay_steps that is >= s; 1 at s == 0
        multiplier = ops.where(s == 0, 1.0, ops.ceil(ops.div(s, d)))
        d = d * multiplier
    else:
        s = ops.minimum(s, d)
    p = ops.div(s, d)
    return (lr - end) * ops.pow(1 - p, power) + end


def _cosine(ops: Any, lr: Value, k: Any, decay_steps: Number, alpha: float) -> Value:
    lr = ops.cast(lr)
    d = ops.cast(decay_steps)
    s = ops.minimum(ops.cast(k), d)
    fraction = ops.div(s, d)
    decayed = 0.5 * (1.0 + ops.cos(math.pi * fraction))
    # TF does not cast alpha: (1 - alpha) is computed in double, then meets the tensor.
    return lr * ((1 - alpha) * decayed + alpha)


# --------------------------------------------------------------------------------------------
# Policies
# --------------------------------------------------------------------------------------------


class _RateDecay(_Decay):
    """The arguments of TF's exponential, natural-exponential and inverse-time decays."""

    hyperparameters = ("learning_rate", "decay_steps", "decay_rate", "staircase", "name")

    def __init__(self, learning_rate: float, decay_steps: Number, decay_rate: float,
                 staircase: bool = False, name: str | None = None, *,
                 dtype: torch.dtype = _F32) -> None:
        super().__init__(learning_rate, decay_steps, dtype=dtype)
        self.decay_rate = check_real("decay_rate", decay_rate, NON_NEGATIVE)
        self.staircase = check_bool("staircase", staircase)
        self.name = _check_optional_str("name", name)


@_register
class ExponentialDecay(_RateDecay):
    r"""TF1's ``exponential_decay``: multiply the rate by ``decay_rate`` every ``decay_steps``.

    .. math::

        p = s / D \quad(\lfloor s / D \rfloor \text{ if staircase}),\qquad
        \mathrm{lr}(s) = \mathrm{learning\_rate} \cdot \mathrm{decay\_rate}^{p}

    Args:
        learning_rate: initial rate, in [0, inf).
        decay_steps: ``D``, an int or real number in (0, inf).
        decay_rate: in [0, inf) (above 1 the rate grows).
        staircase: floor the exponent, so the rate drops at multiples of ``D``. Default False.
        name: accepted for TF compatibility (op name); only shown in ``repr``. Default None.
        dtype: keyword-only, the tensor path's dtype. Default ``torch.float32``.

    Example:
        >>> from trainop.schedules import tf1
        >>> p = tf1.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5, staircase=True)
        >>> p(9), p(10), p(25)
        (0.1, 0.05, 0.025)

    Reference: ``tf.compat.v1.train.exponential_decay`` (TF 1.x; identical in TF 2.21).
    """

    qualified_name = "tf1.exponential_decay"

    def _compute(self, ops: Any, k: Any) -> Value:
        return _exponential(ops, self.learning_rate, k, self.decay_steps, self.decay_rate,
                            self.staircase)


@_register
class NaturalExpDecay(_RateDecay):
    r"""TF1's ``natural_exp_decay``: exponential decay with base ``e^{-decay_rate}``.

    .. math::

        p = s / D \quad(\lfloor s / D \rfloor \text{ if staircase}),\qquad
        \mathrm{lr}(s) = \mathrm{learning\_rate} \cdot (e^{-\mathrm{decay\_rate}})^{p}

    TF computes ``exp(-decay_rate)`` first (in float32) and then raises it to ``p``; trainop
    does the same, which differs from ``exp(-decay_rate * p)`` in the last float32 bits.

    Args:
        learning_rate: initial rate, in [0, inf).
        decay_steps: ``D``, an int or real number in (0, inf).
        decay_rate: in [0, inf).
        staircase: floor the exponent. Default False.
        name: accepted for TF compatibility; only shown in ``repr``. Default None.
        dtype: keyword-only, the tensor path's dtype. Default ``torch.float32``.

    Example:
        >>> from trainop.schedules import tf1
        >>> p = tf1.NaturalExpDecay(1.0, decay_steps=1, decay_rate=1.0)
        >>> round(p(2), 6)
        0.135335

    Reference: ``tf.compat.v1.train.natural_exp_decay``.
    """

    qualified_name = "tf1.natural_exp_decay"

    def _compute(self, ops: Any, k: Any) -> Value:
        base = ops.exp(-ops.cast(self.decay_rate))
        return _exponential(ops, self.learning_rate, k, self.decay_steps, base, self.staircase)


@_register
class InverseTimeDecay(_RateDecay):
    r"""TF1's ``inverse_time_decay``: the rate falls as ``1 / (1 + decay_rate * p)``.

    .. math::

        p = s / D \quad(\lfloor s / D \rfloor \text{ if staircase}),\qquad
        \mathrm{lr}(s) = \frac{\mathrm{learning\_rate}}{1 + \mathrm{decay\_rate} \cdot p}

    Args:
        learning_rate: initial rate, in [0, inf).
        decay_steps: ``D``, an int or real number in (0, inf).
        decay_rate: in [0, inf).
        staircase: floor ``p``. Default False.
        name: accepted for TF compatibility; only shown in ``repr``. Default None.
        dtype: keyword-only, the tensor path's dtype. Default ``torch.float32``.

    Example:
        >>> from trainop.schedules import tf1
        >>> tf1.InverseTimeDecay(1.0, decay_steps=10, decay_rate=0.5)(20)
        0.5

    Reference: ``tf.compat.v1.train.inverse_time_decay``.
    """

    qualified_name = "tf1.inverse_time_decay"

    def _compute(self, ops: Any, k: Any) -> Value:
        lr = ops.cast(self.learning_rate)
        p = ops.div(ops.cast(k), ops.cast(self.decay_steps))
        if self.staircase:
            p = ops.floor(p)
        return ops.div(lr, ops.cast(1.0) + ops.cast(self.decay_rate) * p)


@_register
class PolynomialDecay(_Decay):
    r"""TF1's ``polynomial_decay``: from ``learning_rate`` to ``end_learning_rate`` in ``D`` steps.

    .. math::

        \text{no cycle: } s' = \min(s, D),\ D' = D;\qquad
        \text{cycle: } s' = s,\ D' = D \cdot \max(1, \lceil s / D \rceil)

        \mathrm{lr}(s) = (\mathrm{learning\_rate} - \mathrm{end\_learning\_rate})
        \cdot (1 - s'/D')^{\mathrm{power}} + \mathrm{end\_learning\_rate}

    With ``cycle`` the decay restarts from a longer horizon after each multiple of ``D``
    (at ``s = D`` exactly the rate is ``end_learning_rate``; at ``s = D + 1`` it jumps back up).

    Args:
        learning_rate: initial rate, in [0, inf).
        decay_steps: ``D``, an int or real number in (0, inf).
        end_learning_rate: final rate, in [0, inf). Default 0.0001. May exceed
            ``learning_rate`` (the rate then grows).
        power: in [0, inf). Default 1.0 (linear).
        cycle: restart after ``D`` steps as above. Default False.
        name: accepted for TF compatibility; only shown in ``repr``. Default None.
        dtype: keyword-only, the tensor path's dtype. Default ``torch.float32``.

    Example:
        >>> from trainop.schedules import tf1
        >>> p = tf1.PolynomialDecay(1.0, decay_steps=10, end_learning_rate=0.0, power=1.0)
        >>> p(5), p(10), p(20)
        (0.5, 0.0, 0.0)

    Reference: ``tf.compat.v1.train.polynomial_decay``.
    """

    qualified_name = "tf1.polynomial_decay"
    hyperparameters = ("learning_rate", "decay_steps", "end_learning_rate", "power", "cycle",
                       "name")

    def __init__(self, learning_rate: float, decay_steps: Number,
                 end_learning_rate: float = 0.0001, power: float = 1.0, cycle: bool = False,
                 name: str | None = None, *, dtype: torch.dtype = _F32) -> None:
        super().__init__(learning_rate, decay_steps, dtype=dtype)
        self.end_learning_rate = check_real("end_learning_rate", end_learning_rate, NON_NEGATIVE)
        self.power = check_real("power", power, NON_NEGATIVE)
        self.cycle = check_bool("cycle", cycle)
        self.name = _check_optional_str("name", name)

    def _compute(self, ops: Any, k: Any) -> Value:
        return _polynomial(ops, self.learning_rate, k, self.decay_steps, self.end_learning_rate,
                           self.power, self.cycle)


@_register
class PiecewiseConstant(Policy):
    r"""TF1's ``piecewise_constant``: constant values between step boundaries.

    .. math::

        \mathrm{lr}(s) = \begin{cases} v_0 & s \le b_0 \\ v_i & b_{i-1} < s \le b_i \\
        v_n & s > b_{n-1} \end{cases}

    **A boundary belongs to the earlier interval**: the value changes at step ``b + 1``.

    Args:
        boundaries: ``n >= 1`` integer steps, ``>= 0`` and strictly increasing.
        values: ``n + 1`` real numbers.
        name: accepted for TF compatibility; only shown in ``repr``. Default None.
        dtype: keyword-only, the tensor path's dtype. Default ``torch.float32``.

    Example:
        >>> from trainop.schedules import tf1
        >>> p = tf1.PiecewiseConstant([10, 20], [1.0, 0.5, 0.1])
        >>> p(10), p(11), p(21)
        (1.0, 0.5, 0.1)

    Reference: ``tf.compat.v1.train.piecewise_constant``. TF also accepts float boundaries
    for a float ``x``; here the step is an integer, so boundaries must be integers (TF raises
    for float boundaries with an integer step too). TF does not check that the boundaries
    increase (unsorted ones make several cases true and fail at run time); trainop rejects
    them at construction.
    """

    qualified_name = "tf1.piecewise_constant"
    hyperparameters = ("boundaries", "values", "name")

    def __init__(self, boundaries: list[int], values: list[float], name: str | None = None, *,
                 dtype: torch.dtype = _F32) -> None:
        super().__init__(dtype=dtype)
        self.boundaries = _check_increasing_steps("boundaries", boundaries)
        values = _check_sequence("values", values)
        self.values = [check_real(f"values[{i}]", v) for i, v in enumerate(values)]
        if len(self.values) != len(self.boundaries) + 1:
            raise ValueError(
                f"Expected `values` to have len(boundaries) + 1 = {len(self.boundaries) + 1} "
                f"entries, got {len(self.values)}"
            )
        self.name = _check_optional_str("name", name)

    def _compute(self, ops: Any, k: Any) -> Value:
        return _piecewise(ops, k, self.boundaries, self.values)


def _piecewise(ops: Any, k: Any, boundaries: list[int], values: list[float]) -> Value:
    result: Value = values[0]
    for b, v in zip(boundaries, values[1:], strict=True):
        result = ops.where(k > b, v, result)
    return result


@_register
class CosineDecay(_Decay):
    r"""TF1's ``cosine_decay`` (SGDR without restarts): half a cosine from 1 to ``alpha``.

    .. math::

        f = \min(s, D) / D,\qquad
        \mathrm{lr}(s) = \mathrm{learning\_rate} \cdot
        \big((1 - \alpha) \cdot \tfrac12 (1 + \cos \pi f) + \alpha\big)

    Args:
        learning_rate: initial rate, in [0, inf).
        decay_steps: ``D``, an int or real number in (0, inf).
        alpha: the final rate as a **fraction** of ``learning_rate``, in [0, 1]. Default 0.0.
        name: accepted for TF compatibility; only shown in ``repr``. Default None.
        dtype: keyword-only, the tensor path's dtype. Default ``torch.float32``.

    Example:
        >>> from trainop.schedules import tf1
        >>> p = tf1.CosineDecay(1.0, decay_steps=100, alpha=0.1)
        >>> p(0), round(p(50), 6), p(100)
        (1.0, 0.55, 0.1)

    Reference: ``tf.compat.v1.train.cosine_decay``; Loshchilov & Hutter, "SGDR" (2017).
    Quirk reproduced: TF computes ``(1 - alpha)`` in double precision before the float32
    multiply (``alpha`` is not cast like the other hyperparameters).
    """

    qualified_name = "tf1.cosine_decay"
    hyperparameters = ("learning_rate", "decay_steps", "alpha", "name")

    def __init__(self, learning_rate: float, decay_steps: Number, alpha: float = 0.0,
                 name: str | None = None, *, dtype: torch.dtype = _F32) -> None:
        super().__init__(learning_rate, decay_steps, dtype=dtype)
        self.alpha = check_real("alpha", alpha, UNIT_CLOSED)
        self.name = _check_optional_str("name", name)

    def _compute(self, ops: Any, k: Any) -> Value:
        return _cosine(ops, self.learning_rate, k, self.decay_steps, self.alpha)


@_register
class CosineDecayRestarts(Policy):
    r"""TF1's ``cosine_decay_restarts`` (SGDR): cosine cycles that restart, each ``t_mul`` longer.

    .. math::

        f = s / D_1;\quad
        t_{mul} = 1:\ i = \lfloor f \rfloor,\ f' = f - i;\quad
        t_{mul} \ne 1:\ i = \Big\lfloor \frac{\log(1 - f (1 - t_{mul}))}{\log t_{mul}} \Big\rfloor,\
        f' = \Big(f - \frac{1 - t_{mul}^{i}}{1 - t_{mul}}\Big) / t_{mul}^{i}

        \mathrm{lr}(s) = \mathrm{learning\_rate} \cdot
        \big((1 - \alpha) \cdot \tfrac12 m_{mul}^{i} (1 + \cos \pi f') + \alpha\big)

    Args:
        learning_rate: initial rate, in [0, inf).
        first_decay_steps: ``D_1``, the length of the first cycle, int or real in (0, inf).
        t_mul: each cycle is ``t_mul`` times longer than the previous one, in (0, inf).
            Default 2.0. With ``t_mul < 1`` the cycles sum to ``D_1 / (1 - t_mul)`` steps;
            after that TF (and trainop) return NaN.
        m_mul: each cycle starts at ``m_mul`` times the previous peak, in [0, inf). Default 1.0.
        alpha: the floor as a fraction of ``learning_rate``, in [0, 1]. Default 0.0.
        name: accepted for TF compatibility; only shown in ``repr``. Default None.
        dtype: keyword-only, the tensor path's dtype. Default ``torch.float32``.

    Example:
        >>> from trainop.schedules import tf1
        >>> p = tf1.CosineDecayRestarts(1.0, first_decay_steps=10)  # cycles 10, 20, 40, ...
        >>> p(0), p(10), p(20), p(30)
        (1.0, 1.0, 0.5, 1.0)

    Reference: ``tf.compat.v1.train.cosine_decay_restarts``; Loshchilov & Hutter, "SGDR" (2017).
    """

    qualified_name = "tf1.cosine_decay_restarts"
    hyperparameters = ("learning_rate", "first_decay_steps", "t_mul", "m_mul", "alpha", "name")

    def __init__(self, learning_rate: float, first_decay_steps: Number, t_mul: float = 2.0,
                 m_mul: float = 1.0, alpha: float = 0.0, name: str | None = None, *,
                 dtype: torch.dtype = _F32) -> None:
        super().__init__(dtype=dtype)
        self.learning_rate = check_real("learning_rate", learning_rate, NON_NEGATIVE)
        self.first_decay_steps = _check_steps("first_decay_steps", first_decay_steps)
        self.t_mul = check_real("t_mul", t_mul, POSITIVE)
        self.m_mul = check_real("m_mul", m_mul, NON_NEGATIVE)
        self.alpha = check_real("alpha", alpha, UNIT_CLOSED)
        self.name = _check_optional_str("name", name)

    def _compute(self, ops: Any, k: Any) -> Value:
        lr = ops.cast(self.learning_rate)
        alpha = ops.cast(self.alpha)
        t_mul = ops.cast(self.t_mul)
        m_mul = ops.cast(self.m_mul)
        fraction = ops.div(ops.cast(k), ops.cast(self.first_decay_steps))
        if t_mul == 1.0:
            i_restart = ops.floor(fraction)
            fraction = fraction - i_restart
        else:
            i_restart = ops.floor(ops.div(ops.log(1.0 - fraction * (1.0 - t_mul)),
                                          ops.log(t_mul)))
            sum_r = ops.div(1.0 - ops.pow(t_mul, i_restart), 1.0 - t_mul)
            fraction = ops.div(fraction - sum_r, ops.pow(t_mul, i_restart))
        m_fac = ops.pow(m_mul, i_restart)
        decayed = 0.5 * m_fac * (1.0 + ops.cos(math.pi * fraction))
        return lr * ((1 - alpha) * decayed + alpha)


@_register
class LinearCosineDecay(_Decay):
    r"""TF1's ``linear_cosine_decay``: a cosine modulated by a linear ramp down.

    .. math::

        s' = \min(s, D),\quad \ell = (D - s') / D,\quad
        c = \tfrac12 \big(1 + \cos(\pi \cdot 2 \cdot \mathrm{num\_periods} \cdot s'/D)\big)

        \mathrm{lr}(s) = \mathrm{learning\_rate} \cdot ((\alpha + \ell) \cdot c + \beta)

    Args:
        learning_rate: initial rate, in [0, inf).
        decay_steps: ``D``, an int or real number in (0, inf).
        num_periods: number of cosine periods over ``D``, in [0, inf). Default 0.5.
        alpha: in [0, 1]. Default 0.0.
        beta: in [0, inf). Default 0.001.
        name: accepted for TF compatibility; only shown in ``repr``. Default None.
        dtype: keyword-only, the tensor path's dtype. Default ``torch.float32``.

    Example:
        >>> from trainop.schedules import tf1
        >>> p = tf1.LinearCosineDecay(1.0, decay_steps=100)
        >>> p(0), p(100)
        (1.001, 0.001)

    Reference: ``tf.compat.v1.train.linear_cosine_decay``; Bello et al., "Neural Optimizer
    Search with Reinforcement Learning" (2017).
    """

    qualified_name = "tf1.linear_cosine_decay"
    hyperparameters = ("learning_rate", "decay_steps", "num_periods", "alpha", "beta", "name")

    def __init__(self, learning_rate: float, decay_steps: Number, num_periods: float = 0.5,
                 alpha: float = 0.0, beta: float = 0.001, name: str | None = None, *,
                 dtype: torch.dtype = _F32) -> None:
        super().__init__(learning_rate, decay_steps, dtype=dtype)
        self.num_periods = check_real("num_periods", num_periods, NON_NEGATIVE)
        self.alpha = check_real("alpha", alpha, UNIT_CLOSED)
        self.beta = check_real("beta", beta, NON_NEGATIVE)
        self.name = _check_optional_str("name", name)

    def _linear_and_cosine(self, ops: Any, k: Any) -> tuple[Value, Value, Value]:
        d = ops.cast(self.decay_steps)
        s = ops.minimum(ops.cast(k), d)
        linear = ops.div(d - s, d)
        fraction = 2.0 * ops.cast(self.num_periods) * ops.div(s, d)
        cosine = 0.5 * (1.0 + ops.cos(math.pi * fraction))
        return s, linear, cosine

    def _compute(self, ops: Any, k: Any) -> Value:
        _, linear, cosine = self._linear_and_cosine(ops, k)
        return ops.cast(self.learning_rate) * (
            (ops.cast(self.alpha) + linear) * cosine + ops.cast(self.beta))


@_register
class NoisyLinearCosineDecay(LinearCosineDecay):
    r"""TF1's ``noisy_linear_cosine_decay``: linear cosine decay with decaying Gaussian noise.

    .. math::

        \sigma^2(s) = \frac{\mathrm{initial\_variance}}{(1 + s')^{\mathrm{variance\_decay}}},
        \quad \epsilon \sim \mathcal N(0, \sigma^2(s))

        \mathrm{lr}(s) = \mathrm{learning\_rate} \cdot ((\alpha + \ell + \epsilon) \cdot c + \beta)

    with ``s'``, ``ℓ`` and ``c`` as in :class:`LinearCosineDecay`. Each call draws fresh noise
    (one sample per element of a tensor step), so this is the one policy that is not a pure
    function of the step. The noise is drawn from ``generator`` in ``dtype`` on the generator's
    device (the step's device, or the CPU for an int step, when ``generator`` is None), in both
    paths, so two policies with equally seeded generators give equal values; pass a generator
    on the step's device to avoid a transfer (and a CPU generator for the int path: with a CUDA
    generator the int path reads the sample back, which synchronises). The generator's state is
    part of :meth:`state_dict`, so :class:`~trainop.schedules.PolicyScheduler` resumes the same
    noise sequence.

    Args:
        learning_rate: initial rate, in [0, inf).
        decay_steps: ``D``, an int or real number in (0, inf).
        initial_variance: in [0, inf). Default 1.0.
        variance_decay: in [0, inf). Default 0.55.
        num_periods: in [0, inf). Default 0.5.
        alpha: in [0, 1]. Default 0.0.
        beta: in [0, inf). Default 0.001.
        name: accepted for TF compatibility; only shown in ``repr``. Default None.
        generator: keyword-only ``torch.Generator`` or None (the global generator).
        dtype: keyword-only, the dtype of the tensor path and of the noise. Default float32.

    Example:
        >>> import torch
        >>> from trainop.schedules import tf1
        >>> g = torch.Generator().manual_seed(0)
        >>> p = tf1.NoisyLinearCosineDecay(1.0, decay_steps=100, initial_variance=0.0,
        ...                                generator=g)
        >>> p(100)  # no noise: equals linear_cosine_decay
        0.001

    Reference: ``tf.compat.v1.train.noisy_linear_cosine_decay``; Bello et al. (2017). TF draws
    with its own random-number generator, so only the distribution can match, not the samples.
    """

    qualified_name = "tf1.noisy_linear_cosine_decay"
    hyperparameters = ("learning_rate", "decay_steps", "initial_variance", "variance_decay",
                       "num_periods", "alpha", "beta", "name", "generator")

    def __init__(self, learning_rate: float, decay_steps: Number, initial_variance: float = 1.0,
                 variance_decay: float = 0.55, num_periods: float = 0.5, alpha: float = 0.0,
                 beta: float = 0.001, name: str | None = None, *,
                 generator: torch.Generator | None = None, dtype: torch.dtype = _F32) -> None:
        super().__init__(learning_rate, decay_steps, num_periods, alpha, beta, name, dtype=dtype)
        self.initial_variance = check_real("initial_variance", initial_variance, NON_NEGATIVE)
        self.variance_decay = check_real("variance_decay", variance_decay, NON_NEGATIVE)
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(
                f"Expected `generator` to be a torch.Generator or None, got {describe(generator)}"
            )
        self.generator = generator

    def _compute(self, ops: Any, k: Any) -> Value:
        s, linear, cosine = self._linear_and_cosine(ops, k)
        variance = ops.div(ops.cast(self.initial_variance),
                           ops.pow(1.0 + s, ops.cast(self.variance_decay)))
        std = ops.sqrt(variance)
        noisy = linear + ops.normal(self.generator, self.dtype) * std
        return ops.cast(self.learning_rate) * (
            (ops.cast(self.alpha) + noisy) * cosine + ops.cast(self.beta))

    def state_dict(self) -> dict[str, Any]:
        """``{"generator_state": ...}`` when a generator was given, else ``{}``."""
        if self.generator is None:
            return {}
        return {"generator_state": self.generator.get_state()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not isinstance(state_dict, dict):
            raise TypeError(f"Expected `state_dict` to be a dict, got {describe(state_dict)}")
        expected = {"generator_state"} if self.generator is not None else set()
        if set(state_dict) != expected:
            raise ValueError(
                f"Expected `state_dict` keys {sorted(expected)} for NoisyLinearCosineDecay, "
                f"got {sorted(state_dict)}"
            )
        if self.generator is not None:
            self.generator.set_state(state_dict["generator_state"])


# --------------------------------------------------------------------------------------------
# Functions with TF's signatures
# --------------------------------------------------------------------------------------------


def exponential_decay(learning_rate: float, global_step: int | torch.Tensor,
                      decay_steps: Number, decay_rate: float, staircase: bool = False,
                      name: str | None = None) -> float | torch.Tensor:
    """``learning_rate * decay_rate ** (global_step / decay_steps)``; see :class:`ExponentialDecay`.

    Returns a Python float for an int step, a float32 tensor for an integer tensor step.

    Example:
        >>> from trainop.schedules import tf1
        >>> tf1.exponential_decay(0.1, 20, decay_steps=10, decay_rate=0.5)
        0.025

    Reference: ``tf.compat.v1.train.exponential_decay``.
    """
    return ExponentialDecay(learning_rate, decay_steps, decay_rate, staircase, name)(global_step)


def natural_exp_decay(learning_rate: float, global_step: int | torch.Tensor,
                      decay_steps: Number, decay_rate: float, staircase: bool = False,
                      name: str | None = None) -> float | torch.Tensor:
    """``learning_rate * exp(-decay_rate) ** (global_step / decay_steps)``; see
    :class:`NaturalExpDecay`.

    Example:
        >>> from trainop.schedules import tf1
        >>> round(tf1.natural_exp_decay(1.0, 1, decay_steps=1, decay_rate=1.0), 6)
        0.367879

    Reference: ``tf.compat.v1.train.natural_exp_decay``.
    """
    return NaturalExpDecay(learning_rate, decay_steps, decay_rate, staircase, name)(global_step)


def inverse_time_decay(learning_rate: float, global_step: int | torch.Tensor,
                       decay_steps: Number, decay_rate: float, staircase: bool = False,
                       name: str | None = None) -> float | torch.Tensor:
    """``learning_rate / (1 + decay_rate * global_step / decay_steps)``; see
    :class:`InverseTimeDecay`.

    Example:
        >>> from trainop.schedules import tf1
        >>> tf1.inverse_time_decay(1.0, 10, decay_steps=10, decay_rate=1.0)
        0.5

    Reference: ``tf.compat.v1.train.inverse_time_decay``.
    """
    return InverseTimeDecay(learning_rate, decay_steps, decay_rate, staircase, name)(global_step)


def polynomial_decay(learning_rate: float, global_step: int | torch.Tensor,
                     decay_steps: Number, end_learning_rate: float = 0.0001, power: float = 1.0,
                     cycle: bool = False, name: str | None = None) -> float | torch.Tensor:
    """Polynomial decay to ``end_learning_rate`` over ``decay_steps``; see
    :class:`PolynomialDecay`.

    Example:
        >>> from trainop.schedules import tf1
        >>> tf1.polynomial_decay(1.0, 5, decay_steps=10, end_learning_rate=0.0)
        0.5

    Reference: ``tf.compat.v1.train.polynomial_decay``.
    """
    return PolynomialDecay(learning_rate, decay_steps, end_learning_rate, power, cycle,
                           name)(global_step)


def piecewise_constant(x: int | torch.Tensor, boundaries: list[int], values: list[float],
                       name: str | None = None) -> float | torch.Tensor:
    """``values[i]`` for ``boundaries[i-1] < x <= boundaries[i]``; see :class:`PiecewiseConstant`.

    Example:
        >>> from trainop.schedules import tf1
        >>> tf1.piecewise_constant(11, [10, 20], [1.0, 0.5, 0.1])
        0.5

    Reference: ``tf.compat.v1.train.piecewise_constant``.
    """
    return PiecewiseConstant(boundaries, values, name)(x)


def cosine_decay(learning_rate: float, global_step: int | torch.Tensor, decay_steps: Number,
                 alpha: float = 0.0, name: str | None = None) -> float | torch.Tensor:
    """Cosine decay to ``alpha * learning_rate`` over ``decay_steps``; see :class:`CosineDecay`.

    Example:
        >>> from trainop.schedules import tf1
        >>> tf1.cosine_decay(1.0, 100, decay_steps=100, alpha=0.1)
        0.1

    Reference: ``tf.compat.v1.train.cosine_decay``.
    """
    return CosineDecay(learning_rate, decay_steps, alpha, name)(global_step)


def cosine_decay_restarts(learning_rate: float, global_step: int | torch.Tensor,
                          first_decay_steps: Number, t_mul: float = 2.0, m_mul: float = 1.0,
                          alpha: float = 0.0, name: str | None = None) -> float | torch.Tensor:
    """Cosine decay with warm restarts (SGDR); see :class:`CosineDecayRestarts`.

    Example:
        >>> from trainop.schedules import tf1
        >>> tf1.cosine_decay_restarts(1.0, 10, first_decay_steps=10)
        1.0

    Reference: ``tf.compat.v1.train.cosine_decay_restarts``.
    """
    return CosineDecayRestarts(learning_rate, first_decay_steps, t_mul, m_mul, alpha,
                               name)(global_step)


def linear_cosine_decay(learning_rate: float, global_step: int | torch.Tensor,
                        decay_steps: Number, num_periods: float = 0.5, alpha: float = 0.0,
                        beta: float = 0.001, name: str | None = None) -> float | torch.Tensor:
    """Linear cosine decay; see :class:`LinearCosineDecay`.

    Example:
        >>> from trainop.schedules import tf1
        >>> tf1.linear_cosine_decay(1.0, 0, decay_steps=100)
        1.001

    Reference: ``tf.compat.v1.train.linear_cosine_decay``.
    """
    return LinearCosineDecay(learning_rate, decay_steps, num_periods, alpha, beta,
                             name)(global_step)


def noisy_linear_cosine_decay(learning_rate: float, global_step: int | torch.Tensor,
                              decay_steps: Number, initial_variance: float = 1.0,
                              variance_decay: float = 0.55, num_periods: float = 0.5,
                              alpha: float = 0.0, beta: float = 0.001, name: str | None = None,
                              *, generator: torch.Generator | None = None,
                              ) -> float | torch.Tensor:
    """Noisy linear cosine decay; see :class:`NoisyLinearCosineDecay` (``generator`` is extra).

    Example:
        >>> import torch
        >>> from trainop.schedules import tf1
        >>> g1, g2 = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
        >>> a = tf1.noisy_linear_cosine_decay(1.0, 10, 100, generator=g1)
        >>> a == tf1.noisy_linear_cosine_decay(1.0, 10, 100, generator=g2)
        True

    Reference: ``tf.compat.v1.train.noisy_linear_cosine_decay``.
    """
    return NoisyLinearCosineDecay(learning_rate, decay_steps, initial_variance, variance_decay,
                                  num_periods, alpha, beta, name,
                                  generator=generator)(global_step)
