"""Every validation branch of the numerics checks, in one table (as ``test_errors.py``)."""

from __future__ import annotations

import pytest
import torch
from error_table import Row, check, ids
from torch import nn

import trainop


def model() -> nn.Module:
    return nn.Sequential(nn.Linear(2, 2))


def installed_twice():
    checker = trainop.check_numerics(model())
    with checker:
        checker.install()


ERRORS = [
    Row("model not a module", lambda: trainop.check_numerics(42), TypeError,
        r"Expected `model` to be a torch\.nn\.Module or an iterable of modules, got 42 \(int\)$"),
    Row("model a tensor", lambda: trainop.check_numerics(torch.zeros(2)), TypeError,
        r"Expected `model` to be a torch\.nn\.Module or an iterable of modules, got tensor"),
    Row("model list with a non-module", lambda: trainop.check_numerics([model(), "x"]),
        TypeError, r"Expected the modules to watch to be torch\.nn\.Module, got 'x' \(str\) at "
                   r"index 1$"),
    Row("optimizer not an optimizer", lambda: trainop.check_numerics(model(), optimizer=3),
        TypeError, r"Expected `optimizer` to be a torch\.optim\.Optimizer, a trainop "
                   r"GradientPipeline or an optimizer wrapper, or None, got 3 \(int\)$"),
    Row("ignore item of a wrong type", lambda: trainop.check_numerics(model(), ignore=[1.5]),
        TypeError, r"Expected ignore\[0\] to be a module name, an op name or pattern \(str\), "
                   r"or a torch\.nn\.Module, got 1\.5 \(float\)$"),
    Row("print_tensors not a bool",
        lambda: trainop.check_numerics(model(), print_tensors="yes"), TypeError,
        r"Expected `print_tensors` to be a bool, got 'yes' \(str\)$"),
    Row("phases a string", lambda: trainop.check_numerics(model(), phases="forward"),
        TypeError, r"Expected `phases` to be a tuple of names from \['forward', 'backward', "
                   r"'update'\], got 'forward' \(str\)$"),
    Row("phases empty", lambda: trainop.check_numerics(model(), phases=()), ValueError,
        r"Expected `phases` to name at least one of \['forward', 'backward', 'update'\], "
        r"got \(\)$"),
    Row("phases unknown", lambda: trainop.check_numerics(model(), phases=("forward", "loss")),
        ValueError, r"Expected `phases\[1\]` to be one of \['forward', 'backward', 'update'\], "
                    r"got 'loss'$"),
    Row("replay not a bool", lambda: trainop.check_numerics(model(), replay="no"), TypeError,
        r"Expected `replay` to be a bool, got 'no' \(str\)$"),
    Row("installed twice", installed_twice, RuntimeError,
        r"^this NumericsChecker is already installed$"),
    Row("add_check_numerics_ops fetches", lambda: trainop.add_check_numerics_ops(fetches="all"),
        TypeError, r"Expected `fetches` to be None, a torch\.nn\.Module or a list of modules, "
                   r"got 'all' \(str\)$"),
    Row("add_check_numerics_ops ignore_ops a string",
        lambda: trainop.add_check_numerics_ops(model(), ignore_ops="aten.log"), TypeError,
        r"Expected `ignore_ops` to be None or an iterable of names, got 'aten\.log' \(str\)$"),
    Row("add_check_numerics_ops use_check_numerics",
        lambda: trainop.add_check_numerics_ops(model(), use_check_numerics=1), TypeError,
        r"Expected `use_check_numerics` to be a bool, got 1 \(int\)$"),
    Row("add_check_numerics_ops debug_print_added_checks",
        lambda: trainop.add_check_numerics_ops(model(), debug_print_added_checks=None),
        TypeError, r"Expected `debug_print_added_checks` to be a bool, got None \(NoneType\)$"),
    Row("add_check_numerics_ops name", lambda: trainop.add_check_numerics_ops(model(), name=3),
        TypeError, r"Expected `name` to be a non-empty string, got 3 \(int\)$"),
]


@pytest.mark.parametrize("row", ERRORS, ids=ids(ERRORS))
def test_error(row: Row):
    check(row)
    # a rejected call leaves no hook behind
    assert not torch.nn.modules.module._global_forward_hooks
    assert not torch.nn.modules.module._global_forward_pre_hooks

