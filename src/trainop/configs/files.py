"""Loading a config file by its kind: YAML, JSON or Python (parsed, never executed).

Every problem with the file itself is a ``trainop.RecipeError`` (``configs.errors``): the path
is read as a bounded regular file (``configs.reading``), YAML and JSON as bounded data
(``configs.structured``), Python by the config evaluator (``configs.pyconfig``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from trainop.configs.errors import RecipeError
from trainop.configs.pyconfig import PyConfig, evaluate_python_config
from trainop.configs.reading import read_text
from trainop.configs.returnn_text import parse_returnn_text, returnn_text_kind
from trainop.configs.structured import load_json, load_yaml
from trainop.contract.validation import describe

__all__ = ["load_config", "read_structured"]

YAML_SUFFIXES = (".yaml", ".yml")


def read_structured(path: str) -> tuple[str, dict[str, Any]]:
    """``(kind, mapping)`` of a ``.yaml``/``.yml``/``.json`` file; ``RecipeError`` for a file
    that is not a bounded mapping."""
    text = read_text(path)
    if path.lower().endswith(".json"):
        kind, data = "json", load_json(text, path)
    else:
        kind, data = "yaml", load_yaml(text, path)
    if not isinstance(data, dict):
        raise RecipeError(path, None, f"expected a mapping of options, got "
                                      f"{describe(data)}")
    return kind, data


def load_config(path: str | os.PathLike,
                names: Mapping[str, Any] | Callable[[str], Any] | None = None
                ) -> tuple[str, dict[str, Any], PyConfig | None]:
    """``(kind, values, pyconfig)`` of the file at ``path``: kind ``"yaml"``, ``"json"`` or,
    for any other suffix (e.g. RETURNN's ``.config``), ``"python"``, or RETURNN's non-Python
    formats ``"returnn-json"`` (the text starts with ``{``) and ``"returnn-lines"`` (``key
    value`` lines; see ``trainop.configs.returnn_text``); for Python configs ``pyconfig`` has
    the unresolved entries (``values`` holds only what was evaluated).

    YAML is read with PyYAML's safe loader; JSON with ``json``; both must hold a mapping.

    Raises:
        RecipeError: the file cannot be read as data (see ``trainop.configs.errors``).
    """
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"Expected `path` to be a path, got {describe(path)}")
    path = os.fspath(path)
    suffix = os.path.splitext(path)[1].lower()
    if suffix in YAML_SUFFIXES or suffix == ".json":
        kind, data = read_structured(path)
        return kind, data, None
    text = read_text(path)
    kind = returnn_text_kind(text, path)
    if kind != "python":
        return f"returnn-{kind}", parse_returnn_text(text, path), None
    parsed = evaluate_python_config(text, filename=path, names=names, file=path)
    values = {k: v for k, v in parsed.values.items() if k not in parsed.unresolved}
    return "python", values, parsed
