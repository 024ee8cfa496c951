"""TF's clipping functions: the spec's numbers (tf1.md §3, §5.8; openseq2seq.md §2.5) and
TensorFlow itself (eager TF 2.21 runs the same clip_ops as TF1) as the oracle; the clipping
processors against the functions."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import trainop
from trainop.processing import (
    ClipByAverageNorm,
    ClipByGlobalNorm,
    ClipByNorm,
    ClipByValue,
    GradientPipeline,
    clip_by_average_norm,
    clip_by_global_norm,
    clip_by_norm,
    clip_by_value,
    global_norm,
)

X0 = [[-2.0, 0.0, 0.0], [4.0, 0.0, 0.0]]
X1 = [1.0, -2.0]


def t(values, dtype=torch.float32):
    return torch.tensor(values, dtype=dtype)


def sparse(values, indices, size):
    return torch.sparse_coo_tensor(torch.tensor([indices]), t(values), (size,))


# ------------------------------------------------------------------ spec numbers
@pytest.mark.parametrize("clip", [4.0, torch.tensor(4.0)])
def test_clip_by_global_norm_spec(clip):
    (c0, c1), norm = clip_by_global_norm([t(X0), t(X1)], clip)
    assert float(norm) == 5.0
    torch.testing.assert_close(c0, t([[-1.6, 0, 0], [3.2, 0, 0]]))
    torch.testing.assert_close(c1, t([0.8, -1.6]))


def test_clip_by_global_norm_supports_none_and_sparse():
    out, norm = clip_by_global_norm([t(X0), None, sparse(X1, [3, 4], 5), None], 4.0)
    assert out[1] is None and out[3] is None and float(norm) == 5.0
    assert out[2].is_sparse and tuple(out[2].shape) == (5,)
    torch.testing.assert_close(out[2]._values(), t([0.8, -1.6]))
    assert out[2]._indices().tolist() == [[3, 4]]


def test_clip_by_global_norm_not_clipped_zero_inf_nan():
    out, norm = clip_by_global_norm([t(X0), t(X1)], 6.0)
    assert float(norm) == 5.0
    torch.testing.assert_close(out[0], t(X0), rtol=0, atol=0)
    out, norm = clip_by_global_norm([torch.zeros(2, 3), torch.zeros(2)], 6.0)
    assert float(norm) == 0.0 and all(bool((o == 0).all()) for o in out)
    x0 = t(X0)
    x0[0, 0] = math.inf
    out, norm = clip_by_global_norm([x0, t(X1)], 4.0)
    assert math.isinf(float(norm)) and all(bool(o.isnan().all()) for o in out)
    x0[0, 0] = math.nan
    out, norm = clip_by_global_norm([x0, t(X1)], 4.0)
    assert math.isnan(float(norm)) and all(bool(o.isnan().all()) for o in out)


def test_clip_by_global_norm_uses_given_norm_and_scale_is_exactly_one():
    out, norm = clip_by_global_norm([t(X1)], 1.0, use_norm=torch.tensor(10.0))
    assert float(norm) == 10.0
    torch.testing.assert_close(out[0], t(X1) * 0.1)
    for c in (3.0, 7.0, 49.0, 0.1, 0.3, 10.0, 1e-3):  # c * (1/c) is exactly 1 in float32
        out, _ = clip_by_global_norm([t([1e-6, 2e-6])], c)
        assert torch.equal(out[0], t([1e-6, 2e-6]))


def test_global_norm_edge_cases():
    assert global_norm([None, None]).dtype == torch.float32
    assert float(global_norm([None])) == 0.0
    assert float(global_norm([t(X0), None, t(X1)])) == 5.0
    with pytest.raises(TypeError, match="same dtype"):
        global_norm([t(X1), t(X1, torch.float64)])
    with pytest.raises(TypeError, match="sequence"):
        global_norm(x for x in [t(X1)])


def test_clip_by_norm_spec():
    out = clip_by_norm(t([[-3.0, 0, 0], [4.0, 0, 0]]), 4.0)
    torch.testing.assert_close(out, t([[-2.4, 0, 0], [3.2, 0, 0]]))
    assert torch.equal(clip_by_norm(torch.zeros(2, 3), 4.0), torch.zeros(2, 3))


def test_openseq2seq_clipping_reference():
    """c = 0.5, gradients [0.6, 0.8] and [1, 0] (N = sqrt 2): factor 0.353553; c = 10: none."""
    for clip, factor in ((0.5, 0.353553), (10.0, 1.0)):
        a = torch.zeros(2, requires_grad=True)
        b = torch.zeros(2, requires_grad=True)
        pipe = GradientPipeline(trainop.GradientDescentOptimizer(1.0), [ClipByGlobalNorm(clip)])
        result = pipe.apply_gradients([(t([0.6, 0.8]), a), (t([1.0, 0.0]), b)])
        torch.testing.assert_close(a.detach(), -factor * t([0.6, 0.8]), rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(b.detach(), -factor * t([1.0, 0.0]), rtol=1e-5, atol=1e-7)
        assert float(result.global_norm) == pytest.approx(math.sqrt(2), rel=1e-6)
        assert float(result.clipped_global_norm) == pytest.approx(min(clip, math.sqrt(2)),
                                                                  rel=1e-6)


def test_scalar_variable_and_none_gradient_are_fine():
    """OpenSeq2Seq's Q7 crashes are not copied: rank-0 variables and None gradients work."""
    s = torch.tensor(3.0, requires_grad=True)
    v = torch.zeros(2, requires_grad=True)
    pipe = GradientPipeline(trainop.GradientDescentOptimizer(1.0), [ClipByGlobalNorm(1.0)])
    pipe.apply_gradients([(torch.tensor(4.0), s), (None, v)])
    assert float(s) == pytest.approx(2.0)


# ------------------------------------------------------------------ TensorFlow as the oracle
DTYPES = [(torch.float32, np.float32, 1e-6), (torch.float64, np.float64, 1e-12),
          (torch.float16, np.float16, 2e-3)]


@pytest.mark.parametrize("dtype,np_dtype,tol", DTYPES, ids=["f32", "f64", "f16"])
def test_against_tf(tf, dtype, np_dtype, tol):
    rng = np.random.default_rng(0)
    arrays = [rng.normal(size=s).astype(np_dtype) for s in [(3, 4), (5,), (2, 2, 2), ()]]
    tensors = [torch.tensor(a) for a in arrays]
    tf_tensors = [tf.constant(a) for a in arrays]
    for clip in (0.5, 2.0, 100.0):
        ours, norm = clip_by_global_norm(tensors, clip)
        theirs, tf_norm = tf.clip_by_global_norm(tf_tensors, clip)
        np.testing.assert_allclose(float(norm), float(tf_norm.numpy()), rtol=tol)
        for o, r in zip(ours, theirs, strict=True):
            np.testing.assert_allclose(o.numpy().astype(np.float64), r.numpy(), rtol=tol,
                                       atol=tol)
        for a, ta in zip(tensors[:3], tf_tensors[:3], strict=True):
            np.testing.assert_allclose(clip_by_norm(a, clip).numpy(),
                                       tf.clip_by_norm(ta, clip).numpy(), rtol=tol, atol=tol)
            if dtype == torch.float32:  # TF's own op only runs in float32 (a float32 size)
                np.testing.assert_allclose(
                    clip_by_average_norm(a, clip * 0.1).numpy(),
                    tf.compat.v1.clip_by_average_norm(ta, clip * 0.1).numpy(), rtol=tol,
                    atol=tol)
    np.testing.assert_allclose(float(global_norm(tensors)),
                               float(tf.linalg.global_norm(tf_tensors).numpy()), rtol=tol)
    a = tensors[0]
    np.testing.assert_allclose(clip_by_norm(a, 0.5, axes=[1]).numpy(),
                               tf.clip_by_norm(tf_tensors[0], 0.5, axes=[1]).numpy(),
                               rtol=tol, atol=tol)


def test_clip_by_value_against_tf(tf):
    values = np.array([np.nan, np.inf, -np.inf, 5.0, -5.0, 0.25], dtype=np.float32)
    ours = clip_by_value(torch.tensor(values), -1.0, 1.0).numpy()
    np.testing.assert_array_equal(ours, tf.clip_by_value(values, -1.0, 1.0).numpy())
    s = sparse([3.0, -3.0], [1, 1], 4)
    out = clip_by_value(s, -1.0, 2.0)
    assert out._values().tolist() == [2.0, -1.0]


def test_nonfinite_against_tf(tf):
    values = [np.array([np.inf, 1.0], np.float32), np.array([2.0, 3.0], np.float32)]
    ours, norm = clip_by_global_norm([torch.tensor(v) for v in values], 1.0)
    theirs, tf_norm = tf.clip_by_global_norm([tf.constant(v) for v in values], 1.0)
    assert math.isinf(float(norm)) and math.isinf(float(tf_norm.numpy()))
    for o, r in zip(ours, theirs, strict=True):
        assert np.isnan(o.numpy()).all() and np.isnan(r.numpy()).all()


def test_sparse_global_norm_counts_duplicates_like_tf(tf):
    values = np.array([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5]], np.float32)
    indices = np.array([0, 2, 0])
    ours = torch.sparse_coo_tensor(torch.from_numpy(indices[None]), torch.from_numpy(values),
                                   (4, 2))
    theirs = tf.IndexedSlices(tf.constant(values), tf.constant(indices), tf.constant([4, 2]))
    out, norm = clip_by_global_norm([ours, torch.ones(3)], 2.0)
    tf_out, tf_norm = tf.clip_by_global_norm([theirs, tf.ones(3)], 2.0)
    np.testing.assert_allclose(float(norm), float(tf_norm.numpy()), rtol=1e-6)
    np.testing.assert_allclose(out[0]._values().numpy(), tf_out[0].values.numpy(), rtol=1e-6)


# ------------------------------------------------------------------ processors = functions
def _pairs(seed=0):
    g = torch.Generator().manual_seed(seed)
    shapes = [(4, 3), (7,), (2, 2, 2)]
    return [(torch.randn(s, generator=g) * (k + 1), torch.zeros(s))
            for k, s in enumerate(shapes)]


def test_processors_equal_functions():
    pairs = _pairs()
    grads = [g for g, _ in pairs]
    for proc, fn in (
        (ClipByNorm(1.5), lambda g: clip_by_norm(g, 1.5)),
        (ClipByAverageNorm(0.2), lambda g: clip_by_average_norm(g, 0.2)),
        (ClipByValue(-0.5, 0.7), lambda g: clip_by_value(g, -0.5, 0.7)),
    ):
        for (out, _), g in zip(proc(pairs), grads, strict=True):
            torch.testing.assert_close(out, fn(g), rtol=1e-6, atol=1e-7)
    expected, _ = clip_by_global_norm(grads, 2.0)
    for (out, _), e in zip(ClipByGlobalNorm(2.0)(pairs), expected, strict=True):
        torch.testing.assert_close(out, e, rtol=1e-6, atol=1e-7)
    # folded factors leave the caller's gradients untouched
    assert all(torch.equal(a, b) for a, (b, _) in zip(grads, _pairs(), strict=True))
