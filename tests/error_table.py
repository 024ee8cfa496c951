"""The shape of an error table (as ``test_errors.py``): rows and the check of one row."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import pytest


class Row(NamedTuple):
    id: str
    call: Callable[[], object]
    exc: type[Exception]
    match: str


def ids(rows: list[Row]) -> list[str]:
    names = [row.id for row in rows]
    assert len(names) == len(set(names)), "error table ids must be unique"
    return names


def load_row(name: str, build: Callable[[], tuple], exc: type[Exception], match: str) -> Row:
    """A row that loads a checkpoint: ``build()`` gives ``(object, its state_dict)``."""

    def call():
        obj, state_dict = build()
        obj.load_state_dict(state_dict)

    return Row(name, call, exc, match)


def check(row: Row) -> None:
    with pytest.raises(row.exc, match=row.match):
        row.call()
