"""The heaviest test files first (tests/slow_first.txt), for pytest-xdist's ``--dist loadfile``.

``scripts/test.sh`` runs ``--no-loadscope-reorder``, so the workers take the files in the
collection's order; this module sorts the collected items by file, the measured heaviest files
first (longest first: a heavy file never starts while the other worker has nothing left), the
others after them in their own order. Within a file the order is unchanged.
"""
from __future__ import annotations

from pathlib import Path

LIST = Path(__file__).resolve().parent / "slow_first.txt"


def seconds_by_file(text: str) -> dict[str, float]:
    """``name seconds`` lines (``#`` comments) -> ``{name: seconds}``."""
    out = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, seconds = line.split()
            out[name] = float(seconds)
    return out


def heaviest_first(items: list) -> None:
    """Sort pytest's collected ``items`` in place: by the file's listed seconds, descending
    (files not listed: 0, in collection order); stable, so a file's tests keep their order."""
    seconds = seconds_by_file(LIST.read_text()) if LIST.exists() else {}
    items.sort(key=lambda item: -seconds.get(item.path.name, 0.0))
