"""``trainop doctor``: what this installation runs on, and what it will use.

Prints the versions (Python, torch, trainop, numpy; TensorFlow when installed; PyYAML,
tensorboard and matplotlib always, with the extra that installs each one missing; read from
their metadata without importing them), whether the native C kernels and
the C++ metadata reader build and load here (and why not), the build cache, and the
implementation each optimizer picks for float32 CPU parameters; then the GPU side: whether
Triton imports (and its version), whether ``TRITON_INTERPRET`` is set, whether CUDA is
available, and what each optimizer's ``auto`` picks for float32 CUDA parameters (asked of the
optimizer's own dispatch, so it is what a step would run; ``implementation="triton"`` is opt-in
until ``scripts/gpu_check.sh``, in trainop's source checkout (it runs the repository's CUDA
tests, so a wheel does not carry it), has passed on a GPU and its figures are in BENCHMARKS.md).
Exit status 0 when the native paths are in use, 1 when one of them is missing (the reason is
printed); the GPU lines are informational.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import sys

__all__ = ["add_parser", "run"]


#: Optional packages always reported, and what installs them (the extras of pyproject.toml).
_OPTIONAL = {
    "PyYAML": "YAML configs: a dependency of trainop, pip install pyyaml",
    "tensorboard": "summaries: pip install 'trainop[tensorboard]'",
    "matplotlib": "learning-rate plots: pip install 'trainop[plot]'",
}

#: Where the GPU check is: it runs the repository's CUDA tests, so it is not in the wheel.
GPU_CHECK = "scripts/gpu_check.sh (in trainop's source checkout, not in the wheel)"


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "doctor", help="versions, native kernels, and the implementation each optimizer uses",
        description=__doc__.partition("\n\n")[2],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace | None = None) -> int:
    import torch

    import trainop
    from trainop.kernels import native
    from trainop.kernels.native import metadata
    from trainop.kernels.native.build import cache_dir

    out = sys.stdout.write
    out(f"trainop {trainop.__version__} ({os.path.dirname(trainop.__file__)})\n")
    out(f"python {platform.python_version()}, torch {torch.__version__}, "
        f"numpy {_version('numpy')}, {torch.get_num_threads()} threads\n")
    for name in ("tensorflow-cpu", "tensorflow"):  # the oracle of --compare-tf, when there
        if _version(name) != "not installed":
            out(f"  {name}: {_version(name)}\n")
    for name, needed_by in _OPTIONAL.items():
        version = _version(name)
        out(f"  {name}: {version}"
            + (f" ({needed_by})" if version == "not installed" else "") + "\n")
    problems = 0
    for label, reason in (("native C kernels", native.unavailable_reason()),
                          ("metadata reader (C++)", metadata.unavailable_reason())):
        if reason is None:
            out(f"{label}: built and loaded\n")
        else:
            problems += not reason.startswith("switched off")
            out(f"{label}: NOT in use: {reason}\n")
    out(f"build cache: {cache_dir()}\n")
    out("implementation each optimizer picks for float32 CPU parameters:\n")
    out("".join(_picks(trainop.OPTIMIZER_CLASSES, torch.device("cpu"), offers=True)))
    out(f"triton: {_triton()}\n")
    out(f"TRITON_INTERPRET: {_interpret_line()}\n")
    out("CUDA: " + (f"{torch.cuda.device_count()} device(s), {torch.cuda.get_device_name(0)}"
                    if torch.cuda.is_available() else "not available") + "\n")
    cuda = _picks(trainop.OPTIMIZER_CLASSES, torch.device("cuda"), offers=False)
    out("implementation auto picks for float32 CUDA parameters"
        + ("" if any(" triton" in line for line in cuda) else
           " (Triton only when asked for, implementation='triton': opt-in until "
           f"{GPU_CHECK} has passed on a GPU)") + ":\n" + "".join(cuda))
    return 1 if problems else 0


def _interpret_line() -> str:
    """``TRITON_INTERPRET`` as the Triton path reads it (``kernels.triton.interpreted``): set
    to a true value, the kernels run on CPU tensors; any other value leaves them on CUDA."""
    from trainop.kernels import triton

    value = os.environ.get("TRITON_INTERPRET")
    if value is None:
        return "not set"
    if triton.interpreted():
        return f"{value!r} (Triton kernels on CPU tensors)"
    return f"{value!r} (off: Triton kernels on CUDA tensors only)"


def _picks(classes: dict, device, *, offers: bool) -> list[str]:
    """One line per optimizer: what its ``auto`` (``implementation=None``) picks for float32
    parameters on ``device``, asked of its dispatch (no tensor is put on ``device``)."""
    import torch

    lines = []
    for name, cls in sorted(classes.items()):
        p = torch.nn.Parameter(torch.zeros(4))
        opt = _construct(cls, p)
        hp = opt._step_hyper(opt.param_groups[0])
        choice = opt._choose_implementation(torch.float32, device, hp.for_tensor(p))
        tail = f" (offers {', '.join(cls.IMPLEMENTATIONS)})" if offers else ""
        lines.append(f"  {name:34s} {choice:9s}{tail}".rstrip() + "\n")
    return lines


def _triton() -> str:
    """Whether Triton imports here, and its version (trainop's kernels import it lazily)."""
    try:
        import triton
    except Exception as exc:  # ImportError, or a broken install
        return f"not importable ({type(exc).__name__}: {exc})".splitlines()[0][:200]
    return f"{getattr(triton, '__version__', _version('triton'))} (importable)"


#: Values for the required constructor arguments (TF's signatures have a few).
_REQUIRED = {"learning_rate": 0.1, "momentum": 0.9, "weight_decay": 0.01}


def _construct(cls: type, p):
    """An instance of ``cls`` on parameter ``p``, its required arguments filled in."""
    import inspect

    import torch

    kwargs = {}
    for name, param in inspect.signature(cls.__init__).parameters.items():
        if name in ("self", "params") or param.default is not inspect.Parameter.empty \
                or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        kwargs[name] = (torch.zeros((), dtype=torch.int64) if name == "global_step"
                        else _REQUIRED[name])
    return cls(params=[p], **kwargs)
