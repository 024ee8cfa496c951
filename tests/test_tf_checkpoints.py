"""TF1 checkpoints: continuation parity with TensorFlow, and ``read_tf`` against TF's reader.

A small model (dense, conv 2-D and 1-D, a sparse-updated embedding, an LSTM cell) trains
``BEFORE`` steps in TF1 graph mode with each TF1 optimizer and is saved with ``Saver``; the
checkpoint is loaded into the torch twin and a trainop optimizer; both continue ``AFTER``
steps with the same gradients. Parameters and every slot must be bit-identical for the
optimizers trainop matches bit for bit (Adam, Momentum with and without Nesterov, RMSProp
plain and centered, Ftrl) and within float32 rounding for the others. Then ``save_tf`` writes
trainop's state, TF restores it into the same graph and both go on ``AGAIN`` steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import tf_checkpoint_run as run
import torch

import trainop
import trainop.checkpoints as ckpt

BEFORE, AFTER, AGAIN = 4, 3, 2


@dataclass(frozen=True)
class Case:
    id: str
    tf_name: str
    args: tuple = ()
    kwargs: Any = None
    exact: bool = True
    # the sparse (embedding) updates are compared within float32 rounding: trainop's sparse
    # Adam and RMSProp differ from TF's by a few ulps on some rows (measured over 20 steps in
    # docs/checkpoints.md; the dense updates of the same optimizers are bit-identical)
    exact_sparse: bool = True
    global_step_arg: bool = False

    def make_tf(self, tf, global_step):
        args = (self.args[0], global_step, *self.args[1:]) if self.global_step_arg else self.args
        return getattr(tf.compat.v1.train, self.tf_name)(*args, **(self.kwargs or {}))

    def make_trainop(self, params):
        args = (self.args[0], None, *self.args[1:]) if self.global_step_arg else self.args
        return getattr(trainop, self.tf_name)(*args, params=params, **(self.kwargs or {}))


CASES = [
    Case("adam", "AdamOptimizer", (0.125, 0.875, 0.96875), exact_sparse=False),
    Case("adam_renamed", "AdamOptimizer", (0.125, 0.875, 0.96875), {"name": "enc_adam"},
         exact_sparse=False),  # slots enc_adam, enc_adam_1
    Case("momentum", "MomentumOptimizer", (0.25, 0.875)),
    Case("nesterov", "MomentumOptimizer", (0.25, 0.875), {"use_nesterov": True}),
    Case("rmsprop", "RMSPropOptimizer", (0.125,), {"decay": 0.875, "momentum": 0.5},
         exact_sparse=False),
    Case("rmsprop_centered", "RMSPropOptimizer", (0.125,),
         {"decay": 0.875, "momentum": 0.5, "centered": True}, exact_sparse=False),
    Case("ftrl", "FtrlOptimizer", (0.5,), {"l1_regularization_strength": 0.0625,
                                           "l2_regularization_strength": 0.125}),
    Case("gd", "GradientDescentOptimizer", (0.5,), exact=False),
    Case("adagrad", "AdagradOptimizer", (0.5,), exact=False),
    Case("adadelta", "AdadeltaOptimizer", (0.5, 0.875), exact=False),
    Case("proximal_adagrad", "ProximalAdagradOptimizer", (0.5,),
         {"l1_regularization_strength": 0.0625}, exact=False),
    Case("adagrad_da", "AdagradDAOptimizer", (0.5,), exact=False, global_step_arg=True),
]


def _compare(actual: dict, expected: dict, case: Case, what: str) -> None:
    assert sorted(actual) == sorted(expected), what
    for key, want in expected.items():
        got = actual[key]
        sparse = key.startswith("embedding.")
        if case.exact and (case.exact_sparse or not sparse):
            assert torch.equal(got, want), f"{what}: {key} differs by " \
                f"{float((got - want).abs().max())}"
        else:  # float32 rounding: a few ulps of the values' magnitude
            torch.testing.assert_close(got, want, rtol=4e-6, atol=4e-6 * float(
                want.abs().max()) + 1e-30, msg=f"{what}: {key}")


def _assert_read_matches_tf(tf, path: str) -> None:
    ours = ckpt.read_tf(path)
    reader = tf.train.load_checkpoint(path)
    theirs = reader.get_variable_to_dtype_map()
    assert sorted(ours) == sorted(theirs)
    for name, dtype in theirs.items():
        value = np.asarray(reader.get_tensor(name))
        assert str(ours[name].dtype) == f"torch.{dtype.name}", name
        assert tuple(ours[name].shape) == value.shape, name
        assert np.array_equal(ours[name].numpy(), value), name


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_continuation_parity_with_tf(tf, tmp_path, case):
    init = run.initial_values()
    grads = run.gradients(BEFORE + AFTER + AGAIN, seed=1)
    path, final = run.train_tf(tf, lambda gs: case.make_tf(tf, gs), init, grads[:BEFORE],
                               grads[BEFORE:BEFORE + AFTER], str(tmp_path / "tf" / "model"))
    _assert_read_matches_tf(tf, path)

    model = run.Net()
    params = [p for n, p in model.named_parameters() if run.NAMES[n] is not None]
    optimizer = case.make_trainop(params)
    report = ckpt.load_tf(path, model, optimizer, names=run.NAMES)
    assert report.global_step == BEFORE
    assert "lstm.bias_hh_l0" in report.left_at_initial
    assert report.skipped == []
    for grads_step in grads[BEFORE:BEFORE + AFTER]:
        optimizer.apply_gradients(run.torch_gradients(model, grads_step))
    _compare(run.actual_torch(model, optimizer), run.expected_torch(final, model, optimizer),
             case, f"{case.id} after {AFTER} steps continued in trainop")
    for name in optimizer._non_slot_names:  # the beta powers, as TF's
        assert float(optimizer.param_groups[0]["non_slot"][name]) == float(final[name])
    assert int(optimizer.param_groups[0]["non_slot"]["step"]) == BEFORE + AFTER

    # back to TF: save, restore into the same graph, and both go on
    ours = str(tmp_path / "ours" / "model")
    ckpt.save_tf(ours, model, optimizer, names=run.NAMES)
    _assert_read_matches_tf(tf, ours)
    _, final_tf = run.train_tf(tf, lambda gs: case.make_tf(tf, gs), init, [],
                               grads[BEFORE + AFTER:], None, restore=ours)
    for grads_step in grads[BEFORE + AFTER:]:
        optimizer.apply_gradients(run.torch_gradients(model, grads_step))
    _compare(run.actual_torch(model, optimizer), run.expected_torch(final_tf, model, optimizer),
             case, f"{case.id} after save_tf, TF restore and {AGAIN} more steps")
    assert int(final_tf["global_step"]) == BEFORE + AFTER + AGAIN
