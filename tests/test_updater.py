"""trainop.Updater: RETURNN's TF updater options against the spec's formulas and order, and
RETURNN's upstream test cases (spec §11) with their numbers."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from host_reads import no_host_reads
from torch import nn

import trainop


def _scalar(v=0.0):
    return torch.tensor(v, requires_grad=True)


def _val(t):
    return t.detach().double().flatten().tolist()


# ---------------------------------------------------------------- RETURNN's tests (spec §11.1)
def test_upstream_updater_gradient_descent():
    x = _scalar(5.0)
    u = trainop.Updater({"learning_rate": 1.0}, [x])
    u.step(3 * x)
    assert x.item() == 2.0 and int(u.global_train_step) == 1
    assert isinstance(u.optimizer, trainop.GradientDescentOptimizer)


def test_upstream_decouple_constraints_simple_graph():
    w = _scalar(1.0)
    w.RETURNN_constraint_L2 = 0.01
    u = trainop.Updater({"decouple_constraints": True, "learning_rate": 1.0}, [w])
    u.step(w * 0.0)
    assert w.item() == pytest.approx(1 - 2 * 0.01, rel=1e-7)


def test_upstream_decouple_constraints_with_accumulation():
    w = _scalar(1.0)
    w.RETURNN_constraint_L2 = 0.01
    u = trainop.Updater({"decouple_constraints": True, "learning_rate": 1.0,
                         "accum_grad_multiple_step": 2}, [w])
    expected = 1.0
    for i in range(10):
        u.step(w * 0.0)
        assert int(u.global_train_step) == i + 1
        if i % 2 == 1:
            expected *= 1 - 0.02
        assert w.item() == pytest.approx(expected, rel=1e-6)


# ---------------------------------------------------------------- accumulation and the order
def test_accumulation_sums_and_updates_at_t_mod_n():
    w = _scalar(0.0)
    u = trainop.Updater({"learning_rate": 1.0, "accum_grad_multiple_step": 3}, [w])
    seen = []
    for k in range(7):
        u.step(w * (k + 1))
        seen.append(w.item())
    assert seen == [0.0, 0.0, -6.0, -6.0, -6.0, -21.0, -21.0]


def test_global_clip_uses_raw_norm_of_the_update_micro_step():
    """RETURNN TF: G is the norm of the current micro-step's raw gradients, applied to the
    accumulated sum: acc = g1 + g2 = [3, 4] + [0.6, 0.8], G = ||g2|| = 1, c = 0.5."""
    w = torch.zeros(2, requires_grad=True)
    u = trainop.Updater({"learning_rate": 1.0, "accum_grad_multiple_step": 2,
                         "gradient_clip_global_norm": 0.5}, [w])
    u.step((w * torch.tensor([3.0, 4.0])).sum())
    u.step((w * torch.tensor([0.6, 0.8])).sum())
    factor = 0.5 / max(1.0, 0.5)
    torch.testing.assert_close(w.detach(), -torch.tensor([3.6, 4.8]) * factor)
    # the PyTorch backend clips by the norm at the clip stage (of the accumulated sum)
    w2 = torch.zeros(2, requires_grad=True)
    u2 = trainop.Updater({"backend": "torch", "learning_rate": 1.0,
                          "accum_grad_multiple_step": 2, "gradient_clip_global_norm": 0.5,
                          "optimizer": {"class": "sgd"}}, [w2])
    u2.step((w2 * torch.tensor([3.0, 4.0])).sum())
    u2.step((w2 * torch.tensor([0.6, 0.8])).sum())
    torch.testing.assert_close(w2.detach(), -torch.tensor([3.6, 4.8]) * 0.5 / 6.0)


def test_per_tensor_clips_value_norm_average_norm():
    g = torch.tensor([3.0, -4.0])
    for options, expected in [
        ({"gradient_clip": 1.0}, [1.0, -1.0]),
        ({"gradient_clip_norm": 1.0}, [0.6, -0.8]),
        ({"gradient_clip_avg_norm": 1.0}, [3.0 * 1.0 / max(5.0 / 2, 1.0),
                                           -4.0 * 1.0 / max(5.0 / 2, 1.0)]),
    ]:
        w = torch.zeros(2, requires_grad=True)
        trainop.Updater({"learning_rate": 1.0, **options}, [w]).step((w * g).sum())
        torch.testing.assert_close(w.detach(), -torch.tensor(expected), msg=str(options))


def test_nan_then_global_clip_zeroes_every_gradient_but_adam_moves():
    """Q4: clip (NaN norm -> NaN everywhere), then the filter zeroes everything; Adam still
    moves on its first moment; nothing is skipped."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    v = torch.tensor([3.0], requires_grad=True)
    u = trainop.Updater({"optimizer": {"class": "adam"}, "learning_rate": 0.1,
                         "gradient_clip_global_norm": 1.0, "gradient_nan_inf_filter": True},
                        [w, v])
    u.step((w * torch.tensor([0.5, 0.5])).sum() + v.sum())
    before_w, before_v = w.detach().clone(), v.detach().clone()
    m = u.optimizer.get_slot(w, "m").clone()
    u.step((w * torch.tensor([float("nan"), 1.0])).sum() + v.sum())
    assert bool(u.optimizer.state[w]["m"].eq(m * 0.9).all())  # g = 0: m decays, no NaN
    assert torch.isfinite(w).all() and not torch.equal(w.detach(), before_w)
    assert not torch.equal(v.detach(), before_v)  # v's gradient was zeroed too; it still moves


def test_grad_norm_to_clip_to_zero():
    w = torch.zeros(2, requires_grad=True)
    u = trainop.Updater({"optimizer": {"class": "momentum", "momentum": 0.5},
                         "learning_rate": 1.0, "grad_norm_to_clip_to_zero": 2.0}, [w])
    u.step((w * torch.tensor([0.6, 0.8])).sum())  # G = 1: kept
    torch.testing.assert_close(w.detach(), -torch.tensor([0.6, 0.8]))
    u.step((w * torch.tensor([3.0, 4.0])).sum())  # G = 5 > 2: zero gradient, momentum moves
    torch.testing.assert_close(w.detach(), -torch.tensor([0.6, 0.8]) * 1.5)


def test_gradient_noise_is_truncated_normal():
    w = torch.zeros(20000, requires_grad=True)
    torch.manual_seed(3)
    trainop.Updater({"learning_rate": 1.0, "gradient_noise": 0.1}, [w]).step(w.sum() * 0.0)
    noise = -w.detach()
    assert noise.abs().max() <= 0.2 + 1e-6  # redrawn beyond 2 sigma
    assert noise.std().item() == pytest.approx(0.088, rel=0.05)  # ~0.88 sigma


def test_invalid_gradient_steps_skip_then_abort():
    w = torch.ones(2, requires_grad=True)
    u = trainop.Updater({"learning_rate": 1.0,
                         "num_allowed_consec_invalid_gradient_steps": 1}, [w])
    with pytest.warns(RuntimeWarning, match="Invalid gradient in step 0, skipping"):
        result = u.step((w * float("nan")).sum())
    assert not bool(result.applied) and torch.equal(w.detach(), torch.ones(2))
    with pytest.raises(trainop.processing.NonFiniteGradientsError,
                       match="Got 2 invalid gradients in succession"):
        u.step((w * float("inf")).sum())


# ---------------------------------------------------------------- optimizer and learning rate
def test_optimizer_dict_epsilon_momentum_and_names():
    w = torch.zeros(2, requires_grad=True)
    u = trainop.Updater({"optimizer": {"class": "Adam", "beta1": 0.5}}, [w])
    group = u.optimizer.param_groups[0]
    assert isinstance(u.optimizer, trainop.AdamOptimizer)
    assert group["epsilon"] == 1e-16 and group["beta1"] == 0.5  # optimizer_epsilon default
    u = trainop.Updater({"optimizer": {"class": "adamoptimizer", "epsilon": 1e-8},
                         "optimizer_epsilon": 1e-3}, [w])
    assert u.optimizer.param_groups[0]["epsilon"] == 1e-8
    u = trainop.Updater({"optimizer": {"class": "momentum"}, "momentum": 0.7}, [w])
    assert u.optimizer.param_groups[0]["momentum"] == 0.7
    assert trainop.Updater.get_optimizer_class("nadam") is trainop.NadamOptimizer
    assert trainop.Updater.get_optimizer_class(lambda: "rmsprop") is trainop.RMSPropOptimizer


def test_legacy_flags_precedence_and_deprecation():
    w = torch.zeros(2, requires_grad=True)
    with pytest.warns(FutureWarning, match="DEPRECATION WARNING: Please define an "
                                                "optimizer specifically"):
        u = trainop.Updater({"adam": True, "rmsprop": 0.95}, [w])
    assert isinstance(u.optimizer, trainop.AdamOptimizer)
    with pytest.warns(FutureWarning):
        u = trainop.Updater({"rmsprop": 0.95, "momentum": 0.3}, [w])
    group = u.optimizer.param_groups[0]
    assert isinstance(u.optimizer, trainop.RMSPropOptimizer)
    assert (group["decay"], group["momentum"], group["epsilon"]) == (0.95, 0.3, 1e-16)
    with pytest.warns(FutureWarning):
        assert isinstance(trainop.Updater({"momentum": 0.9}, [w]).optimizer,
                          trainop.MomentumOptimizer)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert isinstance(trainop.Updater({}, [w]).optimizer, trainop.GradientDescentOptimizer)
    with pytest.raises(ValueError, match="behavior_version 2"):
        trainop.Updater({"adam": True, "behavior_version": 2}, [w])


def test_learning_rate_multiplier_set_learning_rate_and_dynamic_dict():
    w = _scalar(0.0)
    u = trainop.Updater({"optimizer": {"class": "sgd", "learning_rate_multiplier": 3.0},
                         "learning_rate": 0.5}, [w])
    u.step(w * 1.0)
    assert w.item() == pytest.approx(-1.5)
    u.set_learning_rate(0.1)
    u.step(w * 1.0)
    assert w.item() == pytest.approx(-1.8)
    v = _scalar(0.0)
    u = trainop.Updater({"learning_rate": 1.0,
                         "dynamic_learning_rate": {"interval": 3, "decay": 0.5}}, [v])
    steps = []
    for _ in range(5):
        before = v.item()
        u.step(v * 1.0)
        steps.append(before - v.item())
    assert steps == pytest.approx([1.0, 0.5, 0.25, 1.0, 0.5])  # lr * 0.5 ** (t mod 3)


def test_dynamic_learning_rate_callable():
    w = _scalar(0.0)
    seen = []

    def lr_fn(*, global_train_step, learning_rate, **kwargs):
        seen.append(int(global_train_step))
        return learning_rate / (1.0 + global_train_step.to(torch.float32))

    u = trainop.Updater({"learning_rate": 1.0, "dynamic_learning_rate": lr_fn}, [w])
    for _ in range(3):
        u.step(w * 1.0)
    assert seen == [0, 1, 2]
    assert w.item() == pytest.approx(-(1 + 1 / 2 + 1 / 3))
    with pytest.raises(ValueError, match=r"accept \*\*kwargs"):
        trainop.Updater({"dynamic_learning_rate": lambda global_train_step: 1.0}, [w])


# ---------------------------------------------------------------- config files
RETURNN_CONFIG = '''#!rnn.py
import os
from returnn.tf.util.data import Data
task = "train"
network = {"output": {"class": "softmax", "from": "data"}}
num_epochs = 10 * 2
learning_rate = 0.01 / 2
optimizer = {"class": "adam", "beta2": 0.98}
gradient_clip_global_norm = 5
accum_grad_multiple_step = 2
gradient_nan_inf_filter = True
optimizer_epsilon = 1e-8
open(os.path.join(os.environ.get("CANARY_DIR", "/nonexistent"), "ran"), "w").write("x")
def custom_construction_algo(idx, net_dict):
    return net_dict
'''

YAML_CONFIG = """\
learning_rate: 0.005
optimizer: {class: adam, beta2: 0.98}
gradient_clip_global_norm: 5
accum_grad_multiple_step: 2
gradient_nan_inf_filter: true
optimizer_epsilon: 1.0e-8
"""


def _lstm():
    torch.manual_seed(0)
    return nn.LSTM(4, 8, num_layers=2, batch_first=True)


def _train(updater, model, steps=6):
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(3, 5, 4, generator=g)
        out, _ = model(x)
        updater.step(out.pow(2).mean())


def test_returnn_config_file_and_yaml_train_bit_identically(tmp_path, monkeypatch):
    monkeypatch.setenv("CANARY_DIR", str(tmp_path))
    (tmp_path / "train.config").write_text(RETURNN_CONFIG)
    (tmp_path / "train.yaml").write_text(YAML_CONFIG)
    a, b = _lstm(), _lstm()
    ua = trainop.Updater(str(tmp_path / "train.config"), a)
    ub = trainop.Updater(str(tmp_path / "train.yaml"), b)
    assert not (tmp_path / "ran").exists()  # the config's code never ran
    assert ua._base_lr == ub._base_lr == 0.005
    _train(ua, a)
    _train(ub, b)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)
    assert int(ua.optimizer.param_groups[0]["non_slot"]["step"]) == 3
    assert not (tmp_path / "ran").exists()


def test_yaml_unknown_key_names_the_closest(tmp_path):
    (tmp_path / "bad.yaml").write_text("gradient_clip_globl_norm: 5\n")
    with pytest.raises(ValueError, match="Unknown key 'gradient_clip_globl_norm' in the Updater "
                                         "config; did you mean 'gradient_clip_global_norm'"):
        trainop.Updater(str(tmp_path / "bad.yaml"), [torch.zeros(1, requires_grad=True)])


def test_function_in_a_returnn_config_is_reported_with_file_and_line(tmp_path):
    path = tmp_path / "lr.config"
    path.write_text("learning_rate = 0.1\n\ndef dynamic_learning_rate(**kwargs):\n"
                    "    return 0.1\n")
    with pytest.raises(ValueError, match=r"lr\.config:3: function 'dynamic_learning_rate' "
                                         r"defined in the config"):
        trainop.Updater(str(path), [torch.zeros(1, requires_grad=True)])


def test_misspellings_raise_as_returnn():
    with pytest.raises(ValueError, match="You set grad_clip in the config, but the option is "
                                         r"called gradient_clip_global_norm \(or other options\)"):
        trainop.Updater({"grad_clip": 1.0}, [torch.zeros(1, requires_grad=True)])


# ---------------------------------------------------------------- checkpoints and the op
def test_resume_mid_accumulation_bit_exact(tmp_path):
    config = {"optimizer": {"class": "adam"}, "learning_rate": 0.01,
              "accum_grad_multiple_step": 3, "gradient_clip_global_norm": 1.0}
    model = _lstm()
    u = trainop.Updater(config, model)
    g = torch.Generator().manual_seed(5)
    batches = [torch.randn(3, 5, 4, generator=g) for _ in range(8)]

    def run(upd, net, xs):
        for x in xs:
            out, _ = net(x)
            upd.step(out.pow(2).mean())

    run(u, model, batches[:4])  # micro-step 3 waits in the accumulators
    path = tmp_path / "ckpt.pt"
    torch.save({"model": model.state_dict(), "updater": u.state_dict()}, path)
    run(u, model, batches[4:])
    state = torch.load(path, weights_only=True)
    model2 = _lstm()
    model2.load_state_dict(state["model"])
    u2 = trainop.Updater(config, model2)
    u2.load_state_dict(state["updater"])
    assert int(u2.global_train_step) == 4
    run(u2, model2, batches[4:])
    for p1, p2 in zip(model.parameters(), model2.parameters(), strict=True):
        assert torch.equal(p1, p2)


def test_set_trainable_vars_keeps_slots_and_rebuilds():
    a, b = torch.ones(2, requires_grad=True), torch.ones(3, requires_grad=True)
    u = trainop.Updater({"optimizer": {"class": "adam"}, "learning_rate": 0.1}, [a, b])
    rebuilt = []
    u.get_optim_op(callback_on_new=lambda: rebuilt.append(1))
    u.step(a.sum() + b.sum())
    m = u.optimizer.get_slot(a, "m").clone()
    u.set_trainable_vars([a])
    u.get_optim_op(callback_on_new=lambda: rebuilt.append(2))
    assert rebuilt == [1, 2]
    assert torch.equal(u.optimizer.get_slot(a, "m"), m)
    b_before = b.detach().clone()
    u.step(a.sum() + b.sum())
    assert torch.equal(b.detach(), b_before)


def test_no_host_read_in_a_step():
    # (gradient_noise is left out: torch's trunc_normal_ turns its Python-float bounds into
    # CPU tensors and back with .item(), inside torch; no device value is read)
    model = _lstm()
    u = trainop.Updater({"optimizer": {"class": "adam"}, "accum_grad_multiple_step": 2,
                         "gradient_clip_global_norm": 1.0, "grad_norm_to_clip_to_zero": 100.0,
                         "gradient_nan_inf_filter": True,
                         "dynamic_learning_rate": {"interval": 4, "decay": 0.9}}, model)
    x = torch.randn(3, 5, 4)
    u.step(model(x)[0].pow(2).mean())  # builds the op, creates the slots
    with no_host_reads():
        for _ in range(4):
            u.step(model(x)[0].pow(2).mean())
    assert int(u.global_train_step) == 5


def test_seed_advice_in_the_skip_message():
    w = torch.ones(2, requires_grad=True)
    u = trainop.Updater({"num_allowed_consec_invalid_gradient_steps": 3}, [w])
    with pytest.warns(RuntimeWarning, match="larger `optimizer_epsilon`.*zero learning rate.*"
                                            "gradient_nan_inf_filter.*beta1=0.5"):
        u.step((w * math.nan).sum())


def test_debug_add_check_numerics_ops_names_the_origin(capsys):
    """RETURNN's test_Updater_add_check_numerics_ops: loss log(x), x = 1, lr = 1: the first step
    gives x = 0, the second raises (here: NumericsError, forward pass, aten.log, step 1)."""

    class Log(nn.Module):
        def __init__(self):
            super().__init__()
            self.x = nn.Parameter(torch.tensor(1.0))

        def forward(self):
            return torch.log(self.x)

    model = Log()
    u = trainop.Updater({"learning_rate": 1.0, "debug_add_check_numerics_ops": True}, model)
    try:
        u.step(model())  # d log(x)/dx = 1: x = 0
        assert model.x.item() == 0.0
        with pytest.raises(trainop.NumericsError) as info:
            u.step(model())
            u._checker.check()
        assert (info.value.phase, info.value.module, info.value.op, info.value.step) == (
            "forward", "", "aten.log", 1)
        assert "Adding checks for inf/nan." in capsys.readouterr().out
    finally:
        u._checker.remove()


def test_debug_add_check_numerics_on_output_checks_forward_and_backward_only():
    """The output check alone: a NaN the forward pass produces is found in the forward phase;
    the update phase is not watched (a NaN gradient step is caught in the backward phase)."""

    class Sqrt(nn.Module):
        def __init__(self):
            super().__init__()
            self.x = nn.Parameter(torch.tensor(1.0))

        def forward(self):
            return torch.sqrt(self.x)

    model = Sqrt()
    u = trainop.Updater({"learning_rate": 2.0, "debug_add_check_numerics_on_output": True},
                        model)
    try:
        u.step(model())  # d sqrt(x)/dx = 0.5: x = 1 - 2 * 0.5 = 0
        with pytest.raises(trainop.NumericsError) as info:  # sqrt(0)'s gradient is inf
            u.step(model())
            u._checker.check()
        assert info.value.phase == "backward"
        assert u._checker._phases == ("forward", "backward")
    finally:
        u._checker.remove()
    with pytest.raises(ValueError, match="Expected a torch.nn.Module as `model` with "
                                         "`debug_add_check_numerics_on_output`"):
        trainop.Updater({"debug_add_check_numerics_on_output": True},
                        [torch.zeros(1, requires_grad=True)])


def test_bench_updater_runs():
    from trainop.bench.updater import render_updater, run_updater_benchmark

    result = run_updater_benchmark(rounds=2, steps=1, warmup=1, d_model=16, layers=1)
    assert set(result["median_s"]) == {"pipeline", "updater"} and result["ratio"] > 0
    assert "| trainop.Updater |" in render_updater(result)


class ThreeLayers(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b, self.c = nn.Linear(3, 3), nn.Linear(3, 3), nn.Linear(3, 1)

    def forward(self, x):
        return self.c(torch.tanh(self.b(torch.tanh(self.a(x)))))


def test_upstream_multiple_optimizers_and_opts():
    """RETURNN's test_Updater_multiple_optimizers(_and_opts): per-layer Adam and Adagrad plus the
    default -> 3 optimizers; accumulation 2 on the Adam layer, learning_rate_multiplier 3 and
    noise on the Adagrad layer; the step runs."""
    model = ThreeLayers()
    u = trainop.Updater({"learning_rate": 0.1, "updater_opts": {
        "a.*": {"optimizer": {"class": "adam"}, "accum_grad_multiple_step": 2},
        "b.*": {"optimizer": {"class": "adagrad", "learning_rate_multiplier": 3.0},
                "gradient_noise": 0.1},
    }}, model)
    assert [type(o).__name__ for o in u.optimizers] == [
        "GradientDescentOptimizer", "AdamOptimizer", "AdagradOptimizer"]
    x = torch.randn(4, 3)
    a0, c0 = model.a.weight.detach().clone(), model.c.weight.detach().clone()
    u.step(model(x).pow(2).sum())
    assert torch.equal(model.a.weight.detach(), a0)  # accumulating: t mod 2 != 1
    assert not torch.equal(model.c.weight.detach(), c0)  # the default SGD applied
    u.step(model(x).pow(2).sum())
    assert not torch.equal(model.a.weight.detach(), a0)


def test_per_parameter_override_numbers():
    """The default group SGD lr 1; 'b.*' with its own accumulation 2 (a sum) and a value clip."""
    model = ThreeLayers()
    u = trainop.Updater({"learning_rate": 1.0, "updater_opts": {
        "b.*": {"accum_grad_multiple_step": 2, "gradient_clip": 0.01}}}, model)
    x = torch.randn(4, 3)
    b0 = model.b.weight.detach().clone()
    loss = model(x).pow(2).sum()
    g1 = torch.autograd.grad(loss, model.b.weight, retain_graph=True)[0]
    u.step(loss)
    assert torch.equal(model.b.weight.detach(), b0)
    loss = model(x).pow(2).sum()
    g2 = torch.autograd.grad(loss, model.b.weight, retain_graph=True)[0]
    u.step(loss)
    torch.testing.assert_close(model.b.weight.detach(), b0 - (g1 + g2).clamp(-0.01, 0.01))


def test_updater_opts_errors():
    model = ThreeLayers()
    with pytest.raises(ValueError, match=r"Unknown key 'gradient_clip_globl_norm' in "
                                         r"updater_opts\['a\.\*'\]; did you mean "
                                         r"'gradient_clip_global_norm'"):
        trainop.Updater({"updater_opts": {"a.*": {"gradient_clip_globl_norm": 1.0}}}, model)
    with pytest.raises(ValueError, match=r"Unknown key 'learning_rate' in updater_opts"):
        trainop.Updater({"updater_opts": {"a.*": {"learning_rate": 1.0}}}, model)  # Q16
    with pytest.raises(ValueError, match="Expected updater_opts pattern 'z.*' to match"):
        trainop.Updater({"updater_opts": {"z.*": {"gradient_clip": 1.0}}}, model)
    with pytest.raises(ValueError, match="Expected a torch.nn.Module as `model`"):
        trainop.Updater({"updater_opts": {"a.*": {"gradient_clip": 1.0}}},
                        list(model.parameters()))


def test_log_grad_norm_is_the_raw_micro_step_norm_before_clipping():
    torch.manual_seed(0)
    w = torch.randn(3, requires_grad=True)
    v = torch.randn(2, requires_grad=True)
    updater = trainop.Updater({"optimizer": {"class": "sgd"}, "learning_rate": 0.1,
                               "gradient_clip_global_norm": 0.5, "accum_grad_multiple_step": 2,
                               "log_grad_norm": "true"}, [w, v])
    for scale in (3.0, 5.0):
        gw, gv = scale * torch.tensor([1.0, 2.0, 2.0]), scale * torch.tensor([4.0, 0.0])
        with no_host_reads():
            updater.step((w * gw).sum() + (v * gv).sum())
        expected = math.sqrt(9.0 + 16.0) * scale  # ||(1,2,2,4,0)|| * scale, raw, pre-clip
        assert updater.last_grad_norm.item() == pytest.approx(expected, rel=1e-6)
    with pytest.raises(ValueError, match="Expected `log_grad_norm` to be one of"):
        trainop.Updater({"log_grad_norm": 1}, [w])


def test_maximize_grad_norm_adds_the_gradient_of_minus_f_times_the_norm():
    a = torch.tensor([1.0, 2.0, 3.0])
    w0 = torch.tensor([0.5, -1.0, 2.0])
    w = w0.clone().requires_grad_(True)
    f, lr = 0.3, 0.1
    updater = trainop.Updater({"optimizer": {"class": "sgd"}, "learning_rate": lr,
                               "maximize_grad_norm": f, "log_grad_norm": True}, [w])
    updater.step(0.5 * (a * w * w).sum())
    g = a * w0  # dL/dw; G = ||g||; dG/dw = a * g / G
    big_g = g.norm()
    expected = w0 - lr * (g - f * a * g / big_g)
    torch.testing.assert_close(w.detach(), expected, rtol=1e-6, atol=1e-7)
    assert updater.last_grad_norm.item() == pytest.approx(big_g.item(), rel=1e-6)  # raw G_all
    with pytest.raises(ValueError, match="maximize_grad_norm"):
        trainop.Updater({"maximize_grad_norm": -1.0}, [w])


def test_global_norm_tag_clips_every_variable_by_the_tagged_norm():
    model = nn.Sequential(nn.Linear(2, 1, bias=False), nn.Linear(1, 1, bias=False))
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[1.0, 1.0]]))
        model[1].weight.copy_(torch.tensor([[1.0]]))
    before = [p.detach().clone() for p in model.parameters()]
    updater = trainop.Updater({"optimizer": {"class": "sgd"}, "learning_rate": 1.0,
                               "gradient_clip_global_norm": 1.0, "global_norm_tag": "enc",
                               "updater_opts": {"0.*": {"tags": ["enc"]}}}, model)
    x = torch.tensor([[3.0, 4.0]])
    updater.step(model(x).sum())  # grads: layer0 (3, 4) (norm 5, tagged), layer1 (7,)
    scale = 1.0 / 5.0  # c / max(G_enc, c), applied to every variable
    torch.testing.assert_close(model[0].weight.detach(),
                               before[0] - scale * torch.tensor([[3.0, 4.0]]))
    torch.testing.assert_close(model[1].weight.detach(), before[1] - scale * 7.0)


def test_clip_tag_and_zero_tag_differ_and_per_parameter_tags():
    """RETURNN reads the tags per variable: the clip by G of ``gradient_clip_global_norm_tag``
    (default: the variable's ``global_norm_tag``), the zeroing by G of ``global_norm_tag``."""
    def run(config):
        model = nn.Sequential(nn.Linear(2, 1, bias=False), nn.Linear(1, 1, bias=False))
        with torch.no_grad():
            model[0].weight.copy_(torch.tensor([[1.0, 1.0]]))
            model[1].weight.copy_(torch.tensor([[1.0]]))
        updater = trainop.Updater({"optimizer": {"class": "sgd"}, "learning_rate": 1.0,
                                   **config}, model)
        updater.step(model(torch.tensor([[3.0, 4.0]])).sum())  # grads (3, 4) and (7,)
        return [v for p in model.parameters() for v in p.detach().flatten().tolist()]

    tags = {"0.*": {"tags": ["enc"]}, "1.*": {"tags": ["dec"]}}
    # clip by G_dec = 7 (scale 1/7); zero by G_enc = 5 > 4.5: every gradient 0
    assert run({"updater_opts": tags, "gradient_clip_global_norm": 1.0,
                "gradient_clip_global_norm_tag": "dec", "global_norm_tag": "enc",
                "grad_norm_to_clip_to_zero": 4.5}) == [1.0, 1.0, 1.0]
    # zero threshold 6 > G_enc: no zeroing; the clip by G_dec = 7
    got = run({"updater_opts": tags, "gradient_clip_global_norm": 1.0,
               "gradient_clip_global_norm_tag": "dec", "global_norm_tag": "enc",
               "grad_norm_to_clip_to_zero": 6.0})
    assert got == pytest.approx([1 - 3 / 7, 1 - 4 / 7, 0.0], abs=1e-6)
    # per parameter: layer 0 clipped by G_enc = 5, layer 1 by G_all = sqrt(74)
    got = run({"updater_opts": {"0.*": {"tags": ["enc"], "gradient_clip_global_norm_tag": "enc"}},
               "gradient_clip_global_norm": 1.0})
    g_all = math.sqrt(9 + 16 + 49)
    assert got == pytest.approx([1 - 3 / 5, 1 - 4 / 5, 1 - 7 / g_all], abs=1e-6)
    with pytest.raises(ValueError, match=r"Expected `global_norm_tag` to be one of the "
                                         r"updater_opts tags \['dec', 'enc'\], got 'x'"):
        run({"updater_opts": tags, "global_norm_tag": "x"})


def test_per_parameter_optimizer_without_class_takes_the_default_class():
    """RETURNN: an ``updater_opts`` optimizer without "class" is the default optimizer's class
    with only its own options (the default's beta1 is not inherited)."""
    model = nn.Module()
    model.a, model.b = nn.Parameter(torch.tensor(1.0)), nn.Parameter(torch.tensor(1.0))
    u = trainop.Updater({"optimizer": {"class": "momentum", "momentum": 0.5},
                         "learning_rate": 1.0,
                         "updater_opts": {"b": {"optimizer": {"momentum": 0.9}}}}, model)
    for _ in range(2):
        u.step(model.a + model.b)
        model.zero_grad()
    assert [type(o).__name__ for o in u.optimizers] == ["MomentumOptimizer"] * 2
    # momentum m: 1, then 1 + m; the parameter moves by 1 + (1 + m)
    assert model.a.item() == pytest.approx(1 - 1 - 1.5) and \
        model.b.item() == pytest.approx(1 - 1 - 1.9)


def test_dict_config_ignores_other_keys_but_flags_near_misses():
    w = torch.zeros(1, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trainop.Updater({"network": {}, "num_epochs": 3, "batch_size": 5000}, [w])
    with pytest.warns(UserWarning, match="unknown key 'gradient_clip_globl_norm' is ignored; "
                                         "did you mean 'gradient_clip_global_norm'"):
        trainop.Updater({"gradient_clip_globl_norm": 5.0}, [w])


@pytest.mark.parametrize("option,value", [("accum_grad_multiple_step", 2.5),
                                          ("accum_grad_multiple_step", -1),
                                          ("num_allowed_consec_invalid_gradient_steps", -2)])
def test_counting_options_must_be_ints(option, value):
    with pytest.raises(ValueError, match=f"Expected `{option}` to be an int >= 0, got "):
        trainop.Updater({option: value}, [torch.zeros(1, requires_grad=True)])
