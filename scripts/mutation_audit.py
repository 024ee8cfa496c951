"""Rerun the mutation audit of issue #34: apply each mutant of ``scripts/mutants.py`` to a copy
of the repository and run the tests that cover it.

    python scripts/mutation_audit.py                # every mutant
    python scripts/mutation_audit.py C01 P04        # some
    python scripts/mutation_audit.py --timeout 300 --markdown

The worktree is never changed: each mutant runs in a fresh temporary copy (``.git`` left out)
with ``PYTHONPATH`` pointing at the copy's ``src``. A mutant is *caught* only when a
selected test fails on an assertion about behaviour (``scripts/mutation_outcome.py``: an
``assert``, ``pytest.raises`` that saw nothing, another error or a message that did not match);
*crash* when tests ended only by other errors (a fixture's set-up, an unexpected exception,
collection): counted, as not caught; *survived* when they pass; *timeout* past --timeout (not
counted); *n/a* when its original snippet is not found exactly once (the code moved). A mutant
listed in its file's ``EQUIVALENT`` (with the reason) that survives is left out of the
non-equivalent count; one so listed that is caught is flagged, since it cannot be equivalent.
Exit status 0 always; the table and the counts go to stdout.

    python scripts/mutation_audit.py --round 5      # the mutants of issue #40
"""
from __future__ import annotations

import argparse
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from mutation_outcome import read_junit  # noqa: E402

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


def _pytest(copy: Path, selection: str, env: dict, timeout: float, first_only: bool):
    """Run the selection on the mutated copy; ``(Outcome, seconds)``, or None on a timeout."""
    xml = copy / "mutant-junit.xml"
    xml.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--tb=long",
           f"--junitxml={xml}", *(["-x"] if first_only else []), *_tests(selection)]
    start = time.monotonic()
    try:
        subprocess.run(cmd, cwd=copy, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, time.monotonic() - start
    return read_junit(xml), time.monotonic() - start


def run_one(mutant: tuple, timeout: float, tests: str | None = None) -> tuple[str, float, str]:
    """``(outcome, seconds, note)`` for one mutant (``tests``: a selection instead of its own).

    The selection runs with ``-x`` first; when the first failure is a crash (not an assertion
    about behaviour, see ``mutation_outcome``) it runs again whole, so an assertion further on
    still counts.
    """
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
        outcome, seconds = _pytest(copy, selection, env, timeout, first_only=True)
        if outcome is not None and outcome.verdict == "crash":
            outcome, more = _pytest(copy, selection, env, timeout, first_only=False)
            seconds += more
        if outcome is None:
            return "timeout", seconds, f"no result in {timeout:.0f} s"
        return outcome.verdict, seconds, outcome.note()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ids", nargs="*", help="mutant ids (default: all)")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--tests", help="run these test files instead (space separated)")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    parser.add_argument("--round", type=int, choices=(4, 5), default=4,
                        help="4: scripts/mutants.py (issue #34); 5: scripts/mutants_round5.py")
    args = parser.parse_args()
    module = importlib.import_module("mutants" if args.round == 4 else "mutants_round5")
    equivalent = getattr(module, "EQUIVALENT", {})
    chosen = [m for m in module.MUTANTS if not args.ids or m[0] in args.ids]
    rows = []
    for m in chosen:
        outcome, seconds, note = run_one(m, args.timeout, args.tests)
        if m[0] in equivalent:
            if outcome == "survived":
                outcome, note = "equivalent", equivalent[m[0]]
            elif outcome == "caught":
                note = "LISTED AS EQUIVALENT BUT CAUGHT: " + note
        rows.append((m, outcome, seconds, note))
        print(f"{m[0]:5} {m[1]:10} {outcome:9} {seconds:6.1f}s  {m[6]}  {note}", flush=True)
    applicable = [r for r in rows if r[1] in ("caught", "survived", "crash")]
    caught = sum(r[1] == "caught" for r in applicable)
    crashes = sum(r[1] == "crash" for r in applicable)
    if args.markdown:
        print("\n| id | layer | file | bug | outcome |\n|---|---|---|---|---|")
        for m, outcome, _, _ in rows:
            print(f"| {m[0]} | {m[1]} | `{m[2]}` | {m[6]} | {outcome} |")
    skipped = len(rows) - len(applicable)
    print(f"\ncaught {caught}/{len(applicable)} non-equivalent applicable "
          f"({100 * caught / max(len(applicable), 1):.0f}%; {crashes} crash only, not counted "
          f"as caught; {skipped} equivalent, n/a or timed out; {len(rows)} mutants)")


if __name__ == "__main__":
    main()
