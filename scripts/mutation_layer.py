"""The mutmut settings of one layer, for ``scripts/mutation.sh``.

    python scripts/mutation_layer.py LAYER        # pyproject.toml with the layer's settings
    python scripts/mutation_layer.py --list       # the layers
    python scripts/mutation_layer.py --score DIR  # the score of a finished run in DIR

pyproject.toml holds the settings every layer shares (``[tool.mutmut]``) and, per layer, the
files to mutate and the tests to run (``[tool.trainop.mutation.LAYER]``). mutmut reads only
``[tool.mutmut]``; this prints pyproject.toml with that table completed for LAYER (its
``only_mutate`` and ``pytest_add_cli_args_test_selection``), for the copy mutmut runs in.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]


def layers(root: Path = ROOT) -> dict[str, dict]:
    data = tomllib.loads((root / "pyproject.toml").read_text("utf-8"))
    return data["tool"]["trainop"]["mutation"]


def _toml_list(items: list[str]) -> str:
    return "[" + ", ".join(json.dumps(x) for x in items) + "]"


def configured(layer: str, root: Path = ROOT) -> str:
    """pyproject.toml's text with ``[tool.mutmut]`` completed for ``layer``."""
    table = layers(root)
    if layer not in table:
        raise SystemExit(f"unknown layer {layer!r}; expected one of {sorted(table)}")
    text = (root / "pyproject.toml").read_text("utf-8")
    head = "[tool.mutmut]\n"
    if head not in text:
        raise SystemExit("pyproject.toml has no [tool.mutmut] table")
    extra = (f"only_mutate = {_toml_list(table[layer]['mutate'])}\n"
             f"pytest_add_cli_args_test_selection = {_toml_list(table[layer]['tests'])}\n")
    return text.replace(head, head + extra, 1)


def score(run_dir: Path) -> str:
    stats = json.loads((run_dir / "mutants" / "mutmut-cicd-stats.json").read_text())
    killed = stats.get("killed", 0)
    survived = stats.get("survived", 0)
    timeouts = stats.get("timeout", 0)
    suspicious = stats.get("suspicious", 0)
    untested = stats.get("no_tests", 0)  # a mutant no test reaches survives by definition
    judged = killed + survived + timeouts + suspicious + untested
    pct = 100.0 * (killed + timeouts) / judged if judged else 0.0
    return (f"killed {killed}, survived {survived}, timeout {timeouts}, suspicious {suspicious}, "
            f"no tests {untested}, skipped {stats.get('skipped', 0)}: "
            f"score {pct:.1f}% (killed + timeout of those run or reached by no test)")


def main(argv: list[str]) -> None:
    if argv[:1] == ["--list"]:
        print("\n".join(sorted(layers())))
    elif argv[:1] == ["--score"] and len(argv) == 2:
        print(score(Path(argv[1])))
    elif len(argv) == 1:
        sys.stdout.write(configured(argv[0]))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
