"""Build-time generator (mkdocs-gen-files): the examples gallery, one section per file of
``examples/``, each with what it is for (its docstring or header comment), how to run it, what
it printed when this site was built and what it drew, and its source. Everything is produced
now, from the files as they are: the page cannot drift from the examples.

- A script (``if __name__ == "__main__":``) is run in this process; the page shows its output.
- A recipe (an OpenSeq2Seq or RETURNN config, a trainop YAML recipe) goes through
  ``trainop check-config FILE --plot`` (read as data, never run); the page shows the summary and
  the learning-rate plot. The recipe the site's training figures run (``figures.TRAIN_RECIPE``)
  also links its ``trainop train --compare-tf`` pictures.
"""

from __future__ import annotations

import ast
import contextlib
import io
import os
import runpy
import sys
import tempfile
from pathlib import Path

import mkdocs_gen_files

sys.path.insert(0, str(Path(__file__).parent))
from figures import ROOT, TRAIN_RECIPE  # noqa: E402

EXAMPLES = ROOT / "examples"
LANGUAGE = {".py": "python", ".yaml": "yaml", ".config": "python"}


def is_script(path: Path) -> bool:
    return path.suffix == ".py" and 'if __name__ == "__main__":' in path.read_text("utf-8")


def summary(path: Path) -> str:
    """The file's docstring (a script) or its leading comment lines (a recipe)."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".py":
        with contextlib.suppress(SyntaxError):
            doc = ast.get_docstring(ast.parse(text))
            if doc:
                return doc
    lines = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#!") or stripped.startswith("# pylint"):
            continue
        if not stripped.startswith("#"):
            break
        lines.append(stripped.lstrip("#").strip())
    return " ".join(lines)


def _captured(run) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        run()
    return out.getvalue()


def run_script(path: Path) -> str:
    cwd = os.getcwd()
    os.chdir(tempfile.mkdtemp(prefix="trainop-docs-example-"))
    try:
        return _captured(lambda: runpy.run_path(str(path), run_name="__main__"))
    finally:
        os.chdir(cwd)


def check_config(path: Path, plot: Path) -> str:
    from trainop.__main__ import main

    return _captured(lambda: main(["check-config", str(path), "--plot", str(plot)]))


def section(path: Path, out: Path) -> tuple[list[str], list[Path]]:
    rel = f"examples/{path.name}"
    lines = [f"## `{path.name}`", "", summary(path), ""]
    drawn: list[Path] = []
    if is_script(path):
        lines += ["```bash", f"python {rel}", "```", "", "It printed, when this site was built:",
                  "", "```text", run_script(path).rstrip(), "```", ""]
    else:
        plot = out / f"gallery-{path.stem}.png"
        printed = check_config(path, plot).rstrip()
        lines += ["```bash", f"trainop check-config {rel} --plot {path.stem}.png", "```", "",
                  "It printed, when this site was built:", "", "```text", printed, "```", ""]
        if plot.is_file():
            drawn.append(plot)
            lines += [f"![The learning rate of {path.name}, drawn by check-config]"
                      f"(images/{plot.name})", ""]
        if path == TRAIN_RECIPE:
            lines += [f"`trainop train {rel} --compare-tf` trains it against TensorFlow's "
                      "replay; the [home page](index.md) and the [training step]"
                      "(training.md) show its dashboard and its deviation from TensorFlow, "
                      "drawn from such a run when this site was built.", ""]
    source = path.read_text(encoding="utf-8").rstrip()
    lines += [f'??? example "The source: {rel}"', "",
              f"    ```{LANGUAGE.get(path.suffix, 'text')}",
              *(f"    {line}" if line else "" for line in source.splitlines()),
              "    ```", ""]
    return lines, drawn


def files() -> list[Path]:
    """The examples, scripts first, then the recipes, each group by name."""
    found = [p for p in EXAMPLES.iterdir() if p.is_file() and not p.name.startswith(".")]
    return sorted(found, key=lambda p: (not is_script(p), p.name))


out = Path(tempfile.mkdtemp(prefix="trainop-docs-gallery-"))
page = ["# Examples", "",
        "Each file of `examples/` in the repository, with what it printed and drew when this "
        "site was built (the page is generated from the files, by running them). The scripts "
        "run with `python`; the recipes are read, never run, by `trainop check-config` and "
        "`trainop train` (see [recipes](recipes.md)).", ""]
for example in files():
    lines, drawn = section(example, out)
    page += lines
    for image in drawn:
        with mkdocs_gen_files.open(f"images/{image.name}", "wb") as f:
            f.write(image.read_bytes())
with mkdocs_gen_files.open("examples.md", "w") as f:
    f.write("\n".join(page))
