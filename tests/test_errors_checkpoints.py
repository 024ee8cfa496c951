"""#23's checkpoint rows and #25's rows 1-2: every checkpoint is validated whole, then loaded.

Each error row pins its message and checks that the rejected load changed nothing (the full
``state_dict`` before and after, bit for bit); the other tests check the correct result where
the checkpoint is valid (non-parameter state entries, other parameter dtypes, a saturated step
counter, hooks), and the loose ends (``p.grad.data = t`` with flat buffers, the torch-backend
Updater's global norm, a fork after a multi-threaded native step).
"""

from __future__ import annotations

import copy
import io
import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from error_table import Row, check, ids, load_row
from optimizer_kwargs import kwargs_for
from test_errors_loading import same, snapshot

import trainop

STEP_MAX = 2**63 - 1


def stepped(cls_name: str = "AdamOptimizer", steps: int = 1, dtype=torch.float32, **extra):
    """A two-parameter optimizer of ``cls_name`` after ``steps`` steps of fixed gradients."""
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(4, 3, dtype=dtype)),
              torch.nn.Parameter(torch.randn(5, dtype=dtype))]
    opt = trainop.OPTIMIZER_CLASSES[cls_name](**{**kwargs_for(cls_name), **extra}, params=params)
    for i in range(steps):
        for p in params:
            p.grad = torch.full_like(p, 0.5 + 0.25 * i)
        opt.step()
    return opt


def fresh(cls_name: str = "AdamOptimizer"):
    return stepped(cls_name, steps=0)


def torch_adam_sd(steps: int) -> dict:
    w = [torch.nn.Parameter(torch.randn(4, 3)), torch.nn.Parameter(torch.randn(5))]
    opt = torch.optim.Adam(w, lr=0.1)
    for _ in range(steps):
        for p in w:
            p.grad = torch.ones_like(p)
        opt.step()
    return opt.state_dict()


def torch_sgd_momentum_sd() -> dict:
    w = [torch.nn.Parameter(torch.randn(4, 3)), torch.nn.Parameter(torch.randn(5))]
    opt = torch.optim.SGD(w, lr=0.1, momentum=0.9)
    for p in w:
        p.grad = torch.ones_like(p)
    opt.step()
    return opt.state_dict()


def changed(make, change):
    """``(optimizer, its own state_dict with change applied)``."""
    opt = make()
    sd = copy.deepcopy(opt.state_dict())
    change(sd)
    return opt, sd


def other(make, sd_of):
    """``(optimizer, another object's state_dict)``."""
    return make(), sd_of()


def set_group(key, value):
    return lambda sd: sd["param_groups"][0].__setitem__(key, value)


def del_group(key):
    return lambda sd: sd["param_groups"][0].pop(key)


def set_non_slot(key, value):
    return lambda sd: sd["param_groups"][0]["non_slot"].__setitem__(key, value)


def set_slot(name, value, index=0):
    return lambda sd: sd["state"][index].__setitem__(name, value)


def negate_slot(name):
    return lambda sd: sd["state"][0].__setitem__(name, -sd["state"][0][name] - 1.0)


FOREIGN = (r"Convert it with trainop\.checkpoints\.from_torch_optim\(state_dict, optimizer\), "
           r"or load it into the torch\.optim class that saved it")

# id: (build (optimizer, checkpoint), exception, message)
CASES = {
    "torch.optim.Adam never stepped": (
        lambda: other(fresh, lambda: torch_adam_sd(0)), ValueError,
        r"^Invalid optimizer checkpoint: this is a torch\.optim optimizer's checkpoint \(param "
        r"group keys \['amsgrad', 'capturable', .*\] and no `non_slot` counters\), not one of "
        r"trainop's AdamOptimizer; trainop keeps TF's state \(slots under TF's names, per-group "
        r"`non_slot` counters such as Adam's beta powers\), which torch's state does not hold\. "
        + FOREIGN),
    "torch.optim.Adam stepped": (
        lambda: other(stepped, lambda: torch_adam_sd(2)), ValueError,
        r"per-parameter state \['exp_avg', 'exp_avg_sq', 'step'\]\), not one of trainop's "
        r"AdamOptimizer.*" + FOREIGN),
    "torch.optim.SGD(momentum) into GradientDescent": (
        lambda: other(lambda: stepped("GradientDescentOptimizer"), torch_sgd_momentum_sd),
        ValueError, r"param group keys \['dampening', .*'momentum', 'nesterov', "
                    r"'weight_decay'\] and no `non_slot` counters; per-parameter state "
                    r"\['momentum_buffer'\]\), not one of trainop's GradientDescentOptimizer.*"
                    + FOREIGN),
    "missing beta1": (
        lambda: changed(stepped, del_group("beta1")), ValueError,
        r"group 0: Expected the group keys \['beta1', 'beta2', 'epsilon', 'lr', 'non_slot'\], "
        r"missing \['beta1'\]"),
    "missing non_slot": (
        lambda: changed(stepped, del_group("non_slot")), ValueError,
        r"group 0: Expected the group keys .*missing \['non_slot'\]"),
    "foreign keys amsgrad, betas": (
        lambda: changed(stepped, lambda sd: sd["param_groups"][0].update(
            amsgrad=False, betas=(0.9, 0.999))), ValueError,
        r"group 0: Expected only the group keys of this optimizer \['beta1', 'beta2', "
        r"'epsilon', 'lr', 'non_slot'\], got unknown \['amsgrad'\] \(they would be "
        r"carried along unused\)"),
    "Adam's (fresh) into Momentum": (
        lambda: other(lambda: fresh("MomentumOptimizer"), lambda: fresh().state_dict()),
        ValueError, r"group 0: Expected the group keys \['lr', 'momentum', 'non_slot', "
                    r"'use_nesterov'\], missing \['momentum', 'use_nesterov'\]"),
    "SGD's (fresh) into Adam": (
        lambda: other(fresh, lambda: fresh("GradientDescentOptimizer").state_dict()),
        ValueError, r"missing \['beta1', 'beta2', 'epsilon'\]"),
    "beta1_power int64": (
        lambda: changed(stepped, set_non_slot("beta1_power", torch.tensor(0))), TypeError,
        r"group 0: Expected `non_slot\['beta1_power'\]` to be float32 \(TF's kernels read it "
        r"so\), got torch.int64"),
    "beta1_power float64": (
        lambda: changed(stepped, set_non_slot("beta1_power",
                                              torch.tensor(0.5, dtype=torch.float64))),
        TypeError, r"`non_slot\['beta1_power'\]` to be float32"),
    "beta powers 1": (
        lambda: changed(stepped, lambda sd: sd["param_groups"][0]["non_slot"].update(
            beta1_power=torch.tensor(1.0), beta2_power=torch.tensor(1.0))), ValueError,
        r"group 0: Expected `non_slot\['beta1_power'\]` in \[0, 1\), got 1.0"),
    "negative beta2_power": (
        lambda: changed(stepped, set_non_slot("beta2_power", torch.tensor(-0.5))), ValueError,
        r"`non_slot\['beta2_power'\]` in \[0, 1\), got -0.5"),
    "unknown non-slot variable": (
        lambda: changed(stepped, set_non_slot("gamma_power", torch.tensor(0.5))), ValueError,
        r"group 0: Expected the non-slot variables to be among \['step', 'beta1_power', "
        r"'beta2_power'\], got unknown \['gamma_power'\]"),
    "negative Adam v": (
        lambda: changed(stepped, negate_slot("v")), ValueError,
        r"group 0, parameter index 0 \(id 0\): Expected slot `v` >= 0 \(the update takes its "
        r"square root\), it holds -1\.\d+"),
    "negative Adagrad accumulator": (
        lambda: changed(lambda: stepped("AdagradOptimizer"), negate_slot("accumulator")),
        ValueError, r"Expected slot `accumulator` >= 0"),
    "negative RMSProp rms": (
        lambda: changed(lambda: stepped("RMSPropOptimizer"), negate_slot("rms")), ValueError,
        r"Expected slot `rms` >= 0"),
    "negative Ftrl accum": (
        lambda: changed(lambda: stepped("FtrlOptimizer"), negate_slot("accum")), ValueError,
        r"Expected slot `accum` >= 0"),
    "negative Adadelta accum_update": (
        lambda: changed(lambda: stepped("AdadeltaOptimizer"), negate_slot("accum_update")),
        ValueError, r"Expected slot `accum_update` >= 0"),
    "negative NovoGrad grad_norm_ema": (
        lambda: changed(lambda: stepped("NovoGrad"), negate_slot("grad_norm_ema")),
        ValueError, r"Expected slot `grad_norm_ema` >= 0"),
    "negative AdagradDA squared accumulator": (
        lambda: changed(lambda: stepped("AdagradDAOptimizer"),
                        negate_slot("gradient_squared_accumulator")),
        ValueError, r"Expected slot `gradient_squared_accumulator` >= 0"),
    "centered RMSProp rms < mg^2": (
        lambda: changed(lambda: stepped("RMSPropOptimizer", centered=True),
                        lambda sd: sd["state"][1].__setitem__("mg", torch.full((5,), 3.0))),
        ValueError, r"group 0, parameter index 1 \(id 1\): Expected slot `rms` >= `mg`\^2 "
                    r"\(centered RMSProp takes the root of rms - mg\^2 \+ epsilon\), it is "
                    r"smaller"),
    "stepped group without its step counter": (
        lambda: changed(lambda: stepped("MomentumOptimizer"),
                        lambda sd: sd["param_groups"][0]["non_slot"].pop("step")),
        ValueError, r"group 0: Expected the non-slot variables \['step'\] \(saved after a "
                    r"step\); they are missing and would be re-initialised"),
    "param_groups a tensor": (
        lambda: changed(stepped, lambda sd: sd.__setitem__("param_groups", torch.zeros(2, 2))),
        ValueError, r"Expected `state_dict\['param_groups'\]` to be a list of 1 groups"),
    "float64 slot overflowing float32": (
        lambda: changed(stepped, set_slot("m", torch.full((4, 3), 1e300, dtype=torch.float64))),
        ValueError, r"parameter index 0 \(id 0\): Expected slot `m` to be finite in "
                    r"torch.float32 \(it is cast to the parameter's dtype on load\), it overflows"),
    "bool slot": (
        lambda: changed(stepped, set_slot("m", torch.zeros(4, 3, dtype=torch.bool))), TypeError,
        r"Expected slot `m` of dtype torch.float32, got torch.bool \(a floating dtype would be "
        r"cast on load\)"),
}


ERRORS = [load_row(name, *case) for name, case in CASES.items()]


@pytest.mark.parametrize("row", ERRORS, ids=ids(ERRORS))
def test_error(row: Row) -> None:
    check(row)


@pytest.mark.parametrize("name", list(CASES))
def test_rejected_load_changes_nothing_and_steps_on(name: str) -> None:
    build, exc, _ = CASES[name]
    opt, sd = build()
    before = snapshot(opt)
    with pytest.raises(exc):
        opt.load_state_dict(sd)
    assert same(before, snapshot(opt))
    for group in opt.param_groups:  # the optimizer still steps, from its own state
        for p in group["params"]:
            p.grad = torch.ones_like(p)
    opt.step()
    assert all(bool(torch.isfinite(p).all()) for g in opt.param_groups for p in g["params"])


# ---------------------------------------------------------------- counters and var_list
def test_step_counter_near_int64_max_is_refused_at_load() -> None:
    """A counter that could wrap is a clear error at load, nothing changed; 2**62 (the bound:
    2**62 more updates fit before int64 would wrap) loads and steps on."""
    opt = stepped()
    sd = opt.state_dict()
    sd["param_groups"][0]["non_slot"]["step"] = torch.tensor(STEP_MAX)
    before = snapshot(opt)
    with pytest.raises(ValueError, match=r"group 0: Expected the step counter "
                                         r"`non_slot\['step'\]` <= 2\*\*62 \(the int64 counter "
                                         r"must not wrap negative as training goes on\), got "
                                         r"9223372036854775807"):
        opt.load_state_dict(sd)
    assert same(before, snapshot(opt))
    sd["param_groups"][0]["non_slot"]["step"] = torch.tensor(2**62)
    opt.load_state_dict(sd)
    for _ in range(3):
        for p in opt.param_groups[0]["params"]:
            p.grad = torch.ones_like(p)
        opt.step()
    assert int(opt.param_groups[0]["non_slot"]["step"]) == 2**62 + 3


def test_global_step_near_int64_max_is_refused_at_load() -> None:
    u, _ = two_group_updater()
    sd = copy.deepcopy(u.state_dict())
    sd["global_train_step"] = torch.tensor(STEP_MAX)
    before = snapshot(u)
    with pytest.raises(ValueError, match=r"Expected `global_train_step` <= 2\*\*62"):
        u.load_state_dict(sd)
    assert same(before, snapshot(u))


def test_iter_size_beyond_int64_is_a_clear_value_error() -> None:
    w = torch.nn.Parameter(torch.ones(3))
    with pytest.raises(ValueError, match=r"Expected `iter_size` in \[1, 2\*\*63 - 1\], got "
                                         r"1000000000000000000000000000000"):
        trainop.optimize_loss(lambda: (w ** 2).sum(), "SGD", None, 0.1, var_list=[w],
                              iter_size=10**30)


def test_duplicate_var_list_entry_says_duplicate() -> None:
    w, v = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(2, 2))
    opt = trainop.AdamOptimizer(0.1)
    with pytest.raises(ValueError, match=r"Expected `var_list` without duplicates, got the same "
                                         r"tensor \(shape \(3,\)\) at var_list\[0\] and "
                                         r"var_list\[2\] \(a duplicate entry\)"):
        opt.minimize(lambda: (w ** 2).sum() + v.sum(), var_list=[w, v, w])
    assert not opt.state and torch.equal(w, torch.ones(3))
    with pytest.raises(ValueError, match=r"`var_list` without duplicates.*a duplicate entry"):
        trainop.optimize_loss(lambda: (w ** 2).sum(), "SGD", None, 0.1, var_list=[w, w])


# ---------------------------------------------------------------- composites
class TwoLayers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(3, 3), torch.nn.Linear(3, 1)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


def two_group_updater():
    torch.manual_seed(0)
    model = TwoLayers()
    u = trainop.Updater({"learning_rate": 0.1, "optimizer": {"class": "adam"}, "updater_opts": {
        "b.*": {"optimizer": {"class": "adagrad"}}}}, model)
    u.step(model(torch.randn(4, 3)).pow(2).sum())
    return u, model


def test_updater_bad_second_group_changes_no_group() -> None:
    u, model = two_group_updater()
    assert [type(o).__name__ for o in u.optimizers] == ["AdamOptimizer", "AdagradOptimizer"]
    sd = copy.deepcopy(u.state_dict())
    sd["groups"][0]["optimizer"]["state"][0]["m"] += 1.0  # a valid change to the first group
    second = sd["groups"][1]["optimizer"]["state"]
    second[next(iter(second))]["accumulator"] *= -1.0
    before = snapshot(u)
    with pytest.raises(ValueError, match=r"Expected slot `accumulator` >= 0"):
        u.load_state_dict(sd)
    assert same(before, snapshot(u))


def test_updater_torch_backend_bad_second_group_changes_no_group() -> None:
    torch.manual_seed(0)
    model = TwoLayers()
    u = trainop.Updater({"learning_rate": 0.1, "optimizer": {"class": "torch.optim.Adam"},
                         "updater_opts": {"b.*": {"optimizer": {"class": "torch.optim.SGD"}}}},
                        model)
    u.step(model(torch.randn(4, 3)).pow(2).sum())
    sd = copy.deepcopy(u.state_dict())
    sd["groups"][1]["optimizer"]["param_groups"][0]["params"] = [0]  # one id short
    before = snapshot(u)
    with pytest.raises(ValueError, match=r"Expected the param groups of the SGD checkpoint to "
                                         r"hold \[2\] parameters"):
        u.load_state_dict(sd)
    assert same(before, snapshot(u))


def test_train_op_bad_pipeline_state_leaves_the_optimizer() -> None:
    w = torch.nn.Parameter(torch.ones(3))
    op = trainop.optimize_loss(lambda: (w ** 2).sum(), "Adam", None, 0.1, var_list=[w],
                               clip_gradients=1.0)
    op()
    sd = copy.deepcopy(op.state_dict())
    sd["optimizer"]["state"][0]["m"] += 1.0  # valid, but must not be loaded alone
    sd["step"]["pipeline"]["skipped_steps"] = torch.tensor(1.5)
    before = snapshot(op)
    with pytest.raises(ValueError, match=r"counter `skipped_steps` in checkpoint to be a whole"):
        op.load_state_dict(sd)
    assert same(before, snapshot(op))


# ---------------------------------------------------------------- #25 row 1: non-parameter state
@pytest.mark.parametrize("note", [{"seen": 3, "tag": "x"}, 1, True])
def test_non_parameter_state_entry_round_trips(note) -> None:
    opt = stepped()
    opt.state["note"] = note
    sd = opt.state_dict()
    assert sd["state"]["note"] == note
    buffer = io.BytesIO()
    torch.save(sd, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)
    other_opt = stepped("AdamOptimizer", steps=3)
    other_opt.load_state_dict(loaded)
    assert other_opt.state["note"] == note
    assert same(snapshot(opt), snapshot(other_opt))
    params = other_opt.param_groups[0]["params"]
    for p in params:
        p.grad = torch.ones_like(p)
    other_opt.step()  # the entry does not disturb the step
    assert other_opt.state["note"] == note


def test_state_dict_hooks_as_torch_tests_them() -> None:
    """torch's hook test shape: a state_dict pre-hook puts a non-parameter entry in
    ``opt.state``, a post-hook edits the dict, load pre-hooks edit or replace it, a load
    post-hook records what it saw."""
    opt = stepped()
    opt.register_state_dict_pre_hook(lambda o: o.state.__setitem__("test", 1))
    opt.register_state_dict_post_hook(
        lambda o, sd: sd.__setitem__("ran_state_dict_pre_hook", sd["state"]["test"] == 1))
    sd = opt.state_dict()
    assert sd["ran_state_dict_pre_hook"] and sd["state"]["test"] == 1

    def replace_lr(o, d):
        d = copy.deepcopy(d)
        d["param_groups"][0]["lr"] = 0.003
        return d

    seen = []
    target = stepped()
    target.register_load_state_dict_pre_hook(
        lambda o, d: d["param_groups"][0].__setitem__("lr", 0.002))
    target.register_load_state_dict_pre_hook(replace_lr)
    target.register_load_state_dict_post_hook(lambda o: seen.append(o.param_groups[0]["lr"]))
    target.load_state_dict(sd)
    assert seen == [0.003] and target.state["test"] == 1


def test_validation_runs_after_pre_hooks_and_before_any_change() -> None:
    """A pre-hook may turn a checkpoint into a valid one (torch's documented use); a rejected
    one stops before anything is loaded and before the post-hooks."""
    opt = stepped()
    sd = copy.deepcopy(opt.state_dict())
    sd["param_groups"][0]["betas"] = (1.5, 0.6)
    target = stepped("AdamOptimizer", steps=2)
    seen = []
    target.register_load_state_dict_post_hook(lambda o: seen.append(True))
    before = snapshot(target)
    with pytest.raises(ValueError, match=r"Expected `beta1` in \[0, 1\), got 1.5 \(in `betas` "
                                         r"= \(1.5, 0.6\)\)$"):
        target.load_state_dict(sd)
    assert same(before, snapshot(target)) and not seen

    def convert(o, d):
        d["param_groups"][0].pop("betas")
        d["param_groups"][0].update(beta1=0.5, beta2=0.6)

    target.register_load_state_dict_pre_hook(convert)
    target.load_state_dict(sd)
    assert (target.param_groups[0]["beta1"], target.param_groups[0]["beta2"]) == (0.5, 0.6)
    assert seen == [True]


# ---------------------------------------------------------------- #25 row 2: other dtypes
SLOTTED = sorted({trainop.get_optimizer_class(n).__name__ for n in trainop.optimizer_names()}
                 - {"GradientDescentOptimizer", "ProximalGradientDescentOptimizer"})


def test_thirteen_classes_have_slots() -> None:
    assert len(SLOTTED) == 13


@pytest.mark.parametrize("target", [torch.float64, torch.float16], ids=["double", "half"])
@pytest.mark.parametrize("name", SLOTTED)
def test_checkpoint_is_cast_to_the_parameters_dtype(name: str, target: torch.dtype) -> None:
    source = stepped(name, steps=2)
    sd = source.state_dict()
    opt = stepped(name, steps=0, dtype=target)
    opt.load_state_dict(sd)
    fixed = {s.name: s.dtype for s in opt._slot_specs(opt.param_groups[0])}
    for i, p in enumerate(opt.param_groups[0]["params"]):
        for key, saved in sd["state"][i].items():
            slot = opt.state[p][key]
            want = fixed[key] or target
            assert slot.dtype == want and slot.device == p.device
            torch.testing.assert_close(slot, saved.to(want), rtol=0, atol=0)
    for key, value in opt.param_groups[0]["non_slot"].items():
        want = torch.int64 if key == "step" else torch.float32  # TF's dtypes, kept
        assert value.dtype == want
        assert torch.equal(value, sd["param_groups"][0]["non_slot"][key].to(want))


@pytest.mark.parametrize("name", ["AdamOptimizer", "NovoGrad", "RMSPropOptimizer"])
def test_cast_checkpoint_steps_like_the_cast_state(name: str) -> None:
    """float32 checkpoint into float64 parameters: the next step equals that of an optimizer
    whose float64 state holds the same values (the cast is exact)."""
    sd = stepped(name, steps=2).state_dict()
    loaded = stepped(name, steps=0, dtype=torch.float64)
    loaded.load_state_dict(sd)
    reference = stepped(name, steps=2, dtype=torch.float64)
    with torch.no_grad():
        for p, q in zip(loaded.param_groups[0]["params"], reference.param_groups[0]["params"],
                        strict=True):
            q.copy_(p)
            for key, slot in loaded.state[p].items():
                reference.state[q][key].copy_(slot)
    reference.param_groups[0]["non_slot"] = copy.deepcopy(loaded.param_groups[0]["non_slot"])
    for opt in (loaded, reference):
        for p in opt.param_groups[0]["params"]:
            p.grad = torch.full_like(p, 0.3)
        opt.step()
    for p, q in zip(loaded.param_groups[0]["params"], reference.param_groups[0]["params"],
                    strict=True):
        assert torch.equal(p, q)


def test_cast_load_with_one_bad_part_changes_nothing() -> None:
    sd = stepped(steps=2).state_dict()
    sd["state"][1]["v"] = -sd["state"][1]["v"] - 1.0
    opt = stepped(steps=1, dtype=torch.float64)
    before = snapshot(opt)
    with pytest.raises(ValueError, match=r"parameter index 1 \(id 1\): Expected slot `v` >= 0"):
        opt.load_state_dict(sd)
    assert same(before, snapshot(opt))


def test_model_double_then_resume() -> None:
    """The torch recipe: save, ``model.double()``, rebuild, load, train on."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = trainop.AdamOptimizer(model.parameters(), lr=0.01)
    model(torch.randn(4, 3)).pow(2).sum().backward()
    opt.step()
    sd = opt.state_dict()
    model.double()
    opt = trainop.AdamOptimizer(model.parameters(), lr=0.01)
    opt.load_state_dict(sd)
    opt.zero_grad()
    model(torch.randn(4, 3, dtype=torch.float64)).pow(2).sum().backward()
    opt.step()
    assert all(s.dtype == torch.float64 for st in opt.state.values() for s in st.values())
    assert opt.param_groups[0]["non_slot"]["beta1_power"].dtype == torch.float32
    assert math.isclose(float(opt.param_groups[0]["non_slot"]["beta1_power"]), 0.9 ** 3,
                        rel_tol=1e-6)


# ---------------------------------------------------------------- loose ends
def test_flat_buffers_follow_grad_data_assignment() -> None:
    w, v = torch.nn.Parameter(torch.ones(4)), torch.nn.Parameter(torch.ones(3))
    opt = trainop.GradientDescentOptimizer(1.0, params=[w, v])
    trainop.flatten(opt)
    w.grad.data = torch.full((4,), 5.0)
    v.grad.data = torch.full((3,), 2.0)
    opt.step()
    assert torch.equal(w.detach(), torch.full((4,), -4.0))
    assert torch.equal(v.detach(), torch.full((3,), -1.0))


def test_torch_backend_updater_reports_the_global_norm() -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    u = trainop.Updater({"optimizer": {"class": "torch.optim.Adam"}, "learning_rate": 0.1},
                        model)
    loss = model(torch.randn(4, 3)).pow(2).sum()
    grads = torch.autograd.grad(loss, list(model.parameters()), retain_graph=True)
    true = math.sqrt(sum(float(g.pow(2).sum()) for g in grads))
    result = u.step(loss)
    assert true > 1.0 and math.isclose(float(result.global_norm), true, rel_tol=1e-6)


FORK_CHILD = textwrap.dedent("""
    import os, torch, trainop
    torch.set_num_threads(2)
    w = torch.nn.Parameter(torch.zeros(1 << 20))
    opt = trainop.AdamOptimizer(0.1, params=[w], implementation="native")
    w.grad = torch.ones_like(w)
    opt.step()
    assert trainop.kernels.native.fork.pool_started()
    pid = os.fork()
    if pid == 0:
        a = torch.randn(1000, 1000)
        b = float((a * 2).sum()) + float((a @ a).sum())
        w.grad = torch.ones_like(w)
        opt.step()
        os._exit(0 if torch.isfinite(w).all() and int(
            opt.param_groups[0]["non_slot"]["step"]) == 2 else 3)
    _, status = os.waitpid(pid, 0)
    print("child", os.waitstatus_to_exitcode(status))
    w.grad = torch.ones_like(w)
    opt.step()
    print("parent threads", torch.get_num_threads())
""")


@pytest.mark.native
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_fork_after_a_multithreaded_native_step_does_not_hang(tmp_path) -> None:
    if not trainop.kernels.native.available():
        pytest.skip(f"native kernels unavailable: {trainop.kernels.native.unavailable_reason()}")
    src = os.path.abspath(os.path.join(os.path.dirname(trainop.__file__), os.pardir))
    out = subprocess.run([sys.executable, "-c", FORK_CHILD], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": src})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[:2] == ["child 0", "parent threads 2"]
