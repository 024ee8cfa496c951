"""The ``tf.train.Optimizer`` contract on ``torch.optim.Optimizer``: the ``Optimizer`` class and
its bookkeeping (slots, state, hyperparameters, gating, checkpoints, flat buffers), see
``docs/design.md``."""
