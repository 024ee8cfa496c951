"""Build-time generator (mkdocs-gen-files): the changelog page, CHANGELOG.md itself (kept at
the repository's root, in Keep a Changelog's format)."""

from __future__ import annotations

from pathlib import Path

import mkdocs_gen_files

ROOT = Path(__file__).resolve().parents[2]

with mkdocs_gen_files.open("changelog.md", "w") as f:
    f.write((ROOT / "CHANGELOG.md").read_text(encoding="utf-8"))
mkdocs_gen_files.set_edit_path("changelog.md", "../CHANGELOG.md")
