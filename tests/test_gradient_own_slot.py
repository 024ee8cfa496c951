"""A gradient that IS a slot tensor of its own parameter (``p.grad = opt.state[p]["m"]``, the
very object the step writes) is read before any write, as TF computes every gradient before
any apply: every class and implementation (Triton under the interpreter) against TF1's rule in
float64 (``tf_formulas``), with and without the metadata reader. Another parameter's slot
object is ``test_differential``'s ``slot`` kind (#47's gap after A1)."""

from __future__ import annotations

import pytest
from test_differential import (
    VARIANTS,
    _skip_unavailable,
    a1_plan,
    implementations,
    make_grad,
    run_against_tf,
)

from trainop import OPTIMIZER_CLASSES

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy in the interpreter

from interpreter_mode import interpreter_for_the_module as _interpreter  # noqa: E402, F401


def own_slot(kind, i, params, shared, gen, scale, opt):
    """``kind`` "own_slot": the first slot tensor of parameter ``i`` shaped like it (a class
    without one gets a gradient of its own)."""
    if kind != "own_slot":
        return make_grad(kind, i, params, shared, gen, scale)
    state = opt.state.get(params[i], {})
    slot = next((s for _, s in sorted(state.items()) if s.shape == params[i].shape), None)
    return slot if slot is not None else make_grad("own", i, params, shared, gen, scale)


CASES = [pytest.param(name, impl, reads, id=f"{name}-{impl}-{'python' if reads else 'reader'}")
         for name in sorted(OPTIMIZER_CLASSES) for impl in implementations(name)
         for reads in (False, True) if not (reads and impl == "triton")]


@pytest.mark.parametrize(("name", "impl", "python_reads"), CASES)
def test_a_gradient_that_is_its_own_slot_is_read_first(name, impl, python_reads):
    _skip_unavailable(impl)
    run_against_tf(name, impl, VARIANTS[name][-1], a1_plan("own_slot", python_reads),
                   make_gradient=own_slot)
