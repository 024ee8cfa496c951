"""Griffe extension for the site's reference: trainop's docstrings are written for reading in
the source (reST roles, ``>>>`` examples, ``Example::`` blocks); rendered as Markdown they
become inline code and code blocks instead of stray punctuation and broken links."""

from __future__ import annotations

import re

import griffe

_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|obj|exc):`~?([^`]+)`")


def markdown(text: str) -> str:
    text = _ROLE.sub(r"`\1`", text)
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
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


class ReSTToMarkdown(griffe.Extension):
    """Rewrites each docstring once, when griffe loads the object."""

    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown(obj.docstring.value)
