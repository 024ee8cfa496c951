"""The documentation site: ``mkdocs build --strict`` builds it (broken links, missing references
and docstring warnings fail); the reference covers every public name and the CLI every flag;
every public name has a docstring; the built pages render in headless Chromium with their
title, navigation and highlighted code (skipped where Debian's ``chromium`` is absent)."""

from __future__ import annotations

import html
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts" / "docs"))
from cli_markdown import commands, flags  # noqa: E402
from public_api import PUBLIC_MODULES, is_module, public_names, shadowed_home  # noqa: E402

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
                  "bench-train-step.png", "layers.svg", "parity.png"):
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


def _rendered(site: Path, page: str) -> str:
    """The page's DOM after Chromium ran its scripts (MathJax included), offline: file://."""
    run = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                          "--virtual-time-budget=15000", "--dump-dom", (site / page).as_uri()],
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0 and "<title>" in run.stdout, run.stderr[-2000:]
    return run.stdout


needs_chromium = pytest.mark.skipif(
    _chromium() is None, reason="headless render check needs Debian's chromium "
    "(apt-get install chromium; scripts/test.sh installs it as root)")


@needs_chromium
@pytest.mark.parametrize("page, title", [("index.html", "trainop"),
                                         ("guides/port-tf1/index.html", "Port a TF1")])
def test_pages_render_in_headless_chromium(site, page, title):
    dom = _rendered(site, page)
    head = dom.split("<title>", 1)[1].split("</title>", 1)[0]
    assert title in head and "trainop" in head
    assert 'class="md-nav' in dom and "Getting started" in dom and "Reference" in dom
    assert 'class="highlight"' in dom and "```" not in dom  # code rendered, no raw Markdown


def _entry(html_text: str, anchor: str) -> str:
    """The HTML of one reference entry: from its anchor to the next entry of its level."""
    start = html_text.index(f'id="{anchor}"')
    end = html_text.find('<div class="doc doc-object doc-', html_text.index("doc-object", start)
                         + 20)
    return html_text[start:end if end > 0 else len(html_text)]


def _text(fragment: str) -> str:
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", fragment)))


@needs_chromium
def test_a_class_page_renders_signature_argument_table_and_math(site):
    dom = _rendered(site, "reference/trainop/index.html")
    adam = _entry(dom, "trainop.AdamOptimizer")
    signature = _text(adam.split('class="doc-signature', 1)[1].split("</pre>", 1)[0])
    compact = signature.replace(" ", "")
    assert "AdamOptimizer(learning_rate=0.001,beta1=0.9,beta2=0.999,epsilon=1e-08," in compact
    assert "implementation:str|None=None" in compact and "lr=None" in compact, signature
    table = adam.split('<table', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", table, re.S)
    beta2 = [_text(r) for r in rows if "<code>beta2</code>" in r]
    assert len(beta2) == 1 and "float" in beta2[0] and "0.999" in beta2[0], beta2
    assert "required" not in _text(table)
    assert "<mjx-container" in adam and "<svg" in adam  # MathJax typeset the update rule
    assert "$$" not in _text(adam) and "\\frac" not in _text(adam)


def test_the_math_renderer_is_part_of_the_site(site):
    """Offline: MathJax is served from the site itself; no page loads a script from a CDN."""
    assert (site / "javascripts" / "mathjax" / "tex-svg.js").stat().st_size > 500_000
    for page in site.rglob("*.html"):
        sources = re.findall(r'<script[^>]+src="([^"]+)"', page.read_text(encoding="utf-8"))
        assert not [s for s in sources if re.match(r"(https?:)?//", s)], page


def test_every_argument_table_row_of_adamw_has_its_default(site):
    page = (site / "reference" / "trainop" / "index.html").read_text(encoding="utf-8")
    for name in ("AdamWOptimizer", "LazyAdamOptimizer", "NadamOptimizer"):
        entry = _entry(page, f"trainop.{name}")
        assert "<table" in entry, name
        table = _text(entry.split("<table", 1)[1].split("</table>", 1)[0])
        assert "beta2" in table and "0.999" in table, name
        assert "required" not in table or name == "AdamWOptimizer"
    adamw = _text(_entry(page, "trainop.AdamWOptimizer").split("<table", 1)[1]
                  .split("</table>", 1)[0])
    assert adamw.count("required") == 1  # weight_decay only
    assert "implementations" in _text(_entry(page, "trainop.Optimizer")).lower()


def test_shadowed_names_render_the_function(site):
    shown = 0
    for module, page, _ in PUBLIC_MODULES:
        text = (site / "reference" / page / "index.html").read_text(encoding="utf-8")
        for name in public_names(module):
            if is_module(module, name) or not shadowed_home(module, name):
                continue
            after = text[text.index(f'id="{module}.{name}"'):]
            kind = re.search(r'class="doc doc-object doc-(\w+)"', after).group(1)
            assert kind == "function", f"{module}.{name} renders as a {kind}"
            shown += 1
    assert shown >= 3  # trainop.optimize_loss, processing.larc, checkpoints.slot_names


def test_reference_pages_show_no_private_names_or_raw_rest(site):
    """(The collapsed source of each entry shows the code as it is, private names included.)"""
    for _, page, _ in PUBLIC_MODULES:
        page_html = (site / "reference" / page / "index.html").read_text(encoding="utf-8")
        assert '<details class="mkdocstrings-source">' in page_html  # the code, one click away
        text = _text(re.sub(r'<details class="mkdocstrings-source">.*?</details>', " ",
                            page_html, flags=re.S))
        found = re.findall(r"\b_(?:Decay|F32|RateDecay|WarmupDecay)\b|\.\. math::", text)
        assert found == [], page


#: Internal notes that do not belong in a user's pages or the command's help.
INTERNAL = re.compile(r"#\d{2,}\b|\bissue\b|\brun \d+\b|\bto fill from\b|\bTODO\b|\bTBD\b",
                      re.I)


def _internal_notes(text: str) -> list[str]:
    return [text[max(0, m.start() - 50):m.end() + 30] for m in INTERNAL.finditer(text)]


def _user_pages(site: Path):
    for page in sorted(site.rglob("index.html")):
        rel = page.relative_to(site).as_posix()
        if not rel.startswith(("benchmarks/", "404")):
            yield rel, page


def test_user_pages_carry_no_internal_notes(site):
    found = {}
    for rel, page in _user_pages(site):
        body = page.read_text(encoding="utf-8").split('<article', 1)[-1].split("</article>")[0]
        notes = _internal_notes(_text(re.sub(r"<pre.*?</pre>", " ", body, flags=re.S)))
        if notes:
            found[rel] = notes
    assert found == {}


def test_the_benchmarks_page_carries_no_internal_notes(site):
    body = (site / "benchmarks" / "index.html").read_text(encoding="utf-8")
    body = body.split('<article', 1)[-1].split("</article>")[0]
    assert _internal_notes(_text(re.sub(r"<pre.*?</pre>", " ", body, flags=re.S))) == []


def test_no_command_help_carries_internal_notes():
    found = {name: _internal_notes(parser.format_help())
             for name, parser in commands(build_parser()).items()}
    assert {k: v for k, v in found.items() if v} == {}


def test_the_cli_page_starts_with_train():
    names = list(commands(build_parser()))
    assert names[:2] == ["trainop", "trainop train"], names


def test_the_site_shows_its_version_changelog_and_dark_mode(site):
    index = (site / "index.html").read_text(encoding="utf-8")
    assert f"trainop {importlib.metadata.version('trainop')}" in index
    assert index.count("data-md-color-media") >= 2  # a light and a dark palette, toggled
    changelog = (site / "changelog" / "index.html").read_text(encoding="utf-8")
    assert "Keep a Changelog" in changelog and "[Unreleased]" in changelog
    css = (site / "stylesheets" / "extra.css").read_text(encoding="utf-8")
    assert "td code" in css and "white-space: nowrap" in css and "extra.css" in index


def test_the_gallery_shows_every_example_with_its_output(site):
    gallery = (site / "examples" / "index.html").read_text(encoding="utf-8")
    for example in sorted((ROOT / "examples").iterdir()):
        assert f"<code>{example.name}</code>" in gallery, example.name
    text = _text(gallery)
    assert "TF style and torch style agree exactly" in text  # quickstart.py's last line
    assert "NumericsError: phase='forward'" in text  # demo.py
    assert text.count("It printed, when this site was built") == len(
        list((ROOT / "examples").iterdir()))
    assert "gallery-openseq2seq_jasper.png" in gallery


def test_the_migration_page_maps_torch_arguments(site):
    text = _text((site / "migrate-torch" / "index.html").read_text(encoding="utf-8"))
    for phrase in ("eps", "epsilon", "weight_decay", "fused", "implementation",
                   "PolicyScheduler", "StepLR"):
        assert phrase in text, phrase
