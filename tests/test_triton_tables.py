"""Issue #38 under Triton's interpreter: a bucket of any number of non-flattened tensors is one
launch over its device table (two where only some blocks can be vectorized), so a step's
launches do not grow with the tensor count; Adam over hundreds of tensors, and every optimizer
and the pipeline over every mixed size (1 element, odd, a block +- 1, 16-byte aligned and not)
in one table, equal the reference;
the gradients moving to new addresses every step are refreshed on the device; a simulated CUDA
graph capture after warm-up creates nothing (no table, no constant, no cache entry), and a
cache eviction never frees what a captured graph reads.

The interpreter runs one Python call per program, so each test takes one or two steps.
"""

from __future__ import annotations

import contextlib
import os

import pytest
import torch
from interpreter_shortcuts import nested_calls_unpatched
from triton_table import CASES, assert_matches_reference

import trainop
from trainop.bench.host import counted_launches
from trainop.kernels import triton as tk
from trainop.processing import BackoffLossScaler, ClipByGlobalNorm, GradientPipeline, LossScale

pytestmark = [pytest.mark.skipif(not tk.available(), reason="Triton is not installed"),
              pytest.mark.filterwarnings("ignore::RuntimeWarning")]
BASE_INFOS = [info for info, kwargs in CASES if not kwargs]
#: Sizes in turn: 1, odd, 16-aligned counts, a block (1024) -1, +1, exactly.
SIZES = (1, 7, 16, 33, 5, 48, 3, 1023, 2, 17, 1025, 1, 1024, 9)


@pytest.fixture(autouse=True, scope="module")
def _interpreter():
    saved = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    with nested_calls_unpatched():
        yield
    if saved is None:
        del os.environ["TRITON_INTERPRET"]
    else:
        os.environ["TRITON_INTERPRET"] = saved


def _params(count: int, gen: torch.Generator) -> list[torch.nn.Parameter]:
    """``count`` parameters of ``SIZES`` in turn; every third one a view one element into
    its storage (an address 4 bytes past 16-byte alignment)."""
    out = []
    for i in range(count):
        n = SIZES[i % len(SIZES)]
        data = torch.randn(n + 1, generator=gen)
        out.append(torch.nn.Parameter(data[1:] if i % 3 == 1 else data[:n]))
    return out


def _grads(params, step: int, gen: torch.Generator) -> None:
    """New gradients at new addresses; at odd steps every other one unaligned (a view)."""
    for i, p in enumerate(params):
        g = torch.randn(p.numel() + 1, generator=gen)
        p.grad = (g[1:] if step % 2 and i % 2 else g[:p.numel()]).view(p.shape)


def _train(make, count: int, implementation: str, steps: int, *, pipeline: bool = False):
    gen = torch.Generator().manual_seed(0)
    params = _params(count, gen)
    opt = make(params, implementation)
    step = opt.step
    if pipeline:
        step = GradientPipeline(opt, [LossScale(BackoffLossScaler(scale_max=2.0 ** 6)),
                                      ClipByGlobalNorm(1.0)]).step
    launches = []
    for k in range(steps):
        _grads(params, k, gen)
        with counted_launches(run=True) as names:
            step()
        launches.append(len(names))
    return (params, opt), launches


def _adam(params, implementation):
    return trainop.AdamOptimizer(0.01, params=params, implementation=implementation)


def test_adam_over_400_tensors_is_one_launch_and_equals_the_reference():
    ours, launches = _train(_adam, 400, "triton", 2)
    # the update's two launches and the counters' one (#44); issue #38's bound: 8
    assert all(n <= 3 for n in launches), launches
    theirs, _ = _train(_adam, 400, "reference", 2)
    assert_matches_reference("AdamOptimizer", ours, theirs)


@pytest.mark.parametrize("count", [400, 2000])
def test_launches_do_not_grow_with_the_tensor_count(count):
    """Adam's step and the post-backward pipeline's (dynamic loss scale, global clip, Adam)
    over ``count`` non-flattened tensors whose gradients move every step (the launches
    counted as no-ops: the host's work only): at most 3 and 8 Triton launches, the gate
    program and the counters' launch of #44 included (issue #38's bounds: 8 and 16)."""
    from trainop.bench.host import _stepper

    for workload, bound in (("adam", 3), ("post_backward", 8)):
        with counted_launches() as names:
            prepare, step = _stepper(workload, count)
            for k in range(3):
                prepare(k)
                names.clear()
                step()
                assert 0 < len(names) <= bound, (workload, names)


#: Every size of ``SIZES`` both as a tensor of its own and as a view one element in
#: (``_params``: every third a view; 14 sizes x 3), their gradients at new addresses.
MIXED = len(SIZES) * 3


@pytest.mark.parametrize("info", BASE_INFOS, ids=lambda info: info.name)
def test_every_optimizer_over_mixed_tensors_equals_the_reference(info):
    """Each optimizer over one table of ``MIXED`` tensors (every size aligned and not; the
    table's scale is Adam's 400 and 2,000 tensors above)."""
    def make(params, implementation):
        return info.make(params, implementation=implementation)

    ours, launches = _train(make, MIXED, "triton", 1)
    theirs, _ = _train(make, MIXED, "reference", 1)
    # (+1: every group's counters in one launch, #44)
    assert launches[0] <= (7 if info.name == "NovoGrad" else 3), launches
    assert_matches_reference(info.name, ours, theirs)


def test_pipeline_over_mixed_tensors_equals_the_reference():
    ours, launches = _train(_adam, MIXED, "triton", 2, pipeline=True)
    theirs, _ = _train(_adam, MIXED, "reference", 2, pipeline=True)
    assert all(n <= 8 for n in launches), launches  # (+ the gate and the counters, #44)
    assert_matches_reference("AdamOptimizer", ours, theirs)


def _owner(obj):
    """The optimizer whose Triton entry ``obj`` (an optimizer, a train op, a wrapper) steps
    through."""
    while getattr(obj, "_triton_entry", None) is None:
        obj = obj.optimizer
    return obj


def _created(obj):
    """What the Triton path has made for ``obj``'s optimizer: its cached layouts and every
    host row of theirs."""
    cache = tk.entry_of(_owner(obj)).cache
    rows = 0
    for layout in cache.values():
        scalars = layout.scalars.staging
        rows += len(scalars.rows) if scalars is not None else 0
        rows += len(layout.staging.rows) if hasattr(layout, "staging") else 0
    return list(cache.items), rows


@contextlib.contextmanager
def _captured(monkeypatch):
    """A CUDA graph capture, simulated: the Triton path's capture check says yes."""
    from trainop.kernels.triton import staging

    with monkeypatch.context() as patch:
        patch.setattr(staging, "capturing", lambda device: True)
        yield


def _lr_schedule(step):
    return 0.01 / (1.0 + step)  # a new Python float every step


@pytest.mark.parametrize("entry", ["pipeline", "optimize_loss"])
def test_a_captured_step_after_warm_up_creates_nothing(entry, monkeypatch):
    """Warm-up steps, then a step under a (simulated) CUDA graph capture whose gradients are
    new tensors at new addresses and whose learning rate is a new Python float: the Triton
    path makes no layout, table, constant or host row (a capture could not record it), it
    sends the new addresses and values through host rows it then keeps for the graph, and
    the training equals the reference's (the dynamic loss scaler, the global clip, Adam;
    ``optimize_loss``'s train op with clipping and a backoff loss scale)."""
    results = []
    for implementation in ("triton", "reference"):
        gen = torch.Generator().manual_seed(1)
        torch.manual_seed(1)
        model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(),
                                    torch.nn.Linear(5, 2))
        x, y = torch.randn(4, 6, generator=gen), torch.randn(4, 2, generator=gen)
        lr = [0.01]
        if entry == "pipeline":
            opt = trainop.AdamOptimizer(lambda lr=lr: lr[0], params=model.parameters(),
                                        implementation=implementation)
            pipe = GradientPipeline(opt, [LossScale(BackoffLossScaler(scale_max=2.0 ** 8)),
                                          ClipByGlobalNorm(1.0)])

            def step(pipe=pipe, model=model, x=x, y=y):
                pipe.zero_grad(set_to_none=True)
                loss = torch.nn.functional.mse_loss(model(x), y)
                pipe.scale_loss(loss).backward()
                pipe.step()
        else:
            step = trainop.optimize_loss(
                lambda model=model, x=x, y=y: torch.nn.functional.mse_loss(model(x), y),
                "Adam", {"implementation": implementation}, lambda _, lr=lr: lr[0], model=model,
                clip_gradients=1.0, loss_scaling="Backoff", apply_loss_scaling=True)
        seen: list[torch.Tensor] = []  # every gradient made (kept: no address reused)
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(lambda p, seen=seen: seen.append(p.grad))
        for k in range(3):
            lr[0] = _lr_schedule(k)
            step()
        if implementation == "triton":
            owner = opt if entry == "pipeline" else step
            before, warm = _created(owner), {g.data_ptr() for g in seen}
            lr[0] = _lr_schedule(3)
            with _captured(monkeypatch):
                step()
            new = seen[-len(list(model.parameters())):]
            assert not warm & {g.data_ptr() for g in new}, "gradients at new addresses"
            assert _created(owner) == before, "the captured step made something new"
            assert any(layout.pinned for layout in tk.entry_of(_owner(owner)).cache.values())
        else:
            lr[0] = _lr_schedule(3)
            step()
        for k in range(4, 6):  # eager again: everything sent again, as after a replay
            lr[0] = _lr_schedule(k)
            step()
        results.append(([*model.parameters()], None))
    for a, b in zip(results[0][0], results[1][0], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_a_float_learning_rate_schedule_writes_one_device_tensor():
    """A learning rate given as a new Python float every step: written into the layout's one
    hyperparameter tensor (no cache entry, no new tensor per value)."""

    params = _params(5, torch.Generator().manual_seed(2))
    opt = trainop.AdamOptimizer(0.1, params=params, implementation="triton")
    found = []
    for k in range(3):
        opt.param_groups[0]["lr"] = _lr_schedule(k)
        _grads(params, k, torch.Generator().manual_seed(k))
        opt.step()
        # the step's layout is the one used last (earlier tests may have left others of 5
        # tensors in the cache)
        key, layout = next(reversed(tk.entry_of(opt).cache.items.items()))
        assert key[0] == "update" and layout.tensors == 5
        found.append((len(tk.entry_of(opt).cache), layout.scalars.h.data_ptr(),
                      float(layout.scalars.h[0])))
    assert found[0][:2] == found[1][:2] == found[2][:2]
    assert [f[2] for f in found] == [torch.tensor(_lr_schedule(k)).item() for k in range(3)]


def test_eviction_never_frees_what_a_captured_graph_reads(monkeypatch):
    """The layout cache is bounded (least recently used out first) but keeps a layout a
    capture recorded a copy into, however many others come after it."""
    from trainop.kernels.triton import tables

    monkeypatch.setattr(tables, "LIMIT", 2)
    cache = tk.entry_of(None).cache
    cache.items.clear()
    held = [torch.zeros(3), torch.zeros(4)]
    tk.run("gradient_descent", [held, [torch.ones(3), torch.ones(4)]], [0.5])
    with _captured(monkeypatch):
        tk.run("gradient_descent", [held, [torch.ones(3), torch.ones(4)]], [0.5])
    (pinned,) = list(cache.items)
    for _ in range(4):
        tk.run("gradient_descent", [[torch.zeros(2), torch.zeros(5)],
                                    [torch.ones(2), torch.ones(5)]], [0.5])
    assert pinned in cache and len(cache) <= 3
    assert torch.equal(held[0], torch.full((3,), -1.0))


def test_table_launches_over_aligned_blocks_vectorize_in_the_compiled_kernels():
    """From the PTX real Triton compiles for an H100 (no GPU needed): an Adam step and the
    pipeline's read pass over a list of tensors whose addresses and block ends are 16-byte
    aligned launch their table kernels with ``ALIGNED``, whose accesses are 128 bits wide;
    the launches over the other blocks (an odd tail) stay correct at 32 bits."""
    from test_triton_interpreter import COMPILE_CHECK

    gen = torch.Generator().manual_seed(3)
    params = [torch.nn.Parameter(torch.randn(n, generator=gen)) for n in (4096, 2048, 1027)]
    opt = trainop.AdamOptimizer(0.01, params=params, implementation="triton")
    pipe = GradientPipeline(opt, [ClipByGlobalNorm(1.0)])
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen)
    with COMPILE_CHECK.recording() as launched:
        pipe.step()
    table = [s for s in launched if s["constants"].get("ALIGNED") is not None]
    assert {(s["kernel"], s["constants"]["ALIGNED"]) for s in table} == {
        ("_adam", True), ("_adam", False), ("_block_squares", True), ("_block_squares", False)}
    result, compiled = COMPILE_CHECK.compile_in_subprocess(table, targets="90")
    assert result.returncode == 0, result.stdout + result.stderr
    for spec in compiled:
        widest = spec["traffic"]["widest_bits"]
        assert widest == (128 if spec["constants"]["ALIGNED"] else 64 if
                          spec["kernel"] == "_block_squares" else 32), (spec["kernel"], widest)


def test_bench_host_is_a_bench_mode():
    """``trainop bench --host`` runs the host benchmark and renders its table (a result as
    ``run_host_benchmark`` returns it)."""
    import argparse

    from trainop.bench import cli
    from trainop.bench.host import render_host

    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers())
    args = parser.parse_args(["bench", "--host", "--repeats", "2"])
    assert args.host and "host" in cli._MODES
    row = {"workload": "adam", "tensors": 400, "launches": 2, "launch_target": 8,
           "step_ms": 1.5, "marginal_us_per_tensor": 2.5, "met": True}
    text = render_host({"torch": "x", "threads": 2, "rounds": 5, "steps": 2, "warmup": 1,
                        "base_tensors": 8, "per_tensor_target_us": 3.0, "rows": [row]})
    assert "adam" in text and "2 <= 8" in text and "2.50" in text
