"""RETURNN's torch engine with ``torch_amp`` and its GradScaler, with trainop's updater
(issue #33): what RETURNN's own updater accepts, trainop's accepts with the same numbers; an
enabled scaler, which trainop's engine updater cannot honour, is refused when the engine builds
the updater, before any micro-step, with advice that fits the config.

On a machine without CUDA, RETURNN's default GradScaler (``torch.cuda.amp.GradScaler()``) is
disabled: the engine runs with ``torch_amp = "bfloat16"`` (autocast on the CPU) and that
scaler. An enabled one is simulated by a stand-in whose ``is_enabled()`` is True."""

from __future__ import annotations

import warnings

import pytest
import torch

returnn_config = pytest.importorskip("returnn.config")
import returnn_engine as engine  # noqa: E402 - after the skip: needs RETURNN
from test_returnn_engine import _same_tree  # noqa: E402

import trainop.returnn  # noqa: E402


def _engine(config):
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    return trainop.returnn.SEMANTICS["torch"](
        config=returnn_config.Config({"backend": "torch", "optimizer": {"class": "sgd"},
                                      **config}), network=model, device="cpu")


class _Enabled:
    def __init__(self, **_):
        pass

    def is_enabled(self):
        return True


@pytest.mark.parametrize("config, advice", [
    ({"torch_amp": "bfloat16"}, r"bfloat16 has float32's exponent range and needs no loss "
                                r"scaling: set `grad_scaler = None` in the config"),
    ({"torch_amp": {"dtype": "float16"}}, r"float16 needs loss scaling, which trainop's engine "
                                          r"updater cannot take from the engine"),
    ({"grad_scaler": {"init_scale": 8.0}}, r"set `grad_scaler = None` in the config$"),
])
def test_an_enabled_scaler_is_refused_when_the_updater_is_built(monkeypatch, config, advice):
    monkeypatch.setattr(torch.cuda.amp, "GradScaler", _Enabled)
    with pytest.raises(ValueError, match=r"^Expected no enabled grad scaler with trainop's "
                                         r"engine updater \(it accumulates the micro-steps' "
                                         r"gradients itself and cannot unscale them\), got "
                                         r"torch_amp=.*" + advice):
        _engine(config)


@pytest.mark.parametrize("config", [
    {"torch_amp": "bfloat16", "grad_scaler": None},
    {"torch_amp": {"dtype": "bfloat16", "grad_scaler": None}},
    {"torch_amp": "bfloat16", "grad_scaler": {"enabled": False}},
    {},
])
def test_no_scaler_or_a_disabled_one_is_accepted(monkeypatch, config):
    monkeypatch.setattr(torch.cuda.amp, "GradScaler", _Enabled)
    if "grad_scaler" in config and config["grad_scaler"] is not None:
        monkeypatch.undo()  # a real GradScaler(enabled=False)
    _engine(config)


def test_a_disabled_scaler_steps_as_none():
    updater = _engine({"torch_amp": "bfloat16"})  # no CUDA: RETURNN's scaler is disabled
    updater.create_optimizer()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "CUDA is not available. Disabling"; deprecation
        scaler = torch.cuda.amp.GradScaler()  # as RETURNN's engine makes it
    assert not scaler.is_enabled()
    updater.set_current_train_step(global_train_step=0, epoch=1)
    updater.zero_grad()
    updater.network.weight.grad = torch.ones_like(updater.network.weight)
    before = updater.network.weight.detach().clone()
    updater.step(grad_scaler=scaler)
    assert not torch.equal(before, updater.network.weight.detach())
    with pytest.raises(ValueError, match=r"^Expected no enabled grad scaler"):
        updater.step(grad_scaler=_Enabled())


@pytest.mark.skipif(torch.cuda.is_available(), reason="the default scaler is enabled on CUDA")
def test_bfloat16_with_returnns_default_scaler_trains_as_returnns_own_updater(tmp_path):
    amp = 'torch_amp = "bfloat16"\n'
    own = engine.start(tmp_path / "own", extra=amp, epochs=1)
    ours = engine.start(tmp_path / "ours", use=engine.USE_TORCH, extra=amp, epochs=1)
    out = engine.finish(own)
    engine.finish(ours)
    assert "Using autocast" in out and "Using GradScaler" in out  # RETURNN made both
    own_model, own_opt = engine.epoch_files(tmp_path / "own", 1)
    model, opt = engine.epoch_files(tmp_path / "ours", 1)
    assert opt["trainop_semantics"] == "torch" and "trainop" not in own_opt
    _same_tree(own_model["model"], model["model"], "parameters")
    _same_tree(own_opt["optimizer"], opt["optimizer"], "optimizer")
