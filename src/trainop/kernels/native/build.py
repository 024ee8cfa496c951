"""Compiling and loading the single-pass CPU kernels (``csrc/``) with the system C compiler.

The library is built once per machine and source version into a cache directory
(``$TRAINOP_CACHE_DIR``, else ``$XDG_CACHE_HOME/trainop``, else ``~/.cache/trainop``) and
loaded with ``ctypes``; the file name carries a hash of the sources, the compiler's identity,
the flags and the CPU, so a changed source or another machine never loads a stale build.
Set ``TRAINOP_NATIVE=0`` to switch the kernels off; ``CC`` names the compiler (default
``cc``). Flags: ``-O3 -march=native -fopenmp`` for vectorised, multi-threaded loops, with
``-ffp-contract=off`` (no fused multiply-add, so each operation rounds as torch's do) and
``-fno-math-errno`` and ``-fno-trapping-math`` (let ``sqrt`` and branches vectorise; floating-point
traps are off in Python anyway, and no result changes). A process that compiles says so once
on stderr (the first use would otherwise look like a hang).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from trainop.kernels.native._once import BuiltOnce

__all__ = ["ABI_VERSION", "KERNELS", "CompileError", "load", "unavailable_reason"]

ABI_VERSION = 2
SOURCE_DIR = Path(__file__).parent / "csrc"
BASE_FLAGS = ("-O3", "-fopenmp", "-fPIC", "-shared", "-ffp-contract=off", "-fno-math-errno",
              "-fno-trapping-math", "-std=c99")
NATIVE_FLAGS = ("-march=native",)


def cache_dir() -> Path:
    explicit = os.environ.get("TRAINOP_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "trainop"


def _compiler() -> list[str]:
    return shlex.split(os.environ.get("CC", "cc"))


def _cpu_identity() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    keep = [line for line in text.splitlines()
            if line.split(":")[0].strip() in ("model name", "flags", "Features", "CPU part")]
    return "\n".join(sorted(set(keep)))


def build_key(compiler: list[str], sources: list[Path], parts: tuple[str, ...]) -> str:
    """A short hash of the sources, the compiler's identity and ``parts`` (flags, versions)."""
    digest = hashlib.sha256()
    for path in sources:
        digest.update(path.name.encode() + path.read_bytes())
    version = subprocess.run([*compiler, "--version"], capture_output=True, text=True,
                             timeout=60)
    for part in (version.stdout, platform.machine(), *parts):
        digest.update(part.encode())
    return digest.hexdigest()[:16]


def _build_key(flags: tuple[str, ...]) -> str:
    return build_key(_compiler(), sorted(SOURCE_DIR.glob("*.[ch]")),
                     (" ".join(flags), _cpu_identity(), str(ABI_VERSION)))


class CompileError(RuntimeError):
    """The compiler failed: ``command`` exited with ``returncode``, writing ``stderr``."""

    def __init__(self, command: list[str], returncode: int, stderr: str) -> None:
        super().__init__(f"`{' '.join(command)}` failed: {stderr.strip()[-2000:]}")
        self.command, self.returncode, self.stderr = command, returncode, stderr

    def first_error(self) -> str:
        """The compiler's first error line (``file:line:col: error: ...``), else its last
        line of output, else the exit status: the reason in one line."""
        lines = [line.strip() for line in self.stderr.splitlines() if line.strip()]
        for line in lines:
            if "error" in line.lower():
                return line
        return lines[-1] if lines else f"`{self.command[0]}` exited with {self.returncode}"


#: Set once this process said on stderr that it compiles (``_announce``).
_announced = threading.Event()
_announcing = threading.Lock()


def _announce(directory: Path) -> None:
    """Say once per process, on stderr, that the first use compiles: 15 s on a quiet machine
    and minutes on a busy one, which would otherwise look like a hang."""
    with _announcing:
        if _announced.is_set():
            return
        _announced.set()
    sys.stderr.write(f"trainop: compiling its native CPU kernels for this machine and torch "
                     f"(first use only, cached in {directory}); this takes from about 15 s to "
                     f"a few minutes. TRAINOP_NATIVE=0 skips it (slower steps).\n")
    sys.stderr.flush()


def compile_shared(target: Path, command: list[str]) -> None:
    """Run ``command`` with ``-o <temporary file>`` appended, then move the result to
    ``target`` atomically (a concurrent process sees all of it or nothing). The first call of
    a process says on stderr what is happening (``_announce``)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    _announce(target.parent)
    fd, partial = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        command = [*command, "-o", partial]
        result = subprocess.run(command, capture_output=True, text=True, timeout=300)
        if result.returncode != 0:
            raise CompileError(command, result.returncode, result.stderr)
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)


def _compile(target: Path, flags: tuple[str, ...]) -> None:
    compile_shared(target, [*_compiler(), *flags, str(SOURCE_DIR / "driver.c"), "-lm"])


def _build_and_load() -> ctypes.CDLL:
    errors = []
    for flags in (BASE_FLAGS + NATIVE_FLAGS, BASE_FLAGS):
        try:
            target = cache_dir() / f"trainop-kernels-{_build_key(flags)}.so"
            if not target.exists():
                _compile(target, flags)
            library = ctypes.CDLL(str(target))
            if library.trainop_abi_version() != ABI_VERSION:
                raise RuntimeError(f"{target} has another calling convention")
            return library
        except (OSError, RuntimeError, subprocess.SubprocessError) as error:
            errors.append(str(error))
    raise RuntimeError("; ".join(errors))


KERNELS = BuiltOnce(_build_and_load, "the C kernels could not be built or loaded",
                    (RuntimeError,), "optimizers run the slower foreach implementation instead")
#: The kernel library (built on first use), or ``None`` if it cannot be had.
load = KERNELS.get
#: ``None`` if the kernels load, else why not.
unavailable_reason = KERNELS.unavailable_reason
