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
from host_reads import ALL_READS, no_host_reads
from interpreter_shortcuts import nested_calls_unpatched
from optimizer_kwargs import kwargs_for
from test_fsdp2 import (
    STEPS,
    _model,
    _pipeline,
    _sharded,
    _spawn,
    _train,
    _train_pipeline,
    _WithExtra,
)
from triton_fast_reduce import patch_block_sums
from triton_numpy_shim import patch_triton_interpreter

from trainop.bench._ranks import counted_all_reduces, rank_group
from trainop.kernels import triton as tk
from trainop.registry import OPTIMIZER_CLASSES

pytestmark = [pytest.mark.skipif(not tk.available(), reason="Triton is not installed"),
              pytest.mark.filterwarnings("ignore::RuntimeWarning")]

#: A representative set: plain, momentum, Adam's family, centered RMSProp, FTRL, and NovoGrad
#: (a per-tensor norm: the whole tensor's, through one all_reduce).
CLASSES = {"GradientDescentOptimizer": {}, "MomentumOptimizer": {}, "AdamOptimizer": {},
           "AdamWOptimizer": {}, "RMSPropOptimizer": {"centered": True}, "FtrlOptimizer": {},
           "NovoGrad": {}}
#: The element counts of rank 0's shards of the model's tensors (128, 16, 64, 4: dim 0 halved).
LOCAL = [64, 8, 32, 2]


def _spied_runs() -> list[tuple[str, list[int]]]:
    """From now on, each dense call of the Triton path's one way in (``Entry.update``) that
    ran (returned True) on plain tensors: its rule and the variables' element counts (a
    DTensor would fail the check)."""
    from trainop.kernels.shards import is_sharded

    ran: list[tuple[str, list[int]]] = []
    real = tk.Entry.update

    def spy(self, rule, lists, *args, **kwargs):
        done = real(self, rule, lists, *args, **kwargs)
        if done:
            assert not any(is_sharded(t) for tensors in lists for t in tensors)
            ran.append((rule, [v.numel() for v in lists[0]]))
        return done

    tk.Entry.update = spy
    return ran


def _make(name: str, params, implementation: str | None = None):
    """``test_fsdp2``'s optimizer ``name`` with ``CLASSES``' extras."""
    return OPTIMIZER_CLASSES[name](params=params, implementation=implementation,
                                   **kwargs_for(name), **CLASSES[name])


def _train_optimizers(rank: int, ran: list) -> dict:
    """Each class of ``CLASSES`` on the Triton path under FSDP2: the whole parameters after
    ``STEPS`` steps, the spied runs and the ``all_reduce`` calls of the training."""
    results = {}
    for name in CLASSES:
        model = _sharded(_model())
        opt = _make(name, model.parameters(), "triton")
        ran.clear()
        with counted_all_reduces() as calls:
            _train(model, opt, rank)
        results[name] = ([p.full_tensor().detach().clone() for p in model.parameters()],
                         list(ran), len(calls))
    return results


def _rank(rank: int, port: int, out: str) -> None:
    """One spawn for both checks (each start of a rank costs seconds): the optimizers, then
    the pipeline."""
    os.environ["TRITON_INTERPRET"] = "1"
    patch_triton_interpreter()  # a spawned rank runs no conftest: Triton < 3.8, numpy >= 2.4
    patch_block_sums()  # (nor conftest's fast block sums: the same bits)
    # the interpreter's shortcuts, the same numbers (``interpreter_shortcuts``)
    with rank_group(rank, 2, port), nested_calls_unpatched():
        ran = _spied_runs()
        results = {"optimizers": _train_optimizers(rank, ran)}
        ran.clear()
        results["pipeline"] = _train_pipeline_sharded(rank, ran)
        if rank == 0:
            torch.save(results, out)


@pytest.fixture(scope="module")
def sharded_runs(tmp_path_factory) -> dict:
    out = str(tmp_path_factory.mktemp("triton_fsdp2") / "rank0.pt")
    _spawn(_rank, out)
    return torch.load(out, weights_only=False)


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_two_ranks_on_the_triton_kernels_equal_one_process(sharded_runs, name):
    params, ran, all_reduces = sharded_runs["optimizers"][name]
    model = _model()
    _train(model, _make(name, model.parameters()), None)
    for got, want in zip(params, model.parameters(), strict=True):
        torch.testing.assert_close(got, want.detach(), rtol=1e-5, atol=1e-6)
    assert not torch.equal(params[0], _model()[0].weight)  # it trained
    assert [sizes for _, sizes in ran] == [LOCAL] * STEPS, ran  # every step on the shards
    # NovoGrad: the whole tensors' squared norms of a step in one all_reduce
    assert all_reduces == (STEPS if name == "NovoGrad" else 0)


def _deferred_step_reads_nothing(pipe) -> bool:
    """One more ``pipe.step()`` with every host read patched to raise and the interpreter's
    launches deferred (it runs them with numpy, which would read), replayed after in order:
    whether the step read nothing on the host (the skip flag and loss scale included)."""
    from triton.runtime.interpreter import InterpretedFunction

    pending = []
    real = InterpretedFunction.run
    InterpretedFunction.run = lambda self, *a, **k: pending.append((self, a, k))
    try:
        with no_host_reads(ALL_READS):
            pipe.step()
        clean = True
    except AssertionError:
        clean = False
    finally:
        InterpretedFunction.run = real
    for f, a, k in pending:
        real(f, *a, **k)
    return clean and bool(pending)


def _train_pipeline_sharded(rank: int, ran: list) -> dict:
    """``test_fsdp2``'s pipeline run with the dynamic loss scaler over Adam on the Triton path
    under FSDP2, the read passes and runs spied, the all_reduces of each step counted; then a
    step checked for host reads."""
    read: list[list[int]] = []
    real = tk.l2_norms
    tk.l2_norms = lambda tensors, **k: read.append([t.numel() for t in tensors]) or real(
        tensors, **k)
    model = _WithExtra()
    _sharded(model, [*model.body, model.extra])
    pipe = _pipeline(model.parameters(), "backoff", "triton")
    per_step: list[int] = []
    results = _train_pipeline(model, pipe, rank, per_step)
    full = [p.full_tensor().detach().clone() for p in model.parameters()]
    runs, reads = list(ran), list(read)
    for p in model.parameters():  # (a step after the compared ones)
        p.grad = torch.zeros_like(p)
    with counted_all_reduces() as calls:
        no_reads = _deferred_step_reads_nothing(pipe)
    tk.l2_norms = real
    return {"results": results, "params": full, "all_reduces": per_step, "runs": runs,
            "read": reads, "no_reads": no_reads, "deferred_all_reduces": len(calls)}


def test_pipeline_reads_the_shards_by_triton_in_one_all_reduce_per_step(sharded_runs):
    """Dynamic loss scale, clip by global norm 0.1, SkipNonFinite (a NaN on one rank skips the
    step on both) and FilterZeroGradients over Adam, ``implementation="triton"`` under FSDP2:
    the Triton read pass measures each rank's local shards, the statistics take ONE
    all_reduce per step, Adam's kernel runs on the shards, nothing is read on the host in a
    step; norms, loss scales and parameters equal one process on the whole batch."""
    got = sharded_runs["pipeline"]
    model = _WithExtra()
    want = _train_pipeline(model, _pipeline(model.parameters(), "backoff"), None)
    assert [r[1] for r in got["results"]] == [r[1] for r in want] == [True, True, False, True]
    for (g, _, gs), (w, _, ws) in zip(got["results"], want, strict=True):
        assert g == pytest.approx(w, rel=1e-5, nan_ok=True)
        assert gs == pytest.approx(ws, rel=1e-5)
    for a, b in zip(got["params"], model.parameters(), strict=True):
        torch.testing.assert_close(a, b.detach(), rtol=1e-5, atol=1e-6)
    assert got["all_reduces"] == [1] * STEPS
    shards = [*LOCAL, 16, 2]  # the body's, then the extra layer's (weight 4x8, bias 4)
    assert got["read"] == [shards] * STEPS, got["read"]  # one read pass per step
    # every step on the shards (the NaN step too: its skip flag is read by the kernel), and
    # the skipped apply of the first step that makes the slots (the zero filter's snapshot)
    assert [sizes for _, sizes in got["runs"]] == [shards] * (STEPS + 1), got["runs"]
    assert got["no_reads"] and got["deferred_all_reduces"] == 1


def test_novograd_reads_the_given_whole_tensor_squares(monkeypatch):
    """In one process: NovoGrad's kernel reading ``square_sums`` of its gradients (what one
    rank's all_reduce gives) equals its own read of them bit for bit (the same float64 sums;
    at most two blocks per tensor, so in any order), with a multiplier, over two steps;
    ``squares`` of another shape or dtype, or for another rule, is a ValueError naming it, with
    nothing written."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    gen = torch.Generator().manual_seed(0)
    shapes = [(3,), (1025,), (2, 4)]
    grads = [torch.randn(s, generator=gen) for s in shapes]
    start = [torch.randn(s, generator=gen) for s in shapes]
    hyper = [0.01, 0.95, 0.98, 1e-8, 0.001, 1.0, 1.0]
    mult = torch.tensor(0.5)
    out = []
    for squares in (None, tk.square_sums(grads, mult)):
        lists = [[v.clone() for v in start], grads, [torch.zeros(s) for s in shapes],
                 [torch.zeros(()) for _ in shapes]]
        for _ in range(2):
            assert tk.run("novograd", lists, hyper, multiplier=mult, squares=squares)
        out.append([t for i in (0, 2, 3) for t in lists[i]])
    for a, b in zip(*out, strict=True):
        assert torch.equal(a, b)
    var = torch.ones(3)
    bad = [("novograd", torch.zeros(2, dtype=torch.float64)),
           ("novograd", torch.zeros(1, dtype=torch.float32)),
           ("gradient_descent", torch.zeros(1, dtype=torch.float64))]
    for rule, squares in bad:
        lists = ([[var], [torch.ones(3)], [torch.zeros(3)], [torch.zeros(())]]
                 if rule == "novograd" else [[var], [torch.ones(3)]])
        with pytest.raises(ValueError, match=f"triton {rule} call: squares must be a float64"):
            tk.run(rule, lists, hyper if rule == "novograd" else [0.5], squares=squares)
    assert torch.equal(var, torch.ones(3))


def test_square_sums_are_float64_sums_of_the_float32_products(monkeypatch):
    """``square_sums``: per tensor the float64 sum of ``float32(g * mult) ** 2`` (each product
    rounded to float32 first, then squared and summed in float64, as the C kernels sum them),
    over one block and over several; ``None`` where the kernels cannot read the list."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    g = [torch.tensor([3.0, -4.0]), torch.full((1500,), 0.1)]
    mult = torch.tensor(3.0)
    tenth = float(torch.tensor(0.1) * 3.0)  # float32(0.1f * 3) = 0.30000001192092896
    expected = [(9.0 + 16.0) * 9.0, 1500 * tenth * tenth]
    got = tk.square_sums(g, mult)
    # (1500 float64 additions in the kernel's order: within 1500 * 2**-53 of the product;
    # squaring 0.1f * 3 unrounded would be 2.5e-8 off)
    assert got.dtype == torch.float64 and got.tolist() == pytest.approx(expected, rel=2e-13)
    assert tk.square_sums(g).tolist() == pytest.approx(
        [25.0, 1500 * float(torch.tensor(0.1)) ** 2], rel=2e-13)
    assert tk.square_sums([torch.ones(3, dtype=torch.float64)]) is None
    assert tk.square_sums([torch.ones(4, 2).t()]) is None  # not contiguous
    assert tk.square_sums([]) is None
