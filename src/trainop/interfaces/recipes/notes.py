"""What ``trainop check-config`` says about a recipe's optimizer: its hyperparameters (the
recipe's values over the class's defaults) and where TF1's numerics differ from
``torch.optim``'s."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

__all__ = ["TF_NOTES", "hyperparameters"]

#: class name -> how TF1 (or OpenSeq2Seq) computes it, where torch.optim differs.
TF_NOTES = {
    "AdamOptimizer": "TF1 Adam ('epsilon hat'): w -= lr*sqrt(1-beta2^t)/(1-beta1^t) * "
                     "m/(sqrt(v)+epsilon); epsilon is not bias-corrected (torch.optim.Adam "
                     "adds it to sqrt(v/(1-beta2^t)))",
    "LazyAdamOptimizer": "TF1 Adam's update ('epsilon hat'); for sparse gradients only the "
                         "touched rows' moments and weights change",
    "NadamOptimizer": "TF1 Nadam: Adam with Nesterov momentum and TF1's epsilon placement",
    "AdamWOptimizer": "tf.contrib.opt AdamW: w -= weight_decay*w (decoupled, not scaled by "
                      "lr) plus TF1 Adam; OpenSeq2Seq's 'AdamW' by name multiplies "
                      "weight_decay by the learning rate",
    "MomentumOptimizer": "TF1 momentum: a = momentum*a + g; w -= lr*a (torch.optim.SGD with "
                         "dampening=0); use_nesterov: w -= lr*(g + momentum*a)",
    "MomentumWOptimizer": "tf.contrib.opt MomentumW: decoupled weight decay plus TF1 momentum",
    "RMSPropOptimizer": "TF1 RMSProp: the mean square starts at 1 (torch: 0), epsilon inside "
                        "the root: w -= lr*g/sqrt(ms+epsilon)",
    "AdagradOptimizer": "TF1 Adagrad: the accumulator starts at 0.1 (torch: 0); no epsilon",
    "AdadeltaOptimizer": "TF1 Adadelta: lr defaults to 0.001 (torch: 1.0), epsilon 1e-8",
    "FtrlOptimizer": "TF1 FTRL-proximal; the accumulator starts at 0.1",
    "GradientDescentOptimizer": "w -= lr*g",
    "NovoGrad": "OpenSeq2Seq NovoGrad: the gradient over the layer's second moment of its "
                "norm (second_moment='openseq2seq', OpenSeq2Seq's code: v = |g|^2 every "
                "step, g/sqrt(v+epsilon); 'persistent', the paper's: a moving average, "
                "g/(sqrt(v)+epsilon)), weight decay added to the normalized gradient, then TF "
                "momentum; no bias correction",
}


def hyperparameters(cls: type, given: Mapping[str, Any]) -> dict[str, Any]:
    """The constructor's arguments with defaults, overridden by ``given`` (the recipe's), in
    the signature's order; ``params``/``learning_rate``/``name`` left out."""
    out: dict[str, Any] = {}
    for name, p in inspect.signature(cls.__init__).parameters.items():
        if name in ("self", "params", "learning_rate", "lr", "name") or p.kind in (
                p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if name in given:
            out[name] = given[name]
        elif p.default is not p.empty:
            out[name] = p.default
    out.update({k: v for k, v in given.items() if k not in out and k != "class"})
    return out
