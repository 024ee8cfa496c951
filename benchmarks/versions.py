"""The native step of this checkout against the same step of an earlier commit, interleaved
in one process: did a change make the step slower?

Usage: ``PYTHONPATH=src python benchmarks/versions.py --against c5d4d6c [--rounds 10]
[--steps 10] [--warmup 3] [--scale 1] [--cases c:AdamOptimizer,d:LazyAdamOptimizer]``
(prints a table; a benchmark, not a unit test).

The earlier commit's ``src/trainop`` is taken from git (``git archive``) into a temporary
folder as a package of another name (its absolute imports rewritten), so both versions live
in one interpreter, each with its own native libraries (built on first use, as always). Each
case builds one workload (``trainop.bench.workloads``, float32 on the CPU), gives both
versions a copy, steps the same optimizer class of each (default implementation: ``native``
on the CPU) with the gradients attached once, and times them in rotating rounds
(``trainop.bench.rounds``, the garbage collector off). Steps of one version run on its own
tensors, so both see the same sizes and the same cache pressure from each other; each case is
measured twice, the tensors made in either order, and the ratios' geometric mean reported
(where a big table lands in memory depends on what was allocated first).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import io
import math
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import torch

import trainop
from trainop.bench.rounds import time_rounds
from trainop.bench.workloads import build_data, make_workload

REPO = Path(__file__).resolve().parent.parent
#: (workload, optimizer): the dense rules with the most lists, and the sparse row paths.
CASES = ("a:AdamOptimizer", "a:FtrlOptimizer", "b:AdamOptimizer", "b:GradientDescentOptimizer",
         "b:FtrlOptimizer", "c:AdamOptimizer", "c:GradientDescentOptimizer", "c:FtrlOptimizer",
         "c:MomentumOptimizer", "d:LazyAdamOptimizer", "d:AdagradOptimizer", "d:FtrlOptimizer",
         "d:GradientDescentOptimizer")
_ARGS = {"MomentumOptimizer": {"momentum": 0.9}}


def load_revision(revision: str, into: Path) -> object:
    """``src/trainop`` at ``revision`` imported as ``trainop_at_<sha>`` from ``into``."""
    sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", revision],
                         check=True, capture_output=True, text=True).stdout.strip()
    name = f"trainop_at_{sha}"
    archive = subprocess.run(["git", "-C", str(REPO), "archive", revision, "src/trainop"],
                             check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    package = into / name
    (into / "src" / "trainop").rename(package)
    rules = [(re.compile(r"^(\s*)from trainop([. ])", re.M), rf"\1from {name}\2"),
             (re.compile(r"^(\s*)import trainop(\.[\w.]+)? as ", re.M), rf"\1import {name}\2 as "),
             (re.compile(r"^(\s*)import trainop$", re.M), rf"\1import {name} as trainop"),
             (re.compile(r"([\"'])trainop\."), rf"\1{name}.")]
    for path in package.rglob("*.py"):
        text = path.read_text()
        for pattern, replacement in rules:
            text = pattern.sub(replacement, text)
        path.write_text(text)
    sys.path.insert(0, str(into))
    return importlib.import_module(name)


def _stepper(module: object, name: str, params: list, grads: list):
    for p, g in zip(params, grads, strict=True):
        p.grad = g
    opt = getattr(module, name)(learning_rate=1e-3, params=params, **_ARGS.get(name, {}))
    sparse = [(p, g) for p, g in zip(params, grads, strict=True) if g.is_sparse]

    def step() -> None:
        for p, g in sparse:  # a sparse gradient is handed over anew each step, as autograd does
            p.grad = g
        opt.step()
    return step


def compare(earlier: object, cases, *, scale: float, rounds: int, steps: int,
            warmup: int) -> list[dict]:
    """Per case, two comparisons with the tensors made in either order (the memory a big
    table gets, huge pages or not, depends on what was allocated before it: on (d) the same
    code measured against itself differs by up to 30% with the order), and their geometric
    mean."""
    rows = []
    for case in cases:
        key, name = case.split(":")
        data = build_data(make_workload(key, scale), torch.float32, torch.device("cpu"))
        ratios, medians = [], {"earlier": [], "this": []}
        for order in (("earlier", "this"), ("this", "earlier")):
            module = {"earlier": earlier, "this": trainop}
            steps_of = {who: _stepper(module[who], name, *data.clone()) for who in order}
            found = time_rounds(steps_of, rounds=rounds, steps=steps, warmup=warmup)
            ratios.append(found["this"] / found["earlier"])
            for who in medians:
                medians[who].append(found[who])
            del steps_of
            gc.collect()
        del data
        row = {"case": case, "earlier": math.sqrt(math.prod(medians["earlier"])),
               "this": math.sqrt(math.prod(medians["this"])), "ratios": ratios,
               "ratio": math.sqrt(ratios[0] * ratios[1])}
        rows.append(row)
        print(f"({key}) {name}: this / earlier {ratios[0]:.3f} (earlier made first), "
              f"{ratios[1]:.3f} (this first), {row['ratio']:.3f}", file=sys.stderr, flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", required=True, help="the earlier git revision")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--cases", default=",".join(CASES),
                        help="comma-separated workload:OptimizerClass pairs")
    args = parser.parse_args()
    if min(args.rounds, args.steps) < 1 or args.warmup < 0 or not args.scale > 0:
        parser.error("--rounds and --steps must be >= 1, --warmup >= 0, --scale > 0")
    with tempfile.TemporaryDirectory() as folder:
        earlier = load_revision(args.against, Path(folder))
        rows = compare(earlier, args.cases.split(","), scale=args.scale, rounds=args.rounds,
                       steps=args.steps, warmup=args.warmup)
    print(f"## This checkout vs {args.against}: the native step, interleaved\n")
    print(f"Scale {args.scale}, {args.rounds} rounds of {args.steps} steps, "
          f"{torch.get_num_threads()} threads; median step (geometric mean of both "
          "orders).\n")
    print("| workload | optimizer | earlier (ms) | this (ms) | this / earlier: earlier made "
          "first | this first | geometric mean |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        key, name = r["case"].split(":")
        print(f"| ({key}) | {name} | {r['earlier'] * 1e3:.3f} | {r['this'] * 1e3:.3f} | "
              f"{r['ratios'][0]:.3f} | {r['ratios'][1]:.3f} | {r['ratio']:.3f} |")


if __name__ == "__main__":
    main()
