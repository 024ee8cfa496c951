"""One TF array to one torch tensor through a layout, with the checks a load makes first."""

from __future__ import annotations

import torch

from trainop.interfaces.checkpoints.layouts import Layout

__all__ = ["to_torch", "to_tf"]


def to_torch(tensor: torch.Tensor, layout: Layout, shape: tuple[int, ...], dtype: torch.dtype,
             what: str, *, param: bool) -> torch.Tensor:
    """``tensor`` (TF's) in torch's layout, checked: the expected dtype (no silent cast), the
    expected shape after the layout, finite. Raises ``ValueError``/``TypeError`` naming
    ``what``."""
    if tensor.dtype != dtype:
        raise TypeError(f"{what}: Expected dtype {dtype}, the checkpoint holds {tensor.dtype}")
    try:
        out = layout.to_torch(tensor, shape)
    except (ValueError, RuntimeError, IndexError) as err:
        raise ValueError(f"{what}: the layout {layout.name} cannot map the checkpoint's shape "
                         f"{tuple(tensor.shape)} to {shape}: {err}") from None
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != shape:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"{what}: Expected shape {shape} after the layout {layout.name}, got "
                         f"{got} (the checkpoint's shape is {tuple(tensor.shape)})")
    if param and layout.param_offset is not None:
        out = (out.to(torch.float64) + layout.param_offset(shape)).to(dtype)
    if out.dtype != dtype:
        raise TypeError(f"{what}: the layout {layout.name} changed the dtype to {out.dtype}")
    if (out.is_floating_point() or out.is_complex()) and not bool(torch.isfinite(out).all()):
        raise ValueError(f"{what}: Expected finite values, the checkpoint holds NaN or inf")
    return out.contiguous().clone()


def to_tf(tensor: torch.Tensor, layout: Layout, *, param: bool) -> torch.Tensor:
    """A torch tensor in TF's layout (a part of the TF variable for a ``part`` layout)."""
    value = tensor.detach().to("cpu")
    if param and layout.param_offset is not None:
        value = (value.to(torch.float64) - layout.param_offset(tuple(value.shape))).to(
            tensor.dtype)
    return layout.to_tf(value).contiguous()
