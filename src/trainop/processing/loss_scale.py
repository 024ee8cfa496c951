"""Loss scaling: a static scale, OpenSeq2Seq's ``Backoff`` and ``LogMax`` automatic scalers, and
the ``LossScale`` processor that unscales the gradients and updates the scale.

Every scaler holds its state in 0-dim tensors that stay on the gradients' device; ``update``
is a handful of tensor operations (``torch.where``), never a host read.

- ``StaticLossScaler(loss_scale=1.0)``: a fixed scale; it never skips a step (OpenSeq2Seq's
  static scale does not check for overflow, quirk Q9; add ``SkipNonFinite`` to skip).
- ``BackoffLossScaler(scale_min=1.0, scale_max=2**14, step_factor=2.0, step_window=2000)``:
  starts at ``scale_max``; on overflow ``scale /= step_factor`` (clipped to
  ``[scale_min, scale_max]``) and the step is skipped; after an overflow at call ``k`` the scale is
  multiplied by ``step_factor`` at calls ``k + W, k + 2W, ...`` (``W = step_window``), read before
  the call counter is incremented (deterministic; upstream races on that read, quirk Q2).
- ``LogMaxLossScaler(scale_min=1.0, scale_max=2**14, log_max=16.0, beta1=0.99, beta2=0.999,
  overflow_std_dev=3.09, upstream_quirks=False)``: starts at 1; tracks bias-corrected moving
  averages of ``x = log2(amax)`` and sets ``scale = 2**(log_max - (mu + overflow_std_dev *
  sigma))``. Fixed by default (quirk Q3): an overflow contributes ``x = log_max``, the exponent
  uses ``log_max``, and a step whose gradients are all zero leaves the statistics alone.
  ``upstream_quirks=True`` reproduces OpenSeq2Seq: ``x = 2**log_max`` on overflow, a literal 16 in
  the exponent, and ``amax == 0`` poisoning the averages (the scale becomes NaN for good).
- ``AutomaticLossScaler(algorithm='Backoff', params=None)``: OpenSeq2Seq's front end; the name is
  case-insensitive, unknown ``params`` keys raise.

Reference: OpenSeq2Seq ``open_seq2seq/optimizers/automatic_loss_scaler.py``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from trainop.contract.validation import Interval, check_bool, check_int, check_real, describe
from trainop.processing._base import SKIP_OVERFLOW, Processor
from trainop.processing._batch import Gradients
from trainop.processing._checks import NON_NEGATIVE, POSITIVE, check_keys, load_state

__all__ = ["AutomaticLossScaler", "BackoffLossScaler", "LogMaxLossScaler", "LossScale",
           "LossScaler", "StaticLossScaler", "as_loss_scaler"]

_F32 = torch.float32
_UNIT = Interval(0.0, 1.0, high_closed=False)


def _f32(value: float) -> torch.Tensor:
    return torch.tensor(value, dtype=_F32)


def _i64(value: int) -> torch.Tensor:
    return torch.tensor(value, dtype=torch.int64)


class LossScaler:
    """Base class: ``loss_scale`` (a 0-dim float32 tensor) and its per-step ``update``."""

    #: Whether an overflow skips the step.
    skips_on_overflow: ClassVar[bool] = True
    #: Whether ``update`` reads ``amax`` (then the pipeline measures ``max |g|``).
    needs_amax: ClassVar[bool] = False
    _state_names: ClassVar[tuple[str, ...]] = ("loss_scale",)

    loss_scale: torch.Tensor

    def update(self, has_nan: Any, amax: Any) -> None:
        """OpenSeq2Seq's ``update_op``: ``has_nan`` (bool or 0-dim tensor) and ``amax`` (the
        largest ``|g|`` of the unscaled gradients, real or 0-dim tensor); overflow is
        ``has_nan or isinf(amax)``."""
        has_nan = _as_flag("has_nan", has_nan, self.loss_scale.device)
        amax = _as_value("amax", amax, self.loss_scale.device)
        self._update(has_nan | torch.isinf(amax), amax)

    update_op = update

    def _update(self, overflow: torch.Tensor, amax: torch.Tensor | None) -> None:
        raise NotImplementedError

    @staticmethod
    def check_grads(grads_and_vars: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """OpenSeq2Seq's ``check_grads``: ``(has_nan, amax)`` over all gradients (a sparse
        gradient's values); ``amax`` is inf if any element is inf (NaN elements are ignored)."""
        batch = Gradients.of(grads_and_vars)
        grads = [g._values() if g.is_sparse else g for g in batch.present_grads()]
        if not grads:
            return torch.zeros((), dtype=torch.bool), torch.zeros((), dtype=_F32)
        has_nan = torch.stack([g.isnan().any().to(batch.device) for g in grads]).any()
        amax = torch.stack([
            (torch.where(g.isnan(), 0, g.abs()).amax() if g.numel() else
             torch.zeros((), dtype=g.dtype, device=g.device)).to(batch.device, _F32)
            for g in grads]).amax()
        return has_nan, amax

    def to(self, device: torch.device) -> LossScaler:
        """Move the state to ``device`` (once; a no-op when it is already there)."""
        for name in self._state_names:
            tensor = getattr(self, name)
            if tensor.device != device:
                setattr(self, name, tensor.to(device))
        return self

    def _state(self) -> dict[str, torch.Tensor]:
        return {name: getattr(self, name) for name in self._state_names}

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The scaler's state tensors, cloned."""
        return {k: v.clone() for k, v in self._state().items()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a ``state_dict`` with exactly this scaler's keys."""
        load_state(self._state(), state_dict)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._args()})"

    def _args(self) -> str:
        return ""


def _as_flag(name: str, value: Any, device: torch.device) -> torch.Tensor:
    if isinstance(value, bool):
        return torch.tensor(value, device=device)
    if isinstance(value, torch.Tensor) and value.dim() == 0 and value.dtype == torch.bool:
        return value.to(device)
    raise TypeError(f"Expected `{name}` to be a bool or a 0-dim bool tensor, got "
                    f"{describe(value)}")


def _as_value(name: str, value: Any, device: torch.device) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        if value.dim() != 0 or not value.is_floating_point():
            raise TypeError(f"Expected `{name}` to be a real number or a 0-dim floating-point "
                            f"tensor, got a tensor of shape {tuple(value.shape)} and dtype "
                            f"{value.dtype}")
        return value.to(device=device, dtype=_F32)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"Expected `{name}` to be a real number or a 0-dim floating-point "
                        f"tensor, got {describe(value)}")
    return torch.tensor(float(value), dtype=_F32, device=device)


class StaticLossScaler(LossScaler):
    """A fixed loss scale; never skips a step (OpenSeq2Seq's float ``loss_scaling``).

    Args:
        loss_scale: real number > 0 (an int is accepted, unlike upstream: quirk Q9), default 1.

    Example:
        >>> from trainop.processing import StaticLossScaler
        >>> StaticLossScaler(512).loss_scale
        tensor(512.)
    """

    skips_on_overflow = False

    def __init__(self, loss_scale: float = 1.0) -> None:
        self._value = check_real("loss_scale", loss_scale, POSITIVE)
        self.loss_scale = _f32(self._value)

    def _update(self, overflow, amax) -> None:
        return None

    def _args(self) -> str:
        return f"loss_scale={self._value:g}"


class BackoffLossScaler(LossScaler):
    """OpenSeq2Seq's ``BackoffScaler`` with the deterministic counter rule (quirk Q2).

    Per update, with ``i`` the call counter (read before it is incremented)::

        if overflow: scale = clip(scale / step_factor); last_overflow_iteration = i
        elif (i - last_overflow_iteration) % step_window == 0: scale = clip(scale * step_factor)
        i += 1                                   # clip to [scale_min, scale_max]

    Args:
        scale_min (float): positive, the smallest scale.
        scale_max (float): at least ``scale_min``, the largest scale; the scale starts here.
        step_factor (float): at least 1, what the scale is divided by on an overflow and multiplied
            by after ``step_window`` clean updates.
        step_window (int): at least 1, clean updates between two increases.

    State: ``loss_scale`` (float32), ``iteration`` (int64 calls), ``last_overflow_iteration``
    (int64, -1 before the first overflow).

    Example:
        >>> import torch
        >>> from trainop.processing import BackoffLossScaler
        >>> s = BackoffLossScaler(scale_max=1024.0, step_window=2)
        >>> s.update(has_nan=False, amax=float("inf")); s.loss_scale
        tensor(512.)
    """

    _state_names = ("loss_scale", "iteration", "last_overflow_iteration")

    def __init__(self, scale_min: float = 1.0, scale_max: float = 2.0 ** 14,
                 step_factor: float = 2.0, step_window: int = 2000) -> None:
        self.scale_min = check_real("scale_min", scale_min, POSITIVE)
        self.scale_max = check_real("scale_max", scale_max,
                                    Interval(self.scale_min, float("inf"), high_closed=False))
        self.step_factor = check_real("step_factor", step_factor,
                                      Interval(1.0, float("inf"), high_closed=False))
        self.step_window = check_int("step_window", step_window,
                                     Interval(1, float("inf"), high_closed=False))
        self.loss_scale = _f32(self.scale_max)
        self.iteration = _i64(0)
        self.last_overflow_iteration = _i64(-1)

    def _update(self, overflow, amax) -> None:
        overflow = overflow.to(self.loss_scale.device)
        scale = self.loss_scale
        i = self.iteration
        grow = (~overflow) & ((i - self.last_overflow_iteration) % self.step_window == 0)
        new = torch.where(overflow, scale / self.step_factor,
                          torch.where(grow, scale * self.step_factor, scale))
        scale.copy_(new.clamp(self.scale_min, self.scale_max))
        self.last_overflow_iteration.copy_(torch.where(overflow, i, self.last_overflow_iteration))
        i.add_(1)

    def _args(self) -> str:
        return (f"scale_min={self.scale_min:g}, scale_max={self.scale_max:g}, "
                f"step_factor={self.step_factor:g}, step_window={self.step_window}")


class LogMaxLossScaler(LossScaler):
    """OpenSeq2Seq's ``LogMaxScaler``; fixed by default, upstream behind ``upstream_quirks``.

    Per update (float32), with ``x = log2(amax)``, or the overflow sample on overflow::

        x_hat = beta1*x_hat + (1-beta1)*x;  c1 *= beta1;  mu = x_hat / (1 - c1)
        slow  = beta2*slow + (1-beta2)*x;   sq = beta2*sq + (1-beta2)*x^2;  c2 *= beta2
        sigma = sqrt(max(sq/(1-c2) - (slow/(1-c2))^2, 0))
        scale = clip(2**(E - (mu + overflow_std_dev*sigma)), scale_min, scale_max)

    Fixed (default): overflow sample ``log_max``, ``E = log_max``, and ``amax == 0`` leaves the
    state (and the scale) unchanged. ``upstream_quirks=True``: sample ``2**log_max``, ``E = 16``,
    and ``amax == 0`` feeds ``-inf`` into the averages (scale NaN from then on).

    Args:
        scale_min (float): positive, the smallest scale.
        scale_max (float): at least ``scale_min``, the largest scale.
        log_max (float): positive, the overflow sample and ``E`` above (``log2`` of the largest
            finite value to aim for).
        beta1 (float): in [0, 1), the decay of the fast average ``x_hat``.
        beta2 (float): in [0, 1), the decay of the slow averages.
        overflow_std_dev (float): non-negative, standard deviations kept below ``E``.
        upstream_quirks (bool): OpenSeq2Seq's behaviour as it is (see above).

    State: ``loss_scale`` (starts at 1.0), ``x_hat``, ``slow_x_hat``, ``xsquared_hat`` (0),
    ``b1_correction``, ``b2_correction`` (1), all float32; ``iteration`` (int64 calls).

    Example:
        >>> from trainop.processing import LogMaxLossScaler
        >>> s = LogMaxLossScaler()
        >>> for a in (1.0, 2.0, 4.0): s.update(False, a)
        >>> round(float(s.loss_scale), 2)
        5674.75
    """

    needs_amax = True
    _state_names = ("loss_scale", "x_hat", "slow_x_hat", "xsquared_hat", "b1_correction",
                    "b2_correction", "iteration")

    def __init__(self, scale_min: float = 1.0, scale_max: float = 2.0 ** 14,
                 log_max: float = 16.0, beta1: float = 0.99, beta2: float = 0.999,
                 overflow_std_dev: float = 3.09, *, upstream_quirks: bool = False) -> None:
        self.scale_min = check_real("scale_min", scale_min, POSITIVE)
        self.scale_max = check_real("scale_max", scale_max,
                                    Interval(self.scale_min, float("inf"), high_closed=False))
        self.log_max = check_real("log_max", log_max, POSITIVE)
        self.beta1 = check_real("beta1", beta1, _UNIT)
        self.beta2 = check_real("beta2", beta2, _UNIT)
        self.overflow_std_dev = check_real("overflow_std_dev", overflow_std_dev, NON_NEGATIVE)
        self.upstream_quirks = check_bool("upstream_quirks", upstream_quirks)
        self.loss_scale = _f32(1.0)
        self.x_hat = _f32(0.0)
        self.slow_x_hat = _f32(0.0)
        self.xsquared_hat = _f32(0.0)
        self.b1_correction = _f32(1.0)
        self.b2_correction = _f32(1.0)
        self.iteration = _i64(0)

    def _update(self, overflow, amax) -> None:
        device = self.loss_scale.device
        overflow = overflow.to(device)
        amax = (torch.zeros((), dtype=_F32, device=device) if amax is None
                else amax.to(device=device, dtype=_F32))
        if self.upstream_quirks:
            sample, exponent_base = 2.0 ** self.log_max, 16.0
        else:
            sample, exponent_base = self.log_max, self.log_max
        x = torch.where(overflow, sample, torch.log2(amax))
        b1, b2 = self.beta1, self.beta2
        x_hat = self.x_hat * b1 + x * (1 - b1)
        c1 = self.b1_correction * b1
        mu = x_hat / (1 - c1)
        slow = self.slow_x_hat * b2 + x * (1 - b2)
        sq = self.xsquared_hat * b2 + x * x * (1 - b2)
        c2 = self.b2_correction * b2
        e2 = sq / (1 - c2)
        slow_mu = slow / (1 - c2)
        sigma = torch.clamp_min(e2 - slow_mu * slow_mu, 0).sqrt()
        cutoff = mu + self.overflow_std_dev * sigma
        scale = torch.pow(2.0, exponent_base - cutoff).clamp(self.scale_min, self.scale_max)
        new = {"x_hat": x_hat, "b1_correction": c1, "slow_x_hat": slow, "xsquared_hat": sq,
               "b2_correction": c2, "loss_scale": scale}
        valid = None if self.upstream_quirks else overflow | (amax > 0)
        for name, value in new.items():
            old = getattr(self, name)
            old.copy_(value if valid is None else torch.where(valid, value, old))
        self.iteration.add_(1)

    def _args(self) -> str:
        return (f"scale_min={self.scale_min:g}, scale_max={self.scale_max:g}, "
                f"log_max={self.log_max:g}, beta1={self.beta1:g}, beta2={self.beta2:g}, "
                f"overflow_std_dev={self.overflow_std_dev:g}, "
                f"upstream_quirks={self.upstream_quirks}")


_ALGORITHMS = {
    "backoff": (BackoffLossScaler, ("scale_min", "scale_max", "step_factor", "step_window")),
    "logmax": (LogMaxLossScaler, ("scale_min", "scale_max", "log_max", "beta1", "beta2",
                                  "overflow_std_dev", "upstream_quirks")),
}


class AutomaticLossScaler(LossScaler):
    """OpenSeq2Seq's ``AutomaticLossScaler(algorithm='Backoff', params=None)``.

    Args:
        algorithm: ``'Backoff'`` or ``'LogMax'`` (case-insensitive, surrounding spaces ignored).
        params: ``None`` or a dict of the chosen scaler's arguments (see ``BackoffLossScaler``
            and ``LogMaxLossScaler``); an unknown key raises ``ValueError``, a wrong type
            ``TypeError`` (``step_window`` must be an int; real parameters accept ints).

    The chosen scaler is ``self.scaler``; ``loss_scale``, ``update``/``update_op``, ``state_dict``
    delegate to it.

    Example:
        >>> from trainop.processing import AutomaticLossScaler
        >>> AutomaticLossScaler("Backoff", {"scale_max": 1024.0}).loss_scale
        tensor(1024.)
    """

    def __init__(self, algorithm: str = "Backoff", params: dict[str, Any] | None = None) -> None:
        if not isinstance(algorithm, str):
            raise TypeError(f"Expected `algorithm` to be one of ['Backoff', 'LogMax'], got "
                            f"{describe(algorithm)}")
        key = algorithm.lower().strip()
        if key not in _ALGORITHMS:
            raise ValueError(f"Expected `algorithm` to be one of ['Backoff', 'LogMax'], got "
                             f"{algorithm!r}")
        cls, allowed = _ALGORITHMS[key]
        self.scaler: LossScaler = cls(**check_keys("params", params, allowed))
        self.algorithm = "Backoff" if key == "backoff" else "LogMax"

    @property
    def needs_amax(self) -> bool:  # type: ignore[override]
        return self.scaler.needs_amax

    @property
    def loss_scale(self) -> torch.Tensor:  # type: ignore[override]
        return self.scaler.loss_scale

    def _update(self, overflow, amax) -> None:
        self.scaler._update(overflow, amax)

    def to(self, device: torch.device) -> AutomaticLossScaler:
        self.scaler.to(device)
        return self

    def _state(self) -> dict[str, torch.Tensor]:
        return self.scaler._state()

    def _args(self) -> str:
        return f"{self.algorithm!r}: {self.scaler!r}"


def as_loss_scaler(value: Any, name: str = "loss_scale") -> LossScaler:
    """``None`` -> static 1.0; a real number -> ``StaticLossScaler``; a scaler -> itself."""
    if value is None:
        return StaticLossScaler(1.0)
    if isinstance(value, LossScaler):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return StaticLossScaler(check_real(name, value, POSITIVE))
    raise TypeError(f"Expected `{name}` to be None, a real number > 0 or a loss scaler "
                    f"(StaticLossScaler, BackoffLossScaler, LogMaxLossScaler, "
                    f"AutomaticLossScaler), got {describe(value)}")


class LossScale(Processor):
    """Stage ``unscale``: fold ``1/S`` into the pending multiplier; at ``check``, update the
    scaler from the final gradients and, for an automatic scaler, skip the step on overflow.

    Overflow means a non-finite effective gradient (see ``Gradients.nonfinite``); LogMax also
    reads ``amax``, the largest ``|g|`` of the final (unscaled, clipped, LARC-scaled) gradients,
    as OpenSeq2Seq does, which costs one more read of the gradients.

    Args:
        loss_scale: ``None`` (1.0), a real number > 0 (static), or a loss scaler.

    Alone, ``LossScale(s)(pairs)`` treats ``pairs`` as gradients of the scaled loss: it returns
    them unscaled and updates the scaler.

    Example:
        >>> import torch
        >>> from trainop.processing import LossScale, BackoffLossScaler
        >>> w = torch.zeros(2)
        >>> stage = LossScale(BackoffLossScaler(scale_max=4.0))
        >>> stage([(torch.tensor([4.0, 8.0]), w)])[0][0]
        tensor([1., 2.])
    """

    stage = "unscale"

    def _statistics(self) -> frozenset[str]:
        return frozenset({"amax"}) if self.scaler.needs_amax else frozenset()

    def __init__(self, loss_scale: Any = None) -> None:
        self.scaler = as_loss_scaler(loss_scale)

    def _batch(self, grads_and_vars: Any) -> Gradients:
        if isinstance(grads_and_vars, Gradients):
            return grads_and_vars
        return Gradients(grads_and_vars, loss_scale=self.scaler.loss_scale)

    def process(self, batch: Gradients) -> Gradients:
        self.scaler.to(batch.device)
        batch.fold_loss_scale()
        if "loss_scale" not in batch.stats:
            batch.stats["loss_scale"] = self.scaler.loss_scale.clone()
        return batch

    def check(self, batch: Gradients) -> None:
        scaler = self.scaler
        if isinstance(scaler, StaticLossScaler):
            batch.stats["next_loss_scale"] = batch.stats["loss_scale"]
            return
        overflow = batch.nonfinite()
        amax = None
        if scaler.needs_amax:
            per_tensor = batch.amax()
            amax = per_tensor.max() if per_tensor.numel() else torch.zeros(
                (), dtype=_F32, device=batch.device)
        scaler._update(overflow, amax)
        if scaler.skips_on_overflow:
            batch.skip_if(overflow, SKIP_OVERFLOW)
        batch.stats["next_loss_scale"] = scaler.loss_scale.clone()

    def _state(self) -> dict[str, torch.Tensor]:
        return self.scaler._state()

    def _args(self) -> str:
        return repr(self.scaler)
