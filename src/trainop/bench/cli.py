"""``trainop bench``: command-line options, their validation, and the run."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable

import torch

from trainop.bench.boundary import render_boundary, run_boundary_benchmark
from trainop.bench.candidates import AUTO, FLAT
from trainop.bench.fsdp2 import render_fsdp2, run_fsdp2_benchmark
from trainop.bench.gpu_stream import run_gpu_suite_command
from trainop.bench.gpu_suite import WORKLOAD_KEYS
from trainop.bench.host import render_host, run_host_benchmark
from trainop.bench.numerics import render_numerics, run_numerics_benchmark
from trainop.bench.pipeline import render_pipeline, run_pipeline_benchmark
from trainop.bench.report import render_markdown, write_json
from trainop.bench.runner import BenchConfig, run_benchmark
from trainop.bench.specs import SPECS
from trainop.bench.train_step import render_train_step, run_train_step_benchmark
from trainop.bench.updater import render_updater, run_updater_benchmark
from trainop.bench.workloads import WORKLOADS
from trainop.registry import OPTIMIZER_CLASSES, get_optimizer_class

__all__ = ["DEFAULT_SCALE", "add_parser", "run"]

#: The default quick configuration: workloads at a quarter of the issue's sizes (a few minutes
#: on 2 cores); ``--scale 1`` gives the issue's exact sizes.
DEFAULT_SCALE = 0.25
DTYPES = ("float32", "float64", "float16", "bfloat16")
KNOWN_IMPLEMENTATIONS = ("reference", "foreach", "fused", AUTO, FLAT)

DESCRIPTION = """\
Time optimizer steps of trainop's implementations against torch.optim (for-loop, foreach, fused)
and TensorFlow 1's graph-mode kernels, all in this process. Prints a headline table (each
workload's lead optimizer against its fastest peer), then, per workload, the median step time,
effective GB/s (the algorithm's bytes per parameter / time), percent of this machine's memory
bandwidth (probed in the same run), peak extra memory, and peer/ours ratios, then the
acceptance checks (their targets are in BENCHMARKS.md) and a verdict.

Verdict and exit status: the checks' thresholds are stated for --scale 1 with --repeats >= 10.
Such a run is binding: it ends "Verdict: PASS" (exit status 0) or "Verdict: FAIL" (exit status
1, the failed checks listed). At any other scale or with fewer repeats every check is
informational: the run ends "Verdict: INFORMATIONAL" with what met and missed its target, and
exit status 0. Checks that could not be measured (n/a) neither pass nor fail.

Workloads: (a) one tensor of 32M parameters; (b) 400 tensors, 8M in all; (c) 2000 tensors of
1000 (overhead-bound); (d) a 1M x 64 embedding, 1% of rows in a sparse gradient. --scale
multiplies the sizes (the tensor count for (c)); the default 0.25 is a quick run, --scale 1
gives the full sizes the targets are stated for."""


def _comma_list(kind: str, parse: Callable[[str], str],
                all_values: Callable[[], list[str]]) -> Callable[[str], list[str]]:
    def convert(text: str) -> list[str]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list of {kind}")
        if items == ["all"]:
            return all_values()
        out = []
        for item in items:
            value = parse(item)
            if value not in out:
                out.append(value)
        return out
    return convert


def _optimizer(name: str) -> str:
    try:
        cls_name = get_optimizer_class(name).__name__
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if cls_name not in SPECS:
        raise argparse.ArgumentTypeError(f"{cls_name} has no benchmark spec (benchmarkable: "
                                         f"{', '.join(sorted(SPECS))})")
    return cls_name


def _known_implementations() -> list[str]:
    names = list(KNOWN_IMPLEMENTATIONS)
    for cls in OPTIMIZER_CLASSES.values():
        names += [n for n in getattr(cls, "IMPLEMENTATIONS", ()) if n not in names]
    return names


def _implementation(name: str) -> str:
    if name not in _known_implementations():
        raise argparse.ArgumentTypeError(f"unknown implementation {name!r}; valid: "
                                         f"{', '.join(_known_implementations())}")
    return name


def _workload(key: str) -> str:
    key = key.lower().strip("()")
    if key not in WORKLOADS:
        raise argparse.ArgumentTypeError(f"unknown workload {key!r}; valid: "
                                         f"{', '.join(WORKLOADS)}")
    return key


def _gpu_workloads(text: str) -> list[str]:
    prefixes = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [p for p in prefixes if not any(k.startswith(p) for k in WORKLOAD_KEYS)]
    if not prefixes or unknown:
        raise argparse.ArgumentTypeError(f"expected comma-separated prefixes of "
                                         f"{', '.join(WORKLOAD_KEYS)}; got {text!r}")
    return prefixes


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text}")
    return value


def _memory_bytes() -> int:
    """This machine's physical memory (a large number where it cannot be read)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return 1 << 50


#: Bytes the largest workload needs per unit of --scale: (a)'s 32M float32 parameters held
#: about 8 times over (parameter, gradient, two slots, the peers' copies).
_SCALE_BYTES = 32 * 2**20 * 4 * 8


def _scale(text: str) -> float:
    value = _positive_float(text)
    need, have = value * _SCALE_BYTES, _memory_bytes()
    if need > have:
        raise argparse.ArgumentTypeError(
            f"expected a scale whose workloads fit in memory (at most {have / _SCALE_BYTES:.3g} "
            f"here: workload (a) needs about {need / 2**30:,.0f} GiB at --scale {text}, this "
            f"machine has {have / 2**30:,.0f} GiB)")
    return value


def _probe_mib(text: str) -> int:
    value = _int_at_least(1)(text)
    limit = _memory_bytes() // 4 >> 20
    if value > limit:
        raise argparse.ArgumentTypeError(f"expected an integer in [1, {limit}] (a quarter of "
                                         f"this machine's memory), got {value}")
    return value


def _int_at_least(minimum: int) -> Callable[[str], int]:
    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        return value
    return convert


def _device(text: str) -> str:
    try:
        device = torch.device(text)
    except RuntimeError:
        raise argparse.ArgumentTypeError(f"not a device: {text!r}") from None
    if device.type not in ("cpu", "cuda"):
        raise argparse.ArgumentTypeError(f"expected cpu or cuda[:N], got {text!r}")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise argparse.ArgumentTypeError("CUDA is not available on this machine")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise argparse.ArgumentTypeError(f"no such CUDA device: {text!r}")
    return str(device)


def _json_path(text: str) -> str:
    if text == "-":
        return text
    folder = os.path.dirname(os.path.abspath(text))
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"directory does not exist: {folder}")
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"is a directory: {text}")
    if os.path.exists(text) and not os.path.isfile(text):
        raise argparse.ArgumentTypeError(f"is not a regular file: {text}")
    try:  # a directory that takes no new file (/proc, /sys, read-only) fails now, not at the end
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise argparse.ArgumentTypeError(f"cannot write in {folder}: "
                                         f"{error.strerror or error}") from None
    return text


def _jsonl_path(text: str) -> str:
    if text == "-":
        raise argparse.ArgumentTypeError("expected a file path ('-' is not one: the lines are "
                                         "appended to a file as the run goes)")
    return _json_path(text)


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``bench`` to a subcommand parser."""
    p = subparsers.add_parser("bench", help="benchmark optimizer steps against torch.optim and TF1",
                              description=DESCRIPTION,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--optimizers", type=_comma_list("optimizers", _optimizer, lambda: list(SPECS)),
                   default=None, metavar="LIST",
                   help="registry names, comma-separated (e.g. adam,momentum,sgd), or 'all' "
                        "(default: all)")
    p.add_argument("--implementations", default=None, metavar="LIST",
                   type=_comma_list("implementations", _implementation, _known_implementations),
                   help="trainop implementations: reference, foreach, fused, native, auto "
                        "(implementation=None), flat (auto after trainop.flatten) "
                        "(default: all each optimizer offers, auto, and flat on dense "
                        "workloads)")
    p.add_argument("--workloads", type=_comma_list("workloads", _workload, lambda: list(WORKLOADS)),
                   default=None, metavar="LIST", help="subset of a,b,c,d (default: all; naming "
                   "them with --device cuda runs these instead of the GPU suite)")
    p.add_argument("--scale", type=_scale, default=DEFAULT_SCALE,
                   help=f"size multiplier; 1 = the full sizes (default: {DEFAULT_SCALE})")
    p.add_argument("--dtype", choices=DTYPES, default="float32", help="(default: float32)")
    p.add_argument("--device", type=_device, default="cpu", help="cpu or cuda[:N] (default: cpu)")
    p.add_argument("--repeats", type=_int_at_least(1), default=10,
                   help="timed steps per run, median reported (default: 10; binding checks "
                        "need >= 10)")
    p.add_argument("--warmup", type=_int_at_least(0), default=3,
                   help="untimed steps first (default: 3)")
    p.add_argument("--seed", type=_int_at_least(0), default=0, help="data seed (default: 0)")
    p.add_argument("--probe-mib", type=_probe_mib, default=128,
                   help="bandwidth probe buffer size in MiB (default: 128)")
    p.add_argument("--json", type=_json_path, default=None, metavar="PATH",
                   help="also write the full result as JSON ('-': JSON on stdout instead of "
                        "the tables)")
    p.add_argument("--no-tf", action="store_true", help="skip TensorFlow 1 kernel peers")
    p.add_argument("--no-torch", action="store_true", help="skip torch.optim peers")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory step")
    p.add_argument("--sequential", action="store_true",
                   help="time one candidate after another instead of interleaving the "
                        "candidates of each comparison round by round")
    p.add_argument("--pipeline", action="store_true",
                   help="instead of the optimizer workloads, compare the gradient pipeline "
                        "(unscale, finite check, clip at 1.0, Adam) with torch's GradScaler "
                        "recipe on (a) and (b) (uses --scale, --repeats as steps per round, "
                        "--warmup, --probe-mib, --json)")
    p.add_argument("--numerics", action="store_true",
                   help="instead of the optimizer workloads, time a transformer's training "
                        "step (d128 x 2 layers and d512 x 6) plain, inside "
                        "trainop.check_numerics and under torch.autograd.detect_anomaly (uses "
                        "--repeats as steps per round, --warmup, --json); exit status 1 if the "
                        "check costs more than 1.2x (d128) or 1.1x (d512)")
    p.add_argument("--train-step", action="store_true",
                   help="instead of the optimizer workloads, compare a training step through "
                        "trainop.optimize_loss with torch's GradScaler + clip_grad_norm_ + "
                        "fused Adam recipe (post-backward part and whole step of a 6.3M "
                        "parameter transformer; fixed overhead on a 50-tensor model); uses "
                        "--repeats as steps per round, --warmup, --json; exit status 1 if a "
                        "target is missed")
    p.add_argument("--updater", action="store_true",
                   help="instead of the optimizer workloads, compare a whole training step "
                        "through trainop.Updater with the equivalent hand-built "
                        "GradientPipeline step (uses --repeats as steps per round, --warmup, "
                        "--json); exit status 1 above 1.05x")
    p.add_argument("--fsdp2", action="store_true",
                   help="instead of the optimizer workloads, time trainop's Adam step against "
                        "torch.optim.Adam(fused=True) under FSDP2 on 2 gloo ranks (uses "
                        "--repeats as steps per round, --warmup, --json); exit status 1 above "
                        "1.0x")
    p.add_argument("--boundary", action="store_true",
                   help="instead of the optimizer workloads, compare the native step, whose C "
                        "boundary checks every tensor handed to C, with the same step reading "
                        "only data pointers and element counts, on (a)-(d) (uses --scale, "
                        "--repeats as steps per round, --warmup, --json); exit status 1 above "
                        "1.05x")
    p.add_argument("--gpu-suite", action="store_true",
                   help="instead of the optimizer workloads, the GPU suite: trainop's "
                        "Triton kernels (implementation='triton') and today's path against "
                        "torch's fused/foreach Adam, torch's post-backward recipe, optax under "
                        "jax.jit and a device-to-device copy, with their targets (the "
                        "default with --device cuda; on the CPU its triton rows need "
                        "TRITON_INTERPRET=1; uses --device, --scale, --repeats as rounds, "
                        "--warmup, --json, --jsonl, --gpu-workloads)")
    p.add_argument("--gpu-workloads", metavar="LIST", default=None, type=_gpu_workloads,
                   help="with the GPU suite: only the workloads whose key starts with one of "
                        "these (adam_1x256M, adam_400, adam_2000, post_backward, mixed_bf16, "
                        "other_<class>, captured_step; e.g. adam,other)")
    p.add_argument("--jsonl", type=_jsonl_path, default=None, metavar="PATH",
                   help="with the GPU suite: append one JSON line per workload to PATH, "
                        "flushed as each workload finishes (a run stopped by a time limit "
                        "keeps what it measured; on SIGINT it also prints the table so far "
                        "and exits with status 130)")
    p.add_argument("--host", action="store_true",
                   help="instead of the optimizer workloads, the Triton path's host cost: "
                        "launches per step and host microseconds per added tensor of Adam "
                        "(400, 2,000 tensors) and the post-backward pipeline (292, 2,000) under "
                        "Triton's interpreter with no-op launches (uses --repeats as steps per "
                        "round, --warmup, --json); exit status 1 if a target is missed")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.set_defaults(func=run)
    return p


#: The single-comparison modes: flag -> (run it from the parsed args, render its result); the GPU
#: suite's is ``gpu_stream.run_gpu_suite_command`` (results streamed, kept on SIGINT). A
#: result's ``passed`` (absent: informational) gives the exit status.
_MODES = {
    "host": (lambda a: run_host_benchmark(steps=a.repeats, warmup=a.warmup), render_host),
    "fsdp2": (lambda a: run_fsdp2_benchmark(steps=a.repeats, warmup=a.warmup), render_fsdp2),
    "boundary": (lambda a: run_boundary_benchmark(scale=a.scale, steps=a.repeats,
                                                  warmup=a.warmup), render_boundary),
    "updater": (lambda a: run_updater_benchmark(steps=a.repeats, warmup=a.warmup),
                render_updater),
    "train_step": (lambda a: run_train_step_benchmark(steps=a.repeats, warmup=a.warmup),
                   render_train_step),
    "numerics": (lambda a: run_numerics_benchmark(steps=a.repeats, warmup=a.warmup),
                 render_numerics),
    "gpu_suite": None,
    "pipeline": (lambda a: run_pipeline_benchmark(scale=a.scale, steps=a.repeats,
                                                  warmup=a.warmup, probe_mib=a.probe_mib),
                 render_pipeline),
}


def _wrote_json(result: dict, path: str) -> bool:
    """Write the JSON result; a failure (a full disk) is one line on stderr, not a traceback."""
    try:
        write_json(result, path)
    except OSError as error:
        print(f"trainop bench: cannot write --json {path}: {error.strerror or error}",
              file=sys.stderr)
        return False
    return True


def run(args: argparse.Namespace) -> int:
    """Run ``trainop bench`` with parsed ``args``; returns the exit status."""
    if (args.device.startswith("cuda") and args.workloads is None
            and not any(getattr(args, m) for m in _MODES)):
        args.gpu_suite = True  # --device cuda alone: the GPU suite (#31)
    mode = next((m for m in _MODES if getattr(args, m)), None)
    if args.jsonl is not None and mode != "gpu_suite":
        print("trainop bench: --jsonl works with the GPU suite only (--gpu-suite, or "
              "--device cuda without --workloads)", file=sys.stderr)
        return 2
    if mode == "gpu_suite":
        return run_gpu_suite_command(args, write_json=_wrote_json)
    if mode is not None:
        run_mode, render = _MODES[mode]
        result = run_mode(args)
        if args.json is not None and not _wrote_json(result, args.json):
            return 1
        if args.json != "-":
            sys.stdout.write(render(result))
        return 0 if result.get("passed", True) else 1
    config = BenchConfig(
        optimizers=args.optimizers or list(SPECS),
        implementations=args.implementations,
        workloads=args.workloads or list(WORKLOADS),
        scale=args.scale,
        dtype=args.dtype,
        device=args.device,
        repeats=args.repeats,
        warmup=args.warmup,
        seed=args.seed,
        torch_peers=not args.no_torch,
        tf1_peers=not args.no_tf,
        memory=not args.no_memory,
        interleave=not args.sequential,
        probe_mib=args.probe_mib,
        progress=not args.no_progress,
    )
    result = run_benchmark(config)
    if args.json is not None and not _wrote_json(result, args.json):
        return 1
    if args.json != "-":
        sys.stdout.write(render_markdown(result))
    return result["verdict"]["exit_status"]
