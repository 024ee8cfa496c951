# An OpenSeq2Seq-style speech config in the layout of its Jasper example configs: NovoGrad with
# LARC, mixed precision with the Backoff loss scaler, poly_decay filled from the run length.
# Read by trainop as data, never run.
# pylint: skip-file
import tensorflow as tf
from open_seq2seq.models import Speech2Text
from open_seq2seq.optimizers.lr_policies import poly_decay
from open_seq2seq.optimizers.novograd import NovoGrad

base_model = Speech2Text
base_params = {
    "random_seed": 0,
    "use_horovod": False,
    "num_epochs": 50,
    "num_gpus": 1,
    "batch_size_per_gpu": 32,
    "iter_size": 1,
    "save_summaries_steps": 100,
    "logdir": "jasper_small",

    "optimizer": NovoGrad,
    "optimizer_params": {"beta1": 0.95, "beta2": 0.98, "epsilon": 1e-08,
                         "weight_decay": 0.001, "grad_averaging": False},
    "lr_policy": poly_decay,
    "lr_policy_params": {"learning_rate": 0.02, "min_lr": 1e-5, "power": 2.0},
    "larc_params": {"larc_eta": 0.001},
    "dtype": "mixed",
    "loss_scaling": "Backoff",
    "summaries": ["learning_rate", "global_gradient_norm", "loss_scale"],
    "initializer": tf.contrib.layers.xavier_initializer,
}
