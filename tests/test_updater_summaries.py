"""The Updater's ``debug_grad_summaries`` and ``log_grad_norm`` in TensorBoard: every tag with
the value computed independently here (RETURNN's ``variable_scalar_summaries_dict``: mean,
population stddev, rms, l2 = ||x||/2, max, min), at the right step, with accumulation (the
window's sum), and nothing read on the host on steps that write nothing."""

from __future__ import annotations

import math

import pytest
import torch
from host_reads import READS, no_host_reads

import trainop

event_accumulator = pytest.importorskip(
    "tensorboard.backend.event_processing.event_accumulator")


def _read(logdir):
    acc = event_accumulator.EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _stats(x: torch.Tensor) -> dict[str, float]:
    v = x.detach().double().flatten().tolist()
    mean = sum(v) / len(v)
    return {"mean": mean, "stddev": math.sqrt(sum((a - mean) ** 2 for a in v) / len(v)),
            "rms": math.sqrt(sum(a * a for a in v) / len(v)),
            "l2": math.sqrt(sum(a * a for a in v)) / 2, "max": max(v), "min": min(v)}


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Tanh(), torch.nn.Linear(2, 1))


def _loss(model, k):
    g = torch.Generator().manual_seed(k)
    return (model(torch.randn(4, 3, generator=g)) - torch.randn(4, 1, generator=g)).pow(2).sum()


def test_every_tag_with_its_value_at_its_step_under_accumulation(tmp_path):
    model = _model()
    u = trainop.Updater({"optimizer": {"class": "adam"}, "learning_rate": 0.1,
                         "accum_grad_multiple_step": 2, "debug_grad_summaries": True,
                         "log_grad_norm": True, "gradient_clip": 0.01},
                        model, summary_writer=str(tmp_path), summary_frequency=1)
    ref = _model()
    expected: dict[str, list[tuple[int, float]]] = {}
    for k in range(4):
        loss = _loss(ref, k)
        grads = torch.autograd.grad(loss, list(ref.parameters()))
        if k % 2 == 0:
            window = [g.clone() for g in grads]
        else:
            window = [w + g for w, g in zip(window, grads, strict=True)]
            norm = math.sqrt(sum(float(g.double().square().sum()) for g in grads))  # raw G
            expected.setdefault("grad_norm:p2", []).append((k, norm))
            expected.setdefault("global_grad_norm", []).append((k, norm))
            for (name, p), g in zip(model.named_parameters(), window, strict=True):
                base = name.rsplit(".", 1)[-1]
                for stat, value in _stats(g).items():
                    expected.setdefault(f"grads/{name}/grad_of_{base}_{stat}", []).append(
                        (k, value))
                for stat, value in _stats(p).items():
                    expected.setdefault(f"vars/{name}/{base}_{stat}", []).append((k, value))
        u.step(_loss(model, k))
        if k % 2 == 1:  # the reference follows the trained weights
            ref.load_state_dict(model.state_dict())
    got = _read(tmp_path)
    assert set(got) == set(expected)
    for tag, rows in expected.items():
        assert [s for s, _ in got[tag]] == [s for s, _ in rows], tag
        for (_, a), (_, b) in zip(got[tag], rows, strict=True):
            assert a == pytest.approx(b, rel=1e-5, abs=1e-7), tag


def test_vars_are_summarised_before_the_update(tmp_path):
    model = _model()
    before = {n: _stats(p)["max"] for n, p in model.named_parameters()}
    u = trainop.Updater({"optimizer": {"class": "sgd"}, "learning_rate": 1.0,
                         "debug_grad_summaries": True}, model, summary_writer=str(tmp_path))
    u.step(_loss(model, 0))
    got = _read(tmp_path)
    for name, value in before.items():
        base = name.rsplit(".", 1)[-1]
        assert got[f"vars/{name}/{base}_max"][0][1] == pytest.approx(value, rel=1e-6)


def test_frequency_and_no_host_read_on_steps_without_summaries(tmp_path):
    model = _model()
    u = trainop.Updater({"optimizer": {"class": "adam"}, "log_grad_norm": True,
                         "debug_grad_summaries": True}, model, summary_writer=str(tmp_path),
                        summary_frequency=3)
    u.step(_loss(model, 0))  # update 0: written
    with no_host_reads(READS):
        u.step(_loss(model, 1))
        u.step(_loss(model, 2))
    u.step(_loss(model, 3))  # update 3: written
    assert [s for s, _ in _read(tmp_path)["grad_norm:p2"]] == [0, 3]


def test_debug_grad_summaries_needs_a_writer_and_frequency_is_checked():
    with pytest.raises(ValueError, match="Expected a `summary_writer`"):
        trainop.Updater({"debug_grad_summaries": True}, _model())
    with pytest.raises(ValueError, match=r"Expected `summary_frequency` to be an int >= 1, "
                                         r"got 0"):
        trainop.Updater({}, _model(), summary_frequency=0)
