"""The front door of ``trainop train`` and ``check-config``: one-line errors (exit status 1),
an honest summary (first and last loss, the rate first -> last), accumulation shown as
accumulation, long tables summarised, a torch optimizer's built hyperparameters, the
OpenSeq2Seq run length named where a schedule cannot be filled, and ``import trainop``
without ``torch._dynamo`` and ``torch.distributed.tensor``."""

from __future__ import annotations

import math
import re
import subprocess
import sys

import pytest
import torch

import trainop
from trainop.__main__ import main
from trainop.interfaces.train.loop import History, train_model
from trainop.interfaces.train.model import LSTMCellModel, make_batches


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_yaml_syntax_error_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("format: trainop\noptimizer: {class: adam\nlearning_rate: [1\n")
    for command in ("train", "check-config"):
        extra = ["--out", str(tmp_path / "run")] if command == "train" else ["--no-plot"]
        status, out, err = _run(capsys, command, str(bad), *extra)
        assert status == 1
        assert err.count("\n") == 1 and "Traceback" not in err
        assert f"trainop {command}: invalid recipe {bad}:" in err
        assert "expected ',' or '}'" in err
        assert re.search(r"line 3|bad\.yaml:3:", err)  # the line is named
    assert not (tmp_path / "run").exists()


def test_out_pointing_at_a_file_is_one_line_before_training(tmp_path, capsys):
    target = tmp_path / "taken"
    target.write_text("mine")
    recipe = tmp_path / "r.yaml"
    recipe.write_text("format: trainop\noptimizer: {class: adam}\nlearning_rate: 0.01\n")
    status, out, err = _run(capsys, "train", str(recipe), "--out", str(target))
    assert (status, out) == (1, "")
    assert err == (f"trainop train: expected --out to be a directory (new or existing), got "
                   f"the file {target}\n")
    assert target.read_text() == "mine"


@pytest.mark.parametrize(("per_epoch", "run"), [
    (["--steps-per-epoch", "2"], "num_epochs 400 x 2 step(s) per epoch = 800 steps"),
])
def test_unfillable_openseq2seq_schedule_names_the_length_to_pass(tmp_path, capsys, per_epoch,
                                                                  run):
    recipe = tmp_path / "quartznet_like.py"
    recipe.write_text('base_params = {"num_epochs": 400, "optimizer": "Momentum", '
                      '"optimizer_params": {"momentum": 0.9}, "lr_policy": "poly_decay", '
                      '"lr_policy_params": {"learning_rate": 0.01, "power": 2.0, '
                      '"begin_decay_at": 1000}}\n')
    status, out, err = _run(capsys, "train", str(recipe), "--out", str(tmp_path / "run"),
                            "--steps", "2", *per_epoch)
    assert status == 1
    assert err == (f"trainop train: invalid recipe {recipe}: Expected `decay_steps` in (0, inf), "
                   f"got -200 (filled as last step 800 - begin_decay_at 1000): the run is {run}; "
                   f"pass the steps per epoch (--steps-per-epoch, build(steps_per_epoch=)) or "
                   f"the run length (--num-steps, build(num_steps=))\n")
    # check-config: the same rule, the same verdict and words
    status, out, check_err = _run(capsys, "check-config", str(recipe), "--no-plot", *per_epoch)
    assert status == 1
    assert check_err.split(": ValueError: ", 1)[1] == err.split(f"{recipe}: ", 1)[1]
    # the default --steps-per-epoch (10 in both) fills it as OpenSeq2Seq would: 4000 - 1000
    status, out, err = _run(capsys, "check-config", str(recipe), "--no-plot")
    assert status == 0, err
    assert "'decay_steps': 3000" in out
    status, out, err = _run(capsys, "train", str(recipe), "--out", str(tmp_path / "run"),
                            "--steps", "2", "--no-progress")
    assert status == 0, err


def test_summary_shows_first_and_last_loss_and_the_rate_first_to_last():
    history = History(loss=[0.49151, 0.49149, 0.49147, 0.49152, 0.49144],
                      learning_rate=[0.4, 0.3, 0.2, 0.1, 0.001], global_norm=[1.0] * 5,
                      loss_scale=[math.nan] * 5, skipped=[0] * 5, accumulating=[False] * 5)
    text = history.summary()
    assert "loss 0.49151 (step 1) -> 0.49144 (step 5)" in text
    assert "learning rate 0.4 (step 1) -> 0.001 (step 5);" in text
    assert "between" not in text  # the rate fell monotonically: first -> last says it all
    history.learning_rate = [0.001, 0.4, 0.2, 0.1, 0.05]
    assert "learning rate 0.001 (step 1) -> 0.05 (step 5), between 0.001 and 0.4" in \
        history.summary()


def test_accumulation_micro_steps_have_no_norm_not_zero(tmp_path):
    model = LSTMCellModel()
    built = trainop.Updater({"optimizer": {"class": "adam"}, "learning_rate": 0.01,
                             "accum_grad_multiple_step": 2}, model)
    history = train_model(built, model, make_batches(6))
    assert history.accumulating == [True, False] * 3
    assert all(math.isnan(v) for v in history.global_norm[0::2])
    assert all(v > 0 for v in history.global_norm[1::2])
    assert "3 micro-step(s) only accumulated" in history.summary()
    pytest.importorskip("matplotlib")
    from trainop.interfaces.train.dashboard import write_dashboard

    png = write_dashboard(history, tmp_path / "d.png", "accumulation")
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_check_config_summarises_a_long_per_epoch_list(tmp_path, capsys):
    recipe = tmp_path / "long.config"
    rates = ", ".join(f"{0.001 * (1 + i % 7):g}" for i in range(600))
    recipe.write_text(f"#!rnn.py\noptimizer = {{'class': 'adam'}}\nlearning_rates = [{rates}]\n")
    status, out, err = _run(capsys, "check-config", str(recipe), "--no-plot")
    assert status == 0, err
    table = out.split("epoch  learning rate\n")[1].split("warning")[0].splitlines()
    assert len(table) == 17  # 8 + the count + 8, not 601 rows
    assert table[0].split() == ["1", "0.001"] and table[7].split() == ["8", "0.001"]
    assert "... 585 more rows (601 in all; the plot shows every one) ..." in table[8]
    assert table[-2].split() == ["600", "0.005"]


def test_check_config_shows_the_eps_the_built_torch_optimizer_has(tmp_path, capsys):
    recipe = tmp_path / "adamw.config"
    recipe.write_text("#!rnn.py\nbackend = 'torch'\nlearning_rate = 0.01\n"
                      "optimizer = {'class': 'adamw', 'epsilon': 1e-16, 'weight_decay': 0.01}\n")
    status, out, err = _run(capsys, "check-config", str(recipe), "--no-plot")
    assert status == 0, err
    line = out.splitlines()[2]
    assert "eps=1e-16" in line and "epsilon" not in line and "eps=1e-08" not in line
    model = torch.nn.Linear(2, 2)
    updater = trainop.load_recipe(recipe).build(model)
    updater.get_optim_op()
    assert updater._groups[0].optimizer.defaults["eps"] == 1e-16


def test_import_trainop_leaves_dynamo_and_dtensor_to_those_who_use_them():
    code = ("import sys, trainop; print(sorted(m for m in ('torch._dynamo', "
            "'torch.distributed.tensor', 'tensorflow', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip() == "[]"


def test_newbob_reads_each_epoch_mean_training_loss():
    model = LSTMCellModel()
    config = {"optimizer": {"class": "adam"}, "learning_rate": 0.01,
              "learning_rate_control": "newbob_rel", "newbob_relative_error_threshold": -1.0,
              "newbob_learning_rate_decay": 0.5}
    built = trainop.Updater(config, model)
    control = trainop.LearningRateControl(config)
    history = train_model(built, model, make_batches(9), control=control, steps_per_epoch=3)
    for epoch in (1, 2):
        want = sum(history.loss[3 * (epoch - 1):3 * epoch]) / 3
        assert control.epoch_data[epoch].error == {"train_score": pytest.approx(want, rel=1e-12)}
    # threshold -1: any relative change above it decays; epoch 3 compares epochs 1 and 2
    assert history.epoch_rates == {1: 0.01, 2: 0.01, 3: 0.005}
    assert history.learning_rate == [pytest.approx(0.01)] * 6 + [pytest.approx(0.005)] * 3


def test_a_recipe_with_debug_grad_summaries_writes_them_with_the_run(tmp_path, capsys):
    event_accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator")
    recipe = tmp_path / "summaries.config"
    recipe.write_text("#!rnn.py\nlearning_rate = 0.01\noptimizer = {'class': 'adam'}\n"
                      "optimizer_epsilon = 1e-8\ndebug_grad_summaries = True\n")
    status, out, err = _run(capsys, "train", str(recipe), "--out", str(tmp_path / "run"),
                            "--steps", "2", "--no-progress")
    assert status == 0, err
    acc = event_accumulator.EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"train/loss", "global_grad_norm", "grads/weight_ih/grad_of_weight_ih_l2"} <= tags
