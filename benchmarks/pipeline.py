"""The gradient-pipeline comparison, as a script: the same as ``trainop bench --pipeline``.

Usage: ``PYTHONPATH=src python benchmarks/pipeline.py [--rounds 7] [--steps 10] [--warmup 3]
[--scale 1]`` (prints a table; not a unit test). See ``trainop.bench.pipeline``.
"""

from __future__ import annotations

import argparse

from trainop.bench.pipeline import render_pipeline, run_pipeline_benchmark


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--scale", type=float, default=1.0)
    args = parser.parse_args()
    if min(args.rounds, args.steps) < 1 or args.warmup < 0 or not args.scale > 0:
        parser.error("--rounds and --steps must be >= 1, --warmup >= 0, --scale > 0")
    print(render_pipeline(run_pipeline_benchmark(scale=args.scale, rounds=args.rounds,
                                                 steps=args.steps, warmup=args.warmup)), end="")


if __name__ == "__main__":
    main()
