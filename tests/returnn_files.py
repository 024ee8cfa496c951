"""An optimizer file written by RETURNN's own torch updater, for the tests that load one."""

from __future__ import annotations

import torch


def returnn_opt_file(path, config: dict, model: torch.nn.Module, inputs: torch.Tensor) -> str:
    """RETURNN's ``Updater`` for ``config`` over ``model``, one step on ``model(inputs).sum()``
    (train step 0, epoch 1), its ``save_optimizer`` written to ``path``; the path."""
    from returnn.config import Config
    from returnn.torch.updater import Updater

    theirs = Updater(config=Config(dict(config)), network=model, device="cpu")
    theirs.create_optimizer()
    theirs.set_current_train_step(global_train_step=0, epoch=1, epoch_continuous=0.0)
    model(inputs).sum().backward()
    theirs.step()
    theirs.save_optimizer(str(path))
    return str(path)
