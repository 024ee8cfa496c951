"""PyTorch habits that trainop keeps (issue #33): the parameters given without their list, an
empty parameter list and ``step()`` on an optimizer with no parameters are errors, never a
silent no-op; TF-style use (variables at ``minimize``/``apply_gradients``) keeps working."""

from __future__ import annotations

import pytest
import torch
from optimizer_kwargs import kwargs_for

import trainop
from trainop import OPTIMIZER_CLASSES

NAMES = sorted(OPTIMIZER_CLASSES)
TORCH_WORDS = (r"^params argument given to the optimizer should be an iterable of Tensors or "
               r"dicts, but got torch\.FloatTensor: ")


def first_tf_argument(name: str) -> str:
    return "weight_decay" if name in ("AdamWOptimizer", "MomentumWOptimizer") else "learning_rate"


def tf_args(name: str) -> dict:
    kwargs = kwargs_for(name)
    kwargs.pop(first_tf_argument(name))
    return kwargs


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("slip", ["parameter", "requires_grad", "two_elements"])
def test_parameters_without_their_list_are_refused(name, slip):
    value = {"parameter": lambda: torch.nn.Parameter(torch.ones(1)),
             "requires_grad": lambda: torch.ones((), requires_grad=True),
             "two_elements": lambda: torch.ones(2)}[slip]()
    first = first_tf_argument(name)
    with pytest.raises(TypeError, match=TORCH_WORDS + rf"{name} read it as its first TF argument "
                                        rf"`{first}`; torch style: give the parameters as a "
                                        rf"list \(`{name}\(params=\[p\], \.\.\.\)` or "):
        OPTIMIZER_CLASSES[name](value, **tf_args(name))


@pytest.mark.parametrize("name", NAMES)
def test_empty_parameter_list_is_refused(name):
    kwargs = kwargs_for(name)
    for params in ([], iter(())):
        with pytest.raises(ValueError, match=r"^optimizer got an empty parameter list$"):
            OPTIMIZER_CLASSES[name](params, **kwargs)
        with pytest.raises(ValueError, match=r"^optimizer got an empty parameter list$"):
            OPTIMIZER_CLASSES[name](params=[], **kwargs)


@pytest.mark.parametrize("name", NAMES)
def test_step_without_parameters_is_an_error_and_tf_style_still_works(name):
    opt = OPTIMIZER_CLASSES[name](**kwargs_for(name))
    with pytest.raises(ValueError, match=rf"^{name}\.step\(\) has no parameters to update: give "
                                         rf"them at construction .* or add them with "
                                         rf"`add_param_group`; TF style"):
        opt.step()
    calls = []
    with pytest.raises(ValueError, match=r"has no parameters to update"):
        opt.step(lambda: calls.append(1))
    assert calls == [1]  # the closure ran; it registered nothing
    w = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    opt.minimize(lambda: (w * w).sum(), var_list=[w])
    assert not torch.equal(w.detach(), torch.tensor([1.0, -2.0]))
    w.grad = torch.ones(2)
    before = w.detach().clone()
    opt.step()  # registered by minimize: a torch-style step now updates it
    assert not torch.equal(w.detach(), before)


def test_one_element_tensor_learning_rate_still_accepted():
    w = torch.nn.Parameter(torch.ones(2))
    opt = trainop.GradientDescentOptimizer(torch.tensor([0.5]))
    opt.apply_gradients([(torch.ones(2), w)])
    assert torch.equal(w.detach(), torch.full((2,), 0.5))


# torch's error inputs shared by every optimizer (common_optimizers.get_error_inputs_for_all_optims,
# torch 2.13: the inputs and the patterns its test_errors matches), run as the contract suite
# builds each class: cls(params, lr=..., **required).
def _p():
    return torch.nn.Parameter(torch.randn(1, 1))


TORCH_GENERIC = {
    "invalid param type": (lambda: _p(), {}, TypeError,
                           "params argument given to the optimizer should be an iterable of "
                           "Tensors or dicts"),
    "duplicate parameters in a group": (lambda: (lambda p: [p, p])(_p()), {}, UserWarning,
                                        ".*a parameter group with duplicate parameters.*"),
    "duplicate parameters across groups": (
        lambda: (lambda p: [{"params": p}, {"params": p}])(_p()), {}, ValueError,
        "some parameters appear in more than one parameter group"),
    "Tensor lr must be 1-element": (lambda: None, {"lr": torch.tensor([0.001, 0.001])},
                                    ValueError, "Tensor lr must be 1-element"),
    "params with/without names": (lambda: [("weight", _p()), _p()], {}, ValueError,
                                  "all optimizer params should be with/without names. Some "
                                  "param names are missing"),
    "groups with/without names": (
        lambda: [{"params": [_p()], "lr": 1e-2}, {"params": [("weight", _p())]}], {},
        ValueError, "all optimizer param groups should be with/without names. cannot add "
                    "param group with names to the optimizer"),
}


@pytest.mark.parametrize("case", sorted(TORCH_GENERIC))
@pytest.mark.parametrize("info", __import__("contract_table").INFOS, ids=lambda i: i.name)
def test_torch_generic_error_inputs(info, case):
    params, kwargs, exc, pattern = TORCH_GENERIC[case]
    if issubclass(exc, Warning):
        with pytest.warns(exc, match=pattern):
            info.make(params(), **kwargs)
    else:
        with pytest.raises(exc, match=pattern):
            info.make(params(), **kwargs)


@pytest.mark.parametrize("name", ["MomentumOptimizer", "AdamWOptimizer", "AdagradDAOptimizer"])
def test_params_errors_come_before_a_missing_argument(name):
    """torch checks the parameters and a tensor lr first; trainop does too when a required
    argument is missing, then raises the constructor's own TypeError."""
    cls = OPTIMIZER_CLASSES[name]
    p = torch.nn.Parameter(torch.ones(1))
    with pytest.raises(ValueError, match="some parameters appear in more than one"):
        cls([{"params": p}, {"params": p}], lr=0.1)
    with pytest.raises(ValueError, match="^Tensor lr must be 1-element"):
        cls(None, lr=torch.tensor([0.1, 0.2]))
    with pytest.raises(TypeError, match=r"missing \d required positional argument"):
        cls([p], lr=0.1)
