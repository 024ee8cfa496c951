"""RETURNN engine updater and Updater inputs from #34's attack round: a FIFO ``.opt.pt``,
another model's or NaN moments, a ``dynamic_learning_rate`` returning NaN/inf/negative, a
dict form that grows without bound, a string ``accum_grad_multiple_step`` under TF semantics.
Each a clear error, fast, nothing changed."""

from __future__ import annotations

import os
import time

import pytest
import torch

import trainop

returnn_config = pytest.importorskip("returnn.config")
pytest.importorskip("returnn.torch.updater")
from returnn_files import returnn_opt_file  # noqa: E402

import trainop.returnn  # noqa: E402 - after the skip: needs RETURNN

ADAM = {"optimizer": {"class": "adam"}}


def _model(width=2):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(2, width), torch.nn.Linear(width, 1))


def _engine(config, semantics="torch", model=None):
    updater = trainop.returnn.SEMANTICS[semantics](
        config=returnn_config.Config(dict(config)), network=model or _model(), device="cpu")
    updater.create_optimizer()
    return updater


def _returnn_file(tmp_path, model, *, poison=None):
    path = returnn_opt_file(tmp_path / "theirs.opt.pt", ADAM, model, torch.ones(3, 2))
    if poison is not None:
        saved = torch.load(path, weights_only=False)
        poison(saved)
        torch.save(saved, path)
    return path


def _state(updater):
    return {k: v.clone() for s in updater.optimizer.state.values() for k, v in s.items()}


def test_a_fifo_opt_pt_is_refused_without_waiting(tmp_path):
    path = str(tmp_path / "x.opt.pt")
    os.mkfifo(path)
    ours = _engine(ADAM)
    start = time.monotonic()
    with pytest.raises(ValueError, match=r"The optimizer file '.*x.opt.pt' is not a regular "
                                         r"file \(a FIFO\); an optimizer file is read from a "
                                         r"regular file"):
        ours.load_optimizer(path)
    assert time.monotonic() - start < 30  # a backstop only (#39)
    with pytest.raises(FileNotFoundError, match=r"No optimizer file '.*y.opt.pt'"):
        ours.load_optimizer(str(tmp_path / "y.opt.pt"))


def test_another_models_returnn_file_is_refused(tmp_path):
    path = _returnn_file(tmp_path, _model(width=3))
    ours = _engine(ADAM)
    with pytest.raises(ValueError, match=r"The optimizer file '.*theirs.opt.pt': Expected the "
                                         r"state 'exp_avg' of parameter 0 in the Adam checkpoint "
                                         r"to have the parameter's shape \(2, 2\), got \(3, 2\): "
                                         r"another model's"):
        ours.load_optimizer(path)
    assert ours.optimizer.state_dict()["state"] == {}


def test_another_models_names_are_refused_for_trainops_own_file(tmp_path):
    other = torch.nn.Sequential(torch.nn.Linear(2, 2))
    other.add_module("extra", torch.nn.Linear(2, 1))
    theirs = _engine(ADAM, model=other)
    path = str(tmp_path / "ours.opt.pt")
    theirs.save_optimizer(path)
    ours = _engine(ADAM)
    before = ours.updater.state_dict()
    with pytest.raises(ValueError, match=r"to hold the parameters \['0.weight', '0.bias', "
                                         r"'1.weight', '1.bias'\] \(list\) in this order, got "
                                         r"\['0.weight', '0.bias', 'extra.weight', "
                                         r"'extra.bias'\] \(list\): another model's"):
        ours.load_optimizer(path)
    assert str(ours.updater.state_dict()) == str(before)


def test_nan_moments_are_refused(tmp_path):
    model = _model()

    def poison(saved):
        next(iter(saved["optimizer"]["state"].values()))["exp_avg_sq"][0] = float("nan")

    path = _returnn_file(tmp_path, model, poison=poison)
    ours = _engine(ADAM, model=model)
    with pytest.raises(ValueError, match=r"The optimizer file '.*theirs.opt.pt': Expected the "
                                         r"state 'exp_avg_sq' of parameter 0 in the Adam "
                                         r"checkpoint to be finite, got NaN or inf"):
        ours.load_optimizer(path)
    assert _state(ours) == {}


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -0.5])
def test_a_torch_dynamic_learning_rate_must_be_finite_and_non_negative(value):
    model = _model()
    updater = trainop.Updater({"backend": "torch", "optimizer": {"class": "sgd"},
                               "learning_rate": 0.1,
                               "dynamic_learning_rate": lambda **_: value}, model)
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(ValueError, match=rf"Expected `dynamic_learning_rate` to return a finite "
                                         rf"learning rate >= 0, got {value} at "
                                         rf"global_train_step 0, epoch 1"):
        updater.get_optim_op()
        model(torch.ones(3, 2)).sum().backward()
        updater.step()
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_a_torch_dynamic_learning_rate_must_return_a_number():
    updater = trainop.Updater({"backend": "torch", "optimizer": {"class": "sgd"},
                               "dynamic_learning_rate": lambda **_: "fast"}, _model())
    with pytest.raises(TypeError, match=r"Expected `dynamic_learning_rate` to return a number, "
                                        r"got 'fast' \(str\)"):
        updater.get_optim_op()
        updater.get_effective_learning_rate()


@pytest.mark.parametrize("spec, error, pattern", [
    ({"interval": 1000, "decay": 2.0}, ValueError,
     r"Expected `dynamic_learning_rate\['decay'\]` in \(0, 1\], got 2.0"),
    ({"interval": 10, "decay": float("nan")}, ValueError,
     r"Expected `dynamic_learning_rate\['decay'\]` in \(0, 1\], got nan"),
    ({"interval": 0, "decay": 0.5}, ValueError,
     r"Expected `dynamic_learning_rate\['interval'\]` in \(0, inf\), got 0"),
    ({"interval": 2.5, "decay": 0.5}, TypeError,
     r"Expected `dynamic_learning_rate\['interval'\]` to be an integer, got 2.5"),
])
def test_the_dict_form_is_bounded(spec, error, pattern):
    with pytest.raises(error, match=pattern):
        trainop.Updater({"learning_rate": 0.1, "dynamic_learning_rate": spec}, _model())


def test_a_string_accum_grad_multiple_step_under_tf_semantics():
    with pytest.raises(ValueError, match=r"Expected `accum_grad_multiple_step` to be an int >= 0, "
                                         r"got .2. \(str\)"):
        _engine({"accum_grad_multiple_step": "2"}, "tf")


def _poisoned_own_file(tmp_path, change):
    model = _model()
    ours = _engine(ADAM, model=model)
    ours.set_current_train_step(global_train_step=0, epoch=1, epoch_continuous=0.0)
    model(torch.ones(3, 2)).sum().backward()
    ours.step()
    path = str(tmp_path / "ours.opt.pt")
    ours.save_optimizer(path)
    saved = torch.load(path, weights_only=False)
    change(saved["trainop"]["groups"][0]["optimizer"]["state"][0])
    torch.save(saved, path)
    return path


@pytest.mark.parametrize("change, pattern", [
    (lambda s: s["exp_avg_sq"].fill_(float("nan")), r"'exp_avg_sq' of parameter 0 in the Adam "
                                                    r"checkpoint to be finite"),
    (lambda s: s.update(exp_avg=torch.zeros(3, 3)), r"'exp_avg' of parameter 0 in the Adam "
                                                    r"checkpoint to have the parameter's shape "
                                                    r"\(2, 2\), got \(3, 3\)"),
])
def test_trainops_own_file_with_bad_torch_moments(tmp_path, change, pattern):
    """The Updater's torch.optim groups (backend torch) are checked as RETURNN's file is."""
    path = _poisoned_own_file(tmp_path, change)
    fresh = _engine(ADAM)
    with pytest.raises(ValueError, match=pattern):
        fresh.load_optimizer(path)
    assert _state(fresh) == {}
