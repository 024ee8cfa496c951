"""The one table of benchmarked algorithms: constructor arguments, memory traffic, peers.

``arrays`` is the memory-traffic floor of one step, counted in full-size arrays read plus
arrays written per parameter (Adam reads param, grad, m, v and writes param, m, v: 7). Times the
dtype's size it gives the bytes per parameter (28 for float32 Adam), which turns a step time
into effective GB/s. Peers are named by key: ``torch_peers.PEERS`` for ``torch.optim`` and a
``tf.compat.v1.train`` class name for TF1's graph-mode kernel (same arguments as trainop's).
``tf1_decay`` marks contrib's decoupled-weight-decay classes (MomentumW, AdamW; not in TF 2):
their TF1 peer is the base class behind contrib's decay op (``tf1_decay.py``), built from
``tf1_kwargs`` with ``weight_decay`` first, as contrib's constructors take it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["SPECS", "AlgorithmSpec", "bytes_per_param", "spec_for"]


@dataclass(frozen=True)
class AlgorithmSpec:
    """How to benchmark one trainop optimizer class."""

    kwargs: Mapping[str, Any]  # trainop constructor arguments (besides params/implementation)
    arrays: int  # full-size arrays read + written per step (the traffic floor)
    traffic: str  # the same floor spelled out, for the docs
    torch_peer: str | None  # key in torch_peers.PEERS (dense workloads), None: no counterpart
    torch_relation: str  # "same algorithm", "same class ...", "closest ..."
    sparse_peers: tuple[str, ...] = ()  # torch peers on the sparse workload
    tf1: str | None = None  # tf.compat.v1.train class (tf1_decay: the base), None: no TF1 peer
    tf1_kwargs: Mapping[str, Any] = field(default_factory=dict)
    sparse_trainop_peers: tuple[str, ...] = ()  # other trainop classes to compare on (d)
    tf1_decay: bool = False  # TF1 peer: contrib's decay op (tf1_kwargs' weight_decay) + tf1


_LR = {"learning_rate": 0.01}
_ADAM = {"learning_rate": 0.001}
_ADAM_W = {"weight_decay": 1e-4, **_ADAM}
_MOMENTUM_W = {"weight_decay": 1e-4, **_LR, "momentum": 0.9}
_PROX = {"learning_rate": 0.01, "l1_regularization_strength": 1e-4,
         "l2_regularization_strength": 1e-4}

#: trainop class name -> benchmark spec. Bytes per parameter = arrays * dtype size.
SPECS: dict[str, AlgorithmSpec] = {
    "GradientDescentOptimizer": AlgorithmSpec(
        _LR, 3, "r: p g; w: p", "sgd", "same algorithm", ("sgd",),
        "GradientDescentOptimizer", _LR),
    "MomentumOptimizer": AlgorithmSpec(
        {**_LR, "momentum": 0.9}, 5, "r: p g accum; w: p accum", "sgd_momentum",
        "same algorithm (dampening 0)", ("sgd_momentum",), "MomentumOptimizer",
        {**_LR, "momentum": 0.9}),
    "AdagradOptimizer": AlgorithmSpec(
        _LR, 5, "r: p g accum; w: p accum", "adagrad", "same algorithm (eps 0)", ("adagrad",),
        "AdagradOptimizer", _LR),
    "AdagradDAOptimizer": AlgorithmSpec(
        {**_LR, "global_step": None}, 6, "r: g ga gga; w: p ga gga", "adagrad",
        "closest algorithm (Adagrad)", ("adagrad",), "AdagradDAOptimizer", _LR),
    "AdadeltaOptimizer": AlgorithmSpec(
        {"learning_rate": 0.001}, 7, "r: p g accum accum_update; w: p accum accum_update",
        "adadelta", "same algorithm", (), "AdadeltaOptimizer", {"learning_rate": 0.001}),
    "RMSPropOptimizer": AlgorithmSpec(
        {"learning_rate": 0.001, "momentum": 0.9}, 7, "r: p g rms momentum; w: p rms momentum",
        "rmsprop", "same class (eps placement, rms init differ)", (), "RMSPropOptimizer",
        {"learning_rate": 0.001, "momentum": 0.9}),
    "AdamOptimizer": AlgorithmSpec(
        _ADAM, 7, "r: p g m v; w: p m v", "adam", "same class (eps mapped at t=1)",
        ("sparse_adam",), "AdamOptimizer", _ADAM),
    "FtrlOptimizer": AlgorithmSpec(
        _LR, 7, "r: p g accum linear; w: p accum linear", "adagrad",
        "closest algorithm (Adagrad)", ("adagrad",), "FtrlOptimizer", _LR),
    "ProximalGradientDescentOptimizer": AlgorithmSpec(
        _PROX, 3, "r: p g; w: p", "sgd", "closest algorithm (SGD)", ("sgd",),
        "ProximalGradientDescentOptimizer", _PROX),
    "ProximalAdagradOptimizer": AlgorithmSpec(
        _PROX, 5, "r: p g accum; w: p accum", "adagrad", "closest algorithm (Adagrad)",
        ("adagrad",), "ProximalAdagradOptimizer", _PROX),
    "LazyAdamOptimizer": AlgorithmSpec(
        _ADAM, 7, "r: p g m v; w: p m v (touched rows only when sparse)", "adam",
        "same class (eps mapped at t=1)", ("sparse_adam",), "AdamOptimizer", _ADAM,
        sparse_trainop_peers=("AdamOptimizer",)),
    "AdamWOptimizer": AlgorithmSpec(
        _ADAM_W, 7, "r: p g m v; w: p m v", "adamw", "same class (decay mapped to wd/lr)", (),
        "AdamOptimizer", _ADAM_W, tf1_decay=True),
    "MomentumWOptimizer": AlgorithmSpec(
        _MOMENTUM_W, 5, "r: p g accum; w: p accum", "sgd_momentum_wd",
        "closest algorithm (SGD momentum, L2 decay)", (), "MomentumOptimizer", _MOMENTUM_W,
        tf1_decay=True),
    "NadamOptimizer": AlgorithmSpec(
        _ADAM, 7, "r: p g m v; w: p m v", "nadam", "closest algorithm (momentum schedule)", ()),
    "NovoGrad": AlgorithmSpec(
        _LR, 6, "r: g (norm), p g m; w: p m", "adam", "closest algorithm (Adam)", ()),
}


def spec_for(class_name: str) -> AlgorithmSpec:
    """The spec of a trainop class name; ``ValueError`` for a class without one."""
    try:
        return SPECS[class_name]
    except KeyError:
        raise ValueError(f"No benchmark spec for optimizer class {class_name!r}; benchmarkable: "
                         f"{sorted(SPECS)}") from None


def bytes_per_param(arrays: int, dtype: torch.dtype) -> int:
    """Traffic floor in bytes per parameter: ``arrays`` full-size arrays of ``dtype``."""
    return arrays * torch.empty((), dtype=dtype).element_size()
