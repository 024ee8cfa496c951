"""Compile every Triton kernel trainop launches with the real Triton compiler, for NVIDIA GPUs,
on a machine without one.

Triton's interpreter (``TRITON_INTERPRET=1``, how the tests run the kernels on the CPU) executes
the kernels' Python with numpy: it never runs Triton's compiler, so a kernel that the
interpreter accepts may still fail to compile for a GPU (a construct the code generator does
not lower, a type the backend rejects). The compiler itself needs no GPU: given a target it
lowers a kernel to PTX and, with the ``ptxas`` that Triton's wheel carries, to a cubin.

Two phases:

1. record: with the interpreter on, run a pytest selection (default: the Triton interpreter
   tests) and record each launch's kernel, its arguments' types and its constexpr values,
   the specializations real Triton would compile for the same call;
2. compile: in a fresh process with the interpreter off, compile each distinct
   specialization for each target (default ``sm_90``, the H100, and ``sm_80``) with trainop's
   launch options (``launch.OPTIONS``), and list what fails: a compiler error, or float32
   arithmetic in the PTX that does not round as the reference does (``APPROXIMATE``: a fused
   multiply-add, an approximate square root, reciprocal or division), which would make a rule's
   last bits differ from the reference path on a GPU.

Usage::

    python scripts/triton_compile_check.py [--targets 90,80] [--tests PATH ...] [--out FILE]

Exit status 0 when every specialization compiled for every target, 1 when one failed, 2 when
nothing was recorded (no launch: a broken selection), 3 when Triton is not installed.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TESTS = ["tests/test_triton_interpreter.py", "tests/test_triton_fsdp2.py"]
#: torch dtype name -> Triton's pointer element type name.
_POINTEE = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64",
            "int64": "i64", "int32": "i32", "int8": "i8", "uint8": "u8", "bool": "i1"}


#: float32 PTX instructions that round otherwise than one IEEE operation after another (the
#: reference's order): contraction, and the fast forms Triton emits for ``tl.sqrt``, ``/``,
#: ``tl.rsqrt``. (float64 ones are libdevice's own algorithms, e.g. ``pow``.)
APPROXIMATE = ("fma.rn.f32", "fma.rn.ftz.f32", "sqrt.approx.f32", "sqrt.approx.ftz.f32",
               "div.full.f32", "div.approx.f32", "div.approx.ftz.f32", "rcp.approx.f32",
               "rcp.approx.ftz.f32", "rsqrt.approx.f32", "rsqrt.approx.ftz.f32")


#: A masked (predicated) access of global memory in PTX, vector or not: ``@%p1 ld.global.v4.b32``,
#: ``@%p3 ld.global.b32``. The kernels mask every per-element access; the unmasked ones read a
#: word every element shares (a hyperparameter, the multiplier, the skip flag).
_MASKED_ACCESS = re.compile(
    r"@!?%p\d+\s+(ld|st)\.global(?:\.[a-z0-9]+)*?(?:\.v(\d))?\.[bufs](\d+)\b")


def traffic(ptx: str, block: int, num_warps: int) -> dict[str, float]:
    """Bytes read and written per element by a compiled elementwise kernel: its masked
    accesses of global memory per thread (every array it streams; a load whose mask also
    depends on a value, e.g. read only at a zero learning rate, counts as in the code, though
    it moves no memory while predicated off), over the elements one thread handles
    (``block / (32 * num_warps)``); and the widest masked access in bits (128: vectorized)."""
    moved = {"ld": 0, "st": 0}
    widest = 0
    for match in _MASKED_ACCESS.finditer(ptx):
        bits = int(match.group(2) or 1) * int(match.group(3))
        moved[match.group(1)] += bits // 8
        widest = max(widest, bits)
    per_thread = block / (32 * num_warps)
    return {"read": moved["ld"] / per_thread, "write": moved["st"] / per_thread,
            "widest_bits": widest}


def _type_of(value) -> str | None:
    """The Triton signature type of a launch argument, as the JIT would specialize it (an
    integer equal to 1 becomes a constant, marked by None here)."""
    import torch

    if isinstance(value, torch.Tensor):
        return "*" + _POINTEE[str(value.dtype).removeprefix("torch.")]
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        if value == 1:
            return None
        return "i32" if -2**31 <= value < 2**31 else "i64"
    if isinstance(value, float):
        return "fp32"
    raise TypeError(f"unexpected launch argument {type(value).__name__}")


@contextlib.contextmanager
def recording() -> Iterator[list[dict]]:
    """Record every launch of an interpreted Triton kernel while the block runs: the list
    yielded fills with the distinct specializations (kernel, argument types, constexpr values,
    launch options)."""
    from triton.runtime import interpreter

    seen: dict[str, dict] = {}
    found: list[dict] = []
    original = interpreter.InterpretedFunction.run

    def recorder(self, *args, grid, warmup, **kwargs):
        names = self.arg_names
        signature, constants, aligned = {}, {}, []
        for name, value in zip(names, args, strict=False):  # positional ones only
            kind = _type_of(value)
            if kind is None:
                constants[name] = value
            signature[name] = "constexpr" if kind is None else kind
            if _aligned(value):
                aligned.append(name)
        for name, value in kwargs.items():
            if name in names:
                signature[name] = "constexpr"
                constants[name] = value
        options = {k: v for k, v in kwargs.items() if k not in names}
        entry = {"module": self.fn.__module__, "kernel": self.fn.__name__,
                 "signature": signature, "constants": constants, "aligned": aligned,
                 "options": options}
        key = json.dumps(entry, sort_keys=True)
        if key not in seen:
            seen[key] = entry
            found.append(entry)
        return original(self, *args, grid=grid, warmup=warmup, **kwargs)

    interpreter.InterpretedFunction.run = recorder
    try:
        yield found
    finally:
        interpreter.InterpretedFunction.run = original


def _aligned(value) -> bool:
    """Whether the JIT would mark a launch argument divisible by 16 (a tensor whose address
    is, an integer that is): the specialization that lets it vectorize loads and stores."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.data_ptr() % 16 == 0
    return isinstance(value, int) and not isinstance(value, bool) and value % 16 == 0


def _record(tests: list[str], out: Path) -> int:
    """Phase 1: run the pytest selection ``tests`` under the interpreter, writing the
    distinct specializations to ``out``."""
    import pytest

    with recording() as found:
        code = pytest.main(["-q", "-p", "no:cacheprovider", "-x", *tests])
    out.write_text(json.dumps(found, indent=1))
    return int(code)


def compile_in_subprocess(specs: list[dict], targets: str = "90"
                          ) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """Compile ``specs`` (from ``recording``) in a fresh process with the interpreter off (the
    kernels decorated for the compiler): the process (its output lists the failures, exit
    status 1 if any) and the specs with their ``traffic`` (bytes per element read and
    written, for a kernel with a ``BLOCK``), ``shared`` (bytes of shared memory per program)
    and ``conversions`` (layout changes in the TTGIR, which go through shared memory) where
    they compiled."""
    with tempfile.TemporaryDirectory() as tmp:
        path, out = Path(tmp) / "specs.json", Path(tmp) / "traffic.json"
        path.write_text(json.dumps(specs))
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        env.setdefault("TRITON_DEFAULT_FP_FUSION", "0")  # trainop passes its own option
        done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--phase",
                               "compile", "--specs", str(path), "--targets", targets,
                               "--traffic", str(out)],
                              cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        return done, json.loads(out.read_text()) if out.exists() else []


def _compile(specs: list[dict], targets: list[int]) -> list[dict]:
    """Phase 2: compile every specialization for every target; the failures. Each spec with a
    ``BLOCK`` gets its ``traffic`` (bytes per element, ``traffic``) on the first target, each
    its ``shared`` memory and layout ``conversions`` there."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    failures = []
    for spec in specs:
        kernel = getattr(importlib.import_module(spec["module"]), spec["kernel"])
        names = kernel.arg_names
        constexprs = {(names.index(k),): v for k, v in spec["constants"].items()}
        attrs = {(names.index(k),): [["tt.divisibility", 16]] for k in spec.get("aligned", ())
                 if k not in spec["constants"]}
        source = ASTSource(kernel, spec["signature"], constexprs=constexprs, attrs=attrs)
        for arch in targets:
            failure = {"kernel": f"{spec['module']}.{spec['kernel']}", "target": f"sm_{arch}",
                       "constants": spec["constants"], "signature": spec["signature"]}
            try:
                compiled = triton.compile(source, target=GPUTarget("cuda", arch, 32),
                                          options=spec["options"])
            except Exception as error:  # the compiler's own error, reported per kernel
                failures.append({**failure, "error": f"{type(error).__name__}: {error}"[:2000]})
                continue
            ptx = compiled.asm["ptx"]
            if "BLOCK" in spec["constants"] and "traffic" not in spec:
                spec["traffic"] = traffic(ptx, spec["constants"]["BLOCK"],
                                          compiled.metadata.num_warps)
            if "shared" not in spec:  # shared memory, and the layout changes that use it
                spec["shared"] = compiled.metadata.shared
                spec["conversions"] = compiled.asm["ttgir"].count("ttg.convert_layout")
            inexact = sorted({op for op in APPROXIMATE if op + " " in ptx})
            if inexact:
                failures.append({**failure, "error": "approximate float32 arithmetic in the "
                                 f"PTX: {', '.join(inexact)}"})
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", default="90,80",
                        help="CUDA compute capabilities, comma separated (default 90,80)")
    parser.add_argument("--tests", nargs="*", default=DEFAULT_TESTS,
                        help="pytest selection whose launches are recorded")
    parser.add_argument("--out", type=Path, help="write the failures as JSON here")
    parser.add_argument("--phase", choices=("all", "record", "compile"), default="all",
                        help=argparse.SUPPRESS)
    parser.add_argument("--specs", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--traffic", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        importlib.import_module("triton")
    except ImportError:
        print("triton is not installed: nothing to compile", file=sys.stderr)
        return 3
    targets = [int(t) for t in args.targets.split(",") if t.strip()]
    if args.phase == "record":
        return _record(args.tests, args.specs)
    if args.phase == "compile":
        specs = json.loads(args.specs.read_text())
        started = time.perf_counter()
        failures = _compile(specs, targets)
        print(f"compiled {len(specs)} specializations x {len(targets)} targets in "
              f"{time.perf_counter() - started:.0f} s: {len(failures)} failed")
        for failure in failures:
            print(f"FAILED {failure['kernel']} {failure['target']} {failure['constants']} "
                  f"{failure['signature']}")
            print("\n".join("  " + line for line in failure["error"].splitlines()[:20]))
        if args.out:
            args.out.write_text(json.dumps(failures, indent=1))
        if args.traffic:
            args.traffic.write_text(json.dumps(specs, indent=1))
        return 1 if failures else 0
    with tempfile.TemporaryDirectory() as tmp:
        specs = Path(tmp) / "specs.json"
        env = {**os.environ, "TRITON_INTERPRET": "1"}
        me = [sys.executable, str(Path(__file__).resolve())]
        recorded = subprocess.run([*me, "--phase", "record", "--specs", str(specs), "--tests",
                                   *args.tests], cwd=ROOT, env=env, check=False)
        found = json.loads(specs.read_text()) if specs.exists() else []
        print(f"recorded {len(found)} distinct specializations (pytest exit "
              f"{recorded.returncode})")
        if not found:
            return 2
        env.pop("TRITON_INTERPRET")
        env.setdefault("TRITON_DEFAULT_FP_FUSION", "0")  # trainop passes its own option
        compiled = subprocess.run([*me, "--phase", "compile", "--specs", str(specs),
                                   "--targets", args.targets,
                                   *(["--out", str(args.out)] if args.out else [])],
                                  cwd=ROOT, env=env, check=False)
        return compiled.returncode or (1 if recorded.returncode else 0)


if __name__ == "__main__":
    sys.exit(main())
