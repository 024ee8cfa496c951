"""Per-tensor L2 norms of float32 tensors: the one place every norm-taking path gets them.

On the CPU trainop's native kernel reads every tensor once over all threads and sums the
squares in double (``native.l2_norms``); elsewhere, or without the kernels,
``torch._foreach_norm`` (float32 accumulation). The gradient batch, ``global_norm`` and
``clip_by_global_norm`` all call this, so the fused pipeline and the TF functions applied one
by one measure the same norms.

With ``implementation="triton"`` (the optimizer's explicit choice, never the default) the
norms come from the Triton read pass (``triton.l2_norms``: one launch over the whole list,
squares summed in float64 as the C kernel sums them, nothing read on the host), where the
Triton kernels run the tensors; elsewhere the paths above.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from trainop.kernels import native, triton

__all__ = ["float32_l2_norms", "read_pass_norms"]


def read_pass_norms(tensors: Sequence[torch.Tensor], implementation: str | None,
                    owner: Any = None) -> torch.Tensor | None:
    """The float32 norms of ``tensors`` (float32, or float16/bfloat16 read as they are) from
    the Triton read pass where ``implementation`` is ``"triton"`` and it runs them, else
    ``None``. ``owner``: the optimizer whose Triton entry keeps the read pass's layout (its
    own, shared with no other optimizer), or ``None``."""
    return triton.l2_norms(tensors, owner=owner) if implementation == "triton" else None


def float32_l2_norms(tensors: Sequence[torch.Tensor], *,
                     implementation: str | None = None, owner: Any = None) -> torch.Tensor:
    """The L2 norm of each float32 tensor, as a 1-D float32 tensor on the first's device;
    ``implementation="triton"``: by the Triton read pass where it runs them (``owner``: as
    in ``read_pass_norms``).

    Example:
        >>> import torch
        >>> float32_l2_norms([torch.tensor([3.0, 4.0]), torch.ones(4)]).tolist()
        [5.0, 2.0]
    """
    norms = read_pass_norms(tensors, implementation, owner)
    if norms is None:
        norms = native.l2_norms(tensors)
    if norms is not None:
        return norms
    device = tensors[0].device
    return torch.stack([n.to(device) for n in torch._foreach_norm(list(tensors), 2)])
