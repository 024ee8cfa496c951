"""``add_check_numerics_ops``: the TF/RETURNN-named entry point to the numerics checks."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from trainop.contract.validation import check_bool, check_name, describe
from trainop.training.numerics.checker import PHASES, NumericsChecker

__all__ = ["add_check_numerics_ops"]


def add_check_numerics_ops(fetches: Any = None, ignore_ops: Iterable[str] | None = None,
                           use_check_numerics: bool = True, debug_print_added_checks: bool = True,
                           name: str = "add_check_numerics_ops", *,
                           optimizer: Any = None) -> NumericsChecker:
    """TF's ``tf.add_check_numerics_ops`` / RETURNN's ``add_check_numerics_ops`` on PyTorch.

    TF adds a ``check_numerics`` op after every floating-point op of the graph and returns a
    group op to run; in PyTorch there is no graph to rewrite, so this installs the checks of
    ``trainop.check_numerics`` right away and returns the ``NumericsChecker`` (also a context
    manager; ``remove()`` takes the checks out). The first NaN or Inf then raises
    ``trainop.NumericsError`` naming the phase, module, op and step, where TF raises
    ``InvalidArgumentError("<op>:<index> : Tensor had NaN values")``.

    Args:
        fetches: the modules to watch (a module or a list of modules); ``None`` watches every
            module called while the checks are installed, each top-level module with the
            qualified names of its submodules (TF: every op of the graph).
        ignore_ops: module names, op names (``"aten.masked_fill"``) or fnmatch patterns to skip
            (RETURNN: op types). ``None``: nothing is skipped (TF's and RETURNN's lists of op
            types that cannot create NaN/Inf have no use here: a value is only located where a
            check saw it).
        use_check_numerics: ``False`` is RETURNN's manual mode, which also prints the
            offending tensor: the error's ``tensor_stats`` keeps its values.
        debug_print_added_checks: print ``add check for: ...`` for every module checked (as
            RETURNN prints every check it adds).
        name: a name, as in TF (validated; unused).
        optimizer: keyword-only, trainop's addition: also check this optimizer's updates.

    Example::

        checker = trainop.add_check_numerics_ops([model], debug_print_added_checks=False)
        ...  # training steps; raises trainop.NumericsError at the first NaN/Inf
        checker.remove()
    """
    check_name(name)
    print_tensors = not check_bool("use_check_numerics", use_check_numerics)
    verbose = check_bool("debug_print_added_checks", debug_print_added_checks)
    if fetches is None:
        modules = None
    elif isinstance(fetches, torch.nn.Module):
        modules = [fetches]
    elif isinstance(fetches, list | tuple) and all(isinstance(m, torch.nn.Module)
                                                     for m in fetches):
        modules = list(fetches)
    else:
        raise TypeError(f"Expected `fetches` to be None, a torch.nn.Module or a list of modules, "
                        f"got {describe(fetches)}")
    if ignore_ops is None:
        ignore: list[str] = []
    elif isinstance(ignore_ops, str) or not isinstance(ignore_ops, Iterable):
        raise TypeError(f"Expected `ignore_ops` to be None or an iterable of names, got "
                        f"{describe(ignore_ops)}")
    else:
        ignore = list(ignore_ops)
    checker = NumericsChecker(modules, optimizer, ignore, print_tensors, phases=PHASES,
                              debug_print=verbose)
    return checker.install()
