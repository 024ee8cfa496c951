"""One registry of optimizer names: TF, OpenSeq2Seq and RETURNN spellings to classes.

Names are matched case-insensitively, and a trailing ``Optimizer`` may be left out (RETURNN's
rule): ``"Adam"``, ``"adam"``, ``"AdamOptimizer"`` and ``"adamoptimizer"`` all give
``AdamOptimizer``. OpenSeq2Seq's ``"SGD"`` and RETURNN's ``"gradientdescent"`` give
``GradientDescentOptimizer``. An unknown name raises ``ValueError`` listing the valid names.
"""

from __future__ import annotations

from trainop.contract.optimizer import Optimizer
from trainop.contract.validation import describe
from trainop.optimizers.adadelta import AdadeltaOptimizer
from trainop.optimizers.adagrad import AdagradOptimizer
from trainop.optimizers.adagrad_da import AdagradDAOptimizer
from trainop.optimizers.adam import AdamOptimizer, LazyAdamOptimizer, NadamOptimizer
from trainop.optimizers.ftrl import FtrlOptimizer
from trainop.optimizers.gradient_descent import GradientDescentOptimizer
from trainop.optimizers.momentum import MomentumOptimizer
from trainop.optimizers.novograd import NovoGrad
from trainop.optimizers.proximal import ProximalAdagradOptimizer, ProximalGradientDescentOptimizer
from trainop.optimizers.rmsprop import RMSPropOptimizer
from trainop.optimizers.weight_decay import AdamWOptimizer, MomentumWOptimizer

__all__ = ["OPTIMIZER_CLASSES", "get_optimizer_class", "optimizer_names", "register_optimizer"]

#: Every optimizer class trainop ships, by its canonical (TF) class name.
OPTIMIZER_CLASSES: dict[str, type[Optimizer]] = {
    cls.__name__: cls
    for cls in (
        GradientDescentOptimizer, MomentumOptimizer, AdagradOptimizer, AdagradDAOptimizer,
        AdadeltaOptimizer, RMSPropOptimizer, AdamOptimizer, FtrlOptimizer,
        ProximalGradientDescentOptimizer, ProximalAdagradOptimizer, LazyAdamOptimizer,
        AdamWOptimizer, MomentumWOptimizer, NadamOptimizer, NovoGrad,
    )
}

_ALIASES = {"sgd": GradientDescentOptimizer}

_REGISTRY: dict[str, type[Optimizer]] = {}


def _key(name: str) -> str:
    key = name.lower()
    return key[: -len("optimizer")] if key.endswith("optimizer") and key != "optimizer" else key


def register_optimizer(name: str, cls: type[Optimizer]) -> None:
    """Register ``cls`` under ``name`` (case-insensitive, ``Optimizer`` suffix optional)."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"Expected `name` to be a non-empty string, got {describe(name)}")
    if not (isinstance(cls, type) and issubclass(cls, Optimizer)):
        raise TypeError(f"Expected `cls` to be a trainop.Optimizer subclass, got {describe(cls)}")
    _REGISTRY[_key(name)] = cls


for _name, _cls in OPTIMIZER_CLASSES.items():
    register_optimizer(_name, _cls)
for _name, _cls in _ALIASES.items():
    register_optimizer(_name, _cls)


def optimizer_names() -> list[str]:
    """The registered names (lower case, without the ``Optimizer`` suffix), sorted."""
    return sorted(_REGISTRY)


def get_optimizer_class(name: str) -> type[Optimizer]:
    """The optimizer class for a TF, OpenSeq2Seq or RETURNN name.

    Example:
        >>> import trainop
        >>> trainop.get_optimizer_class("adam").__name__
        'AdamOptimizer'
        >>> trainop.get_optimizer_class("SGD").__name__
        'GradientDescentOptimizer'
    """
    if not isinstance(name, str):
        raise TypeError(f"Expected `name` to be an optimizer name (str), got {describe(name)}")
    cls = _REGISTRY.get(_key(name))
    if cls is None:
        raise ValueError(f"Unknown optimizer name {name!r}; valid names (case-insensitive, "
                         f"'Optimizer' suffix optional): {optimizer_names()}")
    return cls
