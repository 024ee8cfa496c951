"""trainop's 15 optimizers as an ``OptimizerInfo``-style table (the shape of torch's
``torch.testing._internal.common_optimizers`` database, written for trainop): how to build each
one torch-style, the other valid constructor inputs, the inputs it must reject, and the
implementations it offers. The generic tests in ``tests/test_contract_*.py`` run over it.

Every entry is built torch-style, ``cls(params, lr=..., **required)``, as torch code and its
wrappers build optimizers; parameters are tiny (a 2x3 matrix and a 3-vector).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from trainop import OPTIMIZER_CLASSES
from trainop.contract.optimizer import Optimizer

LR_RANGE = r"Expected `learning_rate` in \[0, inf\), got -0\.5$"
LR_ELEMENTS = (r"Tensor lr must be 1-element: expected `learning_rate` to be a 1-element tensor "
               r"\(a 0-dim one, or of shape "
               r"\(1,\) or \(1, 1\)\), got a tensor of shape \(2,\)$")


@dataclass(frozen=True)
class ErrorInput:
    """Constructor arguments (on top of the entry's own) that raise ``exc`` matching ``match``."""

    kwargs: dict[str, Any]
    exc: type[Exception]
    match: str


@dataclass(frozen=True)
class OptimizerInfo:
    """One optimizer class: its torch-style arguments, valid variants and error inputs."""

    cls: type[Optimizer]
    lr: float = 0.01
    #: Arguments the class requires besides the learning rate.
    required: dict[str, Any] = field(default_factory=dict)
    #: Other valid constructor inputs (each on top of ``required``).
    variants: tuple[dict[str, Any], ...] = ()
    #: Class-specific inputs that must be rejected (the learning-rate ones are common).
    errors: tuple[ErrorInput, ...] = ()

    @property
    def name(self) -> str:
        return self.cls.__name__

    @property
    def implementations(self) -> tuple[str, ...]:
        return self.cls.IMPLEMENTATIONS

    def make(self, params: Iterable[Any], **kwargs: Any) -> Optimizer:
        """``cls(params, lr=self.lr, **required, **kwargs)``."""
        return self.cls(params, **{"lr": self.lr, **self.required, **kwargs})

    def error_inputs(self) -> tuple[ErrorInput, ...]:
        """The class's own error inputs and the learning-rate ones every class shares."""
        return (ErrorInput({"lr": -0.5}, ValueError, LR_RANGE),
                ErrorInput({"lr": torch.tensor(-0.5)}, ValueError, LR_RANGE),
                ErrorInput({"lr": torch.tensor([0.1, 0.2])}, ValueError, LR_ELEMENTS),
                ErrorInput({"lr": torch.tensor([1])}, TypeError,
                           r"Expected `learning_rate` to be a floating-point tensor"),
                ErrorInput({"lr": "0.1"}, TypeError,
                           r"Expected `learning_rate` to be a real number, got '0\.1' \(str\)$"),
                *self.errors)


def _range(arg: str, interval: str, value: str) -> str:
    return rf"Expected `{arg}` in {interval}, got {value}$"


_BETAS = (
    ErrorInput({"beta1": 1.0}, ValueError, _range("beta1", r"\[0, 1\)", r"1\.0")),
    ErrorInput({"beta2": -0.5}, ValueError, _range("beta2", r"\[0, 1\)", r"-0\.5")),
    ErrorInput({"epsilon": -1.0}, ValueError, _range("epsilon", r"\[0, inf\)", r"-1\.0")),
)
_L1L2 = (
    ErrorInput({"l1_regularization_strength": -1.0}, ValueError,
               _range("l1_regularization_strength", r"\[0, inf\)", r"-1\.0")),
    ErrorInput({"l2_regularization_strength": float("nan")}, ValueError,
               _range("l2_regularization_strength", r"\[0, inf\)", "nan")),
)
_MOMENTUM = ErrorInput({"momentum": -0.5}, ValueError,
                       _range("momentum", r"\[0, inf\)", r"-0\.5"))
_WEIGHT_DECAY = ErrorInput({"weight_decay": -0.5}, ValueError,
                           _range("weight_decay", r"\[0, inf\)", r"-0\.5"))
_NESTEROV = ErrorInput({"use_nesterov": 1}, TypeError,
                       r"Expected `use_nesterov` to be a bool, got 1 \(int\)$")

INFOS: tuple[OptimizerInfo, ...] = (
    OptimizerInfo(OPTIMIZER_CLASSES["GradientDescentOptimizer"], lr=0.1,
                  errors=(ErrorInput({"name": ""}, ValueError,
                                     "Must specify the optimizer name"),)),
    OptimizerInfo(OPTIMIZER_CLASSES["MomentumOptimizer"], lr=0.1, required={"momentum": 0.9},
                  variants=({"use_nesterov": True}, {"momentum": 0.0}),
                  errors=(_MOMENTUM, _NESTEROV)),
    OptimizerInfo(OPTIMIZER_CLASSES["AdagradOptimizer"], lr=0.1,
                  variants=({"initial_accumulator_value": 0.5},),
                  errors=(ErrorInput({"initial_accumulator_value": 0.0}, ValueError,
                                     _range("initial_accumulator_value", r"\(0, inf\)",
                                            r"0\.0")),)),
    OptimizerInfo(OPTIMIZER_CLASSES["AdagradDAOptimizer"], lr=0.1, required={"global_step": None},
                  variants=({"l1_regularization_strength": 0.01,
                             "l2_regularization_strength": 0.1},),
                  errors=_L1L2),
    OptimizerInfo(OPTIMIZER_CLASSES["AdadeltaOptimizer"], lr=1.0,
                  variants=({"rho": 0.5, "epsilon": 1e-6},),
                  errors=(ErrorInput({"rho": 1.5}, ValueError, _range("rho", r"\[0, 1\]",
                                                                     r"1\.5")),)),
    OptimizerInfo(OPTIMIZER_CLASSES["RMSPropOptimizer"],
                  variants=({"momentum": 0.5}, {"centered": True, "decay": 0.5}),
                  errors=(_MOMENTUM, ErrorInput({"centered": "yes"}, TypeError,
                                                r"Expected `centered` to be a bool"))),
    OptimizerInfo(OPTIMIZER_CLASSES["AdamOptimizer"], variants=({"beta1": 0.5, "beta2": 0.9},),
                  errors=_BETAS),
    OptimizerInfo(OPTIMIZER_CLASSES["FtrlOptimizer"], lr=0.5,
                  variants=({"learning_rate_power": -0.25, "l1_regularization_strength": 0.01,
                             "l2_shrinkage_regularization_strength": 0.1},),
                  errors=(*_L1L2, ErrorInput({"learning_rate_power": 0.5}, ValueError,
                                             _range("learning_rate_power", r"\(-inf, 0\]",
                                                    r"0\.5")))),
    OptimizerInfo(OPTIMIZER_CLASSES["ProximalGradientDescentOptimizer"], lr=0.1,
                  variants=({"l1_regularization_strength": 0.01,
                             "l2_regularization_strength": 0.1},),
                  errors=_L1L2),
    OptimizerInfo(OPTIMIZER_CLASSES["ProximalAdagradOptimizer"], lr=0.1,
                  variants=({"l1_regularization_strength": 0.01},), errors=_L1L2),
    OptimizerInfo(OPTIMIZER_CLASSES["LazyAdamOptimizer"], errors=_BETAS),
    OptimizerInfo(OPTIMIZER_CLASSES["AdamWOptimizer"], required={"weight_decay": 0.1},
                  variants=({"decay_scaled_by_lr": False},),
                  errors=(*_BETAS, _WEIGHT_DECAY,
                          ErrorInput({"decay_scaled_by_lr": 1}, TypeError,
                                     r"Expected `decay_scaled_by_lr` to be a bool, got 1 "
                                     r"\(int\)$"))),
    OptimizerInfo(OPTIMIZER_CLASSES["MomentumWOptimizer"], lr=0.1,
                  required={"weight_decay": 0.1, "momentum": 0.9},
                  variants=({"use_nesterov": True},), errors=(_MOMENTUM, _WEIGHT_DECAY)),
    OptimizerInfo(OPTIMIZER_CLASSES["NadamOptimizer"], errors=_BETAS),
    OptimizerInfo(OPTIMIZER_CLASSES["NovoGrad"], lr=0.1,
                  variants=({"grad_averaging": True, "weight_decay": 0.01},
                            {"second_moment": "openseq2seq"}),
                  errors=(*_BETAS, _WEIGHT_DECAY,
                          ErrorInput({"second_moment": "x"}, ValueError,
                                     r"Expected `second_moment` to be one of"))),
)

assert {info.name for info in INFOS} == set(OPTIMIZER_CLASSES), "one entry per optimizer"

#: (info, implementation) for every class and every implementation it offers.
IMPLEMENTATION_CASES = [(info, impl) for info in INFOS for impl in info.implementations]


def ids(cases: list[tuple]) -> list[str]:
    return ["-".join(c.name if isinstance(c, OptimizerInfo) else str(c) for c in case)
            for case in cases]


def info_ids(infos: Iterable[OptimizerInfo]) -> list[str]:
    return [info.name for info in infos]


def params() -> list[torch.nn.Parameter]:
    """Two tiny parameters (a matrix and a vector), the same values every call."""
    gen = torch.Generator().manual_seed(1)
    return [torch.nn.Parameter(torch.randn(2, 3, generator=gen)),
            torch.nn.Parameter(torch.randn(3, generator=gen))]


def set_grads(ps: list[torch.Tensor], step: int, sparse: bool = False) -> None:
    """Deterministic gradients for ``step``: dense, or (``sparse``) COO gradients that touch
    row 0 of each parameter (twice, so duplicate indices are summed)."""
    gen = torch.Generator().manual_seed(100 + step)
    for p in ps:
        g = torch.randn(p.shape, generator=gen)
        if sparse:
            rows = g[:1].expand(2, *p.shape[1:]).contiguous()
            g = torch.sparse_coo_tensor(torch.zeros(1, 2, dtype=torch.long), rows, p.shape)
        p.grad = g


def train(opt: torch.optim.Optimizer, ps: list[torch.Tensor], steps: int, start: int = 0,
          sparse: bool = False, each: Callable[[], None] | None = None) -> None:
    """``steps`` torch-style steps with ``set_grads``; ``each`` runs after every step."""
    for step in range(start, start + steps):
        set_grads(ps, step, sparse)
        opt.step()
        if each is not None:
            each()


def snapshot(opt: torch.optim.Optimizer) -> dict[str, Any]:
    """Every parameter, slot and non-slot variable of ``opt``, cloned."""
    out: dict[str, Any] = {}
    for gi, group in enumerate(opt.param_groups):
        for pi, p in enumerate(group["params"]):
            out[f"g{gi}.p{pi}"] = p.detach().clone()
            for name, slot in opt.state.get(p, {}).items():
                out[f"g{gi}.p{pi}.{name}"] = slot.detach().clone()
        for name, value in group.get("non_slot", {}).items():
            out[f"g{gi}.{name}"] = value.detach().clone()
    return out


def assert_same(a: dict[str, Any], b: dict[str, Any], **tolerance: float) -> None:
    """Equal keys and values: bit for bit, or within ``assert_close``'s ``rtol``/``atol``."""
    assert a.keys() == b.keys()
    for key in a:
        if tolerance:
            torch.testing.assert_close(a[key], b[key], msg=key, **tolerance)
        else:
            assert torch.equal(a[key], b[key]), key
