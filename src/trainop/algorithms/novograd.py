"""NovoGrad (Ginsburg et al., 2019), and OpenSeq2Seq's shipped variant.

Per variable ("layer"), with ``n2 = sum(g^2)`` in float32 and a scalar second moment ``ema``::

    persistent (the paper):  v = n2 if ema == 0 else beta2 * ema + (1 - beta2) * n2;  ema = v
                             d = g / (sqrt(v) + eps)
    openseq2seq (shipped):   v = n2 (the moment is never stored, so beta2 has no effect)
                             d = g / sqrt(v + eps)
    d += weight_decay * var                  (if weight_decay > 0)
    d *= (1 - beta1)                         (if grad_averaging)
    m  = beta1 * m + d;   var -= lr * m      (TF Momentum: lr outside the moment)

Computed in two parts so that the elementwise part can run over cache-sized pieces: the
per-tensor denominator (one norm read per tensor), then the elementwise rest.
"""

from __future__ import annotations

import torch


def novograd_denominator(grad: torch.Tensor, grad_norm_ema: torch.Tensor, *, beta2, epsilon,
                         persistent: bool) -> torch.Tensor:
    """The per-tensor denominator ``sqrt(v) + eps`` (persistent) or ``sqrt(n2 + eps)``
    (openseq2seq) as a 0-dim float32 tensor, updating ``grad_norm_ema`` in place."""
    # sum(float32(g)^2) as upstream; float16/bfloat16 accumulate in float32 without a copy.
    g32 = grad.float() if grad.dtype == torch.float64 else grad
    norm = torch.linalg.vector_norm(g32, dtype=torch.float32)
    if hasattr(norm, "full_tensor"):  # a sharded gradient (DTensor): the whole tensor's norm
        norm = norm.full_tensor()
    n2 = norm.square()
    if persistent:
        v = torch.where(grad_norm_ema == 0, n2, grad_norm_ema * beta2 + n2 * (1 - beta2))
        grad_norm_ema.copy_(v)
        return v.sqrt() + epsilon
    return (n2 + epsilon).sqrt()


def novograd_update(var: torch.Tensor, grad: torch.Tensor, momentum: torch.Tensor, *,
                    denominator, lr, beta1, weight_decay, grad_averaging: bool) -> None:
    """The elementwise part, in upstream's order: ``d = g / denominator (+ wd * var)
    (* (1 - beta1))``, ``m = beta1 * m + d``, ``var -= lr * m``."""
    d = grad / denominator.to(var.dtype)
    if weight_decay > 0:
        d = d + var * weight_decay
    if grad_averaging:
        d = d * (1 - beta1)
    momentum.mul_(beta1).add_(d)
    var.sub_(momentum * lr)
