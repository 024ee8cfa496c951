"""load_recipe's and Recipe.build's errors, pinned (type and message) in one table."""

from __future__ import annotations

import pytest
import torch
from error_table import Row, check, ids

import trainop
from trainop.interfaces.recipes.settings import parse_settings

BASE = {"optimizer": "Adam", "lr_policy": "poly_decay",
        "lr_policy_params": {"learning_rate": 0.1}, "max_steps": 10}


def os2s(**changes):
    return lambda: trainop.load_recipe({"base_params": {**BASE, **changes}})


def build(config, **kwargs):
    model = torch.nn.Linear(2, 1)
    return lambda: trainop.load_recipe(config).build(model, **kwargs)


def _file(name, text):
    import tempfile

    path = f"{tempfile.mkdtemp()}/{name}"
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


ERRORS: list[Row] = [
    Row("source-type", lambda: trainop.load_recipe(3), TypeError,
        r"Expected `source` to be a path or a dict, got 3 \(int\)"),
    Row("dict-unknown", lambda: trainop.load_recipe({"nothing": 1}), ValueError,
        r"Expected a recipe dict with `base_params` \(OpenSeq2Seq\), `format: trainop`, or "
        r"RETURNN training keys"),
    Row("config-values-type", lambda: trainop.load_recipe(
        _file("r.config", "learning_rate = 0.1\n"), config_values={"not a name": 1}), TypeError,
        r"^Expected `config_values` to be a dict of name -> value with identifier names, got "
        r"\{'not a name': 1\} \(dict\)$"),
    Row("config-values-not-python", lambda: trainop.load_recipe(
        {"optimizer": {"class": "adam"}}, config_values={"a": 1}), ValueError,
        r"^Expected `config_values` only with a Python config \(they set names its code "
        r"reads\), got \['a'\] for a dict recipe; edit recipe.options or pass "
        r"build\(overrides=...\) instead$"),
    Row("set-without-value", lambda: parse_settings(["lr"]), ValueError,
        r"^Expected --set NAME=VALUE with NAME a name \(or a dotted option such as "
        r"lr_policy_params.decay_steps\), got 'lr'$"),
    Row("no-optimizer", os2s(optimizer=None), ValueError,
        r"Expected `optimizer` in the recipe"),
    Row("unknown-optimizer", os2s(optimizer="Adamm"), ValueError,
        r"Unknown optimizer name 'Adamm'"),
    Row("optimizer-type", os2s(optimizer=3.0), TypeError,
        r"Expected `optimizer` to be a name or a trainop.Optimizer subclass"),
    Row("no-policy", os2s(lr_policy=None), ValueError, r"Expected `lr_policy` in the recipe"),
    Row("policy-name", os2s(lr_policy="poly"), ValueError,
        r"Expected `lr_policy` to be one of \[.*\], got 'poly'"),
    Row("policy-param", os2s(lr_policy_params={"learning_rate": 0.1, "powr": 2.0}),
        ValueError, r"Unknown key 'powr' in `lr_policy_params` \(poly_decay takes .*\); did "
                    r"you mean 'power'\?"),
    Row("optimizer-param", os2s(optimizer_params={"beta3": 0.9}), ValueError,
        r"Unknown key 'beta3' in `optimizer_params` \(AdamOptimizer takes .*\)"),
    Row("dtype", os2s(dtype="float64"), ValueError,
        r"Expected `dtype` to be one of tf.float32, tf.float16, 'mixed'.*got 'float64'"),
    Row("loss-scaling", os2s(loss_scaling="Dynamic"), ValueError,
        r"Expected `loss_scaling` to be a number > 0, 'Backoff' or 'LogMax', got 'Dynamic'"),
    Row("regularizer", os2s(regularizer="l3_regularizer"), ValueError,
        r"Expected `regularizer` to be one of \['l1_regularizer', 'l2_regularizer'\], got "
        r"'l3_regularizer'"),
    Row("dict-option", os2s(larc_params=0.001), TypeError,
        r"Expected `larc_params` to be a dict, got 0.001 \(float\)"),
    Row("clip-and-larc", os2s(max_grad_norm=1.0, larc_params={"larc_eta": 0.001}),
        ValueError, r"Expected `max_grad_norm` and `larc_params` not to be used together"),
    Row("strict-block", lambda: trainop.load_recipe(
        {"format": "trainop", "openseq2seq": {**BASE, "lr_polcy": "poly_decay"}}),
        ValueError, r"Unknown key 'lr_polcy' in the openseq2seq block; did you mean "
                    r"'lr_policy'\?"),
    Row("strict-top", lambda: trainop.load_recipe(
        {"format": "trainop", "learning_rat": 0.1}), ValueError,
        r"Unknown key 'learning_rat' in the trainop recipe; did you mean 'learning_rate'\?"),
    Row("format-value", lambda: trainop.load_recipe({"format": "returnn"}), ValueError,
        r"Expected `format: trainop` in a trainop recipe, got format='returnn'"),
    Row("run-length", build({"base_params": {**BASE, "max_steps": None}}), ValueError,
        r"Expected `num_steps` \(or max_steps\): poly_decay needs the run length"),
    Row("epochs", build({"base_params": {**BASE, "max_steps": None, "num_epochs": 3}}),
        ValueError, r"Expected `steps_per_epoch` \(the config runs num_epochs=3\)"),
    Row("num-steps", build({"base_params": BASE}, num_steps=0), ValueError,
        r"num_steps"),
    Row("model-type", lambda: trainop.load_recipe({"base_params": BASE}).build("model"),
        TypeError, r"Expected `model` to be a torch.nn.Module, got 'model' \(str\)"),
    Row("frozen-all", build({"base_params": {**BASE, "freeze_variables_regex": ".*"}}),
        ValueError, r"Expected parameters to train, got none"),
    Row("returnn-lines", lambda: trainop.load_recipe(_file("bad.config",
                                                           "learning_rate 0.1\nadam\n")),
        trainop.RecipeError, r".*bad.config:2: expected `key value` on each line of the "
                             r"RETURNN line-format config, got 'adam'"),
    Row("returnn-json", lambda: trainop.load_recipe(_file("bad.config",
                                                          '{"learning_rate": 0.1,}')),
        trainop.RecipeError, r".*bad.config:1: invalid JSON at column 23"),
    Row("returnn-no-keys", lambda: trainop.load_recipe(_file("fwd.config",
                                                             "task forward\nbatch_size 10\n")),
        ValueError, r"Expected the RETURNN config .*fwd.config to set training keys "
                    r"\(optimizer, learning_rate, gradient_clip\*, ...\), got keys "
                    r"\['batch_size', 'task'\]"),
    Row("returnn-model", lambda: trainop.load_recipe({"learning_rate": 0.1}).build([1]),
        TypeError, r"Expected `model` to be a torch.nn.Module, got \[1\] \(list\)"),
]


@pytest.mark.parametrize("row", ERRORS, ids=ids(ERRORS))
def test_error(row):
    check(row)
