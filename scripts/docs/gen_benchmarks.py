"""Build-time generator (mkdocs-gen-files): the benchmarks page, BENCHMARKS.md itself (kept at
the repository's root) under charts drawn from its own tables (figures.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import mkdocs_gen_files

sys.path.insert(0, str(Path(__file__).parent))
from figures import ROOT  # noqa: E402

text = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
title, _, rest = text.partition("\n")
charts = ("\n\n![The headline workloads: trainop's step time against the best peer's]"
          "(images/bench-headline.png)\n\n"
          "![The training step: torch's recipe against trainop.optimize_loss]"
          "(images/bench-train-step.png)\n\n"
          "The charts are drawn at build time from the tables below (the headline table and the "
          "training-step table), so they show what this page records.\n")
with mkdocs_gen_files.open("benchmarks.md", "w") as f:
    f.write(title + charts + rest)
mkdocs_gen_files.set_edit_path("benchmarks.md", "../BENCHMARKS.md")
