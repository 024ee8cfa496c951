"""Parity with TensorFlow itself: every ``tf.compat.v1.train`` optimizer, dense and sparse.

The same initial variable and the same 12 gradients go through TF 2.21's compat.v1 optimizer
(graph mode) and through trainop; the variable and every slot are compared after every step.
float64 within 1e-10 relative, float32 within 1e-5 relative (elements that cancel to nearly zero,
e.g. FTRL's ``linear``, get an absolute floor of a tenth of that times the array's magnitude).
TF runs on resource variables, the TF2 default and the path every dtype supports. Sparse
gradients carry duplicate row indices (TF sums them before the optimizer maths).
Hyperparameters are exactly representable in float32 (TF rounds Python floats to float32);
``test_float32_rounding_*`` checks the rounding rule itself with non-representable ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch
from tf_oracle import run_tf

import trainop

STEPS = 12
SHAPE = (6, 3)
TOLERANCE = {"float64": 1e-10, "float32": 1e-5}


@dataclass(frozen=True)
class Case:
    id: str
    tf_name: str  # class in tf.compat.v1.train
    args: tuple = ()
    kwargs: Any = None
    slots: tuple = ()
    global_step_arg: bool = False  # AdagradDA takes the global step in its constructor
    # TF's proximal kernels do not cast float32 hyperparameters to a float64 variable (quirk Q5;
    # trainop casts): feed TF tensors of the variable's dtype instead (same values).
    tf_hypers_as_tensors: bool = False

    def make_tf(self, tf, global_step, dtype):
        cls = getattr(tf.compat.v1.train, self.tf_name)
        args, kwargs = self.args, dict(self.kwargs or {})
        if self.tf_hypers_as_tensors:
            args = (tf.constant(args[0], dtype=dtype), *args[1:])
            kwargs = {k: tf.constant(v, dtype=dtype) if k.endswith("_strength") else v
                      for k, v in kwargs.items()}
        args = (args[0], global_step, *args[1:]) if self.global_step_arg else args
        return cls(*args, **kwargs)

    def make_trainop(self, global_step):
        cls = getattr(trainop, self.tf_name)
        args = (self.args[0], global_step, *self.args[1:]) if self.global_step_arg else self.args
        return cls(*args, **(self.kwargs or {}))


CASES = [
    Case("gd", "GradientDescentOptimizer", (0.5,)),
    Case("momentum", "MomentumOptimizer", (0.5, 0.875), slots=("momentum",)),
    Case("nesterov", "MomentumOptimizer", (0.5, 0.875), {"use_nesterov": True},
         slots=("momentum",)),
    Case("adagrad", "AdagradOptimizer", (0.5,), {"initial_accumulator_value": 0.125},
         slots=("accumulator",)),
    Case("adagrad_da", "AdagradDAOptimizer", (0.5,),
         {"initial_gradient_squared_accumulator_value": 0.125}, global_step_arg=True,
         slots=("gradient_accumulator", "gradient_squared_accumulator")),
    Case("adagrad_da_l1l2", "AdagradDAOptimizer", (0.5,),
         {"initial_gradient_squared_accumulator_value": 0.125,
          "l1_regularization_strength": 0.0625, "l2_regularization_strength": 0.125},
         global_step_arg=True, slots=("gradient_accumulator", "gradient_squared_accumulator")),
    Case("adadelta", "AdadeltaOptimizer", (0.5, 0.875, 2.0**-20),
         slots=("accum", "accum_update")),
    Case("rmsprop", "RMSPropOptimizer", (0.25,), {"decay": 0.875, "epsilon": 2.0**-10},
         slots=("rms", "momentum")),
    Case("rmsprop_momentum", "RMSPropOptimizer", (0.25,),
         {"decay": 0.875, "momentum": 0.5, "epsilon": 2.0**-10}, slots=("rms", "momentum")),
    Case("rmsprop_centered", "RMSPropOptimizer", (0.25,),
         {"decay": 0.875, "momentum": 0.5, "epsilon": 2.0**-10, "centered": True},
         slots=("rms", "momentum", "mg")),
    Case("adam", "AdamOptimizer", (0.125, 0.875, 0.9375, 2.0**-20), slots=("m", "v")),
    Case("ftrl", "FtrlOptimizer", (0.5,), {"initial_accumulator_value": 0.125},
         slots=("accum", "linear")),
    Case("ftrl_l1l2", "FtrlOptimizer", (0.5,),
         {"initial_accumulator_value": 0.125, "l1_regularization_strength": 0.0625,
          "l2_regularization_strength": 0.125}, slots=("accum", "linear")),
    Case("ftrl_power_shrinkage", "FtrlOptimizer", (0.5,),
         {"learning_rate_power": -0.75, "initial_accumulator_value": 0.125,
          "l1_regularization_strength": 0.0625, "l2_regularization_strength": 0.125,
          "l2_shrinkage_regularization_strength": 0.0625}, slots=("accum", "linear")),
    Case("proximal_gd", "ProximalGradientDescentOptimizer", (0.5,),
         {"l1_regularization_strength": 0.0, "l2_regularization_strength": 0.125},
         tf_hypers_as_tensors=True),
    Case("proximal_gd_l1", "ProximalGradientDescentOptimizer", (0.5,),
         {"l1_regularization_strength": 0.0625, "l2_regularization_strength": 0.125},
         tf_hypers_as_tensors=True),
    Case("proximal_adagrad", "ProximalAdagradOptimizer", (0.5, 0.125),
         {"l1_regularization_strength": 0.0, "l2_regularization_strength": 0.125},
         slots=("accumulator",), tf_hypers_as_tensors=True),
    Case("proximal_adagrad_l1", "ProximalAdagradOptimizer", (0.5, 0.125),
         {"l1_regularization_strength": 0.0625, "l2_regularization_strength": 0.125},
         slots=("accumulator",), tf_hypers_as_tensors=True),
]


def make_gradients(sparse: bool, seed: int = 1234):
    rng = np.random.default_rng(seed)
    init = rng.normal(size=SHAPE)
    grads = []
    for _ in range(STEPS):
        if sparse:
            # 5 rows out of 6 with replacement, always with at least one duplicate.
            indices = rng.integers(0, SHAPE[0], size=5)
            indices[-1] = indices[0]
            grads.append((rng.normal(size=(5, SHAPE[1])), indices))
        else:
            grads.append(rng.normal(size=SHAPE))
    return init, grads


def run_trainop(case_or_factory, slot_names, init, grads, dtype, device="cpu"):
    """trainop's trajectory (variable, global step, slots after every step); the variable, the
    gradients and the global step on ``device`` (``tests/test_cuda_tf_parity.py``: CUDA)."""
    torch_dtype = getattr(torch, dtype)
    var = torch.tensor(np.asarray(init, dtype=dtype), dtype=torch_dtype, device=device,
                       requires_grad=True)
    global_step = torch.zeros((), dtype=torch.int64, device=device)
    factory = getattr(case_or_factory, "make_trainop", case_or_factory)
    opt = factory(global_step)
    out = []
    for g in grads:
        if isinstance(g, tuple):
            values, indices = g
            grad = torch.sparse_coo_tensor(torch.as_tensor(indices)[None],
                                           torch.as_tensor(values, dtype=torch_dtype), var.shape)
        else:
            grad = torch.as_tensor(g, dtype=torch_dtype)
        opt.apply_gradients([(grad.to(device), var)], global_step=global_step)
        step = {"var": var.detach().cpu().numpy().copy(), "global_step": int(global_step)}
        for name in slot_names:
            slot = opt.get_slot(var, name)
            assert slot is not None, f"trainop has no slot {name!r}"
            step[name] = slot.detach().cpu().numpy().copy()
        out.append(step)
    return out


def assert_trajectories_equal(ours, theirs, dtype):
    rtol = TOLERANCE[dtype]
    assert len(ours) == len(theirs)
    for t, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert a["global_step"] == b["global_step"] == t + 1
        for key in b:
            if key == "global_step":
                continue
            expected = np.asarray(b[key])
            scale = max(1.0, float(np.abs(expected).max()))
            np.testing.assert_allclose(a[key], expected, rtol=rtol, atol=rtol * 0.1 * scale,
                                       err_msg=f"{key} after step {t + 1}")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_matches_tensorflow(tf, case, sparse, dtype):
    init, grads = make_gradients(sparse)
    theirs = run_tf(tf, lambda gs: case.make_tf(tf, gs, dtype), case.slots, init, grads, dtype)
    ours = run_trainop(case, case.slots, init, grads, dtype)
    assert_trajectories_equal(ours, theirs, dtype)


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_float32_rounding_of_hyperparameters_float64(tf, sparse):
    """TF rounds Python-float hyperparameters to float32 even for float64 variables."""
    init, grads = make_gradients(sparse, seed=7)
    slots = ("m", "v")
    theirs = run_tf(tf, lambda gs: tf.compat.v1.train.AdamOptimizer(0.001), slots, init, grads,
                    "float64")
    ours = run_trainop(lambda gs: trainop.AdamOptimizer(0.001), slots, init, grads, "float64")
    assert_trajectories_equal(ours, theirs, "float64")
    # A pure-float64 computation would differ by far more than the tolerance.
    lr64 = 0.001
    assert abs(trainop.contract.hyper.tf_round(lr64, torch.float64) - lr64) > 1e-12


def test_momentum_rms_rounding_float64(tf):
    init, grads = make_gradients(False, seed=3)
    theirs = run_tf(tf, lambda gs: tf.compat.v1.train.RMSPropOptimizer(0.01, 0.9, 0.9, 1e-10),
                    ("rms", "momentum"), init, grads, "float64")
    ours = run_trainop(lambda gs: trainop.RMSPropOptimizer(0.01, 0.9, 0.9, 1e-10),
                       ("rms", "momentum"), init, grads, "float64")
    assert_trajectories_equal(ours, theirs, "float64")


def test_adam_beta_powers_are_float32_like_tf(tf):
    init, grads = make_gradients(False, seed=5)
    with tf.Graph().as_default():
        var = tf.compat.v1.Variable(np.asarray(init), dtype=tf.float64)
        opt = tf.compat.v1.train.AdamOptimizer()
        update = opt.apply_gradients([(tf.constant(np.asarray(grads[0])), var)])
        b1, b2 = opt._get_beta_accumulators()
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for _ in range(5):
                sess.run(update)
            expected = sess.run([b1, b2])
    var_t = torch.tensor(init, requires_grad=True)
    ours = trainop.AdamOptimizer()
    for _ in range(5):
        ours.apply_gradients([(torch.tensor(grads[0]), var_t)])
    powers = [ours.param_groups[0]["non_slot"][k] for k in ("beta1_power", "beta2_power")]
    assert all(p.dtype == torch.float32 for p in powers)
    assert [float(p) for p in powers] == [float(np.float32(e)) for e in expected]


def test_adam_group_without_gradients_advances_its_beta_powers_as_tf(tf):
    """#39: TF advances its beta powers once per ``apply_gradients``, whatever got a gradient;
    trainop keeps them per param group, so a group whose variables got no gradient (or, on a
    ``ZeroRedundancyOptimizer`` rank, that has none) advances too: ``w1`` first gets a
    gradient at the third apply and moves as TF's does there (bias correction of step 3)."""
    init, grads = make_gradients(False, seed=7)
    with tf.Graph().as_default():
        v0 = tf.compat.v1.Variable(np.asarray(init), dtype=tf.float64)
        v1 = tf.compat.v1.Variable(np.asarray(init) * 0.5, dtype=tf.float64)
        opt = tf.compat.v1.train.AdamOptimizer(0.125)
        only_v0 = opt.apply_gradients([(tf.constant(np.asarray(grads[0])), v0)])
        both = opt.apply_gradients([(tf.constant(np.asarray(grads[1])), v0),
                                    (tf.constant(np.asarray(grads[2])), v1)])
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for op in (only_v0, only_v0, both, both):
                sess.run(op)
            expected = sess.run([v0, v1])
    w0 = torch.tensor(init, requires_grad=True)
    w1 = torch.tensor(np.asarray(init) * 0.5, requires_grad=True)
    ours = trainop.AdamOptimizer([{"params": [w0]}, {"params": [w1]}], lr=0.125)
    for k in range(4):
        w0.grad = torch.tensor(grads[0] if k < 2 else grads[1])
        w1.grad = None if k < 2 else torch.tensor(grads[2])
        ours.step()
    for got, want in zip((w0, w1), expected, strict=True):
        np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-10)
    assert [int(g["non_slot"]["step"]) for g in ours.param_groups] == [4, 4]
