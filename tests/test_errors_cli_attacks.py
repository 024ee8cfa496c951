"""The command line given #34's hostile arguments: one line on stderr and exit status 1 (or
argparse's 2), no traceback; ``trainop train`` in process leaves torch's thread count as it
found it; the built-in data are made while training, not all up front."""

from __future__ import annotations

import pytest
import torch

from trainop.__main__ import main
from trainop.interfaces.train.model import Batches, make_batches

RECIPE = "examples/trainop_updater.yaml"


@pytest.mark.parametrize("out, reason", [
    ("/proc/self", "No such file or directory"),
    ("/sys/kernel/trainop-x", "(Operation not permitted|Permission denied|Read-only)"),
    ("/dev/full/x", "Not a directory"),
])
def test_train_out_that_takes_no_files(out, reason, capsys):
    threads = torch.get_num_threads()
    assert main(["train", RECIPE, "--steps", "2", "--no-progress", "--out", out]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"trainop train: cannot write the run's files in --out {out}: " in err
    assert __import__("re").search(reason, err)
    assert torch.get_num_threads() == threads


def test_train_steps_bounded(capsys):
    assert main(["train", RECIPE, "--steps", "3000000", "--out", "/nonexistent/x"]) == 1
    assert capsys.readouterr().err == ("trainop train: expected --steps <= 1,000,000 (the history "
                                       "keeps a row per micro-step), got 3,000,000\n")


def test_train_restores_the_thread_count(tmp_path, capsys):
    torch.set_num_threads(2)
    try:
        assert main(["train", RECIPE, "--steps", "2", "--no-progress",
                     "--out", str(tmp_path)]) == 0
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(2)
    capsys.readouterr()


def test_batches_are_made_while_iterated():
    lazy = Batches(5, seed=3)
    eager = make_batches(5, seed=3)
    assert len(lazy) == 5
    for (x, y), (a, b) in zip(lazy, eager, strict=True):
        assert torch.equal(x, a) and torch.equal(y, b)
    assert torch.equal(lazy[-1][0], eager[4][0]) and torch.equal(lazy[0][1], eager[0][1])
    half = Batches(2, seed=3, dtype=torch.float16)
    assert next(iter(half))[0].dtype == torch.float16
    with pytest.raises(IndexError):
        lazy[5]


@pytest.mark.parametrize("args, pattern", [
    (["--scale", "1000"], r"argument --scale: expected a scale whose workloads fit in memory "
                          r"\(at most [\d.]+ here: workload \(a\) needs about 1,000 GiB at "
                          r"--scale 1000"),
    (["--probe-mib", "100000000"], r"argument --probe-mib: expected an integer in \[1, \d+\] "
                                   r"\(a quarter of this machine's memory\), got 100000000"),
    (["--probe-mib", "1e8"], r"argument --probe-mib: expected an integer, got '1e8'"),
    (["--json", "/proc/self/x.json"], r"argument --json: cannot write in /proc/self: "),
    (["--json", "/dev/full/x"], r"argument --json: directory does not exist: /dev/full"),
])
def test_bench_arguments(args, pattern, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["bench", *args])
    assert exit_.value.code == 2
    assert __import__("re").search(pattern, capsys.readouterr().err)
