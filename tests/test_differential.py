"""Every implementation of every optimizer against TF1's rule in float64 (``tf_formulas``), on
inputs hypothesis generates: values, hyperparameters, and the geometry of the parameters and
gradients (views at storage offsets, non-contiguous tensors, sizes on both sides of every
block threshold of the kernels), over step sequences in which gradients appear and disappear
and parameters move to new memory; with and without the metadata reader (its Python fallback).

Gradients that hold memory the step writes (another parameter, a partial overlap at either
end of a parameter, the parameter itself) must be read before any write, as TF computes every
gradient before any apply: the float64 rule reads them at the start of the step.

Sizes above the thresholds: kernels/native/csrc/driver.c (``CHUNK`` 32768 elements a chunk,
``PARALLEL_ABOVE`` 65536), kernels/triton/launch.py (``BLOCK`` 1024, ``ALIGN`` 16, ``SPLIT_AT``
2**20), kernels/chunking.py (``CHUNK`` 2**17 pieces above ``CHUNK_ABOVE`` 2**22 elements).
"""

from __future__ import annotations

import contextlib
from unittest import mock

import numpy as np
import pytest
import torch
from contract_table import INFOS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from interpreter_shortcuts import nested_calls_unpatched
from tf_formulas import f32
from tf_formulas import step as tf_step

from trainop.kernels import chunking, native
from trainop.kernels import triton as tk
from trainop.kernels.native import metadata
from trainop.kernels.triton import launch

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy in the interpreter
BY_NAME = {info.name: info for info in INFOS}
#: Other hyperparameters of each class (on top of contract_table's ``lr`` and ``required``).
VARIANTS = {
    "GradientDescentOptimizer": [{}],
    "MomentumOptimizer": [{}, {"use_nesterov": True}],
    "MomentumWOptimizer": [{"decay_scaled_by_lr": False},
                           {"decay_scaled_by_lr": True, "use_nesterov": True}],
    "AdagradOptimizer": [{}, {"initial_accumulator_value": 0.5}],
    "AdagradDAOptimizer": [{}, {"l1_regularization_strength": 0.01,
                                "l2_regularization_strength": 0.1}],
    "AdadeltaOptimizer": [{}, {"rho": 0.5, "epsilon": 1e-6}],
    "RMSPropOptimizer": [{}, {"momentum": 0.5},
                         {"centered": True, "decay": 0.5, "momentum": 0.3}],
    "AdamOptimizer": [{}, {"beta1": 0.5, "beta2": 0.9}],
    "LazyAdamOptimizer": [{}, {"beta1": 0.5, "beta2": 0.9}],
    "NadamOptimizer": [{}, {"beta1": 0.5, "beta2": 0.9}],
    "AdamWOptimizer": [{"decay_scaled_by_lr": False}, {"decay_scaled_by_lr": True}],
    "FtrlOptimizer": [{}, {"learning_rate_power": -0.25, "l1_regularization_strength": 0.01,
                           "l2_regularization_strength": 0.1,
                           "l2_shrinkage_regularization_strength": 0.1}],
    "ProximalGradientDescentOptimizer": [{}, {"l1_regularization_strength": 0.01,
                                              "l2_regularization_strength": 0.1}],
    "ProximalAdagradOptimizer": [{}, {"l1_regularization_strength": 0.01,
                                      "l2_regularization_strength": 0.1}],
    "NovoGrad": [{}, {"grad_averaging": True, "weight_decay": 0.01},
                 {"second_moment": "openseq2seq"},
                 {"second_moment": "openseq2seq", "grad_averaging": True, "weight_decay": 0.01}],
}
assert VARIANTS.keys() == BY_NAME.keys()

NATIVE_CHUNK, NATIVE_PARALLEL = 32768, 65536  # kernels/native/csrc/driver.c
#: Element counts on both sides of the small thresholds (the large ones: test_large_sizes).
SIZES = sorted({0, 1, 2, 3, 5, launch.ALIGN - 1, launch.ALIGN, launch.ALIGN + 1,
                launch.BLOCK - 1, launch.BLOCK, launch.BLOCK + 1, 2 * launch.BLOCK + 3})
LARGE_SIZES = [NATIVE_CHUNK - 1, NATIVE_CHUNK + 1, NATIVE_PARALLEL + 1]
#: Where a parameter lives: its own storage, a view at an offset of a storage shared with the
#: other parameters (disjoint), every other element of a larger tensor, a transposed matrix.
LAYOUTS = ["own", "offset", "strided", "transposed"]
#: What a gradient is: its own tensor, a non-contiguous view, memory of another parameter,
#: a window of the shared storage (a partial overlap at either end of parameters), the
#: parameter's own memory.
GRADIENTS = ["own", "strided", "other_param", "window", "itself"]


def implementations(name):
    return [*BY_NAME[name].implementations, "triton"]


CASES = [(name, impl) for name in BY_NAME for impl in implementations(name)]


from interpreter_mode import interpreter_for_the_module as _interpreter  # noqa: E402, F401


def _skip_unavailable(impl):
    if impl == "triton" and not tk.available():
        pytest.skip("Triton is not installed")
    if impl == "native" and not native.available():
        pytest.skip(str(native.unavailable_reason()))


# ---- the inputs -----------------------------------------------------------------------------

@st.composite
def plans(draw, sizes=SIZES, max_params=4):
    """Parameters (size, layout), per step the gradient of each (a kind or None), the moves
    (parameters given new memory before a step), values' seed and scale, the reader."""
    n = draw(st.integers(1, max_params))
    params = [(draw(st.sampled_from(sizes)), draw(st.sampled_from(LAYOUTS))) for _ in range(n)]
    steps = draw(st.integers(1, 3))
    grads = []
    for _ in range(steps):
        kinds = [draw(st.one_of(st.none(), st.sampled_from(GRADIENTS))) for _ in range(n)]
        if all(k is None for k in kinds):
            kinds[draw(st.integers(0, n - 1))] = "own"
        grads.append(kinds)
    moves = [draw(st.lists(st.integers(0, n - 1), max_size=2)) for _ in range(steps)]
    return {"params": params, "grads": grads, "moves": moves,
            "seed": draw(st.integers(0, 2**16)),
            "scale": draw(st.sampled_from([0.01, 1.0, 30.0])),
            "python_reads": draw(st.booleans())}


def _shape(size, layout):
    if layout == "transposed" and size and size % 3 == 0:
        return (size // 3, 3)
    return (size,)


def make_params(plan, gen):
    """The parameters of ``plan`` (values seeded by ``gen``) and the shared storage of the
    ``offset`` ones (None if none)."""
    specs = plan["params"]
    gaps = [int(torch.randint(0, 5, (), generator=gen)) for _ in specs]
    offsets, at = [], 0
    for (size, layout), gap in zip(specs, gaps, strict=True):
        at += gap
        offsets.append(at)
        if layout == "offset":
            at += size
    shared = torch.randn(at + 3, generator=gen)
    out = []
    for (size, layout), start in zip(specs, offsets, strict=True):
        shape = _shape(size, layout)
        if layout == "offset":
            data = shared[start:start + size].view(shape)
        elif layout == "strided":
            data = torch.randn(2 * size + 1, generator=gen)[1::2][:size]
        elif layout == "transposed" and len(shape) == 2:
            data = torch.randn(shape[::-1], generator=gen).t()
        else:
            data = torch.randn(shape, generator=gen)
        out.append(torch.nn.Parameter(data))
    return out, shared


def make_grad(kind, i, params, shared, gen, scale, opt=None):
    p = params[i]
    n = p.numel()
    if kind == "strided":
        return (torch.randn(2 * n, generator=gen)[::2] * scale).view(p.shape) \
            if p.dim() == 1 else (torch.randn(p.shape[::-1], generator=gen) * scale).t()
    if kind == "other_param":
        bigger = [q for j, q in enumerate(params) if j != i and q.numel() >= n]
        if bigger:
            return bigger[0].detach().reshape(-1)[:n].view(p.shape)
    if kind == "window" and shared.numel() >= n:
        start = int(torch.randint(0, shared.numel() - n + 1, (), generator=gen))
        return shared[start:start + n].view(p.shape)
    if kind == "itself":
        return p.detach()
    return torch.randn(p.shape, generator=gen) * scale


def _hyper(name, kwargs):
    """The rule's hyperparameters: the class's and the variant's, in float32 as TF casts them."""
    info = BY_NAME[name]
    hp = {"lr": f32(info.lr)}
    for key, value in {**info.required, **kwargs}.items():
        hp[key] = f32(value) if isinstance(value, float) else value
    return hp


def _close(actual, expected, what):
    expected = torch.from_numpy(np.asarray(expected, dtype=np.float64))
    actual = actual.detach().double().reshape(expected.shape)
    scale = 1.0 + float(expected.abs().max()) if expected.numel() else 1.0
    torch.testing.assert_close(actual, expected, rtol=2e-4, atol=2e-5 * scale, msg=what)


def run_against_tf(name, impl, kwargs, plan, make_gradient=make_grad):
    """Step ``plan`` on ``implementation=impl`` and on the float64 rule; compare the params and
    every TF slot after every step."""
    gen = torch.Generator().manual_seed(plan["seed"])
    params, shared = make_params(plan, gen)
    groups = [{"params": [p]} for p in params] if plan.get("groups") else params
    opt = BY_NAME[name].make(groups, implementation=impl, **kwargs)
    hp = _hyper(name, kwargs)
    ref = [p.detach().double().numpy().copy() for p in params]
    slots = [{} for _ in params]
    reader = (mock.patch.object(metadata.READER, "value", None) if plan["python_reads"]
              else mock.patch.object(metadata.READER, "reason", metadata.READER.reason))
    # Triton's interpreter with its shortcuts (interpreter_shortcuts: the same numbers)
    with reader, nested_calls_unpatched() if impl == "triton" else contextlib.nullcontext():
        for t, (kinds, moves) in enumerate(zip(plan["grads"], plan["moves"], strict=True)):
            for i in moves:  # the parameter moves to new memory (its values kept)
                params[i].data = params[i].data.clone()
            for i, kind in enumerate(kinds):
                params[i].grad = (None if kind is None else
                                  make_gradient(kind, i, params, shared, gen, plan["scale"],
                                                opt))
            # TF reads every gradient before any apply writes
            gs = [None if p.grad is None else p.grad.detach().double().numpy().copy()
                  for p in params]
            opt.step()
            for i, g in enumerate(gs):
                if g is not None:
                    tf_step(name, hp, ref[i], g.reshape(ref[i].shape), slots[i], t)
            for i, p in enumerate(params):
                _close(p, ref[i], f"step {t}: parameter {i}")
                for slot, value in slots[i].items():
                    if slot != "grad_norm_ema":
                        _close(opt.state[p][slot], value, f"step {t}: slot {slot!r} of {i}")


SETTINGS = settings(max_examples=8, derandomize=True, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))


@pytest.mark.parametrize(("name", "impl"), CASES, ids=[f"{n}-{i}" for n, i in CASES])
@SETTINGS
@given(data=st.data())
def test_matches_tf(name, impl, data):
    _skip_unavailable(impl)
    kwargs = data.draw(st.sampled_from(VARIANTS[name]), label="variant")
    run_against_tf(name, impl, kwargs, data.draw(plans(), label="plan"))


#: One class of each kernel family for the large sizes (the thresholds are the kernels').
LARGE_CLASSES = ["AdamOptimizer", "MomentumOptimizer", "FtrlOptimizer", "NovoGrad"]


@pytest.mark.parametrize("impl", ["reference", "foreach", "native", "triton"])
@pytest.mark.parametrize("name", LARGE_CLASSES)
@settings(max_examples=2, derandomize=True, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_sizes_across_the_chunk_thresholds(name, impl, data):
    """Above the native chunk and parallel thresholds (one step, two tensors)."""
    _skip_unavailable(impl)
    plan = data.draw(plans(sizes=LARGE_SIZES + [7], max_params=2), label="plan")
    plan["grads"], plan["moves"] = plan["grads"][:1], plan["moves"][:1]
    run_against_tf(name, impl, data.draw(st.sampled_from(VARIANTS[name])), plan)


#: Triton's split of a long unit, run at a size the interpreter steps through quickly
#: (``launch.SPLIT_AT`` lowered to it for the run; the production value's split is checked on
#: the host, and run at its size in test_triton_differential's explicit example): two full
#: blocks and an aligned part of a third, then the tail.
SMALL_SPLIT = 2 * launch.BLOCK + launch.ALIGN


def _split_spied(monkeypatch):
    """``launch.SPLIT_AT`` lowered to ``SMALL_SPLIT``; the element counts of the launches of
    each unit ``launch.parts`` splits, as a list the run fills."""
    monkeypatch.setattr(launch, "SPLIT_AT", SMALL_SPLIT)
    counts, real = [], launch.parts

    def spy(unit):
        found = real(unit)
        counts.append([part[0].numel() for part in found])
        return found

    monkeypatch.setattr(launch, "parts", spy)
    return counts


@pytest.mark.parametrize(("impl", "size"), [
    ("native", chunking.CHUNK_ABOVE + 5), ("foreach", chunking.CHUNK_ABOVE + 5),
    ("reference", chunking.CHUNK_ABOVE + 5), ("triton", SMALL_SPLIT + 7)])
def test_sizes_above_the_split_thresholds(impl, size, monkeypatch):
    """A tensor past foreach's chunking (2**22 elements, pieces of 2**17) and past Triton's
    split of a long unit (``SPLIT_AT`` elements, not a multiple of 16), with a small one.
    On Triton each parameter is a group of its own (a unit: a launch over its elements, where
    the split is), with ``SPLIT_AT`` lowered to ``SMALL_SPLIT`` (the interpreter)."""
    _skip_unavailable(impl)
    plan = {"params": [(size, "own"), (3, "offset")], "grads": [["own", "own"]],
            "moves": [[]], "seed": 5, "scale": 1.0, "python_reads": False}
    if impl == "triton":
        # the production threshold: 2**20 + 7 elements are a head of 2**20 and a tail of 7
        assert launch.SPLIT_AT == 1 << 20
        assert [[t.numel() for t in part] for part in launch.parts(
            [torch.empty(launch.SPLIT_AT + 7), torch.empty(1)])] == [[1 << 20, 1], [7, 1]]
        assert len(launch.parts([torch.empty(launch.SPLIT_AT - 1)])) == 1
        counts = _split_spied(monkeypatch)
        run_against_tf("AdamOptimizer", impl, {}, {**plan, "groups": True})
        assert [SMALL_SPLIT, 7] in counts and [3] in counts, counts
    else:
        run_against_tf("AdamOptimizer", impl, {}, plan)


# ---- a gradient in a storage of its own that holds memory the step writes (round 6, A1) -----

#: Gradients that hold a parameter's or a slot's memory through a storage object of their
#: own (numpy's view of it, a DLPack capsule of it, numpy's view of a slot), and the very
#: tensor object of another parameter's slot.
FOREIGN = ["numpy", "dlpack", "slot_numpy", "slot"]


def foreign_grad(kind, i, params, shared, gen, scale, opt):
    other = params[1 - i].detach()
    if kind == "numpy":
        return torch.from_numpy(other.numpy())
    if kind == "dlpack":
        return torch.from_dlpack(other)
    state = opt.state.get(params[1 - i], {})
    slot = next((s for name, s in state.items() if s.shape == other.shape), None)
    if slot is None:  # a class without slots
        return make_grad("own", i, params, shared, gen, scale)
    return torch.from_numpy(slot.numpy()) if kind == "slot_numpy" else slot


#: A gradient in memory of its own storage object that is a parameter's or a slot's (break A1 of
#: round 6: such gradients were read after the write): every class, implementation and kind.
A1_CASES = [(name, impl, kind) for name in BY_NAME for impl in implementations(name)
            for kind in FOREIGN]


def _a1_param(name, impl, kind):
    return pytest.param(name, impl, kind, id=f"{name}-{impl}-{kind}")


def a1_plan(kind, python_reads=False):
    return {"params": [(launch.ALIGN + 1, "own"), (launch.ALIGN + 1, "own")],
            "grads": [["own", "own"], ["own", kind]], "moves": [[], []], "seed": 11,
            "scale": 1.0, "python_reads": python_reads}


def a1_grad(kind, *args):
    return (foreign_grad if kind in FOREIGN else make_grad)(kind, *args)


@pytest.mark.parametrize(("name", "impl", "kind"), [_a1_param(*case) for case in A1_CASES])
def test_a_gradient_in_another_storage_is_read_first(name, impl, kind):
    """The second parameter's gradient holds the first's memory (or its slot's) through a
    storage of its own; the first is written before the second is read on every path."""
    _skip_unavailable(impl)
    run_against_tf(name, impl, VARIANTS[name][-1], a1_plan(kind), make_gradient=a1_grad)


@pytest.mark.parametrize("impl", ["reference", "foreach", "native", "triton"])
def test_a_view_of_a_written_parameter_in_the_middle_of_the_list(impl):
    """The second of four gradients is a view of the first parameter (written before it is
    read): its copy replaces that gradient, not another one."""
    _skip_unavailable(impl)
    plan = {"params": [(launch.ALIGN + 1, "own")] * 4,
            "grads": [["own", "other_param", "own", "own"]] * 2, "moves": [[], []],
            "seed": 2, "scale": 1.0, "python_reads": False}
    run_against_tf("AdamOptimizer", impl, {}, plan)
    run_against_tf("AdamOptimizer", impl, {}, {**plan, "python_reads": True})


FALLBACK_CASES = [(name, impl, kind) for name in ("AdamOptimizer", "FtrlOptimizer",
                                                  "AdamWOptimizer")
                  for impl in ("reference", "foreach", "native") for kind in FOREIGN]


@pytest.mark.parametrize(("name", "impl", "kind"), [_a1_param(*c) for c in FALLBACK_CASES])
def test_a_gradient_in_another_storage_without_the_reader(name, impl, kind):
    """The same without the metadata reader (the Python fallback reads every address)."""
    _skip_unavailable(impl)
    run_against_tf(name, impl, VARIANTS[name][-1], a1_plan(kind, python_reads=True),
                   make_gradient=a1_grad)


# ---- parameters that come to share memory after the first step (round 6, D2) ---------------

#: How two parameters of the second group come to share memory: the same storage
#: (``c.data = b.data``), or views of one tensor overlapping by half (at b's end, c's start).
SHARED = ["same", "half"]
D2_CASES = [(name, impl, kind) for name in BY_NAME for impl in implementations(name)
            for kind in SHARED]


# Break D2 of round 6: memory shared after the first step was accepted (reference, foreach: a
# double update) or refused after the first group was written (native, Triton).
@pytest.mark.parametrize(("name", "impl", "kind"), D2_CASES,
                         ids=[f"{n}-{i}-{k}" for n, i, k in D2_CASES])
def test_memory_shared_after_the_first_step_is_refused_before_any_write(name, impl, kind):
    _skip_unavailable(impl)
    gen = torch.Generator().manual_seed(3)
    a, b, c = (torch.nn.Parameter(torch.randn(8, generator=gen)) for _ in range(3))
    info = BY_NAME[name]
    opt = info.make([{"params": [a]}, {"params": [b, c]}], implementation=impl)
    for p in (a, b, c):
        p.grad = torch.randn(8, generator=gen)
    opt.step()
    if kind == "same":
        c.data = b.data
    else:
        base = torch.randn(12, generator=gen)
        b.data, c.data = base[:8], base[4:]
    before = {id(p): p.detach().clone() for p in (a, b, c)}
    slots = {(id(p), k): v.clone() for p in (a, b, c) for k, v in opt.state[p].items()}
    with pytest.raises(ValueError, match="share memory"):
        opt.step()
    assert all(torch.equal(p.detach(), before[id(p)]) for p in (a, b, c))
    assert all(torch.equal(opt.state[p][k], v) for p in (a, b, c) for k in opt.state[p]
               for (i, kk), v in slots.items() if i == id(p) and kk == k)
