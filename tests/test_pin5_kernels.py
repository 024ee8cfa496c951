"""Pins of the kernels' boundary and Triton's safe path (issue #40, round-5 audit, layer TL):
parameters that are back-to-back views of one storage (they touch, they do not overlap) are
updated as separate tensors on the native and Triton paths, and a gradient that is not
contiguous (a transposed ``.grad``) is read as its values, not as its storage. Oracle: plain
gradient descent, ``w - lr * g``, in float32 (``implementation="reference"``, and by hand).
Triton runs under its interpreter (``TRITON_INTERPRET=1``) for this module only."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from admitted import admitted
from triton_table import CASES, assert_mixed_matches, train_mixed

import trainop
from trainop.kernels import triton as tk

LR = 0.5
IMPLEMENTATIONS = ["native", "reference",
                   pytest.param("triton", marks=pytest.mark.skipif(
                       not tk.available(), reason="Triton is not installed"))]


from interpreter_mode import interpreter_for_the_module as _interpreter  # noqa: E402, F401


def test_the_device_tables_blocks_cover_each_tensor_exactly():
    # BLOCK-element blocks, the last one partial (T04: a block past the end reads and writes
    # the next tensor; under the interpreter the process dies, so the table itself is pinned)
    from trainop.kernels.triton.tables import BLOCK, _blocks

    counts = np.array([BLOCK + 476, 1, 2 * BLOCK, 17], dtype=np.int64)
    records, _, first = _blocks(counts, np.ones(len(counts), dtype=bool))
    for t, n in enumerate(counts):
        mine = sorted((int(s), int(e)) for o, s, e, _ in records if o == t)
        assert len(mine) == first[t + 1] - first[t] == -(-n // BLOCK)
        assert mine[0][0] == 0 and mine[-1][1] == n  # then no gap, no overlap:
        assert all(a[1] == b[0] for a, b in zip(mine, mine[1:], strict=False))


def test_the_table_of_the_other_blocks_starts_at_their_first_record():
    # 2048 and 1500 elements: three blocks end on a multiple of 16 (the vectorized launch),
    # [1024, 1500) of the second does not: the second launch's table is that one record (T18)
    from trainop.kernels.triton.tables import Layout

    lists = [[torch.zeros(2048), torch.zeros(1500)], [torch.ones(2048), torch.ones(1500)]]
    layout = Layout(lists, torch.device("cpu"), moving=1, written=(0,))
    layout.build()
    assert (layout.blocks, layout.aligned_blocks) == (4, 3)
    assert layout.rest_table.view(-1, 4).tolist() == [[1, 1024, 1500, 3]]


def test_a_captured_host_row_is_never_written_again(monkeypatch):
    # a captured graph re-reads its host row at every replay: the row is frozen (T21), and
    # every later send copies, even a value equal to the last one sent (T20); the capture is
    # simulated as test_triton_tables.py simulates it
    from trainop.kernels.triton import staging

    rows = staging.Staging(2, torch.int64, torch.device("cpu"))
    dest = torch.zeros(2, dtype=torch.int64)
    rows.send((1, 2), dest)
    dest.zero_()
    rows.send((1, 2), dest)
    assert dest.tolist() == [0, 0]  # the same values, no capture since: not copied again
    with monkeypatch.context() as patch:
        patch.setattr(staging, "capturing", lambda device: True)
        rows.send((3, 4), dest)  # recorded by the capture
    (captured,) = [i for i, row in enumerate(rows.rows) if row.tolist() == [3, 4]]
    dest.copy_(torch.tensor([7, 7]))  # what a replay for another model wrote
    rows.send((3, 4), dest)
    assert dest.tolist() == [3, 4]
    for values in [(5, 6), (7, 8), (9, 10)] * len(rows.rows):
        rows.send(values, dest)
        assert rows.rows[captured].tolist() == [3, 4] and dest.tolist() == list(values)


def test_the_layout_cache_evicts_the_least_recently_used(monkeypatch):
    # the layout a bucket uses every step stays however many others come after it (T16)
    from types import SimpleNamespace

    from trainop.kernels.triton import tables

    monkeypatch.setattr(tables, "LIMIT", 2)
    cache = tables.Cache(steps=False)
    made = []

    def make(name):
        made.append(name)
        return SimpleNamespace(pinned=False, name=name)

    for key in ("every step", "b", "every step", "c", "every step", "d"):
        assert cache((key,), lambda key=key: make(key)).name == key
    assert made == ["every step", "b", "c", "d"]  # never made again
    assert list(cache.items) == [("every step",), ("d",)]


def test_an_optimizers_cache_keeps_what_its_last_steps_used(monkeypatch):
    # beyond the limit, an optimizer's cache evicts only what its last two steps did not use
    from types import SimpleNamespace

    from trainop.kernels.triton import tables

    monkeypatch.setattr(tables, "LIMIT", 2)
    cache = tables.Cache(steps=True)
    for _ in range(3):
        cache.next_step()
        for key in ("a", "b", "c", "d"):
            cache((key,), lambda key=key: SimpleNamespace(pinned=False, name=key))
    assert list(cache.items) == [("a",), ("b",), ("c",), ("d",)] and cache.made == 4
    for _ in range(3):
        cache.next_step()
        cache(("a",), lambda: SimpleNamespace(pinned=False, name="a"))
    cache(("e",), lambda: SimpleNamespace(pinned=False, name="e"))
    assert list(cache.items) == [("a",), ("e",)]


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_parameters_back_to_back_in_one_storage_are_updated_apart(implementation):
    storage = torch.arange(8, dtype=torch.float32)
    a, b = torch.nn.Parameter(storage[:4]), torch.nn.Parameter(storage[4:])
    assert a.data_ptr() + 4 * a.element_size() == b.data_ptr()  # they touch
    opt = trainop.GradientDescentOptimizer([a, b], learning_rate=LR,
                                           implementation=implementation)
    a.grad, b.grad = torch.full((4,), 2.0), torch.full((4,), -2.0)
    admitted(opt.step)  # touching is not sharing memory: no refusal
    assert torch.equal(storage, torch.tensor([-1.0, 0.0, 1.0, 2.0, 5.0, 6.0, 7.0, 8.0]))


@pytest.mark.skipif(not tk.available(), reason="Triton is not installed")
def test_a_transposed_gradient_is_read_as_its_values_on_the_triton_path():
    torch.manual_seed(0)
    w0, g = torch.randn(2, 6), torch.randn(6, 2).t()  # g: the shape of w, not contiguous
    out = {}
    for implementation in ("triton", "reference"):
        w = torch.nn.Parameter(w0.clone())
        opt = trainop.GradientDescentOptimizer([w], learning_rate=LR,
                                               implementation=implementation)
        w.grad = g
        admitted(opt.step)
        out[implementation] = w.detach()
    assert torch.allclose(out["reference"], w0 - LR * g, rtol=0, atol=1e-6)
    assert torch.equal(out["triton"], out["reference"])


@pytest.mark.parametrize("implementation", [i for i in IMPLEMENTATIONS if i != "reference"])
def test_a_gradient_aliasing_the_lowest_addressed_variable_is_read_before_it_is_written(
        implementation):
    # TF's order: every gradient is read before any variable is written (the kernels' paths;
    # the per-tensor reference path reads it after: a finding, docs/mutation_audit.md). first
    # is updated first and has the lowest address; second's gradient IS first's storage.
    storage = torch.tensor([1.0, 2.0, 3.0, 4.0, 10.0, 20.0, 30.0, 40.0])
    first, second = torch.nn.Parameter(storage[:4]), torch.nn.Parameter(storage[4:])
    opt = trainop.GradientDescentOptimizer([first, second], learning_rate=LR,
                                           implementation=implementation)
    first.grad, second.grad = torch.full((4,), 2.0), first.detach()
    admitted(opt.step)
    assert torch.equal(storage, torch.tensor([0.0, 1.0, 2.0, 3.0, 9.5, 19.0, 28.5, 38.0]))


def _gradient_descent():
    return next(i for i, kwargs in CASES if not kwargs and i.name == "GradientDescentOptimizer")


@pytest.mark.skipif(not tk.available(), reason="Triton is not installed")
@pytest.mark.parametrize("regularize", [None, 0], ids=["plain", "regularized"])
def test_a_masters_half_model_gradient_is_admitted_on_the_triton_path(regularize):
    # MixedPrecisionOptimizerWrapper: the kernel reads the bfloat16 model gradient as it is
    # (T06); a regularized master's gradient is float32 beside the others' bfloat16 (T10)
    info, cpu = _gradient_descent(), torch.device("cpu")
    ours = admitted(train_mixed, info, torch.bfloat16, "triton", cpu, regularize=regularize)
    theirs = train_mixed(info, torch.bfloat16, "reference", cpu, regularize=regularize)
    assert_mixed_matches(info.name, ours, theirs, torch.bfloat16)


@pytest.mark.skipif(not tk.available(), reason="Triton is not installed")
def test_masters_of_float16_and_bfloat16_model_copies_are_updated_on_the_triton_path():
    from trainop.processing import ClipByValue, GradientPipeline, MixedPrecisionOptimizerWrapper

    out = {}
    for implementation in ("triton", "reference"):
        model = [torch.nn.Parameter(torch.tensor([1.0, 2.0], dtype=torch.float16)),
                 torch.nn.Parameter(torch.tensor([3.0, 4.0], dtype=torch.bfloat16))]
        # ClipByValue rewrites the gradients in float32: one bucket of both masters
        opt = GradientPipeline(MixedPrecisionOptimizerWrapper(trainop.GradientDescentOptimizer(
            model, learning_rate=LR, implementation=implementation)), [ClipByValue(-9.0, 9.0)])
        for p in model:
            p.grad = torch.full_like(p, 2.0)
        admitted(opt.step)
        out[implementation] = [p.detach().float() for p in model]
    for got in out.values():  # w - lr * g, exact in both half types
        assert torch.equal(got[0], torch.tensor([0.0, 1.0]))
        assert torch.equal(got[1], torch.tensor([2.0, 3.0]))


@pytest.mark.skipif(not tk.available(), reason="Triton is not installed")
def test_a_gradient_aliasing_a_variable_after_the_first_step_is_read_before_it_is_written():
    # step 1 builds the bucket's device table; at step 2 one gradient of two IS the other
    # variable's storage: the table's refresh sends the step to the list path (T19)
    first = torch.nn.Parameter(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    second = torch.nn.Parameter(torch.tensor([10.0, 20.0, 30.0, 40.0]))
    opt = trainop.GradientDescentOptimizer([first, second], learning_rate=LR,
                                           implementation="triton")
    first.grad, second.grad = torch.full((4,), 2.0), torch.full((4,), 1.0)
    admitted(opt.step)
    first.grad, second.grad = torch.full((4,), 2.0), first.detach()
    admitted(opt.step)
    assert first.tolist() == [-1.0, 0.0, 1.0, 2.0]
    assert second.tolist() == [9.5, 19.0, 28.5, 38.0]  # 9.5, 19.5, ... - 0.5 * [0, 1, 2, 3]


def _adam_first_step(var, grad, lr=0.1, beta1=0.9, beta2=0.999, epsilon=1e-8):
    """TF's Adam after one step from zero slots, in float64 (epsilon hat)."""
    var, grad = np.asarray(var, np.float64), np.asarray(grad, np.float64)
    m, v = (1 - beta1) * grad, (1 - beta2) * grad * grad
    lr_t = lr * np.sqrt(1 - beta2) / (1 - beta1)
    return var - lr_t * m / (np.sqrt(v) + epsilon)


@pytest.mark.skipif(not tk.available(), reason="Triton is not installed")
@pytest.mark.parametrize("name", ["GradientDescentOptimizer", "AdamOptimizer"])
def test_variables_of_other_sizes_at_the_same_addresses_get_their_own_layout(name):
    # optimizers over views of the same two buffers, 10 then 20 elements at the same
    # addresses: the second step updates all 20 (T34: a layout keyed without the sizes;
    # gradient descent has no slots, so its key is the variables' alone). Oracles: w - lr * g,
    # TF's first Adam step.
    bufs = [torch.linspace(-1.0, 1.0, 64), torch.linspace(2.0, -2.0, 64)]
    for n in (10, 20):
        params = [torch.nn.Parameter(b[:n]) for b in bufs]
        before = [p.detach().double().numpy().copy() for p in params]
        grads = [torch.full((n,), 0.5 + k) for k in range(2)]
        for p, g in zip(params, grads, strict=True):
            p.grad = g
        getattr(trainop, name)(0.1, params=params, implementation="triton").step()
        for p, b, g in zip(params, before, grads, strict=True):
            wanted = (b - 0.1 * g.double().numpy() if name == "GradientDescentOptimizer"
                      else _adam_first_step(b, g.numpy()))
            np.testing.assert_allclose(p.detach().double().numpy(), wanted, rtol=1e-6,
                                       atol=1e-7)


@pytest.mark.skipif(not tk.available(), reason="Triton is not installed")
def test_the_read_pass_of_lists_of_as_many_tensors_of_other_sizes():
    # the read pass's layout is shared by lists of the same sizes only (T37: keyed by the
    # number of tensors, the second list's norms would be over the first's counts)
    from trainop.kernels.norms import float32_l2_norms

    gen = torch.Generator().manual_seed(5)
    for sizes in ((3, 5), (1500, 7), (2, 2048)):
        tensors = [torch.randn(n, generator=gen) for n in sizes]
        got = float32_l2_norms(tensors, implementation="triton")
        wanted = [np.sqrt(np.sum(t.double().numpy() ** 2)) for t in tensors]
        np.testing.assert_allclose(got.double().numpy(), wanted, rtol=1e-6)


def test_a_loss_scaled_pipeline_step_on_float32_parameters_unscales_the_gradients():
    # float32 parameters on one device (the batch's C fast path) under a static loss scale
    # of 1024: the step applies g = scaled / 1024 (T23: the pending scale forgotten). Plain
    # gradient descent: w - lr * g.
    from trainop.processing import GradientPipeline, LossScale, StaticLossScaler

    params = [torch.nn.Parameter(torch.tensor([1.0, -2.0])), torch.nn.Parameter(torch.ones(3))]
    opt = trainop.GradientDescentOptimizer(LR, params=params)
    pipe = GradientPipeline(opt, [LossScale(StaticLossScaler(1024.0))])
    grads = [torch.tensor([0.25, 0.5]), torch.tensor([1.0, -1.0, 2.0])]
    for p, g in zip(params, grads, strict=True):
        p.grad = g * 1024.0
    pipe.step()
    np.testing.assert_allclose(params[0].detach().numpy(), [1.0 - LR * 0.25, -2.0 - LR * 0.5])
    np.testing.assert_allclose(params[1].detach().numpy(),
                               [1.0 - LR, 1.0 + LR, 1.0 - 2 * LR])
