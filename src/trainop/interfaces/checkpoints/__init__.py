"""TF1 checkpoints in and out, optimizer state included; torch.optim state converted.

``read_tf`` reads a TF1 V2 checkpoint without TensorFlow; ``load_tf`` maps it into a torch
model and a trainop optimizer (slots, beta powers, global step), checking everything first;
``save_tf`` writes one ``tf.compat.v1.train.Saver`` restores; ``from_torch_optim`` and
``to_torch_optim`` move a run between ``torch.optim`` and trainop. See ``docs/checkpoints.md``.
"""

from trainop.interfaces.checkpoints.bundle import TFCheckpoint, read_bundle, write_bundle
from trainop.interfaces.checkpoints.layouts import (
    Layout,
    conv1d,
    conv2d,
    identity,
    layout,
    lstm_bias,
    lstm_bias_forget,
    lstm_kernel_hh,
    lstm_kernel_ih,
    transpose,
)
from trainop.interfaces.checkpoints.load import load_tf
from trainop.interfaces.checkpoints.report import LoadReport
from trainop.interfaces.checkpoints.save import save_tf
from trainop.interfaces.checkpoints.slot_names import TF1_NON_SLOT, TF1_SLOTS, slot_names
from trainop.interfaces.checkpoints.torch_optim import from_torch_optim, to_torch_optim
from trainop.interfaces.checkpoints.wire import CorruptCheckpoint

read_tf = read_bundle
"""``read_tf(path)``: a TF1 checkpoint's tensors, ``{name: tensor}`` (no TensorFlow needed);
names it cannot read are in ``.unsupported`` with the reason."""
write_tf = write_bundle
"""``write_tf(path, tensors)``: write ``{name: tensor}`` as a TF1 checkpoint ``Saver`` restores."""

__all__ = ["TF1_NON_SLOT", "TF1_SLOTS", "CorruptCheckpoint", "Layout", "LoadReport",
           "TFCheckpoint", "conv1d", "conv2d", "from_torch_optim", "identity", "layout",
           "load_tf", "lstm_bias", "lstm_bias_forget", "lstm_kernel_hh", "lstm_kernel_ih",
           "read_tf", "save_tf", "slot_names", "to_torch_optim", "transpose", "write_tf"]
