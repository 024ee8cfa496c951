"""A checkpoint written by RETURNN's own TF engine (``backend = "tensorflow-net-dict"``), loaded.

RETURNN runs in a subprocess (``python -m returnn CONFIG``): a softmax layer (``output/W``,
``output/b``) on a ``DummyDataset`` (3 sequences of 2 frames, one per step), Adam (lr 0.01,
RETURNN's epsilon 1e-16), ``accum_grad_multiple_step = 2``, ``behavior_version = 15``. Its first
epoch starts from weights trainop writes (``import_model_train_epoch1``), so every value is
known. One epoch is 3 steps, so it ends mid-window (``global_step`` 3, ``3 mod 2 = 1``). A second
run resumes from ``net.001`` for epoch 2 and writes ``net.002``.

Observed (RETURNN 1.20261022.211313, TensorFlow 2.21.0): the checkpoint holds ``output/W``,
``output/b`` and ``global_step`` (int64), nothing else. There are no slots, beta powers or
accumulators, and no epoch (the epoch is only in the file name). On resume RETURNN builds a fresh
Adam and a zero accumulator. Gradients of the partial window are dropped; the window's phase
follows ``global_step``. trainop's ``Updater`` replays epoch 1 from the same weights. Loaded from
``net.001`` with ``load_tf(strict=False)`` and given the restored step, it continues as RETURNN
does, to float32 rounding of the gradients (torch computes them, not TF).

``behavior_version = 15`` because with RETURNN's default (<= 14) its accumulation is not
reproducible under TF 2.21. The same config gave different weights from run to run: each update
applied either the window's gradients or the running sum since the start (6 runs: 2, 3, and 1
run matching neither). With 15 (the step read once as a tensor), 4 of 4 runs were identical and
followed the rule of RETURNN's source: reset at each window start.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import trainop
import trainop.checkpoints as ckpt

pytest.importorskip("returnn")
pytest.importorskip("tensorflow")


#: The child process: ``python -m returnn CONFIG``, RETURNN's TF backend imported first. Where
#: it does not import with this TF, the child says so (exit status 3) and the tests skip; it is
#: asked in the child because importing ``returnn.tf`` here would switch this whole test
#: process to graph mode (it disables TF's eager execution), and every later TF-parity test
#: would fail.
RUN_RETURNN = """import runpy, sys
try:
    import returnn.tf.engine
except Exception as error:
    print("RETURNN's TF backend does not import:", repr(error), flush=True)
    sys.exit(3)
sys.argv = ["returnn", sys.argv[1]]
runpy.run_module("returnn", run_name="__main__", alter_sys=True)
"""
NO_TF_BACKEND, NO_TF_BACKEND_SAYS = 3, "RETURNN's TF backend does not import"

NAMES = {"0.weight": ("output/W", ckpt.transpose), "0.bias": "output/b"}
NUM_SEQS, LR = 3, 0.01

CONFIG = """#!rnn.py
backend = "tensorflow-net-dict"
task = "train"
device = "cpu"
train = {{"class": "DummyDataset", "input_dim": 3, "output_dim": 2, "num_seqs": {num_seqs},
         "seq_len": 2}}
dev = None
num_inputs, num_outputs = 3, 2
network = {{"output": {{"class": "softmax", "loss": "ce", "from": "data"}}}}
batch_size, max_seqs = 2, 1
num_epochs = {epochs}
learning_rate = {lr}
accum_grad_multiple_step = 2
model = {model!r}
import_model_train_epoch1 = {init!r}
log_verbosity = 3
{extra}
"""
RECENT = 'optimizer = {"class": "adam"}\nbehavior_version = 15'  # step read as a tensor


def _returnn(tmp_path, name: str, extra: str, epochs: int) -> None:
    """Run RETURNN's TF engine on the config; its checkpoints land in tmp_path/name.NNN."""
    config = tmp_path / f"{name}_{epochs}.config"
    config.write_text(CONFIG.format(num_seqs=NUM_SEQS, epochs=epochs, lr=LR, extra=extra,
                                    model=str(tmp_path / name), init=str(tmp_path / "init")))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, "-c", RUN_RETURNN, str(config)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=180)
    if done.returncode == NO_TF_BACKEND and done.stdout.startswith(NO_TF_BACKEND_SAYS):
        pytest.skip(done.stdout.strip())
    if done.returncode != 0:
        pytest.fail(f"RETURNN's TF engine failed:\n{(done.stdout + done.stderr)[-3000:]}")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The initial weights (trainop writes them; RETURNN checks for a ``.meta`` file only),
    RETURNN's epoch 1 (``net.001``) and its resumed epoch 2 (``net.002``)."""
    tmp = tmp_path_factory.mktemp("returnn_tf")
    g = torch.Generator().manual_seed(0)
    init = {"output/W": torch.randn(3, 2, generator=g), "output/b": torch.randn(2, generator=g),
            "global_step": torch.tensor(0)}
    ckpt.write_tf(tmp / "init", init)
    (tmp / "init.meta").write_bytes(b"")
    _returnn(tmp, "net", RECENT, epochs=1)
    _returnn(tmp, "net", RECENT, epochs=2)
    return tmp, init


def _batches():
    """The DummyDataset's sequences (RETURNN's own generator), one per step."""
    from returnn.datasets.generating import DummyDataset

    ds = DummyDataset(input_dim=3, output_dim=2, num_seqs=NUM_SEQS, seq_len=2)
    for i in range(NUM_SEQS):
        s = ds.generate_seq(i)
        yield torch.from_numpy(s.features["data"]), torch.from_numpy(s.features["classes"]).long()


def _loss(model, x, y):
    """RETURNN's ``ce`` loss as its updater minimises it: summed over the frames."""
    return torch.nn.functional.cross_entropy(model(x), y, reduction="sum")


def _updater(model):
    return trainop.Updater({"optimizer": {"class": "adam"}, "learning_rate": LR,
                            "accum_grad_multiple_step": 2}, model)


def test_returnn_tf_checkpoint_holds_weights_and_step_only(run, tf):
    tmp, _ = run
    reader = tf.train.load_checkpoint(str(tmp / "net.001"))
    shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
    assert shapes == {"output/W": [3, 2], "output/b": [2], "global_step": []}
    assert dtypes == {"output/W": tf.float32, "output/b": tf.float32, "global_step": tf.int64}
    tensors = ckpt.read_tf(tmp / "net.001")
    assert sorted(tensors) == sorted(shapes)
    for name in shapes:
        expected = torch.as_tensor(np.asarray(reader.get_tensor(name)))
        assert torch.equal(tensors[name], expected), name
    assert tensors["global_step"].dtype == torch.int64
    assert int(tensors["global_step"]) == NUM_SEQS  # 3 steps: ends mid-window (3 mod 2 = 1)
    assert int(ckpt.read_tf(tmp / "net.002")["global_step"]) == 2 * NUM_SEQS


def test_updater_replays_returnn_epoch_from_the_same_weights(run):
    tmp, init = run
    model = torch.nn.Sequential(torch.nn.Linear(3, 2))
    with torch.no_grad():
        model[0].weight.copy_(init["output/W"].t())
        model[0].bias.copy_(init["output/b"])
    updater = _updater(model)
    for x, y in _batches():
        model.zero_grad()
        updater.step(_loss(model, x, y))
    returnn = ckpt.read_tf(tmp / "net.001")
    assert int(updater.global_train_step) == int(returnn["global_step"])
    # torch computes the gradients, TF did: rounding may differ (measured: bit-identical)
    torch.testing.assert_close(model[0].weight.detach(), returnn["output/W"].t(), rtol=0,
                               atol=1e-6)
    torch.testing.assert_close(model[0].bias.detach(), returnn["output/b"], rtol=0, atol=1e-6)
    assert (model[0].weight.detach() - init["output/W"].t()).abs().min() > 1e-3  # it trained


def test_load_returnn_tf_checkpoint_and_continue_as_returnn(run):
    tmp, _ = run
    saved = ckpt.read_tf(tmp / "net.001")
    model = torch.nn.Sequential(torch.nn.Linear(3, 2))
    updater = _updater(model)
    with pytest.raises(ValueError, match="missing from the checkpoint"):
        ckpt.load_tf(tmp / "net.001", model, updater.optimizer, names=NAMES)
    report = ckpt.load_tf(tmp / "net.001", model, updater.optimizer, names=NAMES, strict=False)
    assert torch.equal(model[0].weight.detach(), saved["output/W"].t())
    assert torch.equal(model[0].bias.detach(), saved["output/b"])
    assert report.global_step == NUM_SEQS
    assert sorted(report.left_at_initial) == sorted(
        ["0.weight[m]", "0.weight[v]", "0.bias[m]", "0.bias[v]", "optimizer.beta1_power",
         "optimizer.beta2_power"])
    assert not report.skipped and not report.unsupported
    # RETURNN resumes as here: a fresh Adam, an empty accumulator, the window by the step
    updater.set_current_train_step(global_train_step=report.global_step, epoch=2)
    for x, y in _batches():
        model.zero_grad()
        updater.step(_loss(model, x, y))
    returnn = ckpt.read_tf(tmp / "net.002")
    # torch computes the gradients, TF did: rounding may differ (measured: bit-identical)
    torch.testing.assert_close(model[0].weight.detach(), returnn["output/W"].t(), rtol=0,
                               atol=1e-6)
    torch.testing.assert_close(model[0].bias.detach(), returnn["output/b"], rtol=0, atol=1e-6)


def test_returnn_drops_the_partial_window_at_the_epoch_end(run):
    """Had RETURNN saved its accumulator, the first update of epoch 2 (step 3) would apply the
    gradients of steps 2 and 3; it applies step 3's only, so a run that kept the window ends
    epoch 2 far beyond rounding from RETURNN's ``net.002``."""
    tmp, _ = run
    model = torch.nn.Sequential(torch.nn.Linear(3, 2))
    updater = _updater(model)
    ckpt.load_tf(tmp / "net.001", model, updater.optimizer, names=NAMES, strict=False)
    updater.set_current_train_step(global_train_step=NUM_SEQS - 1, epoch=1)  # step 2 again
    x, y = list(_batches())[-1]
    model.zero_grad()
    updater.step(_loss(model, x, y))  # accumulates only (2 mod 2 = 0): the weights stay
    updater.set_current_train_step(epoch=2)
    for x, y in _batches():
        model.zero_grad()
        updater.step(_loss(model, x, y))
    returnn = ckpt.read_tf(tmp / "net.002")
    # Adam's first step is about lr * sign(g), so the window's extra gradient moves it little:
    # measured 8e-4 (W), against 0 when the window is dropped
    assert (model[0].weight.detach() - returnn["output/W"].t()).abs().max() > 1e-4

