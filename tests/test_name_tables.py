"""Every table of names, tested entry by entry from the table itself: a name added to a table
is tested the moment it is added, and a name whose handling breaks fails on its own.

Each test is parametrized over the table the code uses (never a copy of it) and checks what
the entry must do through the interface a user reaches it by: a recipe, a config file, the
registry, the summaries option.
"""

from __future__ import annotations

import pytest
import torch

import trainop
from trainop.configs.returnn_lookups import LOOKUPS
from trainop.interfaces.recipes import openseq2seq
from trainop.registry import OPTIMIZER_CLASSES, get_optimizer_class, optimizer_names
from trainop.training.optimize_loss import OPTIMIZER_CLS_NAMES
from trainop.training.returnn.lr_control import CONTROLS
from trainop.training.returnn.resolve import LEGACY_FLAGS
from trainop.training.returnn.unknown_options import THEANO_OPTIONS, UPSTREAM_ONLY
from trainop.training.summaries import OPTIMIZER_SUMMARIES, check_summaries

OS2S_BASE = {"optimizer": "Adam", "lr_policy": "fixed_lr",
             "lr_policy_params": {"learning_rate": 0.1}}


def _returnn(tmp_path, text):
    path = tmp_path / "r.config"
    path.write_text("#!rnn.py\n" + text)
    return trainop.load_recipe(str(path))


# ---- OpenSeq2Seq: the keys trainop knows and does not need ---------------------------------

@pytest.mark.parametrize("key", sorted(openseq2seq.IGNORED))
def test_openseq2seq_ignored_key_is_listed_with_its_reason(key):
    recipe = trainop.load_recipe({"base_params": {**OS2S_BASE, key: 1}})
    assert recipe.ignored == {key: openseq2seq.IGNORED[key]}
    assert key not in recipe.options  # known, not used


@pytest.mark.parametrize("key", sorted(openseq2seq.IGNORED))
def test_openseq2seq_ignored_key_cannot_be_overridden(key):
    with pytest.raises(ValueError, match=rf"got '{key}(\.x)?': it changes nothing trainop uses"):
        openseq2seq.with_overrides(dict(OS2S_BASE), {f"{key}.x": 1})


@pytest.mark.parametrize("key", sorted(openseq2seq.IGNORED))
def test_openseq2seq_ignored_key_is_unknown_in_trainops_own_format(key):
    with pytest.raises(ValueError, match=f"Unknown key '{key}'"):
        openseq2seq.options_from({**OS2S_BASE, key: 1}, strict=True)


def test_a_key_outside_the_tables_is_refused():
    with pytest.raises(ValueError, match="Unknown key 'num_gpu'.*num_gpus"):
        trainop.load_recipe({"base_params": {**OS2S_BASE, "num_gpu": 1}})


# ---- optimizer names: OpenSeq2Seq's table and the registry ---------------------------------

@pytest.mark.parametrize(("name", "cls_name"), sorted(OPTIMIZER_CLS_NAMES.items()))
def test_openseq2seq_optimizer_name_builds_its_class(name, cls_name):
    required = {"AdamW": {"weight_decay": 0.01}, "Momentum": {"momentum": 0.9}}.get(name, {})
    recipe = trainop.load_recipe({"base_params": {**OS2S_BASE, "optimizer": name,
                                                  "optimizer_params": required}})
    assert recipe.optimizer_class is OPTIMIZER_CLASSES[cls_name]


@pytest.mark.parametrize("name", optimizer_names())
def test_registry_name_resolves_in_every_spelling(name):
    cls = get_optimizer_class(name)
    assert get_optimizer_class(name.upper()) is cls
    assert get_optimizer_class(name + "Optimizer") is cls
    if name != "sgd":  # the alias
        assert cls.__name__.lower().removesuffix("optimizer") == name


@pytest.mark.parametrize("name", sorted(OPTIMIZER_CLASSES))
def test_registry_class_is_found_by_its_own_name(name):
    cls = OPTIMIZER_CLASSES[name]
    assert get_optimizer_class(name) is cls
    assert cls.__name__ == name


def test_an_unknown_optimizer_name_lists_the_valid_ones():
    with pytest.raises(ValueError) as info:
        get_optimizer_class("adamm")
    for name in optimizer_names():
        assert name in str(info.value)


# ---- RETURNN: Theano-era options, upstream-only options, legacy flags, lr control ----------

@pytest.mark.parametrize("key", THEANO_OPTIONS)
def test_returnn_theano_option_is_noted_not_used(tmp_path, key):
    recipe = _returnn(tmp_path, f'optimizer = {{"class": "adam"}}\nlearning_rate = 0.1\n'
                                f'{key} = 0.5\n')
    notes = [n for n in recipe.notes if repr(key) in n]
    assert len(notes) == 1 and "Theano backend" in notes[0], recipe.notes


@pytest.mark.parametrize("key", sorted(UPSTREAM_ONLY))
def test_returnn_upstream_only_option_refused_when_set(tmp_path, key):
    text = 'optimizer = {"class": "adam"}\nlearning_rate = 0.1\n'
    _returnn(tmp_path, text + f"{key} = False\n")  # unset or false: fine
    with pytest.raises(ValueError, match=f"Expected {key} to be unset or false"):
        _returnn(tmp_path, text + f"{key} = True\n")


#: RETURNN's legacy flags -> the class each selects (upstream: returnn/tf/updater.py).
LEGACY_CLASSES = {"adam": "AdamOptimizer", "nadam": "NadamOptimizer",
                  "adadelta": "AdadeltaOptimizer", "adagrad": "AdagradOptimizer",
                  "rmsprop": "RMSPropOptimizer", "momentum": "MomentumOptimizer"}


@pytest.mark.parametrize("flag", LEGACY_FLAGS)
def test_returnn_legacy_flag_selects_its_class_with_a_note(tmp_path, flag):
    recipe = _returnn(tmp_path, f"{flag} = True\nlearning_rate = 0.1\n")
    assert recipe.optimizer_class is OPTIMIZER_CLASSES[LEGACY_CLASSES[flag]]
    assert any(f"{flag} = True" in n for n in recipe.notes), recipe.notes


@pytest.mark.parametrize("control", CONTROLS)
def test_returnn_learning_rate_control_name_loads(tmp_path, control):
    recipe = _returnn(tmp_path, 'optimizer = {"class": "adam"}\nlearning_rate = 0.1\n'
                                f'learning_rate_control = "{control}"\n')
    assert recipe.options["learning_rate_control"] == control
    assert recipe.learning_rate_control() is not None


def test_an_unknown_learning_rate_control_is_refused(tmp_path):
    with pytest.raises(ValueError, match="newbob"):
        _returnn(tmp_path, 'optimizer = {"class": "adam"}\nlearning_rate = 0.1\n'
                           'learning_rate_control = "newbobb"\n').learning_rate_control()


#: What each ``config.<lookup>`` gives for a name that is not set, with a default (RETURNN's
#: returnn/config.py), and for one set to 2.
LOOKUP_UNSET = {"has": ("", False), "typed_value": (", 5", 5), "value": (', "d"', "d"),
                "int": (", 3", 3), "bool": (", True", True), "float": (", 0.5", 0.5),
                "list": (", [1]", [1])}
LOOKUP_SET = {"has": True, "typed_value": 2, "value": "2", "int": 2, "bool": True,
              "float": 2, "list": [2]}


@pytest.mark.parametrize("method", LOOKUPS)
def test_returnn_config_lookup_reads_the_file(tmp_path, method):
    default, unset = LOOKUP_UNSET[method]
    recipe = _returnn(tmp_path, 'optimizer = {"class": "adam"}\nbatch = 2\n'
                                f'learning_rate = 0.1\nunset = config.{method}("nope"{default})\n'
                                f'got = config.{method}("batch"{default})\n'
                                'gradient_clip = 1.0 if got == ' + repr(LOOKUP_SET[method]) +
                                ' and unset == ' + repr(unset) + ' else 2.0\n')
    assert recipe.options["gradient_clip"] == 1.0


def test_the_lookup_tables_cover_every_lookup():
    assert set(LOOKUP_UNSET) == set(LOOKUP_SET) == set(LOOKUPS)


# ---- summaries -----------------------------------------------------------------------------

@pytest.mark.parametrize("name", OPTIMIZER_SUMMARIES)
def test_summary_name_is_accepted(name):
    assert check_summaries([name]) == [name]


def test_an_unknown_summary_is_refused_naming_the_valid_ones():
    with pytest.raises(ValueError) as info:
        check_summaries(["gradient_norms"])
    assert all(name in str(info.value) for name in OPTIMIZER_SUMMARIES)


@pytest.mark.parametrize("name", OPTIMIZER_SUMMARIES)
def test_summary_name_is_logged_by_optimize_loss(tmp_path, name):
    """optimize_loss with the summary: its step runs and logs what the name says."""
    model = torch.nn.Linear(2, 1)
    train_op = trainop.optimize_loss(lambda: model(torch.ones(1, 2)).sum(), "SGD", {}, 0.1,
                                     var_list=list(model.parameters()), summaries=[name])
    train_op()
    assert train_op is not None
