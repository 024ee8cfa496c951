"""MkDocs hooks: the pages name each other as inline code (`docs/training.md`, `BENCHMARKS.md`),
which reads well on GitHub; on the site such a name becomes a link to the page. The footer
shows the version."""

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


def on_config(config, **kwargs):
    """Every page's footer names the version the site documents: the installed package's,
    which ``trainop.__version__`` also reports (the changelog is in the nav)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        shown = version("trainop")
    except PackageNotFoundError:
        shown = "(not installed)"
    config["copyright"] = f"trainop {shown} · Apache-2.0"
    return config
