"""Numerics checks: find where the first NaN or Inf comes from (forward, backward or update),
cheaply enough to leave on. See ``docs/numerics.md``."""

from trainop.training.numerics.checker import NumericsChecker, check_numerics
from trainop.training.numerics.errors import NumericsError, TensorStats
from trainop.training.numerics.tf_entry import add_check_numerics_ops

__all__ = [
    "NumericsChecker",
    "NumericsError",
    "TensorStats",
    "add_check_numerics_ops",
    "check_numerics",
]
