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

import operator
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from trainop import _huge_pages as huge_pages
from trainop._step_plan import Bucket, StepPlan
from trainop._validation import describe

if TYPE_CHECKING:
    from trainop.optimizer import Optimizer

__all__ = ["FlatBucket", "FlatLayout", "flatten"]


@dataclass
class FlatBucket:
    """The parameters of one param group and dtype laid out in one buffer."""

    group_index: int
    params: list[torch.Tensor]
    offsets: list[int]
    param_buffer: torch.Tensor
    grad_buffer: torch.Tensor
    grad_views: list[torch.Tensor]
    slot_buffers: dict[str, torch.Tensor]
    data_ptrs: list[int]
    whole: bool  # True: slots are buffers too and the rule is elementwise: one call per step


@dataclass
class FlatLayout:
    """Every flat bucket of an optimizer, and the parameters left outside the buffers."""

    buckets: list[FlatBucket]
    loose: set[int] = field(default_factory=set)  # ids of parameters not flattened

    def __post_init__(self) -> None:
        self._grad_views = {id(p): v for b in self.buckets
                            for p, v in zip(b.params, b.grad_views, strict=True)}

    def owns_grad(self, p: torch.Tensor) -> bool:
        """Whether ``p.grad`` is (still) its view into a gradient buffer."""
        return self._grad_views.get(id(p)) is p.grad


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
    from trainop.optimizer import Optimizer

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


class FlatPlan(StepPlan):
    """A ``StepPlan`` whose whole buckets are the flat buffers (one tensor each)."""

    def __init__(self, layout: FlatLayout, plan: StepPlan) -> None:
        self.layout = layout
        whole = [b for b in layout.buckets if b.whole]
        self.flat_params = [p for b in whole for p in b.params]
        self.flat_views = [v for b in whole for v in b.grad_views]
        self.flat_ptrs = [ptr for b in whole for ptr in b.data_ptrs]
        whole_ids = {id(p) for p in self.flat_params}
        self.loose = [p for p in plan.params if id(p) not in whole_ids]
        buckets, params = [], []
        for b in whole:
            buckets.append(Bucket(b.group_index, [b.param_buffer],
                                  {n: [buf] for n, buf in b.slot_buffers.items()},
                                  len(params), len(params) + 1))
            params.append(b.param_buffer)
        for bucket in plan.buckets:
            keep = [i for i, p in enumerate(bucket.params) if id(p) not in whole_ids]
            if not keep:
                continue
            ps = [bucket.params[i] for i in keep]
            buckets.append(Bucket(bucket.group_index, ps,
                                  {n: [s[i] for i in keep] for n, s in bucket.slots.items()},
                                  len(params), len(params) + len(ps)))
            params.extend(ps)
        super().__init__(params, buckets, plan.groups)
        self._loose_plan = StepPlan(self.loose, [], plan.groups)

    def gradients(self) -> list[torch.Tensor] | None:
        if [p.data_ptr() for p in self.flat_params] != self.flat_ptrs:
            bad = next(i for i, p in enumerate(self.flat_params)
                       if p.data_ptr() != self.flat_ptrs[i])
            raise ValueError(
                f"A flattened parameter (shape {tuple(self.flat_params[bad].shape)}) was replaced "
                "after trainop.flatten (its data is no longer a view into the flat buffer); "
                "flatten a fresh optimizer after changing parameters")
        grads = [p.grad for p in self.flat_params]
        if not all(map(operator.is_, grads, self.flat_views)) and not self._reattach(grads):
            return None
        loose = self._loose_plan.gradients() if self.loose else []
        if loose is None:
            return None
        flat_grads = [b.grad_buffer for b in self.layout.buckets if b.whole]
        return flat_grads + loose


    def _reattach(self, grads: list[torch.Tensor | None]) -> bool:
        """Gradients that are no longer their views (``model.zero_grad()`` set them to None, or
        autograd created new ones) go back into the buffer: a dense gradient is copied into its
        view, a missing one becomes zeros, and the view is ``.grad`` again. Returns False, and
        changes nothing, if some gradient cannot (sparse, or of another shape/dtype/device)."""
        moved = [(p, g, v) for p, g, v in zip(self.flat_params, grads, self.flat_views,
                                                strict=True) if g is not v]
        for _, g, v in moved:
            if g is not None and (g.layout != torch.strided or g.shape != v.shape
                                  or g.dtype != v.dtype or g.device != v.device):
                return False
        with torch.no_grad():
            for p, g, v in moved:
                if g is None:
                    v.zero_()
                else:
                    v.copy_(g)
                p.grad = v
        return True


def flat_plan(layout: FlatLayout, plan: StepPlan | None) -> StepPlan | None:
    return None if plan is None else FlatPlan(layout, plan)


def zero_flat_grads(layout: FlatLayout) -> None:
    """Zero every gradient buffer (the views stay attached to their parameters)."""
    grads = [b.grad_buffer for b in layout.buckets]
    if grads:
        torch._foreach_zero_(grads)


def relink(layout: FlatLayout) -> None:
    """After the layout was copied with its optimizer: make every parameter and gradient
    view a view of the copied buffers again and record the new addresses. ``deepcopy`` keeps
    views as views (nothing to do); ``pickle`` copies each view on its own, so the values go
    back into the buffers (the slots follow when the next step re-attaches the state)."""
    with torch.no_grad():
        for b in layout.buckets:
            for i, (p, offset) in enumerate(zip(b.params, b.offsets, strict=True)):
                span = slice(offset, offset + p.numel())
                view = b.param_buffer[span].view_as(p)
                if p.data_ptr() != view.data_ptr():
                    view.copy_(p.detach())
                    p.data = view
                grad_view = b.grad_buffer[span].view_as(p)
                old = b.grad_views[i]
                if old.data_ptr() != grad_view.data_ptr():
                    grad_view.copy_(old)
                    b.grad_views[i] = grad_view
                    if p.grad is old or p.grad is None:
                        p.grad = grad_view
            b.data_ptrs = [p.data_ptr() for p in b.params]


def reattach(layout: FlatLayout, optimizer: Any) -> None:
    """After the state changed (``load_state_dict``, a slot replaced by the user, new slots
    made after a reset): copy every slot that is not its view into the view, and make the view
    the parameter's state again. A slot missing from the state stays missing (the next step
    makes a fresh one, which the step after that copies in)."""
    with torch.no_grad():
        for b in layout.buckets:
            for p, offset in zip(b.params, b.offsets, strict=True):
                state = optimizer.state.get(p)
                if not state:
                    continue
                span = slice(offset, offset + p.numel())
                for name, buf in b.slot_buffers.items():
                    slot = state.get(name)
                    if slot is None or slot.data_ptr() == buf[span].data_ptr():
                        continue
                    view = buf[span].view_as(p)
                    view.copy_(slot)
                    state[name] = view


