"""timm's ``create_optimizer_v2`` building each of trainop's optimizers.

timm's factory passes ``weight_decay`` to every optimizer it builds, 0.0 included, as a
constructor argument and as a key of every param group it makes from a model. A trainop class
without a weight decay takes 0 as the no-op it is (the run equals the class built without it,
to the bit); a non-zero decay is refused, naming the ways to decay.
"""

from __future__ import annotations

import inspect

import pytest
import torch
from optimizer_kwargs import kwargs_for
from timm_client import import_timm

from trainop.registry import OPTIMIZER_CLASSES

timm = import_timm()
from timm.optim._optim_factory import OptimInfo, default_registry  # noqa: E402

WITH_DECAY = {"AdamWOptimizer", "MomentumWOptimizer", "NovoGrad"}


def _register(name: str) -> str:
    cls = OPTIMIZER_CLASSES[name]
    key = f"trainop{name.lower()}"  # (timm reads the text after the last "_" as the name)
    has_momentum = "momentum" in inspect.signature(cls).parameters
    default_registry.register(OptimInfo(name=key, opt_class=cls, description=name,
                                        has_eps=False, has_momentum=has_momentum))
    return key


def _model() -> torch.nn.Module:
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))


def _arguments(name: str) -> dict:
    """``kwargs_for`` in timm's call shape: ``lr`` and the others, no weight decay."""
    kwargs = {k: v for k, v in kwargs_for(name).items() if k != "weight_decay"}
    return {"lr": kwargs.pop("learning_rate"), **kwargs}


def _train(model, opt) -> None:
    g = torch.Generator().manual_seed(7)
    for _ in range(3):
        x, y = torch.randn(5, 3, generator=g), torch.randn(5, 1, generator=g)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()


@pytest.mark.parametrize("name", sorted(OPTIMIZER_CLASSES))
def test_zero_weight_decay_from_timm_is_no_decay(name):
    kwargs = _arguments(name)
    model = _model()
    opt = timm.optim.create_optimizer_v2(model, _register(name), weight_decay=0.0, **kwargs)
    assert isinstance(opt, OPTIMIZER_CLASSES[name])
    _train(model, opt)

    plain = _model()
    cls = OPTIMIZER_CLASSES[name]
    if name in WITH_DECAY:  # the class's own decay, 0
        kwargs = {**kwargs, "weight_decay": 0.0}
    if "momentum" in inspect.signature(cls).parameters:
        kwargs.setdefault("momentum", 0.9)  # timm's default for a class with momentum
    _train(plain, cls(plain.parameters(), **kwargs))
    for a, b in zip(model.parameters(), plain.parameters(), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("name", sorted(set(OPTIMIZER_CLASSES) - WITH_DECAY))
def test_nonzero_weight_decay_from_timm_names_the_ways_to_decay(name):
    model = _model()
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(TypeError, match=(
            rf"{name} got `weight_decay` in a param group, torch's spelling.*weight_decay=0 "
            r"\(no decay\) is accepted and ignored; for a weight decay use AdamWOptimizer or "
            r"MomentumWOptimizer .*trainop.extend_with_decoupled_weight_decay")):
        timm.optim.create_optimizer_v2(model, _register(name), weight_decay=0.05,
                                       **_arguments(name))
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


@pytest.mark.parametrize("value", [0, 0.0, -0.0])
def test_zero_weight_decay_is_left_out_of_the_groups(value):
    w = torch.nn.Parameter(torch.ones(2))
    opt = OPTIMIZER_CLASSES["AdamOptimizer"]([{"params": [w], "weight_decay": value}], lr=0.1,
                                             weight_decay=value)
    assert "weight_decay" not in opt.param_groups[0]
    assert "weight_decay" not in opt.defaults


@pytest.mark.parametrize("value", [False, 1e-30, float("nan"), torch.tensor(0.0)])
def test_only_a_zero_number_is_no_decay(value):
    w = torch.nn.Parameter(torch.ones(2))
    with pytest.raises(TypeError, match=r"AdamOptimizer got `weight_decay` as an argument"):
        OPTIMIZER_CLASSES["AdamOptimizer"]([w], lr=0.1, weight_decay=value)
