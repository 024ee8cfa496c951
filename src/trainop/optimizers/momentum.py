"""``MomentumOptimizer``: TF1's momentum (optionally Nesterov)."""

from __future__ import annotations

from trainop.algorithms.momentum import momentum
from trainop.contract.optimizer import Optimizer, SlotSpec, uniform_slots
from trainop.contract.ranges import NON_NEGATIVE
from trainop.kernels.fused import momentum_fused


class MomentumOptimizer(Optimizer):
    r"""Momentum, as ``tf.compat.v1.train.MomentumOptimizer``.

    Update rule (slot ``momentum``, zeros)::

        accum = momentum * accum + g
        var  -= lr * accum                                  (use_nesterov=False)
        var  -= lr * g + lr * momentum * accum              (use_nesterov=True, new accum)

    As math (\(\eta\): the learning rate, \(g_t\): the gradient, \(\theta\): the variable):

    $$
    \begin{gathered}
    a_t = \mu\,a_{t-1} + g_t \\
    \theta_t = \theta_{t-1} - \eta\,a_t
    \quad\text{(Nesterov: } \theta_t = \theta_{t-1} - \eta\,g_t - \eta\,\mu\,a_t\text{)}
    \end{gathered}
    $$

    Sparse: only touched rows move; the accumulator of untouched rows is NOT decayed.

    Args:
        learning_rate (float | Tensor | Callable | Policy): non-negative.
        momentum (float | Tensor | Callable): non-negative.
        use_nesterov (bool): Nesterov's variant (TF's formulation).

    Example:
        >>> import torch, trainop
        >>> w = torch.tensor([1.0, 2.0], requires_grad=True)
        >>> opt = trainop.MomentumOptimizer(2.0, 0.9)
        >>> opt.apply_gradients([(torch.tensor([0.1, 0.1]), w)])
        >>> opt.get_slot(w, "momentum")
        tensor([0.1000, 0.1000])

    Reference: TF 1.15 ``momentum.py``. The rule of ``torch.optim.SGD(momentum=m,
    dampening=0)`` (Nesterov included), equal to torch's to the bit only with
    ``implementation="fused"``, which runs torch's fused SGD kernel (float ``lr``, ``momentum``
    > 0; otherwise ``fused`` runs ``foreach``; in float64 for values float32 holds exactly, as
    TF rounds a Python ``lr`` and ``momentum`` to float32 first). The other implementations
    keep TF's order of
    operations and round differently from torch's SGD: per step at most 1 ulp of the larger of
    ``|var|`` before and after (a few ulps with Nesterov), adding up over steps.
    """

    _ranges = {"lr": NON_NEGATIVE, "momentum": NON_NEGATIVE}
    IMPLEMENTATIONS = ("reference", "foreach", "fused", "native")
    _triton_decays_first = True  # the momentum kernel's wd (MomentumW)

    def __init__(self, learning_rate, momentum, use_locking: bool = False,
                 name: str = "Momentum", use_nesterov: bool = False, *, params=None,
                 implementation: str | None = None) -> None:
        super().__init__(params, {"lr": learning_rate, "momentum": momentum,
                                  "use_nesterov": use_nesterov},
                         use_locking=use_locking, name=name,
                         implementation=implementation)

    @uniform_slots
    def _slot_specs(self, group):
        return (SlotSpec("momentum"),)

    def _fused_supported(self, dtype, device, hp) -> bool:
        # torch's SGD keeps no buffer for momentum 0, TF still writes its slot: foreach then.
        return (dtype in self._fused_dtypes and device.type in ("cpu", "cuda")
                and isinstance(hp.lr, float) and isinstance(hp.momentum, float)
                and hp.momentum > 0)

    def _apply_fused(self, vars_, grads, slots, hp, non_slot, gate) -> None:
        momentum_fused(vars_, grads, slots["momentum"], lr=hp.lr, momentum=hp.momentum,
                       use_nesterov=hp.use_nesterov, **gate.fused_kwargs(vars_[0].device))

    def _native_rule(self, vars_, slots, hp, non_slot, scalar=float):
        return "momentum", [slots["momentum"]], [
            scalar(hp.lr), scalar(hp.momentum), float(hp.use_nesterov),
            self._decoupled_weight_decay(hp, scalar)]  # MomentumW's decay

    def _apply_dense(self, var, grad, slots, hp, non_slot) -> None:
        momentum(var, grad, slots["momentum"], lr=hp.lr, momentum=hp.momentum,
                 use_nesterov=hp.use_nesterov)
