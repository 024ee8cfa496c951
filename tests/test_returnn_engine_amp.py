"""RETURNN's torch engine with ``torch_amp`` and its GradScaler, with trainop's updater
(issue #33): what RETURNN's own updater accepts, trainop's accepts with the same numbers
(semantics="torch": a disabled scaler, and an enabled one in RETURNN's real engine, bit for bit
with RETURNN's updater); under semantics="tf", which has no loss scaling to reproduce, an
enabled scaler is refused when the engine builds the updater, before any micro-step, with
advice that fits the config.

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


def _engine(config, semantics="torch"):
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    return trainop.returnn.SEMANTICS[semantics](
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
    ({"torch_amp": {"dtype": "float16"}}, r"float16 needs loss scaling: use "
                                          r"`use_in_engine\(semantics='torch'\)`"),
    ({"grad_scaler": {"init_scale": 8.0}}, r"set `grad_scaler = None` in the config, or use "
                                           r"semantics='torch'$"),
])
def test_an_enabled_scaler_is_refused_under_tf_semantics_when_built(monkeypatch, config, advice):
    monkeypatch.setattr(torch.cuda.amp, "GradScaler", _Enabled)
    with pytest.raises(ValueError, match=r"^Expected no enabled grad scaler with trainop's "
                                         r"engine updater under semantics='tf' \(RETURNN's TF "
                                         r"updater has no loss scaling\), got "
                                         r"torch_amp=.*" + advice):
        _engine(config, semantics="tf")
    _engine(config)  # semantics="torch" honours it


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
    with pytest.raises(TypeError, match=r"^Expected `grad_scaler` to be a torch.amp.GradScaler"):
        updater.step(grad_scaler=_Enabled())  # enabled, but not a scaler: nothing changes
    tf_updater = _engine({}, semantics="tf")
    tf_updater.create_optimizer()
    with pytest.raises(ValueError, match=r"^Expected no enabled grad scaler .* semantics='tf'"):
        tf_updater.step(grad_scaler=torch.amp.GradScaler("cpu"))


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


#: RETURNN's engine makes ``torch.cuda.amp.GradScaler(**grad_scaler)``; on this CPU machine the
#: config swaps in an enabled CPU GradScaler whose first scale overflows the scaled gradients
#: (2**127: skipped updates, backoff), then grows every 2 clean updates: every branch of the
#: scaler (unscale, skip, update, growth) runs, in RETURNN's engine with either updater.
ENABLED_CPU_SCALER = """
import functools, torch
torch.cuda.amp.GradScaler = functools.partial(torch.amp.GradScaler, "cpu")
torch_amp = "bfloat16"
grad_scaler = {"init_scale": 2.0 ** 127, "backoff_factor": 2.0 ** -60, "growth_interval": 2}
stop_on_nonfinite_train_score = False  # the logged grad norm of an overflowing step is inf
"""


def test_an_enabled_scaler_trains_as_returnns_own_updater(tmp_path):
    own = engine.start(tmp_path / "own", extra=ENABLED_CPU_SCALER, epochs=1)
    ours = engine.start(tmp_path / "ours", use=engine.USE_TORCH, extra=ENABLED_CPU_SCALER,
                        epochs=1)
    out = engine.finish(own)
    engine.finish(ours)
    assert "Using GradScaler with options: {'init_scale'" in out
    own_model, own_opt = engine.epoch_files(tmp_path / "own", 1)
    model, opt = engine.epoch_files(tmp_path / "ours", 1)
    assert opt["trainop_semantics"] == "torch"
    _same_tree(own_model["model"], model["model"], "parameters")
    _same_tree(own_opt["optimizer"], opt["optimizer"], "optimizer")
    # The scaler really skipped and then updated: RETURNN's Adam took fewer steps than the
    # window ends (9 micro-steps, windows of 2: 4 updates), but at least one.
    steps = {int(v["step"]) for v in own_opt["optimizer"]["state"].values()}
    assert steps and all(0 < s < 4 for s in steps), steps
