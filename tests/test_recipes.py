"""trainop.load_recipe: OpenSeq2Seq configs (in the layout of its example_configs), RETURNN
configs and trainop's YAML/JSON read as data, never run; the built TrainOp/Updater equals the
hand-built optimize_loss/Updater bit for bit; `trainop check-config` in process."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
from cli_in_process import run_cli
from torch import nn

import trainop
from trainop.schedules import openseq2seq as os2s

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def _model(dtype: torch.dtype = torch.float32, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)).to(dtype)


def _batches(dtype: torch.dtype = torch.float32, n: int = 6):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(5, 4, generator=g).to(dtype), torch.randn(5, 1, generator=g).to(dtype))
            for _ in range(n)]


def _mse(model: nn.Module):
    return lambda x, y: ((model(x) - y) ** 2).mean()


def _run_train_op(op, batches) -> None:
    for x, y in batches:
        op(x, y)


def _same_params(a: nn.Module, b: nn.Module) -> None:
    for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q), name


# ------------------------------------------------------------------ OpenSeq2Seq configs
TRANSFORMER = """
    import tensorflow as tf
    from open_seq2seq.models import Text2Text
    from open_seq2seq.encoders import TransformerEncoder
    from open_seq2seq.data.text2text.text2text import SpecialTextTokens
    from open_seq2seq.optimizers.lr_policies import transformer_policy

    d_model = 16
    base_model = Text2Text
    base_params = {
        "use_horovod": False,
        "max_steps": 20,
        "dtype": tf.float32,
        "optimizer": tf.contrib.opt.LazyAdamOptimizer,
        "optimizer_params": {"beta1": 0.9, "beta2": 0.997, "epsilon": 1e-09},
        "lr_policy": transformer_policy,
        "lr_policy_params": {"learning_rate": 2.0, "warmup_steps": 4, "d_model": d_model},
        "encoder": TransformerEncoder,
        "encoder_params": {"hidden_size": d_model, "pad": SpecialTextTokens.PAD_ID.value,
                           "initializer": tf.variance_scaling_initializer(scale=1.0)},
    }
"""


def test_transformer_lazyadam_transformer_policy(tmp_path):
    recipe = trainop.load_recipe(_write(tmp_path, "transformer.py", TRANSFORMER))
    o = recipe.options
    assert recipe.format == "openseq2seq" and recipe.builds == "TrainOp"
    assert recipe.optimizer_class is trainop.LazyAdamOptimizer
    assert o["optimizer"] is trainop.LazyAdamOptimizer
    assert o["lr_policy"] is os2s.transformer_policy
    assert o["lr_policy_params"] == {"learning_rate": 2.0, "warmup_steps": 4, "d_model": 16}
    assert o["dtype"] is torch.float32
    # OpenSeq2Seq's defaults for what the config leaves out
    assert (o["max_grad_norm"], o["larc_params"], o["loss_scaling"], o["loss_scaling_params"],
            o["iter_size"], o["regularizer"], o["regularizer_params"], o["summaries"]) == (
        None, None, 1.0, None, 1, None, {}, None)
    # the initializer call is code: reported with its line, not a training option
    where = recipe.unresolved["encoder_params.initializer"]
    line = textwrap.dedent(TRANSFORMER).splitlines().index(
        '                       "initializer": tf.variance_scaling_initializer(scale=1.0)},') + 1
    assert where.line == line == 20 and "variance_scaling_initializer" in where.reason
    assert recipe.pending() == {}

    model, ref = _model(), _model()
    op = recipe.build(model, _mse(model))
    hand = trainop.optimize_loss(
        _mse(ref), trainop.LazyAdamOptimizer, {"beta1": 0.9, "beta2": 0.997, "epsilon": 1e-9},
        os2s.TransformerPolicy(2.0, 16, 4), model=ref)
    batches = _batches()
    _run_train_op(op, batches)
    _run_train_op(hand, batches)
    _same_params(model, ref)
    assert int(op.global_step) == 6
    assert not torch.equal(model[0].weight, _model()[0].weight)  # it trained


DEEPSPEECH2 = """
    import tensorflow as tf
    from open_seq2seq.models import Speech2Text
    from open_seq2seq.optimizers.lr_policies import poly_decay

    base_model = Speech2Text
    base_params = {
        "use_horovod": False,
        "max_steps": 50,
        "optimizer": "Momentum",
        "optimizer_params": {"momentum": 0.90},
        "lr_policy": poly_decay,
        "lr_policy_params": {"learning_rate": 0.01, "power": 0.5},
        "max_grad_norm": 1.0,
        "regularizer": tf.contrib.layers.l2_regularizer,
        "regularizer_params": {"scale": 0.0005},
        "dtype": "mixed",
        "loss_scaling": "Backoff",
        "initializer": tf.contrib.layers.xavier_initializer,
    }
"""


def test_deepspeech2_mixed_backoff_regularizer(tmp_path):
    recipe = trainop.load_recipe(_write(tmp_path, "ds2.py", DEEPSPEECH2))
    o = recipe.options
    assert recipe.optimizer_class is trainop.MomentumOptimizer and o["optimizer"] == "Momentum"
    assert o["dtype"] == "mixed" and o["loss_scaling"] == "Backoff"
    assert o["regularizer"] is trainop.l2_regularizer
    assert o["lr_policy"] is os2s.poly_decay
    # OpenSeq2Seq's auto-fill: decay_steps = max_steps - begin_decay_at (= warmup_steps = 0)
    filled = trainop.schedules.fill_policy_params("poly_decay", o["lr_policy_params"],
                                                  num_steps=50)
    assert filled == {"learning_rate": 0.01, "power": 0.5, "begin_decay_at": 0,
                      "decay_steps": 50}

    model, ref = _model(torch.float16), _model(torch.float16)
    op = recipe.build(model, _mse(model))
    weights = [p for p in ref.parameters() if p.dim() >= 2]
    trainop.apply_regularization(list(ref.parameters()), trainop.l2_regularizer(0.0005))
    hand = trainop.optimize_loss(
        lambda x, y: _mse(ref)(x, y).float()
        + trainop.get_regularization_loss(weights, mixed=True),
        "Momentum", {"momentum": 0.9}, os2s.PolyDecay(0.01, 50, 0.5, 0), model=ref,
        dtype="mixed", loss_scaling="Backoff", clip_gradients=1.0)
    batches = _batches(torch.float16)
    _run_train_op(op, batches)
    _run_train_op(hand, batches)
    _same_params(model, ref)
    assert torch.equal(op.optimizer.master(model[0].weight), hand.optimizer.master(ref[0].weight))
    assert op.optimizer.loss_scale == hand.optimizer.loss_scale
    assert float(op.optimizer.loss_scale) == 2.0 ** 14  # Backoff starts at scale_max (spec 5.2)


def test_regularizer_changes_the_update_in_float32():
    """The regularization term reaches the gradient: the same recipe without it differs by
    exactly scale * w in the first SGD step (closed form)."""
    base = {"optimizer": "SGD", "lr_policy": "fixed_lr", "lr_policy_params": {"learning_rate":
                                                                            0.5}}
    model, plain = _model(), _model()
    w0 = model[0].weight.detach().clone()
    regularized = trainop.load_recipe({"base_params": {
        **base, "regularizer": "l2_regularizer", "regularizer_params": {"scale": 0.1}}})
    regularized.build(model, _mse(model))(*_batches()[0])
    trainop.load_recipe({"base_params": base}).build(plain, _mse(plain))(*_batches()[0])
    # SGD: w1 = w0 - lr*(g + scale*w0) on weights; biases (dim 1) are not regularized
    torch.testing.assert_close(model[0].weight, plain[0].weight - 0.5 * 0.1 * w0,
                               rtol=0, atol=1e-7)
    assert torch.equal(model[0].bias, plain[0].bias)


JASPER = """
    import tensorflow as tf
    from open_seq2seq.models import Speech2Text
    from open_seq2seq.optimizers.lr_policies import poly_decay
    from open_seq2seq.optimizers.novograd import NovoGrad

    base_model = Speech2Text
    base_params = {
        "use_horovod": False,
        "num_epochs": 4,
        "optimizer": NovoGrad,
        "optimizer_params": {"beta1": 0.95, "beta2": 0.98, "epsilon": 1e-08,
                             "weight_decay": 0.001, "grad_averaging": False},
        "lr_policy": poly_decay,
        "lr_policy_params": {"learning_rate": 0.02, "min_lr": 1e-5, "power": 2.0},
        "larc_params": {"larc_eta": 0.001},
        "dtype": "mixed",
        "loss_scaling": "Backoff",
    }
"""


def test_jasper_novograd_larc_mixed(tmp_path):
    recipe = trainop.load_recipe(_write(tmp_path, "jasper.py", JASPER))
    o = recipe.options
    assert recipe.optimizer_class is trainop.NovoGrad
    assert o["larc_params"] == {"larc_eta": 0.001} and o["max_grad_norm"] is None
    model = _model(torch.float16)
    with pytest.raises(ValueError, match="steps_per_epoch.*num_epochs=4"):
        recipe.build(model, _mse(model))
    ref = _model(torch.float16)
    op = recipe.build(model, _mse(model), steps_per_epoch=3)
    hand = trainop.optimize_loss(  # OpenSeq2Seq's NovoGrad: its second moment never stored
        _mse(ref), trainop.NovoGrad, dict(o["optimizer_params"], second_moment="openseq2seq"),
        os2s.PolyDecay(0.02, 12, 2.0, 0, 1e-5), model=ref, dtype="mixed",
        loss_scaling="Backoff", larc_params={"larc_eta": 0.001})
    batches = _batches(torch.float16)
    _run_train_op(op, batches)
    _run_train_op(hand, batches)
    _same_params(model, ref)
    assert int(op.global_step) == int(hand.global_step) == 6


RESNET50 = """
    import tensorflow as tf
    from open_seq2seq.models import Image2Label
    from open_seq2seq.optimizers.lr_policies import piecewise_constant

    base_model = Image2Label
    base_params = {
        "use_horovod": False,
        "num_epochs": 100,
        "optimizer": "Momentum",
        "optimizer_params": {"momentum": 0.90},
        "lr_policy": piecewise_constant,
        "lr_policy_params": {"learning_rate": 0.1, "boundaries": [30, 60, 80, 90],
                             "decay_rates": [0.1, 0.01, 0.001, 1e-4]},
        "regularizer": tf.contrib.layers.l2_regularizer,
        "regularizer_params": {"scale": 0.0001},
        "dtype": tf.float32,
    }
    train_params = {"lr_policy_params": {"learning_rate": 0.2}}
"""


def test_resnet50_momentum_piecewise_constant_epochs(tmp_path):
    recipe = trainop.load_recipe(_write(tmp_path, "rn50.py", RESNET50))
    o = recipe.options
    # train_params merged into base_params key by key (OpenSeq2Seq's nested_update)
    assert o["lr_policy_params"] == {"learning_rate": 0.2, "boundaries": [30, 60, 80, 90],
                                     "decay_rates": [0.1, 0.01, 0.001, 1e-4]}
    from trainop.interfaces.recipes.openseq2seq import filled_policy_params

    filled = filled_policy_params(o, None, steps_per_epoch=2)
    assert filled["steps_per_epoch"] == 2  # boundaries read as epochs
    lr = os2s.PiecewiseConstant(**filled)
    assert [lr(s) for s in (60, 61, 121, 161)] == [0.2, 0.2 * 0.1, 0.2 * 0.01, 0.2 * 0.001]
    model, ref = _model(), _model()
    op = recipe.build(model, _mse(model), steps_per_epoch=2)
    trainop.apply_regularization(list(ref.parameters()), trainop.l2_regularizer(0.0001))
    hand = trainop.optimize_loss(
        lambda x, y: _mse(ref)(x, y) + trainop.get_regularization_loss(list(ref.parameters())),
        "Momentum", {"momentum": 0.9}, lr, model=ref)
    batches = _batches()
    _run_train_op(op, batches)
    _run_train_op(hand, batches)
    _same_params(model, ref)


RESNET_ADAMW_COSINE = """
    import tensorflow as tf
    from open_seq2seq.models import Image2Label
    from open_seq2seq.encoders import ResNetEncoder

    base_model = Image2Label
    base_params = {
        "num_epochs": 4,
        "optimizer": "AdamW",
        "optimizer_params": {"beta1": 0.85, "beta2": 0.995, "epsilon": 1e-07,
                             "weight_decay": 0.05},
        "lr_policy": tf.train.cosine_decay,
        "lr_policy_params": {"learning_rate": 0.003, "alpha": 0.1},
        "initializer": tf.variance_scaling_initializer,
        "encoder": ResNetEncoder,
        "encoder_params": {"resnet_size": 50, "regularize_bn": False},
    }
"""


def test_tf_train_decay_function_as_lr_policy(tmp_path):
    """A TF1 decay function as ``lr_policy`` (as in OpenSeq2Seq's ResNet-50 AdamW example):
    mapped to trainop.schedules.tf1, ``decay_steps`` filled from the run length."""
    from trainop.schedules import tf1

    recipe = trainop.load_recipe(_write(tmp_path, "rn50_adamw.py", RESNET_ADAMW_COSINE))
    o = recipe.options
    assert o["lr_policy"] is tf1.cosine_decay
    assert recipe.optimizer_class is trainop.AdamWOptimizer
    from trainop.interfaces.recipes.openseq2seq import filled_policy_params

    filled = filled_policy_params(o, None, steps_per_epoch=3)
    assert filled == {"learning_rate": 0.003, "alpha": 0.1, "decay_steps": 12}
    lr = tf1.CosineDecay(0.003, 12, 0.1)
    assert lr(12) == pytest.approx(0.0003, rel=1e-12)
    model, ref = _model(), _model()
    op = recipe.build(model, _mse(model), steps_per_epoch=3)
    hand = trainop.optimize_loss(_mse(ref), "AdamW", dict(o["optimizer_params"]), lr, model=ref)
    batches = _batches()
    _run_train_op(op, batches)
    _run_train_op(hand, batches)
    _same_params(model, ref)
    # tf.train.piecewise_constant takes x, not global_step: not a policy
    bad = RESNET_ADAMW_COSINE.replace("tf.train.cosine_decay", "tf.train.piecewise_constant")
    with pytest.raises(ValueError, match=r"tensorflow.train.piecewise_constant \(an import"):
        trainop.load_recipe(_write(tmp_path, "rn50_bad.py", bad))


def test_options_that_need_code_are_listed_and_block_build(tmp_path):
    path = _write(tmp_path, "custom.py", """
        from open_seq2seq.models import Text2Text

        def my_policy(global_step, learning_rate):
            return learning_rate

        base_params = {
            "max_steps": 10,
            "optimizer": "Adam",
            "lr_policy": my_policy,
            "lr_policy_params": {"learning_rate": 0.01},
        }
    """)
    recipe = trainop.load_recipe(path)
    assert set(recipe.pending()) == {"lr_policy"}
    assert f"{path}:4" in str(recipe.unresolved["lr_policy"])  # where the function is defined
    model = _model()
    with pytest.raises(ValueError, match=r"lr_policy at .*custom.py:4"):
        recipe.build(model, _mse(model))
    recipe.options["lr_policy"] = lambda global_step, learning_rate: learning_rate
    op = recipe.build(model, _mse(model))
    op(*_batches()[0])
    assert int(op.global_step) == 1


@pytest.mark.parametrize("params,error,match", [
    ({"optimizer": "Adamm"}, ValueError, "Unknown optimizer name 'Adamm'"),
    ({"optimizer_params": {"beta22": 0.9}}, ValueError, "did you mean 'beta2'"),
    ({"lr_policy_params": {"learning_rate": 0.1, "warmup_step": 3}}, ValueError,
     "did you mean 'warmup_steps'"),
    ({"lr_policy": "poly_decayy"}, ValueError, "did you mean 'poly_decay'"),
    ({"dtype": "float64"}, ValueError, "dtype"),
    ({"loss_scaling": "Backof"}, ValueError, "'Backoff' or 'LogMax'"),
    ({"loss_scaling": -1.0}, ValueError, "loss_scaling"),
    ({"iter_size": 0}, ValueError, "iter_size"),
    ({"max_grad_norm": 1.0, "larc_params": {"larc_eta": 0.001}}, ValueError, "together"),
    ({"optimizer_params": [0.9]}, TypeError, "optimizer_params"),
    ({"optimizer_params": {"beta2": 1.5}}, ValueError, "beta2"),
    ({"larc_params": {"larc_eta": 0.001, "larc_mod": "clip"}}, ValueError, "larc_mod"),
    ({"summaries": ["learning_rate", "gradient_nrm"]}, ValueError, "gradient_nrm"),
    ({"loss_scaling": "Backoff", "loss_scaling_params": {"scale_mx": 2.0}}, ValueError,
     "scale_mx"),
])
def test_invalid_openseq2seq_options(params, error, match):
    base = {"optimizer": "Adam", "lr_policy": "poly_decay",
            "lr_policy_params": {"learning_rate": 0.1}, "max_steps": 10}
    with pytest.raises(error, match=match):
        trainop.load_recipe({"base_params": {**base, **params}})


# ------------------------------------------------------------------ RETURNN configs
def _updater_run(updater, model, batches) -> None:
    for x, y in batches:
        updater.step(_mse(model)(x, y))


@pytest.mark.parametrize("config,cls,optimizer", [
    # legacy flags: adam -> TF Adam with RETURNN's epsilon 1e-16
    ({"adam": True, "learning_rate": 0.01}, trainop.AdamOptimizer,
     {"class": trainop.AdamOptimizer, "use_locking": False, "epsilon": 1e-16}),
    ({"rmsprop": 0.95, "momentum": 0.5, "learning_rate": 0.01}, trainop.RMSPropOptimizer,
     {"class": trainop.RMSPropOptimizer, "use_locking": False, "decay": 0.95, "momentum": 0.5,
      "epsilon": 1e-16}),
    ({"momentum": 0.9, "learning_rate": 0.1}, trainop.MomentumOptimizer,
     {"class": trainop.MomentumOptimizer, "use_locking": False, "momentum": 0.9}),
    # optimizer dicts, with the implicit epsilon and the learning-rate multiplier
    ({"optimizer": {"class": "nadam", "learning_rate_multiplier": 0.5},
      "optimizer_epsilon": 1e-8, "learning_rate": 0.02}, trainop.NadamOptimizer,
     {"class": trainop.NadamOptimizer, "epsilon": 1e-8, "learning_rate_multiplier": 0.5}),
    ({"optimizer": {"class": "Adam", "beta1": 0.8}, "accum_grad_multiple_step": 2,
      "gradient_clip_global_norm": 0.5, "gradient_nan_inf_filter": True,
      "gradient_clip": 0.3, "learning_rate": 0.01}, trainop.AdamOptimizer,
     {"class": trainop.AdamOptimizer, "beta1": 0.8, "epsilon": 1e-16}),
])
def test_returnn_configs_equal_the_hand_built_updater(tmp_path, config, cls, optimizer):
    lines = [f"{k} = {v!r}" for k, v in config.items()]
    path = _write(tmp_path, "setup.config", "#!rnn.py\nnetwork = {'out': {'class': 'softmax'}}\n"
                  + "\n".join(lines) + "\n")
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        recipe = trainop.load_recipe(path)
    assert recipe.format == "returnn" and recipe.builds == "Updater"
    assert recipe.optimizer_class is cls
    assert recipe.options["optimizer"] == optimizer
    for key, value in config.items():
        if key != "optimizer":
            assert recipe.options[key] == value
    assert recipe.options["gradient_noise"] == 0.0  # RETURNN's defaults applied
    model, ref = _model(), _model()
    updater = recipe.build(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        hand = trainop.Updater(copy.deepcopy(config), ref)
    batches = _batches()
    _updater_run(updater, model, batches)
    _updater_run(hand, ref, batches)
    _same_params(model, ref)
    assert int(updater.global_train_step) == 6
    assert type(updater.optimizer) is cls


def test_returnn_legacy_flag_warns_and_nan_filter_zeroes(tmp_path):
    path = _write(tmp_path, "legacy.config", """
        adam = True
        learning_rate = 0.1
        gradient_nan_inf_filter = True
    """)
    with pytest.warns(FutureWarning, match="DEPRECATION WARNING"):
        recipe = trainop.load_recipe(path)
    model = _model()
    updater = recipe.build(model)
    before = [p.detach().clone() for p in model.parameters()]
    updater.step(_mse(model)(*_batches()[0]) * float("nan"))
    # NaN gradients -> zeros -> Adam's first step moves nothing (m = v = 0)
    for p, q in zip(model.parameters(), before, strict=True):
        assert torch.equal(p, q)
    # one call builds every recipe: loss and run length are not used by the Updater
    assert isinstance(recipe.build(_model(), lambda x: x, num_steps=5), trainop.Updater)


@pytest.mark.parametrize("config,match", [
    ({"optimizer": {"class": "adam"}, "gradient_clip": -1.0}, "gradient_clip"),
    ({"optimizer": {"class": "adam", "beta2": 1.5}}, "beta2"),
    ({"optimizer": {"class": "adamm"}}, "adamm"),
    ({"optimizer": {"class": "adam"}, "dynamic_learning_rate": {"interval": 2}}, "decay"),
])
def test_returnn_bad_values_fail_at_load(config, match):
    with pytest.raises(ValueError, match=match):
        trainop.load_recipe(config)


def test_returnn_behavior_version_2_rejects_legacy_flags():
    with pytest.raises(ValueError, match="behavior_version 2"):
        trainop.load_recipe({"adam": True, "behavior_version": 2})


RETURNN_LINES = """
    # a RETURNN config in the old line format: `key value`, no Python
    task train
    train GeneratingDataset::Task12AXDataset(num_seqs=50)
    hidden_size 12,12
    nadam true  # legacy flag
    optimizer_epsilon 1e-7
    learning_rate 0.02
    accum_grad_multiple_step 2
    gradient_nan_inf_filter TRUE
    learning_rates 0.005,0.01
"""

RETURNN_JSON = """
    {
      // a RETURNN config in JSON, with comments
      "task": "train",
      "optimizer": {"class": "adam", "beta1": 0.8},  /* the optimizer dict */
      "optimizer_epsilon": 1e-8,
      "learning_rate": 0.01,
      "gradient_clip_global_norm": 0.5,
      "note": "// not a comment"
    }
"""


@pytest.mark.parametrize("name,text,config,cls", [
    ("lines.config", RETURNN_LINES,
     {"nadam": True, "optimizer_epsilon": 1e-7, "learning_rate": 0.02,
      "accum_grad_multiple_step": 2, "gradient_nan_inf_filter": True},
     trainop.NadamOptimizer),
    ("setup.config", RETURNN_JSON,
     {"optimizer": {"class": "adam", "beta1": 0.8}, "optimizer_epsilon": 1e-8,
      "learning_rate": 0.01, "gradient_clip_global_norm": 0.5}, trainop.AdamOptimizer),
])
def test_returnn_json_and_line_format_configs(tmp_path, name, text, config, cls):
    """RETURNN's non-Python config files (its Config.load_file: '{' is JSON, other text
    without '#!' is `key value` lines) load as RETURNN recipes and step as the Updater."""
    path = _write(tmp_path, name, text)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        recipe = trainop.load_recipe(path)
        hand_config = copy.deepcopy(config)
        model, ref = _model(), _model()
        updater = recipe.build(model)
        hand = trainop.Updater(hand_config, ref)
        third = _model()
        from_path = trainop.Updater(path, third)  # the Updater reads these files too
    assert (recipe.format, recipe.builds, recipe.optimizer_class) == ("returnn", "Updater", cls)
    for key, value in config.items():
        if key != "optimizer":
            assert recipe.options[key] == value, key
    assert recipe.options["optimizer"]["epsilon"] == config["optimizer_epsilon"]
    if name == "lines.config":  # a value with a comma is a list, as in RETURNN
        assert recipe.options["learning_rates"] == [0.005, 0.01]
        assert recipe.learning_rate_control().get_learning_rate_for_epoch(2) == 0.01
    batches = _batches()
    _updater_run(updater, model, batches)
    _updater_run(hand, ref, batches)
    _same_params(model, ref)
    _updater_run(from_path, third, batches)
    _same_params(third, ref)
    assert type(updater.optimizer) is cls and type(from_path.optimizer) is cls


def test_returnn_debug_checks_are_installed_by_build_not_at_load(tmp_path, capsys):
    path = _write(tmp_path, "debug.config", """
        #!rnn.py
        optimizer = {"class": "adam"}
        learning_rate = 0.01
        debug_add_check_numerics_ops = True
    """)
    hooks = len(torch.nn.modules.module._global_forward_hooks)
    recipe = trainop.load_recipe(path)
    assert capsys.readouterr().out == ""  # no message, no hooks from the load-time probe
    assert len(torch.nn.modules.module._global_forward_hooks) == hooks
    model = _model()
    updater = recipe.build(model)
    updater.get_optim_op()
    assert "Adding checks for inf/nan." in capsys.readouterr().out
    x, y = _batches()[0]
    with pytest.raises(trainop.NumericsError) as info:
        updater.step(_mse(model)(x * float("inf"), y))
    assert (info.value.phase, info.value.module) == ("forward", "<input>")
    updater._checker.remove()


# ------------------------------------------------------------------ trainop's own format
def test_trainop_yaml_updater_form(tmp_path):
    path = _write(tmp_path, "r.yaml", """
        format: trainop
        optimizer: {class: adam, beta2: 0.98}
        optimizer_epsilon: 1.0e-8
        learning_rate: 0.01
        gradient_clip_global_norm: 1.0
        accum_grad_multiple_step: 2
    """)
    recipe = trainop.load_recipe(path)
    assert recipe.format == "trainop" and recipe.builds == "Updater"
    assert recipe.options["optimizer"] == {"class": trainop.AdamOptimizer, "beta2": 0.98,
                                           "epsilon": 1e-8}
    model, ref = _model(), _model()
    updater = recipe.build(model)
    hand = trainop.Updater({"optimizer": {"class": "adam", "beta2": 0.98},
                            "optimizer_epsilon": 1e-8, "learning_rate": 0.01,
                            "gradient_clip_global_norm": 1.0,
                            "accum_grad_multiple_step": 2}, ref)
    batches = _batches()
    _updater_run(updater, model, batches)
    _updater_run(hand, ref, batches)
    _same_params(model, ref)


def test_trainop_json_openseq2seq_block(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"format": "trainop", "openseq2seq": {
        "optimizer": "AdamW", "optimizer_params": {"weight_decay": 0.01},
        "lr_policy": "poly_decay", "lr_policy_params": {"learning_rate": 0.01,
                                                        "warmup_steps": 2},
        "max_grad_norm": 1.0, "dtype": "float32", "max_steps": 10}}))
    recipe = trainop.load_recipe(path)
    assert recipe.format == "trainop" and recipe.builds == "TrainOp"
    assert recipe.optimizer_class is trainop.AdamWOptimizer
    assert recipe.options["lr_policy"] is os2s.poly_decay
    model, ref = _model(), _model()
    op = recipe.build(model, _mse(model))
    hand = trainop.optimize_loss(
        _mse(ref), "AdamW", {"weight_decay": 0.01},
        os2s.PolyDecay(0.01, decay_steps=8, begin_decay_at=2, warmup_steps=2), model=ref,
        clip_gradients=1.0)
    batches = _batches()
    _run_train_op(op, batches)
    _run_train_op(hand, batches)
    _same_params(model, ref)


@pytest.mark.parametrize("text,match", [
    ("format: trainop\ngradient_clip_globl_norm: 1.0\n",
     "'gradient_clip_globl_norm'.*did you mean 'gradient_clip_global_norm'"),
    ("format: trainop\nopenseq2seq: {optimizer: Adam, lr_policy: fixed_lr, max_grad_nrm: 1}\n",
     "did you mean 'max_grad_norm'"),
    ("format: trainop\nopenseq2seq: {optimizer: Adam, lr_policy: fixed_lr}\nlearning_rate: 1\n",
     "only `format` and `openseq2seq`"),
    ("optimizer: {class: adam}\n", "format: trainop"),
    ("format: returnn\noptimizer: {class: adam}\n", "format: trainop"),
    ("format: trainop\noptimizer: {class: adam, beta3: 0.9}\n",
     r"Unknown key 'beta3' in `optimizer` \(AdamOptimizer takes \['beta1', 'beta2', 'epsilon', "
     r".*\]\); did you mean 'beta2'\?"),
    ("format: trainop\noptimizer: {class: momentum, momentun: 0.9}\n",
     "did you mean 'momentum'"),
])
def test_trainop_format_is_strict(tmp_path, text, match):
    with pytest.raises(ValueError, match=match):
        trainop.load_recipe(_write(tmp_path, "bad.yaml", text))


def test_detection_errors(tmp_path):
    with pytest.raises(ValueError, match="none of their keys"):
        trainop.load_recipe(_write(tmp_path, "x.py", "a = 1\nb = {'c': 2}\n"))
    with pytest.raises(ValueError, match="RETURNN training keys"):
        trainop.load_recipe({"unrelated": 1})
    with pytest.raises(TypeError, match="path or a dict"):
        trainop.load_recipe(3)
    with pytest.raises(ValueError, match="base_params"):
        trainop.load_recipe(_write(tmp_path, "y.py",
                                   "from open_seq2seq.models import Text2Text\nx = 1\n"))


# ------------------------------------------------------------------ never executed
def test_canary_config_code_never_runs(tmp_path):
    canary = tmp_path / "canary"
    os2s_path = _write(tmp_path, "evil_os2s.py", f"""
        import os
        import tensorflow as tf
        from open_seq2seq.optimizers.lr_policies import fixed_lr
        os.system("touch {canary}_system")
        open("{canary}_open", "w").write("ran")
        exec("open('{canary}_exec', 'w')")

        def side_effect():
            open("{canary}_def", "w")
        side_effect()
        base_params = {{
            "optimizer": "SGD",
            "lr_policy": fixed_lr,
            "lr_policy_params": {{"learning_rate": 0.1}},
            "max_steps": __import__("os").system("touch {canary}_import"),
            "logdir": open("{canary}_value", "w"),
        }}
    """)
    returnn_path = _write(tmp_path, "evil.config", f"""
        import os
        learning_rate = 0.1
        optimizer = {{"class": "adam"}}
        os.makedirs("{canary}_dir")
        gradient_clip = os.system("touch {canary}_returnn")
    """)
    recipe = trainop.load_recipe(os2s_path)
    assert recipe.pending().keys() == {"max_steps"}  # a call: reported, not run
    assert "evil_os2s.py:16" in str(recipe.unresolved["max_steps"])
    assert "logdir" in recipe.unresolved
    returnn = trainop.load_recipe(returnn_path)
    assert returnn.pending().keys() == {"gradient_clip"}
    assert "evil.config:6" in str(returnn.unresolved["gradient_clip"])
    with pytest.raises(ValueError, match="gradient_clip at .*evil.config:6"):
        returnn.build(_model())
    assert sorted(os.listdir(tmp_path)) == ["evil.config", "evil_os2s.py"]


# ------------------------------------------------------------------ trainop check-config
def _check_config(capfd, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``trainop check-config`` in process (tests/cli_in_process.py): what it writes is the
    point, not a fresh interpreter."""
    return run_cli(capfd, "check-config", *args, cwd=cwd)


def _transformer_lr(step: int, lr: float = 2.0, d_model: int = 64, warmup: int = 100) -> float:
    """OpenSeq2Seq's transformer_policy, written out (step + 1 as upstream)."""
    s = step + 1
    return lr * d_model ** -0.5 * min(s * warmup ** -1.5, s ** -0.5)


def test_check_config_openseq2seq_example(tmp_path, capfd):
    out = _check_config(capfd, str(EXAMPLES / "openseq2seq_transformer.py"), "--plot",
                        str(tmp_path / "lr.png"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "format: openseq2seq; builds: TrainOp" in text
    assert "optimizer: trainop.optimizers.adam.LazyAdamOptimizer" in text
    assert "beta1=0.9, beta2=0.997, epsilon=1e-09" in text
    assert "TF numerics: TF1 Adam's update ('epsilon hat')" in text
    steps = text.split("gradient pipeline (in order):\n")[1].split("learning rate:")[0]
    assert [line.split(". ", 1)[1] for line in steps.strip().splitlines()] == [
        "loss = float32(model loss)", "backward of loss", "global_gradient_norm (float32)",
        "clip by global norm 5.0 (max_grad_norm)",
        "LazyAdamOptimizer update; global_step += 1 when applied"]
    rows = {int(a): float(b) for a, b in (line.split() for line in text.splitlines()
                                          if line.strip()[:1].isdigit() and len(line.split())
                                          == 2)}
    assert sorted(rows) == [0, 40, 80, 100, 120, 160, 200, 240, 280, 320, 360, 400]
    for step, lr in rows.items():
        assert lr == pytest.approx(_transformer_lr(step), rel=1e-5)
    png = (tmp_path / "lr.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 5000
    assert "encoder_params.initializer" in text and "openseq2seq_transformer.py:" in text


def test_check_config_returnn_epsilon_advice_and_invalid(tmp_path, capfd):
    cfg = _write(tmp_path, "legacy.config", """
        adam = True
        learning_rates = [0.001, 0.002, 0.003]
        learning_rate = 0.003
        gradient_clip_global_norm = 5
        accum_grad_multiple_step = 2
    """)
    out = _check_config(capfd, cfg, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert not list(tmp_path.glob("*.png"))  # a plot only where asked (12 recipes left 12)
    assert "plot: none written (--plot FILE.png or --out FOLDER)" in out.stdout
    out = _check_config(capfd, cfg, "--out", str(tmp_path / "plots"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert f"plot: {tmp_path / 'plots' / 'legacy.lr.png'}" in out.stdout
    assert "optimizer: trainop.optimizers.adam.AdamOptimizer" in out.stdout
    assert "epsilon=1e-16" in out.stdout
    assert "warning: epsilon is RETURNN's TF default 1e-16" in out.stdout
    assert "accumulate by sum over accum_grad_multiple_step=2" in out.stdout
    assert "clip by global norm 5 (using G) (gradient_clip_global_norm)" in out.stdout
    assert "         3  0.003" in out.stdout
    assert (tmp_path / "plots" / "legacy.lr.png").stat().st_size > 1000

    bad = _write(tmp_path, "bad.yaml", "format: trainop\noptimizer: {class: adam}\n"
                 "gradient_clip_globl_norm: 1.0\n")
    out = _check_config(capfd, bad, "--no-plot", cwd=tmp_path)
    assert out.returncode == 1
    assert "invalid recipe" in out.stderr and "did you mean 'gradient_clip_global_norm'" \
        in out.stderr
    assert out.stdout == ""


def _check_in_process(capsys, *args: str) -> tuple[int, str, str]:
    from trainop.__main__ import main

    status = main(["check-config", *args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_check_config_trainop_yaml_and_epochs(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = _write(tmp_path, "os2s.yaml", """
        format: trainop
        openseq2seq:
          optimizer: Momentum
          optimizer_params: {momentum: 0.9}
          lr_policy: piecewise_constant
          lr_policy_params: {learning_rate: 0.1, boundaries: [2, 4], decay_rates: [0.1, 0.01]}
          regularizer: l2_regularizer
          regularizer_params: {scale: 1.0e-4}
          num_epochs: 6
          iter_size: 2
    """)
    status, out, err = _check_in_process(capsys, path, "--out", ".")
    assert status == 0, err
    assert "format: trainop; builds: TrainOp" in out
    assert "1. loss = float32(model loss) + l2_regularizer({'scale': 0.0001}) on weights" in out
    assert "accumulate g/2 over iter_size=2 micro-steps" in out
    assert "warning: iter_size > 1 without use_horovod" in out
    # trainop train's default: 10 micro-steps per epoch // iter_size 2 = 5 steps per epoch
    assert "num_epochs=6 x 5 step(s) per epoch: the default --steps-per-epoch 10" in out
    table = [line.split() for line in out.splitlines() if line.startswith("     ")
             and len(line.split()) == 2 and line.split()[0].isdigit()]
    # boundaries at epochs 2 and 4 = steps 10 and 20, each in the earlier interval (TF's rule)
    assert {int(a): float(b) for a, b in table} == {
        0: 0.1, 3: 0.1, 6: 0.1, 9: 0.1, 12: 0.01, 15: 0.01, 18: 0.01, 21: 0.001, 24: 0.001,
        27: 0.001, 30: 0.001}
    assert (tmp_path / "os2s.lr.png").stat().st_size > 1000
    status, out, _ = _check_in_process(capsys, path, "--steps-per-epoch", "20", "--no-plot")
    assert status == 0 and "      step  learning rate" in out and "        60  0.001" in out


def test_check_config_rejects_code_and_missing_run_length(tmp_path, capsys):
    code = _write(tmp_path, "code.py", """
        from open_seq2seq.models import Text2Text
        def my_policy(global_step):
            return 0.1
        base_params = {"optimizer": "Adam", "lr_policy": my_policy, "max_steps": 10}
    """)
    status, out, err = _check_in_process(capsys, code, "--no-plot")
    assert status == 1 and out == ""
    assert "training options need code" in err and "code.py:3" in err
    no_length = _write(tmp_path, "nolength.py", """
        base_params = {"optimizer": "Adam", "lr_policy": "poly_decay",
                       "lr_policy_params": {"learning_rate": 0.1}}
    """)
    status, out, _ = _check_in_process(capsys, no_length, "--no-plot")  # train's default run
    assert status == 0 and "neither max_steps nor num_epochs: the default run of trainop " \
        "train, 60 steps (--num-steps)" in out and "        60  0" in out
    status, out, _ = _check_in_process(capsys, no_length, "--no-plot", "--num-steps", "10")
    assert status == 0 and "        10  0" in out  # poly_decay reaches min_lr 0 at the end


def test_a_build_that_raises_changes_nothing():
    from trainop.training.regularization import get_regularizer

    recipe = trainop.load_recipe({"base_params": {
        "optimizer": "SGD", "lr_policy": "fixed_lr", "lr_policy_params": {"learning_rate": 0.1},
        "dtype": "float16", "regularizer": "l2_regularizer",
        "regularizer_params": {"scale": 0.1}}})
    model = _model()  # float32 parameters: pure float16 training refuses them
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(ValueError, match="dtype"):
        recipe.build(model, _mse(model))
    assert all(get_regularizer(p) is None for p in model.parameters())
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before, strict=True))
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize("name,fmt,builds", [
    ("openseq2seq_transformer.py", "openseq2seq", "TrainOp"),
    ("openseq2seq_jasper.py", "openseq2seq", "TrainOp"),
    ("returnn_lstm.config", "returnn", "Updater"),
    ("trainop_updater.yaml", "trainop", "Updater"),
])
def test_shipped_examples_load_build_and_step(name, fmt, builds):
    recipe = trainop.load_recipe(EXAMPLES / name)
    assert (recipe.format, recipe.builds, recipe.pending()) == (fmt, builds, {})
    dtype = torch.float16 if recipe.options.get("dtype") == "mixed" else torch.float32
    model = _model(dtype)
    start = [p.detach().clone() for p in model.parameters()]
    built = recipe.build(model, _mse(model), steps_per_epoch=4)
    for x, y in _batches(dtype, 4):
        if builds == "TrainOp":
            built(x, y)
        else:
            built.step(_mse(model)(x, y))
    assert not all(torch.equal(p, q) for p, q in zip(model.parameters(), start, strict=True))


def test_partial_evaluation_keeps_the_data_around_code():
    from trainop.configs import Unresolved, evaluate_python_config

    source = "x = {'a': 1, 'b': f(2), 'c': {'d': g()}}\n"
    whole = evaluate_python_config(source)
    assert isinstance(whole.values["x"], Unresolved) and "x" in whole.unresolved
    part = evaluate_python_config(source, partial=True)
    assert part.values["x"]["a"] == 1 and part.unresolved == {}
    assert isinstance(part.values["x"]["b"], Unresolved) and part.values["x"]["b"].line == 1
    assert "calls g(...)" in part.values["x"]["c"]["d"].reason


def test_pipeline_text_for_a_torch_optim_class():
    from trainop.interfaces.recipes.explain import pipeline_steps

    recipe = trainop.load_recipe({"backend": "torch", "learning_rate": 0.1,
                                  "optimizer": {"class": "adamw", "weight_decay": 0.01},
                                  "gradient_clip": 0.5, "gradient_clip_global_norm": 2.0})
    assert recipe.optimizer_class is torch.optim.AdamW
    steps = pipeline_steps(recipe)
    assert steps[1:3] == ["clip_grad_value_(0.5) (gradient_clip)",
                          "clip_grad_norm_(2.0), the norm measured here "
                          "(gradient_clip_global_norm)"]
    assert steps[-1].startswith("every group's lr set, AdamW.step()")


def test_returnn_recipe_learning_rate_control_drives_the_updater():
    recipe = trainop.load_recipe({
        "optimizer": {"class": "adam"}, "learning_rate": 0.01,
        "learning_rates": [0.001, 0.005], "learning_rate_control": "newbob_rel",
        "newbob_learning_rate_decay": 0.5, "min_learning_rate": 0.002})
    assert recipe.options["learning_rates"] == [0.001, 0.005]
    control = recipe.learning_rate_control()
    updater = recipe.build(_model())
    assert control.apply(updater, 1) == 0.001
    assert control.apply(updater, 2) == 0.005
    control.set_epoch_error(1, {"dev_score": 1.0})
    control.set_epoch_error(2, {"dev_score": 1.0})
    # relative error (1.0 - 1.0) / 1.0 = 0 > -0.01: decay, 0.005 * 0.5 = 0.0025 >= min 0.002
    assert control.apply(updater, 3) == 0.0025
    assert float(updater.get_current_step_learning_rate()) == pytest.approx(0.0025, rel=1e-7)
    with pytest.raises(ValueError, match="Updater recipe"):
        trainop.load_recipe({"base_params": {"optimizer": "Adam", "lr_policy": "fixed_lr",
                                             "lr_policy_params": {"learning_rate": 0.1}}
                             }).learning_rate_control()


def test_check_config_output_into_a_closed_pipe_is_not_an_invalid_recipe(monkeypatch, capsys):
    """`trainop check-config FILE | head -1`: the reader stopping is not the recipe's fault
    (no 'invalid recipe' message, no exit status 1); the command's top level ends quietly."""
    from trainop.__main__ import build_parser
    from trainop.interfaces import check_config

    def closed(*args, **kwargs):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(check_config, "_report", closed)
    args = build_parser().parse_args(["check-config", str(EXAMPLES / "trainop_updater.yaml")])
    with pytest.raises(BrokenPipeError):
        check_config.run(args)
    assert "invalid recipe" not in capsys.readouterr().err
