"""Build-time generator (mkdocs-gen-files): MathJax for the pages' math, copied into the site
from an installed package (``django-static-mathjax``, in the docs extra: MathJax 3's own
release files), so the math renders offline and no page loads a script from a CDN.

MathJax's SVG output is one self-contained file (its fonts are inside it), which also renders
from ``file://`` pages."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import mkdocs_gen_files

#: The file mkdocs.yml's extra_javascript loads, and where it lies in the package.
SITE_PATH = "javascripts/mathjax/tex-svg.js"
PACKAGE_PATH = ("static", "mathjax", "es5", "tex-svg.js")


def mathjax_file() -> Path:
    spec = importlib.util.find_spec("mathjax")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("MathJax is not installed: pip install -e '.[docs]' "
                           "(django-static-mathjax brings MathJax's release files)")
    return Path(next(iter(spec.submodule_search_locations))).joinpath(*PACKAGE_PATH)


source = mathjax_file()
with mkdocs_gen_files.open(SITE_PATH, "wb") as f:
    f.write(source.read_bytes())
with mkdocs_gen_files.open("javascripts/mathjax/LICENSE", "wb") as f:
    f.write(source.parents[1].joinpath("LICENSE").read_bytes())
