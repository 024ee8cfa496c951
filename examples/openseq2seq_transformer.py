# An OpenSeq2Seq-style config (the layout of OpenSeq2Seq's example_configs): a small Transformer
# trained with LazyAdam and the Transformer learning-rate policy. trainop READS this file as
# data (`trainop check-config examples/openseq2seq_transformer.py`, `trainop.load_recipe`); it
# is never imported or run, so the open_seq2seq and tensorflow imports need not exist.
# pylint: skip-file
import tensorflow as tf
from open_seq2seq.data.text2text.text2text import ParallelTextDataLayer, SpecialTextTokens
from open_seq2seq.decoders import TransformerDecoder
from open_seq2seq.encoders import TransformerEncoder
from open_seq2seq.losses import PaddedCrossEntropyLossWithSmoothing
from open_seq2seq.models import Text2Text
from open_seq2seq.optimizers.lr_policies import transformer_policy

data_root = "/data/wmt16_en_de/"
d_model = 64
num_layers = 2

base_model = Text2Text
base_params = {
    "use_horovod": False,
    "num_gpus": 1,
    "batch_size_per_gpu": 32,
    "max_steps": 400,
    "save_summaries_steps": 50,
    "print_loss_steps": 50,
    "logdir": "transformer_small",
    "dtype": tf.float32,

    "optimizer": tf.contrib.opt.LazyAdamOptimizer,
    "optimizer_params": {"beta1": 0.9, "beta2": 0.997, "epsilon": 1e-09},
    "lr_policy": transformer_policy,
    "lr_policy_params": {"learning_rate": 2.0, "warmup_steps": 100, "d_model": d_model},
    "max_grad_norm": 5.0,
    "summaries": ["learning_rate", "global_gradient_norm"],

    "encoder": TransformerEncoder,
    "encoder_params": {
        "encoder_layers": num_layers, "hidden_size": d_model, "num_heads": 4,
        "filter_size": 4 * d_model, "relu_dropout": 0.1, "layer_postprocess_dropout": 0.1,
        "pad_vocab_to_eight": False,
        "initializer": tf.variance_scaling_initializer(scale=1.0),  # code: reported, unused
    },
    "decoder": TransformerDecoder,
    "decoder_params": {
        "decoder_layers": num_layers, "hidden_size": d_model, "num_heads": 4,
        "beam_size": 4, "PAD_SYMBOL": SpecialTextTokens.PAD_ID.value,
    },
    "loss": PaddedCrossEntropyLossWithSmoothing,
    "loss_params": {"label_smoothing": 0.1},
}

train_params = {
    "data_layer": ParallelTextDataLayer,
    "data_layer_params": {
        "src_vocab_file": data_root + "vocab.bpe.32000",
        "tgt_vocab_file": data_root + "vocab.bpe.32000",
        "source_file": data_root + "train.en",
        "target_file": data_root + "train.de",
        "shuffle": True,
        "max_length": 64,
    },
}
