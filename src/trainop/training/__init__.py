"""The training-step layer: what a training loop calls, composed from the layers below.

- ``trainop.training.numerics``: find where the first NaN or Inf of a run comes from
  (``check_numerics``, ``add_check_numerics_ops``, ``NumericsError``).
"""

from trainop.training.numerics import (
    NumericsChecker,
    NumericsError,
    TensorStats,
    add_check_numerics_ops,
    check_numerics,
)

__all__ = [
    "NumericsChecker",
    "NumericsError",
    "TensorStats",
    "add_check_numerics_ops",
    "check_numerics",
]
