"""The first use of the native kernels compiles them (15 s to minutes) and says so, once per
process, on stderr; a process that finds them cached says nothing.

The subprocess runs with a fresh cache directory and a stand-in compiler (a script that writes
an empty library, so the run is quick): the C kernels' two attempts and the metadata reader's
build all compile, one message is printed, and the optimizers fall back to Python as they do
where no compiler works.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

from trainop.kernels.native import build

MESSAGE = "trainop: compiling its native CPU kernels"
SCRIPT = textwrap.dedent("""
    import warnings, torch, trainop
    warnings.simplefilter("ignore")
    for cls in (trainop.AdamOptimizer, trainop.MomentumOptimizer):
        w = torch.nn.Parameter(torch.ones(3))
        opt = cls([w], lr=0.1, **({"momentum": 0.9} if cls is trainop.MomentumOptimizer else {}))
        for _ in range(2):
            w.grad = torch.ones(3)
            opt.step()
    print(float(w[0]))
""")


def _stand_in_compiler(folder: Path) -> str:
    path = folder / "cc"
    path.write_text('#!/bin/sh\n[ "$1" = --version ] && { echo stand-in 1; exit 0; }\n'
                    'while [ $# -gt 1 ]; do [ "$1" = -o ] && : > "$2"; shift; done\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_a_fresh_cache_says_once_that_it_compiles(tmp_path):
    compiler = _stand_in_compiler(tmp_path)
    env = {**os.environ, "TRAINOP_CACHE_DIR": str(tmp_path / "cache"), "CC": compiler,
           "CXX": compiler, "TRAINOP_NATIVE": "1"}
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert abs(float(done.stdout) - 0.71) < 1e-6  # momentum: 1 - 0.1 * 1 - 0.1 * (0.9 + 1)
    assert done.stderr.count(MESSAGE) == 1, done.stderr
    assert str(tmp_path / "cache") in done.stderr


def test_compile_shared_says_it_once_per_process(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(build, "_announced", type(build._announced)())
    build.compile_shared(tmp_path / "a.so", ["true"])
    build.compile_shared(tmp_path / "b.so", ["true"])
    err = capsys.readouterr().err
    assert err.count(MESSAGE) == 1 and str(tmp_path) in err
