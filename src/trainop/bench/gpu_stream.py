"""The GPU suite as ``trainop bench`` runs it: its results written as they come, and kept when
the run is stopped.

``--jsonl PATH`` appends one JSON object per workload to PATH and flushes it as soon as the
workload is measured: the run's fields (device, card, versions, scale, rounds, binding) and the
workload's (key, rows, targets with their verdicts), one line each. A run stopped by a time
limit (``timeout -s INT``, as ``scripts/gpu_check.sh`` runs it; or killed outright) keeps
every workload measured before the stop. On SIGINT the run also prints the table of the
workloads measured so far, says that it was interrupted, and exits with status 130.
"""

from __future__ import annotations

import contextlib
import json
import sys
from argparse import Namespace
from typing import IO

from trainop.bench.gpu_suite import render_gpu_suite, run_gpu_suite, summarize

__all__ = ["JsonlLog", "run_gpu_suite_command", "workload_line"]

#: The result's keys that are totals over the run, not the run's description.
_TOTALS = ("workloads", "met", "missed", "not_measured", "passed")


def workload_line(result: dict, workload: dict) -> str:
    """One JSON line (no newline): the run's fields, then ``workload``'s."""
    run = {k: v for k, v in result.items() if k not in _TOTALS}
    return json.dumps({**run, **workload}, allow_nan=False)


class JsonlLog:
    """Lines appended to ``path``, each flushed to the operating system when written; a
    failed write (a full disk) is one line on stderr and ends the writing, not the run."""

    def __init__(self, path: str):
        self.path = path
        self.failed = False
        self._file: IO[str] | None = None
        try:
            self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        except OSError as error:
            self._fail(error)

    def _fail(self, error: OSError) -> None:
        print(f"trainop bench: cannot write --jsonl {self.path}: {error.strerror or error}",
              file=sys.stderr)
        self.failed = True
        self.close()

    def write(self, line: str) -> None:
        if self._file is None:
            return
        try:
            self._file.write(line + "\n")
            self._file.flush()
        except OSError as error:
            self._fail(error)

    def close(self) -> None:
        if self._file is not None:
            file, self._file = self._file, None
            with contextlib.suppress(OSError):  # what failed to be written was reported
                file.close()


def run_gpu_suite_command(args: Namespace, *, write_json) -> int:
    """``trainop bench --gpu-suite`` with parsed ``args`` (``write_json(result, path)``:
    the ``--json`` writer, False on failure); returns the exit status."""
    log = JsonlLog(args.jsonl) if args.jsonl is not None else None
    partial: dict = {}

    def measured(result: dict, workload: dict) -> None:
        partial["result"] = result
        if log is not None:
            log.write(workload_line(result, workload))

    try:
        result = run_gpu_suite(device=args.device, scale=args.scale, rounds=args.repeats,
                               warmup=args.warmup, only=args.gpu_workloads,
                               on_workload=measured)
    except KeyboardInterrupt:
        done = partial.get("result")
        count = len(done["workloads"]) if done else 0
        print(f"trainop bench: interrupted (SIGINT) after {count} measured workload(s)"
              + (f"; they are in {args.jsonl}" if log is not None and count else ""),
              file=sys.stderr)
        if done is not None and args.json != "-":
            sys.stdout.write(render_gpu_suite(summarize(done)))
            sys.stdout.write(f"Interrupted after {count} workload(s).\n")
        return 130
    finally:
        if log is not None:
            log.close()
    if args.json is not None and not write_json(result, args.json):
        return 1
    if args.json != "-":
        sys.stdout.write(render_gpu_suite(result))
    if log is not None and log.failed:
        return 1
    return 0 if result.get("passed", True) else 1
