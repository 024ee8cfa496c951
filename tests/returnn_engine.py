"""Runs RETURNN's real torch engine (``python -m returnn``, a subprocess with a timeout) on a
tiny config: Task12AXDataset, ``returnn_engine_model.Model``, CPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("returnn")
pytest.importorskip("tree")  # dm-tree: RETURNN needs it at run time

ROOT = Path(__file__).resolve().parents[1]

CONFIG = '''#!rnn.py
import sys
sys.path.insert(0, {tests!r})
import torch
import returnn_engine_model
{use}
backend = "torch"
task = "train"
device = "cpu"
log_verbosity = 2
extern_data = {{"data": {{"dim": 9}}, "classes": {{"dim": 2, "sparse": True}}}}
train = {{"class": "Task12AXDataset", "num_seqs": 10, "fixed_random_seed": 1}}
batch_size = 100
max_seqs = 2
num_epochs = {epochs}
model = {model!r}
apply_cleanup_old_models_to_optim_states = True
optimizer = {{"class": "adam"}}
learning_rates = [0.01, 0.005, 0.002]
accum_grad_multiple_step = 2
gradient_clip = 0.5
gradient_clip_global_norm = 1.0
log_grad_norm = True
learning_rate_file = "lr.txt"
# the batches loaded in the engine's process (RETURNN's default: a spawned worker process per
# epoch's data loader, which imports torch and RETURNN again; the batches are the same)
torch_dataloader_opts = {{"num_workers": 0}}


def dynamic_learning_rate(*, epoch, learning_rate, global_train_step, **kwargs):
    return learning_rate * 0.5 ** (epoch - 1) / (1 + 0.1 * global_train_step)


def get_model(**_kwargs):
    return returnn_engine_model.make_model()


def train_step(*, model, extern_data, **_kwargs):
    import returnn.frontend as rf
    ctx = rf.get_run_ctx()
    data, targets = extern_data["data"].raw_tensor, extern_data["classes"].raw_tensor
    returnn_engine_model.record(model, data, targets, ctx.epoch, ctx.step)
    ctx.mark_as_loss(name="ce", loss=returnn_engine_model.loss_of(model, data, targets))

{extra}
'''

USE_TORCH = "import trainop.returnn\ntrainop.returnn.use_in_engine()"
USE_TF = 'import trainop.returnn\ntrainop.returnn.use_in_engine(semantics="tf")'


def start(directory: Path, *, use: str = "", extra: str = "", epochs: int = 3,
          record: bool = False) -> subprocess.Popen:
    """Start ``python -m returnn`` on the config in ``directory`` (models under
    ``directory/out``); ``record``: the steps go to ``directory/record.pt``."""
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "train.config"
    config.write_text(CONFIG.format(tests=str(ROOT / "tests"), use=use, epochs=epochs,
                                    model=str(directory / "out" / "model"), extra=extra))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    env.pop("TRAINOP_RECORD", None)
    if record:
        env["TRAINOP_RECORD"] = str(directory / "record.pt")
    return subprocess.Popen([sys.executable, "-m", "returnn", str(config)], cwd=directory,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(process: subprocess.Popen, timeout: float = 300) -> str:
    """Wait for a run; its output (a failed run fails the test with it)."""
    try:
        out, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, _ = process.communicate()
        pytest.fail(f"RETURNN did not finish in {timeout} s:\n{out[-4000:]}")
    if process.returncode != 0:
        pytest.fail(f"RETURNN failed ({process.returncode}):\n{out[-6000:]}")
    return out


def run(directory: Path, **kwargs) -> str:
    return finish(start(directory, **kwargs))


def epoch_files(directory: Path, epoch: int) -> tuple[dict, dict]:
    """(the model checkpoint, the optimizer file) RETURNN wrote at the end of ``epoch``."""
    base = directory / "out" / f"model.{epoch:03d}"
    return (torch.load(f"{base}.pt", weights_only=True),
            torch.load(f"{base}.opt.pt", weights_only=True))
