"""The plan side of flat buffers (see ``contract.flat``): the layout of the buffers, the step
plan over them, and the upkeep of the views (re-attaching gradients and slots, relinking after
a copy). Below the optimizer: nothing here imports it; ``trainop.contract.flat.flatten`` builds the
layout from an optimizer.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from trainop.contract.step_plan import Bucket, StepPlan
from trainop.kernels.native._binding import pointers

__all__ = ["FlatBucket", "FlatLayout", "FlatPlan", "flat_plan", "reattach", "relink",
           "zero_flat_grads"]


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


class FlatPlan(StepPlan):
    """A ``StepPlan`` whose whole buckets are the flat buffers (one tensor each)."""

    def __init__(self, layout: FlatLayout, plan: StepPlan) -> None:
        self.layout = layout
        whole = [b for b in layout.buckets if b.whole]
        self.flat_params = [p for b in whole for p in b.params]
        self.flat_views = [v for b in whole for v in b.grad_views]
        self.flat_ptrs = [ptr for b in whole for ptr in b.data_ptrs]
        self.spans = [(b.grad_buffer, offset) for b in whole for offset in b.offsets]
        # where each view belongs in its buffer (not where it is now: a ``p.grad.data = t``
        # before the first step must be noticed too)
        self.view_ptrs = np.array([buf.data_ptr() + offset * buf.element_size()
                                   for buf, offset in self.spans], dtype=np.uint64)
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
        ptrs = pointers([self.flat_views]) if self.flat_views else self.view_ptrs
        if ptrs is None or not np.array_equal(ptrs, self.view_ptrs):
            self._rehome_views()
        loose = self._loose_plan._gradients() if self.loose else []
        if loose is None:
            return None
        flat_grads = [b.grad_buffer for b in self.layout.buckets if b.whole]
        # the buffers hold copies already; a loose gradient may share a buffer's memory
        self._shared = self._loose_plan._shared if self.loose else False
        return self.read_first(flat_grads + loose, start=len(flat_grads))


    def _rehome_views(self) -> None:
        """A gradient view given new memory in place (``p.grad.data = t``,
        ``p.grad.set_(t)``): its values are copied into the buffer and it becomes the view
        again; one of another shape, dtype or device raises ``ValueError`` (nothing changed)."""
        moved = [(i, v) for i, v in enumerate(self.flat_views)
                 if v.data_ptr() != int(self.view_ptrs[i]) or not v.is_contiguous()]
        for i, v in moved:
            p = self.flat_params[i]
            if (v.layout != torch.strided or v.shape != p.shape or v.dtype != p.dtype
                    or v.device != p.device):
                raise ValueError(
                    f"The gradient of a flattened parameter (shape {tuple(p.shape)}, "
                    f"{p.dtype}) was replaced in place by a tensor of shape {tuple(v.shape)}, "
                    f"{v.dtype}, layout {v.layout} on {v.device}; assign a gradient of the "
                    "parameter's shape, dtype and device")
        with torch.no_grad():
            for i, v in moved:
                buffer, offset = self.spans[i]
                span = buffer[offset:offset + v.numel()].view_as(v)
                span.copy_(v)
                v.data = span

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
                    if not isinstance(slot, torch.Tensor) or tuple(slot.shape) != tuple(p.shape):
                        raise ValueError(
                            f"Expected the slot {name!r} of a flattened parameter of shape "
                            f"{tuple(p.shape)} to have that shape, got "
                            f"{tuple(getattr(slot, 'shape', ()))} (it is copied into the flat "
                            "buffer, never broadcast)")
                    view = buf[span].view_as(p)
                    view.copy_(slot)
                    state[name] = view


