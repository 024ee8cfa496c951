"""``tf.contrib.opt`` members (spec tf1.md §2.10-§2.12, §5.8): LazyAdam, decoupled weight decay
(AdamW, MomentumW, ``extend_with_decoupled_weight_decay``) and Nadam.

No installable TensorFlow ships contrib, so every check is against the upstream test numbers
(weight_decay_optimizers_test, nadam_optimizer_test, lazy_adam_optimizer_test) and against
independent numpy references written from the published formulas. Tolerances are TF's: 1e-6 for
float32/float64, 1e-3 for float16. Sparse gradients are ``torch.sparse_coo_tensor`` (the
counterpart of ``tf.IndexedSlices``). Hyperparameters in the references are rounded as TF rounds
them for the variable's dtype (float32, then the dtype; decoupled ``weight_decay`` is used as
given), and Adam's beta powers are float32 products, as in TF.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tf_like import ALL_DTYPES, NP_DTYPE, H, S, check, const, slices, var

import trainop

# ----------------------------------------------------------------------------- helpers




def hyper(value, dtype):
    """A Python-float hyperparameter as TF feeds it to a ``dtype`` kernel (a numpy scalar)."""
    return NP_DTYPE[dtype](np.float32(value))


def as_dtype(values, dtype):
    """``values`` as a numpy array of the variable's dtype (what the optimizer receives)."""
    return np.asarray(values, np.float64).astype(NP_DTYPE[dtype])


def fixture(dtype):
    return (var([1.0, 2.0], dtype), var([3.0, 4.0], dtype),
            const([0.1, 0.1], dtype), const([0.01, 0.01], dtype))


def beta_powers(opt):
    non_slot = opt.param_groups[0]["non_slot"]
    return non_slot["beta1_power"], non_slot["beta2_power"]


class AdamNp:
    """Adam-family numpy reference (tf1.md §2.6, §2.10, §2.12), computed like upstream's numpy
    references in the variable's dtype, with TF's operation order and float32 beta powers."""

    def __init__(self, dtype, lr=0.001, beta1=0.9, beta2=0.999, eps=1e-8):
        self.dt = NP_DTYPE[dtype]
        self.lr, self.beta1, self.beta2, self.eps = (hyper(x, dtype)
                                                     for x in (lr, beta1, beta2, eps))
        self.b1_32, self.b2_32 = np.float32(beta1), np.float32(beta2)
        self.beta1_power, self.beta2_power = self.b1_32, self.b2_32

    def zeros(self, shape):
        return np.zeros(shape, self.dt)

    def alpha(self):
        b1p, b2p = self.dt(self.beta1_power), self.dt(self.beta2_power)
        return self.lr * np.sqrt(1 - b2p) / (1 - b1p)

    def finish(self):  # once per apply, after every variable (float32 multiplies)
        self.beta1_power = np.float32(self.beta1_power * self.b1_32)
        self.beta2_power = np.float32(self.beta2_power * self.b2_32)

    def _dense_moments(self, g, m, v):
        m = m + (g - m) * (1 - self.beta1)  # = beta1 * m + (1 - beta1) * g
        v = v + (g * g - v) * (1 - self.beta2)
        return m, v

    def adam_dense(self, p, g, m, v):
        m, v = self._dense_moments(g, m, v)
        return p - self.alpha() * m / (np.sqrt(v) + self.eps), m, v

    def nadam_dense(self, p, g, m, v):
        m, v = self._dense_moments(g, m, v)
        m_bar = g * (1 - self.beta1) + self.beta1 * m
        return p - self.alpha() * m_bar / (np.sqrt(v) + self.eps), m, v

    def _sparse_moments(self, idx, g, m, v):
        m, v = m * self.beta1, v * self.beta2  # the whole tensor decays ...
        m_scaled = g * (1 - self.beta1)
        m[idx] += m_scaled  # ... and accumulates at the gradient's rows
        v[idx] += (g * g) * (1 - self.beta2)
        return m, v, m_scaled

    def adam_sparse(self, p, idx, g, m, v):
        m, v, _ = self._sparse_moments(idx, g, m, v)
        # float16: epsilon 1e-8 rounds to 0, so untouched rows are 0 / 0 = NaN, as in TF.
        with np.errstate(invalid="ignore"):
            return p - self.alpha() * m / (np.sqrt(v) + self.eps), m, v  # every row moves

    def nadam_sparse(self, p, idx, g, m, v):
        m, v, m_scaled = self._sparse_moments(idx, g, m, v)
        p = p.copy()
        m_bar = m_scaled + self.beta1 * m[idx]
        p[idx] -= self.alpha() * m_bar / (np.sqrt(v[idx]) + self.eps)  # only rows idx move
        return p, m, v

    def lazy_sparse(self, p, idx, g, m, v):
        p, m, v = p.copy(), m.copy(), v.copy()
        m[idx] = self.beta1 * m[idx] + (1 - self.beta1) * g  # only rows idx of m, v, p
        v[idx] = self.beta2 * v[idx] + (1 - self.beta2) * g * g
        p[idx] -= self.alpha() * m[idx] / (np.sqrt(v[idx]) + self.eps)
        return p, m, v


def dedupe(indices, values):
    """TF's unique + unsorted_segment_sum over repeated row indices."""
    unique = sorted(set(indices))
    summed = np.stack([sum(values[k] for k, i in enumerate(indices) if i == u) for u in unique])
    return unique, summed


def sparse_schedule(rng, rows, cols, steps, dtype, repeats=False):
    """Per step: random row indices (a strict subset, maybe repeated) and their values."""
    out = []
    for _ in range(steps):
        k = int(rng.integers(1, rows))
        idx = list(rng.choice(rows, size=k, replace=False))
        if repeats:
            idx = idx + [idx[0]]
        values = as_dtype(rng.normal(size=(len(idx), cols)) * 0.5, dtype)
        out.append((idx, values))
    return out


# =============================================================================== LazyAdam §2.10
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_lazy_adam_dense_equals_adam(dtype):
    lazy_vars, adam_vars = fixture(dtype)[:2], fixture(dtype)[:2]
    _, _, g0, g1 = fixture(dtype)
    lazy, adam = trainop.LazyAdamOptimizer(), trainop.AdamOptimizer()
    ref = AdamNp(dtype)
    p0, p1 = as_dtype([1.0, 2.0], dtype), as_dtype([3.0, 4.0], dtype)
    m0 = v0 = m1 = v1 = ref.zeros(2)
    for _ in range(3):
        lazy.apply_gradients(zip([g0, g1], lazy_vars, strict=True))
        adam.apply_gradients(zip([g0, g1], adam_vars, strict=True))
        p0, m0, v0 = ref.adam_dense(p0, as_dtype(0.1, dtype), m0, v0)
        p1, m1, v1 = ref.adam_dense(p1, as_dtype(0.01, dtype), m1, v1)
        ref.finish()
        for lv, av, p in zip(lazy_vars, adam_vars, (p0, p1), strict=True):
            assert torch.equal(lv, av)
            check(lv, p, dtype)
        for slot in ("m", "v"):
            assert torch.equal(lazy.get_slot(lazy_vars[0], slot), adam.get_slot(adam_vars[0], slot))
    check(beta_powers(lazy)[0], 0.9**4)
    assert lazy.get_slot_names() == ["m", "v"] and lazy.get_name() == "Adam"


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_lazy_adam_sparse_all_rows_equals_adam(dtype):
    """lazy_adam_optimizer_test: indices cover every row, so the numbers are Adam's."""
    var0, var1, _, _ = fixture(dtype)
    opt = trainop.LazyAdamOptimizer()
    ref = AdamNp(dtype)
    p0, p1 = as_dtype([1.0, 2.0], dtype), as_dtype([3.0, 4.0], dtype)
    m0 = v0 = m1 = v1 = ref.zeros(2)
    table = [([0.9990000032, 1.9990000032], [2.9990000316, 3.9990000316]),
             ([0.9980000054, 1.9980000054], [2.998000054, 3.998000054]),
             ([0.9970000072, 1.9970000072], [2.9970000723, 3.9970000723])]
    for t in range(1, 4):
        if t > 1:
            check(beta_powers(opt)[0], 0.9**t)
            check(beta_powers(opt)[1], 0.999**t)
        opt.apply_gradients([(slices([0.1, 0.1], [0, 1], (2,), dtype), var0),
                             (slices([0.01, 0.01], [0, 1], (2,), dtype), var1)])
        p0, m0, v0 = ref.adam_dense(p0, as_dtype(0.1, dtype), m0, v0)
        p1, m1, v1 = ref.adam_dense(p1, as_dtype(0.01, dtype), m1, v1)
        ref.finish()
        check(var0, p0, dtype)
        check(var1, p1, dtype)
        check(var0, table[t - 1][0], dtype)
        check(var1, table[t - 1][1], dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_lazy_adam_sparse_touches_only_rows(dtype):
    """10 steps of random row subsets vs the §2.10 numpy reference; other rows stay put."""
    rng = np.random.default_rng(1)
    rows, cols = 6, 3
    start = as_dtype(rng.normal(size=(rows, cols)), dtype)
    table = var(start, dtype)
    opt = trainop.LazyAdamOptimizer(learning_rate=0.01)
    ref = AdamNp(dtype, lr=0.01)
    p, m, v = start.copy(), ref.zeros((rows, cols)), ref.zeros((rows, cols))
    for idx, values in sparse_schedule(rng, rows, cols, 10, dtype):
        before = {name: opt.get_slot(table, name) for name in ("m", "v")}
        before = {k: (None if t is None else t.clone()) for k, t in before.items()}
        old = table.detach().clone()
        opt.apply_gradients([(slices(values, idx, (rows, cols), dtype), table)])
        p, m, v = ref.lazy_sparse(p, idx, values, m, v)
        ref.finish()
        check(table, p, dtype)
        check(opt.get_slot(table, "m"), m, dtype)
        check(opt.get_slot(table, "v"), v, dtype)
        untouched = [r for r in range(rows) if r not in idx]
        assert torch.equal(table.detach()[untouched], old[untouched])
        for name, slot in before.items():
            if slot is not None:
                assert torch.equal(opt.get_slot(table, name)[untouched], slot[untouched])
    check(beta_powers(opt)[0], 0.9**11)  # the powers advance once per apply


def test_lazy_adam_versus_adam_on_missing_rows():
    """Adam's sparse rule moves rows without a gradient (decayed moments); LazyAdam's does not."""
    lazy_var, adam_var = var([[1.0], [2.0]]), var([[1.0], [2.0]])
    lazy, adam = trainop.LazyAdamOptimizer(0.1), trainop.AdamOptimizer(0.1)
    ref = AdamNp(S, lr=0.1)
    p_lazy = p_adam = as_dtype([[1.0], [2.0]], S)
    m_l = v_l = m_a = v_a = ref.zeros((2, 1))
    for idx in ([0, 1], [1], [1]):
        values = np.full((len(idx), 1), 0.5)
        for opt, v_ in ((lazy, lazy_var), (adam, adam_var)):
            opt.apply_gradients([(slices(values, idx, (2, 1)), v_)])
        p_lazy, m_l, v_l = ref.lazy_sparse(p_lazy, idx, values, m_l, v_l)
        p_adam, m_a, v_a = ref.adam_sparse(p_adam, idx, values, m_a, v_a)
        ref.finish()
        check(lazy_var, p_lazy)
        check(adam_var, p_adam)
    assert float(lazy_var[0].detach()) == pytest.approx(0.9, abs=1e-6)  # row 0 moved only at step 1
    assert float(adam_var[0].detach()) < 0.9 - 0.05  # Adam kept moving it


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_lazy_adam_repeated_indices(dtype):
    rng = np.random.default_rng(2)
    rows, cols = 5, 2
    start = as_dtype(rng.normal(size=(rows, cols)), dtype)
    repeated_var, aggregated_var = var(start, dtype), var(start, dtype)
    repeated_opt = trainop.LazyAdamOptimizer(0.01)
    aggregated_opt = trainop.LazyAdamOptimizer(0.01)
    ref = AdamNp(dtype, lr=0.01)
    p, m, v = start.copy(), ref.zeros((rows, cols)), ref.zeros((rows, cols))
    for idx, values in sparse_schedule(rng, rows, cols, 5, dtype, repeats=True):
        repeated_opt.apply_gradients([(slices(values, idx, (rows, cols), dtype), repeated_var)])
        unique, summed = dedupe(idx, values)
        aggregated_opt.apply_gradients([(slices(summed, unique, (rows, cols), dtype),
                                         aggregated_var)])
        p, m, v = ref.lazy_sparse(p, unique, summed, m, v)
        ref.finish()
        check(repeated_var, aggregated_var.detach(), dtype)
        check(repeated_var, p, dtype)
    # The upstream case: [0.1, 0.1] at [1, 1] equals [0.2] at [1].
    a, b = var([[1.0], [2.0]], dtype), var([[1.0], [2.0]], dtype)
    opt_a, opt_b = trainop.LazyAdamOptimizer(), trainop.LazyAdamOptimizer()
    for _ in range(3):
        opt_a.apply_gradients([(slices([[0.1], [0.1]], [1, 1], (2, 1), dtype), a)])
        opt_b.apply_gradients([(slices([[0.2]], [1], (2, 1), dtype), b)])
        check(a, b.detach(), dtype)
    assert float(a[0]) == 1.0


# =========================================================== decoupled weight decay §2.11, §5.8
WEIGHT_DECAY = 0.01
ADAMW_T1_V0 = [0.9890000032, 1.9790000032]
ADAMW_T3 = ([0.9673289071, 1.9376279071], [2.9079269714, 3.8782259714])
MOMENTUMW_T3 = ([0.96974189, 1.94004089], [2.910841289, 3.881140289])


def _adam_extended(*args, **kwargs):
    return trainop.extend_with_decoupled_weight_decay(trainop.AdamOptimizer)(*args, **kwargs)


DECAY_CASES = {
    "adamw": (lambda: trainop.AdamWOptimizer(WEIGHT_DECAY), "adam", "AdamW"),
    "extended_adam": (lambda: _adam_extended(WEIGHT_DECAY), "adam", "Adam"),
    "momentumw": (lambda: trainop.MomentumWOptimizer(WEIGHT_DECAY, learning_rate=0.001,
                                                     momentum=0.9), "momentum", "MomentumW"),
}


class DecayNp:
    """Decoupled weight decay over Adam or Momentum (§2.11): var -= wd * var, then the base
    update (which does not read var), in the variable's dtype like :class:`AdamNp`."""

    def __init__(self, base, dtype, shape):
        self.base = base
        self.adam = AdamNp(dtype)
        self.wd = NP_DTYPE[dtype](WEIGHT_DECAY)  # used as given (not rounded to float32 first)
        self.lr, self.momentum = hyper(0.001, dtype), hyper(0.9, dtype)
        self.state = {}
        self.shape = shape

    def _slots(self, key):
        return self.state.setdefault(key, (self.adam.zeros(self.shape),
                                           self.adam.zeros(self.shape)))

    def dense(self, key, p, g, decay=True):
        m, v = self._slots(key)
        decayed = p - p * self.wd if decay else p
        if self.base == "adam":
            new, m, v = self.adam.adam_dense(decayed, g, m, v)
        else:
            m = m * self.momentum + g
            new = decayed - m * self.lr
        self.state[key] = (m, v)
        return new

    def sparse(self, key, p, idx, g, decay=True):
        m, v = self._slots(key)
        p = p.copy()
        if decay:
            p[idx] -= p[idx] * self.wd  # only the gathered rows decay
        if self.base == "adam":
            p, m, v = self.adam.adam_sparse(p, idx, g, m, v)  # ... but every row moves
        else:
            m = m.copy()
            m[idx] = m[idx] * self.momentum + g
            p[idx] -= m[idx] * self.lr
        self.state[key] = (m, v)
        return p

    def finish(self):
        if self.base == "adam":
            self.adam.finish()


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("case", list(DECAY_CASES))
def test_weight_decay_upstream(case, dtype, sparse):
    """weight_decay_optimizers_test: fixture, 3 steps, dense and sparse (indices [0, 1])."""
    factory, base, name = DECAY_CASES[case]
    opt = factory()
    assert opt.get_name() == name
    var0, var1, g0, g1 = fixture(dtype)
    ref = DecayNp(base, dtype, (2,))
    p0, p1 = as_dtype([1.0, 2.0], dtype), as_dtype([3.0, 4.0], dtype)
    for t in range(1, 4):
        if sparse:
            grads = [slices([0.1, 0.1], [0, 1], (2,), dtype),
                     slices([0.01, 0.01], [0, 1], (2,), dtype)]
        else:
            grads = [g0, g1]
        opt.apply_gradients(zip(grads, [var0, var1], strict=True))
        p0 = ref.dense(0, p0, as_dtype([0.1, 0.1], dtype))
        p1 = ref.dense(1, p1, as_dtype([0.01, 0.01], dtype))
        ref.finish()
        check(var0, p0, dtype)
        check(var1, p1, dtype)
        if t == 1 and base == "adam":
            check(var0, ADAMW_T1_V0, dtype)
    if dtype != H:  # float64 numpy numbers; upstream checks float16 against its float16 numpy
        expected = ADAMW_T3 if base == "adam" else MOMENTUMW_T3
        check(var0, expected[0], dtype)
        check(var1, expected[1], dtype)
    assert opt.get_slot_names() == (["m", "v"] if base == "adam" else ["momentum"])


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("case", list(DECAY_CASES))
def test_weight_decay_sparse_subset_rows(case, dtype):
    """Sparse gradients on a subset of rows: only those rows decay; the base rule follows."""
    factory, base, _ = DECAY_CASES[case]
    opt = factory()
    rng = np.random.default_rng(3)
    rows, cols = 5, 2
    start = as_dtype(rng.normal(size=(rows, cols)), dtype)
    table = var(start, dtype)
    ref = DecayNp(base, dtype, (rows, cols))
    p = start.copy()
    for idx, values in sparse_schedule(rng, rows, cols, 6, dtype):
        opt.apply_gradients([(slices(values, idx, (rows, cols), dtype), table)])
        p = ref.sparse(0, p, idx, values)
        ref.finish()
        check(table, p, dtype)


def _two_var_loss(v0, v1, g0, g1):
    return lambda: (v0 * g0).sum() + (v1 * g1).sum()  # gradients g0 and g1


@pytest.mark.parametrize("entry", ["apply_gradients", "minimize"])
@pytest.mark.parametrize("case", list(DECAY_CASES))
def test_decay_var_list(case, entry):
    """Only the listed variables decay, via apply_gradients and via minimize (trainop honours
    the list in minimize too, quirk Q1); None and [] decay every variable; the list does not
    stick to the next call."""
    factory, base, _ = DECAY_CASES[case]
    opt = factory()
    var0, var1, g0, g1 = fixture(S)
    ref = DecayNp(base, S, (2,))
    p0, p1 = as_dtype([1.0, 2.0], S), as_dtype([3.0, 4.0], S)
    g0_np, g1_np = as_dtype([0.1, 0.1], S), as_dtype([0.01, 0.01], S)
    for decay_var_list, decays in (([var1], (False, True)), ([var0], (True, False)),
                                   (None, (True, True)), ([], (True, True)),
                                   ([var0, var1], (True, True))):
        if entry == "minimize":
            opt.minimize(_two_var_loss(var0, var1, g0, g1), var_list=[var0, var1],
                         decay_var_list=decay_var_list)
        else:
            opt.apply_gradients([(g0, var0), (g1, var1)], decay_var_list=decay_var_list)
        p0 = ref.dense(0, p0, g0_np, decay=decays[0])
        p1 = ref.dense(1, p1, g1_np, decay=decays[1])
        ref.finish()
        check(var0, p0)
        check(var1, p1)
    # The default (no list) after a call with a list decays everything again.
    opt.apply_gradients([(g0, var0), (g1, var1)])
    check(var0, ref.dense(0, p0, g0_np))
    check(var1, ref.dense(1, p1, g1_np))


def test_weight_decay_is_not_scaled_by_lr():
    """With a zero gradient and Momentum's zero accumulator only the decay acts: w *= 1 - wd."""
    w = var([1.0, -2.0])
    opt = trainop.MomentumWOptimizer(0.25, learning_rate=100.0, momentum=0.9)
    opt.apply_gradients([(torch.zeros(2), w)])
    check(w, [0.75, -1.5])


# ================================================================================== Nadam §2.12
NADAM_T1_V0 = [0.998100006, 1.998100006]
NADAM_T3 = ([0.995404692, 1.995404692], [2.9954047957, 3.9954047957])


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_nadam_dense_upstream(dtype):
    var0, var1, g0, g1 = fixture(dtype)
    opt = trainop.NadamOptimizer()
    assert opt.get_name() == "Adam"
    ref = AdamNp(dtype)
    p0, p1 = as_dtype([1.0, 2.0], dtype), as_dtype([3.0, 4.0], dtype)
    m0 = v0 = m1 = v1 = ref.zeros(2)
    for t in range(1, 4):
        opt.apply_gradients([(g0, var0), (g1, var1)])
        p0, m0, v0 = ref.nadam_dense(p0, as_dtype([0.1, 0.1], dtype), m0, v0)
        p1, m1, v1 = ref.nadam_dense(p1, as_dtype([0.01, 0.01], dtype), m1, v1)
        ref.finish()
        check(var0, p0, dtype)
        check(var1, p1, dtype)
        check(opt.get_slot(var0, "m"), m0, dtype)
        check(opt.get_slot(var0, "v"), v0, dtype)
        if t == 1:
            check(var0, NADAM_T1_V0, dtype)
    check(var0, NADAM_T3[0], dtype)
    check(var1, NADAM_T3[1], dtype)
    check(beta_powers(opt)[0], 0.9**4)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_nadam_sparse_upstream(dtype):
    """var0 = [1, 1, 2], var1 = [3, 3, 4], gradients only at [0, 2], epsilon 1e-7 (which,
    unlike 1e-8, survives float16 rounding): the middle element never moves."""
    var0, var1 = var([1.0, 1.0, 2.0], dtype), var([3.0, 3.0, 4.0], dtype)
    opt = trainop.NadamOptimizer(epsilon=1e-7)
    ref = AdamNp(dtype, eps=1e-7)
    p0, p1 = as_dtype([1.0, 1.0, 2.0], dtype), as_dtype([3.0, 3.0, 4.0], dtype)
    m0 = v0 = m1 = v1 = ref.zeros(3)
    g0_np, g1_np = as_dtype([0.1, 0.1], dtype), as_dtype([0.01, 0.01], dtype)
    for _ in range(3):
        opt.apply_gradients([(slices(g0_np, [0, 2], (3,), dtype), var0),
                             (slices(g1_np, [0, 2], (3,), dtype), var1)])
        p0, m0, v0 = ref.nadam_sparse(p0, [0, 2], g0_np, m0, v0)
        p1, m1, v1 = ref.nadam_sparse(p1, [0, 2], g1_np, m1, v1)
        ref.finish()
        check(var0, p0, dtype)
        check(var1, p1, dtype)
        assert float(var0[1]) == 1.0 and float(var1[1]) == 3.0
    # Same numbers as the dense rule with a zero gradient in the middle (its moments stay 0).
    dense_ref = AdamNp(dtype, eps=1e-7)
    q0, m, v = as_dtype([1.0, 1.0, 2.0], dtype), dense_ref.zeros(3), dense_ref.zeros(3)
    for _ in range(3):
        q0, m, v = dense_ref.nadam_dense(q0, as_dtype([0.1, 0.0, 0.1], dtype), m, v)
        dense_ref.finish()
    check(var0, q0, dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_nadam_reference_10_steps_dense(dtype):
    rng = np.random.default_rng(4)
    start = as_dtype(rng.normal(size=(4, 3)), dtype)
    w = var(start, dtype)
    opt = trainop.NadamOptimizer(learning_rate=0.01, beta1=0.8, beta2=0.99, epsilon=1e-6)
    ref = AdamNp(dtype, lr=0.01, beta1=0.8, beta2=0.99, eps=1e-6)
    p, m, v = start.copy(), ref.zeros((4, 3)), ref.zeros((4, 3))
    for _ in range(10):
        g = as_dtype(rng.normal(size=(4, 3)), dtype)
        opt.apply_gradients([(const(g, dtype), w)])
        p, m, v = ref.nadam_dense(p, g, m, v)
        ref.finish()
        check(w, p, dtype)
        check(opt.get_slot(w, "m"), m, dtype)
        check(opt.get_slot(w, "v"), v, dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_nadam_reference_10_steps_sparse(dtype):
    """Moments decay over the whole tensor; only the gradient's rows of the variable move."""
    rng = np.random.default_rng(5)
    rows, cols = 6, 2
    start = as_dtype(rng.normal(size=(rows, cols)), dtype)
    w = var(start, dtype)
    opt = trainop.NadamOptimizer(learning_rate=0.01, epsilon=1e-6)
    ref = AdamNp(dtype, lr=0.01, eps=1e-6)
    p, m, v = start.copy(), ref.zeros((rows, cols)), ref.zeros((rows, cols))
    for idx, values in sparse_schedule(rng, rows, cols, 10, dtype, repeats=True):
        old = w.detach().clone()
        opt.apply_gradients([(slices(values, idx, (rows, cols), dtype), w)])
        unique, summed = dedupe(idx, values)
        p, m, v = ref.nadam_sparse(p, unique, summed, m, v)
        ref.finish()
        check(w, p, dtype)
        check(opt.get_slot(w, "m"), m, dtype)
        check(opt.get_slot(w, "v"), v, dtype)
        untouched = [r for r in range(rows) if r not in idx]
        assert torch.equal(w.detach()[untouched], old[untouched])
