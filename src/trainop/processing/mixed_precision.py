"""OpenSeq2Seq's ``MixedPrecisionOptimizerWrapper``: float32 master copies of half-precision
variables, updated by an inner trainop optimizer, with loss scaling.

For each float16/bfloat16 model variable ``v16`` the wrapper keeps a float32 master copy ``v32``
(created from ``v16`` on first sight). Per step:

1. gradients of ``loss * S`` (``S``: the loss scale) w.r.t. the model variables;
2. each half gradient is paired with its master, standing for its float32 widening (exact; made
   when something reads it as a tensor, and never on the Triton path, whose kernels read the
   half gradient itself: ``Gradients.widen_on_use``); a registered regularizer adds
   ``S * dR(v32)/dv32`` in float32 (so a tiny regularization gradient does not underflow in
   half precision, OpenSeq2Seq PR #127); float32 variables keep their pairs;
3. every gradient is multiplied by ``1/S`` (pending, folded into the update);
4. the pipeline's stages (clipping, LARC, ...), then the overflow check: with an automatic
   scaler a non-finite gradient skips the update and only the scale changes;
5. the inner optimizer updates the masters (its slots are float32), and each updated master is
   copied back, saturated to the half dtype's range (±65504 for float16).

A static scale never skips (OpenSeq2Seq, quirk Q9); an int scale is accepted (upstream crashes).

Reference: OpenSeq2Seq ``open_seq2seq/optimizers/mp_wrapper.py``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch

from trainop.contract.arguments import check_loss
from trainop.contract.optimizer import Optimizer
from trainop.contract.validation import check_bool, describe
from trainop.processing._batch import Gradients
from trainop.processing._checkpoint import validate_wrapper_state
from trainop.processing._checks import check_state_keys
from trainop.processing.loss_scale import LossScale, LossScaler, as_loss_scaler
from trainop.processing.pipeline import GradientPipeline, PipelineFrontend

__all__ = ["MixedPrecisionOptimizerWrapper"]

_HALF = (torch.float16, torch.bfloat16)
_F32 = torch.float32
_DCP_HELPERS = "torch.distributed.checkpoint.state_dict"
_NOT_RESHARDABLE = (
    "Expected the optimizer of torch.distributed.checkpoint's get_optimizer_state_dict/"
    "set_optimizer_state_dict to update the model's own parameters, got a "
    "MixedPrecisionOptimizerWrapper's (its optimizer updates float32 masters, which have no "
    "parameter names in the model): save `wrapper.state_dict()` with dcp.save and load it "
    "with dcp.load into a fresh wrapper's `state_dict()`, then `wrapper.load_state_dict` "
    "(masters and slots are sharded like the model: it reshards; see docs/distributed.md)")


def _refuse_dcp_helpers(optimizer: Any) -> None:
    """A state-dict pre-hook of the wrapped optimizer: refuse, in one line, a call from
    torch.distributed.checkpoint's optimizer state-dict helpers, which would fail with a
    ``KeyError`` while naming the masters by the model's parameter names."""
    frame = sys._getframe(1)
    for _ in range(8):
        if frame is None:
            return
        if frame.f_globals.get("__name__") == _DCP_HELPERS:
            raise TypeError(_NOT_RESHARDABLE)
        frame = frame.f_back


def _is_half(t: torch.Tensor) -> bool:
    return t.dtype in _HALF


class MixedPrecisionOptimizerWrapper(PipelineFrontend):
    """Float32 master weights and loss scaling around a trainop optimizer.

    Args:
        optimizer: a ``trainop.Optimizer``. TF style (no params): masters are created when a
            variable is first seen. torch style (constructed with ``params``): its half-precision
            params are replaced, in its param groups, by their float32 masters here (it must not
            have state yet); ``step()`` then reads the model params' ``.grad``.
        loss_scale: ``None`` (1.0), a real number > 0 (static), or a loss scaler
            (``AutomaticLossScaler``, ``BackoffLossScaler``, ``LogMaxLossScaler``,
            ``StaticLossScaler``).

    State: the masters (``master(v16)``), the inner optimizer's slots (float32, on the masters)
    and the scaler's state; ``state_dict`` has all three.

    ``apply_gradients``/``minimize``/``step`` (from ``PipelineFrontend``): overflow check and
    scaler update, then, if applied, the inner update of the masters, ``global_step += 1`` and
    the saturating copy back to the half variables. ``apply_gradients`` pairs may name masters
    or the half variables (their gradients stand for their float32 widening) and hold
    gradients of the unscaled loss (as ``compute_gradients`` returns them); ``step()`` reads
    the ``.grad`` of ``scale_loss(loss)``.

    Example:
        >>> import torch, trainop
        >>> from trainop.processing import MixedPrecisionOptimizerWrapper, AutomaticLossScaler
        >>> w = torch.tensor([1.0, -2.0], dtype=torch.float16, requires_grad=True)
        >>> opt = MixedPrecisionOptimizerWrapper(trainop.GradientDescentOptimizer(0.5),
        ...                                      AutomaticLossScaler("Backoff",
        ...                                                          {"scale_max": 1024.0}))
        >>> x = torch.tensor([0.25, 0.5], dtype=torch.float16)
        >>> result = opt.minimize(lambda: (w * x).sum(), var_list=[w])
        >>> w.detach(), float(opt.loss_scale)
        (tensor([ 0.8750, -2.2500], dtype=torch.float16), 1024.0)
    """

    def __init__(self, optimizer: Any, loss_scale: Any = None) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"Expected `optimizer` to be a trainop.Optimizer, got "
                            f"{describe(optimizer)}")
        self.loss_scaler: LossScaler = as_loss_scaler(loss_scale)
        halves = [p for g in optimizer.param_groups for p in g["params"] if _is_half(p)]
        if any(optimizer.state.get(p) for p in halves):
            raise ValueError("Expected `optimizer` to have no state for its float16/bfloat16 "
                             "params yet (their slots must be created on the float32 masters)")
        self._inner = optimizer
        # master id -> model variable: the Triton path writes the model copy in its update
        # pass and records the masters it wrote (``kernels.dispatch``); the others copy here
        optimizer._half_copies = {}
        optimizer._copied_to_half = set()
        optimizer.register_state_dict_pre_hook(_refuse_dcp_helpers)
        self._masters: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._model_of: dict[int, torch.Tensor] = {}
        self._regularizers: dict[int, Callable[[torch.Tensor], torch.Tensor]] = {}
        self._model_params = [p for g in optimizer.param_groups for p in g["params"]]
        if halves:
            for group in optimizer.param_groups:
                group["params"] = [self._master(p) if _is_half(p) else p
                                   for p in group["params"]]
            optimizer._invalidate()
        self._unscale = LossScale(self.loss_scaler)
        self._pipeline = GradientPipeline(self)

    def _pipeline_parts(self):
        return self._inner, [self._unscale], self

    # ------------------------------------------------------------------ accessors
    @property
    def optimizer(self) -> Optimizer:
        """The inner optimizer (it updates the masters)."""
        return self._inner

    @property
    def pipeline(self) -> GradientPipeline:
        return self._pipeline

    @property
    def loss_scale(self) -> torch.Tensor:
        """The current loss scale ``S`` (0-dim float32)."""
        return self.loss_scaler.loss_scale

    def get_name(self) -> str:
        """The inner optimizer's name plus ``-MP`` (OpenSeq2Seq)."""
        return self._inner.get_name() + "-MP"

    def master(self, var: torch.Tensor) -> torch.Tensor:
        """The float32 master copy of the half-precision model variable ``var``."""
        entry = self._masters.get(id(var))
        if entry is None or entry[0] is not var:
            raise ValueError(f"Expected `var` to be a float16/bfloat16 variable with a master "
                             f"copy, got {describe(var)}")
        return entry[1]

    def master_params(self) -> list[torch.Tensor]:
        return [m for _, m in self._masters.values()]

    def get_slot(self, var: torch.Tensor, name: str) -> torch.Tensor | None:
        """The inner optimizer's slot of ``var`` (its master's slot for a half variable)."""
        entry = self._masters.get(id(var))
        if entry is not None and entry[0] is var:
            var = entry[1]
        return self._inner.get_slot(var, name)

    def get_slot_names(self) -> list[str]:
        return self._inner.get_slot_names()

    def variables(self) -> list[torch.Tensor]:
        return self._inner.variables()

    def add_regularizer(self, var: torch.Tensor,
                        regularizer: Callable[[torch.Tensor], torch.Tensor]) -> None:
        """Regularize the half variable ``var`` through its float32 master: the gradient of
        ``regularizer(v32)`` is added in float32 (OpenSeq2Seq's ``mp_regularizer_wrapper``; do not
        also add the regularization to the loss)."""
        if not isinstance(var, torch.Tensor) or not _is_half(var):
            raise TypeError(f"Expected `var` to be a float16/bfloat16 tensor (regularize float32 "
                            f"variables through the loss), got {describe(var)}")
        if not callable(regularizer):
            raise TypeError(f"Expected `regularizer` to be callable, got {describe(regularizer)}")
        self._master(var)
        self._regularizers[id(var)] = regularizer

    # ------------------------------------------------------------------ masters
    def _master(self, var: torch.Tensor) -> torch.Tensor:
        entry = self._masters.get(id(var))
        if entry is not None and entry[0] is var:
            return entry[1]
        master = var.detach().to(_F32).clone()
        self._masters[id(var)] = (var, master)
        self._inner._half_copies[id(master)] = var
        self._model_of[id(master)] = var
        return master

    def _regularization(self, var: torch.Tensor, master: torch.Tensor) -> torch.Tensor | None:
        fn = self._regularizers.get(id(var))
        if fn is None:
            return None
        with torch.enable_grad():
            leaf = master.detach().requires_grad_(True)
            value = fn(leaf)
            check_loss(value, "regularizer(var)")
            (grad,) = torch.autograd.grad(value, leaf, allow_unused=True)
        return None if grad is None else grad.to(_F32)

    def _to_masters(self, pairs, *, loss_scale: torch.Tensor | None) -> Gradients:
        """Model pairs -> master pairs; with ``loss_scale`` (gradients of the scaled loss), the
        regularization gradient ``S * dR/dv32`` is added in float32. A dense half gradient
        without regularization stays half, widened on use (``Gradients.widen_on_use``): the
        Triton update reads it as it is. A master gradient that is its half gradient (widened
        or not) names the half one as its norm source: the Triton read pass measures it there
        (``Gradients.read_norms_from``)."""
        out = []
        sources = []
        narrow = []
        for g, v in pairs:
            if not _is_half(v):
                out.append((g, v))
                if g is not None:
                    sources.append(g)
                continue
            master = self._master(v)
            source = g
            reg = None if loss_scale is None else self._regularization(v, master)
            if reg is not None:
                reg = reg * loss_scale.to(reg.device)
                g = source = reg if g is None else g.to(_F32) + reg
            elif g is not None and g.is_sparse:
                g = g.to(_F32)
            elif g is not None:
                narrow.append(len(out))
            out.append((g, master))
            if g is not None:
                sources.append(source)
        batch = Gradients(out, loss_scale=loss_scale)
        batch.widen_on_use(narrow)
        batch.read_norms_from(sources)
        return batch

    def _model_vars(self) -> list[torch.Tensor]:
        return [self._model_of.get(id(p), p)
                for g in self._inner.param_groups for p in g["params"]]

    # ------------------------------------------------------------------ pipeline hooks
    def _compute_gradients(self, loss, **kwargs) -> Gradients:
        if callable(loss) and not isinstance(loss, torch.Tensor):
            with torch.enable_grad():
                loss = loss()
        check_loss(loss, "loss")
        var_list = kwargs.pop("var_list")
        if var_list is None:
            var_list = self._model_vars()
        scale = self.loss_scaler.to(loss.device).loss_scale
        pairs = self._inner.compute_gradients(loss * scale, var_list=var_list, **kwargs)
        batch = self._to_masters(pairs, loss_scale=scale)
        batch.fold_loss_scale()
        return batch

    def _prepare_batch(self, batch: Gradients) -> None:
        """Pairs naming half variables -> their masters, a dense half gradient widened on use
        (as ``_to_masters``), a sparse one now."""
        for i, (g, v) in enumerate(batch.stored_pairs()):
            if _is_half(v):
                dense = g is not None and not g.is_sparse
                batch.replace_pair(i, g if dense or g is None else g.to(_F32),
                                   self._master(v), same_values=True)
                if dense:
                    batch.widen_on_use([i])

    def _batch_from_grads(self) -> Gradients:
        pairs = Gradients.from_grads(self._model_params).raw_pairs()
        device = next((g.device for g, _ in pairs if g is not None), None)
        if device is not None:
            self.loss_scaler.to(device)
        return self._to_masters(pairs, loss_scale=self.loss_scaler.loss_scale)

    def _after_apply(self, batch: Gradients, applied: torch.Tensor | None) -> None:
        written, self._inner._copied_to_half = self._inner._copied_to_half, set()
        if batch.keep is not None:  # zero-filtered masters were restored after the kernel
            written = set()         # wrote their copies: every copy is made again here
        for master in batch.present_vars():
            var = self._model_of.get(id(master))
            if var is None or id(master) in written:
                continue  # not a master, or its copy written by the update kernel
            top = torch.finfo(var.dtype).max
            value = master.clamp(-top, top).to(var.dtype)
            if applied is not None:
                value = torch.where(applied, value, var)
            var.copy_(value)

    def _zero_grad(self, set_to_none: bool) -> None:
        for p in self._model_params:
            if p.grad is not None:
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.detach_()
                    p.grad.zero_()

    # ------------------------------------------------------------------ TF / torch API
    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        """``loss * S``: backpropagate this before ``step()``."""
        return self._pipeline.scale_loss(loss)

    def compute_gradients(self, loss: Any, var_list: Any = None,
                          gate_gradients: int = Optimizer.GATE_OP,
                          aggregation_method: int | None = None,
                          colocate_gradients_with_ops: bool = False,
                          grad_loss: torch.Tensor | None = None) -> Gradients:
        """Float32 gradients for the masters (and float32 variables), as a batch that reads as
        the unscaled gradients (the ``1/S`` stays pending)."""
        return self._pipeline.compute_gradients(
            loss, var_list=var_list, gate_gradients=gate_gradients,
            aggregation_method=aggregation_method,
            colocate_gradients_with_ops=colocate_gradients_with_ops, grad_loss=grad_loss)


    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the model params' gradients."""
        check_bool("set_to_none", set_to_none)
        self._zero_grad(set_to_none)

    def state_dict(self) -> dict[str, Any]:
        """``{"optimizer": inner state_dict, "masters": [v32, ...], "loss_scaler": ...}``
        (masters in creation order)."""
        return {"optimizer": self._inner.state_dict(),
                "masters": [m.clone() for _, m in self._masters.values()],
                "loss_scaler": self.loss_scaler.state_dict()}

    def validate_state_dict(self, state_dict: Any) -> None:
        """Raise ``ValueError``/``TypeError`` if ``load_state_dict(state_dict)`` would not load
        (keys, the inner optimizer's checkpoint, masters, loss scaler); reads only."""
        check_state_keys(state_dict, ("optimizer", "masters", "loss_scaler"))
        masters = state_dict["masters"]
        if not isinstance(masters, list) or len(masters) != len(self._masters):
            raise ValueError(f"Expected {len(self._masters)} master copies in `state_dict`, got "
                             f"{describe(masters)}")
        validate_wrapper_state(self, state_dict)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a ``state_dict`` of a wrapper with the same variables; the half variables are
        set from the loaded masters (validated whole first: a rejected one changes nothing)."""
        self.validate_state_dict(state_dict)
        masters = state_dict["masters"]
        self._inner.load_state_dict(state_dict["optimizer"])
        self.loss_scaler.load_state_dict(state_dict["loss_scaler"])
        with torch.no_grad():
            for (var, master), saved in zip(self._masters.values(), masters, strict=True):
                master.copy_(saved)
                top = torch.finfo(var.dtype).max
                var.copy_(master.clamp(-top, top).to(var.dtype))

    def __iter__(self):
        """Not iterable: ``get_optimizer_state_dict(model, wrapper)`` takes an iterable of
        optimizers for anything not a ``torch.optim.Optimizer``; refused with the way that
        works."""
        raise TypeError(_NOT_RESHARDABLE)

    def __repr__(self) -> str:
        return (f"MixedPrecisionOptimizerWrapper({type(self._inner).__name__} "
                f"{self._inner.get_name()!r}, loss_scale={self.loss_scaler!r})")
