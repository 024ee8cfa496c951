"""Rerun the mutation audit of issue #34: apply each mutant of ``scripts/mutants.py`` to a copy
of the repository and run the tests that cover it.

    python scripts/mutation_audit.py                # every mutant
    python scripts/mutation_audit.py C01 P04        # some
    python scripts/mutation_audit.py --timeout 300 --markdown

The worktree is never changed: each mutant runs in a fresh temporary copy (``.git`` left out)
with ``PYTHONPATH`` pointing at the copy's ``src``. A mutant is *caught* when the selected tests
fail, *timeout* past --timeout (not counted), *survived* when they pass,
*n/a* when its original snippet is not found
exactly once (the code moved: reported, not a crash). Exit status 0 always; the table and
``caught/total`` (over applicable mutants) go to stdout.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from mutants import MUTANTS  # noqa: E402

#: The test files covering each group of mutants (the files of the layer and its error tests).
GROUPS = {
    "CK": ["tests/test_pin_tf_checkpoints.py", "tests/test_tf_checkpoints.py",
           "tests/test_tf_checkpoint_layouts.py", "tests/test_tf_checkpoint_names.py",
           "tests/test_tf_checkpoint_reading.py", "tests/test_errors_tf_checkpoints.py",
           "tests/test_torch_optim_checkpoints.py", "tests/test_openseq2seq_checkpoints.py",
           "tests/test_property_tf_roundtrip.py"],
    "RT": ["tests/test_pin_returnn.py", "tests/test_lr_control.py",
           "tests/test_returnn_engine.py", "tests/test_errors_returnn_engine.py",
           "tests/test_updater_epochs.py"],
    "CF": ["tests/test_pin_configs.py", "tests/test_errors_configs.py",
           "tests/test_configs_idioms.py", "tests/test_configs_inputs.py",
           "tests/test_configs_property.py", "tests/test_property_evaluator.py"],
    "KV": ["tests/test_pin_contract.py", "tests/test_errors_checkpoints.py",
           "tests/test_errors_loading.py", "tests/test_contract_state.py",
           "tests/test_property_checkpoints.py"],
    "NU": ["tests/test_pin_numerics.py", "tests/test_numerics.py", "tests/test_errors_numerics.py",
           "tests/test_numerics_replay.py"],
}
_IGNORE = shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.pyc", ".pytest_cache",
                                 ".hypothesis", "build", "dist")


def _tests(selection: str) -> list[str]:
    args = []
    for part in selection.split():
        args += [f for f in GROUPS[part] if (ROOT / f).exists()] if part in GROUPS else [part]
    return args


def run_one(mutant: tuple, timeout: float, tests: str | None = None) -> tuple[str, float, str]:
    """``(outcome, seconds, note)`` for one mutant (``tests``: a selection instead of its own)."""
    mid, _layer, rel, original, replacement, selection, _what = mutant
    selection = tests or selection
    with tempfile.TemporaryDirectory(prefix=f"mutant-{mid}-") as tmp:
        copy = Path(tmp) / "repo"
        shutil.copytree(ROOT, copy, ignore=_IGNORE, symlinks=True)
        target = copy / "src" / "trainop" / rel
        if not target.is_file():
            return "n/a", 0.0, "file not found"
        text = target.read_text()
        if text.count(original) != 1:
            return "n/a", 0.0, f"snippet found {text.count(original)} times"
        target.write_text(text.replace(original, replacement, 1))
        env = dict(os.environ, PYTHONPATH=str(copy / "src"), TRAINOP_HYPOTHESIS_PROFILE="ci")
        cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
               *_tests(selection)]
        start = time.monotonic()
        try:
            proc = subprocess.run(cmd, cwd=copy, env=env, capture_output=True, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            return "timeout", time.monotonic() - start, f"no result in {timeout:.0f} s"
        seconds = time.monotonic() - start
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("FAILED")]
        if proc.returncode == 0:
            return "survived", seconds, ""
        if proc.returncode in (1, 2) and (lines or proc.returncode == 2):
            return "caught", seconds, (lines[0][7:90] if lines else "collection error")
        return "caught", seconds, f"pytest exit {proc.returncode}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ids", nargs="*", help="mutant ids (default: all)")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--tests", help="run these test files instead (space separated)")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    args = parser.parse_args()
    chosen = [m for m in MUTANTS if not args.ids or m[0] in args.ids]
    rows = []
    for m in chosen:
        outcome, seconds, note = run_one(m, args.timeout, args.tests)
        rows.append((m, outcome, seconds, note))
        print(f"{m[0]:5} {m[1]:10} {outcome:9} {seconds:6.1f}s  {m[6]}  {note}", flush=True)
    applicable = [r for r in rows if r[1] in ("caught", "survived")]
    caught = sum(r[1] == "caught" for r in applicable)
    if args.markdown:
        print("\n| id | layer | file | bug | outcome |\n|---|---|---|---|---|")
        for m, outcome, _, _ in rows:
            print(f"| {m[0]} | {m[1]} | `{m[2]}` | {m[6]} | {outcome} |")
    print(f"\ncaught {caught}/{len(applicable)} applicable "
          f"({len(rows) - len(applicable)} n/a or timed out, {len(rows)} mutants)")


if __name__ == "__main__":
    main()
