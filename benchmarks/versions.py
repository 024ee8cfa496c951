"""The native step of this checkout against the same step of an earlier commit, interleaved
in one process: did a change make the step slower?

Usage: ``PYTHONPATH=src python benchmarks/versions.py --against c5d4d6c [--rounds 10]
[--steps 10] [--warmup 3] [--scale 1] [--cases c:AdamOptimizer,d:LazyAdamOptimizer]``
(prints a table; a benchmark, not a unit test).

The earlier commit's ``src/trainop`` is taken from git (``git archive``) into a temporary
folder as a package of another name (its absolute imports rewritten), so both versions live
in one interpreter, each with its own native libraries (built on first use, as always). Each
case builds one workload (``trainop.bench.workloads``, float32 on the CPU) and one optimizer of
each version (same class, default implementation: ``native`` on the CPU) over the same
parameters and gradients, the second sharing the first one's slots, so both read and write the
same memory; they are timed in rotating rounds (``trainop.bench.rounds``, the garbage
collector off). The values drift (both update the same tensors); the work per step does not.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import io
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


def _steppers(modules: dict[str, object], name: str, params: list, grads: list) -> dict:
    """One optimizer of each version over the same parameters and gradients, sharing the
    first one's slots: both steps read and write the very same memory (where a big table
    lands, on huge pages or not, depends on what was allocated before it; with tensors of
    their own, the same code measured against itself differed by up to 30% on (d))."""
    for p, g in zip(params, grads, strict=True):
        p.grad = g
    sparse = [(p, g) for p, g in zip(params, grads, strict=True) if g.is_sparse]
    opts = {who: getattr(module, name)(learning_rate=1e-3, params=params,
                                       **_ARGS.get(name, {}))
            for who, module in modules.items()}
    first, *others = opts.values()
    for opt in opts.values():
        opt.step()  # makes the slots
        for p, g in sparse:
            p.grad = g
    for opt in others:
        for p in params:
            for slot, tensor in first.state[p].items():
                opt.state[p][slot] = tensor

    def stepper(opt):
        def step() -> None:
            for p, g in sparse:  # a sparse gradient is handed over anew each step, as
                p.grad = g       # autograd does
            opt.step()
        return step
    return {who: stepper(opt) for who, opt in opts.items()}


def compare(earlier: object, cases, *, scale: float, rounds: int, steps: int,
            warmup: int) -> list[dict]:
    rows = []
    for case in cases:
        key, name = case.split(":")
        data = build_data(make_workload(key, scale), torch.float32, torch.device("cpu"))
        steps_of = _steppers({"earlier": earlier, "this": trainop}, name, *data.clone())
        del data
        medians = time_rounds(steps_of, rounds=rounds, steps=steps, warmup=warmup)
        rows.append({"case": case, **medians, "ratio": medians["this"] / medians["earlier"]})
        print(f"({key}) {name}: earlier {medians['earlier'] * 1e3:.3f} ms, this "
              f"{medians['this'] * 1e3:.3f} ms, this / earlier {rows[-1]['ratio']:.3f}",
              file=sys.stderr, flush=True)
        del steps_of
        gc.collect()
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
          f"{torch.get_num_threads()} threads; median step; both versions step the same "
          "parameters, gradients and slots.\n")
    print("| workload | optimizer | earlier (ms) | this (ms) | this / earlier |")
    print("|---|---|---:|---:|---:|")
    for r in rows:
        key, name = r["case"].split(":")
        print(f"| ({key}) | {name} | {r['earlier'] * 1e3:.3f} | {r['this'] * 1e3:.3f} | "
              f"{r['ratio']:.3f} |")


if __name__ == "__main__":
    main()
