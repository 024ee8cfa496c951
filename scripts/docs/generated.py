"""The files the site's generators write at build time (scripts/docs/gen_*.py), relative to
docs/: pages link to them although they are not in the repository
(tests/test_docs_self_contained.py accepts links to these)."""

from pathlib import Path

from public_api import PUBLIC_MODULES

_EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

GENERATED = frozenset({
    "images/policies.png", "images/dashboard.png", "images/deviation.png",
    "images/bench-headline.png", "images/bench-train-step.png", "images/layers.svg",
    "images/parity.png",
    "benchmarks.md", "reference/index.md", "reference/cli.md", "examples.md", "changelog.md",
    "javascripts/mathjax/tex-svg.js", "javascripts/mathjax/LICENSE",
    *(f"reference/{page}.md" for _, page, _ in PUBLIC_MODULES),
    # the gallery's learning-rate plots, one per recipe (gen_gallery.py)
    *(f"images/gallery-{p.stem}.png" for p in _EXAMPLES.iterdir()
      if p.is_file() and 'if __name__ == "__main__":' not in p.read_text(encoding="utf-8")),
})
