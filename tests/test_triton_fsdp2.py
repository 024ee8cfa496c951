"""#31, sharded: FSDP2's local shards take trainop's Triton kernels, checked on the CPU under
Triton's interpreter (``TRITON_INTERPRET=1`` set in the rank processes before the kernels are
first used). 2 gloo ranks under ``fully_shard`` with ``implementation="triton"``, each on half of
every batch, equal one process on the whole batch (``test_fsdp2``'s model, batches and
tolerance); a spy on ``kernels.triton.run`` shows the kernels ran on plain local shards (half of
each tensor's rows), so a silent fallback to ``foreach`` fails. NovoGrad takes each whole
tensor's squared norm in one ``all_reduce`` per bucket, then its Triton kernel on the shards.
A ``GradientPipeline`` (dynamic loss scaler, clip by global norm, finite check, all-zero filter)
takes its statistics from the Triton read pass on the local shards, in ONE ``all_reduce`` per
step, and reads nothing on the host inside the step.

The interpreter is slow: the tiny model of ``test_fsdp2``, its 4 steps, a few classes."""

from __future__ import annotations

import os

import pytest
import torch
from optimizer_kwargs import kwargs_for
from test_fsdp2 import (
    STEPS,
    _model,
    _sharded,
    _spawn,
    _train,
)

from trainop.bench._ranks import rank_group
from trainop.kernels import triton as tk
from trainop.registry import OPTIMIZER_CLASSES

pytestmark = [pytest.mark.skipif(not tk.available(), reason="Triton is not installed"),
              pytest.mark.filterwarnings("ignore::RuntimeWarning")]

#: A representative set: plain, momentum, Adam's family, centered RMSProp, FTRL, and NovoGrad
#: (a per-tensor norm: the whole tensor's, through one all_reduce).
CLASSES = {"GradientDescentOptimizer": {}, "MomentumOptimizer": {}, "AdamOptimizer": {},
           "AdamWOptimizer": {}, "RMSPropOptimizer": {"centered": True}, "FtrlOptimizer": {},
           "NovoGrad": {}}
#: The model's tensors' element counts, and those of rank 0's shards (dim 0 halved).
FULL = [128, 16, 64, 4]
LOCAL = [64, 8, 32, 2]


def _spied_runs() -> list[tuple[str, list[int]]]:
    """From now on, each ``kernels.triton.run`` that ran (returned True) on plain tensors:
    its rule and the variables' element counts (a DTensor would fail the check)."""
    from trainop.kernels.shards import is_sharded

    ran: list[tuple[str, list[int]]] = []
    real = tk.run

    def spy(rule, lists, *args, **kwargs):
        done = real(rule, lists, *args, **kwargs)
        if done:
            assert not any(is_sharded(t) for tensors in lists for t in tensors)
            ran.append((rule, [v.numel() for v in lists[0]]))
        return done

    tk.run = spy
    return ran


def _make(name: str, params, implementation: str | None = None):
    """``test_fsdp2``'s optimizer ``name`` with ``CLASSES``' extras."""
    return OPTIMIZER_CLASSES[name](params=params, implementation=implementation,
                                   **kwargs_for(name), **CLASSES[name])


def _optimizers_rank(rank: int, port: int, out: str) -> None:
    os.environ["TRITON_INTERPRET"] = "1"
    with rank_group(rank, 2, port):
        ran = _spied_runs()
        results = {}
        for name in CLASSES:
            model = _sharded(_model())
            opt = _make(name, model.parameters(), "triton")
            ran.clear()
            _train(model, opt, rank)
            results[name] = ([p.full_tensor().detach().clone() for p in model.parameters()],
                             list(ran))
        if rank == 0:
            torch.save(results, out)


@pytest.fixture(scope="module")
def sharded_runs(tmp_path_factory) -> dict:
    out = str(tmp_path_factory.mktemp("triton_fsdp2") / "rank0.pt")
    _spawn(_optimizers_rank, out)
    return torch.load(out, weights_only=False)


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_two_ranks_on_the_triton_kernels_equal_one_process(sharded_runs, name):
    params, ran = sharded_runs[name]
    model = _model()
    _train(model, _make(name, model.parameters()), None)
    for got, want in zip(params, model.parameters(), strict=True):
        torch.testing.assert_close(got, want.detach(), rtol=1e-5, atol=1e-6)
    assert not torch.equal(params[0], _model()[0].weight)  # it trained
    assert [sizes for _, sizes in ran] == [LOCAL] * STEPS, ran  # every step on the shards
