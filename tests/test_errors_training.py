"""Every validation branch of optimize_loss, the TrainOp and the regularizers, in one table (as
``test_errors.py``), and the rule that a rejected call changes nothing."""

from __future__ import annotations

import pytest
import torch
from error_table import Row, check, ids
from torch import nn

import trainop

W = torch.zeros(2, requires_grad=True)


def build(**kwargs):
    args = {"loss": lambda: W.sum(), "optimizer": "SGD", "optimizer_params": {},
            "learning_rate_decay_fn": 0.1, "var_list": [W]}
    args.update(kwargs)
    return lambda: trainop.optimize_loss(**args)


def called(op_kwargs, *args, **kwargs):
    def call():
        op = trainop.optimize_loss(**{"loss": lambda *a: W.sum(), "optimizer": "SGD",
                                      "optimizer_params": {}, "learning_rate_decay_fn": 0.1,
                                      "var_list": [W], **op_kwargs})
        op(*args, **kwargs)
    return call


def load(state):
    def call():
        op = trainop.optimize_loss(lambda: W.sum(), "SGD", {}, 0.1, var_list=[W])
        op.load_state_dict(state)
    return call


def good_state():
    return trainop.optimize_loss(lambda: W.sum(), "SGD", {}, 0.1, var_list=[W]).state_dict()


def with_step(**changes):
    state = good_state()
    state["step"] = {**state["step"], **changes}
    return state


ERRORS = [
    Row("unknown optimizer name", build(optimizer="Adamm"), ValueError,
        r"Unknown optimizer name 'Adamm'; valid names"),
    Row("optimizer not a class or name", build(optimizer=torch.optim.Adam), TypeError,
        r"Expected `optimizer` to be an optimizer name \(e\.g\. 'Adam', .*\) or a "
        r"trainop\.Optimizer subclass, got <class 'torch\.optim\.adam\.Adam'>"),
    Row("optimizer_params not a dict", build(optimizer_params=[("beta1", 0.9)]), TypeError,
        r"Expected `optimizer_params` to be a dict, got \[\('beta1', 0\.9\)\] \(list\)$"),
    Row("learning_rate in optimizer_params",
        build(optimizer_params={"learning_rate": 0.1}), ValueError,
        r"Expected no `learning_rate` in `optimizer_params` \(optimize_loss sets it\), got "
        r"learning_rate=0\.1$"),
    Row("unknown optimizer argument", build(optimizer="Adam", optimizer_params={"eps": 1e-8}),
        ValueError, r"Unknown argument 'eps' in `optimizer_params` for AdamOptimizer; valid: "
                    r"\['beta1', 'beta2', 'epsilon'"),
    Row("bad optimizer value", build(optimizer="Adam", optimizer_params={"beta1": 1.5}),
        ValueError, r"Expected `beta1` in \[0, 1\), got 1\.5$"),
    Row("clip with larc", build(clip_gradients=1.0, larc_params={"larc_eta": 1e-3}),
        ValueError, r"Expected clip_gradients and larc_params not to be used together, got "
                    r"both \(OpenSeq2Seq raises AttributeError\)$"),
    Row("unknown summary", build(summaries=["learning_rate", "grads"]), ValueError,
        r"Expected `summaries\[1\]` to be one of \['learning_rate', 'gradients', "
        r"'gradient_norm', 'global_gradient_norm', 'variables', 'variable_norm', "
        r"'larc_summaries', 'loss_scale'\], got 'grads'$"),
    Row("summaries a string", build(summaries="learning_rate"), TypeError,
        r"Expected `summaries` to be a list of names from \[.*\] or None, got "
        r"'learning_rate' \(str\)$"),
    Row("iter_size zero", build(iter_size=0), ValueError,
        r"Expected `iter_size` to be an int >= 1, got 0$"),
    Row("iter_size float", build(iter_size=2.0), ValueError,
        r"Expected `iter_size` to be an int >= 1, got 2\.0$"),
    Row("on_horovod not bool", build(on_horovod=1), TypeError,
        r"Expected `on_horovod` to be a bool, got 1 \(int\)$"),
    Row("skip_update_ph other", build(skip_update_ph=False), ValueError,
        r"Expected `skip_update_ph` to be None or True, got False$"),
    Row("summary_frequency zero", build(summary_frequency=0), ValueError,
        r"Expected `summary_frequency` to be an int >= 1, got 0$"),
    Row("loss not callable", build(loss=W.sum()), TypeError,
        r"Expected `loss` to be a callable returning the loss, got tensor"),
    Row("dtype unknown", build(dtype="float16"), ValueError,
        r"Expected `dtype` to be one of torch\.float32, torch\.float16, torch\.bfloat16, "
        r"'mixed', got 'float16'$"),
    Row("dtype mismatch", build(dtype=torch.float16), ValueError,
        r"Expected every variable to have dtype torch\.float16 \(dtype=torch\.float16\), got "
        r"torch\.float32 for variable 0; use dtype='mixed'"),
    Row("no variables", build(var_list=None), ValueError,
        r"Expected `var_list` or `model` \(whose trainable parameters are optimized\), got "
        r"neither$"),
    Row("var not requiring grad", build(var_list=[torch.zeros(2)]), TypeError,
        r"Expected var_list\[0\] to be a tensor that requires grad, got tensor"),
    Row("model not a module", build(var_list=None, model="net"), TypeError,
        r"Expected `model` to be a torch\.nn\.Module or None, got 'net' \(str\)$"),
    Row("negative loss scale", build(loss_scaling=-1.0), ValueError,
        r"Expected `loss_scaling` in \(0, inf\), got -1\.0$"),
    Row("unknown loss scaler", build(loss_scaling="Dynamic"), ValueError,
        r"Expected `loss_scaling` to be a number > 0, 'Backoff' or 'LogMax' "
        r"\(case-insensitive\), got 'Dynamic'$"),
    Row("loss_scaling_params unknown key",
        build(loss_scaling="Backoff", loss_scaling_params={"window": 2}), ValueError,
        r"^Invalid `loss_scaling_params` for 'Backoff': .*unknown keys \['window'\]$"),
    Row("loss_scaling_params wrong type",
        build(loss_scaling="Backoff", loss_scaling_params={"step_window": 2.0}), TypeError,
        r"^Invalid `loss_scaling_params` for 'Backoff': Expected `step_window` to be an "
        r"integer, got 2\.0 \(float\)$"),
    Row("AdamW without weight_decay", build(optimizer="AdamW"), ValueError,
        r"Expected `optimizer_params` to contain 'weight_decay' for 'AdamW' \(multiplied by "
        r"the learning rate, as OpenSeq2Seq\), got keys \[\]$"),
    Row("loss_scaling_params with a static scale",
        build(loss_scaling=128.0, loss_scaling_params={"scale_min": 1.0}), ValueError,
        r"Expected `loss_scaling_params` only with an automatic loss scaling \('Backoff', "
        r"'LogMax'\), got loss_scaling=128\.0$"),
    Row("learning rate not callable", build(learning_rate_decay_fn="0.1"), TypeError,
        r"Expected `learning_rate_decay_fn` to be a callable of the global step \(e\.g\. a "
        r"trainop\.schedules policy\) or a number, got '0\.1' \(str\)$"),
    Row("negative learning rate", build(learning_rate_decay_fn=-0.1), ValueError,
        r"Expected `learning_rate_decay_fn` in \[0, inf\), got -0\.1$"),
    Row("larc params unknown key", build(larc_params={"larc_eta": 1e-3, "eta": 1.0}),
        ValueError, r"eta"),
    Row("summary writer of a wrong type", build(summary_writer=3), TypeError,
        r"Expected `summary_writer` to be a SummaryWriter, a log directory or None, got 3 "
        r"\(int\)$"),
    Row("skip_update not bool", called({}, skip_update="yes"), TypeError,
        r"Expected `skip_update` to be a bool, got 'yes' \(str\)$"),
    Row("loss not a scalar", called({"loss": lambda: W * 2}), TypeError,
        r"Expected `loss\(\.\.\.\)` to return a 0-dim floating-point tensor, got tensor"),
    Row("state_dict keys", load({"optimizer": {}}), ValueError,
        r"Expected a TrainOp state_dict with keys \['optimizer', 'step'\], got"),
    Row("state_dict negative global_step",
        load(with_step(global_step=torch.tensor(-1))), ValueError,
        r"Expected `global_step` to be a 0-dim int64 tensor >= 0, got tensor\(-1\)"),
    Row("state_dict float micro_steps", load(with_step(micro_steps=1.5)), ValueError,
        r"Expected `micro_steps` to be an int >= 0, got 1\.5 \(float\)$"),
    Row("regularizer scale negative", lambda: trainop.l2_regularizer(-1.0), ValueError,
        r"Expected `scale` in \[0, inf\), got -1\.0$"),
    Row("apply_regularization not callable",
        lambda: trainop.apply_regularization(nn.Linear(2, 2), 0.1), TypeError,
        r"Expected `regularizer` to be callable, got 0\.1 \(float\)$"),
    Row("apply_regularization params", lambda: trainop.apply_regularization(3, lambda w: w),
        TypeError, r"Expected `params` to be a torch\.nn\.Module, a tensor or an iterable of "
                   r"tensors, got "
                   r"3 \(int\)$"),
    Row("get_regularization_loss scope", lambda: trainop.get_regularization_loss(scope=3),
        TypeError, r"Expected `scope` to be a str or None, got 3 \(int\)$"),
]


@pytest.mark.parametrize("row", ERRORS, ids=ids(ERRORS))
def test_error(row: Row):
    check(row)


def test_optimizer_params_dict_is_never_mutated():
    params = {"weight_decay": 0.01}
    trainop.optimize_loss(lambda: W.sum(), "AdamW", params, 0.1, var_list=[W])
    assert params == {"weight_decay": 0.01}


def test_rejected_micro_step_and_load_change_nothing():
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    op = trainop.optimize_loss(lambda k: (w * k).sum(), "Adam", {}, 0.1, var_list=[w],
                               iter_size=2)
    op(1.0)
    op(2.0)  # accumulates
    before = (w.detach().clone(), op.state_dict())
    with pytest.raises(TypeError):
        op(1.0, skip_update="no")
    bad = op.state_dict()
    bad["optimizer"]["state"][0]["m"] = torch.full((2,), 5.0)  # would change if loaded first
    bad["step"]["accumulator"]["accumulators"][0] = torch.zeros(3)
    with pytest.raises(ValueError, match="Expected accumulator 0 to be a torch.float32 tensor "
                                         "of shape \\(2,\\)"):
        op.load_state_dict(bad)
    after = (w.detach().clone(), op.state_dict())
    assert torch.equal(before[0], after[0])
    assert torch.equal(before[1]["optimizer"]["state"][0]["m"],
                       after[1]["optimizer"]["state"][0]["m"])
    assert op.micro_step == 2
    a, b = before[1]["step"]["accumulator"], after[1]["step"]["accumulator"]
    assert a["micro_steps"] == b["micro_steps"] == 1
    assert torch.equal(a["accumulators"][0], b["accumulators"][0])
