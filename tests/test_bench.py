"""Smoke tests of ``trainop bench`` at tiny sizes (seconds). No timing assertions."""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from trainop.__main__ import main
from trainop.bench.candidates import implementations_of, plan_groups
from trainop.bench.checks import bandwidth_ceiling, run_checks
from trainop.bench.headline import headline_rows, render_headline
from trainop.bench.memory import peak_extra_bytes
from trainop.bench.probe import measure_bandwidth
from trainop.bench.progress import Progress
from trainop.bench.quiet import quiet_stderr
from trainop.bench.report import render_markdown
from trainop.bench.specs import SPECS, bytes_per_param
from trainop.bench.verdict import judge
from trainop.bench.workloads import build_data, make_workload
from trainop.registry import OPTIMIZER_CLASSES

SRC = Path(__file__).resolve().parents[1] / "src"
TINY = ["--scale", "0.0005", "--repeats", "2", "--warmup", "1", "--probe-mib", "1",
        "--no-progress"]


def _rows(result):
    for wl in result["workloads"]:
        for group in wl["groups"]:
            for row in group["subjects"]:
                yield wl, group, row, True
            for row in group["peers"]:
                yield wl, group, row, False


@pytest.fixture(scope="module")
def tiny_result(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench") / "out.json"
    out = io.StringIO()
    saved, sys.stdout = sys.stdout, out
    try:
        rc = main(["bench", "--optimizers", "adam,momentum,LazyAdamOptimizer,ftrl",
                   "--workloads", "a,b,c,d", "--no-tf", "--json", str(path), *TINY])
    finally:
        sys.stdout = saved
    assert rc == 0
    return json.loads(path.read_text()), out.getvalue()


def test_json_has_the_expected_keys(tiny_result):
    result, _ = tiny_result
    assert result["schema"] == "trainop.bench/1"
    for key in ("config", "environment", "bandwidth", "workloads", "checks", "notes"):
        assert key in result
    assert [w["key"] for w in result["workloads"]] == ["a", "b", "c", "d"]
    assert result["config"]["optimizers"] == ["AdamOptimizer", "MomentumOptimizer",
                                              "LazyAdamOptimizer", "FtrlOptimizer"]
    for wl in result["workloads"]:
        assert wl["num_params"] > 0 and wl["param_bytes"] == 4 * wl["num_params"]
        assert [g["optimizer"] for g in wl["groups"]] == result["config"]["optimizers"]
        for group in wl["groups"]:
            assert group["bytes_per_param"] == 4 * SPECS[group["optimizer"]].arrays
            assert group["subjects"]


def test_numbers_are_positive(tiny_result):
    result, _ = tiny_result
    assert result["bandwidth"]["best_gbps"] > 0
    measured = 0
    for _, _, row, is_subject in _rows(result):
        if row["kind"] == "torch" or row["implementation"] == "reference":
            assert row["error"] is None, row
        if row["error"]:
            assert isinstance(row["error"], str) and row["error"]
            continue
        measured += 1
        assert len(row["times_s"]) == 2 and all(t > 0 for t in row["times_s"])
        assert row["median_s"] > 0 and row["min_s"] > 0
        assert row["gb_per_s"] > 0 and row["bandwidth_pct"] > 0
        assert row["bytes_per_param"] > 0
        assert row["peak_extra_bytes"] >= 0 and row["peak_extra_pct"] >= 0
        assert ("ratios" in row) == is_subject
    assert measured > 10


def test_ratios_are_peer_over_ours(tiny_result):
    result, _ = tiny_result
    checked = 0
    for _, group, row, is_subject in _rows(result):
        if not is_subject or row["error"]:
            continue
        others = {r["id"]: r for r in group["subjects"] + group["peers"]}
        for peer_id, ratio in row["ratios"].items():
            assert peer_id != row["id"]
            assert math.isclose(ratio, others[peer_id]["median_s"] / row["median_s"])
            checked += 1
        if row["implementation"] != "reference":
            assert any(pid.endswith("[reference]") for pid in row["ratios"])
    assert checked > 0


def test_peers_and_sparse_workload(tiny_result):
    result, _ = tiny_result
    by_key = {w["key"]: w for w in result["workloads"]}
    adam_a = next(g for g in by_key["a"]["groups"] if g["optimizer"] == "AdamOptimizer")
    assert {r["id"] for r in adam_a["peers"]} >= {"torch:Adam[for-loop]", "torch:Adam[foreach]",
                                                   "torch:Adam[fused]"}
    lazy_d = next(g for g in by_key["d"]["groups"] if g["optimizer"] == "LazyAdamOptimizer")
    assert {r["id"] for r in lazy_d["peers"]} == {"trainop:AdamOptimizer[auto]",
                                                   "torch:SparseAdam[for-loop]"}
    d = by_key["d"]
    assert d["sparse"] and 0 < d["touched_params"] < d["num_params"]
    names = {c["check"] for c in result["checks"]}
    assert "sparse: speed-up vs dense-equivalent Adam" in names
    assert "time vs torch Adam(fused)" in names


def test_markdown_report(tiny_result):
    result, stdout = tiny_result
    assert stdout == render_markdown(result)
    for key in "abcd":
        assert f"### ({key})" in stdout
    assert "| optimizer | run | median ms | GB/s | % BW | peak extra | peer / ours |" in stdout
    assert "Acceptance checks (informational" in stdout
    assert "at 100% bandwidth)" in stdout


def test_fast_path_check_carries_the_bandwidth_ceiling(tiny_result):
    result, _ = tiny_result
    b = next(w for w in result["workloads"] if w["key"] == "b")
    best = result["bandwidth"]["best_gbps"]
    fast = {c["optimizer"].split()[0]: c for c in result["checks"]
            if c["check"] == "fast path vs reference"}
    assert set(fast) == set(result["config"]["optimizers"])
    for group in b["groups"]:
        ref = next(r for r in group["subjects"] if r["implementation"] == "reference")
        expected = ref["median_s"] * best * 1e9 / (b["touched_params"] * ref["bytes_per_param"])
        check = fast[group["optimizer"]]
        assert check["ceiling"] == pytest.approx(expected)
        assert check["ceiling"] == pytest.approx(100.0 / ref["bandwidth_pct"])
        assert check["note"] == f"ceiling {expected:.1f} at 100% bandwidth"


def test_tf1_peer(tmp_path):
    pytest.importorskip("tensorflow")
    path = tmp_path / "tf.json"
    rc = main(["bench", "--optimizers", "adam,adagradda,momentumw", "--workloads", "c,d",
               "--implementations", "reference", "--no-torch", "--json", str(path), *TINY])
    assert rc == 0
    result = json.loads(path.read_text())
    tf_rows = [row for _, _, row, _ in _rows(result) if row["kind"] == "tf1"]
    assert {r["id"] for r in tf_rows} == {"tf1:AdamOptimizer", "tf1:AdagradDAOptimizer",
                                          "tf1:MomentumWOptimizer"}
    for row in tf_rows:
        assert row["error"] is None, row
        assert row["median_s"] > 0 and row["peak_extra_bytes"] is None
    assert result["environment"]["tensorflow"]
    [check] = [c for c in result["checks"] if c["check"].startswith("no fused counterpart")
               and c["optimizer"].startswith("MomentumWOptimizer")]
    assert check["value"] is not None and check["detail"].startswith(
        "ours / peer: TF1 MomentumWOptimizer (contrib's decay op + MomentumOptimizer) ")


def test_json_to_stdout(capsys):
    rc = main(["bench", "--optimizers", "sgd", "--workloads", "c", "--no-tf", "--json", "-",
               "--no-memory", *TINY])
    assert rc == 0
    result = json.loads(capsys.readouterr().out)
    row = result["workloads"][0]["groups"][0]["subjects"][0]
    assert row["peak_extra_bytes"] is None and row["median_s"] > 0


@pytest.mark.native
@pytest.mark.parametrize("mode", [[], ["--sequential"]], ids=["interleaved", "sequential"])
def test_every_candidate_gets_repeats_timed_steps(capsys, mode):
    rc = main(["bench", "--optimizers", "ftrl,momentum", "--workloads", "c", "--no-tf",
               "--json", "-", "--no-memory", *mode, *TINY[:2], "--repeats", "4", *TINY[4:]])
    assert rc == 0
    result = json.loads(capsys.readouterr().out)
    groups = result["workloads"][0]["groups"]
    rows = [r for g in groups for r in g["subjects"] + g["peers"]]
    assert {r["implementation"] for r in groups[0]["subjects"]} >= {"reference", "native"}
    assert all(len(r["times_s"]) == 4 and r["error"] is None for r in rows)
    assert result["config"]["interleave"] is (not mode)


def test_pipeline_comparison(capsys, tmp_path):
    path = tmp_path / "pipe.json"
    rc = main(["bench", "--pipeline", "--scale", "0.001", "--repeats", "2", "--warmup", "1",
               "--probe-mib", "1", "--json", str(path)])
    assert rc == 0
    out = capsys.readouterr().out
    assert "(a) 1 x 32M" in out and "(b) 400 / 8M" in out and "target: trainop >= 1.40x" in out
    result = json.loads(path.read_text())
    for wl in result["workloads"]:
        torch_side, ours = wl["sides"]
        assert (torch_side["side"], ours["side"]) == ("torch", "trainop")
        assert torch_side["speedup"] == 1.0 and ours["median_s"] > 0
        assert ours["speedup"] == pytest.approx(torch_side["median_s"] / ours["median_s"])
    assert result["workloads"][1]["num_params"] == 400 * round(8 * 2 ** 20 * 0.001 / 400)


def test_probe_returns_positive_bandwidth():
    bw = measure_bandwidth(torch.device("cpu"), nbytes=1 << 20, repeats=2)
    for key in ("copy_gbps", "triad_gbps", "update_gbps", "best_gbps"):
        assert bw[key] > 0
    assert bw["best_gbps"] == max(bw["copy_gbps"], bw["triad_gbps"], bw["update_gbps"])
    with pytest.raises(ValueError):
        measure_bandwidth(torch.device("cpu"), nbytes=0)


def test_peak_extra_memory_sees_temporaries():
    x = torch.ones(1 << 20)
    peak = peak_extra_bytes(lambda: (x * 2).sum(), torch.device("cpu"))
    assert peak is None or peak >= 4 << 20
    small = peak_extra_bytes(lambda: x.mul_(1.0), torch.device("cpu"))
    assert small is None or small < 1024  # in place: at most a scalar


def test_quiet_stderr_restores_fd2():
    before = os.fstat(2)
    with quiet_stderr():
        os.write(2, b"hidden\n")
    after = os.fstat(2)
    assert (before.st_dev, before.st_ino) == (after.st_dev, after.st_ino)


def test_workloads_at_scale_one_are_the_issues():
    a, b, c, d = (make_workload(k, 1.0) for k in "abcd")
    assert a.shapes == ((32_000_000,),)
    assert len(b.shapes) == 400 and b.num_params == 8_000_000
    assert c.shapes == ((1000,),) * 2000
    assert d.shapes == ((1_000_000, 64),) and d.touched_rows == 10_000
    assert d.touched_params == 640_000
    data = build_data(make_workload("d", 0.001), torch.float32, torch.device("cpu"))
    grad = data.grads[0]
    assert grad.is_sparse and grad._indices().shape == (1, 10)
    assert len(set(grad._indices()[0].tolist())) == 10
    with pytest.raises(ValueError):
        make_workload("e", 1.0)


def test_specs_cover_every_optimizer():
    assert set(SPECS) == set(OPTIMIZER_CLASSES)
    assert bytes_per_param(SPECS["AdamOptimizer"].arrays, torch.float32) == 28
    assert bytes_per_param(SPECS["MomentumOptimizer"].arrays, torch.float32) == 20
    assert bytes_per_param(SPECS["GradientDescentOptimizer"].arrays, torch.float32) == 12
    assert bytes_per_param(SPECS["AdamOptimizer"].arrays, torch.bfloat16) == 14

    class Old:
        pass

    assert implementations_of(Old) == ("reference",)


def _result_with(groups, key="a"):
    return {"workloads": [{"key": key, "groups": groups}]}


def _row(rid, kind, impl, median):
    return {"id": rid, "kind": kind, "implementation": impl, "median_s": median,
            "label": rid, "peak_extra_pct": 1.0}


def test_checks_judge_the_issue_criteria():
    group = {"optimizer": "AdamOptimizer", "torch_relation": "same class",
             "subjects": [_row("trainop:AdamOptimizer[reference]", "trainop", "reference", 5.0),
                          _row("trainop:AdamOptimizer[fused]", "trainop", "fused", 1.04)],
             "peers": [_row("torch:Adam[fused]", "torch", "fused", 1.0)]}
    checks = run_checks(_result_with([group], "b"))
    status = {(c["check"], c["optimizer"]): c["status"] for c in checks}
    assert status[("time vs torch Adam(fused)", "AdamOptimizer fused")] == "PASS"
    assert status[("fast path vs reference", "AdamOptimizer fused")] == "PASS"
    assert status[("peak extra memory, % of param bytes", "AdamOptimizer fused")] == "PASS"
    checks = run_checks(_result_with([group], "c"))
    assert [c["status"] for c in checks if c["check"].startswith("time vs")] == ["FAIL"]


def test_fast_path_check_judges_the_automatic_choice():
    group = {"optimizer": "FtrlOptimizer", "torch_relation": "closest",
             "subjects": [_row("r", "trainop", "reference", 6.0),
                          _row("f", "trainop", "foreach", 5.0),
                          _row("n", "trainop", "native", 1.9),
                          _row("a", "trainop", "auto", 2.1)],
             "peers": []}
    fast = [c for c in run_checks(_result_with([group], "b"))
            if c["check"] == "fast path vs reference"]
    assert [(c["optimizer"], c["status"]) for c in fast] == [("FtrlOptimizer auto", "FAIL")]
    assert fast[0]["value"] == pytest.approx(6.0 / 2.1)


def test_no_fused_counterpart_passes_against_either_peer_and_keeps_both_ratios():
    def group(tf_time):
        return {"optimizer": "FtrlOptimizer", "torch_relation": "closest",
                "subjects": [_row("a", "trainop", "auto", 2.0)],
                "peers": [_row("torch:Adagrad[fused]", "torch", "fused", 1.6),
                          _row("torch:Adagrad[foreach]", "torch", "foreach", 3.0),
                          _row("tf1:Ftrl", "tf1", "tf1", tf_time)]}
    [check] = [c for c in run_checks(_result_with([group(2.5)], "a"))
               if c["check"].startswith("no fused counterpart")]
    assert check["status"] == "PASS" and check["value"] == pytest.approx(0.8)
    assert check["strict_value"] == pytest.approx(1.25)
    assert "torch:Adagrad[fused] 1.25" in check["detail"] and "tf1:Ftrl 0.80" in check["detail"]
    assert check["note"] == "vs torch 1.25, vs TF1 0.80"
    [check] = [c for c in run_checks(_result_with([group(1.9)], "a"))
               if c["check"].startswith("no fused counterpart")]
    assert check["status"] == "FAIL" and check["value"] == pytest.approx(2.0 / 1.9)


def test_contrib_decay_classes_get_a_tf1_peer_of_their_own():
    groups, candidates, _ = plan_groups(
        make_workload("a", 0.001), ["MomentumOptimizer", "MomentumWOptimizer", "AdamWOptimizer"],
        ["reference"], torch_peers=False, tf1_peers=True)
    assert [g.peers for g in groups] == [("tf1:MomentumOptimizer",), ("tf1:MomentumWOptimizer",),
                                         ("tf1:AdamWOptimizer",)]
    momentum_w = candidates["tf1:MomentumWOptimizer"]
    assert momentum_w.label == "TF1 MomentumWOptimizer (contrib's decay op + MomentumOptimizer)"
    assert (momentum_w.short, momentum_w.key, momentum_w.arrays) == ("TF1", "MomentumWOptimizer", 5)
    assert candidates["tf1:MomentumOptimizer"].label == "TF1 MomentumOptimizer (graph kernel)"
    for name in ("MomentumWOptimizer", "AdamWOptimizer"):
        spec = SPECS[name]
        assert spec.tf1_decay and dict(spec.tf1_kwargs) == dict(spec.kwargs)
    assert not any(s.tf1_decay for n, s in SPECS.items() if not n.endswith("WOptimizer"))


def test_bandwidth_ceiling_from_known_numbers():
    # 1M params x 12 B at 50 GB/s: 0.24 ms at the floor; a 2.4 ms reference: ceiling 10.
    assert bandwidth_ceiling(2.4e-3, 1_000_000, 12, 50.0) == pytest.approx(10.0)
    reference = {**_row("r", "trainop", "reference", 2.4e-3), "bytes_per_param": 12}
    group = {"optimizer": "GradientDescentOptimizer", "torch_relation": "same algorithm",
             "subjects": [reference, _row("a", "trainop", "auto", 1.2e-3)], "peers": []}
    result = {"bandwidth": {"best_gbps": 50.0},
              "workloads": [{"key": "b", "touched_params": 1_000_000, "groups": [group]}]}
    [check] = [c for c in run_checks(result) if c["check"] == "fast path vs reference"]
    assert check["status"] == "FAIL" and check["value"] == pytest.approx(2.0)
    assert check["ceiling"] == pytest.approx(10.0)
    assert check["note"] == "ceiling 10.0 at 100% bandwidth"
    # Without a probe (or a row's bytes per parameter) there is no ceiling, and no note.
    [check] = [c for c in run_checks(_result_with([group], "b"))
               if c["check"] == "fast path vs reference"]
    assert check["ceiling"] is None and "note" not in check


def test_tiny_run_ends_with_an_informational_verdict(tiny_result):
    result, stdout = tiny_result
    verdict, checks = result["verdict"], result["checks"]
    assert verdict == judge(result)
    assert not verdict["binding"] and verdict["outcome"] == "INFORMATIONAL"
    assert verdict["exit_status"] == 0  # the fixture's run returned 0 with failing checks
    assert verdict["failed"] == sum(c["status"] == "FAIL" for c in checks) > 0
    assert verdict["passed"] == sum(c["status"] == "PASS" for c in checks)
    assert verdict["not_measured"] == sum(c["status"] == "n/a" for c in checks)
    assert len(verdict["failing"]) == verdict["failed"]
    assert "--scale 1 with --repeats >= 10" in verdict["reason"]
    assert "--scale 0.0005, --repeats 2" in verdict["reason"]
    last = stdout.rstrip().splitlines()[-1]
    assert last.startswith("**Verdict: INFORMATIONAL**") and last.endswith("exit status 0.")
    assert f"Missed the target at this scale: {verdict['failed']}:" in stdout


def test_headline_compares_each_optimizer_with_its_fastest_outside_peer():
    def group(name, ours, peers):
        return {"optimizer": name, "subjects": [
                    _row("r", "trainop", "reference", 9.0),
                    {**_row("a", "trainop", "auto", ours), "bandwidth_pct": 80.0}],
                "peers": [{**_row(pid, kind, "x", t), "bandwidth_pct": 40.0}
                          for pid, kind, t in peers]}

    sparse = {"key": "d", "title": "embedding", "sparse": True, "groups": [
        group("AdamOptimizer", 3.0, [("torch:SparseAdam", "torch", 1.0)]),
        group("LazyAdamOptimizer", 0.5, [("trainop:AdamOptimizer[auto]", "trainop", 0.1),
                                         ("torch:SparseAdam", "torch", 2.0),
                                         ("tf1:Adam", "tf1", 4.0),
                                         ("torch:broken", "torch", None)]),
        group("NovoGrad", 1.0, [])]}
    rows = headline_rows({"workloads": [sparse]})
    # The lead optimizer first; the dense-equivalent trainop row is no peer; no peer, no row.
    assert [(r["optimizer"], r["peer"]["id"], r["ratio"]) for r in rows] == [
        ("LazyAdamOptimizer", "torch:SparseAdam", 0.25), ("AdamOptimizer", "torch:SparseAdam", 3.0)]
    lines = render_headline({"workloads": [sparse]})
    assert lines[2] == "| workload | trainop | best peer | ratio | % of memory bandwidth |"
    assert lines[4] == ("| (d) embedding | `LazyAdamOptimizer` auto 500.00 ms | torch:SparseAdam "
                        "2000.00 ms | 0.25 | 80% / 40% |")
    assert lines[5] == ("| (d), all 2 optimizers with a peer | each one's own | each one's fastest "
                        "| 0.25-3.00, median 1.62; 1 of 2 <= 1.0 | 80% |")
    no_peer = {**sparse, "groups": [group("NovoGrad", 1.0, [])]}
    assert render_headline({"workloads": [no_peer]}) == []


def test_tiny_report_opens_with_the_headline(tiny_result):
    result, stdout = tiny_result
    assert stdout.index("### Headline") < stdout.index("### (a)")
    for key in "abcd":
        assert f"| ({key}) " in stdout and f"| ({key}), all 4 optimizers with a peer |" in stdout


def _judged(statuses, scale=1.0, repeats=10):
    checks = [{"check": "time vs torch Adam(fused)", "workload": "a", "optimizer":
               f"AdamOptimizer auto{i}", "value": None if s == "n/a" else 1.0 + i, "op": "<=",
               "threshold": 1.05, "status": s, "detail": ""} for i, s in enumerate(statuses)]
    return judge({"config": {"scale": scale, "repeats": repeats}, "checks": checks})


@pytest.mark.parametrize("statuses, scale, repeats, outcome, status", [
    (["PASS", "PASS"], 1.0, 10, "PASS", 0),
    (["PASS", "FAIL", "n/a"], 1.0, 10, "FAIL", 1),
    (["PASS", "FAIL"], 1.0, 20, "FAIL", 1),
    (["PASS", "n/a"], 1.0, 10, "PASS", 0),        # n/a neither passes nor fails
    (["n/a"], 1.0, 10, "NO CHECKS", 0),
    ([], 1.0, 10, "NO CHECKS", 0),
    (["PASS", "FAIL"], 0.25, 10, "INFORMATIONAL", 0),  # thresholds stated for scale 1
    (["PASS", "FAIL"], 2.0, 10, "INFORMATIONAL", 0),
    (["PASS", "FAIL"], 1.0, 9, "INFORMATIONAL", 0),    # the criteria need >= 10 timed steps
])
def test_verdict_binds_only_at_the_stated_scale(statuses, scale, repeats, outcome, status):
    verdict = _judged(statuses, scale, repeats)
    assert (verdict["outcome"], verdict["exit_status"]) == (outcome, status)
    assert verdict["binding"] == (scale == 1.0 and repeats >= 10)
    assert (verdict["passed"], verdict["failed"], verdict["not_measured"]) == tuple(
        statuses.count(s) for s in ("PASS", "FAIL", "n/a"))
    if "FAIL" in statuses:
        assert verdict["failing"] == ["time vs torch Adam(fused) (a): Adam auto1 2.00 "
                                      "(target <= 1.05)"]


def test_binding_failure_gives_exit_status_one(monkeypatch, capsys):
    # The real command, with the binding scale moved to this tiny size: the foreach path's
    # temporaries are 300% of the parameter bytes on (a), far over the 10% memory threshold.
    from trainop.bench import verdict

    monkeypatch.setattr(verdict, "BINDING_SCALE", 0.0005)
    monkeypatch.setattr(verdict, "BINDING_MIN_REPEATS", 2)
    rc = main(["bench", "--optimizers", "adam", "--workloads", "a", "--no-tf", "--no-torch",
               "--implementations", "reference,foreach", *TINY])
    out = capsys.readouterr().out
    assert rc == 1
    assert "peak extra memory, % of param bytes (a): Adam foreach 300" in out
    assert out.rstrip().splitlines()[-1].startswith("**Verdict: FAIL** — 1 binding check(s)")
    assert out.rstrip().endswith("exit status 1.")


@pytest.mark.parametrize("args, message", [
    (["--optimizers", "nope"], "Unknown optimizer name"),
    (["--optimizers", ""], "comma-separated list"),
    (["--implementations", "turbo"], "unknown implementation"),
    (["--workloads", "a,e"], "unknown workload"),
    (["--scale", "0"], "finite number > 0"),
    (["--scale", "abc"], "expected a number"),
    (["--repeats", "0"], "integer >= 1"),
    (["--warmup", "x"], "expected an integer"),
    (["--dtype", "int8"], "invalid choice"),
    (["--device", "nonsense"], "not a device"),
    (["--device", "meta"], "expected cpu or cuda"),
    (["--json", "/nonexistent-dir/x.json"], "directory does not exist"),
])
def test_bad_arguments_error_cleanly(capsys, args, message):
    with pytest.raises(SystemExit) as exc:
        main(["bench", *args])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_cuda_unavailable_is_a_clean_error(capsys):
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    with pytest.raises(SystemExit):
        main(["bench", "--device", "cuda"])
    assert "CUDA is not available" in capsys.readouterr().err


def test_no_arguments_prints_help(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert "usage: trainop" in out and "bench" in out


def test_python_m_trainop():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH",
                                                                                   "")])}
    proc = subprocess.run([sys.executable, "-m", "trainop", "bench", "--help"], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "--implementations" in proc.stdout and "--scale" in proc.stdout


def test_progress_bar_lines_when_not_a_terminal():
    stream = io.StringIO()
    bar = Progress(4, stream=stream)
    bar.start("(a) run")
    bar.tick(2)
    bar.finish_run("1.0 ms")
    bar.tick(2)
    bar.close()
    assert stream.getvalue() == "[" + "#" * 14 + "." * 14 + "]  50% 2/4 00:00 (a) run 1.0 ms\n"
    quiet = io.StringIO()
    bar = Progress(1, enabled=False, stream=quiet)
    bar.tick()
    bar.finish_run()
    bar.close()
    assert quiet.getvalue() == ""
