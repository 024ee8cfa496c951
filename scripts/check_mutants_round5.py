"""Check the round-5 mutants (``scripts/mutants_round5.py``) against a repository root.

    python scripts/check_mutants_round5.py . [--extra]

For every mutant: its file exists under ``<root>/src/trainop/``, the original snippet occurs
exactly once, the replacement differs from it, the mutated text differs from the original
and compiles (``compile(..., 'exec')``, as py_compile does, nothing written). Also: ids are
unique, every tuple has 7 fields, groups are the known layer keys. Prints one line per
problem and a count per layer; exit status 1 when any check fails. No test is run.
"""
from __future__ import annotations

import argparse
import collections
import importlib.util
import sys
from pathlib import Path

GROUPS = {"TL", "BT", "HB", "RV", "OR", "EG", "CR", "EB"}


def load(path: Path):
    spec = importlib.util.spec_from_file_location("mutants_round5", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check(root: Path, mutants: list[tuple]) -> list[str]:
    problems = []
    ids = collections.Counter(m[0] for m in mutants)
    problems += [f"{mid}: id used {n} times" for mid, n in ids.items() if n > 1]
    for m in mutants:
        if len(m) != 7:
            problems.append(f"{m[0]}: {len(m)} fields, expected 7")
            continue
        mid, _layer, rel, original, replacement, group, what = m
        if group not in GROUPS:
            problems.append(f"{mid}: unknown group {group!r}")
        if not what:
            problems.append(f"{mid}: no description")
        target = root / "src" / "trainop" / rel
        if not target.is_file():
            problems.append(f"{mid}: {rel} not found")
            continue
        text = target.read_text()
        count = text.count(original)
        if count != 1:
            problems.append(f"{mid}: snippet found {count} times in {rel}")
            continue
        if original == replacement:
            problems.append(f"{mid}: replacement equals the original")
            continue
        mutated = text.replace(original, replacement, 1)
        if mutated == text:
            problems.append(f"{mid}: mutation changes nothing")
            continue
        try:
            compile(mutated, str(target), "exec")
        except SyntaxError as exc:
            problems.append(f"{mid}: mutated {rel} does not compile: {exc}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("root", type=Path, help="repository root (with src/trainop)")
    parser.add_argument("--mutants", type=Path,
                        default=Path(__file__).resolve().parent / "mutants_round5.py")
    args = parser.parse_args()
    module = load(args.mutants)
    failed = False
    for name in ("MUTANTS_ROUND5", "MUTANTS_ROUND5_EXTRA"):
        mutants = getattr(module, name, [])
        problems = check(args.root, mutants)
        per = collections.Counter(m[5] for m in mutants)
        print(f"{name}: {len(mutants)} mutants, {len(problems)} problem(s); per group: "
              + ", ".join(f"{g} {per[g]}" for g in sorted(per)))
        for p in problems:
            print("  " + p)
        failed = failed or bool(problems)
    all_ids = [m[0] for n in ("MUTANTS_ROUND5", "MUTANTS_ROUND5_EXTRA")
               for m in getattr(module, n, [])]
    dup = [i for i, n in collections.Counter(all_ids).items() if n > 1]
    if dup:
        print(f"ids shared between the lists: {dup}")
        failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
