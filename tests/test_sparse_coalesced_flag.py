"""A sparse gradient flagged coalesced that repeats rows (``torch.sparse_coo_tensor(...,
is_coalesced=True)`` takes the caller's word) is summed per row as TF's
``_apply_sparse_duplicate_indices`` does, on every implementation (#34: the reference and
foreach paths updated each repeat on its own, up to 0.6 off)."""

from __future__ import annotations

import pytest
import torch

import trainop

IMPLEMENTATIONS = ["reference", "foreach", "native"]
INDICES = torch.tensor([[1, 1, 2]])
VALUES = torch.tensor([[1.0, 2.0], [3.0, 3.0], [1.0, 1.0]])


def _run(cls, implementation, *, lying, **kwargs):
    v = torch.nn.Parameter(torch.zeros(4, 2, dtype=torch.float64))
    opt = cls(0.1, params=[v], implementation=implementation, **kwargs)
    g = torch.sparse_coo_tensor(INDICES, VALUES.double(), (4, 2), is_coalesced=lying)
    for _ in range(2):
        opt.apply_gradients([(g, v)])
    return v.detach()


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_gradient_descent_sums_the_repeated_rows(implementation):
    """Two steps of ``var -= 0.1 * g``, row 1's gradient being 1 + 3 and 2 + 3."""
    v = _run(trainop.GradientDescentOptimizer, implementation, lying=True)
    torch.testing.assert_close(v, torch.tensor([[0.0, 0.0], [-0.8, -1.0], [-0.2, -0.2],
                                                [0.0, 0.0]], dtype=torch.float64))


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("cls, kwargs", [
    (trainop.AdagradOptimizer, {}), (trainop.MomentumOptimizer, {"momentum": 0.9}),
    (trainop.AdamOptimizer, {}), (trainop.RMSPropOptimizer, {}), (trainop.FtrlOptimizer, {}),
], ids=lambda c: getattr(c, "__name__", ""))
def test_a_lying_flag_reads_as_the_honest_gradient(cls, kwargs, implementation):
    """The same gradient without the flag (coalesced for real, rows summed) is the reference."""
    honest = _run(cls, "reference", lying=False, **kwargs)
    torch.testing.assert_close(_run(cls, implementation, lying=True, **kwargs), honest,
                               rtol=1e-12, atol=1e-12)


def test_adagrad_row_sum_from_the_rule():
    """Adagrad's first step on the summed row: accum = 0.1 + 4^2, var = -0.1 * 4 / sqrt(accum)
    (TF's initial accumulator 0.1)."""
    v = torch.nn.Parameter(torch.zeros(4, 2, dtype=torch.float64))
    opt = trainop.AdagradOptimizer(0.1, params=[v], implementation="reference")
    g = torch.sparse_coo_tensor(INDICES, VALUES.double(), (4, 2), is_coalesced=True)
    opt.apply_gradients([(g, v)])
    # rel 1e-7: the rate 0.1 is held as float32
    assert float(v[1, 0]) == pytest.approx(-0.1 * 4 / (0.1 + 16) ** 0.5, rel=1e-7)
