"""The preflight of ``scripts/gpu_check.sh``: what the machine has, on stdout (the script's
``env.txt``), and whether the check can run there at all.

Prints nvidia-smi's view of the card (the fields in ``GPU_CHECK_NVSMI_FIELDS``: name, clocks,
power limit...), the versions of Python and of the packages the check uses, the C compiler
Triton builds its launchers with (``$CC``, else ``gcc``, else ``clang``, as
``triton/runtime/build.py`` picks it) and the one trainop's native kernels use (``$CC``, else
``cc``), the ``Python.h`` those launchers include (where Triton looks for it), how full Triton's
cache is, and the CUDA device torch sees. Each reason the check cannot run (no CUDA device, no C
compiler, no ``Python.h``, torch not importable) is one line ``gpu_check: ...`` on stderr, and
the exit status is then 3. Standard library only (it runs before anything is installed).
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shlex
import shutil
import subprocess
import sys
import sysconfig

PACKAGES = ("torch", "triton", "jax", "jaxlib", "optax", "numpy", "setuptools", "pytest",
            "pytest-xdist", "pytest-timeout")


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _nvidia_smi() -> str:
    fields = os.environ.get("GPU_CHECK_NVSMI_FIELDS", "name")
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"not available ({type(exc).__name__})"
    return "\n  " + (out.stdout or out.stderr).strip().replace("\n", "\n  ")


def _compiler(cmd: list[str]) -> str | None:
    """``cmd``'s program and its ``--version``'s first line; None when it is not a program."""
    path = shutil.which(cmd[0]) if cmd else None
    if path is None:
        return None
    try:
        first = subprocess.run([path, *cmd[1:], "--version"], capture_output=True, text=True,
                               timeout=10).stdout.splitlines()[:1]
    except (OSError, subprocess.TimeoutExpired):
        first = []
    return f"{path} ({first[0] if first else 'no --version'})"


def _python_h() -> str:
    """Where Triton's launcher build looks for ``Python.h``."""
    scheme = sysconfig.get_default_scheme()
    if scheme == "posix_local":  # Debian's; Triton uses posix_prefix then
        scheme = "posix_prefix"
    return os.path.join(sysconfig.get_paths(scheme=scheme)["include"], "Python.h")


def main() -> int:
    problems = []
    print(f"nvidia-smi: {_nvidia_smi()}")
    print(f"python: {platform.python_version()} ({sys.executable})")
    for name in PACKAGES:
        print(f"{name}: {_version(name)}")
    cc = shlex.split(os.environ.get("CC", ""))
    triton_cc = _compiler(cc) if cc else (_compiler(["gcc"]) or _compiler(["clang"]))
    print(f"C compiler for Triton ($CC, else gcc, else clang): {triton_cc or 'none'}")
    print(f"C compiler for trainop native ($CC, else cc): {_compiler(cc or ['cc']) or 'none'}")
    if triton_cc is None:
        where = (f"CC={os.environ['CC']!r} is not a program" if cc
                 else "neither gcc nor clang on PATH")
        problems.append(f"no C compiler ({where}): Triton builds a launcher for each kernel "
                        "signature with one")
    header = _python_h()
    present = os.path.isfile(header)
    print(f"Python.h: {header} ({'present' if present else 'MISSING'})")
    if not present:
        problems.append(f"no Python.h at {header} (Python's development headers): Triton "
                        "compiles its launchers against it")
    cache = os.environ.get("TRITON_CACHE_DIR") or os.path.expanduser("~/.triton/cache")
    entries = len(os.listdir(cache)) if os.path.isdir(cache) else 0
    print(f"triton cache: {cache} ({entries} entries{'' if entries else ', cold'})")
    try:
        import torch
    except Exception as exc:  # a broken install as much as a missing one
        problems.append(f"torch not importable: {type(exc).__name__}: {exc}")
    else:
        if torch.cuda.is_available():
            print(f"cuda: {torch.cuda.get_device_name(0)}, capability "
                  f"{torch.cuda.get_device_capability(0)}, CUDA {torch.version.cuda}, "
                  f"torch {torch.__version__}")
        else:
            problems.append(f"no CUDA device (torch {torch.__version__}, CUDA build "
                            f"{torch.version.cuda}): this check needs a GPU")
    for problem in problems:
        print(f"gpu_check: {problem}", file=sys.stderr)
    return 3 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
