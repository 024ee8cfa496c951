"""TF's clipping functions (``tf.clip_by_global_norm`` and friends) on torch tensors.

Each function returns new tensors (its input is never modified). A sparse COO tensor plays the
role of ``tf.IndexedSlices``: its stored values count (duplicate indices separately) and are
scaled; indices and shape are kept.

- ``global_norm(t_list)``: ``sqrt(sum_i ||t_i||^2)``; ``None`` entries are ignored; an all-None
  list gives ``0.0`` (float32); tensors of different dtypes raise ``TypeError``.
- ``clip_by_global_norm(t_list, clip_norm, use_norm=None)``: every tensor is multiplied by
  ``clip_norm * min(1/norm, 1/clip_norm)``, even when nothing is clipped; a zero norm leaves the
  tensors unchanged; an inf or NaN norm makes EVERY output NaN (TF's behaviour, quirk Q7);
  returns ``(clipped, norm)`` with the unclipped norm.
- ``clip_by_norm(t, clip_norm, axes=None)``: ``t * clip_norm / max(||t||, clip_norm)``.
- ``clip_by_value(t, clip_value_min, clip_value_max)``: ``max(min(t, high), low)``; NaN stays.
- ``clip_by_average_norm(t, clip_norm)``: ``t * clip_norm * min(numel / ||t||, 1/clip_norm)``.

Difference from TF: float16/bfloat16 norms are accumulated in float32 and rounded once at the end
(TF accumulates in the tensor's dtype, which overflows sooner); numbers otherwise agree with
``tf.clip_by_*`` to float32 rounding.

Reference: TF 1.15 ``tensorflow/python/ops/clip_ops.py``.
"""

from __future__ import annotations

import collections.abc
import numbers
from typing import Any

import torch

from trainop.contract.validation import check_int, check_real, describe
from trainop.kernels.norms import float32_l2_norms
from trainop.processing._batch import _times, values_of
from trainop.processing._checks import (
    NON_NEGATIVE,
    POSITIVE,
    check_name_or_none,
    check_scalar,
    check_tensor,
)

__all__ = ["clip_by_average_norm", "clip_by_global_norm", "clip_by_norm", "clip_by_value",
           "global_norm"]


def _check_t_list(t_list: Any) -> list[torch.Tensor | None]:
    if isinstance(t_list, str | bytes) or not isinstance(t_list, collections.abc.Sequence):
        raise TypeError(f"Expected `t_list` to be a sequence of tensors, got {describe(t_list)}")
    out = list(t_list)
    for i, t in enumerate(out):
        if t is not None:
            check_tensor(f"t_list[{i}]", t)
            if not t.is_floating_point():
                raise TypeError(f"Expected t_list[{i}] to have a floating dtype, got {t.dtype}")
    return out


def _norm_of_norms(values: list[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    """``sqrt(sum ||v||^2)`` in ``dtype`` (float32 accumulation below float64)."""
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    kwargs = {} if dtype == torch.float64 else {"dtype": acc}
    device = values[0].device
    if all(v.dtype == torch.float32 for v in values):
        stacked = float32_l2_norms(values)  # the same norms as the gradient batch's
    else:
        stacked = torch.stack([n.to(device) for n in torch._foreach_norm(values, 2, **kwargs)])
    return stacked.square().sum().sqrt().to(dtype)


def global_norm(t_list: Any, name: str | None = None) -> torch.Tensor:
    """TF's ``global_norm``: the L2 norm of all tensors of ``t_list`` together.

    Args:
        t_list: a sequence (not a generator) of tensors or ``None``; sparse COO tensors count
            their stored values. All tensors must share one floating dtype.
        name: accepted for TF compatibility; no effect.

    Returns:
        A 0-dim tensor of the common dtype (float32 ``0.0`` if every entry is ``None``).

    Example:
        >>> import torch
        >>> from trainop.processing import global_norm
        >>> global_norm([torch.tensor([3.0]), None, torch.tensor([4.0])])
        tensor(5.)
    """
    tensors = _check_t_list(t_list)
    check_name_or_none(name)
    present = [t for t in tensors if t is not None]
    if not present:
        return torch.zeros((), dtype=torch.float32)
    dtypes = list(dict.fromkeys(str(t.dtype).replace("torch.", "") for t in present))
    if len(dtypes) > 1:
        raise TypeError(f"Expected every tensor of `t_list` to have the same dtype, got {dtypes}")
    return _norm_of_norms([values_of(t) for t in present], present[0].dtype)


def clip_by_global_norm(t_list: Any, clip_norm: Any, use_norm: Any = None,
                        name: str | None = None
                        ) -> tuple[list[torch.Tensor | None], torch.Tensor]:
    """TF's ``clip_by_global_norm``: scale every tensor by ``clip_norm / max(norm, clip_norm)``.

    Computed as TF computes it: ``scale = clip_norm * min(1/norm, 1/clip_norm)``, plus
    ``norm - norm`` (NaN when the norm is inf or NaN, which then poisons every output).

    Args:
        t_list: as for ``global_norm``; ``None`` entries stay ``None``.
        clip_norm: real number > 0, or a 0-dim floating tensor (its value is not read).
        use_norm: ``None`` (compute ``global_norm(t_list)``), or the norm to use as is
            (real number >= 0 or 0-dim tensor).
        name: no effect.

    Returns:
        ``(list_clipped, norm)``; ``norm`` is the unclipped global norm (or ``use_norm``).

    Example:
        >>> import torch
        >>> from trainop.processing import clip_by_global_norm
        >>> clipped, norm = clip_by_global_norm([torch.tensor([3.0, 4.0])], 1.0)
        >>> clipped[0], norm
        (tensor([0.6000, 0.8000]), tensor(5.))
    """
    tensors = _check_t_list(t_list)
    clip_norm = check_scalar("clip_norm", clip_norm, POSITIVE)
    if use_norm is not None:
        use_norm = check_scalar("use_norm", use_norm, NON_NEGATIVE)
    check_name_or_none(name)
    if use_norm is None:
        use_norm = global_norm(tensors)
    elif not isinstance(use_norm, torch.Tensor):
        use_norm = torch.tensor(use_norm, dtype=torch.float32)
    present = [t for t in tensors if t is not None]
    device = present[0].device if present else use_norm.device
    norm = use_norm.to(device)
    c = torch.as_tensor(clip_norm, dtype=norm.dtype).to(device)
    one = torch.ones((), dtype=norm.dtype, device=device)
    scale = c * torch.minimum(torch.reciprocal(norm), one / c)
    scale = scale + (norm - norm)
    return [None if t is None else _times(t, scale) for t in tensors], use_norm


def clip_by_norm(t: Any, clip_norm: Any, axes: Any = None, name: str | None = None
                 ) -> torch.Tensor:
    """TF's ``clip_by_norm``: ``t * clip_norm / max(||t||, clip_norm)`` (L2 over ``axes``).

    Args:
        t: a floating tensor (sparse COO: its stored values, norm over those values).
        clip_norm: real number > 0, or a 0-dim floating tensor.
        axes: ``None`` (all dimensions), an int or a sequence of ints.
        name: no effect.

    Example:
        >>> import torch
        >>> from trainop.processing import clip_by_norm
        >>> clip_by_norm(torch.tensor([[-3.0, 0.0, 0.0], [4.0, 0.0, 0.0]]), 4.0)
        tensor([[-2.4000,  0.0000,  0.0000],
                [ 3.2000,  0.0000,  0.0000]])
    """
    check_tensor("t", t)
    clip_norm = check_scalar("clip_norm", clip_norm, POSITIVE)
    check_name_or_none(name)
    values = values_of(t)
    dims = _check_axes(axes, values.dim())
    c = torch.as_tensor(clip_norm, dtype=values.dtype).to(values.device)
    l2sum = (values * values).sum(dim=dims, keepdim=True) if dims else values * values
    positive = l2sum > 0
    l2norm = torch.where(positive, torch.where(positive, l2sum, 1).sqrt(), l2sum)
    clipped = values * c / torch.maximum(l2norm, c)
    if t.is_sparse:
        return torch.sparse_coo_tensor(t._indices(), clipped, t.shape,
                                       is_coalesced=t.is_coalesced())
    return clipped


def _check_axes(axes: Any, rank: int) -> list[int]:
    if axes is None:
        return list(range(rank))
    items = [axes] if isinstance(axes, numbers.Integral) else axes
    if isinstance(items, str | bytes) or not isinstance(items, collections.abc.Iterable):
        raise TypeError(f"Expected `axes` to be None, an int or a sequence of ints, got "
                        f"{describe(axes)}")
    out = []
    for a in items:
        a = check_int("axes", a)
        if not -rank <= a < max(rank, 1):
            raise ValueError(f"Expected `axes` in [{-rank}, {rank}), got {a}")
        out.append(a % rank if rank else 0)
    return out


def clip_by_value(t: Any, clip_value_min: Any, clip_value_max: Any, name: str | None = None
                  ) -> torch.Tensor:
    """TF's ``clip_by_value``: ``maximum(minimum(t, clip_value_max), clip_value_min)``.

    NaN elements stay NaN; ±inf become the bounds. A sparse COO tensor has its stored values
    clipped.

    Args:
        t: a floating tensor.
        clip_value_min, clip_value_max: real numbers (``min <= max``) or tensors broadcastable
            to ``t``.
        name: no effect.

    Example:
        >>> import torch
        >>> from trainop.processing import clip_by_value
        >>> clip_by_value(torch.tensor([-5.0, 0.5, 5.0]), -1.0, 1.0)
        tensor([-1.0000,  0.5000,  1.0000])
    """
    check_tensor("t", t)
    low = _check_bound("clip_value_min", clip_value_min)
    high = _check_bound("clip_value_max", clip_value_max)
    if not isinstance(low, torch.Tensor) and not isinstance(high, torch.Tensor) and low > high:
        raise ValueError(f"Expected `clip_value_min` <= `clip_value_max`, got {low!r} > "
                         f"{high!r}")
    check_name_or_none(name)
    values = values_of(t)
    low_t = torch.as_tensor(low, dtype=values.dtype).to(values.device)
    high_t = torch.as_tensor(high, dtype=values.dtype).to(values.device)
    clipped = torch.maximum(torch.minimum(values, high_t), low_t)
    if t.is_sparse:
        return torch.sparse_coo_tensor(t._indices(), clipped, t.shape,
                                       is_coalesced=t.is_coalesced())
    return clipped


def _check_bound(name: str, value: Any) -> float | torch.Tensor:
    if isinstance(value, torch.Tensor):
        if not value.is_floating_point():
            raise TypeError(f"Expected `{name}` to be a real number or a floating-point tensor, "
                            f"got a tensor of dtype {value.dtype}")
        return value.detach()
    return check_real(name, value)


def clip_by_average_norm(t: Any, clip_norm: Any, name: str | None = None) -> torch.Tensor:
    """TF's ``clip_by_average_norm``: clip so that ``||t|| / numel(t) <= clip_norm``.

    Computed as TF does: ``t * clip_norm * min(numel * rsqrt(sum t^2), 1 / clip_norm)``. A
    sparse COO tensor is densified first (as TF converts an ``IndexedSlices``).

    Args:
        t: a floating tensor. clip_norm: real number > 0, or a 0-dim floating tensor.
        name: no effect.

    Example:
        >>> import torch
        >>> from trainop.processing import clip_by_average_norm
        >>> clip_by_average_norm(torch.tensor([3.0, 4.0]), 0.1)
        tensor([0.1200, 0.1600])
    """
    check_tensor("t", t)
    clip_norm = check_scalar("clip_norm", clip_norm, POSITIVE)
    check_name_or_none(name)
    dense = t.to_dense() if t.is_sparse else t
    c = torch.as_tensor(clip_norm, dtype=dense.dtype).to(dense.device)
    n = torch.tensor(float(dense.numel()), dtype=dense.dtype, device=dense.device)
    inv = torch.rsqrt((dense * dense).sum())
    one = torch.ones((), dtype=dense.dtype, device=dense.device)
    return dense * c * torch.minimum(inv * n, one / c)
