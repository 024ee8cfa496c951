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
import contextlib
import importlib
import importlib.util
import os
import shutil
import signal
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
    # ---- round 5 (scripts/mutants_round5.py): the test files of each layer; "-k" leaves out
    # slow tests that cannot see the layer's decisions (docs/mutation_audit.md, round 5)
    "TL": ["tests/test_triton_interpreter.py", "tests/test_native.py",
           "tests/test_native_metadata.py", "tests/test_errors_hardening.py", "tests/test_flat.py",
           "tests/test_step_reads.py",
           "-k", "not dense_matches_reference and not zero_nan_inf and not traffic_floor and not "
                 "compiles_for_the_gpu and not no_host_read and not reads_nothing_on_the_host and "
                 "not mixed_precision_update_reads and not in_a_subprocess and not build_into "
                 "and not switched_off and not failed_build"],
    "BT": ["tests/test_torch_schedulers_momentum.py",
           "tests/test_torch_schedulers_over_schedules.py", "tests/test_errors_torch_style.py",
           "tests/test_errors_checkpoints.py", "tests/test_errors_torch_optim.py",
           "tests/test_torch_optim_checkpoints.py", "tests/test_property_checkpoints.py",
           "tests/test_contract_lr.py",
           "-k", "not fork_after and not lr_zero_leaves and not one_element_tensor_lr"],
    "HB": ["tests/test_torch_habits.py", "tests/test_policy_learning_rate.py",
           "tests/test_errors_torch_optim.py", "tests/test_torch_schedulers_over_schedules.py",
           "tests/test_torch_schedulers_momentum.py", "tests/test_errors_torch_style.py",
           "tests/test_tensorflow_import.py",
           "-k", "not step_without_parameters"],
    "RV": ["tests/test_recipe_values.py", "tests/test_errors_recipes.py", "tests/test_recipes.py"],
    "OR": ["tests/test_replay_oracle.py", "tests/test_train_replay.py", "tests/test_novograd.py",
           "tests/test_recipes_upstream_modes.py"],
    "EG": ["tests/test_returnn_engine_amp.py", "tests/test_errors_returnn_engine.py",
           "tests/test_pin_returnn.py", "tests/test_errors_updater.py"],
    "CR": ["tests/test_tf_checkpoint_reading.py", "tests/test_errors_tf_files.py",
           "tests/test_errors_tf_checkpoints.py", "tests/test_pin_tf_checkpoints.py",
           "tests/test_tf_checkpoints.py", "tests/test_tf_checkpoint_switch.py"],
    "EB": ["tests/test_pin_configs.py", "tests/test_errors_configs.py",
           "tests/test_configs_idioms.py"],
}
_IGNORE = shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.pyc", ".pytest_cache",
                                 ".hypothesis", "build", "dist")


def _tests(selection: str) -> list[str]:
    """The pytest arguments of a selection: its groups' files that exist (a group may also hold
    options, ``-k`` and its expression, kept as they are) and any other part as it is."""
    args = []
    for part in selection.split():
        if part not in GROUPS:
            args.append(part)
            continue
        args += [f for f in GROUPS[part]
                 if not f.startswith("tests/") or (ROOT / f.split("::")[0]).exists()]
    return args


def _pytest(copy: Path, selection: str, env: dict, timeout: float, first_only: bool):
    """Run the selection on the mutated copy; ``(Outcome, seconds)``, or None on a timeout."""
    xml = copy / "mutant-junit.xml"
    xml.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--tb=long",
           f"--junitxml={xml}", *(["-x"] if first_only else []), *_tests(selection)]
    start = time.monotonic()
    if _PRELOADED:
        if not _forked_pytest(copy, cmd[3:], env, timeout):
            return None, time.monotonic() - start
        return read_junit(xml), time.monotonic() - start
    try:
        subprocess.run(cmd, cwd=copy, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, time.monotonic() - start
    return read_junit(xml), time.monotonic() - start


#: ``--fork``: modules imported once in this process (none of them trainop's), so that each
#: run is a fork that imports only the mutated copy's trainop and the tests.
_PRELOADED: list[str] = []


def preload(names: list[str]) -> None:
    """Import ``names`` here (Triton before TensorFlow, as the tests' conftest orders them)."""
    for name in names:
        importlib.import_module(name)
        _PRELOADED.append(name)


def _forked_pytest(copy: Path, args: list[str], env: dict, timeout: float) -> bool:
    """``pytest args`` in a forked child (its own session, output to a file) in ``copy`` with
    ``env``; False when it ran past ``timeout`` (the child's process group is killed)."""
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 1
        try:
            os.setsid()
            fd = os.open(copy / "mutant-pytest.log", os.O_WRONLY | os.O_CREAT, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.chdir(copy)
            os.environ.clear()
            os.environ.update(env)
            sys.path[:] = [str(copy / "src"), *[q for q in sys.path if q != str(ROOT / "scripts")]]
            import pytest
            code = int(pytest.main(args))
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return True
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return False


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
    parser.add_argument("--fork", action="store_true",
                        help="import torch, numpy, pytest, hypothesis and triton once here and "
                             "fork each run from this process instead of starting a new "
                             "interpreter: the same tests on the same mutated copy, without "
                             "importing torch again for every run")
    args = parser.parse_args()
    if args.fork:
        preload([m for m in ("torch", "numpy", "pytest", "hypothesis", "triton")
                 if importlib.util.find_spec(m) is not None])
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
