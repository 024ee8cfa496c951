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
kernels; where it cannot be built, ``load()`` is ``None`` and the same reads run in Python.
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
from trainop.kernels.native.build import SOURCE_DIR, build_key, cache_dir, compile_shared

__all__ = ["READER", "load", "unavailable_reason"]

SOURCE = SOURCE_DIR / "metadata.cpp"
FLAGS = ("-O2", "-shared", "-fPIC", "-std=c++17", "-w")



def _command(compiler: list[str]) -> list[str]:
    torch_dir = Path(torch.__file__).parent
    include = torch_dir / "include"
    library = torch_dir / "lib"
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    return [*compiler, *FLAGS, f"-D_GLIBCXX_USE_CXX11_ABI={abi}", f"-I{include}",
            f"-I{include / 'torch' / 'csrc' / 'api' / 'include'}",
            f"-I{sysconfig.get_paths()['include']}", str(SOURCE), f"-L{library}", "-lc10",
            "-ltorch", "-ltorch_cpu", "-ltorch_python", f"-Wl,-rpath,{library}"]


def _build_and_import() -> ModuleType:
    compiler = shlex.split(os.environ.get("CXX", "c++"))
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    key = build_key(compiler, [SOURCE], (" ".join(FLAGS), torch.__version__, suffix))
    target = cache_dir() / f"trainop_metadata-{key}{suffix}"
    if not target.exists():
        compile_shared(target, _command(compiler))
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
