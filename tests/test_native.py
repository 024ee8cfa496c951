"""trainop's C kernels (the ``native`` implementation): what test_fast_paths does not reach.

test_fast_paths compares every native rule with the reference on small tensors (one chunk,
one thread) and test_gate covers the multiplier and the skip flag. Here: tensors large enough
to be cut into chunks and shared among threads, independence of the thread count, the
automatic choice, the fallback for non-contiguous tensors, the build and its switches.
"""

from __future__ import annotations

import pytest
import torch
from fresh_process import run_fresh
from optimizer_kwargs import kwargs_for
from test_fast_paths import EXTRAS, assert_close

import trainop
from trainop.kernels import native
from trainop.kernels.native import build
from trainop.registry import OPTIMIZER_CLASSES

pytestmark = pytest.mark.skipif(not native.available(),
                                reason=f"no C kernels: {native.unavailable_reason()}")

NATIVE = [name for name, cls in OPTIMIZER_CLASSES.items() if "native" in cls.IMPLEMENTATIONS]
# Several chunks per tensor (the driver's chunks hold 32768 elements) and more elements in all
# than the driver's single-thread limit (65536).
LARGE_SHAPES = [(100_003,), (5,), (300, 137)]


def run(name, implementation, shapes, steps=4, dtype=torch.float32, make=None):
    gen = torch.Generator().manual_seed(1)
    params = [torch.randn(s, dtype=dtype, generator=gen).requires_grad_() for s in shapes]
    if make is not None:
        params = make(params)
    opt = OPTIMIZER_CLASSES[name](params=params, implementation=implementation,
                                  **kwargs_for(name, EXTRAS))
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, dtype=dtype, generator=gen)
        opt.step()
    return params, [opt.state[p] for p in params]


def test_every_class_offers_native():
    assert set(NATIVE) == set(OPTIMIZER_CLASSES)


@pytest.mark.parametrize("name", NATIVE)
def test_chunked_and_threaded_equals_reference(name):
    ref = run(name, "reference", LARGE_SHAPES)
    assert_close(run(name, "native", LARGE_SHAPES), ref, rtol=1e-6)


@pytest.mark.parametrize("name", ["FtrlOptimizer", "NovoGrad", "AdamOptimizer"])
def test_result_does_not_depend_on_the_thread_count(name):
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = run(name, "native", LARGE_SHAPES)
        torch.set_num_threads(max(2, threads))
        many = run(name, "native", LARGE_SHAPES)
    finally:
        torch.set_num_threads(threads)
    assert_close(many, one, rtol=0)


@pytest.mark.parametrize("name", ["AdadeltaOptimizer", "AdamOptimizer"])
def test_non_contiguous_parameters_take_the_list_path(name):
    def transposed(params):
        return [p.detach().t().requires_grad_() if p.dim() == 2 else p for p in params]
    shapes = [(40, 30), (7,)]
    ref = run(name, "reference", shapes, make=transposed)
    assert not ref[0][0].is_contiguous()
    ours = run(name, "native", shapes, make=transposed)
    assert_close(ours, ref, rtol=0)  # foreach: bit-identical


def test_automatic_choice_on_the_cpu():
    p = torch.zeros(3, requires_grad=True)
    for cls, expected in ((trainop.FtrlOptimizer, "native"), (trainop.AdamOptimizer, "native"),
                          (trainop.GradientDescentOptimizer, "native")):
        opt = cls(0.1, params=[p])
        hp = opt._prepare(opt.param_groups[0], torch.zeros((), dtype=torch.int64)).for_tensor(p)
        assert opt._choose_implementation(p.dtype, p.device, hp) == expected, cls
        assert opt._choose_implementation(torch.float16, p.device, hp) == "foreach", cls


def test_unavailable_kernels_fall_back_to_foreach_and_explicit_choice_raises(monkeypatch):
    # The loader's state when the build failed (every entry point asks the loader).
    monkeypatch.setattr(build.KERNELS, "value", None)
    monkeypatch.setattr(build.KERNELS, "reason", "no compiler")
    p = torch.zeros(3, requires_grad=True)
    opt = trainop.FtrlOptimizer(0.1, params=[p])
    hp = opt._prepare(opt.param_groups[0], torch.zeros((), dtype=torch.int64)).for_tensor(p)
    assert opt._choose_implementation(p.dtype, p.device, hp) == "foreach"
    with pytest.raises(ValueError, match=r"implementation='native' is unavailable here: no "
                                         r"compiler; use implementation='foreach'$"):
        trainop.FtrlOptimizer(0.1, params=[p], implementation="native")


def test_adam_with_a_gradient_multiplier_leaves_the_gradients_alone():
    gen = torch.Generator().manual_seed(2)
    p = torch.randn(1000, generator=gen, requires_grad=True)
    q = p.detach().clone().requires_grad_()
    g = torch.randn(1000, generator=gen)
    mult = torch.tensor(0.25)
    opt = trainop.AdamOptimizer(0.01, params=[p])  # automatic on the CPU: native
    ref = trainop.AdamOptimizer(0.01, params=[q], implementation="reference")
    for _ in range(3):
        p.grad = g.clone()
        opt.step(grad_multiplier=mult)
        assert torch.equal(p.grad, g)  # torch's fused kernel would have stored g * 0.25
        q.grad = g * mult
        ref.step()
    torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-6, atol=1e-7)


def test_tf_style_registration_of_an_unsupported_variable_raises_before_mutating():
    opt = trainop.AdadeltaOptimizer(1.0, implementation="native")
    v = torch.ones(2, dtype=torch.float16, requires_grad=True)
    with pytest.raises(ValueError, match="implementation='native' runs CPU parameters"):
        opt.apply_gradients([(torch.ones(2, dtype=torch.float16), v)])
    assert opt.param_groups == [] and not opt.state
    assert torch.equal(v.detach(), torch.ones(2, dtype=torch.float16))


def _probe(tmp_path, **env):
    return run_fresh("from trainop.kernels import native; "
                     "print(native.available()); print(native.unavailable_reason())",
                     tmp_path, **env)


def test_build_into_an_empty_cache(tmp_path):
    assert _probe(tmp_path) == ["True", "None"]
    built = list(tmp_path.glob("trainop-kernels-*.so"))
    assert len(built) == 1
    assert _probe(tmp_path) == ["True", "None"]  # loads the cached build
    assert list(tmp_path.glob("trainop-kernels-*.so")) == built


def test_switched_off_or_no_compiler(tmp_path):
    assert _probe(tmp_path, TRAINOP_NATIVE="0") == ["False", "switched off by TRAINOP_NATIVE=0"]
    available, reason = _probe(tmp_path, CC="false")
    assert available == "False"
    assert reason.startswith("the C kernels could not be built or loaded: `false ")
    assert not list(tmp_path.glob("*.so"))


def test_l2_norms_sum_squares_in_double():
    gen = torch.Generator().manual_seed(3)
    tensors = [torch.randn(n, generator=gen) * 100 for n in (3_000_001, 70_000, 1, 0)]
    norms = native.l2_norms(tensors)
    exact = torch.stack([torch.linalg.vector_norm(t.double()) for t in tensors]).float()
    torch.testing.assert_close(norms, exact, rtol=1e-7, atol=0)
    bad = [torch.tensor([1.0, float("inf")]), torch.tensor([float("nan"), 1.0]),
           torch.full((3,), 1e30)]  # squares overflow float32, not double
    out = native.l2_norms(bad)
    assert out[0] == float("inf") and out[1].isnan() and out[2] == pytest.approx(3 ** 0.5 * 1e30)


def test_l2_norms_declines_what_it_cannot_read():
    assert native.l2_norms([torch.ones(3, dtype=torch.float64)]) is None
    assert native.l2_norms([torch.ones(4, 4).t()]) is None
    assert native.l2_norms([torch.ones(3), torch.ones(3, dtype=torch.float16)]) is None
    assert native.l2_norms([]) is None


@pytest.mark.parametrize("replace", ["param", "slot", "dtype"])
def test_a_resized_parameter_or_slot_never_reaches_the_c_kernel(replace):
    p = torch.ones(100_000, requires_grad=True)
    opt = trainop.AdamOptimizer(0.1, params=[p])
    p.grad = torch.ones(100_000)
    opt.step()  # slots exist, the step plan is built
    if replace == "param":
        p.data = torch.ones(10)  # smaller than its slots
        p.grad = torch.ones(10)
    elif replace == "slot":
        opt.state[p]["m"].data = torch.zeros(10)  # smaller than its parameter
    else:
        p.data = p.data.double()  # twice the bytes of its float32 gradient and slots
    with pytest.raises((ValueError, TypeError)):  # trainop's size or dtype check
        opt.step()


@pytest.mark.parametrize("name", ["LazyAdamOptimizer", "AdamOptimizer"])
def test_sparse_adam_rules_on_a_large_table_equal_the_reference(name):
    def run_sparse(implementation):
        gen = torch.Generator().manual_seed(4)
        table = torch.randn(5000, 64, generator=gen).requires_grad_()
        opt = OPTIMIZER_CLASSES[name](params=[table], implementation=implementation)
        for _ in range(3):
            rows = torch.randint(0, 5000, (3000,), generator=gen)  # duplicates included
            table.grad = torch.sparse_coo_tensor(rows[None], torch.randn(3000, 64, generator=gen),
                                                 table.shape)
            opt.step()
        return [table], [opt.state[table]]
    assert_close(run_sparse("native"), run_sparse("reference"), rtol=1e-6)


def test_sparse_rows_decline_out_of_range_rows_and_unknown_rules():
    var, m, v = torch.zeros(4, 2), torch.zeros(4, 2), torch.zeros(4, 2)
    hyper = [0.1, 0.9, 0.999, 1e-8]
    assert not native.sparse_rows("lazy_adam", var, [m, v], torch.tensor([0, 4]),
                                  torch.ones(2, 2), hyper)
    assert not native.sparse_rows("lazy_adam", var, [m, v], torch.tensor([-1]),
                                  torch.ones(1, 2), hyper)
    assert not native.sparse_rows("rmsprop", var, [m, v], torch.tensor([1]), torch.ones(1, 2),
                                  hyper)  # the dense form has no sparse-row export
    assert not native.sparse_rows("lazy_adam", var, [m, v[:2]], torch.tensor([1]),
                                  torch.ones(1, 2), hyper)  # a slot of another shape
    assert torch.equal(var, torch.zeros(4, 2)) and torch.equal(m, torch.zeros(4, 2))


def test_pipeline_and_tf_global_norm_measure_the_same_norms():
    from trainop.processing import global_norm
    from trainop.processing._batch import Gradients
    gen = torch.Generator().manual_seed(5)
    grads = [torch.randn(n, generator=gen) * 50 for n in (3_000_000, 1000)]
    pairs = [(g, torch.zeros_like(g)) for g in grads]
    assert torch.equal(Gradients.of(pairs).global_norm(), global_norm(grads))
    exact = torch.cat(grads).double().norm().float()
    torch.testing.assert_close(global_norm(grads), exact, rtol=1e-7, atol=0)
