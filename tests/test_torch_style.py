"""torch-style construction (``trainop.contract.torch_style``) for every registered optimizer:
``cls(model.parameters(), lr=...)`` and ``cls(param_groups, lr=...)`` train bit-identically to
TF-style optimizers (``learning_rate`` first, variables registered by ``apply_gradients``) fed
the same gradients; what the first positional argument is read as; TF style is unchanged."""

from __future__ import annotations

import pytest
import torch
from optimizer_kwargs import kwargs_for

import trainop
from trainop import OPTIMIZER_CLASSES

STEPS = 4


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))


def _batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(100 + step)
    return torch.randn(5, 3, generator=gen), torch.randn(5, 2, generator=gen)


def _loss(model, step):
    x, y = _batch(step)
    return torch.nn.functional.mse_loss(model(x), y)


def _torch_kwargs(name: str) -> tuple[float, dict]:
    """``(lr, the other TF arguments)`` of ``name``'s generic constructor arguments."""
    kwargs = kwargs_for(name)
    return kwargs.pop("learning_rate"), kwargs


def _tf_twin(name: str, **extra):
    """The TF-style optimizer a torch-style ``name`` equals: the decoupled-decay variants get
    torch's meaning of ``weight_decay`` from a torch-style call (``decay_scaled_by_lr``)."""
    kwargs = {**kwargs_for(name), **extra}
    if "weight_decay" in kwargs:
        kwargs["decay_scaled_by_lr"] = True
    return OPTIMIZER_CLASSES[name](**kwargs)


def _train_torch_style(model, opt) -> None:
    for step in range(STEPS):
        opt.zero_grad()
        _loss(model, step).backward()
        opt.step()


def _train_tf_style(model, opts_by_param) -> None:
    """TF style: each parameter's optimizer (lr first, no params) applies the same gradients."""
    params = list(model.parameters())
    for step in range(STEPS):
        grads = torch.autograd.grad(_loss(model, step), params)
        for opt in dict.fromkeys(opts_by_param.values()):
            opt.apply_gradients([(g, p) for g, p in zip(grads, params, strict=True)
                                 if opts_by_param[id(p)] is opt])


@pytest.mark.parametrize("name", sorted(OPTIMIZER_CLASSES))
def test_params_first_and_lr_equal_tf_style(name):
    cls = OPTIMIZER_CLASSES[name]
    lr, rest = _torch_kwargs(name)
    torch_model, tf_model = _model(), _model()
    opt = cls(torch_model.parameters(), lr=lr, **rest)
    assert opt.param_groups[0]["lr"] == lr
    assert len(opt.param_groups[0]["params"]) == 4
    _train_torch_style(torch_model, opt)
    tf_opt = _tf_twin(name)
    _train_tf_style(tf_model, {id(p): tf_opt for p in tf_model.parameters()})
    for a, b in zip(torch_model.parameters(), tf_model.parameters(), strict=True):
        assert torch.equal(a, b), name
    assert not torch.equal(next(torch_model.parameters()), next(_model().parameters()))


@pytest.mark.parametrize("name", sorted(OPTIMIZER_CLASSES))
def test_param_groups_with_their_own_lr_equal_one_tf_optimizer_per_group(name):
    cls = OPTIMIZER_CLASSES[name]
    lr, rest = _torch_kwargs(name)
    torch_model, tf_model = _model(), _model()
    first, second = torch_model[0], torch_model[2]
    opt = cls([{"params": first.parameters()}, {"params": second.parameters(), "lr": lr / 2}],
              lr=lr, **rest)
    assert [g["lr"] for g in opt.param_groups] == [lr, lr / 2]
    _train_torch_style(torch_model, opt)
    tf_first = _tf_twin(name)
    tf_second = _tf_twin(name, learning_rate=lr / 2)
    owners = {id(p): tf_first for p in tf_model[0].parameters()}
    owners.update({id(p): tf_second for p in tf_model[2].parameters()})
    _train_tf_style(tf_model, owners)
    for a, b in zip(torch_model.parameters(), tf_model.parameters(), strict=True):
        assert torch.equal(a, b), name


def test_what_the_first_positional_argument_is_read_as():
    model = _model()
    # Parameters: a generator, a list, named parameters, a ParameterList, group dicts.
    for params in (model.parameters(), list(model.parameters()), model.named_parameters(),
                   torch.nn.ParameterList(model.parameters()),
                   [{"params": list(model.parameters())}]):
        opt = trainop.GradientDescentOptimizer(params, lr=0.5)
        assert sum(len(g["params"]) for g in opt.param_groups) == 4
        assert opt.defaults["lr"] == 0.5
    # After the parameters, positional arguments bind to the TF signature in order.
    opt = trainop.AdamOptimizer(model.parameters(), 0.25, 0.5)
    assert (opt.defaults["lr"], opt.defaults["beta1"]) == (0.25, 0.5)
    # ...except where TF's first argument is not the learning rate (torch's AdamW reads lr):
    # a TypeError (tests/test_errors_contract.py); by keyword it is torch's meaning.
    opt = trainop.AdamWOptimizer(model.parameters(), weight_decay=0.01, lr=0.1)
    assert (opt.defaults["weight_decay"], opt.defaults["lr"]) == (0.01, 0.1)
    assert opt.decay_scaled_by_lr
    # A learning rate: a float, a 0-dim tensor, a callable, a Policy (TF style, unchanged).
    lr_tensor = torch.tensor(0.5)
    policy = trainop.schedules.ExponentialDecay(0.5, decay_steps=10, decay_rate=0.5)
    for lr in (0.5, lr_tensor, lambda: 0.5, policy):
        opt = trainop.GradientDescentOptimizer(lr)
        assert opt.defaults["lr"] is lr and opt.param_groups == []
    # TF style with params= and lr= as the torch spelling without params.
    opt = trainop.AdamOptimizer(0.125, params=model.parameters())
    assert opt.defaults["lr"] == 0.125 and len(opt.param_groups[0]["params"]) == 4
    assert trainop.AdamOptimizer(lr=0.125).defaults["lr"] == 0.125


def test_signatures_stay_tf_style():
    import inspect

    params = list(inspect.signature(trainop.AdamOptimizer).parameters)
    assert params[:4] == ["learning_rate", "beta1", "beta2", "epsilon"] and "params" in params
    # Boolean options are still found through the wrapper (validated as booleans).
    with pytest.raises(TypeError, match="use_nesterov"):
        trainop.MomentumOptimizer(0.1, 0.9, use_nesterov=3)
