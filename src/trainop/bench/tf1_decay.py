"""contrib's decoupled weight decay rebuilt on a ``tf.compat.v1.train`` class, for the TF1 peer.

``tf.contrib.opt.MomentumWOptimizer`` and ``AdamWOptimizer`` (TF 1.15) are not shipped with TF 2.
They are TF1's Momentum and Adam with one op added per variable, ahead of the base class's
kernel (which has a control dependency on it):

- dense gradient: ``var <- var - weight_decay * var``;
- sparse gradient (rows ``I``, already deduplicated): ``var[I] <- var[I] - weight_decay *
  var[I]``, other rows untouched by the decay; the base sparse update then runs as usual (for
  Adam it still moves every row).

``weight_decay`` is used as given, converted straight to the variable's dtype (no float32
rounding first, unlike the base class's hyperparameters) and not scaled by the learning rate.
"""

from __future__ import annotations

from typing import Any

__all__ = ["with_decoupled_weight_decay"]


def with_decoupled_weight_decay(tf: Any, base: type) -> type:
    """A subclass of the ``tf.compat.v1.train`` class ``base`` that decays each variable before
    ``base``'s update; its constructor is ``(weight_decay, *base_args, **base_kwargs)``."""

    class DecoupledWeightDecay(base):
        def __init__(self, weight_decay: float, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._decoupled_weight_decay = weight_decay

        def _decay_factor(self, var: Any) -> Any:
            return tf.constant(self._decoupled_weight_decay, dtype=var.dtype)

        def _resource_apply_dense(self, grad: Any, var: Any) -> Any:
            decay = var.assign_sub(self._decay_factor(var) * var, read_value=False)
            with tf.control_dependencies([decay]):
                return super()._resource_apply_dense(grad, var)

        def _resource_apply_sparse(self, grad: Any, var: Any, indices: Any) -> Any:
            rows = tf.gather(var, indices)
            decay = tf.raw_ops.ResourceScatterSub(resource=var.handle, indices=indices,
                                                  updates=self._decay_factor(var) * rows)
            with tf.control_dependencies([decay]):
                return super()._resource_apply_sparse(grad, var, indices)

    DecoupledWeightDecay.__name__ = DecoupledWeightDecay.__qualname__ = (
        f"{base.__name__}WithDecoupledWeightDecay")
    return DecoupledWeightDecay
