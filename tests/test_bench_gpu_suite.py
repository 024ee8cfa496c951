"""#31's GPU suite (``trainop bench --gpu-suite``, the default of ``--device cuda``), its
plumbing run on the CPU at a tiny scale: every side is built and timed, the copy probe gives
the bandwidth, the targets get verdicts, and the triton rows appear exactly where
``implementation="triton"`` runs (Triton's interpreter on the CPU). The figures themselves come
from ``scripts/gpu_check.sh`` on a GPU."""

from __future__ import annotations

import pytest
import torch
from cli_in_process import run_cli

from trainop.bench import gpu_peers
from trainop.bench.gpu_suite import TARGETS, render_gpu_suite, run_gpu_suite
from trainop.bench.gpu_timing import Candidate, median_ratio, time_interleaved

CPU = torch.device("cpu")


def test_median_of_ratios_pairs_rounds():
    times = {"a": [1.0, 2.0, 9.0], "b": [2.0, 2.0, 3.0]}
    assert median_ratio(times, "a", "b") == 1.0  # ratios 0.5, 1, 3
    assert median_ratio(times, "a", "missing") is None


def test_a_failing_side_is_dropped_with_its_error():
    calls = []

    def boom():
        raise RuntimeError("no kernel")

    times, errors = time_interleaved(
        {"ok": Candidate(lambda: calls.append(1), prepare=lambda: calls.append(0)),
         "bad": Candidate(boom)}, rounds=3, warmup=1, device=CPU)
    assert errors == {"bad": "RuntimeError: no kernel"}
    assert len(times["ok"]) == 3 and times["bad"] == []
    assert calls == [0, 1] * 4  # prepare before every step, warm-up included


def test_the_device_is_idle_when_a_step_starts_its_clock(monkeypatch):
    """On CUDA the start event is recorded after a synchronisation that follows ``prepare``:
    else it is stamped once the refill finishes on the device while the host has already
    launched part of the step, and a host-bound step looks faster than it is. Simulated on the
    CPU with CUDA's synchronize and events replaced by recorders."""
    log = []

    class Event:
        def __init__(self, enable_timing=False):
            self.t = None

        def record(self):
            log.append("record")
            self.t = len(log)

        def elapsed_time(self, end):
            return float(end.t - self.t)

    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: log.append("sync"))
    monkeypatch.setattr(torch.cuda, "Event", Event)
    times, errors = time_interleaved(
        {"a": Candidate(lambda: log.append("step"), prepare=lambda: log.append("prepare"))},
        rounds=2, warmup=0, device=torch.device("cuda"))
    assert errors == {} and len(times["a"]) == 2
    # each round: prepare, sync, start event, step, end event; then the round's read-out sync
    assert log == ["sync", *["prepare", "sync", "record", "step", "record", "sync"] * 2]


def test_transformer_shapes_are_355M_at_scale_one():
    shapes = gpu_peers.transformer_shapes(1.0)
    assert gpu_peers.numel(shapes) == 50257 * 1024 + 1024 * 1024 + 24 * 12_596_224 + 2048
    assert len(shapes) == 2 + 24 * 12 + 2


def test_suite_runs_on_the_cpu_at_a_tiny_scale(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    result = run_gpu_suite(device="cpu", scale=1e-5, rounds=2, warmup=1,
                           only=["adam_1x", "adam_2000", "post", "mixed", "other_Momentum",
                                 "captured"])
    triton = gpu_peers.triton_unavailable(CPU) is None
    keys = [w["key"] for w in result["workloads"]]
    assert keys == ["adam_1x256M", "adam_2000", "post_backward", "mixed_bf16",
                    "other_MomentumOptimizer", "other_MomentumWOptimizer", "captured_step"]
    assert not result["binding"] and "passed" not in result
    for w in result["workloads"][:-1]:
        rows = {r["name"]: r for r in w["rows"]}
        copy = rows["copy (bandwidth probe)"]
        assert copy["median_s"] > 0 and w["copy_gbps"] > 0 and copy["pct"] == pytest.approx(100)
        base = rows[w["baseline"]]
        assert base["error"] is None and base["ratio"] == pytest.approx(1.0)
        auto = rows["trainop auto (today's path)"]
        assert auto["error"] is None and auto["gbps"] > 0
        assert ("trainop triton" in rows) == triton
        if triton:
            assert rows["trainop triton"]["error"] is None, rows["trainop triton"]
        assert len(w["targets"]) == len(TARGETS["other" if w["key"].startswith("other")
                                                else w["key"]])
    assert result["workloads"][-1]["skipped"] == "needs CUDA"
    verdicts = result["met"] + result["missed"] + result["not_measured"]
    assert verdicts == sum(len(w["targets"]) for w in result["workloads"])
    text = render_gpu_suite(result)
    assert "| Adam, one 256M tensor | 2,684 | torch Adam fused |" in text
    assert "informational" in text


def test_gpu_workloads_must_name_a_workload(capfd):
    out = run_cli(capfd, "bench", "--gpu-suite", "--gpu-workloads", "adam,nope")  # in process
    assert out.returncode == 2
    assert "expected comma-separated prefixes of adam_1x256M" in out.stderr
    assert "'adam,nope'" in out.stderr


def test_steps_run_back_to_back_between_one_pair_of_events(monkeypatch):
    """``back_to_back=3`` on CUDA (simulated: synchronize and events replaced by recorders):
    three (prepare, step) pairs between one pair of events, then three prepares alone between
    another, subtracted: the host's work before a step's first launch overlaps the previous
    step, as in a training loop, and the refill is not charged to the step."""
    log = []
    stamps = iter(range(1, 1000))

    class Event:
        def __init__(self, enable_timing=False):
            self.t = None

        def record(self):
            log.append("record")
            self.t = next(stamps)

        def elapsed_time(self, end):  # ms: 1000 per stamp
            return 1000.0 * (end.t - self.t)

    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: log.append("sync"))
    monkeypatch.setattr(torch.cuda, "Event", Event)
    times, errors = time_interleaved(
        {"a": Candidate(lambda: log.append("step"), prepare=lambda: log.append("prepare"))},
        rounds=1, warmup=0, device=torch.device("cuda"), back_to_back=3)
    assert errors == {}
    assert log == ["sync", "record", *["prepare", "step"] * 3, "record",
                   "sync", "record", *["prepare"] * 3, "record", "sync"]
    # each pair of events is 1 stamp apart: (1 s - 1 s) / 3 steps
    assert times["a"] == [0.0]
