"""``scripts/gpu_check.sh`` (#31, #38) without a GPU.

It parses and plans at most 8 minutes; on a machine without CUDA (or a C compiler) its
preflight stops it with one clear line each, before installing anything. Run with a stand-in
for Python that reports a CUDA device (the preflight, pip, ``trainop doctor`` and ``trainop
bench`` stood in for; pytest the real one, on a tiny test file), every phase runs in order and
$OUT holds at most 8 files, the named ones: a phase stopped at its limit gets SIGINT and keeps
its partial results (pytest's JUnit XML, the bench's JSON lines so far), and the 8-minute
deadline cuts and skips the phases it leaves no time for. Bounded by the phases' limits (about
20 s in all); no timing is asserted.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_check.sh"
FILES = {"summary.txt", "gpu_check.log", "env.txt", "tests.xml", "bench.jsonl", "bench.md",
         "probes.txt"}
PROBES = ("probe_novograd_tail", "probe_launch", "probe_back_to_back")

#: Python as the script calls it on a GPU machine, stood in for: the preflight reports an H100,
#: pip and doctor succeed, pytest is the real one, and ``trainop bench`` appends one JSON line,
#: prints a table, and (for the workloads in $STANDIN_BENCH_SLEEPS) waits to be stopped.
STANDIN = r"""#!/usr/bin/env bash
if [[ $1 == */gpu_preflight.py ]]; then
  printf '%s\n' "python: 3.12.3 (stand-in)" "pytest: 9.0.0" "pytest-xdist: not installed" \
    "pytest-timeout: not installed" "cuda: NVIDIA H100 80GB HBM3 (stand-in), capability (9, 0)"
  exit 0
fi
if [[ $1 == -m && $2 == pytest ]]; then shift 2; exec "$REAL_PYTHON" -m pytest "$@"; fi
if [[ $1 == */gpu_probes.py ]]; then echo "$2: stand-in probe"; exit 0; fi
if [[ $1 == -m && $2 == trainop && $3 == bench ]]; then
  prev= jsonl= workloads=
  for a in "$@"; do
    [[ $prev == --jsonl ]] && jsonl=$a
    [[ $prev == --gpu-workloads ]] && workloads=$a
    prev=$a
  done
  echo "{\"key\": \"$workloads\", \"args\": \"$*\"}" >> "$jsonl"
  echo "| stand-in table: $workloads |"
  if [[ $workloads == "${STANDIN_BENCH_SLEEPS:-}" ]]; then
    trap 'echo "bench stand-in: SIGINT" >&2; kill $child; exit 130' INT
    sleep 300 & child=$!
    wait $child
  fi
  echo "Targets: 1 met, 0 missed, 0 not measured; binding."
  exit 0
fi
echo "stand-in python: $*"
"""


def _run(*args, timeout=120, **env):
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **env})


@pytest.fixture
def standin(tmp_path):
    """Environment for a run with the stand-in Python, a stand-in nvidia-smi and a test file
    of one quick test and one that sleeps (selected by the test file's name)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("python", STANDIN),
                       ("nvidia-smi", "#!/usr/bin/env bash\necho 'clocks.sm [MHz]'\n"
                                      "echo '1980 MHz (stand-in)'\n")):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    tests = tmp_path / "cases"
    tests.mkdir()
    (tests / "test_quick.py").write_text("def test_quick():\n    pass\n")
    (tests / "test_sleeps.py").write_text(
        "import time\n\n\ndef test_quick():\n    pass\n\n\ndef test_sleeps():\n"
        "    time.sleep(300)\n")
    return {"OUT": str(tmp_path / "out"), "PYTHON": str(bin_dir / "python"),
            "REAL_PYTHON": sys.executable, "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "_cases": str(tests)}


def _files(env) -> set[str]:
    return {p.name for p in Path(env["OUT"]).iterdir()}


def _summary(env) -> str:
    return (Path(env["OUT"]) / "summary.txt").read_text()


def _phase(summary: str, name: str) -> str:
    return re.search(rf"^{name}\s+(.*?)\s*(\d+s)?$", summary, re.M).group(1)


def test_parses_and_plans_at_most_eight_minutes():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True, timeout=30)
    out = _run("--dry-run")
    assert out.returncode == 0, out.stderr
    total = int(re.search(r"total at most (\d+) s", out.stdout).group(1))
    limits = [int(s) for s in re.findall(r": at most (\d+) s", out.stdout)]
    assert sum(limits) == total <= 8 * 60
    assert "deadline 480 s for the whole" in out.stdout
    assert "tests/test_cuda.py" in out.stdout and "tests/test_cuda_capture.py" in out.stdout
    files = re.search(r"files: (.*)", out.stdout).group(1).split()
    assert set(files) == FILES and len(files) <= 8


def test_bad_usage_is_refused():
    out = _run("--fast")
    assert out.returncode == 2 and "unknown argument '--fast'" in out.stderr
    out = _run("--dry-run", GPU_CHECK_LIMITS="tests=0")
    assert out.returncode == 2 and "'tests=0' is not PHASE=SECONDS" in out.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_without_cuda_or_a_compiler_it_stops_at_once_with_clear_lines(tmp_path):
    out = _run(OUT=str(tmp_path), PYTHON=sys.executable, CC="/nonexistent/cc")
    assert out.returncode == 3, out.stdout + out.stderr
    assert "gpu_check: no CUDA device" in out.stderr
    assert ("gpu_check: no C compiler (CC='/nonexistent/cc' is not a program): Triton builds "
            "a launcher") in out.stderr
    assert "stopped before anything ran" in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["env.txt", "gpu_check.log",
                                                          "summary.txt"]
    env = (tmp_path / "env.txt").read_text()
    assert f"torch: {torch.__version__}" in env and re.search(r"^numpy: \d", env, re.M)
    assert re.search(r"^Python\.h: .*Python\.h \((present|MISSING)\)$", env, re.M)


def test_the_benchmark_runs_cover_every_optimizer_workload_once():
    from trainop.bench.gpu_suite import WORKLOAD_KEYS

    line = next(x for x in _run("--dry-run").stdout.splitlines() if "--gpu-workloads:" in x)
    runs = [r.strip().split(",") for r in line.split(":", 1)[1].split("|")]
    assert runs[0] == ["adam", "post_backward", "mixed", "captured"]  # the targets first
    for key in WORKLOAD_KEYS:
        assert sum(any(key.startswith(p) for p in run) for run in runs) == 1, key


def test_a_bench_stopped_at_its_limit_keeps_its_lines(standin):
    """Every phase runs in order; the first bench run sleeps past its 4 s limit, gets SIGINT
    (not SIGTERM), and its JSON line and table stay; the second runs to its end."""
    out = _run(GPU_CHECK_TESTS=f"{standin['_cases']}/test_quick.py",
               GPU_CHECK_LIMITS="bench_targeted=4", STANDIN_BENCH_SLEEPS="adam,post_backward,"
               "mixed,captured", **{k: v for k, v in standin.items() if k != "_cases"})
    assert out.returncode == 1, out.stdout + out.stderr
    assert _files(standin) == FILES
    summary = _summary(standin)
    for phase in ("preflight", "install", "doctor", "tests", "bench_other", *PROBES, "clocks"):
        assert _phase(summary, phase) == "ok", summary
    assert _phase(summary, "bench_targeted") == "TIMED OUT (SIGINT)", summary
    assert "tests.xml: 1 tests, 0 failures, 0 errors, 0 skipped" in summary
    assert "bench.jsonl: 2 workload(s) measured" in summary
    assert "cuda: NVIDIA H100 80GB HBM3 (stand-in)" in summary
    out_dir = Path(standin["OUT"])
    lines = (out_dir / "bench.jsonl").read_text().splitlines()
    assert [line.split('"')[3] for line in lines] == ["adam,post_backward,mixed,captured",
                                                      "other"]
    assert "--device cuda --scale 1 --repeats 10 --warmup 3 --no-progress --jsonl" in lines[0]
    table = (out_dir / "bench.md").read_text()
    assert "stand-in table: adam," in table and "stand-in table: other" in table
    log = (out_dir / "gpu_check.log").read_text()
    assert log.count("bench stand-in: SIGINT") == 1
    assert ("-m pip install -q --no-deps --no-build-isolation --no-index "
            "--disable-pip-version-check -e") in log
    # the speed benchmark first (a cool card, nothing else run on it), then the probes, then
    # the tests
    assert (log.index("=== doctor") < log.index("=== bench_targeted")
            < log.index("=== bench_other") < log.index("=== probe_novograd_tail")
            < log.index("=== probe_launch") < log.index("=== probe_back_to_back")
            < log.index("=== tests"))
    probes = (out_dir / "probes.txt").read_text().splitlines()
    assert probes == [f"{p}: stand-in probe" for p in ("novograd_tail", "launch",
                                                       "back_to_back")]
    env = (out_dir / "env.txt").read_text()
    assert env.index("cuda: NVIDIA H100") < env.index("--- at the end:") < env.index("1980 MHz")


def test_tests_stopped_by_the_deadline_keep_their_xml(standin):
    """A 42 s deadline: 20 s are kept for the clocks at the end and 10 s for each phase's
    SIGKILL grace; the benchmark and the probes (stand-ins, instant) run first, then the
    tests (one quick, one sleeping) are cut to about 12 s and get SIGINT: pytest still writes
    its XML with the test that passed; the clocks at the end still run."""
    out = _run(GPU_CHECK_TESTS=f"{standin['_cases']}/test_sleeps.py", GPU_CHECK_BUDGET="42",
               **{k: v for k, v in standin.items() if k != "_cases"})
    assert out.returncode == 1, out.stdout + out.stderr
    assert _files(standin) == FILES
    summary = _summary(standin)
    assert _phase(summary, "tests") == "TIMED OUT (SIGINT)", summary
    for phase in ("bench_targeted", "bench_other", *PROBES, "clocks"):
        assert _phase(summary, phase) == "ok", summary
    xml = ET.parse(Path(standin["OUT"]) / "tests.xml").getroot()
    cases = [(c.get("name"), [child.tag for child in c]) for c in xml.iter("testcase")]
    assert ("test_quick", []) in cases
    assert "bench.jsonl: 2 workload(s) measured" in summary


def test_the_plan_runs_the_benchmark_before_the_tests_and_gives_the_peers_time():
    """issue #44: the speed benchmark before the tests (a cool card), more than 50 s for the
    other optimizers' run, three 10-second probes between them."""
    plan = _run("--dry-run").stdout
    order = re.findall(r"^  (\w+): at most (\d+) s$", plan, re.M)
    names = [name for name, _ in order]
    assert names.index("bench_targeted") < names.index("bench_other") < names.index("tests")
    assert names[names.index("bench_other") + 1:names.index("tests")] == list(PROBES)
    limits = dict(order)
    assert int(limits["bench_other"]) > 50 and int(limits["bench_targeted"]) > 50
    assert all(int(limits[p]) == 10 for p in PROBES)
    assert "probes: novograd_tail launch back_to_back" in plan
