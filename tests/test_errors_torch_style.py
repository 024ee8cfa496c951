"""torch-style construction's errors, pinned (type and message) in one table: torch spellings
whose meaning differs from TF's name the trainop argument to use and how the meaning differs;
``lr`` with ``learning_rate`` and parameters given twice are errors; a rejected param group
changes nothing."""

from __future__ import annotations

import pytest
import torch
from error_table import Row, check, ids
from optimizer_kwargs import kwargs_for

import trainop
from trainop import OPTIMIZER_CLASSES


def _params():
    torch.manual_seed(0)
    return list(torch.nn.Linear(2, 1).parameters())


def build(cls, *args, **kwargs):
    return lambda: cls(_params(), *args, **kwargs)


def group(cls, key, value, **kwargs):
    return lambda: cls([{"params": _params(), key: value}], **kwargs)


Adam, SGD, Momentum = trainop.AdamOptimizer, trainop.GradientDescentOptimizer, \
    trainop.MomentumOptimizer
SPELLING = r"{cls} got `{key}` {where}, torch's spelling, which trainop does not accept: "


def msg(cls, key, hint, why="", where="as an argument"):
    return SPELLING.format(cls=cls, key=key, where=where) + hint + (f"; {why}" if why else "")


ERRORS: list[Row] = [
    # ------------------------------------------------ torch spellings as constructor arguments
    Row("eps-adam", build(Adam, lr=1e-3, eps=1e-8), TypeError,
        msg("AdamOptimizer", "eps", "use `epsilon=`", r"torch's eps and TF's epsilon sit at "
            r"different places .*eps_tf = eps_torch \* sqrt\(1 - beta2\^t\)")),
    Row("eps-rmsprop", build(trainop.RMSPropOptimizer, lr=1e-3, eps=1e-8), TypeError,
        msg("RMSPropOptimizer", "eps", "use `epsilon=`", r".*RMSProp: TF adds it inside the "
            r"square root, torch outside")),
    Row("eps-sgd", build(SGD, lr=0.1, eps=1e-8), TypeError,
        msg("GradientDescentOptimizer", "eps", "GradientDescentOptimizer has no `epsilon`")),
    Row("betas", build(Adam, lr=1e-3, betas=(0.9, 0.99)), TypeError,
        msg("AdamOptimizer", "betas", "use `beta1=` and `beta2=`",
            r"torch's betas=\(b1, b2\) are TF's two arguments beta1=b1, beta2=b2")),
    Row("betas-sgd", build(SGD, lr=0.1, betas=(0.9, 0.99)), TypeError,
        msg("GradientDescentOptimizer", "betas", "GradientDescentOptimizer has no `beta1`")),
    Row("weight-decay-adam", build(Adam, lr=1e-3, weight_decay=0.01), TypeError,
        msg("AdamOptimizer", "weight_decay", "AdamOptimizer has no `weight_decay`",
            r"torch's weight_decay adds weight_decay \* param to the gradient .*use "
            r"AdamWOptimizer or MomentumWOptimizer \(decoupled: torch's var -= lr \* "
            r"weight_decay \* var when built torch-style, contrib's var -= weight_decay \* var "
            r"with TF's call shape\)")),
    Row("weight-decay-momentum", build(Momentum, lr=0.1, momentum=0.9, weight_decay=0.01),
        TypeError, msg("MomentumOptimizer", "weight_decay",
                       "MomentumOptimizer has no `weight_decay`", ".*MomentumWOptimizer")),
    Row("momentum-adam", build(Adam, lr=1e-3, momentum=0.9), TypeError,
        msg("AdamOptimizer", "momentum", "AdamOptimizer has no `momentum`",
            r"for momentum use MomentumOptimizer\(learning_rate, momentum\)")),
    Row("momentum-sgd", build(SGD, lr=0.1, momentum=0.9), TypeError,
        msg("GradientDescentOptimizer", "momentum", "GradientDescentOptimizer has no "
            r"`momentum`", r".*torch's SGD with dampening=0")),
    Row("dampening", build(Momentum, lr=0.1, momentum=0.9, dampening=0.1), TypeError,
        msg("MomentumOptimizer", "dampening", "MomentumOptimizer has no such option",
            r"TF's momentum has no dampening \(it is torch's dampening=0\)")),
    Row("nesterov-momentum", build(Momentum, lr=0.1, momentum=0.9, nesterov=True), TypeError,
        msg("MomentumOptimizer", "nesterov", "use `use_nesterov=`", "TF spells it use_nesterov")),
    Row("nesterov-adam", build(Adam, lr=1e-3, nesterov=True), TypeError,
        msg("AdamOptimizer", "nesterov", "AdamOptimizer has no `use_nesterov`",
            ".*use NadamOptimizer")),
    Row("amsgrad", build(Adam, lr=1e-3, amsgrad=True), TypeError,
        msg("AdamOptimizer", "amsgrad", "AdamOptimizer has no such option",
            "TF1 has no AMSGrad and no trainop optimizer implements it")),
    Row("foreach", build(Adam, lr=1e-3, foreach=True), TypeError,
        msg("AdamOptimizer", "foreach", "use `implementation=`",
            r".*implementation='foreach' forces the multi-tensor path")),
    Row("fused", build(Adam, lr=1e-3, fused=True), TypeError,
        msg("AdamOptimizer", "fused", "use `implementation=`",
            r".*implementation='fused' forces torch's fused kernel")),
    Row("capturable", build(Adam, lr=1e-3, capturable=True), TypeError,
        msg("AdamOptimizer", "capturable", "AdamOptimizer has no such option",
            "trainop has no capturable option")),
    Row("maximize", build(SGD, lr=0.1, maximize=True), TypeError,
        msg("GradientDescentOptimizer", "maximize", "GradientDescentOptimizer has no such "
            "option", "trainop minimizes, as TF does; negate the loss to maximize")),
    Row("differentiable", build(Adam, lr=1e-3, differentiable=True), TypeError,
        msg("AdamOptimizer", "differentiable", "AdamOptimizer has no such option",
            "trainop's update runs under no_grad")),
    Row("alpha-rmsprop", build(trainop.RMSPropOptimizer, lr=1e-3, alpha=0.99), TypeError,
        msg("RMSPropOptimizer", "alpha", "use `decay=`", r"torch RMSprop's alpha is TF's decay "
            r"\(same smoothing\), but TF's mean-square slot starts at 1\.0")),
    Row("lr-decay-adagrad", build(trainop.AdagradOptimizer, lr=0.1, lr_decay=0.01), TypeError,
        msg("AdagradOptimizer", "lr_decay", "AdagradOptimizer has no such option",
            "torch Adagrad's lr_decay is a learning-rate schedule")),
    Row("momentum-decay-nadam", build(trainop.NadamOptimizer, lr=1e-3, momentum_decay=4e-3),
        TypeError, msg("NadamOptimizer", "momentum_decay", "NadamOptimizer has no such option",
                       "torch NAdam's momentum schedule")),
    Row("decoupled-weight-decay", build(Adam, lr=1e-3, decoupled_weight_decay=True), TypeError,
        msg("AdamOptimizer", "decoupled_weight_decay", "AdamOptimizer has no such option",
            r"use AdamWOptimizer \(decoupled decay; built torch-style its weight_decay is "
            r"torch's, scaled by the learning rate\)")),
    Row("eps-tf-style", lambda: Adam(0.001, eps=1e-8), TypeError,
        msg("AdamOptimizer", "eps", "use `epsilon=`")),
    # ------------------------------------------------ lr and the parameters given twice
    Row("lr-and-learning-rate", build(Adam, lr=1e-3, learning_rate=1e-3), TypeError,
        r"AdamOptimizer got both `lr` \(torch's spelling\) and `learning_rate`; give one of "
        r"them$"),
    Row("lr-and-positional-learning-rate", build(Adam, 1e-3, lr=1e-3), TypeError,
        r"AdamOptimizer got both `lr` \(torch's spelling\) and `learning_rate`"),
    Row("lr-and-learning-rate-tf-style", lambda: Adam(1e-3, lr=1e-3), TypeError,
        r"AdamOptimizer got both `lr` \(torch's spelling\) and `learning_rate`"),
    Row("params-twice", lambda: Adam(_params(), params=_params()), TypeError,
        r"AdamOptimizer got the parameters both as the first positional argument and as "
        r"`params=`; give them once$"),
    Row("empty-params", lambda: Adam([], lr=1e-3), ValueError,
        r"optimizer got an empty parameter list"),
    Row("not-params-stays-learning-rate", lambda: Adam([0.1]), TypeError,
        r"Expected `learning_rate` to be a real number, got \[0\.1\] \(list\)"),
    # ------------------------------------------------ torch spellings as param-group keys
    Row("group-eps", group(Adam, "eps", 1e-8, lr=1e-3), TypeError,
        msg("AdamOptimizer", "eps", "use the key 'epsilon'", where="in a param group")),
    Row("group-betas-sgd", group(SGD, "betas", (0.9, 0.99), lr=1e-3), TypeError,
        msg("GradientDescentOptimizer", "betas", "GradientDescentOptimizer has no `beta1`",
            where="in a param group")),
    Row("group-betas-and-beta1",
        lambda: Adam([{"params": _params(), "betas": (0.9, 0.99), "beta1": 0.5}], lr=1e-3),
        ValueError, r"Expected the param group's `beta1` to equal `betas`'s, got beta1=0\.5 "
                    r"and betas=\(0\.9, 0\.99\); give one spelling$"),
    Row("group-weight-decay-adam", group(Adam, "weight_decay", 0.01, lr=1e-3), TypeError,
        msg("AdamOptimizer", "weight_decay", "AdamOptimizer has no `weight_decay`",
            where="in a param group")),
]


@pytest.mark.parametrize("row", ERRORS, ids=ids(ERRORS))
def test_error(row: Row):
    check(row)


@pytest.mark.parametrize("name", sorted(OPTIMIZER_CLASSES))
def test_every_optimizer_rejects_torch_only_spellings(name):
    cls = OPTIMIZER_CLASSES[name]
    kwargs = kwargs_for(name)
    lr = kwargs.pop("learning_rate")
    for key in ("amsgrad", "eps", "betas", "foreach", "maximize"):
        with pytest.raises(TypeError, match=rf"^{name} got `{key}` as an argument, torch's "):
            cls(_params(), lr=lr, **kwargs, **{key: 0})


def test_own_tf_arguments_named_like_torch_are_accepted():
    """A torch spelling that is the class's own TF argument is that argument."""
    opt = trainop.AdamWOptimizer(_params(), lr=1e-3, weight_decay=0.01)
    assert opt.defaults["weight_decay"] == 0.01
    opt = trainop.MomentumOptimizer(_params(), lr=0.1, momentum=0.5)
    assert opt.defaults["momentum"] == 0.5
    opt = trainop.AdamWOptimizer([{"params": _params(), "weight_decay": 0.0}], weight_decay=0.01,
                                 lr=1e-3)
    assert opt.param_groups[0]["weight_decay"] == 0.0


def test_a_rejected_param_group_changes_nothing():
    opt = Adam(_params(), lr=1e-3)
    before = [dict(g) for g in opt.param_groups]
    extra = _params()
    with pytest.raises(TypeError, match="`eps` in a param group"):
        opt.add_param_group({"params": extra, "eps": 1e-8})
    assert len(opt.param_groups) == 1 and opt.param_groups[0].keys() == before[0].keys()
    assert all(p is q for p, q in zip(opt.param_groups[0]["params"], before[0]["params"],
                                      strict=True))
    assert not opt.state
