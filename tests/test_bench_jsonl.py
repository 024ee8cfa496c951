"""``trainop bench --jsonl PATH`` (#38): the GPU suite appends one JSON line per workload as it
goes, so that a run stopped by its time limit (``timeout -s INT`` in ``scripts/gpu_check.sh``)
keeps every workload it measured; on SIGINT it also prints the table so far and exits 130.
Run on the CPU at a tiny scale (the plumbing; the figures come from a GPU)."""

from __future__ import annotations

import json

import pytest

from trainop.__main__ import main
from trainop.bench import gpu_suite

ARGS = ["bench", "--gpu-suite", "--device", "cpu", "--scale", "1e-5", "--repeats", "1",
        "--warmup", "0", "--no-progress", "--gpu-workloads", "other_Momentum"]


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_one_line_per_workload_appended(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    path = tmp_path / "bench.jsonl"
    assert main([*ARGS, "--jsonl", str(path)]) == 0
    assert main([*ARGS, "--jsonl", str(path)]) == 0  # a second run appends
    lines = _lines(path)
    keys = ["other_MomentumOptimizer", "other_MomentumWOptimizer"]
    assert [x["key"] for x in lines] == keys * 2
    for line in lines:  # each line stands alone: the run's fields and the workload's
        assert line["device"] == "cpu" and line["scale"] == 1e-5 and line["rounds"] == 1
        assert line["binding"] is False and line["params"] == round(2 ** 28 * 1e-5)
        rows = {r["name"]: r for r in line["rows"]}
        assert rows["trainop auto (today's path)"]["median_s"] > 0
        assert [t["target"] for t in line["targets"]] == [
            "trainop triton: >= 85% of copy bandwidth"]
    assert "| MomentumWOptimizer, one 256M tensor |" in capsys.readouterr().out


def test_sigint_keeps_the_workloads_measured_and_prints_them(tmp_path, capsys, monkeypatch):
    """SIGINT (KeyboardInterrupt in Python) during the second workload: the first one's line
    is in the file, its table is printed, and the exit status is 130."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    measure, calls = gpu_suite._measure, []

    def interrupted_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return measure(*args, **kwargs)

    monkeypatch.setattr(gpu_suite, "_measure", interrupted_second)
    path = tmp_path / "bench.jsonl"
    assert main([*ARGS, "--jsonl", str(path)]) == 130
    assert [x["key"] for x in _lines(path)] == ["other_MomentumOptimizer"]
    out = capsys.readouterr()
    assert "interrupted (SIGINT) after 1 measured workload(s); they are in" in out.err
    assert "| MomentumOptimizer, one 256M tensor |" in out.out
    assert "MomentumWOptimizer" not in out.out
    assert "Interrupted after 1 workload(s)." in out.out


def test_jsonl_only_with_the_gpu_suite(tmp_path, capsys):
    assert main(["bench", "--workloads", "a", "--jsonl", str(tmp_path / "x.jsonl")]) == 2
    assert "--jsonl works with the GPU suite only" in capsys.readouterr().err
    assert not (tmp_path / "x.jsonl").exists()
    with pytest.raises(SystemExit) as exc:
        main([*ARGS, "--jsonl", "-"])
    assert exc.value.code == 2
    assert "'-' is not one" in capsys.readouterr().err
