"""The Updater's TensorBoard summaries: ``debug_grad_summaries`` and ``log_grad_norm``.

``debug_grad_summaries`` (RETURNN TF, ``_post_process_grad`` step 3, after accumulation and
before noise and clipping): for every parameter, scalars of its gradient under
``grads/<name>/grad_of_<base>_<stat>`` and of the variable under ``vars/<name>/<base>_<stat>``
(``<name>``: the module's qualified parameter name, ``<base>``: its last part), the statistics
of RETURNN's ``variable_scalar_summaries_dict``: ``mean``, ``stddev`` (population), ``rms``,
``l2`` (``sqrt(l2_loss(x) * 0.5)``, i.e. ``||x|| / 2``), ``max``, ``min``; and
``global_grad_norm``, the global norm of the micro-step's raw gradients.
``log_grad_norm``: that norm as ``grad_norm:p2`` (the key RETURNN's engine logs it under).

Values stay on the device (``SummaryLog``) and are read only when written, on every
``frequency``-th update.
"""

from __future__ import annotations

import torch

from trainop.training.summaries import SummaryLog

__all__ = ["scalar_statistics", "updater_summaries"]


def scalar_statistics(x: torch.Tensor, name: str) -> dict[str, torch.Tensor]:
    """RETURNN's ``variable_scalar_summaries_dict(x, name)``: ``<name>_mean`` ... ``_min``."""
    xf = x.detach().float()
    mean = xf.mean()
    return {f"{name}_mean": mean,
            f"{name}_stddev": (xf - mean).square().mean().sqrt(),
            f"{name}_rms": xf.square().mean().sqrt(),
            f"{name}_l2": (xf.square().sum() / 2 * 0.5).sqrt(),
            f"{name}_max": xf.max(),
            f"{name}_min": xf.min()}


def updater_summaries(named: list[tuple[str, torch.Tensor, torch.Tensor | None]],
                      raw_norm: torch.Tensor | None, *, debug: bool,
                      log_grad_norm: bool, p: float = 2) -> SummaryLog:
    """The summaries of one update: ``named`` holds ``(name, variable, gradient)`` (the
    gradient as the update sees it before noise and clipping; ``None`` where it has none);
    ``raw_norm`` is logged as ``grad_norm:p<p>`` (RETURNN's key: ``p2``, ``p1``, ``pinf``)."""
    log = SummaryLog()
    if log_grad_norm:
        log.scalar(f"grad_norm:p{p:g}", raw_norm)
    if debug:
        log.scalar("global_grad_norm", raw_norm)
        for name, var, grad in named:
            base = name.rsplit(".", 1)[-1]
            if grad is not None:
                for tag, value in scalar_statistics(grad, f"grad_of_{base}").items():
                    log.scalar(f"grads/{name}/{tag}", value)
            for tag, value in scalar_statistics(var, base).items():
                log.scalar(f"vars/{name}/{tag}", value)
    return log
