"""``trainop.checkpoints``: TF1 checkpoints in and out (optimizer state included) and
torch.optim state converted. The implementation is ``trainop.interfaces.checkpoints``; see
``docs/checkpoints.md``.

Example::

    import trainop.checkpoints as ckpt
    names = {"0.weight": ("dense/kernel", ckpt.transpose), "0.bias": "dense/bias"}
    report = ckpt.load_tf("run/model.ckpt-1000", model, optimizer, names=names)
    ckpt.save_tf("back/model.ckpt-1500", model, optimizer, names=names)
"""

from trainop.interfaces.checkpoints import *  # noqa: F403
from trainop.interfaces.checkpoints import __all__  # noqa: F401
