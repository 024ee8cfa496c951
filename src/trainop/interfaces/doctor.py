"""``trainop doctor``: what this installation runs on, and what it will use.

Prints the versions (Python, torch, trainop, numpy, and TensorFlow / tensorboard / PyYAML when
installed, read from their metadata without importing them), whether the native C kernels and
the C++ metadata reader build and load here (and why not), the build cache, and the
implementation each optimizer picks for float32 CPU parameters. Exit status 0 when the native
paths are in use, 1 when one of them is missing (the reason is printed).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import sys

__all__ = ["add_parser", "run"]


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "doctor", help="versions, native kernels, and the implementation each optimizer uses",
        description=__doc__.split("\n\n", 1)[1],
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
    for extra in ("tensorflow-cpu", "tensorflow", "tensorboard", "PyYAML", "matplotlib"):
        version = _version(extra)
        if version != "not installed" or extra in ("tensorboard", "PyYAML"):
            out(f"  {extra}: {version}\n")
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
    for name, cls in sorted(trainop.OPTIMIZER_CLASSES.items()):
        p = torch.nn.Parameter(torch.zeros(4))
        opt = _construct(cls, p)
        hp = opt._step_hyper(opt.param_groups[0])
        choice = opt._choose_implementation(torch.float32, torch.device("cpu"),
                                            hp.for_tensor(p))
        out(f"  {name:34s} {choice:9s} (offers {', '.join(cls.IMPLEMENTATIONS)})\n")
    out("CUDA: " + (f"{torch.cuda.device_count()} device(s)" if torch.cuda.is_available()
                    else "not available") + "\n")
    return 1 if problems else 0


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
