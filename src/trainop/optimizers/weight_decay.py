"""contrib's decoupled weight decay: ``AdamWOptimizer``, ``MomentumWOptimizer`` and
``extend_with_decoupled_weight_decay``."""

from __future__ import annotations

from typing import Any

from trainop.contract.hyper import Prepared
from trainop.contract.implementations import TRITON
from trainop.contract.optimizer import Optimizer
from trainop.contract.ranges import NON_NEGATIVE
from trainop.contract.validation import check_bool, describe
from trainop.optimizers.adam import AdamOptimizer
from trainop.optimizers.momentum import MomentumOptimizer

__all__ = [
    "AdamWOptimizer",
    "DecoupledWeightDecayExtension",
    "MomentumWOptimizer",
    "extend_with_decoupled_weight_decay",
]


class DecoupledWeightDecayExtension:
    """Mixin: ``var -= weight_decay * var`` before the base optimizer's update of each variable.

    Two meanings of ``weight_decay``, chosen at construction by ``decay_scaled_by_lr``:

    - ``False`` (TF's call shape, ``AdamWOptimizer(weight_decay, learning_rate=...)``): as in
      ``tf.contrib.opt``, the decay is NOT multiplied by the learning rate (OpenSeq2Seq's
      ``"AdamW"`` string multiplies ``wd`` by lr itself);
    - ``True`` (torch's call shape, ``AdamWOptimizer(params, lr=..., weight_decay=...)``, as
      ``ZeroRedundancyOptimizer``, Lightning or RETURNN's torch engine build it): torch's
      meaning, ``var -= lr * weight_decay * var`` with the step's learning rate (a schedule's
      too), so ``lr = 0`` leaves ``var`` as it is.

    ``None`` (the default) is ``False``; the torch-style wrapper (``contract/torch_style.py``)
    passes ``True`` for a call with the parameters first or ``lr=``. The base update does not
    read ``var``, so ``var_new = var - d * var - base_step(g)`` with ``d = weight_decay`` or
    ``lr * weight_decay``.
    Sparse gradients decay only the touched rows, then run the base sparse update (for Adam
    that still moves every row).

    ``decay_var_list`` (in ``apply_gradients`` and ``minimize``): only those variables decay;
    ``None`` or ``[]`` decays every updated variable. Upstream ignores the list in ``minimize``
    (quirk Q1); trainop honours it there too. ``weight_decay`` may be a float >= 0, a tensor or a
    callable; a callable is evaluated once per apply (upstream breaks on callables, quirk Q2).
    It is used at the variable's dtype without first rounding to float32, as upstream does.

    Args:
        weight_decay (float | Tensor | Callable): non-negative, the decoupled decay.
        decay_scaled_by_lr (bool | None): ``True``: torch's meaning of ``weight_decay``
            (``w -= lr * wd * w``); ``False``: contrib's (``w -= wd * w``); ``None``: torch's for
            a torch-style call (parameters first, or ``lr=``), else contrib's.
    """

    _exact_keys = ("weight_decay",)
    IMPLEMENTATIONS = ("reference", "foreach")

    def __init__(self, weight_decay, *args, decay_scaled_by_lr: bool | None = None,
                 **kwargs) -> None:
        self._weight_decay_default = weight_decay
        self._decay_scaled_by_lr = (False if decay_scaled_by_lr is None
                                    else check_bool("decay_scaled_by_lr", decay_scaled_by_lr))
        self._decay_ids: set[int] | None = None
        self._in_sparse = False  # True while the base's sparse rule runs the dense rule on rows
        super().__init__(*args, **kwargs)

    @property
    def decay_scaled_by_lr(self) -> bool:
        """Whether ``weight_decay`` has torch's meaning (``var -= lr * wd * var``) rather than
        contrib's (``var -= wd * var``); fixed at construction."""
        return self._decay_scaled_by_lr

    def _extra_defaults(self) -> dict[str, Any]:
        return {"weight_decay": self._weight_decay_default}

    def _prepare(self, values, step) -> Prepared:
        """The base's hyperparameters, with ``weight_decay`` the decay this step applies:
        ``lr * weight_decay`` where the decay has torch's meaning."""
        prepared = super()._prepare(values, step)
        if not self._decay_scaled_by_lr:
            return prepared
        hp = prepared.values
        return Prepared({**hp, "weight_decay": hp["lr"] * hp["weight_decay"]}, prepared.exact)

    def _decays(self, var) -> bool:
        return self._decay_ids is None or id(var) in self._decay_ids

    def _choose_implementation(self, dtype, device, hp) -> str:
        # A decay_var_list is per variable; the multi-tensor paths see lists/views, not vars.
        if self._decay_ids is not None:
            return "reference"
        chosen = super()._choose_implementation(dtype, device, hp)
        if chosen == TRITON and not self._triton_decays_first:
            return "foreach"  # the base's Triton rule has no decay: the list path decays
        return chosen

    def _decoupled_weight_decay(self, hp, scalar=float):
        return scalar(hp.weight_decay)

    def _apply_dense(self, var, grad, slots, hp, non_slot) -> None:
        # Not again when the base's sparse rule runs this dense rule on the gathered rows.
        if self._decays(var) and not self._in_sparse:
            var.sub_(var * hp.weight_decay)
        super()._apply_dense(var, grad, slots, hp, non_slot)

    def _native_sparse_rule(self, var, slots, hp, non_slot):
        return None  # the decay of the touched rows comes first, in _apply_sparse

    def _sparse_is_dense_on_rows(self) -> bool:
        # the base's sparse rule (which runs after the touched rows' decay)
        mro = type(self).__mro__
        base = mro[mro.index(DecoupledWeightDecayExtension) + 1:]
        owner = next(c for c in base if "_apply_sparse" in vars(c))
        return owner is Optimizer and self._elementwise

    def _triton_sparse_rule(self, var, slots, hp, non_slot):
        """The base's Triton sparse rule, whose kernel decays the touched rows first (its
        ``wd``: MomentumW's rows, AdamW's every-row rule; the Triton path is chosen only for
        such a base, ``_triton_decays_first``)."""
        if not self._decays(var):
            return None
        return super()._triton_sparse_rule(var, slots, hp, non_slot)

    def _apply_sparse(self, var, rows, slots, hp, non_slot) -> None:
        if self._decays(var):
            var.index_add_(0, rows.indices, var.index_select(0, rows.indices) * -hp.weight_decay)
        self._in_sparse = True
        try:
            super()._apply_sparse(var, rows, slots, hp, non_slot)
        finally:
            self._in_sparse = False

    def apply_gradients(self, grads_and_vars, global_step=None, name=None, decay_var_list=None,
                        **gate):
        """As ``Optimizer.apply_gradients``; ``decay_var_list`` limits which variables decay."""
        if decay_var_list is not None:
            try:
                decay_ids = {id(v) for v in decay_var_list}
            except TypeError:
                raise TypeError("Expected `decay_var_list` to be an iterable of tensors or None, "
                                f"got {describe(decay_var_list)}") from None
            self._decay_ids = decay_ids or None
        try:
            return super().apply_gradients(grads_and_vars, global_step=global_step, name=name,
                                           **gate)
        finally:
            self._decay_ids = None

    def minimize(self, loss, global_step=None, var_list=None, gate_gradients=1,
                 aggregation_method=None, colocate_gradients_with_ops=False, name=None,
                 grad_loss=None, decay_var_list=None):
        """As ``Optimizer.minimize``; ``decay_var_list`` is honoured (upstream ignores it)."""
        grads_and_vars = self.compute_gradients(
            loss, var_list=var_list, gate_gradients=gate_gradients,
            aggregation_method=aggregation_method,
            colocate_gradients_with_ops=colocate_gradients_with_ops, grad_loss=grad_loss)
        return self.apply_gradients(grads_and_vars, global_step=global_step, name=name,
                                    decay_var_list=decay_var_list)


def extend_with_decoupled_weight_decay(base: type) -> type:
    """A subclass of ``base`` with decoupled weight decay; its constructor is
    ``(weight_decay, *base_args, **base_kwargs)`` and it keeps the base's default name.

    Example:
        >>> import trainop
        >>> AdamWithDecay = trainop.extend_with_decoupled_weight_decay(trainop.AdamOptimizer)
        >>> opt = AdamWithDecay(0.01, learning_rate=0.001)
        >>> opt.get_name()
        'Adam'
    """
    if not (isinstance(base, type) and issubclass(base, Optimizer)):
        raise TypeError(f"Expected `base` to be a trainop.Optimizer subclass, got {describe(base)}")
    ranges = {**base._ranges, "weight_decay": NON_NEGATIVE}
    return type(f"{base.__name__}WithDecoupledWeightDecay",
                (DecoupledWeightDecayExtension, base),
                {"_ranges": ranges, "__doc__": DecoupledWeightDecayExtension.__doc__,
                 "__module__": base.__module__})


class AdamWOptimizer(DecoupledWeightDecayExtension, AdamOptimizer):
    """AdamW, as ``tf.contrib.opt.AdamWOptimizer``: Adam plus decoupled weight decay.

    Update rule: ``var -= weight_decay * var`` (contrib's, not scaled by lr; TF's call shape)
    or ``var -= lr * weight_decay * var`` (torch's ``AdamW``; torch's call shape), then the
    Adam update (TF's, epsilon hat: not torch's).

    The arguments: ``weight_decay`` and ``decay_scaled_by_lr`` as
    ``DecoupledWeightDecayExtension``, the others as the base optimizer.

    Example:
        >>> import torch, trainop
        >>> w = torch.tensor([1.0, 2.0], requires_grad=True)
        >>> trainop.AdamWOptimizer(0.01).apply_gradients([(torch.tensor([0.1, 0.1]), w)])
        >>> [round(x, 6) for x in w.tolist()]  # 1 - 0.01*1 - 0.001, 2 - 0.01*2 - 0.001
        [0.989, 1.979]

    Reference: TF 1.15 ``tf.contrib.opt`` (Loshchilov & Hutter, "Decoupled Weight Decay
    Regularization").
    """

    _ranges = {**AdamOptimizer._ranges, "weight_decay": NON_NEGATIVE}
    IMPLEMENTATIONS = AdamOptimizer.IMPLEMENTATIONS

    def _fused_supported(self, dtype, device, hp) -> bool:
        # torch's kernel scales the decay by its lr, so the mapping divides by it: lr > 0.
        return (super()._fused_supported(dtype, device, hp) and self._decay_ids is None
                and isinstance(hp.weight_decay, float) and hp.lr > 0)

    def __init__(self, weight_decay, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8,
                 use_locking: bool = False, name: str = "AdamW", *, params=None,
                 implementation: str | None = None,
                 decay_scaled_by_lr: bool | None = None) -> None:
        super().__init__(weight_decay, learning_rate=learning_rate, beta1=beta1, beta2=beta2,
                         epsilon=epsilon, use_locking=use_locking, name=name, params=params,
                         implementation=implementation, decay_scaled_by_lr=decay_scaled_by_lr)


class MomentumWOptimizer(DecoupledWeightDecayExtension, MomentumOptimizer):
    """MomentumW, as ``tf.contrib.opt.MomentumWOptimizer``: Momentum plus decoupled decay.

    Update rule: ``var -= weight_decay * var`` (contrib's, not scaled by lr; TF's call shape)
    or ``var -= lr * weight_decay * var`` (torch's meaning; torch's call shape), then the
    Momentum update.

    The arguments: ``weight_decay`` and ``decay_scaled_by_lr`` as
    ``DecoupledWeightDecayExtension``, the others as the base optimizer.

    Example:
        >>> import trainop
        >>> opt = trainop.MomentumWOptimizer(0.01, learning_rate=0.001, momentum=0.9)

    Reference: TF 1.15 ``tf.contrib.opt.MomentumWOptimizer``.
    """

    _ranges = {**MomentumOptimizer._ranges, "weight_decay": NON_NEGATIVE}
    # torch's SGD decay is coupled: no fused map; trainop's C kernel decays first, as contrib.
    IMPLEMENTATIONS = ("reference", "foreach", "native")

    def __init__(self, weight_decay, learning_rate, momentum, use_locking: bool = False,
                 name: str = "MomentumW", use_nesterov: bool = False, *, params=None,
                 implementation: str | None = None,
                 decay_scaled_by_lr: bool | None = None) -> None:
        super().__init__(weight_decay, learning_rate=learning_rate, momentum=momentum,
                         use_locking=use_locking, name=name, use_nesterov=use_nesterov,
                         params=params, implementation=implementation,
                         decay_scaled_by_lr=decay_scaled_by_lr)
