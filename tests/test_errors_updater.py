"""The Updater's errors, pinned (type and message) in one table, and the calls that raise after
construction (a bad ``step``, ``load_state_dict``, ``reset_optim_op``) shown to change nothing:
parameters, slots, accumulators and counters stay as they were."""

from __future__ import annotations

import copy

import pytest
import torch
from error_table import Row, check, ids

import trainop


def _w():
    return torch.ones(2, requires_grad=True)


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))


def U(config, model=None, **kwargs):  # noqa: N802 - reads as the constructor
    return lambda: trainop.Updater(config, [_w()] if model is None else model,
                                   **kwargs).get_optim_op()


ERRORS: list[Row] = [
    # ------------------------------------------------ config and options
    Row("config-type", U(3), TypeError, r"Expected `config` to be a dict or a path to a "
                                        r"\.yaml/\.json/RETURNN config file, got 3"),
    Row("backend", U({"backend": "jax"}), ValueError,
        r"Expected `backend` to be one of \['tensorflow', 'tensorflow-net-dict', 'tf', "
        r"'torch'\], got 'jax'"),
    Row("optimizer-str", U({"optimizer": "adam"}), ValueError,
        r"Expected `optimizer` to be a dict with a 'class' key .* write \{'class': 'adam'\}"),
    Row("optimizer-lr", U({"optimizer": {"class": "adam", "learning_rate": 0.1}}), ValueError,
        r"Expected no `learning_rate` in `optimizer`"),
    Row("optimizer-unknown", U({"optimizer": {"class": "adamx"}}), ValueError, r"adamx"),
    Row("optimizer-class-type", U({"optimizer": {"class": 3}}), TypeError,
        r"Expected the optimizer `class` to be a name"),
    Row("legacy-momentum-adam", U({"adam": True, "momentum": 0.9}), ValueError,
        r"Expected `momentum` to be 0 with the legacy flag `adam`"),
    Row("legacy-behavior-2", U({"adam": True, "behavior_version": 2}), ValueError,
        r"legacy flags \['adam'\] are errors from behavior_version 2 on"),
    Row("grad-clip", U({"grad_clip": 1.0}), ValueError,
        r"You set grad_clip in the config, but the option is called "
        r"gradient_clip_global_norm"),
    Row("grad-noise", U({"grad_noise": 1.0}), ValueError,
        r"You set grad_noise in the config, but the option is called gradient_noise"),
    Row("clip-negative", U({"gradient_clip": -1.0}), ValueError,
        r"Expected `gradient_clip` in \[0, inf\)"),
    Row("accum-float", U({"accum_grad_multiple_step": 1.5}), ValueError,
        r"Expected `accum_grad_multiple_step` to be an int >= 0, got 1\.5"),
    Row("log-grad-norm-p1", U({"log_grad_norm": 1}), ValueError,
        r"Expected `log_grad_norm` to be one of \[False, True, 2"),
    Row("tag-undeclared", U({"global_norm_tag": "a", "gradient_clip_global_norm_tag": "b",
                             "updater_opts": {"0.*": {"tags": ["a"]}}}, _model()),
        ValueError, r"Expected `gradient_clip_global_norm_tag` to be one of the updater_opts "
                    r"tags \['a'\], got 'b' \(no parameter carries it\)"),
    Row("updater-opts-global-only", U({"updater_opts": {"0.*": {"maximize_grad_norm": 0.1}}},
                                       _model()), ValueError,
        r"Expected `maximize_grad_norm` as a global option, not in updater_opts\['0\.\*'\] "
        r"\(trainop applies it to every parameter\), got 0\.1"),
    Row("tag-type", U({"global_norm_tag": 1}), TypeError,
        r"Expected `global_norm_tag` to be a str, got 1"),
    Row("tags-type", U({"updater_opts": {"0.*": {"tags": "a"}}}, _model()), TypeError,
        r"Expected updater_opts\['0\.\*'\]\['tags'\] to be a list of str, got 'a'"),
    Row("tag-torch", U({"backend": "torch", "optimizer": {"class": "sgd"},
                        "global_norm_tag": "a"}), ValueError,
        r"Expected no `global_norm_tag` with backend='torch'"),
    Row("horovod-reduce-param", U({"use_horovod": True, "horovod_reduce_type": "param"}),
        ValueError, r"horovod_reduce_type='grad' .* only, got 'param'"),
    Row("check-numerics-output-params", U({"debug_add_check_numerics_on_output": True}),
        ValueError, r"Expected a torch.nn.Module as `model` with "
                    r"`debug_add_check_numerics_on_output`"),
    Row("dynamic-lr-kwargs", U({"dynamic_learning_rate": lambda global_train_step: 1.0}),
        ValueError, r"Expected `dynamic_learning_rate` to accept \*\*kwargs"),
    Row("dynamic-lr-dict", U({"dynamic_learning_rate": {"interval": 2}}), ValueError,
        r"Expected `dynamic_learning_rate` as a dict to have exactly the keys "
        r"\['decay', 'interval'\], got \['interval'\]"),
    Row("dynamic-lr-type", U({"dynamic_learning_rate": 3}), TypeError,
        r"Expected `dynamic_learning_rate` to be a callable, a dict"),
    Row("no-params", lambda: trainop.Updater({}, []), ValueError,
        r"Expected at least one trainable parameter, got none"),
    Row("summary-writer-missing", U({"debug_grad_summaries": True}), ValueError,
        r"Expected a `summary_writer`"),
    Row("summary-frequency", U({}, summary_frequency=True), ValueError,
        r"Expected `summary_frequency` to be an int >= 1, got True"),
    Row("group-keys-trainop-class", U({"weight_decay_modules_blacklist": ["torch.nn.Linear"]}),
        ValueError, r"Expected no `weight_decay_modules_blacklist` with a trainop optimizer"),
    # ------------------------------------------------ per-parameter overrides
    Row("updater-opts-type", U({"updater_opts": [1]}, _model()), TypeError,
        r"Expected `updater_opts` to be a dict of parameter-name pattern"),
    Row("updater-opts-key", U({"updater_opts": {"0.*": {"learning_rate": 1.0}}}, _model()),
        ValueError, r"Unknown key 'learning_rate' in updater_opts\['0\.\*'\]"),
    Row("updater-opts-nomatch", U({"updater_opts": {"9.*": {"gradient_clip": 1.0}}},
                                  _model()),
        ValueError, r"Expected updater_opts pattern '9\.\*' to match a parameter name"),
    Row("updater-opts-params", U({"updater_opts": {"0.*": {"gradient_clip": 1.0}}}), ValueError,
        r"Expected a torch.nn.Module as `model` with `updater_opts`"),
    # ------------------------------------------------ torch.optim classes (PyTorch backend)
    Row("torch-optimizer-required", U({"backend": "torch"}), ValueError,
        r"config field 'optimizer' needs to be set explicitely for the Torch backend"),
    Row("torch-unknown-name", U({"backend": "torch", "optimizer": {"class": "adamx"}}),
        ValueError, r"Optimizer 'adamx' not found in the available torch optimizers list"),
    Row("torch-dotted-missing", U({"optimizer": {"class": "torch.optim.Nope"}}), ValueError,
        r"Unknown optimizer class 'torch.optim.Nope': a name in a config is looked up among "
        r"the classes trainop knows, never imported"),
    Row("torch-not-optimizer", U({"optimizer": {"class": "torch.nn.Linear"}}), ValueError,
        r"Unknown optimizer class 'torch.nn.Linear'"),
    Row("torch-lr", U({"optimizer": {"class": "torch.optim.SGD", "lr": 0.1}}), ValueError,
        r"Expected no `learning_rate`/`lr` in `optimizer`"),
    Row("torch-unknown-kwarg", U({"optimizer": {"class": "torch.optim.SGD", "beta1": 0.9}}),
        ValueError, r"Expected the options of SGD to be arguments of its constructor, got "
                    r"\['beta1'\]"),
    Row("torch-tf-only", U({"optimizer": {"class": "torch.optim.SGD"},
                            "gradient_nan_inf_filter": True}), ValueError,
        r"PyTorch updater: option gradient_nan_inf_filter not supported currently"),
    Row("torch-blacklist-rf", U({"optimizer": {"class": "torch.optim.AdamW",
                                               "weight_decay": 0.1,
                                               "weight_decay_modules_blacklist": "rf.Linear"}},
                                _model()),
        ValueError, r"Expected `weight_decay_modules_blacklist` entries to be module classes"),
    Row("torch-custom-not-callable", U({"optimizer": {"class": "torch.optim.SGD",
                                                      "param_groups_custom": 3}}), TypeError,
        r"Expected `param_groups_custom` to be a callable, got 3"),
    Row("torch-custom-returns-dict", U({"optimizer": {
        "class": "torch.optim.SGD", "param_groups_custom": lambda **kw: {"params": []}}}),
        TypeError, r"Expected `param_groups_custom` to return an iterable of group dicts"),
]


@pytest.mark.filterwarnings("ignore:DEPRECATION WARNING:FutureWarning")
@pytest.mark.parametrize("row", ERRORS, ids=ids(ERRORS))
def test_error(row: Row):
    check(row)


def _state(updater, model):
    return copy.deepcopy((updater.state_dict(), model.state_dict()))


def _flat(x, path=()):
    """(path, leaf) pairs of nested dicts/lists/tuples, in a fixed order."""
    if isinstance(x, dict):
        return [pair for key in sorted(x, key=str) for pair in _flat(x[key], (*path, key))]
    if isinstance(x, (list, tuple)):
        return [pair for i, item in enumerate(x) for pair in _flat(item, (*path, i))]
    return [(path, x)]


def _same(a, b):
    fa, fb = _flat(a), _flat(b)
    assert [k for k, _ in fa] == [k for k, _ in fb]
    for (_, x), (_, y) in zip(fa, fb, strict=True):
        assert torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y


@pytest.mark.parametrize("backend_class", ["adam", "torch.optim.Adam"])
def test_rejected_calls_change_nothing(backend_class):
    model = _model()
    u = trainop.Updater({"optimizer": {"class": backend_class}, "accum_grad_multiple_step": 3,
                         "learning_rate": 0.1}, model)
    for _ in range(4):  # one update, then one micro-step waiting in the accumulators
        u.step(model(torch.ones(3, 2)).pow(2).sum())
    before = _state(u, model)
    with pytest.raises(TypeError, match=r"Expected `loss` to be a 0-dim tensor that requires "
                                        r"grad"):
        u.step(torch.ones(()))
    with pytest.raises(ValueError, match=r"Expected an Updater state_dict with keys"):
        u.load_state_dict({"groups": []})
    bad = copy.deepcopy(before[0])
    bad["global_train_step"] = torch.tensor(-1)
    with pytest.raises(ValueError, match="global_train_step"):
        u.load_state_dict(bad)
    bad = copy.deepcopy(before[0])
    bad["groups"][0]["step"]["micro_steps"] = -2
    with pytest.raises(ValueError, match=r"Expected `micro_steps` to be an int >= 0, got -2"):
        u.load_state_dict(bad)
    with pytest.raises(ValueError, match="Expected no gradients waiting in the accumulators"):
        u.reset_optim_op()
    model(torch.ones(3, 2)).pow(2).sum().backward()
    # backend tf (this Updater's): RETURNN's TF updater has no loss scaling to reproduce (a
    # non-scaler under backend torch: the engine's table, tests/test_errors_returnn_engine.py)
    with pytest.raises(ValueError, match=r"^Expected no `grad_scaler` with backend 'tf' "
                                         r"\(RETURNN's TF updater has no loss scaling\)"):
        u.step(grad_scaler=torch.amp.GradScaler("cpu"))
    for p in model.parameters():
        p.grad = None
    _same(before, _state(u, model))


@pytest.mark.parametrize("optimizer,error,pattern", [
    ({"class": "adam", "bta1": 0.5}, ValueError,
     r"Unknown key 'bta1' in `optimizer` \(AdamOptimizer\); did you mean 'beta1'\?"),
    ({"class": "adam", "betas": (0.9, 0.99)}, TypeError,
     r"`betas` as an argument, torch's spelling.*use `beta1=` and `beta2=`"),
    ({"class": "adam", "beta1": "x"}, TypeError, r"Expected `beta1` to be a real number, "
                                                 r"got 'x' \(str\)"),
    ({"class": "adam", "epsilon": float("nan")}, ValueError,
     r"Expected `epsilon` in \[0, inf\), got nan"),
    ({"class": "sgd", "epsilon": 1e-8}, ValueError,
     r"Unknown key 'epsilon' in `optimizer` \(GradientDescentOptimizer\); valid keys: "
     r"\['implementation', 'name', 'use_locking'\]"),
])
def test_the_optimizer_is_checked_when_the_updater_is_built(optimizer, error, pattern):
    # it was built lazily: the first step() raised a bare TypeError from seven frames down
    model = _model()
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(error, match=pattern):
        trainop.Updater({"optimizer": optimizer, "learning_rate": 0.1}, model)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize("call,position,name", [
    (lambda ps: trainop.AdamOptimizer(0.001, ps), 2, "beta1"),
    (lambda ps: trainop.MomentumOptimizer(0.1, 0.9, list(ps)), 3, "use_locking"),
])
def test_tf_order_with_the_parameters_after_it_names_the_params_keyword(call, position, name):
    with pytest.raises(TypeError, match=rf"parameters as positional argument {position}, which "
                                        rf"its TF signature reads as `{name}`: `params` is a "
                                        rf"keyword argument"):
        call(_model().parameters())
