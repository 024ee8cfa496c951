"""The bench's TF1 peer for contrib's decoupled-weight-decay optimizers agrees with trainop.

``tf.contrib.opt.MomentumWOptimizer`` and ``AdamWOptimizer`` are not in TF 2; the bench rebuilds
them (``tf1_decay``: contrib's decay op ahead of TF's own Momentum / Adam kernel). Both sides run
the bench's own code (``Tf1Run``; trainop's class over ``WorkloadData.clone()``) with the bench's
arguments (``SPECS``) from the same variables, applying the same gradients for ``STEPS`` steps.
Every variable and slot must agree within 1e-6 relative (float32) or 1e-12 (float64), for every
implementation trainop offers, dense (two tensors) and sparse (a gradient with a repeated row).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trainop.bench.candidates import implementations_of
from trainop.bench.specs import SPECS
from trainop.bench.tf1_peer import Tf1Run
from trainop.bench.workloads import Workload, WorkloadData
from trainop.registry import OPTIMIZER_CLASSES

STEPS = 5
TOLERANCE = {torch.float32: 1e-6, torch.float64: 1e-12}
SLOTS = {"MomentumWOptimizer": ("momentum",), "AdamWOptimizer": ("m", "v")}
CPU = torch.device("cpu")


def _data(sparse: bool, dtype: torch.dtype) -> WorkloadData:
    """Parameters N(0, 1) and gradients N(0, 1); sparse: rows 0, 4, 2, 4, 6 of a 7 x 3 table."""
    gen = torch.Generator().manual_seed(11)
    if sparse:
        shape = (7, 3)
        indices = torch.tensor([[0, 4, 2, 4, 6]])
        grads = [torch.sparse_coo_tensor(indices, torch.randn(5, 3, generator=gen), shape,
                                         check_invariants=True)]
        workload = Workload("sparse", (shape,), touched_rows=4)
    else:
        shapes = ((5, 3), (4,))
        grads = [torch.randn(s, generator=gen) for s in shapes]
        workload = Workload("dense", shapes)
    params = [torch.randn(g.shape, generator=gen).to(dtype) for g in grads]
    return WorkloadData(workload, params, [g.to(dtype) for g in grads])


def _tf1(tf, name: str, data: WorkloadData, decoupled_decay: bool = True) -> dict:
    """Variables and slots (numpy, one list per key) after STEPS steps of the bench's peer."""
    spec = SPECS[name]
    kwargs = dict(spec.tf1_kwargs)
    if not decoupled_decay:
        del kwargs["weight_decay"]  # the base class alone
    run = Tf1Run(tf, spec.tf1, kwargs, data, CPU, threads=1, decoupled_decay=decoupled_decay)
    try:
        for _ in range(STEPS):
            run.step()
        fetch = {"var": run.variables}
        for slot in SLOTS[name]:
            fetch[slot] = [run.optimizer.get_slot(v, slot) for v in run.variables]
        return run.session.run(fetch)
    finally:
        run.close()


def _trainop(name: str, implementation: str | None, data: WorkloadData) -> dict:
    """The same for trainop's ``name`` with ``implementation`` (None: its automatic choice)."""
    params, grads = data.clone()
    for p, g in zip(params, grads, strict=True):
        p.grad = g
    opt = OPTIMIZER_CLASSES[name](params=params, implementation=implementation,
                                  **SPECS[name].kwargs)
    for _ in range(STEPS):
        opt.step()
    out = {"var": [p.detach().numpy().copy() for p in params]}
    for slot in SLOTS[name]:
        out[slot] = [opt.get_slot(p, slot).detach().numpy().copy() for p in params]
    return out


def _assert_agree(ours: dict, theirs: dict, rtol: float) -> None:
    assert ours.keys() == theirs.keys()
    for key, arrays in theirs.items():
        for i, (a, b) in enumerate(zip(ours[key], arrays, strict=True)):
            assert a.dtype == b.dtype
            np.testing.assert_allclose(a, b, rtol=rtol, atol=0, err_msg=f"{key}[{i}]")


def _implementations(name: str) -> list[str | None]:
    return [*implementations_of(OPTIMIZER_CLASSES[name]), None]


CASES = [(name, impl) for name in SLOTS for impl in _implementations(name)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("name, implementation", CASES,
                         ids=[f"{n.removesuffix('Optimizer')}-{i or 'auto'}" for n, i in CASES])
def test_tf1_decay_peer_matches_trainop(tf, name, implementation, sparse, dtype):
    data = _data(sparse, dtype)
    theirs = _tf1(tf, name, data)
    _assert_agree(_trainop(name, implementation, data), theirs, TOLERANCE[dtype])


@pytest.mark.parametrize("name", sorted(SLOTS))
def test_the_decay_op_is_what_makes_them_agree(tf, name):
    """Without the decay op, TF's base kernel alone misses trainop by far more than 1e-6."""
    data = _data(False, torch.float32)
    ours = _trainop(name, "reference", data)["var"]
    base = _tf1(tf, name, data, decoupled_decay=False)["var"]
    for a, b in zip(ours, base, strict=True):
        assert np.max(np.abs(a - b) / np.abs(b)) > 1e-5
