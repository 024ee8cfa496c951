"""trainop's Triton kernels under Triton's interpreter (``TRITON_INTERPRET=1``: the kernels run
on CPU tensors with numpy), through the same dispatch, boundary and kernels a CUDA tensor
takes: every optimizer dense, odd sizes, zero/NaN/Inf gradients, the gate's multiplier and skip
flag, the pipeline's stages, flat buffers, against ``implementation="reference"``.

The interpreter is switched on for this module only (a fixture); the kernels are decorated
when first used, so nothing here changes how other modules' tests run.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from host_reads import ALL_READS, no_host_reads
from interpreter_shortcuts import nested_calls_unpatched
from triton_table import (
    CASES,
    IDS,
    MIXED_STAGE_IDS,
    MIXED_STAGES,
    NATIVE_ULPS,
    SHAPES,
    SMALL,
    SPARSE_CASES,
    SPARSE_IDS,
    SPARSE_RULE,
    HalfGradients,
    assert_matches_reference,
    assert_mixed_matches,
    assert_same_training,
    correctly_rounded_sqrt,
    distance,
    eager_widening,
    run,
    sparse_rule,
    spy_runs,
    spy_sparse,
    train_mixed,
    train_sparse,
    ulps,
)

import trainop
from trainop.kernels import native
from trainop.kernels import triton as tk
from trainop.processing import (
    BackoffLossScaler,
    ClipByGlobalNorm,
    GradientPipeline,
    LossScale,
    MixedPrecisionOptimizerWrapper,
)
from trainop.registry import OPTIMIZER_CLASSES

pytestmark = [pytest.mark.skipif(not tk.available(), reason="Triton is not installed"),
              # numpy's warnings from the interpreter (1/0 in a masked lane, as on a GPU)
              pytest.mark.filterwarnings("ignore::RuntimeWarning")]
CPU = torch.device("cpu")
BASE = {info.name: info for info, kwargs in CASES if not kwargs}


def _compile_check():
    """``scripts/triton_compile_check.py`` as a module (its launch recorder and compiler)."""
    path = Path(__file__).resolve().parents[1] / "scripts" / "triton_compile_check.py"
    spec = importlib.util.spec_from_file_location("triton_compile_check", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


COMPILE_CHECK = _compile_check()
#: Every distinct kernel specialization this module's tests launch (``_interpreter``).
LAUNCHED: list[dict] = []


@pytest.fixture(autouse=True, scope="module")
def _interpreter():
    global LAUNCHED
    saved = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    # the interpreter's shortcuts (interpreter_shortcuts: the same numbers, fewer Python calls)
    with COMPILE_CHECK.recording() as launched, nested_calls_unpatched():
        LAUNCHED = launched  # filled as the tests launch: the last test reads it
        yield
    if saved is None:
        del os.environ["TRITON_INTERPRET"]
    else:
        os.environ["TRITON_INTERPRET"] = saved


@pytest.fixture
def calls(monkeypatch):
    """The rules the Triton path ran (``triton_table.spy_runs``)."""
    return spy_runs(monkeypatch)


@pytest.mark.parametrize(("info", "kwargs"), CASES, ids=IDS)
def test_dense_matches_reference(info, kwargs, calls):
    ours = run(info, kwargs, "triton", CPU)
    assert calls, "the Triton kernels did not run"
    assert_matches_reference(info.name, ours, run(info, kwargs, "reference", CPU))
    if native.available():  # the same rule in the same order: the C kernels' bits
        assert distance(ours, run(info, kwargs, "native", CPU)) <= NATIVE_ULPS.get(info.name, 0)


def _nonfinite(step, g):
    if step == 0:
        return torch.zeros_like(g)  # an all-zero gradient
    g = g.clone()
    if step == 1 and g.numel() > 2:
        flat = g.view(-1)
        flat[0], flat[1], flat[2] = float("nan"), float("inf"), -float("inf")
    return g


@pytest.mark.parametrize("name", sorted(BASE))
def test_zero_nan_inf_gradients_and_skip(name, calls):
    """Zero gradients, then NaN/Inf in one step (propagated as the reference does), with the
    gate: a multiplier every step and the skip flag set at the last one."""
    info = BASE[name]
    shapes = [(1,), (5,), (3, 4)]

    def gate(step):
        return {"grad_multiplier": torch.tensor(0.5),
                "found_inf": torch.tensor(1.0 if step == 3 else 0.0)}

    ours = run(info, {}, "triton", CPU, grads=_nonfinite, steps=4, shapes=shapes,
               step_kwargs=gate)
    assert calls
    theirs = run(info, {}, "reference", CPU, grads=_nonfinite, steps=4, shapes=shapes,
                 step_kwargs=gate)
    assert_matches_reference(name, ours, theirs)


def test_skip_flag_leaves_everything():
    var, grad, m, v = torch.ones(5), torch.full((5,), 2.0), torch.zeros(5), torch.zeros(5)
    hyper = [0.1, 0.9, 0.999, 1e-8, 0.0, 0.0, torch.tensor(0.9), torch.tensor(0.999)]
    assert tk.run("adam", [[var], [grad], [m], [v]], hyper, found_inf=torch.tensor(1.0))
    assert torch.equal(var, torch.ones(5)) and not m.any() and not v.any()
    assert tk.run("adam", [[var], [grad], [m], [v]], hyper, found_inf=torch.tensor(0.0))
    assert not torch.equal(var, torch.ones(5))


@pytest.mark.parametrize("name", ["AdamOptimizer", "MomentumOptimizer", "NovoGrad"])
def test_pipeline_unscale_clip_skip(name, calls):
    """``GradientPipeline`` (dynamic loss scale, global-norm clip): its one read pass gives the
    norms and the non-finite flag, and the folded multiplier and skip reach the kernel."""
    info = BASE[name]

    def train(implementation):
        gen = torch.Generator().manual_seed(0)
        params = [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in SHAPES]
        pipe = GradientPipeline(info.make(params, implementation=implementation),
                                [ClipByGlobalNorm(1.0), LossScale(BackoffLossScaler())])
        for step in range(3):
            loss = sum((p * torch.randn(p.shape, generator=gen)).sum() for p in params)
            if step == 1:
                loss = loss * float("inf")  # a non-finite step: skipped
            pipe.scale_loss(loss).backward()
            pipe.step()
            for p in params:
                p.grad = None
        return params, pipe.optimizer

    ours, theirs = train("triton"), train("reference")
    assert calls
    assert_matches_reference(name, ours, theirs)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", ["AdamOptimizer", "MomentumOptimizer",
                                  "GradientDescentOptimizer", "NovoGrad"])
def test_mixed_precision_in_one_pass(name, dtype, monkeypatch):
    """``MixedPrecisionOptimizerWrapper``: the kernel updates the float32 masters and slots and
    writes the half model copy in the same pass (skipped with the step on an overflow)."""
    halves = []
    real = tk.Entry.update

    def spy(*args, **kwargs):
        halves.append(kwargs.get("half") is not None)
        return real(*args, **kwargs)

    monkeypatch.setattr(tk.Entry, "update", spy)

    ours = train_mixed(BASE[name], dtype, "triton", CPU)
    assert halves and all(halves)
    assert_mixed_matches(name, ours, train_mixed(BASE[name], dtype, "reference", CPU), dtype)


def test_flat_buffer_is_one_launch(monkeypatch):
    """Parameters laid out by ``trainop.flatten``: one unit (one launch) for the bucket."""
    from trainop.kernels.triton import launch

    units = []
    real = launch.units

    def spy(lists):
        found = real(lists)
        units.append(len(found))
        return found

    monkeypatch.setattr(launch, "units", spy)
    results = [_flat_training(lambda params, implementation: trainop.AdamOptimizer(
        params=params, learning_rate=0.01, implementation=implementation), SHAPES * 3,
        implementation) for implementation in ("triton", "reference")]
    assert units == [1, 1]
    assert_matches_reference("AdamOptimizer", *results)


def _flat_training(make, shapes, implementation):
    """Params of ``shapes`` in one flat buffer (``trainop.flatten``) and their optimizer
    ``make(params, implementation)`` after two steps on seeded gradients."""
    gen = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in shapes]
    opt = make(params, implementation)
    trainop.flatten(opt)
    for _ in range(2):
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen)
        opt.step()
    return params, opt


@pytest.mark.parametrize("name", ["AdamOptimizer", "FtrlOptimizer", "MomentumOptimizer"])
def test_large_units_launch_an_aligned_head_and_a_tail(name, monkeypatch):
    """A unit from ``SPLIT_AT`` elements on whose count is not a multiple of 16 (a flat
    buffer: 3 x 1025 + 3 x 15 + 3 elements here) is two launches, the first over a multiple of
    16 elements starting where the unit starts (what Triton's JIT compiles to 128-bit
    accesses); every element is updated once, as the reference updates it."""
    from trainop.kernels.triton import launch

    monkeypatch.setattr(launch, "SPLIT_AT", 64)
    counts = []
    real = launch.parts

    def spy(unit):
        found = real(unit)
        counts.append([part[0].numel() for part in found])
        assert all(part[0].data_ptr() == unit[0].data_ptr() + sum(c[0].numel() for c in
                   found[:k]) * 4 for k, part in enumerate(found))
        return found

    monkeypatch.setattr(launch, "parts", spy)
    results = [_flat_training(lambda params, implementation: BASE[name].make(
        params, implementation=implementation), [(1025,), (3, 5), (1,)] * 3, implementation)
        for implementation in ("triton", "reference")]
    assert counts and all(c == [3120, 3] for c in counts), counts
    assert_matches_reference(name, *results)


def test_a_new_layout_during_a_cuda_graph_capture_is_a_clear_error(monkeypatch):
    """A layout whose device table and constants the kernels have not made yet cannot be
    made inside a CUDA graph capture (a host copy into a new allocation is not capturable): a
    ``RuntimeError`` saying to warm up, nothing written (the capture is simulated: no GPU
    here)."""
    from trainop.kernels.triton import staging

    var = [torch.zeros(3), torch.zeros(5)]
    monkeypatch.setattr(staging, "capturing", lambda device: True)
    with pytest.raises(RuntimeError, match="Run the same step once before capturing"):
        tk.run("gradient_descent", [var, [torch.ones(3), torch.ones(5)]], [0.123456])
    assert not any(v.any() for v in var)


def test_no_host_read_in_a_step(monkeypatch):
    """Nothing on the Triton path reads a tensor's value on the host: the dispatch, the
    boundary and the device scalars run with every read patched to raise (the launches,
    which the interpreter runs with numpy, are replayed after)."""
    pending = []
    real = tk._family

    @contextlib.contextmanager
    def deferred(name):
        with real(name) as module:
            class Rules:
                RULES = {rule: (lambda *a, f=f, **k: pending.append((f, a, k))) for rule, f in
                         module.RULES.items()}
        yield Rules

    monkeypatch.setattr(tk, "_family", deferred)
    for name in sorted(BASE):
        info = BASE[name]
        params = [torch.nn.Parameter(torch.randn(4)) for _ in range(2)]
        # a tensor learning rate: read by the kernels on the device
        opt = info.cls(params, lr=torch.tensor(info.lr), implementation="triton",
                       **info.required)
        for p in params:
            p.grad = torch.randn(4)
        with no_host_reads(ALL_READS):
            opt.step(grad_multiplier=torch.tensor(0.5), found_inf=torch.tensor(0.0))
        assert pending
        for f, a, k in pending:
            f(*a, **k)
        pending.clear()


def test_boundary_errors_and_fallbacks():
    var, grad, slot = torch.zeros(4), torch.ones(4), torch.zeros(4)
    with pytest.raises(ValueError, match="triton adagrad call: slot list 0.*dtype"):
        tk.run("adagrad", [[var], [grad], [slot.double()]], [0.1])
    with pytest.raises(ValueError, match="triton adagrad call: slot list 0.*shape"):
        tk.run("adagrad", [[var], [grad], [torch.zeros(5)]], [0.1])
    with pytest.raises(ValueError, match="share memory"):
        tk.run("adagrad", [[var], [grad], [var]], [0.1])
    with pytest.raises(ValueError, match="dense CPU tensor"):
        tk.run("adagrad", [[var], [grad], [torch.zeros(4, device="meta")]], [0.1])
    assert torch.equal(var, torch.zeros(4)), "nothing written"
    wide = torch.zeros(4, 2)
    assert not tk.run("adagrad", [[wide[:, 0]], [grad], [slot]], [0.1])  # not contiguous
    assert not tk.run("adagrad", [[var], [var], [slot]], [0.1])  # gradient aliases var
    assert not tk.run("adagrad", [[var.double()], [grad.double()], [slot.double()]], [0.1])
    assert tk.run("adagrad", [[], [], []], [0.1])


def test_non_contiguous_param_falls_back_to_foreach(calls):
    base = torch.randn(6, 2)
    results = []
    for implementation in ("triton", "reference"):
        p = torch.nn.Parameter(base.clone().t())  # not contiguous
        opt = trainop.AdagradOptimizer(params=[p], learning_rate=0.1,
                                       implementation=implementation)
        p.grad = torch.ones_like(p)
        opt.step()
        results.append(p.detach().clone())
    assert not calls and torch.equal(*results)


def test_chosen_only_when_asked(monkeypatch):
    opt = trainop.AdamOptimizer(params=[torch.nn.Parameter(torch.zeros(2))])
    hp = opt._step_hyper(opt.param_groups[0]).for_tensor(torch.zeros(2))
    assert opt._choose_implementation(torch.float32, CPU, hp) != "triton"
    explicit = trainop.AdamOptimizer(params=[torch.nn.Parameter(torch.zeros(2))],
                                     implementation="triton")
    assert explicit._choose_implementation(torch.float32, CPU, hp) == "triton"
    assert explicit._choose_implementation(torch.float64, CPU, hp) == "foreach"
    monkeypatch.delenv("TRITON_INTERPRET")
    assert explicit._choose_implementation(torch.float32, CPU, hp) == "foreach"


def test_every_optimizer_accepts_triton():
    for cls in OPTIMIZER_CLASSES.values():
        assert cls.__name__ in BASE
    with pytest.raises(ValueError, match="implementation"):
        trainop.AdamOptimizer(params=[torch.nn.Parameter(torch.zeros(2))], implementation="cuda")


#: The classes whose native sparse path runs C kernels in the order of the Triton rule (the
#: rows, RMSProp's and LazyAdam's sparse forms, Adam's variable pass): the same bits. Nadam's
#: and NovoGrad's native sparse paths are the torch reference.
NATIVE_SPARSE = set(SPARSE_RULE) - {"NadamOptimizer", "NovoGrad"}


@pytest.mark.parametrize(("info", "kwargs"), SPARSE_CASES, ids=SPARSE_IDS)
def test_sparse_rows(info, kwargs, monkeypatch):
    """A sparse gradient with a repeated row: its distinct rows (summed) by the class's
    Triton sparse rule (the dense rule on the rows, TF's sparse forms, Adam's every-row rule,
    NovoGrad's densified gradient), never the reference's fallback; against the reference
    path (bit-equal or within the documented bound; bit-equal but NovoGrad's once torch's
    square root is correctly rounded) and the native C kernels (the same order: the same
    bits)."""
    ran = spy_sparse(monkeypatch)
    ours = train_sparse(info, "triton", CPU, kwargs)
    assert ran == [(sparse_rule(info.name, kwargs), True)] * 3
    assert_matches_reference(info.name, ours, train_sparse(info, "reference", CPU, kwargs))
    if info.name != "NovoGrad":  # (its norm: float64 sums, the reference's own order)
        with correctly_rounded_sqrt():  # the reference's one difference: torch's sqrt
            assert distance(ours, train_sparse(info, "reference", CPU, kwargs)) == 0
    if native.available() and info.name in NATIVE_SPARSE:
        assert distance(ours, train_sparse(info, "native", CPU, kwargs)) == 0


@pytest.mark.skipif(not native.available(), reason="no native kernels")
def test_l2_norms_match_native():
    tensors = [torch.randn(s) for s in [(1,), (1023,), (1025,), (0,), (7, 9)]]
    tensors[1][5] = float("inf")
    assert ulps(tk.l2_norms(tensors), native.l2_norms(tensors)) <= 1


def test_without_triton_nothing_changes():
    """A process where ``import triton`` fails: trainop imports, ``triton`` is accepted and
    runs ``foreach``."""
    code = textwrap.dedent("""
        import os, sys
        os.environ["TRITON_INTERPRET"] = "1"
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == "triton" or name.startswith("triton."):
                    raise ImportError("blocked")
        sys.meta_path.insert(0, Block())
        import torch, trainop
        from trainop.kernels import triton as tk
        out = []
        for implementation in ("triton", "reference"):
            p = torch.nn.Parameter(torch.ones(3))
            opt = trainop.AdamOptimizer(params=[p], implementation=implementation)
            p.grad = torch.full((3,), 0.5)
            opt.step()
            out.append(p.detach())
        assert not tk.available() and torch.equal(*out)
        assert "triton" not in sys.modules
        print("ok")
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr


def test_kernels_follow_the_interpreter_switch(monkeypatch):
    """A family decorated with the interpreter on is decorated again once it is off (and back),
    its shared helpers first."""
    def interpreted(name):
        with tk._family(name) as module:
            return module.INTERPRETED

    assert interpreted("adam")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert not interpreted("adam")
    assert not interpreted("norms")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert interpreted("adam")
    assert tk.run("gradient_descent", [[torch.zeros(3)], [torch.ones(3)]], [0.5])


def _pipeline_steps(implementation, *, flat=False, steps=3):
    """``GradientPipeline`` (dynamic loss scale, global clip 1.0, finite check) over Adam on
    ``SHAPES`` (laid out flat with ``flat``), ``steps`` steps, the second non-finite; the
    parameters, the optimizer and each step's global norm."""
    gen = torch.Generator().manual_seed(1)
    params = [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in SHAPES * 2]
    opt = trainop.AdamOptimizer(params=params, learning_rate=0.01,
                                implementation=implementation)
    if flat:
        trainop.flatten(opt)
    pipe = GradientPipeline(opt, [ClipByGlobalNorm(1.0), LossScale(BackoffLossScaler())])
    norms = []
    for step in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen) * 3.0
        if step == 1:
            params[2].grad[7] = float("nan")
        norms.append(pipe.step().global_norm)
    return params, opt, torch.stack(norms)


@pytest.mark.parametrize("flat", [False, True], ids=["list", "flat"])
def test_pipeline_read_pass_is_triton(flat, monkeypatch):
    """With ``implementation="triton"`` the pipeline's norms and non-finite flag come from the
    Triton read pass (one ``l2_norms`` per step over the whole list): the global norms within
    1 ulp of the reference path's (the C kernel, the same float64 sums in another order), the
    NaN step skipped, the parameters as the reference's."""
    read = []
    real = tk.l2_norms
    monkeypatch.setattr(tk, "l2_norms", lambda t, **k: read.append(len(t)) or real(t, **k))
    *ours, our_norms = _pipeline_steps("triton", flat=flat)
    assert read == [len(SHAPES) * 2] * 3
    read.clear()
    *theirs, their_norms = _pipeline_steps("reference", flat=flat)
    assert not read, "the default paths keep their norm pass"
    assert our_norms[1].isnan() and ulps(our_norms, their_norms) <= 1
    assert_matches_reference("AdamOptimizer", ours, theirs)


def _without_host_reads(step, monkeypatch) -> list:
    """Run ``step()`` with every host read patched to raise and the kernel launches (which
    the interpreter runs with numpy, reading on the host) deferred; then replay the launches
    in order. Returns them as (kernel name, arguments)."""
    from triton.runtime.interpreter import InterpretedFunction

    pending = []
    real = InterpretedFunction.run
    monkeypatch.setattr(InterpretedFunction, "run",
                        lambda self, *a, **k: pending.append((self, a, k)))
    with no_host_reads(ALL_READS):
        step()
    monkeypatch.undo()
    for f, a, k in pending:
        real(f, *a, **k)
    return [(f.fn.__name__, a) for f, a, _ in pending]


def test_pipeline_step_reads_nothing_on_the_host(monkeypatch):
    """The whole pipeline step on the Triton path (read pass, loss scale, clip, finite check,
    update) with every host read patched to raise; the launches, which the interpreter runs
    with numpy, are deferred and replayed after, in order."""
    gen = torch.Generator().manual_seed(2)
    params = [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in SHAPES]
    opt = trainop.AdamOptimizer(params=params, learning_rate=0.01, implementation="triton")
    pipe = GradientPipeline(opt, [ClipByGlobalNorm(1.0), LossScale(BackoffLossScaler())])
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen)
    pipe.step()  # slots made, device scalars cached
    names = [name for name, _ in _without_host_reads(pipe.step, monkeypatch)]
    assert _read_pass_then(names, "_adam", len(SHAPES))


def _read_pass_then(names: list[str], update: str, tensors: int) -> bool:
    """Whether ``names`` are the read pass (its blocks, in one launch or two, the runs of
    partial sums, the tensors' sums), the folded step's gate program where the step folds
    (``_decide``, ``processing.folded``), then the update of ``tensors`` tensors in at most
    two launches (one table, the vectorized blocks and the others) and the optimizer's
    counters in one (``_advance``)."""
    end = names.index("_tensor_sums") + 1
    reads, updates = names[:end], names[end:]
    if updates[:1] == ["_decide"]:
        updates = updates[1:]
    if updates[-1:] == ["_advance"]:
        updates = updates[:-1]
    return (reads[0] == "_block_squares" and set(reads) == {"_block_squares", "_run_sums",
                                                             "_tensor_sums"}
            and len(reads) <= 4 and updates and set(updates) == {update}
            and len(updates) <= (2 if tensors > 1 else 1))


def test_mixed_precision_step_reads_nothing_on_the_host(monkeypatch):
    """``MixedPrecisionOptimizerWrapper.step()`` on the Triton path (the read pass over the
    bfloat16 gradients, the loss scaler, the update reading them as they are and writing the
    bfloat16 weights) reads nothing on the host."""
    gen = torch.Generator().manual_seed(2)
    params = [torch.nn.Parameter(torch.randn(s, generator=gen).bfloat16()) for s in SMALL]
    opt = MixedPrecisionOptimizerWrapper(trainop.AdamOptimizer(
        params=params, learning_rate=0.01, implementation="triton"), BackoffLossScaler())
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen).bfloat16()
    opt.step()
    launches = _without_host_reads(opt.step, monkeypatch)
    names = [name for name, _ in launches]
    assert _read_pass_then(names, "_adam", len(SMALL))
    assert all(args[1].dtype == torch.bfloat16 for name, args in launches
               if name == "_adam")  # the gradients


def _sparse_step(table, opt, found_inf, rows=(1, 5, 1, 0), *, deferred=False):
    """One sparse step (a repeated row) with a multiplier of 0.5 and the skip flag
    ``found_inf``; ``deferred``: under ``no_host_reads``, the interpreter's launches deferred
    and replayed after, in order; returns their kernels' names."""
    from triton.runtime.interpreter import InterpretedFunction

    gen = torch.Generator().manual_seed(len(opt.state) + int(found_inf) + 3)
    table.grad = torch.sparse_coo_tensor([list(rows)], torch.randn(len(rows), 3, generator=gen),
                                         (7, 3))
    gate = {"grad_multiplier": torch.tensor(0.5), "found_inf": found_inf}
    if not deferred:
        opt.step(**gate)
        return []
    pending = []
    real = InterpretedFunction.run
    with pytest.MonkeyPatch.context() as patch, no_host_reads(ALL_READS):
        patch.setattr(InterpretedFunction, "run",
                      lambda self, *a, **k: pending.append((self, a, k)))
        opt.step(**gate)
    for f, a, k in pending:
        real(f, *a, **k)
    return [f.fn.__name__ for f, _, _ in pending]


def _everything(table, opt):
    """Copies of the table, its slots and its group's counters."""
    return [x.detach().clone() for x in (table, *opt.state[table].values(),
                                           *opt.param_groups[0]["non_slot"].values())]


@pytest.mark.parametrize(("info", "kwargs"), SPARSE_CASES, ids=SPARSE_IDS)
def test_sparse_rows_take_the_skip_flag(info, kwargs, monkeypatch):
    """On the Triton path every class's sparse update takes the gate's multiplier and skip
    flag on the device, and a tensor learning rate (no host read in the step, checked with
    every read patched to raise):
    a skipped sparse step (a repeated row) changes nothing (table, slots, counters); applied
    steps with the multiplier equal the reference (scaled, then the repeated rows summed)."""
    ran = spy_sparse(monkeypatch)
    results = []
    for implementation in ("triton", "reference"):
        gen = torch.Generator().manual_seed(3)
        table = torch.nn.Parameter(torch.randn(7, 3, generator=gen))
        # a tensor learning rate: read on the device (its range check joins the skip flag)
        opt = info.make([table], implementation=implementation, lr=torch.tensor(info.lr),
                        **kwargs)
        triton = implementation == "triton"
        _sparse_step(table, opt, torch.tensor(0.0))
        before = _everything(table, opt)
        launched = _sparse_step(table, opt, torch.tensor(1.0), (2, 2, 6),
                                deferred=triton)
        for old, new in zip(before, _everything(table, opt), strict=True):
            assert torch.equal(old, new), "a skipped step changed a value"
        if triton:
            assert launched, "the skipped step launched nothing: the flag was read on the host"
        launched = _sparse_step(table, opt, torch.tensor(0.0), (4, 1, 4),
                                deferred=triton)
        assert launched or not triton
        results.append(([table], opt))
    assert ran == [(sparse_rule(info.name, kwargs), True)] * 3
    assert_matches_reference(info.name, *results)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_mixed_precision_read_pass_reads_the_half_gradients(dtype, monkeypatch):
    """``MixedPrecisionOptimizerWrapper`` on the Triton path: the read pass measures the half
    model gradients themselves (one launch over the list, each element widened to float32
    exactly, so the norms are those of the float32 master gradients), and the training equals
    the reference path's."""
    read = []
    real = tk.l2_norms
    monkeypatch.setattr(tk, "l2_norms",
                        lambda t, **k: read.append({x.dtype for x in t}) or real(t, **k))
    ours = train_mixed(BASE["AdamOptimizer"], dtype, "triton", CPU)
    assert read == [{dtype}] * 3
    assert_mixed_matches("AdamOptimizer", ours,
                         train_mixed(BASE["AdamOptimizer"], dtype, "reference", CPU), dtype)
    halves = [torch.randn(s).to(dtype) for s in SHAPES]
    assert torch.equal(real(halves), real([h.float() for h in halves]))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("entry", ["step", "minimize", "apply", "optimize_loss"])
def test_mixed_precision_update_reads_the_half_gradients(entry, dtype):
    """The mixed-precision update on the Triton path reads the half model gradients
    themselves (no float32 copy of a gradient is made): torch-style ``step()``, TF-style
    ``minimize``, ``apply_gradients`` with pairs naming the half variables (their norms read
    from the half gradients too) and ``optimize_loss(dtype="mixed")``, matching the reference
    path as before; for ``step()``, bit for bit what the kernels gave reading float32
    gradients (each element widens exactly, then the multiplier applies)."""
    info = BASE["AdamOptimizer"]
    with pytest.MonkeyPatch.context() as mp:
        spy = HalfGradients(mp)
        ours = train_mixed(info, dtype, "triton", CPU, entry=entry, watch=spy.watch,
                           shapes=SMALL)
    assert spy.kernel == [{dtype}] * 3 and spy.widened == []
    assert_mixed_matches("AdamOptimizer", ours, train_mixed(
        info, dtype, "reference", CPU, entry=entry, shapes=SMALL), dtype)
    if entry == "step":
        with pytest.MonkeyPatch.context() as mp:
            eager_widening(mp)
            assert_same_training(ours, train_mixed(info, dtype, "triton", CPU, shapes=SMALL))


@pytest.mark.parametrize(("case", "kernel_dtypes"), MIXED_STAGES, ids=MIXED_STAGE_IDS)
def test_mixed_precision_float32_where_needed(case, kernel_dtypes):
    """Where a float32 gradient is needed (a regularization gradient added in float32: that
    master's, the others' kernel call still reads half ones; LARC's per-tensor factors; a
    stage that rewrites the gradients) the update gets the float32 widening, as before; a
    global clip still reads the half gradients. Gradient descent, whose
    kernel is bit-equal to the reference: the numbers are the reference path's, bit for bit."""
    info, dtype = BASE["GradientDescentOptimizer"], torch.bfloat16
    with pytest.MonkeyPatch.context() as mp:
        spy = HalfGradients(mp)
        ours = train_mixed(info, dtype, "triton", CPU, watch=spy.watch, shapes=SMALL, **case)
    assert all(len(k) == 1 for k in spy.kernel) and set().union(*spy.kernel) == kernel_dtypes
    assert bool(spy.widened) == (torch.float32 in kernel_dtypes)
    assert_same_training(ours, train_mixed(info, dtype, "reference", CPU, shapes=SMALL, **case))


def test_mixed_precision_zero_filter_keeps_the_half_copy():
    """A zero-filtered variable (``FilterZeroGradients``: TF leaves it untouched) of a
    mixed-precision Adam on the Triton path: its master is restored after the update pass,
    so its half model copy, which the kernel wrote in that pass, is made again from it: the
    half variable keeps its value, as on the reference path."""
    import trainop
    from trainop.processing import (
        BackoffLossScaler,
        FilterZeroGradients,
        GradientPipeline,
        MixedPrecisionOptimizerWrapper,
    )

    for implementation in ("triton", "reference"):
        gen = torch.Generator().manual_seed(0)
        ps = [torch.nn.Parameter(torch.randn(8, generator=gen).to(torch.bfloat16))
              for _ in range(2)]
        wrapper = MixedPrecisionOptimizerWrapper(
            trainop.AdamOptimizer(learning_rate=0.1, implementation=implementation),
            BackoffLossScaler())
        front = GradientPipeline(wrapper, [FilterZeroGradients()])
        before = None
        for step in range(3):
            x = torch.randn(8, generator=gen)
            scale = 0.0 if step == 2 else 1.0  # the second variable's gradient is 0 at step 2
            if step == 2:
                before = ps[1].detach().clone()
            front.minimize(lambda x=x, scale=scale, ps=ps: (ps[0].float() * x).sum()
                           + (ps[1].float() * x * scale).sum(), var_list=ps)
        assert torch.equal(ps[1].detach(), before), implementation
        assert torch.equal(wrapper.master(ps[1]).to(torch.bfloat16), before), implementation


def test_half_gradients_at_the_boundary():
    """``kernels.triton.run`` takes float16/bfloat16 gradients for float32 variables (all of
    one dtype: a mixed list or another dtype is a ``ValueError``); the native kernels keep
    refusing them (they trust dtypes: the dispatch widens first)."""
    var, half = torch.zeros(4), torch.full((4,), 0.5, dtype=torch.bfloat16)
    assert tk.run("gradient_descent", [[var], [half]], [2.0])
    assert torch.equal(var, torch.full((4,), -1.0))
    for grads in ([half, torch.ones(4)], [half.double()]):
        with pytest.raises(ValueError, match="gradients"):
            tk.run("gradient_descent", [[var] * len(grads), grads], [2.0])
    if native.available():
        with pytest.raises(ValueError, match="gradients"):
            native.run("gradient_descent", [[var], [half]], [2.0])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_decoupled_decay_of_a_base_without_it_in_its_kernel(sparse, calls):
    """``extend_with_decoupled_weight_decay(AdagradOptimizer)`` asked for ``triton``: the
    Adagrad kernel has no decay, so the list path (dense) or the reference (sparse) runs and
    the decay is applied, as on the reference path (``var -= wd*var``, then Adagrad)."""
    cls = trainop.extend_with_decoupled_weight_decay(trainop.AdagradOptimizer)
    out = []
    for implementation in ("triton", "reference"):
        p = torch.nn.Parameter(torch.full((4, 2), 2.0))
        opt = cls(0.25, learning_rate=0.5, params=[p], implementation=implementation)
        p.grad = (torch.sparse_coo_tensor([[1, 1]], torch.ones(2, 2), (4, 2)) if sparse
                  else torch.ones(4, 2))
        opt.step()
        out.append(p.detach().clone())
    # accumulator 0.1 + g*g (g = 2 summed when sparse); var = 2 - 0.25*2 - 0.5*g/sqrt(acc)
    g = 2.0 if sparse else 1.0
    expected = 2.0 - 0.25 * 2.0 - 0.5 * g / (0.1 + g * g) ** 0.5
    assert not calls and torch.equal(out[0], out[1])
    torch.testing.assert_close(out[0][1], torch.full((2,), expected))


def _floor_step(name, half=None):
    """One step of ``name`` on the Triton path as the benchmark configures it
    (``bench.specs``), over one float32 tensor of 4096 elements (a count and addresses
    divisible by 16, as large tensors have), or, with ``half``, under the mixed-precision
    wrapper with a model of that dtype."""
    from trainop.bench.specs import spec_for

    kwargs = dict(spec_for(name).kwargs)
    if "global_step" in kwargs:
        kwargs["global_step"] = torch.zeros((), dtype=torch.int64)
    weight = torch.nn.Parameter(torch.randn(4096, generator=torch.Generator().manual_seed(0)))
    if half is None:
        opt = OPTIMIZER_CLASSES[name](params=[weight], implementation="triton", **kwargs)
    else:
        weight = torch.nn.Parameter(weight.detach().to(half))
        opt = trainop.processing.MixedPrecisionOptimizerWrapper(OPTIMIZER_CLASSES[name](
            params=[weight], implementation="triton", **kwargs))
    weight.grad = torch.randn(4096).to(weight.dtype)
    opt.step()


def test_each_update_moves_its_traffic_floor_in_the_compiled_kernels():
    """From the PTX real Triton compiles for an H100 (no GPU needed): the bytes per element
    the update kernels of one step read and write (their masked accesses of global memory),
    summed over the step's element-wise launches, are each optimizer's traffic floor, the
    arrays of the benchmark's table (``bench.specs``: e.g. Adam reads p, g, m, v and writes
    p, m, v: 28 B), so no kernel streams an array twice or one it does not need; under the
    mixed-precision wrapper with bfloat16 weights the update reads the 2-byte gradient and
    writes the 2-byte model copy in the same pass (Adam 28 B: 16 - 2 read, 12 + 2 written),
    and no update kernel uses shared memory (no layout change between its loads and stores,
    float16/bfloat16 lists included)."""
    from trainop.bench.specs import bytes_per_param, spec_for

    cases = [(name, None) for name in sorted(BASE)] + [
        ("AdamOptimizer", torch.bfloat16), ("GradientDescentOptimizer", torch.float16)]
    recorded = []
    for name, half in cases:
        with COMPILE_CHECK.recording() as launched:
            _floor_step(name, half)
        recorded.append(launched)
    flat = [spec for launched in recorded for spec in launched]
    result, compiled = COMPILE_CHECK.compile_in_subprocess(flat, targets="90")
    assert result.returncode == 0, result.stdout + result.stderr
    moved = iter(compiled)
    fp32 = {}
    for (name, half), launched in zip(cases, recorded, strict=True):
        specs = [next(moved) for _ in launched]
        # a kernel over one tensor's elements with an aligned count; NovoGrad's own partial
        # sums of squares too (a launch over its table's blocks, which the host found
        # aligned); not the mixed-precision wrapper's read pass, which is no part of the update
        streamed = [s["traffic"] for s in specs if s.get("traffic") and (
            "n" in s["aligned"] or (name == "NovoGrad" and s["constants"].get("ALIGNED")))]
        read = sum(t["read"] for t in streamed)
        written = sum(t["write"] for t in streamed)
        floor = bytes_per_param(spec_for(name).arrays, torch.float32)
        # AdagradDA reads var only at lr == 0 (it keeps its value there): a load whose mask
        # is off at any other rate moves no memory, but it is in the code
        floor += 4 if name == "AdagradDAOptimizer" else 0
        # NovoGrad's norm pass stores one float64 partial sum per block of 1024 elements, one
        # thread's store, which the count per thread reads as 8 bytes over its 8 elements
        floor += 1 if name == "NovoGrad" else 0
        assert (name, half, read + written) == (name, half, floor), (read, written, specs)
        # an update kernel changes no layout (each would go through shared memory: the half
        # copy's or half gradient's 2-byte vectors once made every float32 store do so)
        updates = [s for s in specs if "HALF" in s["constants"]]
        assert updates and all(s["shared"] == 0 and s["conversions"] == 0 for s in updates), (
            name, half, [(s["kernel"], s["shared"], s["conversions"]) for s in updates])
        if half is None:
            fp32[name] = read, written
        else:  # the gradient read at 2 bytes, the model copy written at 2 bytes, one pass
            assert (read, written) == (fp32[name][0] - 2, fp32[name][1] + 2), (name, half)


def test_every_launch_compiles_for_the_gpu_without_fast_math():
    """Last in this module: every kernel specialization the tests above launched (their
    argument types and constexprs, recorded from the interpreter) compiled by real Triton for
    an H100 (sm_90, to a cubin: no GPU needed), and no float32 operation in its PTX rounds
    otherwise than the reference (no FMA contraction, no approximate sqrt or division). The
    interpreter never runs Triton's compiler: without this, a kernel that passes every test
    here could still fail to build on a GPU. Run alone, it launches one small step of each
    optimizer first."""
    if len(LAUNCHED) < len(BASE):  # recorded by the module's fixture
        for info in BASE.values():
            run(info, {}, "triton", CPU, shapes=[(3,)], steps=1)
    kernels = {(spec["module"], spec["kernel"]) for spec in LAUNCHED}
    assert len(kernels) >= len({info.name for info in BASE.values()}) // 2
    result, _ = COMPILE_CHECK.compile_in_subprocess(LAUNCHED, targets="90")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"compiled {len(LAUNCHED)} specializations x 1 targets" in result.stdout
