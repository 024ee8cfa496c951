"""Three short probes for ``scripts/gpu_check.sh`` (each within 10 s on a GPU whose Triton
cache the benchmark warmed), one line of results each, exit 1 where a check fails:

- ``novograd_tail``: NovoGrad on one tensor of 2^20 + 1 elements (an aligned head and a
  1-element tail launch) on the Triton path against the reference path: the tail's weights
  must match (issue #44: the tail read past its one-element denominator);
- ``launch``: Triton's launch cost on this machine: host microseconds per launch of a
  one-element kernel, and per ``AdamOptimizer(implementation="triton").step()`` of one small
  tensor (the fixed cost a step cannot go below);
- ``back_to_back``: Adam on 400 tensors of 20,000 elements timed one step at a time (the device
  idle before each, as the suite timed until #44) and back to back (one pair of events around
  20 steps): the difference is the host's work a training loop hides.

Usage: ``python scripts/gpu_probes.py {novograd_tail,launch,back_to_back}`` (CUDA; the CPU
runs them under Triton's interpreter with ``--cpu``, for the tests, at small sizes).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

PROBES = ("novograd_tail", "launch", "back_to_back")


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def novograd_tail(device, small: bool) -> bool:
    import torch

    import trainop

    n = (1 << 20) + 1 if not small else 33
    results = {}
    for implementation in ("triton", "reference"):
        gen = torch.Generator().manual_seed(0)
        w = torch.nn.Parameter(torch.randn(n, generator=gen).to(device))
        opt = trainop.NovoGrad(params=[w], learning_rate=0.01, implementation=implementation)
        for _ in range(2):
            w.grad = torch.randn(n, generator=gen).to(device)
            opt.step()
        results[implementation] = w.detach().float().cpu()
    tail = slice(n - 16, n)
    diff = float((results["triton"][tail] - results["reference"][tail]).abs().max())
    whole = float((results["triton"] - results["reference"]).abs().max())
    ok = diff <= 1e-5 and whole <= 1e-5
    print(f"novograd_tail: {n} elements, max |triton - reference| {whole:.3g} (last 16: "
          f"{diff:.3g}): {'ok' if ok else 'MISMATCH'}")
    return ok


def launch(device, small: bool) -> bool:
    import torch

    import trainop
    from trainop.kernels import triton as tk

    x = torch.zeros(1, device=device)
    count = 2000 if not small else 20
    runs = 0
    assert tk.run("gradient_descent", [[x], [x.clone()]], [0.1])  # compiled, warm
    _sync(device)
    start = time.perf_counter()
    for _ in range(count):
        runs += tk.run("gradient_descent", [[x], [x.clone()]], [0.1])
    _sync(device)
    per_launch = (time.perf_counter() - start) / count * 1e6
    w = torch.nn.Parameter(torch.zeros(16, device=device))
    w.grad = torch.ones(16, device=device)
    opt = trainop.AdamOptimizer(params=[w], learning_rate=0.01, implementation="triton")
    for _ in range(3):
        opt.step()
    _sync(device)
    start = time.perf_counter()
    for _ in range(count):
        opt.step()
    _sync(device)
    per_step = (time.perf_counter() - start) / count * 1e6
    print(f"launch: {per_launch:.1f} us per run() of one element (host, {count} back to back, "
          f"a clone included); {per_step:.1f} us per Adam step of one 16-element tensor")
    return runs == count


def back_to_back(device, small: bool) -> bool:

    from trainop.bench.gpu_peers import trainop_optimizer
    from trainop.bench.gpu_timing import Candidate, time_interleaved

    sizes = [20_000] * 400 if not small else [64] * 8
    rounds, steps = (5, 20) if not small else (2, 2)
    cand = trainop_optimizer("AdamOptimizer", sizes, device, "triton")
    if not isinstance(cand, Candidate):
        cand = Candidate(cand)
    one, _ = time_interleaved({"a": cand}, rounds=rounds, warmup=2, device=device)
    many, _ = time_interleaved({"a": cand}, rounds=rounds, warmup=0, device=device,
                               back_to_back=steps)
    a, b = sorted(one["a"])[len(one["a"]) // 2], sorted(many["a"])[len(many["a"]) // 2]
    print(f"back_to_back: Adam, {len(sizes)} tensors: {a * 1e6:.1f} us per step one at a "
          f"time, {b * 1e6:.1f} us back to back ({steps} per timed run): "
          f"{(a - b) * 1e6:.1f} us of host work hidden")
    return bool(one["a"]) and bool(many["a"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("probe", choices=PROBES)
    parser.add_argument("--cpu", action="store_true",
                        help="run on the CPU under Triton's interpreter, at small sizes")
    args = parser.parse_args(argv)
    if args.cpu:
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    if not args.cpu and not torch.cuda.is_available():
        print(f"{args.probe}: no CUDA device (use --cpu)", file=sys.stderr)
        return 2
    device = torch.device("cpu" if args.cpu else "cuda")
    ok = {"novograd_tail": novograd_tail, "launch": launch,
          "back_to_back": back_to_back}[args.probe](device, args.cpu)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
