"""``NovoGrad``: OpenSeq2Seq's layer-wise adaptive optimizer."""

from __future__ import annotations

import torch

from trainop.algorithms.novograd import novograd_denominator, novograd_update
from trainop.contract.optimizer import Optimizer, SlotSpec
from trainop.contract.ranges import NON_NEGATIVE, UNIT_OPEN_RIGHT
from trainop.kernels.chunking import chunked
from trainop.kernels.shards import local_shards
from trainop.kernels.tensor_list import TensorList

SECOND_MOMENT_MODES = ("persistent", "openseq2seq")


class NovoGrad(Optimizer):
    r"""NovoGrad (Ginsburg et al., 2019) with OpenSeq2Seq's arguments and defaults.

    Update rule per variable, with ``n2 = sum(g^2)`` (float32) and a scalar second moment
    (slot ``grad_norm_ema``, float32, 0-dim; upstream calls it ``nvgrad2_ema``)::

        v  = n2 at the first step, else beta2 * v + (1 - beta2) * n2
        d  = g / (sqrt(v) + epsilon) + weight_decay * var
        d *= (1 - beta1)                                     (grad_averaging only)
        m  = beta1 * m + d                                   (slot ``momentum``)
        var -= lr * m

    As math (\(\eta\): the learning rate, \(g_t\): the gradient, \(\theta\): the variable):

    $$
    \begin{gathered}
    v_t = \beta_2 v_{t-1} + (1-\beta_2)\,\lVert g_t\rVert^2\ (v_1 = \lVert g_1\rVert^2) \\
    d_t = c\left(\frac{g_t}{\sqrt{v_t} + \epsilon} + \lambda\,\theta_{t-1}\right)
    \quad (c = 1 - \beta_1 \text{ with grad\_averaging, else } 1) \\
    m_t = \beta_1 m_{t-1} + d_t \\
    \theta_t = \theta_{t-1} - \eta\,m_t
    \end{gathered}
    $$

    ``second_moment="openseq2seq"`` reproduces the code OpenSeq2Seq ships, for porting its
    recipes number for number: its second moment is never stored, so every step uses
    ``v = n2`` (``beta2`` has no effect, the slot stays 0) and ``d = g / sqrt(v + epsilon)``.
    The default ``"persistent"`` is the published algorithm; an OpenSeq2Seq recipe
    (``trainop.load_recipe``) builds ``"openseq2seq"`` unless it sets ``second_moment`` itself.
    Sparse gradients are densified (upstream takes a dense path too).

    Args:
        learning_rate (float | Tensor | Callable | Policy): non-negative (normally a policy).
        beta1 (float | Tensor | Callable): in [0, 1), the decay of the first moment.
        beta2 (float | Tensor | Callable): in [0, 1), the decay of the per-layer second moment.
        epsilon (float | Tensor | Callable): non-negative.
        weight_decay (float | Tensor | Callable): non-negative, added to the normalised gradient.
        grad_averaging (bool): scale the normalised gradient by ``1 - beta1``.
        second_moment (str): ``"persistent"`` or ``"openseq2seq"`` (see above).

    Example:
        >>> import torch, trainop
        >>> w = torch.tensor([1.0, 2.0], requires_grad=True)
        >>> opt = trainop.NovoGrad(0.1, beta1=0.9, beta2=0.5)
        >>> opt.apply_gradients([(torch.tensor([0.3, -0.4]), w)])
        >>> [round(x, 6) for x in w.tolist()]
        [0.94, 2.08]

    Reference: OpenSeq2Seq ``optimizers/novograd.py``; Ginsburg et al., "Stochastic Gradient
    Methods with Layer-wise Adaptive Moments for Training of Deep Networks" (2019).
    """

    _ranges = {"lr": NON_NEGATIVE, "beta1": UNIT_OPEN_RIGHT, "beta2": UNIT_OPEN_RIGHT,
               "epsilon": NON_NEGATIVE, "weight_decay": NON_NEGATIVE}
    _choices = {"second_moment": SECOND_MOMENT_MODES}
    IMPLEMENTATIONS = ("reference", "foreach", "native")
    _elementwise = False  # per-tensor norms: see _apply_foreach for how pieces are cut

    def __init__(self, learning_rate=1.0, beta1=0.95, beta2=0.98, epsilon=1e-8, weight_decay=0.0,
                 grad_averaging: bool = False, use_locking: bool = False,
                 name: str = "NovoGrad", second_moment: str = "persistent", *,
                 params=None,
                 implementation: str | None = None) -> None:
        super().__init__(params, {"lr": learning_rate, "beta1": beta1, "beta2": beta2,
                                  "epsilon": epsilon, "weight_decay": weight_decay,
                                  "grad_averaging": grad_averaging,
                                  "second_moment": second_moment},
                         use_locking=use_locking, name=name,
                         implementation=implementation)

    def _slot_specs(self, group):
        return (SlotSpec("momentum"),
                SlotSpec("grad_norm_ema", dtype=torch.float32, scalar=True,
                         nonnegative=True))

    def _denominator(self, grad, grad_norm_ema, hp):
        return novograd_denominator(grad, grad_norm_ema, beta2=hp.beta2, epsilon=hp.epsilon,
                                    persistent=hp.second_moment == "persistent")

    def _elementwise_update(self, var, grad, momentum, denominator, hp) -> None:
        novograd_update(var, grad, momentum, denominator=denominator, lr=hp.lr, beta1=hp.beta1,
                        weight_decay=hp.weight_decay, grad_averaging=hp.grad_averaging)

    def _native_rule(self, vars_, slots, hp, non_slot, scalar=float):
        # The 0-dim float32 moments go as a fourth list (one float each).
        return "novograd", [slots["momentum"], slots["grad_norm_ema"]], [
            scalar(hp.lr), scalar(hp.beta1), scalar(hp.beta2), scalar(hp.epsilon),
            scalar(hp.weight_decay), float(hp.grad_averaging),
            float(hp.second_moment == "persistent")]

    def _apply_dense(self, var, grad, slots, hp, non_slot) -> None:
        denominator = self._denominator(grad, slots["grad_norm_ema"], hp)
        momentum = slots["momentum"]
        local = local_shards([var], [grad], {"m": [momentum]})
        if local is not None:  # sharded alike (FSDP2): the whole norm, then the local shards
            (var,), (grad,), momentum = local[0], local[1], local[2]["m"][0]
        self._elementwise_update(var, grad, momentum, denominator, hp)

    def _apply_foreach(self, vars_, grads, slots, hp, non_slot) -> None:
        """Per-tensor denominators first (one norm per tensor), then the elementwise part over
        cache-sized pieces, each piece with its tensor's denominator."""
        denominators = self._denominator(TensorList(grads), TensorList(slots["grad_norm_ema"]),
                                         hp).tensors
        for v, g, m, c in chunked([vars_, grads, slots["momentum"]], per_tensor=[denominators]):
            self._elementwise_update(TensorList(v), TensorList(g), TensorList(m), TensorList(c),
                                     hp)

    def _triton_sparse_rule(self, var, slots, hp, non_slot):
        return self._triton_rule_of(var, slots, hp, non_slot)  # densified, as _apply_sparse

    def _apply_sparse(self, var, rows, slots, hp, non_slot) -> None:
        dense = torch.zeros_like(var).index_add_(0, rows.indices, rows.values)
        self._apply_dense(var, dense, slots, hp, non_slot)
