"""Per-tensor L2 norms of float32 tensors: the one place every norm-taking path gets them.

On the CPU trainop's native kernel reads every tensor once over all threads and sums the
squares in double (``native.l2_norms``); elsewhere, or without the kernels,
``torch._foreach_norm`` (float32 accumulation). The gradient batch, ``global_norm`` and
``clip_by_global_norm`` all call this, so the fused pipeline and the TF functions applied one
by one measure the same norms.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from trainop.kernels import native

__all__ = ["float32_l2_norms"]


def float32_l2_norms(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """The L2 norm of each float32 tensor, as a 1-D float32 tensor on the first's device.

    Example:
        >>> import torch
        >>> float32_l2_norms([torch.tensor([3.0, 4.0]), torch.ones(4)]).tolist()
        [5.0, 2.0]
    """
    norms = native.l2_norms(tensors)
    if norms is not None:
        return norms
    device = tensors[0].device
    return torch.stack([n.to(device) for n in torch._foreach_norm(list(tensors), 2)])
