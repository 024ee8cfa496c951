"""``trainop train``'s parts: the driver records every step (and TensorBoard has the tags), the
dashboard is written, and the TensorFlow replay of ``--compare-tf`` agrees with trainop within
1e-5 relative for the replayable optimizers (TF's own ops, TF1 graph mode)."""

from __future__ import annotations

import copy

import pytest
import torch
from cli_in_process import run_cli

import trainop
from trainop.interfaces.train.dashboard import write_dashboard
from trainop.interfaces.train.loop import train_model
from trainop.interfaces.train.model import LSTMCellModel, make_batches


def _op(model, name="Adam", params=None, clip=0.5, steps=20):
    policy = trainop.schedules.policy("poly_decay", learning_rate=0.01, decay_steps=steps,
                                      power=1.0)
    return trainop.optimize_loss(
        lambda x, y: torch.nn.functional.mse_loss(model(x), y), name, params or {}, policy,
        model=model, clip_gradients=clip)


def test_the_model_is_torch_lstm_with_its_own_gate_order():
    """The written-out LSTM equals torch.nn.LSTM with the same weights (what the TF replay
    rebuilds)."""
    model = LSTMCellModel(hidden=5)
    lstm = torch.nn.LSTM(4, 5, batch_first=True)
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(lstm, f"{name}_l0").copy_(getattr(model, name))
    x = make_batches(1, batch=3)[0][0]
    hidden, _ = lstm(x)
    want = hidden @ model.out_weight.T + model.out_bias
    torch.testing.assert_close(model(x), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("front", ["optimize_loss", "updater"])
def test_driver_records_every_step_and_writes_tensorboard(tmp_path, front):
    event_accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator")
    from torch.utils.tensorboard import SummaryWriter

    model = LSTMCellModel()
    batches = make_batches(12)
    if front == "updater":
        built = trainop.Updater({"optimizer": {"class": "adam"}, "learning_rate": 0.01,
                                 "gradient_clip_global_norm": 1.0}, model)
    else:
        built = _op(model, steps=12)
    writer = SummaryWriter(str(tmp_path))
    history = train_model(built, model, batches, writer=writer)
    writer.close()
    assert len(history.loss) == len(history.learning_rate) == len(history.global_norm) == 12
    assert history.loss[-1] < history.loss[0]
    assert history.skipped[-1] == 0
    acc = event_accumulator.EventAccumulator(str(tmp_path))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"train/loss", "train/learning_rate", "train/global_gradient_norm",
            "train/skipped_updates"} <= tags
    assert [e.step for e in acc.Scalars("train/loss")] == list(range(12))
    assert "steps in" in history.summary()
    png = write_dashboard(history, tmp_path / "dashboard.png", "test")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


@pytest.mark.parametrize(("name", "params"), [("Adam", {}), ("Momentum", {"momentum": 0.9}),
                                              ("RMSProp", {}), ("Ftrl", {}),
                                              ("Adagrad", {})])
def test_tensorflow_replay_agrees_within_1e5(name, params):
    pytest.importorskip("tensorflow")
    from trainop.interfaces.train.compare_tf import deviations, replay_in_tf
    from trainop.interfaces.train.replay_plan import tf_plan

    model = LSTMCellModel()
    initial = copy.deepcopy(model)
    batches = make_batches(15)
    op = _op(model, name, params, steps=15)
    snapshots = []
    history = train_model(op, model, batches, progress=lambda k, h: snapshots.append(
        {n: p.detach().numpy().copy() for n, p in model.named_parameters()}))
    worst = deviations(snapshots, replay_in_tf(initial, tf_plan(op), batches,
                                               history.learning_rate))
    assert len(worst) == 15
    assert max(worst) <= 1e-5
    assert max(worst) > 0  # two implementations, not one run compared with itself


def test_replay_names_what_tensorflow_cannot_replay():
    from trainop.interfaces.train.replay_plan import tf_plan

    model = LSTMCellModel()
    with pytest.raises(ValueError, match="AdamWOptimizer has no TensorFlow 1 counterpart"):
        tf_plan(_op(model, "AdamW", {"weight_decay": 0.01}))
    noisy = trainop.Updater({"optimizer": {"class": "adam"}, "learning_rate": 0.01,
                             "gradient_noise": 0.1}, model)
    with pytest.raises(ValueError, match="^gradient_noise adds random draws"):
        tf_plan(noisy)


# the command in process (tests/cli_in_process.py): its output, status and files are the point
EXAMPLES = __import__("pathlib").Path(__file__).resolve().parents[1] / "examples"


def test_cli_train_a_returnn_config_writes_dashboard_and_events(tmp_path, capfd):
    event_accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator")
    out = run_cli(capfd, "train", str(EXAMPLES / "returnn_lstm.config"), "--steps", "12", "--out",
            str(tmp_path), "--no-progress")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "(returnn), Updater with AdamOptimizer, 12 micro-steps" in out.stdout
    assert "12 steps in" in out.stdout and "dashboard:" in out.stdout
    png = tmp_path / "dashboard.png"
    assert png.stat().st_size > 10_000
    acc = event_accumulator.EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert {"train/loss", "train/learning_rate", "train/global_gradient_norm",
            "train/skipped_updates"} <= set(acc.Tags()["scalars"])


def test_cli_train_compare_tf_on_the_shipped_openseq2seq_recipe(tmp_path, capfd):
    """The parity promise shown: the OpenSeq2Seq-style recipe (LazyAdam, transformer_policy,
    max_grad_norm, float32) replayed with TensorFlow's own ops stays within 1e-5."""
    pytest.importorskip("tensorflow")
    out = run_cli(capfd, "train", str(EXAMPLES / "openseq2seq_transformer.py"), "--steps", "20",
            "--out", str(tmp_path), "--compare-tf", "--no-progress")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "(openseq2seq), TrainOp with LazyAdamOptimizer" in out.stdout
    last = [line for line in out.stdout.splitlines() if line.startswith("largest over")][0]
    assert last.endswith("PASS")
    assert float(last.split(":")[1].split()[0]) <= 1e-5


def test_cli_train_rejects_a_bad_recipe(tmp_path, capfd):
    bad = tmp_path / "bad.yaml"
    bad.write_text("format: trainop\ngradient_clip_globl_norm: 1.0\n")
    out = run_cli(capfd, "train", str(bad), "--steps", "3", "--out", str(tmp_path / "run"))
    assert out.returncode == 1
    assert "trainop train:" in out.stderr and "gradient_clip_global_norm" in out.stderr
