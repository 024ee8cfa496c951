"""Pins of trainop's RETURNN engine updater (issue #40, round-5 audit), driven as RETURNN's torch
engine drives it (``set_current_train_step``, ``zero_grad``, the backward, ``step``): one
micro-step handed to the Updater once; a GradScaler's skipped step through the Updater's
counters and the scaler's own state (torch's ``GradScaler``: an Inf found by ``unscale_``
skips the step and ``update()`` multiplies the scale by ``backoff_factor``; RETURNN's torch
updater unscales before its clipping and calls ``update()`` valid or not); a disabled scaler
under semantics='tf'; optimizer files of another model or semantics. Numbers: SGD's ``w -= lr
g`` and torch's ``clip_grad_norm_`` (``g * min(1, c / (||g|| + 1e-6))``)."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from admitted import admitted

returnn_config = pytest.importorskip("returnn.config")
import trainop.returnn  # noqa: E402

LR = 0.5


def _engine(config=None, semantics="torch", model=None):
    torch.manual_seed(0)
    model = model if model is not None else torch.nn.Linear(2, 1)
    updater = trainop.returnn.SEMANTICS[semantics](
        config=returnn_config.Config({"backend": "torch", "optimizer": {"class": "sgd"},
                                      **(config or {})}), network=model, device="cpu")
    updater.create_optimizer()
    updater.set_learning_rate(LR)
    return updater


def _micro(updater, t, grads, scaler=None):
    """One micro-step as RETURNN's engine makes it (gradients times the scaler's scale)."""
    admitted(updater.set_current_train_step, global_train_step=t, epoch=1)
    updater.zero_grad()
    scale = 1.0 if scaler is None else float(scaler.get_scale())
    for p, g in zip(updater.network.parameters(), grads, strict=True):
        p.grad = torch.full_like(p, g) * scale
    admitted(updater.step, grad_scaler=scaler)


def _weights(updater):
    return [p.detach().clone() for p in updater.network.parameters()]


def _core(updater):
    return updater.updater.state_dict()["groups"][0]["step"]


@pytest.mark.parametrize("semantics", ["torch", "tf"])
def test_each_micro_step_is_handed_to_the_updater_once(semantics):
    updater = _engine(semantics=semantics)
    start = _weights(updater)
    for t in range(3):
        _micro(updater, t, [1.0, 2.0])
    admitted(updater.set_current_train_step, global_train_step=3, epoch=1)  # the next one
    for w, w0, g in zip(_weights(updater), start, [1.0, 2.0], strict=True):
        torch.testing.assert_close(w, w0 - 3 * LR * g, rtol=0, atol=1e-6)
    core = _core(updater)
    if semantics == "torch":
        assert (core["micro_steps"], core["update_steps"], int(core["global_step"])) == (3, 3, 3)


def _scaler(**kwargs):
    scaler = torch.amp.GradScaler("cpu", **kwargs)
    scaler.scale(torch.ones(()))  # torch makes its scale at the first scale()
    return scaler


def test_a_grad_scalers_skipped_step_through_the_updaters_counters():
    updater = _engine()
    scaler = _scaler(init_scale=2.0 ** 127, backoff_factor=0.5, growth_interval=1000)
    start = _weights(updater)
    _micro(updater, 0, [2.0, 2.0], scaler)  # 2 * 2**127 overflows float32: skipped
    assert all(torch.equal(w, w0) for w, w0 in zip(_weights(updater), start, strict=True))
    assert float(scaler.get_scale()) == 2.0 ** 126  # update() after the skip: backed off
    core = _core(updater)
    assert (core["update_steps"], int(core["global_step"])) == (1, 0)
    _micro(updater, 1, [2.0, 2.0], scaler)  # 2 * 2**126 is finite: applied, unscaled
    for w, w0 in zip(_weights(updater), start, strict=True):
        torch.testing.assert_close(w, w0 - LR * 2.0, rtol=0, atol=1e-6)
    core = _core(updater)
    assert (core["update_steps"], int(core["global_step"])) == (2, 1)
    assert float(scaler.get_scale()) == 2.0 ** 126


def test_the_clip_sees_the_unscaled_gradients():
    updater = _engine({"gradient_clip_global_norm": 1.0})
    scaler = _scaler(init_scale=2.0 ** 10)
    start = _weights(updater)
    _micro(updater, 0, [2.0, 2.0], scaler)
    norm = (3 * 2.0 ** 2) ** 0.5  # weight (1, 2) and bias (1,): three gradients of 2
    coef = min(1.0, 1.0 / (norm + 1e-6))
    for w, w0 in zip(_weights(updater), start, strict=True):
        torch.testing.assert_close(w, w0 - LR * 2.0 * coef, rtol=1e-6, atol=1e-7)


def test_a_disabled_scaler_under_tf_semantics_is_the_plain_update():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scaler = torch.amp.GradScaler("cpu", enabled=False)
    updater = _engine(semantics="tf")
    start = _weights(updater)
    _micro(updater, 0, [1.0, 1.0], scaler)
    for w, w0 in zip(_weights(updater), start, strict=True):
        torch.testing.assert_close(w, w0 - LR, rtol=0, atol=1e-6)


class _Enabled:
    def __init__(self, **_):
        pass

    def is_enabled(self):
        return True


def test_a_config_without_amp_makes_no_scaler_under_tf_semantics(monkeypatch):
    # RETURNN's engine makes a GradScaler only with torch_amp or grad_scaler set
    monkeypatch.setattr(torch.cuda.amp, "GradScaler", _Enabled)
    admitted(_engine, {}, "tf")


class _Other(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.b = torch.nn.Parameter(torch.zeros(1))
        self.a = torch.nn.Parameter(torch.zeros(1, 2))


def test_an_optimizer_file_of_another_model_or_semantics_is_refused(tmp_path):
    path = str(tmp_path / "m.opt.pt")
    _engine().save_optimizer(path)
    with pytest.raises(ValueError, match="another model's"):
        _engine(model=_Other()).load_optimizer(path)
    with pytest.raises(ValueError, match="semantics='tf'"):
        _engine(semantics="tf").load_optimizer(path)
    admitted(_engine().load_optimizer, path)


def test_a_scaler_that_is_not_a_grad_scaler_is_refused_and_changes_nothing():
    updater = _engine()
    start = _weights(updater)
    updater.set_current_train_step(global_train_step=0, epoch=1)
    for p in updater.network.parameters():
        p.grad = torch.ones_like(p)
    with pytest.raises(TypeError, match=r"GradScaler"):
        updater.step(grad_scaler=object())  # no is_enabled: taken as enabled, then refused
    assert all(torch.equal(w, w0) for w, w0 in zip(_weights(updater), start, strict=True))


def _dynamic(*, global_train_step, learning_rate, **_):
    if global_train_step < 5:
        return learning_rate / (1 + global_train_step)
    return math.nan if global_train_step == 5 else "fast"


def test_a_torch_dynamic_learning_rate_is_read_as_returnns_updater_reads_it():
    # RETURNN's torch updater is the oracle of the effective rate; NaN or text it would pass on
    # to torch.optim (which trains on a NaN rate silently) is refused naming the step
    from returnn.torch.updater import Updater as ReturnnUpdater

    config = {"optimizer": {"class": "sgd"}, "dynamic_learning_rate": _dynamic}
    ours = trainop.Updater({**config, "backend": "torch"}, torch.nn.Linear(2, 1),
                           initial_learning_rate=0.5)
    theirs = ReturnnUpdater(config=returnn_config.Config(dict(config)),
                            network=torch.nn.Linear(2, 1), device="cpu",
                            initial_learning_rate=0.5)
    theirs.create_optimizer()
    for t in (0, 3):
        ours.set_current_train_step(global_train_step=t, epoch=1)
        theirs.set_current_train_step(global_train_step=t, epoch=1)
        assert ours.get_effective_learning_rate() == theirs.get_effective_learning_rate() \
            == 0.5 / (1 + t)
    with pytest.raises(ValueError, match=r"finite learning rate >= 0, got nan at "
                                         r"global_train_step 5"):
        ours.set_current_train_step(global_train_step=5, epoch=1)
        ours.get_effective_learning_rate()
    with pytest.raises(TypeError, match=r"to return a number, got 'fast' \(str\) at "
                                        r"global_train_step 6"):
        ours.set_current_train_step(global_train_step=6, epoch=1)
        ours.get_effective_learning_rate()


@pytest.mark.parametrize(("updater_opts", "message"), [
    ({"weight": {"tags": ["a"], "global_norm_tag": 1}},
     r"updater_opts\['weight'\]\['global_norm_tag'\] to be a str, got 1"),
    ({"weight": 0.5},
     r"`updater_opts` entries of str -> dict, got 'weight' \(str\) -> 0.5 \(float\)"),
])
def test_updater_opts_of_the_wrong_type_are_refused_naming_the_entry(updater_opts, message):
    with pytest.raises(TypeError, match=message):
        trainop.Updater({"updater_opts": updater_opts}, torch.nn.Linear(2, 1))


def test_constraint_marks_with_a_torch_optim_class_are_refused():
    # RETURNN's PyTorch backend ignores RETURNN_constraint_L2: the class's weight_decay is it
    model = torch.nn.Linear(2, 1)
    model.weight.RETURNN_constraint_L2 = 0.01
    with pytest.raises(ValueError, match=r"no per-parameter `RETURNN_constraint_L2` with a "
                                         r"torch.optim class \(AdamW\)"):
        trainop.Updater({"backend": "torch", "optimizer": {"class": "adamw"},
                         "decouple_constraints": True}, model).get_optim_op()
