"""The bulk metadata reader (``csrc/metadata.cpp``): a small torch extension the step plan
uses to read every gradient, data pointer and element count of a step in one call per list.

A step over N tensors must check each one before giving raw pointers to the C kernels
(gradient present, strided, of its parameter's dtype and shape; contiguous; where its data
lives; how many elements). From Python that is a handful of attribute reads per tensor,
0.2-1 us per tensor in all depending on the caches, which dominates a step over thousands of
small tensors; the extension reads the same through torch's C++ API in a few nanoseconds per
tensor. It is compiled once per machine, torch version and Python version with the system C++
compiler (``CXX``, default ``c++``; about 10 s) against the installed torch's headers and
cached next to the kernels (``build.cache_dir``). ``TRAINOP_NATIVE=0`` switches it off with the
kernels; where it cannot be built, ``load()`` is ``None`` and the same reads run in Python, and
one warning (``NativeFallbackWarning``) says why: the compiler's first error, per standard tried.

It builds against every torch trainop supports (``kernels.torch_version``). torch 2.14's
headers need C++20 (``std::strong_ordering``, ``requires``; under ``-std=c++17`` they also fail
on an autograd node pointer's ``operator!=``, whose only candidates are ``c10::Argument``'s from
``ATen/core/function_schema.h``), and the older ones accept it (2.4.1, 2.6.0, 2.13.0 built with
gcc 12); so C++20 is tried first, then C++17 (a compiler without C++20, an older torch).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import shlex
import subprocess
import sysconfig
from pathlib import Path
from types import ModuleType

import torch

from trainop.kernels.native._once import BuiltOnce
from trainop.kernels.native.build import (
    SOURCE_DIR,
    CompileError,
    build_key,
    cache_dir,
    compile_shared,
)

__all__ = ["READER", "STANDARDS", "load", "unavailable_reason"]

SOURCE = SOURCE_DIR / "metadata.cpp"
FLAGS = ("-O2", "-shared", "-fPIC", "-w")
#: The C++ standards tried, in order (see the module's doc).
STANDARDS = ("-std=c++20", "-std=c++17")


def _command(compiler: list[str], flags: tuple[str, ...]) -> list[str]:
    torch_dir = Path(torch.__file__).parent
    include = torch_dir / "include"
    library = torch_dir / "lib"
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    return [*compiler, *flags, f"-D_GLIBCXX_USE_CXX11_ABI={abi}", f"-I{include}",
            f"-I{include / 'torch' / 'csrc' / 'api' / 'include'}",
            f"-I{sysconfig.get_paths()['include']}", str(SOURCE), f"-L{library}", "-lc10",
            "-ltorch", "-ltorch_cpu", "-ltorch_python", f"-Wl,-rpath,{library}"]


def _build(compiler: list[str], suffix: str) -> Path:
    """The cached build for the first standard that compiles (building it if needed)."""
    failures = []
    for standard in STANDARDS:
        flags = (*FLAGS, standard)
        key = build_key(compiler, [SOURCE], (" ".join(flags), torch.__version__, suffix))
        target = cache_dir() / f"trainop_metadata-{key}{suffix}"
        if target.exists():
            return target
        try:
            compile_shared(target, _command(compiler, flags))
            return target
        except CompileError as error:
            failures.append(f"{standard}: {error.first_error()}")
    raise RuntimeError(f"`{' '.join(compiler)}` could not compile {SOURCE.name} against torch "
                       f"{torch.__version__}'s headers ({'; '.join(failures)})")


def _build_and_import() -> ModuleType:
    compiler = shlex.split(os.environ.get("CXX", "c++"))
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    target = _build(compiler, suffix)
    spec = importlib.util.spec_from_file_location("trainop_metadata", target)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {target}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


READER = BuiltOnce(_build_and_import, "the metadata reader could not be built or imported",
                   (OSError, ImportError, RuntimeError, subprocess.SubprocessError),
                   "steps read their tensors' metadata in Python instead (1.5-7x slower steps "
                   "on many small tensors)")
#: The reader (built on the first call), or ``None`` if it cannot be had.
load = READER.get
#: ``None`` if the reader loads, else why not.
unavailable_reason = READER.unavailable_reason
