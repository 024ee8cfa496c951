"""Layouts: how a TF variable's array becomes a torch parameter's, and back.

A layout maps a TF variable to a torch parameter (``to_torch(tf_tensor, torch_shape)``) and
back (``to_tf(torch_tensor)``). The same map is applied to the parameter's optimizer slots; a
layout may add a constant to the parameter alone (``lstm_bias_forget``). A layout with a
``part`` fills one part of a TF variable that several torch parameters share (TF's LSTM kernel
holds torch's ``weight_ih`` and ``weight_hh``): the parts are joined along axis 0 in ``part``
order when saving.

- ``identity``: the same array (biases, embeddings).
- ``transpose``: dense kernels, TF ``[in, out]`` <-> ``nn.Linear.weight`` ``[out, in]``.
- ``conv1d``: TF ``[width, in, out]`` <-> torch ``[out, in, width]``.
- ``conv2d``: TF HWIO ``[h, w, in, out]`` <-> torch OIHW ``[out, in, h, w]``.
- ``lstm_kernel_ih`` / ``lstm_kernel_hh``: TF1's ``LSTMCell`` / ``LSTMBlockCell`` kernel
  ``[input + hidden, 4h]`` with gates ``(i, j, f, o)`` <-> ``nn.LSTM``'s ``weight_ih_l0``
  ``[4h, input]`` and ``weight_hh_l0`` ``[4h, hidden]`` with gates ``(i, f, g, o)`` (``j`` is
  torch's ``g``): rows split, transposed, gate blocks reordered.
- ``lstm_bias``: TF's bias ``[4h]`` <-> ``bias_ih_l0`` with the gates reordered. TF adds
  ``forget_bias`` (default 1.0) to the f gate when it computes, torch does not:
  ``lstm_bias_forget(1.0)`` adds it to the parameter (not to its slots) so the torch model
  computes the same function. torch's ``bias_hh_l0`` has no TF counterpart: keep it at zero
  (map it to ``None`` to leave it alone).
- ``layout(to_torch, to_tf)``: a user-defined pair of functions ``tensor -> tensor``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

__all__ = ["Layout", "conv1d", "conv2d", "identity", "layout", "lstm_bias", "lstm_bias_forget",
           "lstm_kernel_hh", "lstm_kernel_ih", "transpose"]


@dataclass(frozen=True)
class Layout:
    """A pair of maps between a TF variable and a torch parameter (see the module doc).

    ``to_torch(tf_tensor, torch_shape)`` and ``to_tf(torch_tensor)`` apply to the parameter and
    its slots; ``param_offset(torch_shape)``, when set, is added to the parameter alone (after
    ``to_torch``; subtracted before ``to_tf``). ``part`` is this parameter's place among the
    parameters sharing one TF variable (joined along axis 0), ``None`` if it has it alone."""

    name: str
    to_torch: Callable[[torch.Tensor, tuple[int, ...]], torch.Tensor]
    to_tf: Callable[[torch.Tensor], torch.Tensor]
    part: int | None = None
    param_offset: Callable[[tuple[int, ...]], torch.Tensor] | None = None

    def __repr__(self) -> str:
        return f"<layout {self.name}>"


def _same(t, shape=None):
    return t


identity = Layout("identity", _same, _same)
"""The same tensor on both sides (the default of a plain name in ``names``)."""
transpose = Layout("transpose", lambda t, shape=None: t.t(), lambda t: t.t())
"""A dense kernel: TF ``[in, out]`` <-> torch ``nn.Linear.weight`` ``[out, in]``."""
conv1d = Layout("conv1d", lambda t, shape=None: t.permute(2, 1, 0),
                lambda t: t.permute(2, 1, 0))
"""A 1-D convolution kernel: TF ``[width, in, out]`` <-> torch ``[out, in, width]``."""
conv2d = Layout("conv2d", lambda t, shape=None: t.permute(3, 2, 0, 1),
                lambda t: t.permute(2, 3, 1, 0))
"""A 2-D convolution kernel: TF ``[h, w, in, out]`` <-> torch ``[out, in, h, w]``."""

# TF (i, j, f, o) <-> torch (i, f, g, o): swap the 2nd and 3rd of the four gate blocks (its own
# inverse).
_GATES = (0, 2, 1, 3)


def _swap_gates(t: torch.Tensor, axis: int) -> torch.Tensor:
    if t.shape[axis] % 4:
        raise ValueError(f"Expected an LSTM tensor whose axis {axis} splits into 4 gates, got "
                         f"shape {tuple(t.shape)}")
    blocks = t.chunk(4, dim=axis)
    return torch.cat([blocks[g] for g in _GATES], dim=axis)


def _kernel_rows(t: torch.Tensor, shape: tuple[int, ...], first: bool) -> torch.Tensor:
    if len(shape) != 2 or t.dim() != 2 or shape[1] > t.shape[0]:
        raise ValueError(f"Expected an LSTM kernel [input + hidden, 4h] for a torch weight of "
                         f"shape {tuple(shape)}, got shape {tuple(t.shape)}")
    n = shape[1]
    return t[:n] if first else t[t.shape[0] - n:]


lstm_kernel_ih = Layout(
    "lstm_kernel_ih", lambda t, shape: _swap_gates(_kernel_rows(t, shape, True), 1).t(),
    lambda t: _swap_gates(t, 0).t(), part=0)
"""TF's LSTM kernel ``[input + hidden, 4h]`` (gates i, j, f, o), its input rows <-> torch's
``weight_ih_l0`` ``[4h, input]`` (gates i, f, g, o)."""
lstm_kernel_hh = Layout(
    "lstm_kernel_hh", lambda t, shape: _swap_gates(_kernel_rows(t, shape, False), 1).t(),
    lambda t: _swap_gates(t, 0).t(), part=1)
"""TF's LSTM kernel, its hidden rows <-> torch's ``weight_hh_l0`` ``[4h, hidden]``."""
lstm_bias = Layout("lstm_bias", lambda t, shape=None: _swap_gates(t, 0),
                   lambda t: _swap_gates(t, 0))
"""TF's LSTM bias ``[4h]`` (gates i, j, f, o) <-> torch's ``bias_ih_l0`` (gates i, f, g, o)."""


def lstm_bias_forget(forget_bias: float) -> Layout:
    """``lstm_bias`` that adds TF's ``forget_bias`` to torch's f gate (the 2nd block of
    ``bias_ih_l0``) of the parameter, so the torch LSTM computes what TF's cell computed."""
    if isinstance(forget_bias, bool) or not isinstance(forget_bias, int | float):
        raise TypeError(f"Expected `forget_bias` to be a float, got {forget_bias!r}")

    def offset(shape: tuple[int, ...]) -> torch.Tensor:
        out = torch.zeros(shape, dtype=torch.float64)
        h = shape[0] // 4
        out[h:2 * h] = forget_bias
        return out

    return Layout(f"lstm_bias_forget({forget_bias})", lstm_bias.to_torch, lstm_bias.to_tf,
                  param_offset=offset)


def layout(to_torch: Callable[[torch.Tensor], torch.Tensor],
           to_tf: Callable[[torch.Tensor], torch.Tensor], name: str = "user") -> Layout:
    """A user-defined layout from a pair of functions (TF array -> torch array, and back);
    applied to the parameter and its slots. ``to_tf(to_torch(x))`` must give ``x`` back."""
    if not callable(to_torch) or not callable(to_tf):
        raise TypeError(f"Expected a layout to be a pair of functions (to_torch, to_tf), got "
                        f"{type(to_torch).__name__} and {type(to_tf).__name__}")
    return Layout(name, lambda t, shape=None: to_torch(t), to_tf)
