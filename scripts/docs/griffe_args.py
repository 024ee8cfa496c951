"""Griffe extension for the site's reference: one argument table row per constructor argument.

A class's ``Args:`` section is rebuilt in the order of its constructor's signature (the one
Python reports: ``inspect.signature`` of the class, which includes the keyword-only ``lr`` that
trainop's torch-style wrapper adds). A row the class does not write itself comes from the
nearest base class that writes it (``Optimizer`` documents ``params``, ``use_locking``,
``name``, ``implementation`` and ``lr`` once for every optimizer; ``LazyAdamOptimizer`` takes
Adam's rows). The ``implementation`` row names the implementations of the class at hand.

``rows`` and ``args_section`` are shared with tests/test_docs_args.py, which checks that every
public class ends with exactly one typed row per argument.
"""

from __future__ import annotations

import importlib
import inspect
import re

import griffe

_HEADERS = ("Args:", "Arguments:", "Parameters:")
_ROW = re.compile(r"^    (\*{0,2}\w[^:(]*?)(?: \(([^)]*)\))?:(?:\s|$)")


def args_section(text: str) -> tuple[int, int] | None:
    """The ``[start, end)`` line span of the docstring's ``Args:`` section (header included)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip() in _HEADERS and not line.startswith(" "):
            end = i + 1
            while end < len(lines) and (not lines[end].strip() or lines[end].startswith(" ")):
                end += 1
            while end > i + 1 and not lines[end - 1].strip():
                end -= 1
            return i, end
    return None


def rows(text: str) -> dict[str, str]:
    """The ``Args:`` rows of a docstring: argument name (as written) -> the row's lines."""
    span = args_section(text)
    if span is None:
        return {}
    found: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines()[span[0] + 1:span[1]]:
        match = _ROW.match(line)
        if match:
            current = match.group(1).strip()
            found[current] = [line]
        elif current is not None:
            found[current].append(line)
    return {name: "\n".join(lines) for name, lines in found.items()}


def runtime_class(obj: griffe.Class):
    try:
        value = importlib.import_module(obj.module.path)
        for part in obj.path[len(obj.module.path) + 1:].split("."):
            value = getattr(value, part)
    except (ImportError, AttributeError):
        return None
    return value if inspect.isclass(value) else None


def signature_names(cls) -> list[str]:
    """The constructor's arguments as a caller passes them (``*args``/``**kwargs`` left out)."""
    try:
        sig = inspect.signature(cls)
    except (TypeError, ValueError):
        return []
    return [p.name for p in sig.parameters.values()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def classes(module: griffe.Module):
    for member in module.members.values():
        if member.is_alias:
            continue
        if member.is_module:
            yield from classes(member)
        elif member.is_class:
            yield member


def _implementation_note(cls) -> str:
    names = getattr(cls, "IMPLEMENTATIONS", None)
    if not names:
        return ""
    return ("\n        This class offers: " + ", ".join(f"`{n}`" for n in names)
            + ", and `triton` (CUDA, with Triton installed).")


class ArgsTable(griffe.Extension):
    """Rebuilds each class's ``Args:`` section once the package is loaded (see module doc)."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs) -> None:
        own = {cls.path: cls for cls in classes(pkg)}
        written = {path: rows(cls.docstring.value) if cls.docstring else {}
                   for path, cls in own.items()}  # read them all before rewriting any
        for cls in own.values():
            runtime = runtime_class(cls)
            if runtime is None or cls.docstring is None:
                continue
            names = signature_names(runtime)
            if not names:
                continue
            self._add_runtime_parameters(cls, runtime)
            found: dict[str, str] = {}
            for base in runtime.__mro__:
                for name, row in written.get(f"{base.__module__}.{base.__qualname__}",
                                             {}).items():
                    found.setdefault(name, row)
            table = [found[name] + (_implementation_note(runtime) if name == "implementation"
                                    else "") for name in names if name in found]
            if table:
                cls.docstring.value = _replace_args(cls.docstring.value, table)

    @staticmethod
    def _add_runtime_parameters(cls: griffe.Class, runtime) -> None:
        """Arguments Python's signature has and the source's ``__init__`` does not (``lr``),
        added as keyword-only so the rendered signature is the one callers use."""
        init = cls.all_members.get("__init__")
        if init is None or init.is_alias or not init.is_function:
            return
        sig = inspect.signature(runtime)
        for p in sig.parameters.values():
            if p.name not in init.parameters and p.kind == p.KEYWORD_ONLY:
                default = None if p.default is p.empty else repr(p.default)
                init.parameters.add(griffe.Parameter(
                    p.name, kind=griffe.ParameterKind.keyword_only, default=default))


def _replace_args(text: str, table: list[str]) -> str:
    lines = text.splitlines()
    section = ["Args:", *"\n".join(table).splitlines()]
    span = args_section(text)
    if span is not None:
        lines[span[0]:span[1]] = section
        return "\n".join(lines)
    for i, line in enumerate(lines):  # before the first section after the summary
        if i and re.fullmatch(r"[A-Z][\w ]*:", line):
            return "\n".join([*lines[:i], *section, "", *lines[i:]])
    return "\n".join([*lines, "", *section])
