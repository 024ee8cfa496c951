"""The allowed ranges of hyperparameters shared by several optimizers."""

from trainop.contract.validation import Interval

NON_NEGATIVE = Interval(0.0, float("inf"), high_closed=False)
POSITIVE = Interval(0.0, float("inf"), low_closed=False, high_closed=False)
UNIT_OPEN_RIGHT = Interval(0.0, 1.0, high_closed=False)
UNIT_CLOSED = Interval(0.0, 1.0)
NON_POSITIVE = Interval(float("-inf"), 0.0, low_closed=False)
REAL = Interval(float("-inf"), float("inf"), low_closed=False, high_closed=False)
