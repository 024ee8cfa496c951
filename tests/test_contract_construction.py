"""Construction as torch code does it, over the contract table: every valid input builds and
trains, every error input raises its pinned message before anything exists; signatures that
``inspect`` reads (``signature`` and ``getfullargspec``, which RETURNN's torch updater uses)
list the real arguments; a required argument that every param group gives may be left out;
the decoupled weight decay takes torch's meaning from torch's call shape and contrib's from
TF's, each checked against its formula."""

from __future__ import annotations

import copy
import inspect
import pickle

import pytest
import torch
from contract_table import INFOS, info_ids, params, set_grads, snapshot, train

import trainop

VALID = [(info, variant) for info in INFOS for variant in ({}, *info.variants)]
ERRORS = [(info, error) for info in INFOS for error in info.error_inputs()]


@pytest.mark.parametrize(("info", "variant"), VALID,
                         ids=[f"{i.name}-{n}" for n, (i, _) in enumerate(VALID)])
def test_valid_inputs_build_and_train(info, variant):
    ps = params()
    opt = info.make(ps, **variant)
    before = snapshot(opt)
    train(opt, ps, 2)
    after = snapshot(opt)
    assert all(torch.isfinite(t).all() for t in after.values())
    assert not torch.equal(before["g0.p0"], after["g0.p0"])


@pytest.mark.parametrize(("info", "error"), ERRORS,
                         ids=[f"{i.name}-{n}" for n, (i, _) in enumerate(ERRORS)])
def test_error_inputs(info, error):
    ps = params()
    with pytest.raises(error.exc, match=error.match):
        info.make(ps, **error.kwargs)
    assert all(p.grad is None for p in ps)
    # The same values as a param group's keys are rejected too, and the group is not added.
    keys = {info.cls._arg_names.get(k, k): k for k in info.cls._arg_names}
    group_keys = {keys.get(k, "lr" if k == "lr" else k): v for k, v in error.kwargs.items()}
    if all(k in info.make(params()).defaults for k in group_keys):
        opt = info.make(ps[:1])
        with pytest.raises(error.exc, match=error.match):
            opt.add_param_group({"params": ps[1:], **group_keys})
        assert len(opt.param_groups) == 1


# ------------------------------------------------------------------ signatures
@pytest.mark.parametrize("info", INFOS, ids=info_ids(INFOS))
def test_signatures_name_the_real_arguments(info):
    signature = inspect.signature(info.cls)
    spec = inspect.getfullargspec(info.cls.__init__)
    init = inspect.signature(info.cls.__init__)
    assert spec.varargs is None and spec.varkw is None
    assert spec.args[0] == "self" and list(init.parameters)[0] == "self"
    assert list(signature.parameters) == spec.args[1:] + spec.kwonlyargs
    assert {"lr", "params", "implementation"} <= set(spec.kwonlyargs)
    for name in [*info.required, "use_locking", "name"]:
        assert name in spec.args, name
    # Every listed argument is accepted: a call built from the signature's own names works.
    kwargs = {"lr": info.lr, **info.required}
    bound = signature.bind_partial(**kwargs, params=params())
    info.cls(*bound.args, **bound.kwargs)


def test_returnn_style_argument_collection():
    """RETURNN's torch updater collects ``getfullargspec(c.__init__).args[1:]`` over the MRO
    and checks ``weight_decay`` there before it passes it."""
    def collected(cls):
        names = []
        for klass in inspect.getmro(cls):
            if inspect.isfunction(klass.__init__):
                names += [n for n in inspect.getfullargspec(klass.__init__).args[1:]
                          if n not in names]
        return names

    assert "weight_decay" in collected(trainop.AdamWOptimizer)
    assert "weight_decay" in collected(trainop.NovoGrad)
    assert "weight_decay" not in collected(trainop.AdamOptimizer)
    assert {"params", "learning_rate", "epsilon"} <= set(collected(trainop.AdamOptimizer))


def test_signature_of_a_users_subclass():
    class Mine(trainop.GradientDescentOptimizer):
        def __init__(self, learning_rate, scale: float = 2.0, *, params=None):
            self.scale = scale
            super().__init__(learning_rate, params=params)

    assert list(inspect.signature(Mine).parameters) == ["learning_rate", "scale", "params",
                                                        "lr"]
    assert Mine(params(), lr=0.5, scale=3.0).scale == 3.0


# ------------------------------------------------------------------ values from the groups
def _groups(key, first, second):
    a, b = params()
    return [{"params": [a], key: first}, {"params": [b], key: second}], (a, b)


@pytest.mark.parametrize(("cls", "key", "values", "kwargs"), [
    (trainop.MomentumOptimizer, "momentum", (0.9, 0.0), {"lr": 0.1}),
    (trainop.MomentumWOptimizer, "momentum", (0.5, 0.9), {"lr": 0.1, "weight_decay": 0.0}),
    (trainop.MomentumWOptimizer, "weight_decay", (0.1, 0.0), {"lr": 0.1, "momentum": 0.9}),
    (trainop.AdamWOptimizer, "weight_decay", (0.1, 0.0), {"lr": 0.01}),
    (trainop.GradientDescentOptimizer, "lr", (0.1, 0.2), {}),
    (trainop.FtrlOptimizer, "lr", (0.1, 0.2), {}),
    (trainop.AdagradDAOptimizer, "lr", (0.1, 0.2), {"global_step": None}),
])
def test_a_required_argument_every_group_gives(cls, key, values, kwargs):
    groups, (a, b) = _groups(key, *values)
    opt = cls(groups, **kwargs)
    assert [g[key] for g in opt.param_groups] == list(values)
    # Each group trains as an optimizer built with its value (same gradients).
    twin_a, twin_b = params()
    twins = [cls([p], **{**kwargs, key: v}) for p, v in zip((twin_a, twin_b), values,
                                                           strict=True)]
    for step in range(2):
        set_grads([a, b], step)
        twin_a.grad, twin_b.grad = a.grad.clone(), b.grad.clone()
        opt.step()
        for twin in twins:
            twin.step()
    assert torch.equal(a.detach(), twin_a.detach())
    assert torch.equal(b.detach(), twin_b.detach())
    # No default exists: a later group must give it, TF-style variables have no group to join.
    extra = torch.nn.Parameter(torch.ones(2))
    with pytest.raises(ValueError, match=rf"Expected the param group to give `{key}`"):
        opt.add_param_group({"params": [extra]})
    assert len(opt.param_groups) == 2
    opt.add_param_group({"params": [extra], key: values[0]})
    for copied in (copy.deepcopy(opt), pickle.loads(pickle.dumps(opt))):
        with pytest.raises(ValueError, match=rf"Expected the param group to give `{key}`"):
            copied.add_param_group({"params": [torch.nn.Parameter(torch.ones(2))]})


def test_a_required_argument_some_group_lacks_is_still_required():
    groups, _ = _groups("momentum", 0.9, 0.5)
    del groups[1]["momentum"]
    with pytest.raises(TypeError, match="momentum"):
        trainop.MomentumOptimizer(groups, lr=0.1)


def test_tf_style_variables_need_the_value_the_groups_gave():
    groups, _ = _groups("momentum", 0.9, 0.5)
    opt = trainop.MomentumOptimizer(groups, lr=0.1)
    w = torch.nn.Parameter(torch.ones(2))
    with pytest.raises(ValueError, match=r"Expected the param group of variables new to the "
                                         r"optimizer to give `momentum`"):
        opt.apply_gradients([(torch.ones(2), w)])
    assert torch.equal(w.detach(), torch.ones(2)) and w not in opt.state


# ------------------------------------------------------------------ the decoupled decay
def _adam_reference(w, grads, lr, decay, beta1=0.9, beta2=0.999, epsilon=1e-8):
    """TF's Adam (epsilon hat) after ``w -= decay(lr) * w`` per step, in float64."""
    w = w.double().clone()
    m, v = torch.zeros_like(w), torch.zeros_like(w)
    for t, g in enumerate(grads, start=1):
        g = g.double()
        w = w - decay(lr) * w
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        alpha = lr * (1 - beta2 ** t) ** 0.5 / (1 - beta1 ** t)
        w = w - alpha * m / (v.sqrt() + epsilon)
    return w


def _momentum_reference(w, grads, lr, decay, momentum=0.9):
    w = w.double().clone()
    accum = torch.zeros_like(w)
    for g in grads:
        w = w - decay(lr) * w
        accum = momentum * accum + g.double()
        w = w - lr * accum
    return w


def _run(make, w0, grads):
    w = torch.nn.Parameter(w0.clone())
    opt = make([w])
    for g in grads:
        w.grad = g.clone()
        opt.step()
    return opt, w.detach()


DECAY_CASES = {
    "AdamW": (trainop.AdamWOptimizer, _adam_reference, 1e-3, {}),
    "MomentumW": (trainop.MomentumWOptimizer, _momentum_reference, 0.1, {"momentum": 0.9}),
}


@pytest.mark.parametrize("case", sorted(DECAY_CASES))
def test_decoupled_decay_in_both_call_shapes(case):
    cls, reference, lr, extra = DECAY_CASES[case]
    gen = torch.Generator().manual_seed(3)
    w0 = torch.randn(5, generator=gen)
    grads = [torch.randn(5, generator=gen) for _ in range(4)]
    wd = 0.01
    torch_ref = reference(w0, grads, lr, lambda lr: lr * wd, **extra)
    contrib_ref = reference(w0, grads, lr, lambda lr: wd, **extra)
    # torch's call shape (RETURNN's torch engine, ZeRO, Lightning): torch's lr-scaled meaning.
    for make in (lambda ps: cls(ps, lr=lr, weight_decay=wd, **extra),
                 lambda ps: cls(params=ps, lr=lr, weight_decay=wd, **extra),
                 lambda ps: cls(wd, learning_rate=lr, params=ps, decay_scaled_by_lr=True,
                                **extra)):
        opt, w = _run(make, w0, grads)
        assert opt.decay_scaled_by_lr
        torch.testing.assert_close(w.double(), torch_ref, rtol=1e-6, atol=1e-7)
    # TF's call shape: contrib's meaning (1 / lr times stronger).
    for make in (lambda ps: cls(wd, learning_rate=lr, params=ps, **extra),
                 lambda ps: cls(weight_decay=wd, learning_rate=lr, params=ps, **extra),
                 lambda ps: cls(ps, lr=lr, weight_decay=wd, decay_scaled_by_lr=False,
                                **extra)):
        opt, w = _run(make, w0, grads)
        assert not opt.decay_scaled_by_lr
        torch.testing.assert_close(w.double(), contrib_ref, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("implementation", trainop.AdamWOptimizer.IMPLEMENTATIONS)
def test_torch_meaning_follows_the_scheduled_lr_on_every_implementation(implementation):
    """torch's ``p *= 1 - lr * wd`` with the step's lr (a scheduler's), on every kernel; at
    lr 0 nothing decays."""
    gen = torch.Generator().manual_seed(4)
    w0 = torch.randn(6, generator=gen)
    w = torch.nn.Parameter(w0.clone())
    opt = trainop.AdamWOptimizer([w], lr=1e-2, weight_decay=0.5, implementation=implementation)
    twin = torch.nn.Parameter(w0.clone())
    plain = trainop.AdamOptimizer([twin], lr=1e-2, implementation=implementation)
    for lr in (1e-2, 5e-3, 0.0):
        for o in (opt, plain):
            o.param_groups[0]["lr"] = lr
        g = torch.randn(6, generator=gen)
        decayed = twin.detach() * (1 - lr * 0.5)
        w.grad, twin.grad = g.clone(), g.clone()
        opt.step()
        with torch.no_grad():
            twin.copy_(decayed)
        plain.step()
        torch.testing.assert_close(w.detach(), twin.detach(), rtol=1e-6, atol=1e-7)


def test_torch_meaning_with_tensor_and_per_group_values():
    a, b = params()
    opt = trainop.AdamWOptimizer([{"params": [a], "weight_decay": 0.5},
                                  {"params": [b], "weight_decay": 0.0}], lr=torch.tensor(0.1))
    assert opt.decay_scaled_by_lr
    a0, b0 = a.detach().clone(), b.detach().clone()
    a.grad, b.grad = torch.zeros_like(a), torch.zeros_like(b)  # Adam moves nothing at g = 0
    opt.step()
    torch.testing.assert_close(a.detach(), a0 - 0.1 * 0.5 * a0)
    assert torch.equal(b.detach(), b0)
