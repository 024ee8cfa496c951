"""Build-time generator (mkdocs-gen-files): the site's pictures (see figures.py, layers.py)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import mkdocs_gen_files

sys.path.insert(0, str(Path(__file__).parent))
import figures  # noqa: E402
import layers  # noqa: E402

out = Path(tempfile.mkdtemp(prefix="trainop-docs-figures-"))
benchmarks = (figures.ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
drawn = [figures.policies(out), *figures.train_run(out)[:2], figures.parity(out),
         figures.bench_headline(out, benchmarks), figures.bench_train_step(out, benchmarks)]
for path in drawn:
    with mkdocs_gen_files.open(f"images/{path.name}", "wb") as f:
        f.write(path.read_bytes())
with mkdocs_gen_files.open("images/layers.svg", "w") as f:
    f.write(layers.svg(layers.read_layers()))
