"""RETURNN's real torch engine (``python -m returnn``, subprocesses) with trainop's updater
selected from the config (``trainop.returnn.use_in_engine``), issue 27's acceptance 1 and 2.

One config (``returnn_engine.CONFIG``): Task12AX, a tiny model, 3 epochs of 9 micro-steps,
``accum_grad_multiple_step = 2`` (a window straddles every epoch end), ``learning_rates``, a
``dynamic_learning_rate`` of the epoch, ``gradient_clip`` and ``gradient_clip_global_norm``,
``log_grad_norm``. Runs: RETURNN's own updater; trainop's with torch semantics; a resume of the
latter from its epoch-1 files in a new process; trainop's with TF semantics (its
``dynamic_learning_rate`` without ``epoch``, which RETURNN's TF updater refuses). The first
three start together, then the resume."""

from __future__ import annotations

import shutil

import numpy
import pytest
import returnn_engine as engine
import returnn_engine_model as net
import torch
from returnn_drive import update_steps

import trainop

TF_SCHEDULE = '''
def dynamic_learning_rate(*, learning_rate, global_train_step, **kwargs):
    return learning_rate / (1.0 + 0.1 * global_train_step)
'''


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("returnn_engine")
    dirs = {name: root / name for name in ("own", "torch", "tf", "resume")}
    started = {
        "own": engine.start(dirs["own"], record=True),
        "torch": engine.start(dirs["torch"], use=engine.USE_TORCH, record=True),
        "tf": engine.start(dirs["tf"], use=engine.USE_TF, extra=TF_SCHEDULE, record=True)}
    engine.finish(started.pop("torch"))
    (dirs["resume"] / "out").mkdir(parents=True)
    for suffix in (".pt", ".opt.pt"):
        shutil.copy(dirs["torch"] / "out" / f"model.001{suffix}",
                    dirs["resume"] / "out" / f"model.001{suffix}")
    # the scores RETURNN's learning-rate control wrote (it resumes from them too)
    shutil.copy(dirs["torch"] / "lr.txt", dirs["resume"] / "lr.txt")
    started["resume"] = engine.start(dirs["resume"], use=engine.USE_TORCH)
    for process in started.values():
        engine.finish(process)
    return dirs


def _same_tree(a, b, where=""):
    """Nested dicts/lists/tuples of tensors and numbers: equal, tensors bit for bit."""
    if isinstance(a, dict):
        assert set(a) == set(b), where
        for k in a:
            _same_tree(a[k], b[k], f"{where}/{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same_tree(x, y, f"{where}/{i}")
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    else:
        assert a == b, where


def test_torch_semantics_is_bit_identical_to_returnns_updater_at_every_epoch_end(runs):
    initial = net.make_model().state_dict()
    for epoch in (1, 2, 3):
        own_model, own_opt = engine.epoch_files(runs["own"], epoch)
        model, opt = engine.epoch_files(runs["torch"], epoch)
        assert "trainop" not in own_opt and opt["trainop_semantics"] == "torch"  # replaced
        _same_tree(own_model["model"], model["model"], f"epoch {epoch} parameters")
        _same_tree(own_opt["optimizer"], opt["optimizer"], f"epoch {epoch} optimizer")
        for key in ("step", "epoch", "effective_learning_rate", "param_names",
                    "optimizer_class_name"):
            assert own_opt[key] == opt[key], key
        assert any(not torch.equal(initial[k], v) for k, v in model["model"].items())
    # the engine logged the same grad_norm:p2 (the accumulated gradient's) and losses
    own, ours = _scores(runs["own"]), _scores(runs["torch"])
    assert own == ours and all("train_loss_grad_norm:p2" in ours[e][1] for e in (1, 2, 3))


def _scores(directory):
    """Per epoch, (learning rate, scores) of RETURNN's learning-rate file (meta data left
    out: times, host)."""
    def epoch_data(learningRate, error):  # noqa: N803 - RETURNN's file's keyword
        return learningRate, {k: v for k, v in error.items() if not k.startswith(":meta:")}

    return eval((directory / "lr.txt").read_text(), {  # noqa: S307 - RETURNN's own format
        "EpochData": epoch_data, "nan": float("nan"), "inf": float("inf"), "np": numpy})


def test_torch_semantics_updates_where_returnns_engine_does(runs):
    """9 micro-steps an epoch, N = 2: updates after in-epoch steps 2, 4, 6, 8; the 9th is
    dropped (the params before each step are recorded)."""
    for name in ("own", "torch"):
        record = torch.load(runs[name] / "record.pt", weights_only=True)
        assert [r["epoch"] for r in record] == [1] * 9 + [2] * 9 + [3] * 9
        seen = [r["params"] for r in record[1:]]
        assert update_steps(record[0]["params"], seen) == [
            t for e in range(3) for t in (9 * e + 1, 9 * e + 3, 9 * e + 5, 9 * e + 7)]


def test_resume_from_the_epoch_1_files_continues_bit_identically(runs):
    for epoch in (2, 3):
        model, opt = engine.epoch_files(runs["torch"], epoch)
        resumed_model, resumed_opt = engine.epoch_files(runs["resume"], epoch)
        _same_tree(model["model"], resumed_model["model"], f"epoch {epoch} parameters")
        _same_tree(opt["optimizer"], resumed_opt["optimizer"], f"epoch {epoch} optimizer")
        _same_tree(opt["trainop"], resumed_opt["trainop"], f"epoch {epoch} Updater state")


def _replay_tf(record):
    """trainop.Updater with TF semantics driven by hand on the engine's batches: the same
    options, the epoch starts, one ``step(loss)`` a micro-step; the parameters before every
    step compared with the engine's."""
    model = net.make_model()

    def schedule(*, learning_rate, global_train_step, **_):
        return learning_rate / (1.0 + 0.1 * global_train_step)

    lrs = (0.01, 0.005, 0.002)
    u = trainop.Updater({"optimizer": {"class": "adam"}, "accum_grad_multiple_step": 2,
                         "gradient_clip": 0.5, "gradient_clip_global_norm": 1.0,
                         "dynamic_learning_rate": schedule, "log_grad_norm": True}, model,
                        initial_learning_rate=lrs[0])
    epoch = None
    for t, step in enumerate(record):
        _same_tree(step["params"], model.state_dict(), f"before micro-step {t}")
        if step["epoch"] != epoch:
            epoch = step["epoch"]
            u.set_learning_rate(lrs[epoch - 1])
            u.set_current_train_step(global_train_step=step["step"], epoch=epoch,
                                     epoch_continuous=epoch - 1)
        u.step(net.loss_of(model, step["data"], step["targets"]))
    return model, u


def test_tf_semantics_equals_the_updater_driven_by_hand_every_step(runs):
    record = torch.load(runs["tf"] / "record.pt", weights_only=True)
    model, u = _replay_tf(record)
    final, opt = engine.epoch_files(runs["tf"], 3)
    _same_tree(final["model"], model.state_dict(), "after the last micro-step")
    assert opt["trainop_semantics"] == "tf"
    _same_tree(opt["trainop"]["groups"][0]["step"], u.state_dict()["groups"][0]["step"],
               "accumulators and counters")


def test_tf_semantics_differs_from_torch_by_the_documented_rules(runs):
    """The same batches, the same start: TF's windows run by the global step across epochs
    (updates after steps 1, 3, 5, ..., 25; the window 8-9 straddles the first epoch end and
    step 26 waits in the accumulators), Adam's epsilon is RETURNN TF's 1e-16 (torch's 1e-8)."""
    tf_record = torch.load(runs["tf"] / "record.pt", weights_only=True)
    torch_record = torch.load(runs["torch"] / "record.pt", weights_only=True)
    for a, b in zip(tf_record, torch_record, strict=True):
        assert torch.equal(a["data"], b["data"]) and torch.equal(a["targets"], b["targets"])
    seen = [r["params"] for r in tf_record[1:]]
    assert update_steps(tf_record[0]["params"], seen) == list(range(1, 26, 2))
    _, tf_opt = engine.epoch_files(runs["tf"], 3)
    _, torch_opt = engine.epoch_files(runs["torch"], 3)
    assert tf_opt["optimizer"]["param_groups"][0]["epsilon"] == 1e-16
    assert torch_opt["optimizer"]["param_groups"][0]["eps"] == 1e-8
    assert tf_opt["optimizer_class_name"] == "AdamOptimizer"
    assert tf_opt["trainop"]["groups"][0]["step"]["accumulator"]["micro_steps"] == 1
    final_tf, _ = engine.epoch_files(runs["tf"], 3)
    final_torch, _ = engine.epoch_files(runs["torch"], 3)
    assert not torch.equal(final_tf["model"]["out.weight"], final_torch["model"]["out.weight"])


def _tensor_bytes(tree, seen: dict | None = None) -> int:
    """The bytes of the tensors' storages in a loaded file's nested dicts and lists, each
    storage once (``torch.save`` writes a storage two entries share once, and ``torch.load``
    shares it again: the optimizer's state is both RETURNN's ``optimizer`` and the Updater's)."""
    seen = {} if seen is None else seen
    if isinstance(tree, torch.Tensor):
        storage = tree.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    elif isinstance(tree, dict):
        for v in tree.values():
            _tensor_bytes(v, seen)
    elif isinstance(tree, (list, tuple)):
        for v in tree:
            _tensor_bytes(v, seen)
    return sum(seen.values())


def test_the_opt_pt_carries_a_partial_window_only_where_a_resume_reads_it(runs):
    """#39: every epoch ends with the 9th micro-step waiting (N = 2). Under torch semantics the
    next epoch drops it (RETURNN's engine; the resume test above continues bit-identically
    without it), so the ``.opt.pt`` holds Adam's state and small counters only, as RETURNN's
    own file does (it held one model-sized sum more: +50%). Under TF semantics the window runs
    across the epoch end and the sum is saved (epochs 1 and 3; after epoch 2's last micro-step,
    an update, nothing waits and nothing is saved)."""
    model_bytes = _tensor_bytes(net.make_model().state_dict())
    for epoch in (1, 2, 3):
        _, own = engine.epoch_files(runs["own"], epoch)
        _, ours = engine.epoch_files(runs["torch"], epoch)
        adam = _tensor_bytes(own["optimizer"])  # exp_avg, exp_avg_sq and the steps
        assert adam >= 2 * model_bytes
        assert _tensor_bytes(ours) - adam < model_bytes // 10, epoch
        assert ours["trainop"]["groups"][0]["step"]["accumulator"] == {
            "micro_steps": 0, "accumulators": {}}
        _, tf = engine.epoch_files(runs["tf"], epoch)
        waiting = tf["trainop"]["groups"][0]["step"]["accumulator"]
        assert waiting["micro_steps"] == (0 if epoch == 2 else 1)
        assert _tensor_bytes(waiting["accumulators"]) == (0 if epoch == 2 else model_bytes)
