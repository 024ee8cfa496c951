# An OpenSeq2Seq recipe whose options are computed from earlier names: arithmetic, int(),
# repeated tuples, a numpy range for the boundaries, tf.train's own decay as the policy.
import numpy as np
import tensorflow as tf
from open_seq2seq.models import Speech2Text

d_model = 128
num_layers = 2
batch_size_per_gpu = 32
epochs = 4
steps_per_epoch = 25

base_model = Speech2Text
base_params = {
    "max_steps": epochs * steps_per_epoch,
    "batch_size_per_gpu": batch_size_per_gpu,
    "optimizer": "Momentum",
    "optimizer_params": {"momentum": 0.9},
    "lr_policy": tf.train.cosine_decay,
    "lr_policy_params": {"learning_rate": 0.02 * batch_size_per_gpu / 32,
                         "decay_steps": epochs * steps_per_epoch},
    "max_grad_norm": min(5.0, d_model / 32),
    "dtype": tf.float32,
    "encoder_params": {"num_units": int(d_model / 2),
                       "layers": [(d_model, 3)] * num_layers,
                       "widths": list(np.arange(11, 11 + 2 * num_layers, 2)),
                       "initializer": tf.contrib.layers.xavier_initializer},
}
