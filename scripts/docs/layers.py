"""The layered layout of ``src/trainop`` drawn as an SVG at build time, read from the source:
each layer's modules counted and the layers it imports found with ``ast``, so the picture on
the design page cannot drift from the code (``tests/test_layers.py`` enforces the order)."""

from __future__ import annotations

import ast
from html import escape
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "trainop"

#: Bottom to top, with what each holds (docs/design.md, "Layers and files").
LAYERS = (
    ("algorithms", "each update rule once, per tensor (the reference)"),
    ("kernels", "foreach, fused, native C and Triton fast paths; the dispatch"),
    ("contract", "the tf.train.Optimizer contract on torch.optim; slots, state, flat buffers"),
    ("optimizers", "the TF-named classes and the name registry"),
    ("processing", "clipping, loss scaling, NaN filter, LARC: the GradientPipeline"),
    ("schedules", "learning-rate policies, pure functions of the step"),
    ("configs", "config files as data (ast, never run)"),
    ("training", "optimize_loss, the Updater, numerics checks, summaries"),
    ("interfaces", "checkpoints, recipes, the trainop command, RETURNN's engine, bench"),
)
#: Folders and entry modules drawn inside another layer's box.
MERGED = {"bench": "interfaces", "__main__.py": "interfaces", "checkpoints.py": "interfaces",
          "returnn.py": "interfaces", "registry.py": "optimizers"}


def _layer_of(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) < 2:
        return None
    head = parts[1]
    names = {name for name, _ in LAYERS}
    if head in names:
        return head
    return MERGED.get(head) or MERGED.get(f"{head}.py")


def _file_layer(path: Path) -> str | None:
    rel = path.relative_to(PACKAGE).parts
    return rel[0] if rel[0] in {n for n, _ in LAYERS} else MERGED.get(rel[0])


def read_layers() -> dict[str, tuple[int, set[str]]]:
    """layer -> (number of modules, the other layers its modules import)."""
    found: dict[str, tuple[int, set[str]]] = {name: (0, set()) for name, _ in LAYERS}
    for path in PACKAGE.rglob("*.py"):
        layer = _file_layer(path)
        if layer is None:
            continue
        count, uses = found[layer]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):  # a relative import: the module it names
                package = ["trainop", *path.relative_to(PACKAGE).parts[:-1]]
                base = package[:len(package) - node.level + 1] if node.level else []
                modules = [".".join(base + ([node.module] if node.module else []))]
            elif isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            else:
                continue
            uses.update(other for other in map(_layer_of, modules) if other and other != layer)
        found[layer] = (count + 1, uses)
    return found


def svg(found: dict[str, tuple[int, set[str]]]) -> str:
    """Stacked boxes, the top layer first; each names the layers its modules import."""
    order = [name for name, _ in LAYERS]
    what = dict(LAYERS)
    width, box, gap, left = 820, 46, 10, 10
    rows = list(reversed(order))
    height = len(rows) * (box + gap) + 40
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif">',
           f'<text x="{left}" y="18" font-size="13" font-weight="bold">trainop\'s layers, '
           'top to bottom, read from the source: each box names the layers it imports</text>']
    for i, name in enumerate(rows):
        y = 30 + i * (box + gap)
        count, uses = found[name]
        shade = 235 - 10 * (len(rows) - 1 - i)
        below = sorted(uses, key=order.index)
        out.append(f'<rect x="{left}" y="{y}" width="{width - 2 * left}" height="{box}" rx="6" '
                   f'fill="rgb({shade},{shade},255)" stroke="#3f51b5"/>')
        out.append(f'<text x="{left + 10}" y="{y + 19}" font-size="14" font-weight="bold">'
                   f'{escape(name)}</text>')
        out.append(f'<text x="{left + 120}" y="{y + 19}" font-size="12">'
                   f'{escape(what[name])}</text>')
        out.append(f'<text x="{left + 10}" y="{y + 37}" font-size="11" fill="#444">'
                   f'{count} modules; imports: {escape(", ".join(below) or "nothing")}</text>')
    out.append("</svg>")
    return "\n".join(out)
