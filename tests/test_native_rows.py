"""The native deduplication of sparse gradients (``native.unique_rows``) against TF's
``unique`` + ``unsorted_segment_sum`` and torch's ``coalesce``, and its corner cases."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import torch
from test_fast_paths import assert_close

import trainop
from trainop.kernels import native

pytestmark = pytest.mark.skipif(not native.available(), reason="native kernels unavailable")


def sparse(indices, values, shape):
    return torch.sparse_coo_tensor(torch.as_tensor(indices)[None], values, shape)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_rows_and_sums_equal_tf_unique_and_unsorted_segment_sum(tf, dtype):
    gen = torch.Generator().manual_seed(0)
    indices = torch.randint(0, 50, (400,), generator=gen)
    # Magnitudes far apart, so that another summation order would round differently.
    values = torch.randn(400, 3, generator=gen, dtype=dtype) * torch.logspace(
        -4, 8, 400, dtype=dtype)[:, None]
    rows = native.unique_rows(sparse(indices, values, (50, 3)))
    unique, position = tf.unique(indices.numpy())
    summed = tf.math.unsorted_segment_sum(values.numpy(), position, tf.size(unique))
    assert rows.indices.tolist() == unique.numpy().tolist()  # first-occurrence order
    assert np.array_equal(rows.values.numpy(), summed.numpy())  # bit for bit


def test_sums_equal_coalesce_as_a_mapping():
    gen = torch.Generator().manual_seed(1)
    indices = torch.randint(0, 1000, (5000,), generator=gen)
    values = torch.randn(5000, 2, 4, generator=gen, dtype=torch.float64)
    grad = sparse(indices, values, (1000, 2, 4))
    rows, coalesced = native.unique_rows(grad), grad.coalesce()
    order = torch.argsort(rows.indices)
    assert torch.equal(rows.indices[order], coalesced.indices()[0])
    torch.testing.assert_close(rows.values[order], coalesced.values(), rtol=1e-14, atol=1e-14)


def test_distinct_or_coalesced_rows_are_not_copied():
    values = torch.randn(3, 4)
    for grad in (sparse([7, 2, 5], values, (9, 4)), sparse([7, 2, 5], values, (9, 4)).coalesce()):
        rows = native.unique_rows(grad)
        assert rows.values.data_ptr() == grad._values().data_ptr()
        assert rows.indices.tolist() == grad._indices()[0].tolist()


def test_vectors_and_empty_gradients():
    grad = sparse([3, 1, 3], torch.tensor([1.0, 2.0, 4.0]), (5,))
    rows = native.unique_rows(grad)
    assert rows.indices.tolist() == [3, 1] and rows.values.tolist() == [5.0, 2.0]
    empty = native.unique_rows(sparse(torch.zeros(0, dtype=torch.int64), torch.zeros(0, 2),
                                      (4, 2)))
    assert empty.indices.numel() == 0 and empty.values.shape == (0, 2)


def test_declines_what_it_cannot_read():
    assert native.unique_rows(sparse([0, 9], torch.ones(2, 2), (4, 2))) is None  # out of range
    assert native.unique_rows(sparse([0, -1], torch.ones(2, 2), (4, 2))) is None
    assert native.unique_rows(sparse([0, 1], torch.ones(2, 2, dtype=torch.float16),
                                     (4, 2))) is None
    two_dims = torch.sparse_coo_tensor([[0, 1], [1, 0]], torch.ones(2), (2, 2))
    assert native.unique_rows(two_dims) is None


def test_first_outside_finds_the_first_row_out_of_range():
    """The sparse step's range check (one C pass; None where C cannot read the indices),
    against the index found by a Python scan of the same rows."""
    g = torch.Generator().manual_seed(5)
    for _ in range(50):
        n = int(torch.randint(0, 300, (), generator=g))
        rows = torch.randint(-3, 103, (n,), generator=g)
        want = next((k for k, r in enumerate(rows.tolist()) if not 0 <= r < 100), -1)
        assert native.first_outside(rows, 100) == want
        assert native.first_outside(rows[None], 100) == want  # a COO tensor's [1, n] indices
    assert native.first_outside(torch.tensor([0, 1]), 0) == 0  # an empty dimension
    assert native.first_outside(torch.tensor([2**62 - 1, 0]), 2**62) == -1
    assert native.first_outside(torch.tensor([-2**63]), 5) == 0
    for unreadable in (torch.tensor([0, 1], dtype=torch.int32), torch.zeros(2, 3).long(),
                       torch.arange(6)[::2], torch.tensor([1.0]),
                       torch.tensor([0, 1]).as_subclass(_Tagged)):
        assert native.first_outside(unreadable, 5) is None


class _Tagged(torch.Tensor):
    pass


def test_rows_check_refuses_what_the_row_kernels_must_not_get():
    """``boundary.checked_rows`` (one call of the metadata reader where it is built, else in
    Python): the tables' data pointers only for plain contiguous CPU tables of one dtype and
    shape, 1-D int64 indices, values of shape [len(indices), *rows], no written table sharing
    memory; else None."""
    from trainop.kernels.native import boundary, metadata
    var, m = torch.zeros(6, 3), torch.zeros(6, 3)
    idx, vals = torch.tensor([0, 5]), torch.ones(2, 3)
    big = torch.zeros(12, 3)
    wide = torch.zeros(6, 3, dtype=torch.float64)  # its first elements read as int64 rows 0, 0
    cases = {
        "ok": ([var, m], idx, vals, True),
        "indices only": ([var, m], idx, None, True),
        "tables share memory": ([big[:6], big[3:9]], idx, vals, False),
        "values inside a table": ([var, m], idx, var[:2], False),
        "indices inside a table": ([wide, wide.clone()], wide.view(torch.int64).view(-1)[:2],
                                   vals.double(), False),
        "int32 indices": ([var, m], idx.int(), vals, False),
        "2-D indices": ([var, m], idx[None], vals, False),
        "values' rows": ([var, m], idx, torch.ones(2, 4), False),
        "values' count": ([var, m], idx, torch.ones(3, 3), False),
        "values' dtype": ([var, m], idx, vals.double(), False),
        "table shape": ([var, torch.zeros(6, 4)], idx, vals, False),
        "table dtype": ([var, m.double()], idx, vals, False),
        "0-dim table": ([torch.zeros(()), torch.zeros(())], idx, None, False),
        "transposed table": ([var, torch.zeros(3, 6).t()], idx, vals, False),
        "subclass table": ([var, m.as_subclass(_Tagged)], idx, vals, False),
    }
    def check_all():
        for name, (tables, indices, values, want) in cases.items():
            found = boundary.checked_rows(tables, indices, values)
            if want:
                assert found == struct.pack(f"{len(tables)}Q", *(t.data_ptr() for t in tables))
            else:
                assert found is None, name
    check_all()
    if metadata.load() is not None:  # the Python checks, as without the reader, agree
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(metadata.READER, "value", None)
            mp.setattr(metadata.READER, "reason", "switched off by the test")
            check_all()


@pytest.mark.parametrize("name", ["LazyAdamOptimizer", "AdagradOptimizer", "FtrlOptimizer"])
def test_out_of_range_rows_raise_a_clear_error_and_change_nothing(name):
    table = torch.zeros(5, 2, requires_grad=True)
    opt = getattr(trainop, name)(0.1, params=[table])
    table.grad = sparse([1, 1], torch.ones(2, 2), (5, 2))
    opt.step()
    before = ({k: v.clone() for k, v in opt.state[table].items()}, table.detach().clone())
    table.grad = sparse([1, 7], torch.ones(2, 2), (5, 2))
    with pytest.raises(ValueError, match=r"lie in \[0, 5\) in dimension 0, got 7"):
        opt.step()
    assert torch.equal(table, before[1])
    assert all(torch.equal(opt.state[table][k], v) for k, v in before[0].items())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("name", ["LazyAdamOptimizer", "AdagradOptimizer",
                                  "ProximalAdagradOptimizer", "MomentumOptimizer"])
def test_optimizers_with_repeated_rows_equal_the_reference(name, dtype):
    def run(implementation):
        gen = torch.Generator().manual_seed(3)
        table = torch.randn(300, 8, generator=gen, dtype=dtype).requires_grad_()
        opt = getattr(trainop, name)(0.1, params=[table], implementation=implementation,
                                     **({"momentum": 0.9} if "Momentum" in name else {}))
        for _ in range(5):
            rows = torch.randint(0, 300, (500,), generator=gen)
            table.grad = sparse(rows, torch.randn(500, 8, generator=gen, dtype=dtype),
                                table.shape)
            opt.step()
        return [table], [opt.state[table]]
    assert_close(run("native"), run("reference"), rtol=1e-6 if dtype == torch.float32 else 1e-13)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("threads", [1, 2])
def test_lazy_adam_on_repeated_rows_equals_deduplicating_first(dtype, threads, monkeypatch):
    """The LazyAdam kernel sums a repeated row's values in the order given before its one
    update: bit for bit what ``unique_rows`` (TF's unique + unsorted_segment_sum) and then the
    kernel on distinct rows give, on one thread or two (rows shared out by a hash)."""
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    gen = torch.Generator().manual_seed(7)
    indices = torch.randint(0, 300, (3000,), generator=gen)  # about 10 repeats per row
    values = (torch.randn(3000, 40, generator=gen, dtype=dtype)
              * torch.logspace(-4, 4, 3000, dtype=dtype)[:, None])
    table = torch.randn(300, 40, generator=gen, dtype=dtype)
    hyper = [0.01, 0.9, 0.999, 1e-8]

    def run(rows, vals):
        var, m, v = table.clone(), torch.full_like(table, 0.5), torch.full_like(table, 0.25)
        assert native.sparse_rows("lazy_adam", var, [m, v], rows, vals, hyper)
        return var, m, v

    fused = run(indices, values)
    distinct = native.unique_rows(sparse(indices, values, (300, 40)))
    assert distinct.indices.numel() < indices.numel()  # rows repeat
    separate = run(distinct.indices, distinct.values)
    for a, b in zip(fused, separate, strict=True):
        assert torch.equal(a, b)
    untouched = torch.ones(300, dtype=torch.bool)
    untouched[indices] = False
    assert torch.equal(fused[0][untouched], table[untouched])  # other rows keep their values
    assert (fused[1][untouched] == 0.5).all()


def test_lazy_adam_with_decoupled_decay_still_decays_the_touched_rows():
    """The decay of contrib's extension runs before the sparse rule, so the extended LazyAdam
    must not take the one-call kernel path that skips ``_apply_sparse``."""
    decayed_class = trainop.extend_with_decoupled_weight_decay(trainop.LazyAdamOptimizer)
    gen = torch.Generator().manual_seed(8)
    start = torch.randn(50, 3, generator=gen, dtype=torch.float64)
    grad = sparse([4, 9, 4], torch.randn(3, 3, generator=gen, dtype=torch.float64), (50, 3))
    plain, decayed = start.clone().requires_grad_(), start.clone().requires_grad_()
    trainop.LazyAdamOptimizer(0.1).apply_gradients([(grad, plain)])
    decayed_class(0.5, 0.1).apply_gradients([(grad, decayed)])
    # var_new = var - wd * var - lazy_step(g): the difference from plain LazyAdam is -wd * var.
    difference = (decayed - plain).detach()
    torch.testing.assert_close(difference[[4, 9]], -0.5 * start[[4, 9]], rtol=1e-12, atol=1e-15)
    assert torch.equal(difference[[0, 1, 2, 3, 5]], torch.zeros(5, 3, dtype=torch.float64))


ROW_RULE_OPTIMIZERS = [(name, {}) for name in (
    "GradientDescentOptimizer", "MomentumOptimizer", "AdagradOptimizer", "AdagradDAOptimizer",
    "AdadeltaOptimizer", "FtrlOptimizer", "ProximalGradientDescentOptimizer",
    "ProximalAdagradOptimizer", "LazyAdamOptimizer", "RMSPropOptimizer")] + [
    ("RMSPropOptimizer", {"centered": False})]


@pytest.mark.parametrize("name, extra", ROW_RULE_OPTIMIZERS, ids=str)
def test_sparse_steps_run_the_row_kernel_on_any_thread_count(name, extra, monkeypatch):
    """Every optimizer whose sparse update is a rule on the touched rows (its dense rule;
    RMSProp's in the form of TF's sparse kernel) runs it in the native row kernel, straight
    from the repeated rows: the same numbers on one thread or two, and the reference's (1e-13
    relative in float64, as every native path)."""
    from optimizer_kwargs import kwargs_for
    from test_fast_paths import EXTRAS

    from trainop.registry import OPTIMIZER_CLASSES

    calls = []
    kernel = native.sparse_rows

    def spy(*args):
        calls.append(kernel(*args))
        return calls[-1]

    monkeypatch.setattr(native, "sparse_rows", spy)

    def run(implementation, threads):
        monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
        gen = torch.Generator().manual_seed(3)
        table = torch.randn(2000, 48, generator=gen, dtype=torch.float64).requires_grad_()
        opt = OPTIMIZER_CLASSES[name](params=[table], implementation=implementation,
                                      **{**kwargs_for(name, EXTRAS), **extra})
        for _ in range(3):
            rows = torch.randint(0, 2000, (3000,), generator=gen)  # about 1.5 per row
            table.grad = sparse(rows, torch.randn(3000, 48, generator=gen, dtype=torch.float64),
                                table.shape)
            opt.step()
        return [table], [opt.state[table]]

    one, two = run("native", 1), run("native", 2)
    assert len(calls) == 6 and all(calls)
    assert torch.equal(one[0][0], two[0][0])
    for key in one[1][0]:
        assert torch.equal(one[1][0][key], two[1][0][key]), key
    assert_close(two, run("reference", 2), rtol=1e-13)
