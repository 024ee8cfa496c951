"""Loading a config file by its kind: YAML, JSON or Python (parsed, never executed)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any

from trainop.configs.pyconfig import PyConfig, evaluate_python_config
from trainop.configs.returnn_text import parse_returnn_text, returnn_text_kind
from trainop.contract.validation import describe

__all__ = ["load_config"]

YAML_SUFFIXES = (".yaml", ".yml")


def load_config(path: str | os.PathLike,
                names: Mapping[str, Any] | Callable[[str], Any] | None = None
                ) -> tuple[str, dict[str, Any], PyConfig | None]:
    """``(kind, values, pyconfig)`` of the file at ``path``: kind ``"yaml"``, ``"json"`` or,
    for any other suffix (e.g. RETURNN's ``.config``), ``"python"``, or RETURNN's non-Python
    formats ``"returnn-json"`` (the text starts with ``{``) and ``"returnn-lines"`` (``key
    value`` lines; see ``trainop.configs.returnn_text``); for Python configs ``pyconfig`` has
    the unresolved entries (``values`` holds only what was evaluated).

    YAML is read with PyYAML's ``safe_load``; JSON with ``json``; both must hold a mapping.
    """
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"Expected `path` to be a path, got {describe(path)}")
    path = os.fspath(path)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    suffix = os.path.splitext(path)[1].lower()
    if suffix in YAML_SUFFIXES or suffix == ".json":
        if suffix == ".json":
            kind, data = "json", json.loads(text)
        else:
            try:
                import yaml
            except ImportError:  # pragma: no cover - PyYAML is a dependency
                raise ValueError("Expected PyYAML to read YAML configs (pip install pyyaml)") \
                    from None
            kind, data = "yaml", yaml.safe_load(text)
        if not isinstance(data, dict):
            raise ValueError(f"Expected {path} to hold a mapping of options, got "
                             f"{describe(data)}")
        return kind, data, None
    kind = returnn_text_kind(text, path)
    if kind != "python":
        return f"returnn-{kind}", parse_returnn_text(text, path), None
    parsed = evaluate_python_config(text, filename=path, names=names)
    values = {k: v for k, v in parsed.values.items() if k not in parsed.unresolved}
    return "python", values, parsed
