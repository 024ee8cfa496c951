"""MkDocs hook: the pages name each other as inline code (`docs/training.md`, `BENCHMARKS.md`),
which reads well on GitHub; on the site such a name becomes a link to the page."""

from __future__ import annotations

import re

_NAME = re.compile(r"(?<!\[)`(?:docs/)?([\w-]+\.md)`(?!\])")


def on_page_markdown(markdown, page, config, files, **kwargs):
    pages = {f.src_uri.rsplit("/", 1)[-1]: f.src_uri for f in files.documentation_pages()}
    pages["BENCHMARKS.md"] = "benchmarks.md"
    depth = page.file.src_uri.count("/")

    def link(match: re.Match) -> str:
        target = pages.get(match.group(1))
        if target is None:
            return match.group(0)
        return f"[{match.group(0)}]({'../' * depth}{target})"

    parts = re.split(r"(```.*?```)", markdown, flags=re.S)  # leave code blocks alone
    return "".join(p if p.startswith("```") else _NAME.sub(link, p) for p in parts)
