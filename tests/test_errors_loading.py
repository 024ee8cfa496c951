"""Every error of a validated ``load_state_dict`` (optimizers, flat optimizers, the pipeline,
loss scalers, the mixed-precision wrapper), in one table (as ``test_errors.py``); and for every
row, the rejected load leaves the object bit-identical."""

from __future__ import annotations

import copy

import pytest
import torch
from error_table import Row, check, ids, load_row

import trainop
from trainop.processing import (
    BackoffLossScaler,
    ClipByGlobalNorm,
    GradientPipeline,
    LossScale,
    MixedPrecisionOptimizerWrapper,
)

NAN, INF = float("nan"), float("inf")


def adam(flat: bool = False):
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(4, 3)), torch.nn.Parameter(torch.randn(5))]
    opt = trainop.AdamOptimizer(0.1, params=params)
    if flat:
        trainop.flatten(opt)
    for p in params:
        p.grad = torch.ones_like(p)
    opt.step()
    return opt


def pipeline():
    w = torch.nn.Parameter(torch.ones(3))
    pipe = GradientPipeline(trainop.MomentumOptimizer(0.1, 0.9, params=[w]),
                            [LossScale(BackoffLossScaler()), ClipByGlobalNorm(1.0)])
    w.grad = torch.ones(3)
    pipe.step()
    return pipe


def mixed():
    w = torch.nn.Parameter(torch.ones(3, dtype=torch.float16))
    wrapper = MixedPrecisionOptimizerWrapper(trainop.AdamOptimizer(0.1), BackoffLossScaler())
    wrapper.minimize(lambda: (w.float() ** 2).sum(), var_list=[w])
    return wrapper


def scaler():
    return BackoffLossScaler()


def edit(make, change):
    """(object, its state_dict with ``change`` applied) for a row."""
    obj = make()
    sd = copy.deepcopy(obj.state_dict())
    change(sd)
    return obj, sd


def slot(sd, name, value, index=0):
    sd["state"][index][name] = value


def group(sd, key, value, g=0):
    sd["param_groups"][g][key] = value


def non_slot(sd, key, value=None):
    if value is None:
        del sd["param_groups"][0]["non_slot"][key]
    else:
        sd["param_groups"][0]["non_slot"][key] = value


def drop(sd, name):
    del sd["state"][0][name]


CASES = {
    # optimizers (Adam: slots m, v; non-slot beta1_power, beta2_power)
    "0-dim slot": (adam, lambda sd: slot(sd, "m", torch.zeros(())), ValueError,
                   r"group 0, parameter index 0 \(id 0\): Expected slot `m` of shape \(4, 3\), "
                   r"got \(\)"),
    "slot of another shape": (adam, lambda sd: slot(sd, "v", torch.zeros(3, 4)), ValueError,
                              r"parameter index 0 .*slot `v` of shape \(4, 3\), got \(3, 4\)"),
    "int64 slot": (adam, lambda sd: slot(sd, "m", torch.zeros(4, 3, dtype=torch.int64)),
                   TypeError, r"parameter index 0 .*slot `m` of dtype torch.float32, got "
                              r"torch.int64"),
    # a float64 slot is cast to the parameter's dtype, as torch does (test_errors_checkpoints)
    "NaN slot": (adam, lambda sd: slot(sd, "v", torch.full((5,), NAN), 1), ValueError,
                 r"parameter index 1 \(id 1\): Expected `v` to be finite"),
    "slot not a tensor": (adam, lambda sd: slot(sd, "m", 0.0), TypeError,
                          r"parameter index 0 .*Expected `m` to be a tensor, got 0.0"),
    "sparse slot": (adam, lambda sd: slot(sd, "m", torch.zeros(4, 3).to_sparse()), ValueError,
                    r"Expected `m` to be a dense tensor"),
    "missing slot": (adam, lambda sd: drop(sd, "m"), ValueError,
                     r"parameter index 0 .*Expected the slots \['m', 'v'\], got \['v'\] "
                     r"\(missing \['m'\], unexpected \[\]\)"),
    "extra slot": (adam, lambda sd: slot(sd, "accumulator", torch.zeros(4, 3)), ValueError,
                   r"unexpected \['accumulator'\]"),
    "missing beta1_power": (adam, lambda sd: non_slot(sd, "beta1_power"), ValueError,
                            r"group 0: Expected the non-slot variables \['beta1_power'\].*"
                            r"re-initialised"),
    "NaN beta1_power": (adam, lambda sd: non_slot(sd, "beta1_power", torch.tensor(NAN)),
                        ValueError, r"group 0: Expected `non_slot\['beta1_power'\]` to be "
                                    r"finite"),
    "float step counter": (adam, lambda sd: non_slot(sd, "step", torch.tensor(1.0)), TypeError,
                           r"step counter `non_slot\['step'\]` to have an integer dtype, got "
                           r"torch.float32"),
    "negative step counter": (adam, lambda sd: non_slot(sd, "step", torch.tensor(-2)),
                              ValueError, r"step counter `non_slot\['step'\]` >= 0, got -2"),
    "NaN lr": (adam, lambda sd: group(sd, "lr", NAN), ValueError,
               r"group 0: Expected `learning_rate` in \[0, inf\), got nan"),
    "negative lr": (adam, lambda sd: group(sd, "lr", -1.0), ValueError,
                    r"group 0: Expected `learning_rate` in \[0, inf\), got -1"),
    "beta1 1.5": (adam, lambda sd: group(sd, "beta1", 1.5), ValueError,
                  r"group 0: Expected `beta1` in \[0, 1\), got 1.5"),
    "epsilon inf": (adam, lambda sd: group(sd, "epsilon", INF), ValueError,
                    r"group 0: Expected `epsilon`"),
    "lr a string": (adam, lambda sd: group(sd, "lr", "fast"), TypeError,
                    r"group 0: Expected `learning_rate`"),
    "too few groups": (adam, lambda sd: sd.update(param_groups=[]), ValueError,
                       r"Expected `state_dict\['param_groups'\]` to be a list of 1 groups"),
    "other parameter count": (adam, lambda sd: group(sd, "params", [0]), ValueError,
                              r"group 0: Expected `params` to list 2 parameter ids, got \[0\]"),
    "repeated parameter id": (adam, lambda sd: group(sd, "params", [0, 0]), ValueError,
                              r"Expected `params\[1\]` to be a parameter id \(int\) or name "
                              r"\(str\) not used before"),
    "state for an unknown id": (adam, lambda sd: sd["state"].update({7: {}}), ValueError,
                                r"`state` has entries for ids \[7\] that no group lists"),
    "no state key": (adam, lambda sd: sd.pop("state"), ValueError,
                     r"Expected `state_dict` to have the key 'state'"),
    "other order (shapes)": (adam, lambda sd: group(sd, "params", [1, 0]), ValueError,
                             r"parameter index 0 \(id 1\): Expected slot `m` of shape \(4, 3\), "
                             r"got \(5,\)"),
    "flat: (1,) slot": (lambda: adam(flat=True), lambda sd: slot(sd, "m", torch.zeros(1)),
                        ValueError, r"parameter index 0 .*slot `m` of shape \(4, 3\), got "
                                    r"\(1,\)"),
    "flat: other shapes": (lambda: adam(flat=True), lambda sd: group(sd, "params", [1, 0]),
                           ValueError, r"slot `m` of shape \(4, 3\), got \(5,\)"),
    # loss scalers
    "NaN loss scale": (scaler, lambda sd: sd.update(loss_scale=torch.tensor(NAN)), ValueError,
                       r"Expected `loss_scale` in checkpoint to be finite, got nan"),
    "zero loss scale": (scaler, lambda sd: sd.update(loss_scale=torch.tensor(0.0)), ValueError,
                        r"Expected `loss_scale` in checkpoint to be finite and > 0, got 0.0"),
    "negative loss scale": (scaler, lambda sd: sd.update(loss_scale=torch.tensor(-4.0)),
                            ValueError, r"`loss_scale` in checkpoint to be finite and > 0"),
    "inf loss scale": (scaler, lambda sd: sd.update(loss_scale=torch.tensor(INF)), ValueError,
                       r"`loss_scale` in checkpoint to be finite, got inf"),
    "loss scale of another shape": (scaler, lambda sd: sd.update(loss_scale=torch.ones(2)),
                                    ValueError, r"`loss_scale` in checkpoint to be a real "
                                                r"tensor of shape \(\)"),
    "fractional scaler counter": (scaler, lambda sd: sd.update(iteration=torch.tensor(2.5)),
                                  ValueError, r"counter `iteration` in checkpoint to be a whole "
                                              r"number >= 0, got 2.5"),
    "scaler value a string": (scaler, lambda sd: sd.update(iteration="3"), TypeError,
                              r"`iteration` in checkpoint to be a number or a tensor"),
    # pipeline
    "pipeline: NaN loss scale": (
        pipeline, lambda sd: sd["stages"]["unscale"].update(loss_scale=torch.tensor(NAN)),
        ValueError, r"`stages\['unscale'\]\.loss_scale` in checkpoint to be finite"),
    "pipeline: fractional counter": (
        pipeline, lambda sd: sd.update(skipped_steps=torch.tensor(1.5)), ValueError,
        r"counter `skipped_steps` in checkpoint to be a whole number >= 0, got 1.5"),
    "pipeline: negative counter": (
        pipeline, lambda sd: sd.update(consecutive_skips=-1), ValueError,
        r"counter `consecutive_skips` in checkpoint to be a whole number >= 0, got -1"),
    # mixed precision
    "mixed: master of another shape": (
        mixed, lambda sd: sd["masters"].__setitem__(0, torch.zeros(4)), ValueError,
        r"`masters\[0\]` in checkpoint of shape \(3,\) and dtype torch.float32, got shape "
        r"\(4,\)"),
    "mixed: NaN master": (
        mixed, lambda sd: sd["masters"].__setitem__(0, torch.full((3,), NAN)), ValueError,
        r"`masters\[0\]` in checkpoint to be finite"),
    "mixed: bad inner slot": (
        mixed, lambda sd: slot(sd["optimizer"], "m", torch.zeros(())), ValueError,
        r"parameter index 0 .*slot `m` of shape \(3,\), got \(\)"),
    "mixed: zero loss scale": (
        mixed, lambda sd: sd["loss_scaler"].update(loss_scale=torch.tensor(0.0)), ValueError,
        r"`loss_scaler.loss_scale` in checkpoint to be finite and > 0"),
}


ERRORS = [load_row(name, lambda m=make, c=change: edit(m, c), exc, match)
          for name, (make, change, exc, match) in CASES.items()]


@pytest.mark.parametrize("row", ERRORS, ids=ids(ERRORS))
def test_error(row: Row) -> None:
    check(row)


def snapshot(obj) -> list[torch.Tensor]:
    """Every tensor the object holds (state_dict's, its params), cloned, plus repr of the rest."""
    out: list = []

    def walk(x):
        if isinstance(x, torch.Tensor):
            out.append(x.detach().clone())
        elif isinstance(x, dict):
            for k in sorted(x, key=str):
                out.append(k)
                walk(x[k])
        elif isinstance(x, list | tuple):
            for v in x:
                walk(v)
        else:
            out.append(repr(x))

    walk(obj.state_dict())
    return out


def same(a, b) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if isinstance(x, torch.Tensor):
            if not (isinstance(y, torch.Tensor) and x.dtype == y.dtype and x.shape == y.shape
                    and torch.equal(x.view(-1).view(torch.uint8) if x.numel() else x,
                                    y.view(-1).view(torch.uint8) if y.numel() else y)):
                return False
        elif x != y:
            return False
    return True


@pytest.mark.parametrize("name", list(CASES))
def test_rejected_load_changes_nothing(name: str) -> None:
    make, change, exc, _ = CASES[name]
    obj, sd = edit(make, change)
    before = snapshot(obj)
    with pytest.raises(exc):
        obj.load_state_dict(sd)
    assert same(before, snapshot(obj))


NAMES = sorted({trainop.get_optimizer_class(n).__name__ for n in trainop.optimizer_names()})


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("corruption", ["0-dim slot", "int64 slot", "complex slot",
                                        "missing slot"])
def test_every_optimizer_rejects_bad_slots(name: str, corruption: str) -> None:
    """#16's rows on a 1M-element parameter, native where offered (what used to crash):
    every slot-holding optimizer rejects the checkpoint and keeps its state."""
    from optimizer_kwargs import kwargs_for

    cls = trainop.OPTIMIZER_CLASSES[name]
    impl = "native" if "native" in cls.IMPLEMENTATIONS and trainop.kernels.native.available() \
        else None
    w = torch.nn.Parameter(torch.zeros(1024, 1024))
    opt = cls(**kwargs_for(name), params=[w], implementation=impl)
    w.grad = torch.full_like(w, 0.5)
    opt.step()
    sd = copy.deepcopy(opt.state_dict())
    slots = sd["state"].get(0, {})
    if not slots:
        pytest.skip(f"{name} has no slots")
    key = sorted(slots)[0]
    scalar = slots[key].dim() == 0
    if corruption == "0-dim slot":
        if scalar:
            pytest.skip("the slot is 0-dim already")
        slots[key] = torch.zeros(())
    elif corruption == "int64 slot":
        slots[key] = slots[key].to(torch.int64)
    elif corruption == "complex slot":  # (a float64 slot is cast on load, as torch does)
        slots[key] = slots[key].to(torch.complex64)
    else:
        del slots[key]
    before = snapshot(opt)
    with pytest.raises((ValueError, TypeError), match=rf"parameter index 0 \(id 0\).*`{key}`"
                       if corruption != "missing slot" else r"parameter index 0 .*missing"):
        opt.load_state_dict(sd)
    assert same(before, snapshot(opt))
    opt.step()  # still steps, from the old state
    assert bool(torch.isfinite(w).all())
