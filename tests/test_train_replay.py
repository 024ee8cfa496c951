"""``trainop train --compare-tf`` replays what TensorFlow 1 can express: mixed precision with
the Backoff and LogMax loss scalers (overflows included), ``iter_size`` accumulation with Nadam
and a global-norm clip, LARC, and RETURNN's accumulation, clips and NaN filter with its
per-epoch rates; float32 recipes agree within float32 rounding (1e-5 relative), mixed ones
within float16 rounding of the float16 weights. What it cannot replay is refused before
training, in one line."""

from __future__ import annotations

import re

import pytest

from trainop.__main__ import main

pytest.importorskip("tensorflow")


def _train(tmp_path, capsys, text: str, name: str, *args: str) -> tuple[int, str, str]:
    recipe = tmp_path / name
    recipe.write_text(text)
    status = main(["train", str(recipe), "--out", str(tmp_path / "run"), "--no-progress",
                   "--compare-tf", *args])
    out, err = capsys.readouterr()
    return status, out, err


def _largest(out: str) -> float:
    line = [x for x in out.splitlines() if x.startswith("largest over")][0]
    return float(line.split(":")[1].split()[0])


def _skipped(out: str) -> int:
    return int(re.search(r"(\d+) update\(s\) skipped", out).group(1))


MIXED = """
base_params = {{
    "max_steps": 40, "dtype": "mixed", "optimizer": "Adam", "optimizer_params": {{}},
    "lr_policy": "poly_decay", "lr_policy_params": {{"learning_rate": 0.01, "power": 1.0}},
    "loss_scaling": {scaling!r}, "loss_scaling_params": {params!r},
}}
"""
#: one float16 ulp of a weight near the largest one is 2**-11 = 4.9e-4 of it; the weights are
#: the float16 casts of float32 masters whose gradients went through float16 backward passes
FLOAT16_TOLERANCE = 2e-2


@pytest.mark.parametrize(("scaling", "params", "min_skips"), [
    ("Backoff", {"scale_max": 2.0 ** 24, "step_window": 4}, 5),  # halves, regrows, overflows
    # its moments aim above float16's range once; OpenSeq2Seq's LogMax (the replay's)
    ("LogMax", {"scale_max": 2.0 ** 30, "upstream_quirks": True}, 1),
])
def test_mixed_precision_with_overflows_replays_within_float16_rounding(
        tmp_path, capsys, scaling, params, min_skips):
    status, out, err = _train(tmp_path, capsys, MIXED.format(scaling=scaling, params=params),
                              "mixed.py", "--steps", "14")
    assert status == 0, out + err
    assert _skipped(out) >= min_skips  # overflows happened, and TF skipped the same steps
    assert 0 < _largest(out) <= FLOAT16_TOLERANCE
    assert "tolerance 2e-02" in out


def test_accumulation_with_nadam_and_clip_replays_within_float32_rounding(tmp_path, capsys):
    text = """
base_params = {
    "max_steps": 40, "iter_size": 3, "optimizer": "Nadam", "optimizer_params": {"beta2": 0.99},
    "lr_policy": "poly_decay", "lr_policy_params": {"learning_rate": 0.01, "power": 1.0},
    "max_grad_norm": 0.05,
}
"""
    status, out, err = _train(tmp_path, capsys, text, "accum.py", "--steps", "10")
    assert status == 0, out + err
    assert "TrainOp with NadamOptimizer" in out
    assert "6 micro-step(s) only accumulated" in out  # updates on micro-steps 0, 3, 6, 9 (Q5)
    assert 0 < _largest(out) <= 1e-5


def test_larc_replays_within_float32_rounding(tmp_path, capsys):
    text = """
base_params = {
    "max_steps": 20, "optimizer": "Momentum", "optimizer_params": {"momentum": 0.9},
    "lr_policy": "poly_decay", "lr_policy_params": {"learning_rate": 0.5, "power": 1.0},
    "larc_params": {"larc_eta": 0.002},
}
"""
    status, out, err = _train(tmp_path, capsys, text, "larc.py", "--steps", "6")
    assert status == 0, out + err
    assert 0 < _largest(out) <= 1e-5


@pytest.mark.parametrize(("dtype", "kind", "tolerance"), [
    ("float32", "l2_regularizer", 1e-5), ("float32", "l1_regularizer", 1e-5),
    ("mixed", "l2_regularizer", FLOAT16_TOLERANCE)])
def test_regularizer_replays_in_the_loss_or_on_the_masters(tmp_path, capsys, dtype, kind,
                                                           tolerance):
    text = f"""
base_params = {{
    "max_steps": 40, "dtype": {dtype!r}, "optimizer": "Momentum",
    "optimizer_params": {{"momentum": 0.9}}, "lr_policy": "poly_decay",
    "lr_policy_params": {{"learning_rate": 0.05, "power": 1.0}},
    "regularizer": {kind!r}, "regularizer_params": {{"scale": 0.05}},
}}
"""
    status, out, err = _train(tmp_path, capsys, text, "reg.py", "--steps", "5")
    assert status == 0, out + err
    assert 0 < _largest(out) <= tolerance


def test_returnn_accumulation_clips_and_epoch_rates_replay(tmp_path, capsys):
    text = """#!rnn.py
learning_rates = [0.0003, 0.001, 0.002]
optimizer = {"class": "adam"}
optimizer_epsilon = 1e-8
gradient_clip = 0.5
gradient_clip_norm = 1.0
gradient_clip_global_norm = 0.2
gradient_nan_inf_filter = True
accum_grad_multiple_step = 2
"""
    status, out, err = _train(tmp_path, capsys, text, "r.config", "--steps", "9",
                              "--steps-per-epoch", "3")
    assert status == 0, out + err
    assert "1: 0.0003, 2: 0.001, 3: 0.002" in out
    assert 0 < _largest(out) <= 1e-5


@pytest.mark.parametrize(("text", "name", "reason"), [
    ("#!rnn.py\nlearning_rate = 0.01\noptimizer = {'class': 'adam'}\ngradient_noise = 0.1\n",
     "noise.config", "gradient_noise adds random draws that TensorFlow cannot repeat"),
    ("#!rnn.py\nbackend = 'torch'\nlearning_rate = 0.01\n"
     "optimizer = {'class': 'adamw', 'weight_decay': 0.01}\n",
     "adamw.config", "AdamW is a torch.optim class (RETURNN's PyTorch backend), which "
                     "TensorFlow 1 has no counterpart for"),
])
def test_what_tensorflow_cannot_replay_is_refused_before_training(tmp_path, capsys, text, name,
                                                                   reason):
    status, out, err = _train(tmp_path, capsys, text, name, "--steps", "3")
    assert status == 1
    assert out == ""  # nothing trained, nothing written
    assert not (tmp_path / "run").exists()
    assert err == f"trainop train: --compare-tf cannot replay {tmp_path / name}: {reason}\n"
