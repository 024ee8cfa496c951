"""The sides of the GPU suite (``trainop bench --gpu-suite``), each built on its own copies of
the same data: trainop's optimizers (``implementation="triton"`` and today's ``auto``), torch's
fused and foreach Adam, optax's ``adam`` under ``jax.jit`` (where JAX is importable), the
mixed-precision step, and a device-to-device copy (the bandwidth probe).

Parameters are N(0, 1) and gradients N(0, 1e-6) from a fixed seed, drawn on the device; the
same gradient is applied at every step (as in the CPU benchmark).
"""

from __future__ import annotations

import importlib
import os

import torch

import trainop
from trainop.bench.gpu_timing import Candidate
from trainop.bench.specs import SPECS
from trainop.processing import MixedPrecisionOptimizerWrapper

__all__ = ["TRITON", "copy_probe", "numel", "optax_adam", "torch_adam", "torch_mixed",
           "trainop_mixed", "trainop_optimizer", "transformer_shapes", "triton_unavailable"]

TRITON = "triton"
LR = 1e-3


def triton_unavailable(device: torch.device) -> str | None:
    """Why ``implementation="triton"`` cannot run on ``device`` here (None: it can): Triton
    not importable, a CPU without ``TRITON_INTERPRET=1``, or an optimizer that does not accept
    the name (a trainop without the Triton kernels)."""
    try:
        importlib.import_module("triton")
    except Exception as exc:
        return f"Triton not importable ({type(exc).__name__})"
    if device.type == "cpu" and os.environ.get("TRITON_INTERPRET", "0").lower() not in (
            "1", "true", "on", "yes"):
        return "CPU tensors need TRITON_INTERPRET=1"
    try:
        trainop.GradientDescentOptimizer(0.1, params=[torch.zeros(1, device=device)],
                                         implementation=TRITON)
    except (ValueError, TypeError) as exc:
        return f"implementation='triton' not accepted: {exc}".splitlines()[0][:200]
    return None


def _tensors(sizes: list, device: torch.device, dtype: torch.dtype = torch.float32,
             seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator(device=device).manual_seed(seed)
    params = []
    for n in sizes:
        p = torch.randn(n, generator=g, device=device).to(dtype).requires_grad_()
        p.grad = (torch.randn(n, generator=g, device=device) * 1e-3).to(dtype)
        params.append(p)
    return params


def trainop_optimizer(name: str, sizes: list, device: torch.device,
                      implementation: str | None, *, flat: bool = False) -> Candidate:
    """trainop's ``name`` (a class of ``bench.specs.SPECS``, with its benchmark arguments)
    over parameters of ``sizes``; ``flat``: after ``trainop.flatten`` (one buffer)."""
    params = _tensors(sizes, device)
    kwargs = dict(SPECS[name].kwargs)
    opt = getattr(trainop, name)(params=params, implementation=implementation, **kwargs)
    if flat:
        trainop.flatten(opt)
    return Candidate(opt.step)


def torch_adam(sizes: list, device: torch.device, *, fused: bool) -> Candidate:
    """``torch.optim.Adam`` with ``fused=True`` or ``foreach=True``."""
    params = _tensors(sizes, device)
    kwargs = {"fused": True} if fused else {"foreach": True}
    return Candidate(torch.optim.Adam(params, lr=LR, **kwargs).step)


def optax_adam(sizes: list, device: torch.device) -> Candidate:
    """optax's ``adam`` applied under one ``jax.jit`` (update and ``apply_updates``, buffers
    donated), timed on the host until the result is ready; ``ImportError`` without JAX/optax,
    ``RuntimeError`` when JAX has no device of this kind. JAX is told not to take most of
    the GPU's memory up front (``XLA_PYTHON_CLIENT_PREALLOCATE=false``, unless set), which
    would leave torch's sides without room."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    jax = importlib.import_module("jax")
    optax = importlib.import_module("optax")
    platform = "gpu" if device.type == "cuda" else "cpu"
    try:
        target = jax.devices(platform)[0]
    except RuntimeError as exc:
        raise RuntimeError(f"JAX has no {platform} device: {exc}") from None
    key = jax.random.PRNGKey(0)
    params = [jax.device_put(jax.random.normal(jax.random.fold_in(key, i), (n,) if
                                               isinstance(n, int) else n), target)
              for i, n in enumerate(sizes)]
    grads = [jax.device_put(p * 1e-3, target) for p in params]
    tx = optax.adam(LR)
    state = {"params": params, "opt": tx.init(params)}

    def update(params, opt_state, grads):
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    jitted = jax.jit(update, donate_argnums=(0, 1))

    def step() -> None:
        state["params"], state["opt"] = jitted(state["params"], state["opt"], grads)
        jax.block_until_ready(state["params"])

    return Candidate(step, host=True)


def copy_probe(n: int, device: torch.device) -> Candidate:
    """``b.copy_(a)`` over ``n`` float32 elements: 8 bytes per element moved."""
    a = torch.ones(n, device=device)
    b = torch.empty_like(a)
    return Candidate(lambda: b.copy_(a))


def trainop_mixed(n: int, device: torch.device, implementation: str | None,
                  dtype: torch.dtype = torch.bfloat16) -> Candidate:
    """``MixedPrecisionOptimizerWrapper`` over ``AdamOptimizer``: a ``dtype`` weight and its
    gradient, float32 master and slots; one step of its pipeline."""
    (p,) = _tensors([n], device, dtype)
    opt = trainop.AdamOptimizer(LR, params=[p], implementation=implementation)
    wrapper = MixedPrecisionOptimizerWrapper(opt)
    return Candidate(wrapper.pipeline.step)


def torch_mixed(n: int, device: torch.device, dtype: torch.dtype = torch.bfloat16) -> Candidate:
    """torch's way: the half gradient cast into a float32 master's ``.grad``, fused Adam on the
    master, the master cast back into the half weight."""
    (p,) = _tensors([n], device, dtype)
    master = p.detach().float().requires_grad_()
    master.grad = torch.empty_like(master)
    opt = torch.optim.Adam([master], lr=LR, fused=True)

    def step() -> None:
        master.grad.copy_(p.grad)
        opt.step()
        with torch.no_grad():
            p.copy_(master)

    return Candidate(step)


def transformer_shapes(scale: float = 1.0) -> list[tuple[int, ...]]:
    """The parameter shapes of a GPT-2-medium-like transformer (d 1024, 24 layers, vocabulary
    50257, context 1024: 355M parameters at ``scale`` 1); ``scale`` shrinks layers (as
    scale^0.25), width (scale^0.375), vocabulary and context (scale^0.625), so the count
    scales about linearly and stays a transformer's mix of matrices and vectors."""
    layers = max(1, round(24 * scale ** 0.25))
    d = max(4, round(1024 * scale ** 0.375))
    vocab, ctx = (max(4, round(n * scale ** 0.625)) for n in (50257, 1024))
    per_layer = [(d,), (d,), (d, 3 * d), (3 * d,), (d, d), (d,), (d,), (d,),
                 (d, 4 * d), (4 * d,), (4 * d, d), (d,)]
    return [(vocab, d), (ctx, d), *per_layer * layers, (d,), (d,)]


def numel(sizes: list) -> int:
    """Elements in all of ``sizes`` (ints or shapes)."""
    total = 0
    for s in sizes:
        total += s if isinstance(s, int) else int(torch.Size(s).numel())
    return total
