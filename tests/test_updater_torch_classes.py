"""The Updater with ``torch.optim`` classes: RETURNN's PyTorch backend (spec §3.2, §4.4, §6.2,
§6.3): class resolution, ``epsilon`` -> ``eps``, the weight-decay groups and
``param_groups_custom`` (RETURNN's ``test_updater_lr_multipliers`` ported with its numbers), the
step order (noise, value clip, global-norm clip, invalid-gradient skip/abort), accumulation and
resume, and trainop's decisions on Q5-Q8."""

from __future__ import annotations

import copy
import fnmatch
import subprocess
import sys
import warnings

import pytest
import torch

import trainop


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.LayerNorm(4),
                               torch.nn.Linear(4, 3))


def _names(model, group) -> list[str]:
    by_id = {id(p): n for n, p in model.named_parameters()}
    return [by_id[id(p)] for p in group["params"]]


def _loss(model, k: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(k)
    x = torch.randint(0, 10, (6,), generator=g)
    return (model(x) - torch.randn(6, 3, generator=g)).pow(2).mean()


def test_weight_decay_groups_exclude_biases_norms_and_embeddings_sorted_by_name():
    model = _model()
    u = trainop.Updater({"backend": "torch",
                         "optimizer": {"class": "adamw", "weight_decay": 0.001}}, model)
    groups = u.optimizer.param_groups
    assert isinstance(u.optimizer, torch.optim.AdamW)
    assert [(g["weight_decay"], _names(model, g)) for g in groups] == [
        (0.001, ["2.weight"]), (0.0, ["0.weight", "1.bias", "1.weight", "2.bias"])]


def _lr_multipliers(*, model, optimizer_opts, **_kwargs):
    """A ``param_groups_custom`` in the style of RETURNN's lr-multiplier helper: multipliers by
    fnmatch pattern, plus the bias and blacklist weight-decay rules."""
    patterns = optimizer_opts.pop("learning_rate_multipliers_by_patterns")
    wd = optimizer_opts.get("weight_decay", 0.0)
    groups: dict[tuple[float, float], list] = {}
    for module_name, module in model.named_modules():
        for local, p in module.named_parameters(recurse=False):
            full = f"{module_name}.{local}" if module_name else local
            mult = next(m for pat, m in patterns.items() if fnmatch.fnmatchcase(full, pat))
            no_decay = local.endswith("bias") or isinstance(
                module, (torch.nn.LayerNorm, torch.nn.Embedding))
            groups.setdefault((0.0 if no_decay else wd, mult), []).append(p)
    return [{"params": ps, "weight_decay": w, "learning_rate_multiplier": m}
            for (w, m), ps in groups.items()]


def test_upstream_lr_multipliers_by_patterns_gives_four_groups():
    """RETURNN's ``test_updater_lr_multipliers``: base LR 1.0, patterns {0.*: 1, 1.*: 0.5,
    2.*: 0.1}, weight decay 0.001: exactly four groups (wd, lr): (0, 1.0) {0.weight};
    (0, 0.5) {1.weight, 1.bias}; (0.001, 0.1) {2.weight}; (0, 0.1) {2.bias}."""
    model = _model()
    u = trainop.Updater({"backend": "torch", "learning_rate": 1.0, "optimizer": {
        "class": "adamw", "weight_decay": 0.001, "param_groups_custom": _lr_multipliers,
        "learning_rate_multipliers_by_patterns": {"0.*": 1.0, "1.*": 0.5, "2.*": 0.1}}}, model)
    u.step(_loss(model, 0))
    got = sorted((g["weight_decay"], g["lr"], sorted(_names(model, g)))
                 for g in u.optimizer.param_groups)
    assert got == sorted([(0.0, 1.0, ["0.weight"]), (0.0, 0.5, ["1.bias", "1.weight"]),
                          (0.001, 0.1, ["2.weight"]), (0.0, 0.1, ["2.bias"])])


def test_a_step_equals_the_hand_built_pytorch_recipe():
    """Accumulation 2 (a sum), value clip, global-norm clip, AdamW with the exclusion groups:
    bit-identical to the same recipe written with torch alone."""
    model = _model()
    ref = copy.deepcopy(model)
    config = {"backend": "torch", "learning_rate": 0.01, "accum_grad_multiple_step": 2,
              "gradient_clip": 0.5, "gradient_clip_global_norm": 0.3,
              "optimizer": {"class": "adamw", "weight_decay": 0.01, "epsilon": 1e-7}}
    u = trainop.Updater(config, model)
    named = dict(ref.named_parameters())
    opt = torch.optim.AdamW([{"params": [named["2.weight"]], "weight_decay": 0.01},
                             {"params": [named[n] for n in ("0.weight", "1.bias", "1.weight",
                                                            "2.bias")], "weight_decay": 0.0}],
                            lr=0.01, eps=1e-7)
    for k in range(6):
        u.step(_loss(model, k))
        _loss(ref, k).backward()  # grads add up in .grad: the sum
        if k % 2 == 1:
            torch.nn.utils.clip_grad_value_(ref.parameters(), 0.5)
            torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.3)
            opt.step()
            opt.zero_grad()
    for a, b in zip(model.parameters(), ref.parameters(), strict=True):
        assert torch.equal(a, b)


def test_resume_mid_window_is_bit_exact():
    config = {"backend": "torch", "learning_rate": 0.01, "accum_grad_multiple_step": 3,
              "optimizer": {"class": "adam"}}
    model = _model()
    u = trainop.Updater(config, model)
    for k in range(4):
        u.step(_loss(model, k))
    saved = copy.deepcopy(u.state_dict())
    weights = copy.deepcopy(model.state_dict())
    for k in range(4, 9):
        u.step(_loss(model, k))
    other = _model()
    other.load_state_dict(weights)
    v = trainop.Updater(config, other)
    v.load_state_dict(saved)
    for k in range(4, 9):
        v.step(_loss(other, k))
    for a, b in zip(model.parameters(), other.parameters(), strict=True):
        assert torch.equal(a, b)


def _nan_loss(model):
    return model[2].weight.sum() * torch.tensor(float("nan"))


def test_invalid_gradients_skip_then_abort_after_k():
    model = _model()
    u = trainop.Updater({"backend": "torch", "optimizer": {"class": "sgd"},
                         "num_allowed_consec_invalid_gradient_steps": 1}, model)
    before = copy.deepcopy(model.state_dict())
    with pytest.warns(RuntimeWarning, match="Invalid gradient in step 0, skipping. 0 "
                                            "subsequent broken steps left"):
        result = u.step(_nan_loss(model))
    assert not bool(result.applied)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
    with pytest.raises(RuntimeError, match="Got 2 invalid gradients in succession, abort "
                                           "training. .*optimizer_epsilon"):
        u.step(_nan_loss(model))


def test_a_valid_step_resets_the_counter_and_value_clipping_hides_inf():
    model = _model()
    u = trainop.Updater({"backend": "torch", "optimizer": {"class": "sgd"},
                         "gradient_clip": 1.0, "num_allowed_consec_invalid_gradient_steps": 0},
                        model)
    inf_loss = model[2].weight.sum() * torch.tensor(float("inf"))
    result = u.step(inf_loss)  # clamped to +-1 first (Q10): valid
    assert bool(result.applied)


def test_noise_runs_before_the_clips_with_the_truncated_normal():
    model = torch.nn.Linear(3, 1, bias=False)
    torch.nn.init.zeros_(model.weight)
    u = trainop.Updater({"backend": "torch", "learning_rate": 1.0, "optimizer": {
        "class": "sgd"}, "gradient_noise": 0.5, "gradient_clip": 0.1}, model)
    torch.manual_seed(3)
    u.step((model.weight * 0.0).sum())
    torch.manual_seed(3)
    expected = torch.nn.init.trunc_normal_(torch.empty(1, 3), std=0.5, a=-1.0, b=1.0)
    torch.testing.assert_close(model.weight.detach(), -expected.clamp(-0.1, 0.1), rtol=0,
                               atol=0)


def test_class_resolution_and_epsilon():
    model = _model()
    u = trainop.Updater({"optimizer": {"class": "torch.optim.Adam"}}, model)  # TF backend
    assert isinstance(u.optimizer, torch.optim.Adam)
    assert u.optimizer.param_groups[0]["eps"] == 1e-8  # optimizer_epsilon is not used
    u = trainop.Updater({"backend": "torch", "optimizer": {"class": "RMSprop",
                                                           "epsilon": 0.1}}, model)
    assert isinstance(u.optimizer, torch.optim.RMSprop)
    assert u.optimizer.param_groups[0]["eps"] == 0.1
    assert trainop.Updater.get_optimizer_class("torch.optim.AdamW") is torch.optim.AdamW
    u = trainop.Updater({"backend": "torch", "optimizer": {"class": lambda: torch.optim.SGD}},
                        model)
    assert isinstance(u.optimizer, torch.optim.SGD)


def test_blacklist_include_check_and_quirk_decisions():
    model = _model()
    seen = []

    def include(*, module, rf_module, full_param_name, param):
        seen.append(full_param_name)
        return True if full_param_name == "bias" and isinstance(module, torch.nn.Linear) \
            else None

    u = trainop.Updater({"backend": "torch", "optimizer": {
        "class": "adamw", "weight_decay": 0.1, "weight_decay_custom_include_check": include,
        "weight_decay_modules_blacklist": ["torch.nn.Linear", torch.nn.LayerNorm]}}, model)
    u.get_optim_op()  # built lazily
    assert sorted(set(seen)) == ["bias", "weight"]  # Q7: the local name, as upstream
    decayed, others = u.optimizer.param_groups
    assert _names(model, decayed) == ["0.weight", "2.bias"]
    assert _names(model, others) == ["1.bias", "1.weight", "2.weight"]
    # Q6 fixed: with weight decay 0 the group keys do not reach the constructor
    u = trainop.Updater({"backend": "torch", "optimizer": {
        "class": "adam", "weight_decay_modules_blacklist": ["torch.nn.Linear"]}}, model)
    assert len(u.optimizer.param_groups) == 1
    # Q5 reproduced, with a warning
    with pytest.warns(UserWarning, match="torch's default 0.01 on every parameter"):
        u = trainop.Updater({"backend": "torch", "optimizer": {"class": "adamw"}}, model)
    assert [g["weight_decay"] for g in u.optimizer.param_groups] == [0.01]


def test_a_blacklist_name_is_looked_up_never_imported():
    """``"torch._dynamo.OptimizedModule"`` names a class in a submodule torch imports lazily on
    attribute access: the config's name is looked up statically, so nothing is imported and the
    entry is refused as an unknown name (a fresh interpreter, where ``torch._dynamo`` is not
    loaded yet)."""
    code = ("import sys, torch, trainop\n"
            "assert 'torch._dynamo' not in sys.modules\n"
            "m = torch.nn.Sequential(torch.nn.Linear(2, 2))\n"
            "u = trainop.Updater({'backend': 'torch', 'optimizer': {'class': 'adamw', "
            "'weight_decay': 0.1, 'weight_decay_modules_blacklist': "
            "['torch._dynamo.OptimizedModule']}}, m)\n"
            "try:\n    u.get_optim_op()\nexcept ValueError as e:\n    print(e)\n"
            "print('torch._dynamo' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout.splitlines()
    assert out[0].startswith("Expected `weight_decay_modules_blacklist` entries to be module "
                             "classes")
    assert out[-1] == "False"


@pytest.mark.parametrize(("config", "exc", "match"), [
    ({"backend": "torch"}, ValueError, "config field 'optimizer' needs to be set explicitely"),
    ({"backend": "torch", "optimizer": {"class": "adamx"}}, ValueError,
     "Optimizer 'adamx' not found in the available torch optimizers list: 'adadelta'"),
    ({"optimizer": {"class": "torch.optim.NoSuch"}}, ValueError,
     "Unknown optimizer class 'torch.optim.NoSuch': a name in a config is looked up"),
    ({"optimizer": {"class": "torch.nn.Linear"}}, ValueError,
     "Unknown optimizer class 'torch.nn.Linear'"),
    ({"backend": "torch", "optimizer": {"class": "adam", "lr": 0.1}}, ValueError,
     "Expected no `learning_rate`/`lr` in `optimizer`"),
    ({"backend": "torch", "optimizer": {"class": "adam", "momentum": 0.9}}, ValueError,
     r"options of Adam to be arguments of its constructor, got \['momentum'\]"),
    ({"backend": "torch", "optimizer": {"class": "adam"}, "gradient_clip_norm": 1.0},
     ValueError, "PyTorch updater: option gradient_clip_norm not supported currently"),
    ({"backend": "torch", "optimizer": {"class": "adamw", "weight_decay": 0.1,
                                        "weight_decay_modules_blacklist": ["rf.LayerNorm"]}},
     ValueError, r"'rf.' names have no meaning in trainop\), got 'rf.LayerNorm'"),
    ({"optimizer": {"class": "adam"}, "param_groups_custom": _lr_multipliers}, ValueError,
     "Expected no `param_groups_custom` with a trainop optimizer"),
])
def test_errors(config, exc, match):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(exc, match=match):
            trainop.Updater(config, _model()).get_optim_op()


def test_a_custom_class_by_dotted_name_trains():
    """RETURNN's ``test_torch_engine_train_lion_optimizer``: a class outside torch.optim by
    its module path, passed from Python (``classes=``: a config's names are never imported);
    here sign SGD, so one step moves every weight by exactly lr."""
    from custom_torch_optim import SignSGD

    model = torch.nn.Linear(3, 2)
    before = [p.detach().clone() for p in model.parameters()]
    u = trainop.Updater({"backend": "torch", "learning_rate": 0.25,
                         "optimizer": {"class": "custom_torch_optim.SignSGD"}}, model,
                        classes={"custom_torch_optim.SignSGD": SignSGD})
    u.step(model(torch.ones(4, 3)).sum())
    for p, b in zip(model.parameters(), before, strict=True):
        torch.testing.assert_close((b - p.detach()).abs(), torch.full_like(b, 0.25))


def test_bf16_parameters_stay_bf16():
    """RETURNN's ``test_torch_engine_bf16``: Adam on a bfloat16 model keeps bfloat16."""
    model = _model().to(torch.bfloat16)
    for backend_class in ({"backend": "torch", "optimizer": {"class": "adam"}},
                          {"optimizer": {"class": "adam"}}):
        u = trainop.Updater({**backend_class, "learning_rate": 0.01}, model)
        for k in range(2):
            u.step(_loss(model, k).float())
        assert all(p.dtype == torch.bfloat16 and torch.isfinite(p).all()
                   for p in model.parameters())
