"""Errors of the RETURNN spellings (``backend`` torch vs tf), the Updater's epochs and the engine
updater (``trainop.returnn``), pinned; rejected calls change nothing. Also the engine updater's
``.opt.pt`` in process: a round trip, and RETURNN's own updater's file loading into it."""

from __future__ import annotations

import copy

import pytest
import torch
from error_table import Row, check, ids

import trainop

returnn_config = pytest.importorskip("returnn.config")
returnn_updater = pytest.importorskip("returnn.torch.updater")
import trainop.returnn  # noqa: E402 - after the skip: needs RETURNN


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.LayerNorm(2),
                               torch.nn.Linear(2, 1))


def U(config, model=None):  # noqa: N802 - reads as the constructor
    return lambda: trainop.Updater(config, _model() if model is None else model).get_optim_op()


def _epoch_fn(*, epoch, **_):
    return 1.0


def _network_fn(*, network, **_):
    return 1.0


def _engine(config, semantics="torch", model=None):
    return trainop.returnn.SEMANTICS[semantics](
        config=returnn_config.Config(dict(config)),
        network=_model() if model is None else model, device="cpu")


def _foreign_instance():
    return torch.optim.SGD([torch.nn.Parameter(torch.ones(3))], lr=0.1)


TORCH = {"backend": "torch", "optimizer": {"class": "sgd"}}

ERRORS: list[Row] = [
    Row("log-grad-norm-p-tf", U({"log_grad_norm": 1}), ValueError,
        r"Expected `log_grad_norm` to be one of \[False, True, 2, 'true', 'false', 'none'\] "
        r"with backend='tf' \(RETURNN's TF updater logs the 2-norm only; backend='torch' "
        r"takes any p > 0\), got 1"),
    Row("log-grad-norm-negative", U({**TORCH, "log_grad_norm": -1}), ValueError,
        r"Expected `log_grad_norm` to be a bool, a number p > 0 or one of \['true', 'false', "
        r"'none'\], got -1"),
    Row("log-grad-norm-word", U({**TORCH, "log_grad_norm": "yes"}), ValueError,
        r"Expected `log_grad_norm` to be a bool, a number p > 0 .* got 'yes'"),
    Row("accum-callable-tf", U({"accum_grad_multiple_step": lambda **_: 2}), ValueError,
        r"Expected `accum_grad_multiple_step` to be an int with backend='tf' \(RETURNN's TF "
        r"updater reads an int; a callable is RETURNN's torch engine's\)"),
    Row("accum-negative", U({**TORCH, "accum_grad_multiple_step": -2}), ValueError,
        r"Expected `accum_grad_multiple_step` to be an int >= 0, got -2"),
    Row("instance-tf", lambda: trainop.Updater(
        {"optimizer": torch.optim.SGD(_model().parameters(), lr=0.1)}, _model()), ValueError,
        r"Expected `optimizer` to be a dict with a 'class' key with backend='tf' \(RETURNN's "
        r"TF updater builds the optimizer from it\), got an instance of SGD; an optimizer "
        r"instance or a bare class is RETURNN's torch backend's"),
    Row("instance-foreign", U({"backend": "torch", "optimizer": _foreign_instance()}),
        ValueError, r"Expected the `optimizer` instance to hold trainable parameters of the "
                    r"model only, got 1 others \(shapes \[\(3,\)\]\)"),
    Row("dynamic-network-torch", U({**TORCH, "dynamic_learning_rate": _network_fn}),
        ValueError, r"Expected no `network` argument of `dynamic_learning_rate` with "
                    r"backend='torch' \(RETURNN's torch backend: 'network is TF specific'\)"),
    Row("dynamic-epoch-tf", U({"dynamic_learning_rate": _epoch_fn}), ValueError,
        r"Expected no `epoch` argument of `dynamic_learning_rate` with backend='tf' "
        r"\(RETURNN's TF updater: 'dynamic_learning_rate with epoch not supported'\)"),
    Row("dynamic-dict-torch", U({**TORCH, "dynamic_learning_rate": {"interval": 2,
                                                                    "decay": 0.5}}),
        ValueError, r"Expected `dynamic_learning_rate` to be a callable with backend='torch' "
                    r"\(RETURNN's torch backend implements no other kind\)"),
    Row("tf-only-option-trainop-class-torch", U({
        "backend": "torch", "optimizer": {"class": trainop.AdamOptimizer},
        "gradient_nan_inf_filter": True}), ValueError,
        r"PyTorch updater: option gradient_nan_inf_filter not supported currently .* use "
        r"backend='tf' \(a trainop optimizer\) for RETURNN's TF semantics"),
    Row("blacklist-in-dict-tf", U({"optimizer": {
        "class": trainop.AdamWOptimizer, "weight_decay": 0.01,
        "weight_decay_modules_blacklist": ["torch.nn.LayerNorm"]}}), ValueError,
        r"Expected no `weight_decay_modules_blacklist` with a trainop optimizer and "
        r"backend='tf' \(TF decays every variable\)"),
    Row("use-in-engine-semantics", lambda: trainop.returnn.use_in_engine("jax"), ValueError,
        r"Expected `semantics` to be one of \['tf', 'torch'\], got 'jax'"),
    Row("engine-optimizer-step", lambda: _engine({**TORCH, "torch_optimizer_step": {}}),
        ValueError, r"Expected no `torch_optimizer_step` with trainop's engine updater"),
    Row("engine-grad-scaler", lambda: _engine(TORCH).step(grad_scaler=object()), TypeError,
        r"^Expected `grad_scaler` to be a torch.amp.GradScaler \(with unscale_, step and "
        r"update\), got "),
    Row("engine-grad-scaler-tf", lambda: _engine(TORCH, semantics="tf").step(
        grad_scaler=torch.amp.GradScaler("cpu")), ValueError,
        r"^Expected no enabled grad scaler with trainop's engine updater under semantics='tf'"),
    Row("engine-device-lr", lambda: _engine(TORCH).use_device_lr_tensors("cpu"), ValueError,
        r"Expected no device learning-rate tensors with trainop's engine updater"),
]


@pytest.mark.parametrize("row", ERRORS, ids=ids(ERRORS))
def test_error(row: Row):
    check(row)


def _snapshot(u, model):
    return copy.deepcopy((u.state_dict(), model.state_dict(), u.epoch, u.epoch_continuous,
                          u._step_count))


def _equal(a, b):
    if isinstance(a, dict):
        assert set(a) == set(b)
        for k in a:
            _equal(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        for x, y in zip(a, b, strict=True):
            _equal(x, y)
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
    else:
        assert a == b


@pytest.mark.parametrize("backend", ["torch", "tf"])
def test_rejected_epoch_and_step_calls_change_nothing(backend):
    model = _model()
    u = trainop.Updater({"backend": backend, "optimizer": {
        "class": "sgd" if backend == "torch" else "adam"}, "accum_grad_multiple_step": 3}, model)
    for _ in range(4):
        u.step(model(torch.ones(3, 2)).pow(2).sum())
    before = _snapshot(u, model)
    for call, exc, match in [
        (lambda: u.set_current_train_step(global_train_step=-1, epoch=2), ValueError,
         r"Expected `global_train_step` to be an int >= 0, got -1"),
        (lambda: u.set_current_train_step(epoch=2.5), ValueError,
         r"Expected `epoch` to be an int >= 0 \(RETURNN counts from 1\), got 2\.5"),
        (lambda: u.set_current_train_step(epoch=2, epoch_continuous=-1.0), ValueError,
         r"epoch_continuous"),
        (lambda: u.step(update="yes"), TypeError,
         r"Expected `update` to be None, True or False, got 'yes'"),
    ]:
        with pytest.raises(exc, match=match):
            call()
        _equal(_snapshot(u, model), before)


def test_step_without_loss_needs_one_for_maximize_grad_norm():
    model = _model()
    u = trainop.Updater({"maximize_grad_norm": 0.1}, model)
    with pytest.raises(ValueError, match=r"Expected a `loss` with `maximize_grad_norm`"):
        u.step()


def _drive(updater, model, steps):
    for t in range(steps):
        if t % 2 == 0:
            updater.zero_grad()
        model(torch.full((3, 2), 0.1 * (t + 1))).pow(2).sum().backward()
        if t % 2 == 1:
            updater.step()
        updater.set_current_train_step(global_train_step=t + 1, epoch=1,
                                       epoch_continuous=(t + 1) / 10)


def test_engine_updater_loads_returnns_own_opt_pt_and_its_own(tmp_path):
    """RETURNN's own updater writes an ``.opt.pt``; the engine updater (torch semantics) loads
    it and continues bit-identically to RETURNN's own; its own file round-trips (without the
    gradients of a partial window, which RETURNN drops at the next epoch)."""
    config = {"optimizer": {"class": "adam"}, "accum_grad_multiple_step": 2}
    theirs_model, ours_model = _model(), _model()
    theirs = returnn_updater.Updater(config=returnn_config.Config(dict(config)),
                                     network=theirs_model, device="cpu")
    theirs.create_optimizer()
    theirs.set_current_train_step(global_train_step=0, epoch=1, epoch_continuous=0.0)
    _drive(theirs, theirs_model, 4)
    theirs.save_optimizer(str(tmp_path / "theirs.opt.pt"))
    ours = _engine(config, model=ours_model)
    ours.create_optimizer()
    ours_model.load_state_dict(theirs_model.state_dict())
    ours.load_optimizer(str(tmp_path / "theirs.opt.pt"))
    ours.set_current_train_step(global_train_step=4, epoch=1, epoch_continuous=0.4)
    _drive(theirs, theirs_model, 4)
    _drive(ours, ours_model, 4)
    _equal(theirs_model.state_dict(), ours_model.state_dict())
    _equal(theirs.optimizer.state_dict(), ours.optimizer.state_dict())
    ours.updater.step(ours_model(torch.ones(3, 2)).pow(2).sum())  # a partial window
    ours.save_optimizer(str(tmp_path / "ours.opt.pt"))
    saved = torch.load(tmp_path / "ours.opt.pt", weights_only=True)
    # torch semantics: the partial window is not saved (RETURNN drops it at the next epoch)
    assert saved["trainop"]["groups"][0]["step"]["accumulator"]["micro_steps"] == 0
    assert saved["param_names"] == ["0.weight", "0.bias", "1.weight", "1.bias", "2.weight",
                                    "2.bias"]
    again = _engine(config, model=ours_model)
    again.create_optimizer()
    again.load_optimizer(str(tmp_path / "ours.opt.pt"))
    _equal(again.updater.state_dict(), saved["trainop"])
    tf = _engine(config, "tf")
    tf.create_optimizer()
    with pytest.raises(ValueError, match=r"to be written with semantics='tf', got 'torch'"):
        tf.load_optimizer(str(tmp_path / "ours.opt.pt"))
