"""Epochs in ``trainop.Updater`` and the RETURNN spellings its two backends take (issue 27's
table, one test a row). RETURNN's own torch updater (``returnn.torch.updater.Updater``, driven
as its engine drives it) is the oracle of ``backend="torch"``: bit-identical every micro-step."""

from __future__ import annotations

import math

import pytest
import torch
from returnn_drive import drive_by_hand, drive_engine_way, loss_at, update_steps

import trainop

returnn_updater = pytest.importorskip("returnn.torch.updater")
returnn_config = pytest.importorskip("returnn.config")


class Net(torch.nn.Module):
    """An embedding, a LayerNorm and two linear layers (biases): every weight-decay case."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(5, 4)
        self.hidden = torch.nn.Linear(4, 6)
        self.norm = torch.nn.LayerNorm(6)
        self.out = torch.nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.norm(torch.tanh(self.hidden(x + self.emb.weight))))


def _net() -> Net:
    torch.manual_seed(7)
    return Net()


def _returnn(config: dict, model: torch.nn.Module, lr: float):
    u = returnn_updater.Updater(config=returnn_config.Config(dict(config)), network=model,
                                device="cpu", initial_learning_rate=lr)
    u.create_optimizer()
    return u


def _assert_same_every_step(a: list, b: list) -> None:
    assert len(a) == len(b)
    for t, (x, y) in enumerate(zip(a, b, strict=True)):
        for k in x:
            assert torch.equal(x[k], y[k]), f"micro-step {t}, {k}"


def _parity(config: dict, epoch_sizes=(5, 7), lrs=(0.01, 0.004)):
    """RETURNN's torch updater (engine way) and trainop.Updater(backend torch, by hand)."""
    theirs, ours = _net(), _net()
    before = {k: v.clone() for k, v in ours.state_dict().items()}
    n = config.get("accum_grad_multiple_step", 1)
    a = drive_engine_way(_returnn(config, theirs, lrs[0]), theirs, epoch_sizes, lrs, n)
    u = trainop.Updater({**config, "backend": "torch"}, ours, initial_learning_rate=lrs[0])
    b = drive_by_hand(u, ours, epoch_sizes, lrs)
    _assert_same_every_step(a, b)
    return u, update_steps(before, b), ours


# ---------------------------------------------------------------- row 1: accumulation, epochs
def test_torch_windows_restart_every_epoch_and_a_partial_window_is_dropped():
    """Epochs of 5 and 7 micro-steps, N = 2: updates after micro-steps 1, 3 | 6, 8, 10 (the
    5th and the 12th are dropped), as RETURNN's torch engine; bit-identical to its updater."""
    _, updates, _ = _parity({"optimizer": {"class": "sgd"}, "accum_grad_multiple_step": 2})
    assert updates == [1, 3, 6, 8, 10]


def test_tf_windows_follow_the_global_step_across_epochs():
    """RETURNN's TF rule is kept under backend tf: ``t mod N == N - 1`` (1, 3, 5, 7, 9, 11);
    the window 4-5 straddles the epoch end."""
    model = _net()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    u = trainop.Updater({"optimizer": {"class": "GradientDescent"},
                         "accum_grad_multiple_step": 2}, model, initial_learning_rate=0.01)
    assert update_steps(before, drive_by_hand(u, model, (5, 7), (0.01, 0.004))) == \
        [1, 3, 5, 7, 9, 11]


def test_a_new_epoch_drops_the_pending_window_under_torch_only():
    w = torch.zeros(2, requires_grad=True)
    u = trainop.Updater({"backend": "torch", "optimizer": {"class": "sgd"},
                         "accum_grad_multiple_step": 2, "learning_rate": 1.0}, [w])
    u.step((w * torch.tensor([1.0, 2.0])).sum())  # pending
    u.set_current_train_step(global_train_step=1, epoch=2)  # dropped
    u.step((w * torch.tensor([3.0, 4.0])).sum())
    u.step((w * torch.tensor([5.0, 6.0])).sum())
    assert w.tolist() == [-8.0, -10.0]


# ---------------------------------------------------------------- row 2: dynamic_learning_rate
def test_torch_dynamic_learning_rate_gets_host_numbers_and_the_epoch():
    """RETURNN torch's convention: ``global_train_step``, ``epoch``, ``epoch_continuous``,
    ``learning_rate`` as host numbers; a schedule on ``epoch`` trains bit-identically to
    RETURNN's updater, with both clips and the per-epoch learning rates."""
    calls = []

    def schedule(*, epoch, epoch_continuous, global_train_step, learning_rate, **_):
        calls.append((type(epoch), type(global_train_step), type(learning_rate)))
        return learning_rate * 0.5 ** (epoch - 1) / (1.0 + 0.1 * global_train_step) + \
            1e-4 * epoch_continuous

    _, updates, _ = _parity({"optimizer": {"class": "adam"}, "dynamic_learning_rate": schedule,
                          "accum_grad_multiple_step": 2, "gradient_clip": 0.05,
                          "gradient_clip_global_norm": 0.5})
    assert updates == [1, 3, 6, 8, 10]
    assert set(calls) == {(int, int, float)}


def test_tf_dynamic_learning_rate_keeps_the_tf_convention():
    seen = {}

    def schedule(*, network, global_train_step, learning_rate, **_):
        seen.update(network=network, step=global_train_step, lr=learning_rate)
        return learning_rate * 0.5

    model = _net()
    u = trainop.Updater({"dynamic_learning_rate": schedule, "learning_rate": 0.1}, model)
    u.step(loss_at(model, 0))
    assert seen["network"] is model and isinstance(seen["step"], torch.Tensor)
    assert seen["lr"].dtype == torch.float32
    assert float(u.get_current_step_learning_rate()) == pytest.approx(0.05)


# ---------------------------------------------------------------- row 3: log_grad_norm
@pytest.mark.parametrize(("p", "expected"), [(True, 6.0), (1, 8.4), (float("inf"), 4.8)])
def test_torch_logs_the_norm_of_the_accumulated_gradient(p, expected):
    """g1 = [3, 4], g2 = [0.6, 0.8], N = 2: torch logs the p-norm of g1 + g2 = [3.6, 4.8]."""
    w = torch.zeros(2, requires_grad=True)
    u = trainop.Updater({"backend": "torch", "optimizer": {"class": "sgd"},
                         "accum_grad_multiple_step": 2, "log_grad_norm": p}, [w])
    u.step((w * torch.tensor([3.0, 4.0])).sum())
    u.step((w * torch.tensor([0.6, 0.8])).sum())
    assert float(u.last_grad_norm) == pytest.approx(expected)


def test_tf_logs_the_raw_norm_of_the_micro_step():
    w = torch.zeros(2, requires_grad=True)
    u = trainop.Updater({"accum_grad_multiple_step": 2, "log_grad_norm": True}, [w])
    u.step((w * torch.tensor([3.0, 4.0])).sum())
    u.step((w * torch.tensor([0.6, 0.8])).sum())
    assert float(u.last_grad_norm) == pytest.approx(1.0)


@pytest.mark.parametrize("p", [True, 1, float("inf")])
def test_log_grad_norm_equals_returnns_after_every_update(p):
    theirs, ours = _net(), _net()
    config = {"optimizer": {"class": "adam"}, "accum_grad_multiple_step": 2,
              "log_grad_norm": p, "gradient_clip_global_norm": 0.5}
    r = _returnn(config, theirs, 0.01)
    u = trainop.Updater({**config, "backend": "torch"}, ours, initial_learning_rate=0.01)
    for t in range(6):
        if t % 2 == 0:
            r.zero_grad()
        loss_at(theirs, t).backward()
        u.step(loss_at(ours, t))
        if t % 2 == 1:
            r.step()
            assert torch.equal(r.last_grad_norm, u.last_grad_norm)
    assert r.log_grad_norm_p == u.log_grad_norm_p


# ---------------------------------------------------------------- row 4: weight decay groups
def test_trainop_class_gets_returnns_weight_decay_groups_and_blacklist():
    """A trainop class under backend torch: RETURNN's two groups (biases, LayerNorm, Embedding
    not decayed), ``weight_decay_modules_blacklist`` inside the optimizer dict, torch-style
    construction; bit-identical to RETURNN's updater building the same class."""
    for optimizer in ({"class": trainop.AdamWOptimizer, "weight_decay": 0.01},
                      {"class": trainop.AdamWOptimizer, "weight_decay": 0.01,
                       "weight_decay_modules_blacklist": ["torch.nn.LayerNorm"]}):
        u, updates, model = _parity({"optimizer": optimizer, "accum_grad_multiple_step": 2})
        assert isinstance(u.optimizer, trainop.AdamWOptimizer) and updates == [1, 3, 6, 8, 10]
        names = {id(p): n for n, p in model.named_parameters()}
        groups = [(g["weight_decay"], sorted(names[id(p)] for p in g["params"]))
                  for g in u.optimizer.param_groups]
        no_decay = ["hidden.bias", "norm.bias", "norm.weight", "out.bias"]
        decayed = ["hidden.weight", "out.weight"]
        if "weight_decay_modules_blacklist" in optimizer:
            decayed = ["emb.weight", *decayed]
        else:
            no_decay = sorted(["emb.weight", *no_decay])
        assert groups == [(0.01, decayed), (0.0, no_decay)]


# ---------------------------------------------------------------- row 5: RETURNN's spellings
def test_backend_tensorflow_is_the_tf_semantics():
    for backend in ("tensorflow", "tensorflow-net-dict"):
        u = trainop.Updater({"backend": backend, "optimizer": {"class": "adam"}}, _net())
        assert isinstance(u.optimizer, trainop.AdamOptimizer)
        assert u.optimizer.param_groups[0]["epsilon"] == 1e-16  # RETURNN TF's default


def test_callable_accum_grad_multiple_step_under_torch():
    """``N`` from a callable of the epoch (RETURNN's torch engine): 1 in epoch 1, 3 in epoch 2;
    bit-identical to RETURNN's updater driven by its engine's rule."""
    def n(*, epoch, **_):
        return 1 if epoch == 1 else 3

    theirs, ours = _net(), _net()
    before = {k: v.clone() for k, v in ours.state_dict().items()}
    config = {"optimizer": {"class": "sgd"}, "accum_grad_multiple_step": n}
    a = drive_engine_way(_returnn(config, theirs, 0.01), theirs, (3, 7), (0.01, 0.01), n)
    b = drive_by_hand(trainop.Updater({**config, "backend": "torch"}, ours,
                                      initial_learning_rate=0.01), ours, (3, 7), (0.01, 0.01))
    _assert_same_every_step(a, b)
    assert update_steps(before, b) == [0, 1, 2, 5, 8]


def test_optimizer_instance_is_used_as_it_is_under_torch():
    theirs, ours = _net(), _net()
    mine = torch.optim.SGD(ours.parameters(), lr=0.5, momentum=0.9, nesterov=True)
    a = drive_engine_way(_returnn({"optimizer": torch.optim.SGD(
        theirs.parameters(), lr=0.5, momentum=0.9, nesterov=True)}, theirs, 0.01), theirs,
        (4,), (0.01,), 1)
    u = trainop.Updater({"backend": "torch", "optimizer": mine}, ours,
                        initial_learning_rate=0.01)
    assert u.optimizer is mine
    _assert_same_every_step(a, drive_by_hand(u, ours, (4,), (0.01,)))


def test_optimizer_class_without_a_dict_under_torch():
    u = trainop.Updater({"backend": "torch", "optimizer": torch.optim.Adam}, _net())
    assert type(u.optimizer) is torch.optim.Adam


# ---------------------------------------------------------------- row 6: selecting it
def test_use_in_engine_replaces_the_engines_updater_class():
    engine = pytest.importorskip("returnn.torch.engine")
    import trainop.returnn

    before = engine.Updater
    try:
        assert trainop.returnn.use_in_engine() is trainop.returnn.SEMANTICS["torch"]
        assert engine.Updater is trainop.returnn.SEMANTICS["torch"]
        trainop.returnn.use_in_engine(semantics="tf")
        assert engine.Updater.semantics == "tf"
    finally:
        engine.Updater = before


def test_total_norm_of_p():
    from trainop.training.returnn.torch_step import total_norm

    g = [torch.tensor([3.0, -4.0]), torch.tensor([12.0])]
    assert float(total_norm(g, 2)) == 13.0
    assert float(total_norm(g, 1)) == 19.0
    assert float(total_norm(g, math.inf)) == 12.0


def test_torch_summary_writes_the_p_norm_of_the_window(tmp_path):
    """``grad_norm:p1`` (RETURNN's key) of the window's sum, at each update's step."""
    events = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    w = torch.zeros(2, requires_grad=True)
    u = trainop.Updater({"backend": "torch", "optimizer": {"class": "sgd"},
                         "accum_grad_multiple_step": 2, "log_grad_norm": 1}, [w],
                        summary_writer=str(tmp_path), summary_frequency=1)
    for k in range(4):  # g = (k + 1) * [3, -4]: windows [3, -4] * 3 and [3, -4] * 7
        u.step((w * torch.tensor([3.0, -4.0]) * (k + 1)).sum())
    u._writer.flush()
    acc = events.EventAccumulator(str(tmp_path), size_guidance={"scalars": 0})
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("grad_norm:p1")] == [(1, 21.0), (3, 49.0)]
