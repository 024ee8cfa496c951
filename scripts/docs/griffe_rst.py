"""Griffe extension for the site's reference: trainop's docstrings are written for reading in
the source (reST roles, ``>>>`` examples, ``Example::`` blocks, ``.. math::``); rendered as
Markdown they become inline code, code blocks and display math instead of stray punctuation
and broken links."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import griffe

_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|obj|exc):`~?([^`]+)`")


def _math(lines: list[str], i: int, out: list[str]) -> int:
    """A reST ``.. math::`` directive at ``lines[i]`` as a display-math block (``$$``, which
    pymdownx.arithmatex hands to MathJax); returns the index after the directive."""
    line = lines[i]
    indent = line[:len(line) - len(line.lstrip())]
    body = [line.split("::", 1)[1].strip()] if line.split("::", 1)[1].strip() else []
    i += 1
    while i < len(lines) and (not lines[i].strip() or
                              len(lines[i]) - len(lines[i].lstrip()) > len(indent)):
        body.append(lines[i].strip())
        i += 1
    while body and not body[-1]:
        body.pop()
    out += [f"{indent}$$", *(f"{indent}{b}" for b in body if b), f"{indent}$$", ""]
    return i


def markdown(text: str) -> str:
    text = _ROLE.sub(r"`\1`", text)
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith(".. math::"):
            i = _math(lines, i, out)
            continue
        if line.lstrip().startswith(">>>"):
            indent = line[:len(line) - len(line.lstrip())]
            out.append(f"{indent}```pycon")
            while i < len(lines) and lines[i].strip():
                out.append(lines[i])
                i += 1
            out.append(f"{indent}```")
            continue
        out.append(line[:-2] + ":" if line.endswith("::") and not line.endswith(":::") else line)
        i += 1
    return "\n".join(out)


@functools.cache
def _lines(path: str) -> tuple[str, ...]:
    return tuple(Path(path).read_text(encoding="utf-8").splitlines())


def comment_doc(path: str, lineno: int) -> str | None:
    """The ``#:`` comment lines right above line ``lineno`` (Sphinx's attribute docs)."""
    lines, found = _lines(path), []
    k = lineno - 2
    while k >= 0 and lines[k].lstrip().startswith("#:"):
        found.insert(0, lines[k].lstrip()[2:].strip())
        k -= 1
    return " ".join(found) or None


class ReSTToMarkdown(griffe.Extension):
    """Rewrites each docstring once, when griffe loads the object; an attribute documented by a
    ``#:`` comment above it gets that comment as its docstring."""

    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is None and obj.is_attribute and obj.lineno and obj.filepath:
            text = comment_doc(str(obj.filepath), obj.lineno)
            if text:
                obj.docstring = griffe.Docstring(text, lineno=obj.lineno, parent=obj)
        if obj.docstring is not None:
            obj.docstring.value = markdown(obj.docstring.value)
