"""Run ``trainop.load_recipe`` and ``trainop check-config`` (and, with ``--train``, a short
``trainop train``) over every recipe file under the given directories, and tabulate the results.

Usage (the corpora are not part of the repository; fetch them yourself, e.g. OpenSeq2Seq's
``example_configs/``, RETURNN's ``demos/`` and ``tests/``, ``rwth-i6/returnn-experiments``)::

    python scripts/recipe_corpus.py /path/to/OpenSeq2Seq/example_configs /path/to/returnn/demos
    python scripts/recipe_corpus.py --train --replay-coverage --json results.json DIR...

Files: ``*.py`` under a directory holding OpenSeq2Seq configs, ``*.config`` (RETURNN), and
``*.yaml``/``*.yml``/``*.json`` with ``format: trainop``; ``--pattern`` adds others.

Each file is loaded by a worker process (this script's worker mode) under a timeout
(``--timeout``, default 60 s per file) and an address-space cap (``--memory-gb``, default 8); a
worker that times out or dies is counted as a crash for that file and replaced. The worker also
runs ``check-config`` through the command's own entry point (``trainop.__main__.main``, output
captured; an exception escaping it is a traceback; a ``SystemExit``'s code is the exit status).
``--train`` runs ``trainop train FILE --steps 2 --no-progress --out SCRATCH`` the same way, in
the worker, on every resolved recipe (TensorBoard files and dashboard written, as users get
them; the output folder is removed afterwards). ``--subprocess-commands`` runs both as
``python -m trainop ...`` instead (slower: one interpreter per file and command).

``--replay-coverage``: per resolved recipe, whether ``trainop train FILE --compare-tf`` would
replay it: the recipe is built as ``trainop train`` builds it
(``trainop.interfaces.train.cli.build_run``, the command's defaults) and given to the replay
plan (``trainop.interfaces.train.replay_plan.tf_plan``, no TensorFlow needed): replayable (by
front and TF class), refused (by reason), or not built (the recipe's one-line error, by reason).

A file counts as

- **resolved**: loaded, and no training option needs code (``recipe.pending()`` is empty);
- **needing code**: loaded, with training options listed in ``recipe.unresolved`` (by reason);
- **failing**: one clear error (``trainop.RecipeError``, ``ValueError``, ``TypeError``), by
  reason; also a file whose only unresolved training options use a name it never defines
  (``recipe.unresolved``'s "undefined name"): upstream stops at it with a ``NameError``;
- **crash**: any other exception, a timeout, a killed worker, or a traceback printed by
  ``check-config``/``train``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

SUFFIXES = (".config", ".yaml", ".yml", ".json")
#: ``trainop train``'s options in ``--train`` (with ``--out`` in the scratch folder).
TRAIN_ARGS = ("--steps", "2", "--no-progress")


def find_files(roots: list[str], patterns: list[str]) -> list[str]:
    """The recipe files under ``roots`` (sorted): ``*.config``, trainop YAML/JSON, and ``*.py``
    files that look like OpenSeq2Seq or RETURNN configs (``base_params`` or a RETURNN key)."""
    out = []
    for root in roots:
        if os.path.isfile(root):
            out.append(root)
            continue
        for folder, _, names in os.walk(root):
            for name in names:
                path = os.path.join(folder, name)
                named = name.endswith(SUFFIXES) or any(re.fullmatch(p, name) for p in patterns)
                if named or (name.endswith(".py") and os.path.isfile(path)
                             and _looks_like_config(path)):  # (a FIFO would block)
                    out.append(path)
    return sorted(out)


def _looks_like_config(path: str) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read(200_000)
    except OSError:
        return False
    return "base_params" in text or text.startswith("#!rnn.py")


def reason_of(message: str) -> str:
    """A message reduced to its kind: paths, quoted names and numbers replaced."""
    text = message.splitlines()[0] if message else ""
    text = re.sub(r"(/[^\s:'\"]+)+(:\d+)?", "<file>", text)
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", text)
    text = re.sub(r"\b\d[\d.e+-]*\b", "N", text)
    return text[:110]


# ----------------------------------------------------------------------------- worker side
def _worker() -> None:
    """Read paths from stdin; for each, print one JSON line with the load result."""
    import resource

    cap = int(os.environ.get("RECIPE_CORPUS_MEMORY", 8 << 30))
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    import warnings

    import trainop

    warnings.simplefilter("ignore")
    for line in sys.stdin:
        request = json.loads(line)
        path, scratch, task = request["path"], request["scratch"], request["task"]
        if task == "load":
            answer = _load_one(trainop, path)
        elif task == "check-config":
            answer = _in_process(["check-config", path, "--no-plot"], scratch)
        elif task == "train":
            out = os.path.join(scratch, "train-run")
            answer = _in_process(["train", path, *TRAIN_ARGS, "--out", out], scratch)
            shutil.rmtree(out, ignore_errors=True)
        else:
            answer = _replay_one(path, scratch)
        print(json.dumps(answer), flush=True)


def _in_process(argv: list[str], scratch: str) -> dict:
    """``trainop ARGV`` through the command's entry point (``trainop.__main__.main``), in
    ``scratch``, output captured: the exit status (a ``SystemExit``'s code), whether a traceback
    was printed (an exception escaping the command is one), stderr's last line, the time."""
    import contextlib
    import io
    import traceback

    from trainop.__main__ import main

    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    os.chdir(scratch)
    start = time.perf_counter()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(argv)
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
    except Exception:  # noqa: BLE001 - a traceback is what this counts
        err.write(traceback.format_exc())
        status = 1
    finally:
        os.chdir(cwd)
    text = err.getvalue()
    return {"status": status, "traceback": "Traceback (most recent call last)" in text,
            "stderr": text.strip().splitlines()[-1][:300] if text.strip() else "",
            "seconds": round(time.perf_counter() - start, 3)}


def _replay_one(path: str, scratch: str) -> dict:
    """Whether ``trainop train PATH --compare-tf`` would replay the recipe: built as the command
    builds it (its defaults), then its replay plan (no TensorFlow)."""
    import argparse
    import contextlib
    import io
    import traceback

    from trainop.interfaces.train import cli
    from trainop.interfaces.train.replay_plan import tf_plan

    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers())
    args = parser.parse_args(["train", path, "--compare-tf",
                              "--out", os.path.join(scratch, "replay-run")])
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            try:
                prepared = cli.build_run(args)
            except Exception as exc:  # noqa: BLE001 - the command's own split, below
                if not cli.is_recipe_error(exc):
                    raise
                return {"status": "not built", "reason": " ".join(str(exc).split())[:300]}
            finally:
                shutil.rmtree(args.out, ignore_errors=True)
            try:
                plan = tf_plan(prepared.built, prepared.regularizer)
            except ValueError as exc:
                return {"status": "refused", "reason": " ".join(str(exc).split())[:300]}
    except Exception as exc:  # noqa: BLE001 - the crashes are what this counts
        return {"status": "crash", "reason": f"{type(exc).__name__}: {exc}"[:300],
                "traceback": traceback.format_exc()[-2000:]}
    return {"status": "replayable", "plan": f"{plan.front} {plan.tf_class}"}


def _load_one(trainop, path: str) -> dict:
    import traceback

    start = time.perf_counter()
    try:
        recipe = trainop.load_recipe(path)
    except (ValueError, TypeError) as exc:
        return {"status": "failing", "error": type(exc).__name__, "message": str(exc)[:500],
                "seconds": time.perf_counter() - start}
    except Exception as exc:  # noqa: BLE001 - the crashes are what this counts
        return {"status": "crash", "error": type(exc).__name__, "message": str(exc)[:500],
                "traceback": traceback.format_exc()[-2000:]}
    half = _unresolved_inside(recipe.options)
    if half:
        return {"status": "crash", "error": "half-resolved",
                "message": f"an Unresolved value inside recipe.options at {half}"}
    pending = {key: where.reason for key, where in recipe.pending().items()}
    if pending and all(r.startswith("undefined name ") for r in pending.values()):
        # A name the file never defines: Python, running the file for RETURNN or OpenSeq2Seq,
        # stops there with a NameError too; the file is broken upstream, not needing code.
        names = ", ".join(sorted(set(pending.values())))
        return {"status": "failing", "error": "NameError",
                "message": f"{names} (upstream stops there with a NameError too)",
                "seconds": time.perf_counter() - start}
    return {"status": "needs code" if pending else "resolved", "format": recipe.format,
            "pending": pending, "unresolved": len(recipe.unresolved),
            "seconds": time.perf_counter() - start}


def _unresolved_inside(value, path: str = "options") -> str | None:
    """The path of an ``Unresolved`` inside ``value`` (there must be none)."""
    from trainop.configs import Unresolved

    if isinstance(value, Unresolved):
        return path
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(
        value, list | tuple) else ()
    for key, item in items:
        found = _unresolved_inside(item, f"{path}[{key!r}]")
        if found:
            return found
    return None


class Worker:
    """A worker process fed one path at a time, replaced after a timeout or a death."""

    def __init__(self, memory_gb: float) -> None:
        self.env = {**os.environ, "RECIPE_CORPUS_MEMORY": str(int(memory_gb * (1 << 30)))}
        self.proc: subprocess.Popen | None = None

    def ask(self, task: str, path: str, timeout: float, scratch: str) -> dict | None:
        """The worker's answer to ``task`` (``load``, ``check-config``, ``train``, ``replay``)
        for ``path``, or None when it gave none within ``timeout`` (+ 30 s for a new worker's
        imports) or died: the worker is then replaced."""
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen([sys.executable, __file__, "--worker"],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, text=True, env=self.env)
            timeout += 30
        request = {"task": task, "path": path, "scratch": scratch}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        result: list[str] = []

        import threading

        reader = threading.Thread(target=lambda: result.append(self.proc.stdout.readline()))
        reader.start()
        reader.join(timeout)
        if reader.is_alive() or not result or not result[0]:
            self.close()
            reader.join()
            return None
        return json.loads(result[0])

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


#: A command's result when the worker gave no answer (timeout, or killed: a crash).
NO_ANSWER = {"status": 124, "traceback": False, "stderr": "timeout or killed worker"}


def _command(args: list[str], timeout: float, cwd: str) -> dict:
    """``python -m trainop ARGS`` in a subprocess (``--subprocess-commands``)."""
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-m", "trainop", *args], capture_output=True,
                              text=True, timeout=timeout, cwd=cwd)
    except subprocess.TimeoutExpired:
        return dict(NO_ANSWER, stderr="timeout")
    err = done.stderr
    return {"status": done.returncode, "traceback": "Traceback (most recent call last)" in err,
            "stderr": err.strip().splitlines()[-1][:300] if err.strip() else "",
            "seconds": round(time.perf_counter() - start, 3)}


def run_file(worker: Worker, path: str, args: argparse.Namespace, scratch: str) -> dict:
    """One file's entry: ``load`` and, as asked, ``check-config``, ``train``, ``replay``."""
    load = worker.ask("load", path, args.timeout, scratch)
    if load is None:
        load = {"status": "crash", "error": "timeout or killed",
                "message": f"no answer within {args.timeout:.0f} s or the worker died"}
    entry = {"load": load}
    resolved = load["status"] == "resolved"
    commands = {"check-config": (not args.no_check_config, ["check-config", path, "--no-plot"]),
                "train": (args.train and resolved,
                          ["train", path, *TRAIN_ARGS, "--out", os.path.join(scratch, "run")])}
    for name, (wanted, argv) in commands.items():
        if not wanted:
            continue
        if args.subprocess_commands:
            entry[name] = _command(argv, args.timeout, scratch)
            shutil.rmtree(os.path.join(scratch, "run"), ignore_errors=True)
        else:
            entry[name] = worker.ask(name, path, args.timeout, scratch) or dict(NO_ANSWER)
    if args.replay_coverage and resolved:
        entry["replay"] = worker.ask("replay", path, args.timeout, scratch) or {
            "status": "crash", "reason": "timeout or killed worker"}
    return entry


# ----------------------------------------------------------------------------- tables
def tabulate(results: dict[str, dict]) -> str:
    """The figures: load statuses, reasons, the commands' exit statuses, replay coverage."""
    statuses = collections.Counter(r["load"]["status"] for r in results.values())
    lines = [f"files: {len(results)}"]
    for status in ("resolved", "needs code", "failing", "crash"):
        lines.append(f"  {status}: {statuses.get(status, 0)}")
    by_format = collections.Counter(r["load"].get("format", "-") for r in results.values())
    lines.append("formats: " + ", ".join(f"{k} {v}" for k, v in sorted(by_format.items())))
    needs = collections.Counter()
    for r in results.values():
        for key, reason in r["load"].get("pending", {}).items():
            needs[(key, reason_of(reason))] += 1
    if needs:
        lines.append("needing code (training option: reason, files):")
        lines += [f"  {n:4d}  {key}: {reason}" for (key, reason), n in needs.most_common()]
    failing = collections.Counter(reason_of(r["load"]["message"]) for r in results.values()
                                  if r["load"]["status"] in ("failing", "crash"))
    if failing:
        lines.append("failing and crashes (reason, files):")
        lines += [f"  {n:4d}  {reason}" for reason, n in failing.most_common()]
    for name in ("check-config", "train"):
        runs = [r[name] for r in results.values() if name in r]
        if not runs:
            continue
        tracebacks = sum(r["traceback"] for r in runs)
        codes = collections.Counter(r["status"] for r in runs)
        seconds = sorted(r.get("seconds", 0.0) for r in runs)
        lines.append(f"{name}: {len(runs)} runs, exit status {dict(sorted(codes.items()))}, "
                     f"tracebacks {tracebacks}; {sum(seconds):.0f} s in all, median "
                     f"{seconds[len(seconds) // 2]:.2f} s, longest {seconds[-1]:.1f} s")
        errors = collections.Counter(reason_of(r["stderr"]) for r in runs if r["status"])
        lines += [f"  {n:4d}  {reason}" for reason, n in errors.most_common(15)]
    lines += _replay_table([r["replay"] for r in results.values() if "replay" in r])
    crashes = [p for p, r in results.items() if r["load"]["status"] == "crash"
               or any(r.get(k, {}).get("traceback") or r.get(k, {}).get("status") == 124
                      for k in ("check-config", "train"))
               or r.get("replay", {}).get("status") == "crash"]
    if crashes:
        lines.append("crashes and tracebacks:")
        lines += [f"  {p}" for p in crashes]
    return "\n".join(lines)


def _replay_table(replays: list[dict]) -> list[str]:
    """``--replay-coverage``'s lines: replayable of built, refused and not built by reason."""
    if not replays:
        return []
    counts = collections.Counter(r["status"] for r in replays)
    built = counts["replayable"] + counts["refused"]
    lines = [f"replay coverage (--compare-tf) of the {len(replays)} resolved recipes: "
             f"{counts['replayable']} of the {built} that build are replayable "
             f"({100 * counts['replayable'] / max(built, 1):.0f}%), {counts['refused']} "
             f"refused, {counts['not built']} not built, {counts['crash']} crashes"]
    for status, key, title in (("replayable", "plan", "replayable (front, TF class)"),
                               ("refused", "reason", "refused (reason)"),
                               ("not built", "reason", "not built (reason)"),
                               ("crash", "reason", "crashes")):
        found = collections.Counter(reason_of(r[key]) for r in replays
                                    if r["status"] == status)
        if found:
            lines.append(f"  {title}:")
            lines += [f"    {n:4d}  {reason}" for reason, n in found.most_common()]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("roots", nargs="+", help="directories (or files) holding recipes")
    parser.add_argument("--pattern", action="append", default=[],
                        help="a regular expression for further file names")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per file and run")
    parser.add_argument("--memory-gb", type=float, default=8.0, help="address-space cap")
    parser.add_argument("--no-check-config", action="store_true",
                        help="skip `trainop check-config` (load_recipe only)")
    parser.add_argument("--subprocess-commands", action="store_true",
                        help="run check-config and train as `python -m trainop` (one process "
                             "per file and command)")
    parser.add_argument("--train", action="store_true",
                        help="also run `trainop train --steps 2` on every resolved recipe")
    parser.add_argument("--replay-coverage", action="store_true",
                        help="also tell, per resolved recipe, whether `trainop train "
                             "--compare-tf` would replay it (no TensorFlow needed)")
    parser.add_argument("--json", default=None, help="write every file's result here")
    args = parser.parse_args(argv)
    files = find_files(args.roots, args.pattern)
    worker = Worker(args.memory_gb)
    results: dict[str, dict] = {}
    scratch = tempfile.mkdtemp(prefix="recipe_corpus_")
    try:
        for k, path in enumerate(files, 1):
            path = os.path.abspath(path)
            entry = results[path] = run_file(worker, path, args, scratch)
            print(f"[{k}/{len(files)}] {entry['load']['status']:10s} {path}", file=sys.stderr,
                  flush=True)
    finally:
        worker.close()
        shutil.rmtree(scratch, ignore_errors=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
    print(tabulate(results))
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        _worker()
    else:
        sys.exit(main())
