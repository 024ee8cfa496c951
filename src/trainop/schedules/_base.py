"""The `Policy` base class, the two evaluation back ends and the policy registry.

A policy's formula is written once, in :meth:`Policy._compute`, against a small set of
operations (``ops``). Two back ends implement them:

- :class:`_PythonOps` evaluates the formula on a Python ``int`` step in double precision and
  returns a Python ``float`` (host-only; what :class:`PolicyScheduler` writes);
- :class:`_TorchOps` evaluates it on an integer tensor step, elementwise, in ``policy.dtype``
  (float32 by default, as TensorFlow does), on the step's device, with no host sync: no
  ``.item()`` on the step, no Python branching on tensor values (``torch.where`` instead of
  ``tf.cond``).

Constants follow TensorFlow's casting rules in the tensor path: a hyperparameter that TF casts to
the learning-rate dtype is rounded to ``policy.dtype`` with ``ops.cast``; arithmetic that the
upstream code does between Python numbers stays in double precision until it meets the step;
division is tensor by tensor and the transcendental functions are evaluated in float64 and
rounded (see :class:`_TorchOps`), which reproduces TF's kernels bit for bit at almost every step.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import torch

from trainop.contract.validation import Interval, check_int, check_real, describe

__all__ = ["Policy", "available_policies", "policy"]

Number = float | int
Value = Any  # a Python float, or a tensor in the tensor path

_REGISTRY: dict[str, type[Policy]] = {}

# The ranges used by the policies' argument checks.
NON_NEGATIVE = Interval(0.0, math.inf, high_closed=False)
POSITIVE = Interval(0.0, math.inf, low_closed=False, high_closed=False)
UNIT_CLOSED = Interval(0.0, 1.0)


# --------------------------------------------------------------------------------------------
# Argument checks shared by the policy modules
# --------------------------------------------------------------------------------------------


def _check_steps(name: str, value: Any, interval: Interval = POSITIVE) -> Number:
    """A step count such as ``decay_steps``: an int, or a real number (TF casts it to float)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return check_int(name, value, interval)
    return check_real(name, value, interval)


def _check_nonneg_int(name: str, value: Any) -> int:
    return check_int(name, value, NON_NEGATIVE)


def _check_sequence(name: str, value: Any) -> list:
    """A list or tuple (not a string, not a tensor); returns a new list."""
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"Expected `{name}` to be a list or tuple, got {describe(value)}")
    return list(value)


def _check_dtype(name: str, value: Any) -> torch.dtype:
    if not isinstance(value, torch.dtype) or not value.is_floating_point:
        raise TypeError(
            f"Expected `{name}` to be a floating-point torch.dtype, got {describe(value)}"
        )
    return value


def _check_optional_str(name: str, value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"Expected `{name}` to be a string or None, got {describe(value)}")
    return value


def _check_increasing_steps(name: str, values: Sequence[Any]) -> list[int]:
    """Non-empty, integers >= 0, strictly increasing."""
    values = _check_sequence(name, values)
    if not values:
        raise ValueError(f"Expected `{name}` to be non-empty, got {values!r}")
    checked = [_check_nonneg_int(f"{name}[{i}]", v) for i, v in enumerate(values)]
    for i in range(1, len(checked)):
        if checked[i] <= checked[i - 1]:
            raise ValueError(
                f"Expected `{name}` to be strictly increasing, got {name}[{i - 1}] = "
                f"{checked[i - 1]} and {name}[{i}] = {checked[i]}"
            )
    return checked


# --------------------------------------------------------------------------------------------
# Back ends
# --------------------------------------------------------------------------------------------


def _py_guard(fn: Callable[..., float]) -> Callable[..., float]:
    """IEEE-754 results instead of Python exceptions (inf on overflow, nan on domain errors)."""

    @functools.wraps(fn)
    def wrapper(*args: float) -> float:
        try:
            return fn(*args)
        except OverflowError:
            return math.inf
        except (ValueError, ZeroDivisionError):
            return math.nan

    return wrapper


def _py_log(x: float) -> float:
    if x == 0.0:
        return -math.inf
    return math.log(x)  # raises ValueError for x < 0 -> nan


def _py_pow(a: float, b: float) -> float:
    if a == 0.0 and b < 0.0:
        return math.inf
    return math.pow(a, b)


def _py_floor(x: float) -> float:
    return float(math.floor(x)) if math.isfinite(x) else x


def _py_ceil(x: float) -> float:
    return float(math.ceil(x)) if math.isfinite(x) else x


def _py_div(a: float, b: float) -> float:
    if b == 0.0:
        if a == 0.0 or math.isnan(a):
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def _py_min(a: float, b: float) -> float:
    return math.nan if math.isnan(a) or math.isnan(b) else min(a, b)


def _py_max(a: float, b: float) -> float:
    return math.nan if math.isnan(a) or math.isnan(b) else max(a, b)


class _PythonOps:
    """Evaluate a formula on a Python int step, in double precision."""

    tensor = False
    cast = staticmethod(float)
    floor = staticmethod(_py_floor)
    ceil = staticmethod(_py_ceil)
    cos = staticmethod(_py_guard(math.cos))
    exp = staticmethod(_py_guard(math.exp))
    log = staticmethod(_py_guard(_py_log))
    sqrt = staticmethod(_py_guard(math.sqrt))
    pow = staticmethod(_py_guard(_py_pow))
    div = staticmethod(_py_div)
    minimum = staticmethod(_py_min)
    maximum = staticmethod(_py_max)

    @staticmethod
    def where(pred: bool, a: float, b: float) -> float:
        return a if pred else b

    @staticmethod
    def cond(pred: bool, true_fn: Callable[[], float], false_fn: Callable[[], float]) -> float:
        return true_fn() if pred else false_fn()

    @staticmethod
    def normal(generator: torch.Generator | None, dtype: torch.dtype) -> float:
        device = generator.device if generator is not None else "cpu"
        return torch.randn((), generator=generator, dtype=dtype, device=device).item()


_FORMATS: dict[torch.dtype, tuple[int, int, float]] = {}


def _format(dtype: torch.dtype) -> tuple[int, int, float]:
    """(significand bits, frexp exponent of the smallest normal, largest finite) of ``dtype``."""
    fmt = _FORMATS.get(dtype)
    if fmt is None:
        info = torch.finfo(dtype)
        fmt = (round(-math.log2(info.eps)) + 1, round(math.log2(info.tiny)) + 1, float(info.max))
        _FORMATS[dtype] = fmt
    return fmt


def _round_to(value: float, dtype: torch.dtype) -> float:
    """``value`` rounded to ``dtype`` (IEEE round to nearest even, subnormals, overflow to inf).

    Pure Python arithmetic on the host, so it costs no tensor and traces under ``torch.compile``.
    """
    if dtype == torch.float64 or value == 0.0 or not math.isfinite(value):
        return value
    digits, min_exp, largest = _format(dtype)
    _, exp = math.frexp(value)
    lsb = max(exp, min_exp) - digits  # the exponent of the last kept bit
    rounded = math.ldexp(round(math.ldexp(value, -lsb)), lsb)
    if abs(rounded) > largest:
        return math.copysign(math.inf, value)
    return rounded


class _TorchOps:
    """Evaluate a formula elementwise on an integer tensor step, in ``dtype``, on its device.

    Python numbers that meet a tensor are cast to the tensor's dtype by PyTorch, as TF casts
    them to the learning-rate dtype. ``+ - * /`` run in ``dtype`` (IEEE, correctly rounded, as
    in TF). The transcendental functions (``cos``, ``exp``, ``log``, ``sqrt``, ``pow``) are
    evaluated in float64 and rounded to ``dtype``: TF's CPU kernels on a scalar step use the C
    library's float functions, which are correctly rounded in practice, while PyTorch's float32
    kernels are only accurate to about an ulp; an ulp is enough to move a ``floor`` across a
    restart of ``cosine_decay_restarts`` or to change ``1 + cos(x)`` near its zero by 1e-5
    relative. Operations TF performs on two float32 constants (``log(t_mul)``,
    ``ws ** -1.5``) are computed on the host in double precision from the rounded operands
    and rounded again, which never touches the step's device.

    Under ``torch.compile`` the hyperparameters may be traced as symbolic floats (dynamo does
    that after recompiling a frame for different values), which host-side rounding cannot
    handle; there constants are left to PyTorch's casts and constant-only operations run on
    0-dim CPU tensors, which may differ from eager mode in the last bit.
    """

    tensor = True

    def __init__(self, step: torch.Tensor, dtype: torch.dtype) -> None:
        self.step = step
        self.dtype = dtype
        # MPS has no float64; there the functions run in `dtype`.
        self.wide = dtype if step.device.type == "mps" else torch.float64
        self.compiling = torch.compiler.is_compiling()

    # helpers ---------------------------------------------------------------------------
    def _scalar(self, torch_fn: Callable[..., torch.Tensor], py_fn: Callable[..., float],
                *args: float) -> Value:
        if self.compiling:
            wide = [torch.tensor(a, dtype=self.wide) for a in args]
            return torch_fn(*wide).to(self.dtype)
        return _round_to(py_fn(*(_round_to(float(a), self.dtype) for a in args)), self.dtype)

    def _widen(self, x: Value) -> Value:
        return x.to(self.wide) if isinstance(x, torch.Tensor) else x

    def full(self, value: float) -> torch.Tensor:
        return torch.full_like(self.step, value, dtype=self.dtype)

    def finish(self, value: Value) -> torch.Tensor:
        if not isinstance(value, torch.Tensor):
            return self.full(value)
        return value if value.dtype == self.dtype else value.to(self.dtype)

    # operations ------------------------------------------------------------------------
    def cast(self, x: Value) -> Value:
        if isinstance(x, torch.Tensor):
            return x.to(self.dtype)
        if self.compiling:
            return x
        return _round_to(float(x), self.dtype)

    def _unary(self, fn: Callable[[torch.Tensor], torch.Tensor], py_fn: Callable[[float], float],
               x: Value) -> Value:
        if isinstance(x, torch.Tensor):
            return fn(x.to(self.wide)).to(self.dtype)
        return self._scalar(fn, py_fn, x)

    def floor(self, x: Value) -> Value:
        return torch.floor(x) if isinstance(x, torch.Tensor) else self._scalar(
            torch.floor, _py_floor, x)

    def ceil(self, x: Value) -> Value:
        return torch.ceil(x) if isinstance(x, torch.Tensor) else self._scalar(
            torch.ceil, _py_ceil, x)

    def cos(self, x: Value) -> Value:
        return self._unary(torch.cos, _PythonOps.cos, x)

    def exp(self, x: Value) -> Value:
        return self._unary(torch.exp, _PythonOps.exp, x)

    def log(self, x: Value) -> Value:
        return self._unary(torch.log, _PythonOps.log, x)

    def sqrt(self, x: Value) -> Value:
        return self._unary(torch.sqrt, _PythonOps.sqrt, x)

    def pow(self, a: Value, b: Value) -> Value:
        if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
            return torch.pow(self._widen(a), self._widen(b)).to(self.dtype)
        return self._scalar(torch.pow, _PythonOps.pow, a, b)

    def div(self, a: Value, b: Value) -> Value:
        # Tensor by tensor only: PyTorch divides by a Python scalar, or a Python scalar by a
        # tensor, as a multiplication by a reciprocal (not IEEE division, unlike TF).
        if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
            a = a if isinstance(a, torch.Tensor) else self.full(a)
            b = b if isinstance(b, torch.Tensor) else self.full(b)
            return torch.div(a, b)
        return self._scalar(torch.div, _py_div, a, b)

    def _extremum(self, torch_fn: Callable[..., torch.Tensor], clamp: Callable[..., torch.Tensor],
                  py_fn: Callable[[float, float], float], a: Value, b: Value) -> Value:
        # `clamp(tensor, number)` bounds a tensor by a Python number without making it a tensor.
        ta, tb = isinstance(a, torch.Tensor), isinstance(b, torch.Tensor)
        if ta and tb:
            return torch_fn(a, b)
        if ta:
            return clamp(a, b)
        if tb:
            return clamp(b, a)
        return self._scalar(torch_fn, py_fn, a, b)

    def minimum(self, a: Value, b: Value) -> Value:
        return self._extremum(torch.minimum, torch.clamp_max, _py_min, a, b)

    def maximum(self, a: Value, b: Value) -> Value:
        return self._extremum(torch.maximum, torch.clamp_min, _py_max, a, b)

    def where(self, pred: Any, a: Value, b: Value) -> Value:
        if isinstance(pred, bool):
            return a if pred else b
        return torch.where(pred, self.finish(a), self.finish(b))

    def cond(self, pred: Any, true_fn: Callable[[], Value], false_fn: Callable[[], Value]) -> Value:
        # Both branches are computed and selected elementwise (no host sync); the unselected
        # branch may hold inf/nan, which torch.where drops.
        if isinstance(pred, bool):
            return true_fn() if pred else false_fn()
        return self.where(pred, true_fn(), false_fn())

    def normal(self, generator: torch.Generator | None, dtype: torch.dtype) -> torch.Tensor:
        device = generator.device if generator is not None else self.step.device
        noise = torch.randn(self.step.shape, generator=generator, dtype=dtype, device=device)
        return noise.to(self.step.device)


_PYTHON_OPS = _PythonOps()


# --------------------------------------------------------------------------------------------
# Policy
# --------------------------------------------------------------------------------------------


class Policy:
    """A learning-rate policy: hyperparameters fixed at construction, a pure function of the step.

    ``policy(global_step)`` returns the learning rate at ``global_step``, the number of applied
    updates so far:

    - a Python ``int`` (``>= 0``) gives a Python ``float``, computed in double precision;
    - an integer tensor gives a floating tensor of the same shape (0-dim for a 0-dim step) on the
      same device, in ``policy.dtype`` (``torch.float32`` by default, as TensorFlow computes
      these policies), elementwise and without any host synchronisation, so it can run inside
      an optimizer step, ``torch.compile`` or a CUDA graph. Tensor values are not validated
      (that would need a sync); a negative tensor step gives whatever the formula gives.

    The two paths evaluate the same formula and agree to float32 rounding.

    Every constructor validates all of its arguments and raises ``TypeError`` or ``ValueError``
    in the project's format ("Expected `decay_steps` in (0, inf), got 0").

    Subclasses set :attr:`qualified_name` and :attr:`hyperparameters`, check their arguments in
    ``__init__`` and implement ``_compute(ops, step)``. A policy is an ordinary picklable
    object; :meth:`state_dict` holds its mutable state (only the random-number generator of
    the noisy policy has any).

    Args:
        dtype (torch.dtype): the floating dtype of a tensor step's result (TF computes these
            policies in float32).

    Example:
        >>> import torch
        >>> from trainop import schedules
        >>> p = schedules.policy("poly_decay", learning_rate=0.02, decay_steps=1000, power=2.0)
        >>> round(p(500), 6)
        0.005
        >>> p(torch.tensor(500)).dtype
        torch.float32
    """

    #: The registry name, e.g. ``"openseq2seq.poly_decay"`` or ``"tf1.exponential_decay"``.
    qualified_name: ClassVar[str] = ""
    #: The constructor arguments, in signature order (used by ``repr`` and :meth:`get_config`).
    hyperparameters: ClassVar[tuple[str, ...]] = ()

    dtype: torch.dtype = torch.float32

    def __init__(self, *, dtype: torch.dtype = torch.float32) -> None:
        self.dtype = _check_dtype("dtype", dtype)

    # evaluation -------------------------------------------------------------------------
    def __call__(self, global_step: int | torch.Tensor) -> float | torch.Tensor:
        """The learning rate at ``global_step`` (a Python int, or an integer tensor)."""
        if isinstance(global_step, torch.Tensor):
            if global_step.is_floating_point() or global_step.is_complex() or (
                global_step.dtype == torch.bool
            ):
                raise TypeError(
                    f"Expected `global_step` to be an integer or an integer tensor, got a "
                    f"tensor of dtype {global_step.dtype}"
                )
            step = global_step if global_step.dtype == torch.int64 else global_step.long()
            ops = _TorchOps(step, self.dtype)
            return ops.finish(self._compute(ops, step))
        step = check_int("global_step", global_step, NON_NEGATIVE)
        return float(self._compute(_PYTHON_OPS, step))

    def _compute(self, ops: Any, step: Any) -> Value:  # pragma: no cover - abstract
        raise NotImplementedError

    # introspection and state --------------------------------------------------------------
    def get_config(self) -> dict[str, Any]:
        """The hyperparameters as a new dict, in signature order (``dtype`` included)."""
        config = {name: getattr(self, name) for name in self.hyperparameters}
        config.setdefault("dtype", self.dtype)
        return config

    def state_dict(self) -> dict[str, Any]:
        """Mutable state to checkpoint (empty for deterministic policies)."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        if not isinstance(state_dict, dict):
            raise TypeError(f"Expected `state_dict` to be a dict, got {describe(state_dict)}")
        if state_dict:
            raise ValueError(
                f"Expected an empty `state_dict` for {type(self).__name__}, got keys "
                f"{sorted(state_dict)}"
            )

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"

    # not a number ---------------------------------------------------------------------------
    def _not_a_number(self, *_: Any) -> Any:
        """A policy where code expects a learning rate as a number (``float(lr)``, ``lr *
        gamma``: torch's ``ReduceLROnPlateau`` and ``StepLR``-like schedulers on a param group
        whose ``lr`` is this policy): one ``TypeError`` that says what to do instead."""
        raise TypeError(
            f"{type(self).__name__} is a trainop schedule (a function of the step), not a "
            f"number: a torch LR scheduler cannot scale or read it as a learning rate; give the "
            f"optimizer a float learning rate and let one scheduler drive it (a torch "
            f"scheduler, or this schedule as trainop.schedules.PolicyScheduler(optimizer, "
            f"policy), which composes with torch's SequentialLR/ChainedScheduler)")

    __float__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _not_a_number
    __add__ = __radd__ = __sub__ = __rsub__ = __pow__ = _not_a_number


class _Decay(Policy):
    """A policy that decays ``learning_rate`` over ``decay_steps``: checks ``dtype`` and the two.

    Subclasses call ``super().__init__(learning_rate, decay_steps, dtype=dtype)`` first, then
    check their own arguments, so the checks run in signature order.
    """

    #: The range ``learning_rate`` is checked against.
    _learning_rate_range: ClassVar[Interval] = NON_NEGATIVE

    def __init__(self, learning_rate: float, decay_steps: Number, *,
                 dtype: torch.dtype = torch.float32) -> None:
        super().__init__(dtype=dtype)
        self.learning_rate = check_real("learning_rate", learning_rate, self._learning_rate_range)
        self.decay_steps = _check_steps("decay_steps", decay_steps)


def _register(cls: type[Policy]) -> type[Policy]:
    """Class decorator: add a policy class to the registry under ``cls.qualified_name``."""
    _REGISTRY[cls.qualified_name] = cls
    return cls


def _resolve(name: Any) -> type[Policy]:
    if not isinstance(name, str):
        raise TypeError(f"Expected `name` to be a policy name (str), got {describe(name)}")
    if name in _REGISTRY:
        return _REGISTRY[name]
    matches = sorted(q for q in _REGISTRY if q.rsplit(".", 1)[-1] == name)
    if len(matches) == 1:
        return _REGISTRY[matches[0]]
    if matches:
        raise ValueError(f"Policy name {name!r} is ambiguous: use one of {matches}")
    raise ValueError(f"Expected `name` to be one of {available_policies()}, got {name!r}")


def available_policies() -> list[str]:
    """The qualified names of all registered policies, sorted (``"tf1.cosine_decay"``, ...)."""
    return sorted(_REGISTRY)


def policy(name: str, /, **hyperparameters: Any) -> Policy:
    """Build a policy by name: ``policy("poly_decay", learning_rate=0.02, decay_steps=1000)``.

    ``name`` is a qualified name from :func:`available_policies` (``"openseq2seq.poly_decay"``,
    ``"tf1.polynomial_decay"``) or its last part when that is unambiguous. ``piecewise_constant``
    and ``cosine_decay`` exist in both families, so they need the prefix (``ValueError``
    otherwise). Unknown keyword arguments raise ``TypeError`` from the class constructor.
    """
    return _resolve(name)(**hyperparameters)
