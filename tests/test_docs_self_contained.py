"""The docs and the package are self-contained: nothing refers to a path outside the repository.

A clone has only this repository, and an installed package only ``src/trainop``; documents kept
beside the repository (``../shared/...``) or paths of the machine it was written on do not
exist there. Checked over README.md, BENCHMARKS.md, docs/*.md and every packaged file:

- no reference to ``../shared`` or to the project's out-of-repository notes, and no absolute path
  of a development machine (``/work/...``);
- every relative path that climbs with ``../`` exists and stays inside the repository (a
  packaged file: inside the package, since that is all an installed copy has);
- every markdown link to a local target, and every ``*.md`` file named, exists in the repository.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts" / "docs"))
from generated import GENERATED  # noqa: E402  (written when the site is built)

PACKAGE = ROOT / "src" / "trainop"
PACKAGED_SUFFIXES = {".py", ".c", ".h", ".cpp", ".yaml", ".yml", ".json", ".txt", ".cfg"}

#: Names that only exist outside the repository (the project's shared notes, the build machine).
OUTSIDE = re.compile(r"\.\./shared\b|(?<![\w.])shared/(?:spec|design\.md|style\.md)|/work/")
CLIMB = re.compile(r"(?<![\w/.])(?:\.\./)+[\w.\-/]*")
LINK = re.compile(r"\]\(([^)\s]+)\)")
MD_NAME = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.md)\b")


def _documents() -> list[Path]:
    return [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _packaged() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*")
                  if p.is_file() and p.suffix in PACKAGED_SUFFIXES and "__pycache__" not in p.parts)


def _inside(path: Path, root: Path) -> bool:
    return path.resolve().is_relative_to(root.resolve())


def _md_exists(name: str, where: Path) -> bool:
    return any((base / name).is_file() for base in (where.parent, ROOT, ROOT / "docs"))


def _generated(target: str, where: Path) -> bool:
    """A file the site's generators write into docs/ at build time."""
    docs = (ROOT / "docs").resolve()
    path = (where.parent / target).resolve()
    return path.is_relative_to(docs) and str(path.relative_to(docs)) in GENERATED


def problems(text: str, where: Path, root: Path) -> list[str]:
    """Every reference in ``text`` (the contents of ``where``) to a path outside ``root``."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        found += [f"{number}: {m.group(0)!r} is outside the repository"
                  for m in OUTSIDE.finditer(line)]
        for m in CLIMB.finditer(line):
            target = where.parent / m.group(0)
            if not _inside(target, root):
                found.append(f"{number}: {m.group(0)!r} climbs out of {root.name}")
            elif not target.exists() and not _generated(m.group(0), where):
                found.append(f"{number}: {m.group(0)!r} does not exist")
        for target in LINK.findall(line):
            local = target.split("#")[0]
            if local and not re.match(r"[a-z]+:", local) and not (where.parent / local).exists() \
                    and not _generated(local, where):
                found.append(f"{number}: link target {target!r} does not exist")
        for name in MD_NAME.findall(line):
            if not _md_exists(name, where) and not _generated(name, where):
                found.append(f"{number}: {name!r} is not a file of the repository")
    return found


@pytest.mark.parametrize("path", _documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_documents_refer_only_to_the_repository(path):
    assert problems(path.read_text(encoding="utf-8"), path, ROOT) == []


def test_packaged_files_refer_only_to_the_package_or_repository():
    files = _packaged()
    assert PACKAGE / "kernels" / "native" / "csrc" / "metadata.cpp" in files
    found = {str(p.relative_to(ROOT)): problems(p.read_text(encoding="utf-8"), p, PACKAGE)
             for p in files}
    assert {name: items for name, items in found.items() if items} == {}


@pytest.mark.parametrize("text", [
    "The shape we aim for is `../shared/design.md`.",
    "- `../shared/spec/` — the exact upstream behaviour.",
    "arguments (``../shared/spec/returnn.md`` §3.2)",
    "Choices (tf1.md §7):",
    "see [the spec](../../spec/tf1.md)",
    "built on /work/main/src",
    "see [design](missing.md#layers)",
    "the sources (../src/nowhere.py)",
])
def test_the_check_finds_outside_references(text):
    assert problems(text, ROOT / "docs" / "design.md", ROOT)


@pytest.mark.parametrize("text", [
    "see `docs/design.md` and [processing](processing.md#loss-scaling)",
    "// the reader (../metadata.py) and ../boundary.py",
    "see BENCHMARKS.md and README.md; https://example.org/a/../b.md",
    "kernels build into `~/.cache/trainop`",
])
def test_the_check_accepts_references_inside(text):
    where = ROOT / "docs" / "design.md"
    if "metadata.py" in text:
        where = PACKAGE / "kernels" / "native" / "csrc" / "metadata.cpp"
    assert problems(text, where, ROOT) == []
