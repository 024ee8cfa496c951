"""A RETURNN config's ``KEY = None`` means what RETURNN's own ``Config`` lookup of KEY makes of
it (``trainop.training.returnn.config_none``): the table is checked against RETURNN's source
(which lookup reads each key) and its ``Config`` (what that lookup returns for a None), and
trainop's reading and learning-rate control against RETURNN's, on the installed package."""
from __future__ import annotations

import ast
import contextlib
import functools
import io
import os
import warnings

import pytest
import torch

import trainop
from trainop.training.returnn.config_none import AS_DEFAULT, LOOKUPS
from trainop.training.returnn.options import DEFAULTS, LR_CONTROL_KEYS, read_config, read_lr_control

returnn_config = pytest.importorskip("returnn.config")
lrc_module = pytest.importorskip("returnn.learning_rate_control")

#: the RETURNN files whose lookups the table follows
SOURCES = ("learning_rate_control.py", "tf/updater.py", "torch/updater.py", "tf/horovod.py",
           "engine/base.py", "util/basic.py", "tf/network.py")
#: the Config methods that read a key
METHODS = ("value", "typed_value", "opt_typed_value", "float", "int", "bool", "is_true",
           "bool_or_other", "list", "int_list", "float_list")
#: keys RETURNN reads from its torch ``optimizer`` dict, and trainop's own ``updater_opts``
NOT_CONFIG_LOOKUPS = {"weight_decay_modules_blacklist", "weight_decay_custom_include_check",
                      "param_groups_custom", "updater_opts"}
_UNSET = object()


@functools.cache  # RETURNN's sources parsed once per session, not once per key
def _returnn_lookups() -> dict[str, list[tuple[str, object]]]:
    """key -> [(method, default)] of every ``<config>.<method>("key", ...)`` in ``SOURCES``; of
    ``a or b`` over one key only the last (it decides for a None); a default that is no
    constant is ``_UNSET``."""
    root = os.path.dirname(lrc_module.__file__)
    found: dict[str, list[tuple[str, object]]] = {}

    def lookup(node):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in METHODS and node.args \
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            default = node.args[1] if len(node.args) > 1 else next(
                (k.value for k in node.keywords if k.arg == "default"), None)
            if default is None:  # the method's own default
                value = {"is_true": False}.get(node.func.attr)
            else:
                try:
                    value = ast.literal_eval(default)
                except ValueError:  # a lookup of another key, a name
                    value = _UNSET
            return node.args[0].value, node.func.attr, value
        return None

    for name in SOURCES:
        with open(os.path.join(root, name)) as f:
            tree = ast.parse(f.read())
        shadowed = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
                calls = [lookup(v) for v in node.values]
                if all(calls) and len({c[0] for c in calls}) == 1:
                    shadowed.update(id(v) for v in node.values[:-1])
        for node in ast.walk(tree):
            hit = lookup(node)
            if hit and id(node) not in shadowed:
                found.setdefault(hit[0], []).append(hit[1:])
    return found


def _none_reading(method: str) -> object:
    """What RETURNN's ``Config.<method>`` returns for a key set to None (``_UNSET``: the
    default passed)."""
    config = returnn_config.Config()
    config.update({"k": None})
    args = () if method == "is_true" else (_UNSET,)
    return getattr(config, method)("k", *args)


def test_every_key_trainop_reads_is_in_the_table():
    assert set(LOOKUPS) == set(DEFAULTS) | set(LR_CONTROL_KEYS)


def test_the_none_readings_are_returnns():
    for method in METHODS:
        expected = _UNSET if method in AS_DEFAULT else (False if method == "is_true" else None)
        assert _none_reading(method) is expected, method


@pytest.mark.parametrize("key", sorted(set(LOOKUPS) - NOT_CONFIG_LOOKUPS))
def test_the_table_is_returnns_lookup(key):
    method, default = LOOKUPS[key]
    found = _returnn_lookups()[key]
    assert method in {m for m, _ in found}
    # every place RETURNN reads the key reads a None the same way
    assert {repr(_none_reading(m)) for m, _ in found} == {repr(_none_reading(method))}
    defaults = [d for m, d in found if m == method and d is not _UNSET]
    assert not defaults or default in defaults


#: keys whose RETURNN default is None, which RETURNN resolves: the fallback engine (TF) and
#: behavior version 0
RESOLVED_NONE = {"backend": "tf", "behavior_version": 0}


@pytest.mark.parametrize("key", sorted(set(DEFAULTS) - NOT_CONFIG_LOOKUPS))
def test_an_unset_key_is_returnns_default(key):
    """trainop's default of each Updater option is the one RETURNN's source reads it with
    (``horovod_avg_grad``: ``is_true``, so unset sums the ranks' gradients)."""
    found = [d for _, d in _returnn_lookups()[key] if d is not _UNSET]
    if key in RESOLVED_NONE:
        assert (set(found), DEFAULTS[key]) == ({None}, RESOLVED_NONE[key])
        return
    ours = DEFAULTS[key]
    # a number as RETURNN writes it (0 or 0.0), a bool as a bool
    assert any(d == ours and isinstance(d, bool) == isinstance(ours, bool) for d in found) \
        or (not found and ours is None), found


def test_the_keys_returnn_does_not_look_up():
    assert NOT_CONFIG_LOOKUPS.isdisjoint(_returnn_lookups())


def _trainop_read(values: dict) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        options, _ = read_config(dict(values))
        return {**options, **read_lr_control(dict(values))}


@pytest.mark.parametrize("key", sorted(LOOKUPS))
def test_none_reads_as_returnns_lookup_reads_it(key):
    method, default = LOOKUPS[key]
    config = returnn_config.Config()
    config.update({key: None})
    upstream = getattr(config, method)(key, *(() if method == "is_true" else (default,)))
    ours = _trainop_read({key: None}).get(key, _UNSET)
    if method in AS_DEFAULT:  # RETURNN: the default, as if unset
        assert upstream == getattr(returnn_config.Config(), method)(key, default)
        assert ours == _trainop_read({}).get(key, _UNSET)
    else:
        assert ours is upstream


# ---------------------------------------------------------------- the learning-rate control
SCORES = [1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7]  # worse every epoch: every control decays
CONTROLS = ("constant", "newbob", "newbob_abs", "newbob_multi_epoch")


def _rates(control):
    out = []
    for epoch, score in enumerate(SCORES, start=1):
        out.append(control.get_learning_rate_for_epoch(epoch))
        control.set_epoch_error(epoch, {"dev_score": score})
    return out


def _returnn_rates(values):
    config = returnn_config.Config()
    config.update(dict(values))
    with contextlib.redirect_stdout(io.StringIO()):
        return _rates(lrc_module.load_learning_rate_control_from_config(config))


@pytest.mark.parametrize("control", CONTROLS)
@pytest.mark.parametrize("key", ("learning_rate", *LR_CONTROL_KEYS))
def test_lr_control_with_none_equals_returnn(control, key):
    values = {"learning_rate_control": control, "learning_rate": 0.5, key: None}
    try:
        expected = _returnn_rates(values)
    except TypeError:  # RETURNN fails on the None: trainop refuses it, naming the key
        with pytest.raises((TypeError, ValueError), match=f"`{key}`.*None"):
            _rates(trainop.LearningRateControl(values))
        return
    assert _rates(trainop.LearningRateControl(values)) == expected


def test_a_none_decay_keeps_the_rate_as_returnn():
    values = {"learning_rate_control": "newbob_rel", "learning_rate": 0.5,
              "newbob_learning_rate_decay": 0.3, "learning_rate_decay": None}
    assert _rates(trainop.LearningRateControl(values)) == _returnn_rates(values) == [0.5] * 8


# ---------------------------------------------------------------- the Updater
def _step(config):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        updater = trainop.Updater(config, model)
    updater.step(model(torch.ones(2, 3)).pow(2).sum())
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("key", ["backend", "horovod_reduce_type"])
def test_updater_reads_a_none_value_lookup_as_unset(key):
    # RETURNN: Config.value(key, default) of a None is the default (backend: the fallback
    # engine; horovod_reduce_type: "grad")
    base = {"optimizer": {"class": "adam"}, "use_horovod": True}
    assert all(torch.equal(a, b) for a, b in zip(_step({**base, key: None}), _step(base),
                                                 strict=True))


def test_a_none_optimizer_epsilon_names_the_key_where_the_class_takes_epsilon():
    # RETURNN's Config.float keeps the None; TF's Adam fails on it, its SGD never reads it
    with pytest.raises(TypeError, match="`optimizer_epsilon`.*got None"):
        _step({"optimizer": {"class": "adam"}, "optimizer_epsilon": None})
    _step({"optimizer": {"class": "sgd"}, "optimizer_epsilon": None})


def test_a_none_momentum_is_0_except_for_legacy_rmsprop():
    # RETURNN's TF updater: config.float("momentum", 0.0) keeps the None: falsy for Adam and
    # SGD, passed as RMSProp's momentum (where TF fails on it)
    assert all(torch.equal(a, b) for a, b in zip(
        _step({"optimizer": {"class": "adam"}, "momentum": None}),
        _step({"optimizer": {"class": "adam"}}), strict=True))
    with pytest.raises(TypeError, match="`momentum`.*got None"):
        _step({"rmsprop": True, "momentum": None})


def test_a_none_decouple_constraints_factor_is_refused_where_returnn_multiplies_by_it():
    # RETURNN's TF updater: factor *= config.float("decouple_constraints_factor", 0.025) when
    # decouple_constraints, with the None kept
    base = {"optimizer": {"class": "adam"}, "decouple_constraints_factor": None}
    with pytest.raises(TypeError, match="`decouple_constraints_factor`.*got None"):
        _step({**base, "decouple_constraints": True})
    _step(base)
    _step({**base, "decouple_constraints": True, "backend": "torch"})


def test_a_none_accumulation_is_0_with_tf_and_refused_with_torch():
    # RETURNN's TF updater reads Config.int's None as 0; its torch engine reads it with
    # Config.int too and compares the count with the None
    config = returnn_config.Config()
    config.update({"accum_grad_multiple_step": None})
    assert config.int("accum_grad_multiple_step", 1) is None
    base = {"optimizer": {"class": "adam"}}
    assert all(torch.equal(a, b) for a, b in zip(
        _step({**base, "accum_grad_multiple_step": None}), _step(base), strict=True))
    with pytest.raises(TypeError, match="`accum_grad_multiple_step`.*got None"):
        _step({**base, "backend": "torch", "accum_grad_multiple_step": None})


def test_a_none_learning_rate_control_in_a_returnn_file_is_constant(tmp_path):
    path = tmp_path / "setup.config"
    path.write_text("#!rnn.py\nlearning_rate = 0.5\nlearning_rate_control = None\n"
                    "optimizer = {'class': 'adam'}\nnetwork = {}\n")
    recipe = trainop.load_recipe(str(path))
    updater = recipe.build(torch.nn.Linear(3, 1))
    control = recipe.learning_rate_control()
    assert control.control == "constant"
    assert control.apply(updater, 1) == 0.5
    assert _rates(recipe.learning_rate_control()) == _returnn_rates(
        {"learning_rate": 0.5, "learning_rate_control": None}) == [0.5] * 8
