"""The files the site's generators write at build time (scripts/docs/gen_*.py), relative to
docs/: pages link to them although they are not in the repository
(tests/test_docs_self_contained.py accepts links to these)."""

from public_api import PUBLIC_MODULES

GENERATED = frozenset({
    "images/policies.png", "images/dashboard.png", "images/deviation.png",
    "images/bench-headline.png", "images/bench-train-step.png", "images/layers.svg",
    "benchmarks.md", "reference/index.md", "reference/cli.md",
    *(f"reference/{page}.md" for _, page, _ in PUBLIC_MODULES),
})
