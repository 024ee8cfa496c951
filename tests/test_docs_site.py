"""The documentation site: ``mkdocs build --strict`` builds it (broken links, missing references
and docstring warnings fail); the reference covers every public name and the CLI every flag;
every public name has a docstring; the built pages render in headless Chromium with their
title, navigation and highlighted code (skipped where Debian's ``chromium`` is absent)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts" / "docs"))
from cli_markdown import commands, flags  # noqa: E402
from public_api import PUBLIC_MODULES, is_module, public_names  # noqa: E402

from trainop.__main__ import build_parser  # noqa: E402

pytest.importorskip("mkdocs", reason="the docs extra is not installed: pip install -e '.[docs]'")
pytest.importorskip("mkdocstrings")
griffe = pytest.importorskip("griffe")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-f",
                          str(ROOT / "mkdocs.yml"), "-d", str(out)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    return out


def test_the_site_builds_strict_with_every_page(site):
    for page in ("index.html", "getting-started/index.html", "guides/index.html",
                 "design/index.html", "benchmarks/index.html", "reference/cli/index.html"):
        assert (site / page).is_file(), page
    for image in ("policies.png", "dashboard.png", "deviation.png", "bench-headline.png",
                  "bench-train-step.png", "layers.svg"):
        assert (site / "images" / image).stat().st_size > 1000, image


def test_the_reference_has_every_public_name(site):
    for module, page, _ in PUBLIC_MODULES:
        html = (site / "reference" / page / "index.html").read_text(encoding="utf-8")
        missing = [name for name in public_names(module)
                   if not is_module(module, name) and f'id="{module}.{name}"' not in html]
        assert missing == [], f"{module}: {missing}"


def test_the_cli_page_has_every_command_and_flag(site):
    html = (site / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    for name, parser in commands(build_parser()).items():
        assert f"<code>{name}</code>" in html, name
        for action in flags(parser):
            for option in action.option_strings:
                assert f"<code>{option}</code>" in html, f"{name} {option}"


def _docstring(obj) -> str:
    target = obj.final_target if obj.is_alias else obj
    return (target.docstring.value if target.docstring else "").strip()


def test_every_public_name_has_a_docstring():
    # as the site reads them: ``#:`` comments above an attribute are its docstring
    extensions = griffe.load_extensions(f"{ROOT}/scripts/docs/griffe_rst.py:ReSTToMarkdown")
    loader = griffe.GriffeLoader(search_paths=[str(ROOT / "src")], extensions=extensions)
    loader.load("trainop")
    loader.resolve_aliases(implicit=False, external=None)
    missing = []
    for module, _, _ in PUBLIC_MODULES:
        found = loader.modules_collection.get_member(module)
        if not _docstring(found):
            missing.append(module)
        missing += [f"{module}.{name}" for name in public_names(module)
                    if not is_module(module, name) and not _docstring(found[name])]
    assert missing == []


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(_chromium() is None, reason="headless render check needs Debian's chromium "
                    "(apt-get install chromium; scripts/test.sh installs it as root)")
@pytest.mark.parametrize("page, title", [("index.html", "trainop"),
                                         ("guides/port-tf1/index.html", "Port a TF1")])
def test_pages_render_in_headless_chromium(site, page, title):
    run = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                          "--dump-dom", (site / page).as_uri()],
                         capture_output=True, text=True, timeout=120)
    dom = run.stdout
    assert run.returncode == 0 and "<title>" in dom, run.stderr[-2000:]
    head = dom.split("<title>", 1)[1].split("</title>", 1)[0]
    assert title in head and "trainop" in head
    assert 'class="md-nav' in dom and "Getting started" in dom and "Reference" in dom
    assert 'class="highlight"' in dom and "```" not in dom  # code rendered, no raw Markdown
