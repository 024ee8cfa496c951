"""Which implementation runs an update (``reference``, ``foreach``, ``fused``, ``native``,
``triton``) and the two generic ones every algorithm gets: the per-tensor rule over
``TensorList``s (foreach) and the hand-off to the dispatch. A mixin of ``Optimizer``;
algorithms override the hooks (``_native_rule``, ``_triton_rule``, ``_apply_fused``,
``_fused_supported``)."""

from __future__ import annotations

from typing import Any

import torch

from trainop.contract.gate import Gate
from trainop.contract.hyper import Prepared
from trainop.kernels import dispatch, native, triton
from trainop.kernels.chunking import chunked
from trainop.kernels.tensor_list import TensorList

__all__ = ["TRITON", "Implementations", "as_is"]

#: trainop's Triton kernels (``kernels.triton``): accepted by every optimizer, chosen only
#: when asked for (CUDA float32; CPU tensors only under ``TRITON_INTERPRET=1``).
TRITON = "triton"


def as_is(value: Any) -> Any:
    """A hyperparameter as it is (the Triton kernels read tensors on the device)."""
    return value


class Implementations:
    """The implementation choice and the generic update paths of ``Optimizer``."""

    def _check_implementation(self, params: list[torch.Tensor]) -> None:
        """An explicit ``fused``/``native`` choice that cannot run these parameters raises."""
        if self._implementation == "fused":
            for p in params:
                if p.dtype not in self._fused_dtypes:
                    raise ValueError(
                        f"implementation='fused' supports dtypes "
                        f"{[str(d) for d in self._fused_dtypes]}, got a parameter of "
                        f"dtype {p.dtype}; use implementation='foreach'")
        elif self._implementation == "native":
            if not native.available():
                raise ValueError(f"implementation='native' is unavailable here: "
                                 f"{native.unavailable_reason()}; use implementation='foreach'")
            for p in params:
                if p.device.type != "cpu" or p.dtype not in native.DTYPES:
                    raise ValueError(
                        f"implementation='native' runs CPU parameters of dtypes "
                        f"{[str(d) for d in native.DTYPES]}, got a parameter of dtype {p.dtype} "
                        f"on {p.device}; use implementation='foreach'")

    def _update(self, pairs, index: dict[int, int], prepared: dict[int, Prepared]) -> None:
        """Hand ``pairs`` to the dispatch (``kernels.dispatch.update_pairs``)."""
        dispatch.update_pairs(self, pairs, index, prepared, self.param_groups, self._gate)

    def _native_rule_of(self, var, slots, hp, non_slot):
        """``_native_rule`` for one variable: the rule, its slot tensors in the rule's order,
        the hyperparameters."""
        rule, slot_lists, hyper = self._native_rule(
            [var], {name: [slot] for name, slot in slots.items()}, hp, non_slot)
        return rule, [lst[0] for lst in slot_lists], hyper

    def _triton_rule_of(self, var, slots, hp, non_slot):
        """``_triton_rule`` for one variable (as ``_native_rule_of``)."""
        rule, slot_lists, hyper = self._triton_rule(
            [var], {name: [slot] for name, slot in slots.items()}, hp, non_slot)
        return rule, [lst[0] for lst in slot_lists], hyper

    def _sparse_rows_natively(self, var, indices, values, slots, hp, non_slot) -> bool:
        """The rows ``indices`` (repeats allowed) by the native row kernel, or False (see
        ``kernels.dispatch.sparse_rows_natively``)."""
        return dispatch.sparse_rows_natively(self, var, indices, values, slots, hp, non_slot)

    def _choose_implementation(self, dtype: torch.dtype, device: torch.device, hp: Any) -> str:
        """Precedence: the explicit ``implementation`` argument, then defaults by device and
        dtype: ``native`` (trainop's C kernels) for CPU float32/float64, else ``fused`` where
        the class maps TF's math onto a torch fused kernel for this dtype/device and these
        hyperparameters (CUDA), else ``foreach``. An explicit ``fused`` that a dynamic
        hyperparameter rules out for one step (e.g. momentum 0) runs ``foreach``. An explicit
        ``triton`` runs where the Triton kernels run the dtype and device
        (``kernels.triton.supports``), else ``foreach``."""
        if self._implementation == TRITON and triton.supports(dtype, device):
            return TRITON
        native_ok = self._native_supported(dtype, device, hp)
        if native_ok and self._implementation in (None, "native"):
            return "native"  # (what choose() gives; the fused check is not needed)
        return dispatch.choose(self._implementation, self.IMPLEMENTATIONS, native_ok,
                               self._fused_supported(dtype, device, hp))

    def _fused_supported(self, dtype: torch.dtype, device: torch.device, hp: Any) -> bool:
        return False

    def _native_supported(self, dtype: torch.dtype, device: torch.device, hp: Any) -> bool:
        """trainop's C kernels run CPU float32/float64 tensors (contiguity is checked per
        bucket); a class offers them by listing ``native`` and defining ``_native_rule``.
        The gate's multiplier and skip flag are applied inside the kernel (the gradients are
        not written)."""
        return "native" in self.IMPLEMENTATIONS and native.supports(dtype, device)

    def _native_rule(self, vars_: list[torch.Tensor], slots: dict[str, list], hp: Any,
                     non_slot: dict[str, torch.Tensor], scalar=float
                     ) -> tuple[str, list, list[float]]:
        """The C rule's name, its slot lists in the rule's order and its hyperparameters
        (see ``kernels/native/csrc/rules.h``), each through ``scalar`` (``float`` for C)."""
        raise NotImplementedError

    def _triton_rule(self, vars_: list[torch.Tensor], slots: dict[str, list], hp: Any,
                     non_slot: dict[str, torch.Tensor]) -> tuple[str, list, list[Any]]:
        """The Triton rule's name, slot lists and hyperparameters (Python numbers or 0-dim
        tensors, read by the kernels on the device, see ``kernels/triton``): the native rule's,
        with its hyperparameters as they are (``scalar``: no ``float()``, so a tensor learning
        rate is not read on the host). Adam and AdagradDA override it (their device state goes
        as tensors)."""
        return self._native_rule(vars_, slots, hp, non_slot, scalar=as_is)

    def _decoupled_weight_decay(self, hp: Any, scalar=float) -> Any:
        """contrib's decoupled decay ``var -= wd * var`` the fused/native/Triton kernels
        apply first (0 here; the weight-decay extension returns its ``weight_decay`` through
        ``scalar``: ``float`` for C, ``as_is`` for the Triton kernels)."""
        return 0.0

    def _apply_fused(self, vars_, grads, slots: dict[str, list], hp, non_slot,
                     gate: Gate) -> None:
        """The dense update of one bucket on torch's fused kernel; ``gate.fused_kwargs`` gives
        the kernel's ``grad_scale``/``found_inf`` arguments."""
        raise NotImplementedError

    def _apply_foreach(self, vars_, grads, slots: dict[str, list], hp, non_slot) -> None:
        """The per-tensor rule over ``TensorList``s: one foreach kernel per operation,
        over cache-sized pieces when the rule is elementwise (bit-identical to the reference)."""
        names = list(slots)
        lists = [vars_, grads, *slots.values()]
        pieces = chunked(lists) if self._elementwise else [lists]
        for v, g, *s in pieces:
            self._apply_dense(TensorList(v), TensorList(g),
                              {n: TensorList(x) for n, x in zip(names, s, strict=True)},
                              hp, non_slot)

