"""The ``trainop`` command run in this process, as a subprocess would report it: for tests that
check what the command writes, its exit status and its files, not what a fresh interpreter
does (about 3 s of CPU saved a run, 8 s more where the run imports TensorFlow).

What a run may change for the tests after it is put back: the environment (``--compare-tf``
sets ``TF_CPP_MIN_LOG_LEVEL``), the working directory and the warnings filters; torch's global
state is checked by conftest's ``_torch_globals_restored``."""

from __future__ import annotations

import os
import subprocess
import warnings

from trainop.__main__ import main


def run_cli(capfd, *argv: str, cwd=None) -> subprocess.CompletedProcess:
    """``trainop *argv`` run in process; stdout and stderr as the descriptors received them
    (``capfd``: TensorFlow's C++ lines too), argparse's ``SystemExit`` as the exit status."""
    capfd.readouterr()  # what the test printed before is not the command's
    environ, cwd_before = dict(os.environ), os.getcwd()
    try:
        with warnings.catch_warnings():
            if cwd is not None:
                os.chdir(cwd)
            try:
                status = main(list(argv))
            except SystemExit as exc:  # --help, --version, a usage error
                status = exc.code if isinstance(exc.code, int) else (exc.code is not None)
    finally:
        os.chdir(cwd_before)
        os.environ.clear()
        os.environ.update(environ)
    out, err = capfd.readouterr()
    return subprocess.CompletedProcess(["trainop", *argv], int(status), out, err)
