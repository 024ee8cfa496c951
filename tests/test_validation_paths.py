"""One table of checks, walked through every entry point that takes the values it checks: a
check exists on all of them or on none.

The table is the code's own: each optimizer class's ``_ranges`` (hyperparameter -> allowed
interval), ``_choices`` (option -> allowed strings) and ``_non_slot_ranges`` (a checkpoint's
counters), read by ``Optimizer._validate_group_values`` and the checkpoint validation. A value
outside each entry is made from the entry itself (below the interval's low end, above its high
end, or NaN), never written here; each entry point must refuse it with a ``ValueError`` naming
the argument, before anything changes:

- the constructor, ``add_param_group``, a ``param_groups`` entry edited before ``step``;
- ``load_state_dict``, ZeRO's (``ZeroRedundancyOptimizer.load_state_dict``), DCP's
  (``torch.distributed.checkpoint.state_dict.set_optimizer_state_dict``);
- a recipe (an OpenSeq2Seq config's ``optimizer_params``), Python overrides
  (``load_recipe(..., overrides=...)``), the command line's ``--set`` through ``check-config``
  and through ``train``.
"""

from __future__ import annotations

import contextlib
import io
import math

import pytest
import torch
from optimizer_kwargs import kwargs_for

import trainop
from trainop import OPTIMIZER_CLASSES
from trainop.__main__ import main as cli

#: The constructor arguments a class needs besides the one under test (TF style).


def _bad(interval) -> float:
    """A value outside ``interval``, from its own ends."""
    if math.isfinite(interval.low):
        return interval.low - 1.0
    if math.isfinite(interval.high):
        return interval.high + 1.0
    return float("nan")


#: (class name, group key, constructor argument, a value outside) for every range of the table.
CHECKS = [(name, key, cls._arg_names.get(key, key), _bad(interval))
          for name, cls in sorted(OPTIMIZER_CLASSES.items())
          for key, interval in sorted(cls._ranges.items())]
CHOICES = [(name, key, cls._arg_names.get(key, key), "no such choice")
           for name, cls in sorted(OPTIMIZER_CLASSES.items())
           for key in sorted(cls._choices)]
ALL = CHECKS + CHOICES
IDS = [f"{name}-{key}" for name, key, _, _ in ALL]


def _params():
    gen = torch.Generator().manual_seed(0)
    return [torch.nn.Parameter(torch.randn(3, 2, generator=gen))]


def _build(name, params, **override):
    kwargs = kwargs_for(name)
    return OPTIMIZER_CLASSES[name](params=params, **{**kwargs, **override})


def _trained(name):
    params = _params()
    opt = _build(name, params)
    params[0].grad = torch.ones_like(params[0])
    opt.step()
    return params, opt


def _state(params, opt):
    return ([p.detach().clone() for p in params],
            {k: v.clone() for p in params for k, v in opt.state[p].items()})


def _unchanged(params, opt, before):
    now = _state(params, opt)
    assert all(torch.equal(a, b) for a, b in zip(now[0], before[0], strict=True))
    assert now[1].keys() == before[1].keys()
    assert all(torch.equal(now[1][k], before[1][k]) for k in now[1])


def _message(arg):
    return rf"`{arg}`"


@pytest.mark.parametrize(("name", "key", "arg", "bad"), ALL, ids=IDS)
def test_constructor(name, key, arg, bad):
    with pytest.raises(ValueError, match=_message(arg)):
        _build(name, _params(), **{arg: bad})


@pytest.mark.parametrize(("name", "key", "arg", "bad"), ALL, ids=IDS)
def test_add_param_group(name, key, arg, bad):
    params, opt = _trained(name)
    with pytest.raises(ValueError, match=_message(arg)):
        opt.add_param_group({"params": _params(), key: bad})
    assert len(opt.param_groups) == 1


@pytest.mark.parametrize(("name", "key", "arg", "bad"), ALL, ids=IDS)
def test_param_group_edited_before_step(name, key, arg, bad):
    params, opt = _trained(name)
    before = _state(params, opt)
    opt.param_groups[0][key] = bad
    params[0].grad = torch.ones_like(params[0])
    with pytest.raises(ValueError, match=_message(arg)):
        opt.step()
    _unchanged(params, opt, before)


def _bad_state_dict(name, key, bad):
    params, opt = _trained(name)
    sd = opt.state_dict()
    sd["param_groups"][0][key] = bad
    return sd


@pytest.mark.parametrize(("name", "key", "arg", "bad"), ALL, ids=IDS)
def test_load_state_dict(name, key, arg, bad):
    sd = _bad_state_dict(name, key, bad)
    params, opt = _trained(name)
    before = _state(params, opt)
    with pytest.raises(ValueError, match=_message(arg) + "|" + key):
        opt.load_state_dict(sd)
    _unchanged(params, opt, before)


def _model_and_opt(name):
    """A one-layer model and a ``name`` optimizer after one step (the same numbers each call)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    opt = _build(name, list(model.parameters()))
    model(torch.ones(1, 2)).sum().backward()
    opt.step()
    return model, opt


@pytest.mark.parametrize(("name", "key", "arg", "bad"), ALL, ids=IDS)
def test_dcp_load(name, key, arg, bad):
    from torch.distributed.checkpoint.state_dict import (
        get_optimizer_state_dict,
        set_optimizer_state_dict,
    )

    model, opt = _model_and_opt(name)
    sd = get_optimizer_state_dict(model, opt)
    sd["param_groups"][0][key] = bad
    model, opt = _model_and_opt(name)
    before = _state(list(model.parameters()), opt)
    with pytest.raises(ValueError, match=_message(arg) + "|" + key):
        set_optimizer_state_dict(model, opt, optim_state_dict=sd)
    _unchanged(list(model.parameters()), opt, before)


#: ZeRO's ``load_state_dict`` copies a checkpoint's hyperparameters into the local optimizer's
#: param groups without calling its ``load_state_dict``: the value is refused at the next step
#: (before any write, ``test_param_group_edited_before_step``), not at the load. The ZeRO load
#: is breaks' Z1 (a ZeRO checkpoint validated whole at load).
ZERO_LATE = pytest.mark.xfail(strict=True, reason="ZeRO's load bypasses the optimizer's "
                                                  "load validation; refused at the next step")


@ZERO_LATE
@pytest.mark.parametrize(("name", "key", "arg", "bad"), ALL, ids=IDS)
def test_zero_load(one_rank, name, key, arg, bad):
    from torch.distributed.optim import ZeroRedundancyOptimizer

    def zero():
        params = _params()
        kwargs = kwargs_for(name)
        lr = kwargs.pop("learning_rate")
        z = ZeroRedundancyOptimizer(params, optimizer_class=OPTIMIZER_CLASSES[name], lr=lr,
                                    **kwargs)
        params[0].grad = torch.ones_like(params[0])
        z.step()
        return params, z

    params, z = zero()
    z.consolidate_state_dict(to=0)
    sd = z.state_dict()
    sd["param_groups"][0][key] = bad
    params, z = zero()
    before = _state(params, z.optim)
    with pytest.raises(ValueError, match=_message(arg) + "|" + key):
        z.load_state_dict(sd)
    _unchanged(params, z.optim, before)


#: A checkpoint's counters (Adam's beta powers...): the table's ``_non_slot_ranges``.
NON_SLOT = [(name, key, _bad(interval)) for name, cls in sorted(OPTIMIZER_CLASSES.items())
            for key, interval in sorted(cls._non_slot_ranges.items())]


@pytest.mark.parametrize(("name", "key", "bad"), NON_SLOT,
                         ids=[f"{name}-{key}" for name, key, _ in NON_SLOT])
@pytest.mark.parametrize("entry", ["load_state_dict", "dcp"])
def test_checkpoint_counters(entry, name, key, bad):
    from torch.distributed.checkpoint.state_dict import (
        get_optimizer_state_dict,
        set_optimizer_state_dict,
    )

    model, opt = _model_and_opt(name)
    sd = opt.state_dict() if entry == "load_state_dict" else get_optimizer_state_dict(model, opt)
    sd["param_groups"][0]["non_slot"][key] = torch.tensor(bad)
    model, opt = _model_and_opt(name)
    before = _state(list(model.parameters()), opt)
    with pytest.raises(ValueError, match=key):
        if entry == "load_state_dict":
            opt.load_state_dict(sd)
        else:
            set_optimizer_state_dict(model, opt, optim_state_dict=sd)
    _unchanged(list(model.parameters()), opt, before)


# ---- recipes: the options of a config file, Python overrides, --set ------------------------

#: The checks a recipe reaches: the optimizer's own arguments (the learning rate is the
#: policy's, checked by the schedules' own table).
RECIPE = [case for case in ALL if case[1] != "lr"]
RECIPE_IDS = [f"{name}-{key}" for name, key, _, _ in RECIPE]


def _recipe(name, optimizer_params):
    required = {k: v for k, v in kwargs_for(name).items() if k != "learning_rate"}
    return {"base_params": {"optimizer": name, "lr_policy": "fixed_lr",
                            "lr_policy_params": {"learning_rate": 0.1},
                            "optimizer_params": {**required, **optimizer_params}}}


@pytest.mark.parametrize(("name", "key", "arg", "bad"), RECIPE, ids=RECIPE_IDS)
def test_recipe_file(name, key, arg, bad):
    with pytest.raises(ValueError, match=_message(arg)):
        trainop.load_recipe(_recipe(name, {arg: bad}))


@pytest.mark.parametrize(("name", "key", "arg", "bad"), RECIPE, ids=RECIPE_IDS)
def test_python_overrides(name, key, arg, bad):
    with pytest.raises(ValueError, match=_message(arg)):
        trainop.load_recipe(_recipe(name, {}), overrides={f"optimizer_params.{arg}": bad})


def _file(tmp_path, name):
    recipe = _recipe(name, {})["base_params"]
    path = tmp_path / "r.py"
    path.write_text(f"base_params = {recipe!r}\n")
    return path


def _cli(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli(argv)
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue() + err.getvalue()


def _literal(value):
    return "nan" if isinstance(value, float) and math.isnan(value) else repr(value)


@pytest.mark.parametrize(("name", "key", "arg", "bad"), RECIPE, ids=RECIPE_IDS)
def test_set_in_check_config(tmp_path, name, key, arg, bad):
    code, text = _cli(["check-config", str(_file(tmp_path, name)),
                       "--set", f"optimizer_params.{arg}={_literal(bad)}"])
    assert code not in (0, None), text
    assert f"`{arg}`" in text, text


@pytest.mark.parametrize(("name", "key", "arg", "bad"), RECIPE, ids=RECIPE_IDS)
def test_set_in_train(tmp_path, name, key, arg, bad):
    code, text = _cli(["train", str(_file(tmp_path, name)), "--steps", "1", "--no-progress",
                       "--out", str(tmp_path / "out"),
                       "--set", f"optimizer_params.{arg}={_literal(bad)}"])
    assert code not in (0, None), text
    assert f"`{arg}`" in text, text
