"""The ``tf.train.Optimizer`` contract: compute_gradients, apply_gradients, minimize, slots.

Numbers marked "spec" come from /work/shared/spec/tf1.md (§1.3, §1.7, §5.1, §5.2), which
records them as checked against TensorFlow.
"""

from __future__ import annotations

import io

import pytest
import torch
from torch import nn

import trainop
from trainop import (
    AdagradDAOptimizer,
    AdamOptimizer,
    AdamWOptimizer,
    GradientDescentOptimizer,
    MomentumOptimizer,
    MomentumWOptimizer,
    Optimizer,
)

DTYPES = [torch.float16, torch.float32, torch.float64]


def var(values, dtype=torch.float32):
    return torch.tensor(values, dtype=dtype, requires_grad=True)


def t(values, dtype=torch.float32):
    return torch.tensor(values, dtype=dtype)


def assert_values(x: torch.Tensor, expected, dtype=None) -> None:
    expected = torch.tensor(expected, dtype=dtype or x.dtype)
    torch.testing.assert_close(x.detach(), expected, rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------------- constants, names
def test_gate_constants():
    assert (Optimizer.GATE_NONE, Optimizer.GATE_OP, Optimizer.GATE_GRAPH) == (0, 1, 2)
    assert GradientDescentOptimizer.GATE_GRAPH == 2
    assert trainop.AggregationMethod.ADD_N == trainop.AggregationMethod.DEFAULT == 0
    assert trainop.AggregationMethod.EXPERIMENTAL_TREE == 1
    assert trainop.AggregationMethod.EXPERIMENTAL_ACCUMULATE_N == 2


def test_get_name():
    assert GradientDescentOptimizer(1.0).get_name() == "GradientDescent"
    assert AdamOptimizer().get_name() == "Adam"
    assert MomentumOptimizer(1.0, 0.5, name="my_momentum").get_name() == "my_momentum"


def test_optimizers_are_torch_optimizers():
    assert isinstance(AdamOptimizer(), torch.optim.Optimizer)
    assert AdamOptimizer().param_groups == []


# ---------------------------------------------------------------------------- spec §5.1
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_basic_minimize_vector_loss(dtype):
    """spec §5.1 testBasic: a vector loss is summed; GD lr 3."""
    v0, v1 = var([1.0, 2.0], dtype), var([3.0, 4.0], dtype)
    step = torch.tensor(0, dtype=torch.int64)
    opt = GradientDescentOptimizer(3.0)
    opt.minimize(lambda: 5 * v0 + 3 * v1, global_step=step, var_list=[v0, v1])
    assert_values(v0, [-14.0, -13.0])
    assert_values(v1, [-6.0, -5.0])
    assert int(step) == 1 and step.dtype == torch.int64


@pytest.mark.parametrize("method", [None, 0, 1, 2])
@pytest.mark.parametrize("gate", [Optimizer.GATE_NONE, Optimizer.GATE_OP, Optimizer.GATE_GRAPH])
def test_gate_and_aggregation_have_no_numeric_effect(gate, method):
    """spec §5.1 testAggregationMethod: same numbers for every gating/aggregation mode."""
    v0, v1 = var([1.0, 2.0]), var([3.0, 4.0])
    GradientDescentOptimizer(3.0).minimize(5 * v0 + 3 * v1, var_list=[v0, v1],
                                           gate_gradients=gate, aggregation_method=method,
                                           colocate_gradients_with_ops=True)
    assert_values(v0, [-14.0, -13.0])
    assert_values(v1, [-6.0, -5.0])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_precomputed_gradient(dtype):
    """spec §5.1 testPrecomputedGradient: grad_loss replaces the implicit ones."""
    v0, v1 = var([1.0, 2.0], dtype), var([3.0, 4.0], dtype)
    opt = GradientDescentOptimizer(3.0)
    opt.minimize(lambda: 5 * v0 + 3 * v1, var_list=[v0, v1], grad_loss=t([42.0, -42.0], dtype))
    assert_values(v0, [-629.0, 632.0])
    assert_values(v1, [-375.0, 382.0])


def test_grad_loss_weights_a_non_scalar_loss():
    """spec §1.3: minimize(v*v, grad_loss=[10, -1]) with v = [1, 2], lr 1 gives [-19, 6]."""
    v = var([1.0, 2.0])
    GradientDescentOptimizer(1.0).minimize(lambda: v * v, var_list=[v], grad_loss=t([10.0, -1.0]))
    assert_values(v, [-19.0, 6.0])


def test_gradients_as_leaf_tensors():
    """spec §5.1 testGradientsAsVariables: gradients copied into variables can be applied."""
    v0, v1 = var([1.0, 2.0]), var([3.0, 4.0])
    opt = GradientDescentOptimizer(3.0)
    gv = opt.compute_gradients(lambda: 5 * v0 + 3 * v1, var_list=[v0, v1])
    as_vars = [(g.detach().clone().requires_grad_(), v) for g, v in gv]
    opt.apply_gradients(as_vars)
    assert_values(v0, [-14.0, -13.0])
    assert_values(v1, [-6.0, -5.0])


def test_gradient_descent_basic_and_no_variables():
    """spec §5.2 testBasic: one step, lr 3; GD has no slots and no variables."""
    v0, v1 = var([1.0, 2.0]), var([3.0, 4.0])
    opt = GradientDescentOptimizer(3.0)
    opt.apply_gradients([(t([0.1, 0.1]), v0), (t([0.01, 0.01]), v1)])
    assert_values(v0, [0.7, 1.7])
    assert_values(v1, [2.97, 3.97])
    assert opt.variables() == [] and opt.get_slot_names() == []


def test_gradient_descent_minimize_matmul():
    """spec §5.2 testMinimizeResourceVariable: pred = v0 @ x + v1 = 17, loss = pred**2."""
    v0, v1 = var([[1.0, 2.0]]), var([3.0])
    x = t([[4.0], [5.0]])
    GradientDescentOptimizer(1.0).minimize(lambda: ((v0 @ x + v1) ** 2).sum(), var_list=[v0, v1])
    assert_values(v0, [[-135.0, -168.0]])
    assert_values(v1, [-31.0])


# ---------------------------------------------------------------------------- compute_gradients
def test_compute_gradients_pairs_none_and_order():
    v0, v1, unused = var([1.0, 2.0]), var([3.0, 4.0]), var([5.0])
    opt = GradientDescentOptimizer(1.0)
    gv = opt.compute_gradients(lambda: (v0 * v1).sum(), var_list=[v1, unused, v0])
    assert [v for _, v in gv] == [v1, unused, v0]
    assert all(v is w for (_, v), w in zip(gv, [v1, unused, v0], strict=True))
    assert_values(gv[0][0], [1.0, 2.0])
    assert gv[1][0] is None
    assert_values(gv[2][0], [3.0, 4.0])
    # Nothing moved, and .grad is untouched.
    assert v0.grad is None and v1.grad is None
    assert_values(v0, [1.0, 2.0])


def test_compute_gradients_tensor_and_callable_loss_agree():
    v = var([1.0, -2.0, 3.0])
    opt = GradientDescentOptimizer(1.0)
    (g1, _), = opt.compute_gradients(lambda: (v ** 3).sum(), var_list=[v])
    (g2, _), = opt.compute_gradients((v ** 3).sum(), var_list=[v])
    (g3, _), = opt.compute_gradients(v ** 3, var_list=[v])  # non-scalar: summed
    assert torch.equal(g1, g2) and torch.equal(g1, g3)
    assert_values(g1, [3.0, 12.0, 27.0])


def test_compute_gradients_single_tensor_var_list():
    v = var([2.0])
    gv = GradientDescentOptimizer(1.0).compute_gradients((v * v).sum(), var_list=v)
    assert len(gv) == 1 and gv[0][1] is v
    assert_values(gv[0][0], [4.0])


def test_compute_gradients_constant_loss_gives_none():
    v0, v1 = var([1.0]), var([2.0])
    gv = GradientDescentOptimizer(1.0).compute_gradients(t(5.0), var_list=[v0, v1])
    assert gv == [(None, v0), (None, v1)]


def test_var_list_none_is_every_owned_variable():
    # torch style: the constructor's parameters.
    model = nn.Linear(2, 1)
    opt = GradientDescentOptimizer(0.1, params=model.parameters())
    gv = opt.compute_gradients(lambda: model(torch.ones(1, 2)).sum())
    assert [v for _, v in gv] == list(model.parameters())
    assert all(g is not None for g, _ in gv)
    # TF style: every variable registered by earlier applies, in registration order.
    v0, v1, v2 = var([1.0]), var([2.0]), var([3.0])
    opt = GradientDescentOptimizer(0.5)
    opt.apply_gradients([(t([1.0]), v0), (t([1.0]), v1)])
    gv = opt.compute_gradients(lambda: (v0 * v2).sum())
    assert [v for _, v in gv] == [v0, v1]
    assert gv[1][0] is None
    opt.minimize(lambda: (v0 * v1 * 2).sum())  # var_list=None: both registered variables
    assert_values(v0, [0.5 - 0.5 * 2 * 1.5])
    assert_values(v2, [3.0])


def test_no_gradients_errors():
    """spec §5.1 testNoGradients / testNoGradientsForAnyVariables_*."""
    v0, v1 = var([1.0, 2.0]), var([3.0, 4.0])
    opt = GradientDescentOptimizer(3.0)
    with pytest.raises(ValueError, match="No gradients"):
        opt.minimize(lambda: 5 * v0, var_list=[v1])
    with pytest.raises(ValueError, match="No gradients provided for any variable"):
        opt.minimize(lambda: t(5.0), var_list=[v0, v1])
    with pytest.raises(ValueError, match="No gradients provided for any variable"):
        opt.apply_gradients([(None, v0), (None, v1)])
    with pytest.raises(ValueError, match="No.*variables"):
        GradientDescentOptimizer(3.0).minimize(lambda: t(5.0))


# ---------------------------------------------------------------------------- apply_gradients
def test_none_gradients_skipped_and_get_no_slots():
    v0, v1 = var([1.0, 2.0]), var([3.0, 4.0])
    opt = AdamOptimizer(0.1)
    opt.apply_gradients([(t([0.1, 0.1]), v0), (None, v1)])
    assert_values(v1, [3.0, 4.0])
    assert opt.get_slot(v0, "m") is not None
    assert opt.get_slot(v1, "m") is None and opt.get_slot(v1, "v") is None
    assert v1 not in opt.state or not opt.state[v1]
    assert all(p is not v1 for g in opt.param_groups for p in g["params"])
    # Once v1 gets a gradient it gets its slots (zeros) and is updated.
    opt.apply_gradients([(None, v0), (t([0.1, 0.1]), v1)])
    assert opt.get_slot(v1, "m") is not None
    assert not torch.equal(v1.detach(), t([3.0, 4.0]))


def test_apply_gradients_accepts_an_iterator():
    v0, v1 = var([1.0, 2.0]), var([3.0, 4.0])
    GradientDescentOptimizer(3.0).apply_gradients(zip([t([0.1, 0.1]), t([0.01, 0.01])],
                                                      [v0, v1], strict=True), name="train")
    assert_values(v0, [0.7, 1.7])
    assert_values(v1, [2.97, 3.97])


def test_same_variable_twice_is_two_updates():
    v = var([1.0, 2.0])
    GradientDescentOptimizer(3.0).apply_gradients([(t([0.1, 0.1]), v), (t([0.2, 0.2]), v)])
    assert_values(v, [1.0 - 0.3 - 0.6, 2.0 - 0.3 - 0.6])
    # Momentum: the second update sees the accumulator of the first.
    w = var([1.0])
    opt = MomentumOptimizer(1.0, 0.5)
    opt.apply_gradients([(t([1.0]), w), (t([1.0]), w)])
    assert_values(opt.get_slot(w, "momentum"), [1.5])
    assert_values(w, [1.0 - 1.0 - 1.5])
    # Adam: both updates use the same beta powers, which advance once per apply.
    a = var([1.0])
    adam = AdamOptimizer(0.1)
    adam.apply_gradients([(t([1.0]), a), (t([1.0]), a)])
    non_slot = adam.param_groups[0]["non_slot"]
    assert float(non_slot["beta1_power"]) == pytest.approx(0.81, rel=1e-6)
    assert int(non_slot["step"]) == 1


def test_two_apply_calls_share_slots():
    v = var([1.0, 2.0])
    opt = MomentumOptimizer(2.0, 0.9)
    opt.apply_gradients([(t([0.1, 0.1]), v)])
    slot = opt.get_slot(v, "momentum")
    opt.apply_gradients([(t([0.1, 0.1]), v)])
    assert opt.get_slot(v, "momentum") is slot
    # spec §5.3 testBasic: after two steps.
    assert_values(slot, [0.19, 0.19])
    assert_values(v, [1.0 - 0.2 - 0.38, 2.0 - 0.2 - 0.38])


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=str)
def test_global_step_increments_once_per_apply(dtype):
    v0, v1 = var([1.0, 2.0]), var([3.0, 4.0])
    step = torch.tensor(7, dtype=dtype)
    opt = AdamOptimizer(0.1)
    opt.apply_gradients([(t([0.1, 0.1]), v0), (t([0.1, 0.1]), v1)], global_step=step)
    assert int(step) == 8 and step.dtype == dtype
    opt.apply_gradients([(t([0.1, 0.1]), v0), (None, v1)], global_step=step)
    assert int(step) == 9
    opt.apply_gradients([(t([0.1, 0.1]), v0)])  # no global_step: untouched
    assert int(step) == 9
    opt.minimize(lambda: (v0 * v1).sum(), global_step=step, var_list=[v0, v1])
    assert int(step) == 10
    # trainop's own per-group counter counts applies too.
    assert int(opt.param_groups[0]["non_slot"]["step"]) == 4


def test_adagrad_da_reads_global_step_before_increment():
    lr, l2 = 3.0, 0.5
    v = var([1.0], torch.float64)
    step = torch.tensor(5, dtype=torch.int64)
    opt = AdagradDAOptimizer(lr, global_step=step, l2_regularization_strength=l2)
    opt.apply_gradients([(t([0.1], torch.float64), v)], global_step=step)
    tt = 6.0  # global_step + 1, read before this update's increment
    g, gga = 0.1, 0.1 + 0.01
    expected = -float(torch.tensor(lr, dtype=torch.float32)) * g / (
        l2 * tt * float(torch.tensor(lr, dtype=torch.float32)) + gga ** 0.5)
    assert float(v.detach()) == pytest.approx(expected, rel=1e-6)
    assert int(step) == 6


# ---------------------------------------------------------------------------- learning rates
def test_callable_learning_rate_called_once_per_apply():
    calls = []

    def lr():
        calls.append(1)
        return 3.0

    v0, v1 = var([1.0, 2.0]), var([3.0, 4.0])
    opt = GradientDescentOptimizer(lr)
    opt.apply_gradients([(t([0.1, 0.1]), v0), (t([0.01, 0.01]), v1)])
    assert len(calls) == 1
    assert_values(v0, [0.7, 1.7])
    assert_values(v1, [2.97, 3.97])


def test_tensor_learning_rate_is_read_at_every_apply():
    lr = torch.tensor(3.0)
    v = var([1.0, 2.0])
    opt = GradientDescentOptimizer(lr)
    opt.apply_gradients([(t([0.1, 0.1]), v)])
    assert_values(v, [0.7, 1.7])
    lr.fill_(1.0)  # like assigning a tf.Variable learning rate
    opt.apply_gradients([(t([0.1, 0.1]), v)])
    assert_values(v, [0.6, 1.6])


def test_callable_hyperparameters_other_than_lr():
    v = var([1.0, 2.0])
    opt = MomentumOptimizer(lambda: 2.0, lambda: 0.9)
    for _ in range(2):
        opt.apply_gradients([(t([0.1, 0.1]), v)])
    assert_values(v, [1.0 - 0.2 - 0.38, 2.0 - 0.2 - 0.38])


def test_param_group_lr_written_by_hand_or_scheduler():
    # TF style: after registration the optimizer's group holds "lr" like any torch optimizer.
    v = var([1.0])
    opt = GradientDescentOptimizer(1.0)
    opt.apply_gradients([(t([1.0]), v)])
    opt.param_groups[0]["lr"] = 0.25
    opt.apply_gradients([(t([1.0]), v)])
    assert_values(v, [-0.25])
    # torch style with LambdaLR.
    w = var([1.0])
    opt = GradientDescentOptimizer(1.0, params=[w])
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda e: 0.5 ** e)
    for _ in range(3):
        opt.zero_grad()
        w.sum().backward()
        opt.step()
        sched.step()
    assert_values(w, [1.0 - 1.0 - 0.5 - 0.25])
    assert opt.param_groups[0]["lr"] == 0.125


def test_per_group_hyperparameters_torch_style():
    a, b = var([1.0]), var([1.0])
    opt = GradientDescentOptimizer(1.0, params=[{"params": [a]}, {"params": [b], "lr": 0.5}])
    (a + b).sum().backward()
    opt.step()
    assert_values(a, [0.0])
    assert_values(b, [0.5])
    c = var([1.0])
    opt.add_param_group({"params": [c], "lr": 0.25})
    opt.zero_grad()
    c.sum().backward()
    opt.step()
    assert_values(c, [0.75])


# ---------------------------------------------------------------------------- slots, variables
def test_get_slot_returns_none_for_unknown():
    v, other = var([1.0]), var([2.0])
    opt = AdamOptimizer(0.1)
    assert opt.get_slot(v, "m") is None  # nothing created yet
    opt.apply_gradients([(t([0.1]), v)])
    assert opt.get_slot(v, "m") is not None
    assert opt.get_slot(v, "nope") is None
    assert opt.get_slot(other, "m") is None
    assert opt.get_slot("not a tensor", "m") is None
    assert opt.get_slot_names() == ["m", "v"]


def test_slot_shapes_dtypes_and_initial_values():
    v = var([[1.0, 2.0], [3.0, 4.0]], torch.float64)
    opt = trainop.RMSPropOptimizer(0.1, centered=True)
    opt.apply_gradients([(torch.zeros(2, 2, dtype=torch.float64), v)])
    assert opt.get_slot_names() == ["mg", "momentum", "rms"]
    for name in opt.get_slot_names():
        slot = opt.get_slot(v, name)
        assert slot.shape == v.shape and slot.dtype == torch.float64
        assert not slot.requires_grad
    adagrad = trainop.AdagradOptimizer(1.0, initial_accumulator_value=0.25)
    w = var([1.0])
    adagrad.apply_gradients([(t([0.0]), w)])
    assert_values(adagrad.get_slot(w, "accumulator"), [0.25])


def test_adam_variables_order():
    """spec §1.8: beta1_power, beta2_power, then m and v of each variable."""
    v0, v1 = var([1.0, 2.0], torch.float64), var([3.0, 4.0], torch.float64)
    opt = AdamOptimizer(0.1)
    opt.apply_gradients([(t([0.1, 0.1], torch.float64), v0), (t([0.01, 0.01], torch.float64), v1)])
    got = opt.variables()
    non_slot = opt.param_groups[0]["non_slot"]
    expected = [non_slot["beta1_power"], non_slot["beta2_power"],
                opt.get_slot(v0, "m"), opt.get_slot(v0, "v"),
                opt.get_slot(v1, "m"), opt.get_slot(v1, "v")]
    assert len(got) == 6
    assert all(a is b for a, b in zip(got, expected, strict=True))
    # Beta powers are float32 (even for a float64 model), advanced once per apply.
    assert non_slot["beta1_power"].dtype == torch.float32
    beta1 = torch.tensor(0.9, dtype=torch.float32)
    assert torch.equal(non_slot["beta1_power"], beta1 * beta1)
    assert float(non_slot["beta1_power"]) == pytest.approx(0.80999994, abs=1e-8)


def test_momentum_slot_values():
    v = var([1.0, 2.0])
    opt = MomentumOptimizer(2.0, 0.9)
    opt.apply_gradients([(t([0.1, 0.1]), v)])
    assert_values(opt.get_slot(v, "momentum"), [0.1, 0.1])
    assert opt.variables() == [opt.get_slot(v, "momentum")]


# ---------------------------------------------------------------------------- minimize dispatch
def test_minimize_dispatches_through_apply_gradients_override():
    calls = []

    class Recording(GradientDescentOptimizer):
        def apply_gradients(self, grads_and_vars, global_step=None, name=None):
            calls.append(list(grads_and_vars))
            return super().apply_gradients(calls[-1], global_step=global_step, name=name)

    v = var([1.0])
    Recording(1.0).minimize(lambda: 2 * v.sum(), var_list=[v])
    assert len(calls) == 1 and calls[0][0][1] is v
    assert_values(v, [-1.0])


@pytest.mark.parametrize("implementation", [None, "reference", "foreach", "fused"])
def test_adamw_decay_var_list_in_minimize_and_apply(implementation):
    v0, v1 = var([1.0, 2.0]), var([3.0, 4.0])
    opt = AdamWOptimizer(0.5, learning_rate=0.0, implementation=implementation)
    opt.minimize(lambda: (v0 + v1).sum(), var_list=[v0, v1], decay_var_list=[v0])
    assert_values(v0, [0.5, 1.0])
    assert_values(v1, [3.0, 4.0])
    opt.apply_gradients([(t([1.0, 1.0]), v0), (t([1.0, 1.0]), v1)])  # no list: all decay
    assert_values(v0, [0.25, 0.5])
    assert_values(v1, [1.5, 2.0])


def test_momentumw_sparse_decays_touched_rows_once():
    wd, lr = 0.25, 0.5
    start = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], dtype=torch.float64)
    w = start.clone().requires_grad_()
    g = torch.sparse_coo_tensor([[2, 0, 2]], torch.tensor([[1.0, 1.0], [2.0, 2.0], [1.0, -1.0]],
                                                            dtype=torch.float64), (3, 2))
    MomentumWOptimizer(wd, learning_rate=lr, momentum=0.9).apply_gradients([(g, w)])
    dense = torch.tensor([[2.0, 2.0], [0.0, 0.0], [2.0, 0.0]], dtype=torch.float64)
    expected = start - start * wd - lr * dense
    expected[1] = start[1]
    torch.testing.assert_close(w.detach(), expected, rtol=1e-12, atol=0)


# ---------------------------------------------------------------------------- torch style
def test_step_with_closure_and_without_grads():
    w = var([1.0])
    opt = GradientDescentOptimizer(1.0, params=[w])
    assert opt.step() is None  # no .grad: nothing happens
    assert_values(w, [1.0])

    def closure():
        opt.zero_grad()
        loss = (w * 3).sum()
        loss.backward()
        return loss

    loss = opt.step(closure)
    assert float(loss.detach()) == 3.0
    assert_values(w, [-2.0])


def test_tf_and_torch_style_identical_on_a_model():
    torch.manual_seed(0)
    x, y = torch.randn(8, 4), torch.randn(8, 2)
    m1 = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 2))
    m2 = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 2))
    m2.load_state_dict(m1.state_dict())
    opt1 = AdamOptimizer(0.01)
    opt2 = AdamOptimizer(0.01, params=m2.parameters())
    step = torch.tensor(0)
    for _ in range(5):
        opt1.minimize(lambda: ((m1(x) - y) ** 2).mean(), global_step=step,
                      var_list=list(m1.parameters()))
        opt2.zero_grad()
        ((m2(x) - y) ** 2).mean().backward()
        opt2.step()
    assert int(step) == 5
    for p1, p2 in zip(m1.parameters(), m2.parameters(), strict=True):
        assert torch.equal(p1, p2)
        assert torch.equal(opt1.get_slot(p1, "m"), opt2.get_slot(p2, "m"))
        assert torch.equal(opt1.get_slot(p1, "v"), opt2.get_slot(p2, "v"))


# ---------------------------------------------------------------------------- state_dict
def _save_load(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def test_state_dict_round_trip_is_bit_exact():
    torch.manual_seed(1)
    x, y = torch.randn(8, 3, dtype=torch.float64), torch.randn(8, 1, dtype=torch.float64)

    def run(model, opt, steps):
        for _ in range(steps):
            opt.zero_grad()
            ((model(x) - y) ** 2).mean().backward()
            opt.step()

    ref = nn.Linear(3, 1).double()
    init = {k: v.clone() for k, v in ref.state_dict().items()}
    ref_opt = AdamOptimizer(0.05, params=ref.parameters())
    run(ref, ref_opt, 6)

    model = nn.Linear(3, 1).double()
    model.load_state_dict(init)
    opt = AdamOptimizer(0.05, params=model.parameters())
    run(model, opt, 3)
    ckpt = _save_load({"model": model.state_dict(), "opt": opt.state_dict()})
    assert set(ckpt["opt"]["state"][0]) == {"m", "v"}
    assert ckpt["opt"]["param_groups"][0]["non_slot"]["beta1_power"].dtype == torch.float32

    model2 = nn.Linear(3, 1).double()
    model2.load_state_dict(ckpt["model"])
    opt2 = AdamOptimizer(0.05, params=model2.parameters())
    opt2.load_state_dict(ckpt["opt"])
    run(model2, opt2, 3)
    for p_ref, p in zip(ref.parameters(), model2.parameters(), strict=True):
        assert torch.equal(p_ref, p)
        assert torch.equal(ref_opt.get_slot(p_ref, "v"), opt2.get_slot(p, "v"))
    assert torch.equal(ref_opt.param_groups[0]["non_slot"]["beta2_power"],
                       opt2.param_groups[0]["non_slot"]["beta2_power"])
    assert int(opt2.param_groups[0]["non_slot"]["step"]) == 6


def test_state_dict_keeps_slot_dtype_and_callable_lr():
    w = var([1.0, 2.0], torch.float64)
    opt = trainop.NovoGrad(lambda: 0.1, params=[w])
    w.sum().backward()
    opt.step()
    sd = _save_load(opt.state_dict())
    assert sd["state"][0]["grad_norm_ema"].dtype == torch.float32
    w2 = w.detach().clone().requires_grad_()

    def lr2():
        return 0.2

    opt2 = trainop.NovoGrad(lr2, params=[w2])
    opt2.load_state_dict(sd)
    assert opt2.param_groups[0]["lr"] is lr2  # a callable is not saved: the loader's is kept
    assert opt2.state[w2]["grad_norm_ema"].dtype == torch.float32
    assert opt2.state[w2]["momentum"].dtype == torch.float64
    # Loading copies: the saved dict and the optimizer do not share storage.
    opt2.state[w2]["momentum"].add_(1.0)
    assert not torch.equal(opt2.state[w2]["momentum"], sd["state"][0]["momentum"])


# ---------------------------------------------------------------------------- sparse
def test_sparse_gradient_descent_basic():
    """spec §5.2 testSparseBasic."""
    v0, v1 = var([[1.0], [2.0]]), var([[3.0], [4.0]])
    g0 = torch.sparse_coo_tensor([[0]], t([[0.1]]), (2, 1))
    g1 = torch.sparse_coo_tensor([[1]], t([[0.01]]), (2, 1))
    GradientDescentOptimizer(3.0).apply_gradients([(g0, v0), (g1, v1)])
    assert_values(v0, [[0.7], [2.0]])
    assert_values(v1, [[3.0], [3.97]])


def test_sparse_momentum_duplicate_indices():
    """spec §1.7: indices [1, 1], values [1, 2], lr 1, momentum 0.5: row 1 -> -3, then -7.5."""
    v = torch.zeros(3, 1, requires_grad=True)
    g = torch.sparse_coo_tensor([[1, 1]], t([[1.0], [2.0]]), (3, 1))
    opt = MomentumOptimizer(1.0, 0.5)
    opt.apply_gradients([(g, v)])
    assert_values(v, [[0.0], [-3.0], [0.0]])
    opt.apply_gradients([(g, v)])
    assert_values(opt.get_slot(v, "momentum"), [[0.0], [4.5], [0.0]])
    assert_values(v, [[0.0], [-7.5], [0.0]])


def test_sparse_minimize_with_embedding():
    """spec §5.2 testMinimizeSparseResourceVariable: embedding lookup, same numbers as dense."""
    emb = nn.Embedding(1, 2, sparse=True)
    with torch.no_grad():
        emb.weight.copy_(t([[1.0, 2.0]]))
    v1 = var([3.0])
    x = t([[4.0], [5.0]])
    opt = GradientDescentOptimizer(1.0)
    gv = opt.compute_gradients(lambda: ((emb(torch.tensor([0])) @ x + v1) ** 2).sum(),
                               var_list=[emb.weight, v1])
    assert gv[0][0].is_sparse and not gv[1][0].is_sparse
    opt.apply_gradients(gv)
    assert_values(emb.weight, [[-135.0, -168.0]])
    assert_values(v1, [-31.0])


@pytest.mark.parametrize("cls", [trainop.AdamOptimizer, trainop.AdagradOptimizer,
                                 trainop.LazyAdamOptimizer])
def test_sparse_duplicates_equal_summed(cls):
    """spec §1.7: [0.1, 0.1] at [1, 1] equals [0.2] at [1]."""
    w1 = torch.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    w2 = torch.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    dup = torch.sparse_coo_tensor([[1, 1]], t([[0.1, 0.1], [0.1, 0.1]]), (2, 2))
    one = torch.sparse_coo_tensor([[1]], t([[0.2, 0.2]]), (2, 2))
    opt1, opt2 = cls(1.0), cls(1.0)
    for _ in range(2):
        opt1.apply_gradients([(dup, w1)])
        opt2.apply_gradients([(one, w2)])
    torch.testing.assert_close(w1.detach(), w2.detach(), rtol=1e-6, atol=1e-7)


def test_sparse_torch_style_embedding_bag_of_steps():
    emb = nn.Embedding(5, 2, sparse=True)
    start = emb.weight.detach().clone()
    opt = trainop.AdagradOptimizer(0.5, params=emb.parameters())
    idx = torch.tensor([0, 3, 3])
    for _ in range(2):
        opt.zero_grad()
        emb(idx).sum().backward()
        opt.step()
    untouched = [1, 2, 4]
    assert torch.equal(emb.weight.detach()[untouched], start[untouched])
    assert_values(opt.get_slot(emb.weight, "accumulator")[untouched],
                  [[0.1, 0.1]] * 3)
    # Row 3 got gradient 2 twice: accum 0.1 + 4 + 4.
    assert_values(opt.get_slot(emb.weight, "accumulator")[3], [8.1, 8.1])
