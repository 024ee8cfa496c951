"""Every ```python block of the README and of the documentation site runs, on the installed
trainop, from an empty directory outside the checkout: one program per page, in order (a
continuation runs after the block it continues), and a block's printed output equals the
``Output`` block the page shows after it. A block that cannot run as it stands carries a marker
(scripts/docs/examples.py) naming why and how it runs instead; the count of blocks run is
printed."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import trainop

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("docs_examples", ROOT / "scripts/docs/examples.py")
examples = importlib.util.module_from_spec(spec)
sys.modules["docs_examples"] = examples
spec.loader.exec_module(examples)

#: Pages written by hand (generated pages hold no python blocks); mkdocs.yml leaves out the rest.
PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md")
                              if p.name != "mutation_audit.md")]


def _page_blocks():
    return {page: examples.blocks(page, (ROOT / page).read_text(encoding="utf-8"))
            for page in PAGES}


@pytest.fixture(scope="module")
def records(tmp_path_factory, request):
    """Run every page once, in one process (a page's TF1 graph blocks run in a process of their
    own that examples.py starts: TF's LLVM cannot share a process with torch's)."""
    out = tmp_path_factory.mktemp("examples")
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(trainop.__file__))}
    result = out / "result.json"
    run = subprocess.run([sys.executable, str(ROOT / "scripts/docs/examples.py"), str(result),
                          str(ROOT), *PAGES], cwd=out, env=env, capture_output=True, text=True,
                         timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    found = json.loads(result.read_text())
    ran = sum(r["status"] == "run" and not r["error"] for r in found)
    not_run = [f"{r['page']}:{r['line']} {r['status']}" for r in found
               if r["status"].startswith("not run")]
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():  # shown however pytest captures output
        print(f"\ndocs examples: {ran} of {len(found)} python blocks run on {len(PAGES)} pages;"
              f" not run here: {len(not_run)}")
        for line in not_run:
            print(f"  {line}")
    return found


@pytest.mark.parametrize("page", PAGES)
def test_page_blocks_run_and_print_what_the_page_shows(records, page):
    mine = [r for r in records if r["page"] == page]
    assert len(mine) == len(_page_blocks()[page])  # none left out by a failure before it
    for r in mine:
        where = f"{page}:{r['line']}"
        assert not r["error"], f"{where} failed:\n{r['error']}"
        if r["output"] is not None and r["status"] == "run":
            assert examples.output_matches(r["output"], r["printed"]), (
                f"{where} printed\n{r['printed']}\nbut the page shows\n{r['output']}")


@pytest.mark.parametrize("page", PAGES)
def test_blocks_that_need_an_extra_name_it_on_the_page(page):
    text = (ROOT / page).read_text(encoding="utf-8")
    for block in _page_blocks()[page]:
        for extra in examples.extras_needed(block.code):
            assert f"trainop[{extra}]" in text, (
                f"{page}:{block.line} needs the {extra} extra: say `pip install "
                f"'trainop[{extra}]'` on the page")


def test_markers_name_what_exists():
    for page, blocks in _page_blocks().items():
        for block in blocks:
            test = block.marks.get("tested")
            if test:
                path, _, name = test.partition("::")
                assert re.search(rf"^def {name}\(", (ROOT / path).read_text(), re.M), \
                    f"{page}:{block.line}: {test} does not exist"


def test_the_parser_reads_markers_and_output():
    text = ('<!-- example: ranks=2 -->\n```python\nprint(1)\n```\n\n'
            '```text title="Output"\n1\n```\n\n```python\nx = 2\n```\n')
    first, second = examples.blocks("p.md", text)
    assert first.marks == {"ranks": "2"} and first.output == "1\n"
    assert second.marks == {} and second.output is None
    with pytest.raises(ValueError, match="unknown example marker 'rank'"):
        examples.blocks("p.md", "<!-- example: rank=2 -->\n```python\n```\n")
    assert examples.output_matches("['a', ..., 'z']\n", "['a', 'b', 'z']\n")
    assert not examples.output_matches("0.005\n", "0.0051\n")
