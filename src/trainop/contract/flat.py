"""Flat buffers: one update pass for any number of parameter tensors.

``trainop.flatten(optimizer)`` moves the optimizer's parameters, per param group and dtype, into
one contiguous buffer each: every parameter becomes a view into its buffer (the ``Parameter``
objects stay the same, so the model and the optimizer keep working), its ``.grad`` becomes a view
into a matching gradient buffer that autograd accumulates into in place (as DDP's
``gradient_as_bucket_view``), and its slots become views into slot buffers. A torch-style
``step()`` then updates each buffer with one call of the update rule, whatever the number of
tensors: the per-tensor overhead of a model with thousands of small tensors disappears.

Meaning stays per tensor: ``state_dict()`` exports ordinary per-parameter slots (checkpoints move
freely between flat and non-flat runs and to plain ``torch.optim``), ``get_slot`` returns the
parameter's own view, and an algorithm whose rule is not elementwise (NovoGrad's per-tensor
norms) keeps updating tensor by tensor over the views.

Rules and limits:

- ``zero_grad()`` zeroes the gradient buffers and keeps the views (``set_to_none`` is honoured
  for parameters outside the buffers only). Every flattened parameter is therefore updated at
  every step, with a zero gradient if it took no part in the backward pass (as with DDP's bucket
  views): leave such parameters out (``exclude=``) if that matters for your optimizer.
- A gradient that stopped being its view (``model.zero_grad()`` sets ``.grad`` to None, after
  which autograd makes new tensors) is copied back into the buffer at the next step (a missing
  one counts as zeros) and the view is re-attached, so the step stays one call per buffer; use
  the optimizer's ``zero_grad`` to avoid that extra copy.
- Not flattened (they take the normal path, transparently): parameters that are not contiguous
  or share their storage with other tensors, those of sparse-gradient modules of ``model``, and
  those in ``exclude``. A step in which some
  flattened parameter's ``.grad`` is not its view any more (a sparse gradient, a gradient set by
  hand) runs the normal path for all parameters; the views keep their values.
- Misuse raises ``ValueError``: flattening twice, a param group with parameters on several
  devices, an optimizer without parameters, and a parameter replaced (``p.data = ...``) after
  flattening (detected at the next step, before anything changes).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from trainop.contract.flat_plan import FlatBucket, FlatLayout
from trainop.contract.optimizer import Optimizer
from trainop.contract.validation import describe
from trainop.kernels import huge_pages

__all__ = ["FlatBucket", "FlatLayout", "flatten"]


def _eligible(p: torch.Tensor) -> bool:
    """A parameter that can become a view: dense, contiguous, alone in its storage."""
    return (p.layout == torch.strided and p.is_contiguous() and p.storage_offset() == 0
            and p.untyped_storage().nbytes() == p.numel() * p.element_size())


def flatten(optimizer: Optimizer, model: torch.nn.Module | None = None,
            exclude: Iterable[torch.Tensor] = ()) -> FlatLayout:
    """Lay out ``optimizer``'s parameters, gradients and slots in flat buffers (see module doc).

    Args:
        optimizer: a trainop optimizer constructed with its parameters (torch style).
        model: optional; the parameters of its modules that produce sparse gradients
            (``nn.Embedding``/``nn.EmbeddingBag`` with ``sparse=True``) are left outside, since a
            sparse gradient accumulated into a dense view would become dense.
        exclude: parameters to leave as they are (e.g. ones that often get no gradient, or
            that receive sparse gradients from code ``model`` does not show).

    Returns:
        The ``FlatLayout`` (also kept by the optimizer).

    Example:
        >>> import torch, trainop
        >>> model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
        >>> opt = trainop.AdamOptimizer(params=model.parameters(), learning_rate=0.01)
        >>> layout = trainop.flatten(opt)
        >>> len(layout.buckets), layout.buckets[0].param_buffer.numel()
        (1, 25)
    """
    if not isinstance(optimizer, Optimizer):
        raise TypeError(
            f"Expected `optimizer` to be a trainop.Optimizer, got {describe(optimizer)}")
    if optimizer._flat is not None:
        raise ValueError("This optimizer's parameters are already flattened "
                         "(trainop.flatten was called twice)")
    if not any(g["params"] for g in optimizer.param_groups):
        raise ValueError("trainop.flatten needs an optimizer constructed with its parameters "
                         "(torch style); this one has none yet")
    if model is not None and not isinstance(model, torch.nn.Module):
        raise TypeError(f"Expected `model` to be None or a torch.nn.Module, got {describe(model)}")
    excluded = {id(p) for p in exclude}
    if model is not None:
        excluded.update(id(p) for m in model.modules() if getattr(m, "sparse", False) is True
                        for p in m.parameters(recurse=False))
    for gi, group in enumerate(optimizer.param_groups):
        devices = {p.device for p in group["params"]}
        if len(devices) > 1:
            raise ValueError(f"param_groups[{gi}] has parameters on several devices "
                             f"{sorted(str(d) for d in devices)}; use one group per device")
    buckets: list[FlatBucket] = []
    loose: set[int] = set()
    with torch.no_grad():
        for gi, group in enumerate(optimizer.param_groups):
            by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
            for p in group["params"]:
                if id(p) in excluded or not _eligible(p):
                    loose.add(id(p))
                else:
                    by_dtype.setdefault(p.dtype, []).append(p)
            for params in by_dtype.values():
                buckets.append(_make_bucket(optimizer, gi, params))
    layout = FlatLayout(buckets, loose)
    optimizer._flat = layout
    optimizer._invalidate()
    return layout


def _make_bucket(optimizer: Optimizer, gi: int, params: list[torch.Tensor]) -> FlatBucket:
    group = optimizer.param_groups[gi]
    first = params[0]
    offsets, total = [], 0
    for p in params:
        offsets.append(total)
        total += p.numel()
    def buffer() -> torch.Tensor:
        return huge_pages.empty((total,), first.dtype, first.device)

    param_buffer, grad_buffer = buffer(), buffer().zero_()
    specs = optimizer._slot_specs(group)
    flat_specs = [s for s in specs if not s.scalar and s.dtype in (None, first.dtype)]
    slot_buffers = {s.name: buffer().fill_(s.fill) for s in flat_specs}
    grad_views = []
    for p, offset in zip(params, offsets, strict=True):
        span = slice(offset, offset + p.numel())
        param_buffer[span].copy_(p.detach().reshape(-1))
        old_grad = p.grad
        state = optimizer.state[p]
        old_slots = dict(state)
        p.data = param_buffer[span].view_as(p)
        grad_view = grad_buffer[span].view_as(p)
        if old_grad is not None and old_grad.layout == torch.strided:
            grad_view.copy_(old_grad)
        p.grad = grad_view
        grad_views.append(grad_view)
        for spec in specs:
            if spec.name in slot_buffers:
                view = slot_buffers[spec.name][span].view_as(p)
                if spec.name in old_slots:
                    view.copy_(old_slots[spec.name])
                state[spec.name] = view
            elif spec.name not in state:
                state.update({spec.name: optimizer._make_slots(p, group)[spec.name]})
    whole = optimizer._elementwise and len(flat_specs) == len(specs)
    return FlatBucket(gi, params, offsets, param_buffer, grad_buffer, grad_views, slot_buffers,
                      [p.data_ptr() for p in params], whole)


