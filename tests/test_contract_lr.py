"""Learning rates as torch hands them over: ``lr == 0`` (where ``PolynomialLR``,
``CosineAnnealingLR(eta_min=0)`` and warm-ups from 0 arrive) is a step that leaves the
parameters unchanged for every optimizer and implementation, float or tensor, dense or
sparse, fresh or mid-training; slots and counters advance as torch's do (Ftrl's slots, whose
update divides by the rate, stay); 1-element tensor rates of any shape work as 0-dim ones."""

from __future__ import annotations

import math

import contract_table as table
import pytest
import torch

import trainop

ZERO_CASES = [(info, impl, kind) for info, impl in table.IMPLEMENTATION_CASES
              for kind in ("float", "tensor")]


def _set_lr(opt, value: float) -> None:
    for group in opt.param_groups:
        if isinstance(group["lr"], torch.Tensor):
            group["lr"].fill_(value)
        else:
            group["lr"] = value


@pytest.mark.parametrize(("info", "implementation", "kind"), ZERO_CASES,
                         ids=table.ids(ZERO_CASES))
def test_lr_zero_leaves_parameters_unchanged(info, implementation, kind):
    for sparse in (False, True):
        ps = table.params()
        lr = torch.tensor(info.lr) if kind == "tensor" else info.lr
        opt = info.make(ps, lr=lr, implementation=implementation)
        table.train(opt, ps, 2, sparse=sparse)  # mid-training: the slots hold values
        _set_lr(opt, 0.0)
        before = [p.detach().clone() for p in ps]
        steps = int(opt.param_groups[0]["non_slot"]["step"])
        table.train(opt, ps, 2, start=2, sparse=sparse)
        for p, b in zip(ps, before, strict=True):
            assert torch.equal(p.detach(), b) and torch.isfinite(p).all()
        assert int(opt.param_groups[0]["non_slot"]["step"]) == steps + 2  # steps still count
        for state in opt.state.values():
            assert all(torch.isfinite(s).all() for s in state.values())


# (RMSProp's momentum and contrib's meaning of the decoupled decay: the documented
# exceptions, test_where_tf_semantics_still_move_at_lr_zero)
VARIANTS = [(info, variant) for info in table.INFOS for variant in info.variants
            if not (info.name == "RMSPropOptimizer" and variant.get("momentum"))
            and variant.get("decay_scaled_by_lr", True)]


@pytest.mark.parametrize(("info", "variant"), VARIANTS,
                         ids=[f"{i.name}-{n}" for n, (i, _) in enumerate(VARIANTS)])
def test_lr_zero_with_every_variant(info, variant):
    """The other constructor inputs (l1/l2 shrinkage, Nesterov, centered, other powers...)."""
    ps = table.params()
    opt = info.make(ps, **variant)
    table.train(opt, ps, 2)
    _set_lr(opt, 0.0)
    before = [p.detach().clone() for p in ps]
    table.train(opt, ps, 2, start=2)
    assert all(torch.equal(p.detach(), b) for p, b in zip(ps, before, strict=True))


@pytest.mark.parametrize("info", table.INFOS, ids=table.info_ids(table.INFOS))
def test_lr_zero_from_the_first_step(info):
    ps = table.params()
    opt = info.make(ps, lr=0.0)
    before = [p.detach().clone() for p in ps]
    table.train(opt, ps, 2)
    assert all(torch.equal(p.detach(), b) for p, b in zip(ps, before, strict=True))


SCHEDULES = {
    "PolynomialLR": lambda opt: torch.optim.lr_scheduler.PolynomialLR(opt, total_iters=2),
    "CosineAnnealingLR": lambda opt: torch.optim.lr_scheduler.CosineAnnealingLR(
        opt, T_max=2, eta_min=0.0),
    "warm-up-from-0": lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda s: s / 2),
}


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
@pytest.mark.parametrize("name", ["FtrlOptimizer", "ProximalAdagradOptimizer",
                                  "AdagradDAOptimizer", "AdamWOptimizer"])
def test_schedules_that_reach_zero(name, schedule):
    """The optimizers that used to reject lr = 0 (or move at it) under torch's schedules."""
    info = next(i for i in table.INFOS if i.name == name)
    ps = table.params()
    opt = info.make(ps)
    scheduler = SCHEDULES[schedule](opt)
    for step in range(4):
        lr = opt.param_groups[0]["lr"]
        before = [p.detach().clone() for p in ps]
        table.set_grads(ps, step)
        opt.step()
        scheduler.step()
        moved = any(not torch.equal(p.detach(), b) for p, b in zip(ps, before, strict=True))
        assert moved == (lr != 0), (step, lr)
        assert all(torch.isfinite(p).all() for p in ps)


def _torch_state_at_lr_zero(torch_cls, ps, **kwargs):
    opt = torch_cls(ps, lr=0.0, **kwargs)
    table.train(opt, ps, 3)
    return opt.state


def test_slots_advance_at_lr_zero_as_torch_state_does():
    """torch's convention: at lr 0 the state advances (Adam's moments, Adagrad's sum), the
    parameters do not; trainop's slots hold the same numbers where the rules agree."""
    ps, tps = table.params(), table.params()
    opt = trainop.AdamOptimizer(ps, lr=0.0, beta1=0.9, beta2=0.999)
    table.train(opt, ps, 3)
    state = _torch_state_at_lr_zero(torch.optim.Adam, tps, betas=(0.9, 0.999))
    for p, tp in zip(ps, tps, strict=True):
        torch.testing.assert_close(opt.state[p]["m"], state[tp]["exp_avg"])
        torch.testing.assert_close(opt.state[p]["v"], state[tp]["exp_avg_sq"])
    ps, tps = table.params(), table.params()
    opt = trainop.AdagradOptimizer(ps, lr=0.0, initial_accumulator_value=0.1)
    table.train(opt, ps, 3)
    state = _torch_state_at_lr_zero(torch.optim.Adagrad, tps, initial_accumulator_value=0.1)
    for p, tp in zip(ps, tps, strict=True):
        torch.testing.assert_close(opt.state[p]["accumulator"], state[tp]["sum"])


def _gradient_sums(ps, steps):
    sums, squares = [torch.zeros_like(p) for p in ps], [torch.zeros_like(p) for p in ps]
    for step in range(steps):
        table.set_grads(ps, step)
        for i, p in enumerate(ps):
            sums[i] += p.grad
            squares[i] += p.grad * p.grad
    return sums, squares


@pytest.mark.parametrize("implementation", ["reference", "foreach", "native"])
def test_closed_form_slots_at_lr_zero(implementation):
    """AdagradDA's accumulators and ProximalAdagrad's accumulator advance (they do not depend
    on the rate); Ftrl's ``accum`` and ``linear`` stay (``linear``'s update divides by it)."""
    ps = table.params()
    sums, squares = _gradient_sums(ps, 3)
    opt = trainop.AdagradDAOptimizer(ps, lr=0.0, global_step=None,
                                     initial_gradient_squared_accumulator_value=0.1,
                                     implementation=implementation)
    table.train(opt, ps, 3)
    for p, s, q in zip(ps, sums, squares, strict=True):
        torch.testing.assert_close(opt.state[p]["gradient_accumulator"], s)
        torch.testing.assert_close(opt.state[p]["gradient_squared_accumulator"], q + 0.1)
    ps = table.params()
    opt = trainop.ProximalAdagradOptimizer(ps, lr=0.0, implementation=implementation)
    table.train(opt, ps, 3)
    for p, q in zip(ps, squares, strict=True):
        torch.testing.assert_close(opt.state[p]["accumulator"], q + 0.1)
    ps = table.params()
    opt = trainop.FtrlOptimizer(ps, lr=0.5, implementation=implementation)
    table.train(opt, ps, 2)
    held = table.snapshot(opt)
    _set_lr(opt, 0.0)
    table.train(opt, ps, 2, start=2)
    after = table.snapshot(opt)
    held["g0.step"] += 2  # only the counter moved
    table.assert_same(held, after)


def test_where_tf_semantics_still_move_at_lr_zero():
    """Two documented exceptions, both TF's definitions: RMSProp's momentum holds
    ``lr * g / rms`` (TF puts the rate inside the buffer), so it coasts at lr 0; and the
    decoupled decay with TF's call shape (contrib's ``var -= wd * var``) is not scaled by lr."""
    w = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    opt = trainop.RMSPropOptimizer(0.1, momentum=0.5, params=[w])
    w.grad = torch.tensor([1.0, 1.0])
    opt.step()
    mom = opt.state[w]["momentum"].clone()
    before = w.detach().clone()
    opt.param_groups[0]["lr"] = 0.0
    opt.step()
    torch.testing.assert_close(w.detach(), before - 0.5 * mom)
    w = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    opt = trainop.AdamWOptimizer(0.25, learning_rate=0.0, params=[w])
    w.grad = torch.tensor([1.0, 1.0])
    opt.step()
    torch.testing.assert_close(w.detach(), torch.tensor([0.75, 1.5]))


# ------------------------------------------------------------------ tensor learning rates
@pytest.mark.parametrize(("info", "implementation"), table.IMPLEMENTATION_CASES,
                         ids=table.ids(table.IMPLEMENTATION_CASES))
def test_one_element_tensor_lr_of_any_shape(info, implementation):
    """``lr`` as a float, a 0-dim tensor, or a tensor of shape (1,) or (1, 1) (torch accepts
    them): the same update; the tensor is kept as given (a scheduler's ``fill_`` is seen)."""
    results = []
    for lr in (info.lr, torch.tensor(info.lr), torch.tensor([info.lr]),
               torch.tensor([[info.lr]])):
        ps = table.params()
        opt = info.make(ps, lr=lr, implementation=implementation)
        assert opt.param_groups[0]["lr"] is lr
        table.train(opt, ps, 2)
        if isinstance(lr, torch.Tensor):
            lr.fill_(info.lr / 2)  # in place, as torch's schedulers update a tensor lr
        else:
            opt.param_groups[0]["lr"] = info.lr / 2
        table.train(opt, ps, 1, start=2)
        results.append(table.snapshot(opt))
    for other in results[1:]:
        table.assert_same(results[0], other, rtol=1e-6, atol=1e-7)


def test_tensor_lr_shapes_match_torch():
    """torch's own rule, for comparison: 1 element accepted, 2 a ValueError."""
    p = torch.nn.Parameter(torch.ones(2))
    for shape in ((1,), (1, 1)):
        torch.optim.SGD([p], lr=torch.full(shape, 0.1))
        trainop.GradientDescentOptimizer([p], lr=torch.full(shape, 0.1))
    for cls in (torch.optim.SGD, trainop.GradientDescentOptimizer):
        with pytest.raises(ValueError, match="1-element"):
            cls([p], lr=torch.tensor([0.1, 0.2]))


@pytest.mark.parametrize("info", table.INFOS, ids=table.info_ids(table.INFOS))
def test_negative_lr_is_an_error_at_every_entry(info):
    """At construction, in a new group, and when written into a group: before any change."""
    with pytest.raises(ValueError, match=r"Expected `learning_rate` in \[0, inf\)"):
        info.make(table.params(), lr=-1e-3)
    ps = table.params()
    opt = info.make(ps[:1])
    with pytest.raises(ValueError, match=r"Expected `learning_rate` in \[0, inf\)"):
        opt.add_param_group({"params": ps[1:], "lr": -math.inf})
    assert len(opt.param_groups) == 1
    table.train(opt, ps[:1], 1)
    held = table.snapshot(opt)
    opt.param_groups[0]["lr"] = -0.5
    table.set_grads(ps[:1], 5)
    with pytest.raises(ValueError, match=r"Expected `learning_rate` in \[0, inf\), got -0\.5"):
        opt.step()
    table.assert_same(held, table.snapshot(opt))
