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
        for name in set(os.environ) - set(environ):
            del os.environ[name]
        for name, value in environ.items():
            if os.environ.get(name) != value:
                os.environ[name] = value
    out, err = capfd.readouterr()
    return subprocess.CompletedProcess(["trainop", *argv], int(status), out, err)


_BATCH = r"""
import json, os, sys, traceback
from trainop.__main__ import main
statuses = []
for argv, out_path, err_path in json.loads(sys.argv[1]):
    sys.stdout.flush(); sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        os.dup2(out.fileno(), 1); os.dup2(err.fileno(), 2)
        try:
            status = main(argv)
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
        except BaseException:  # as a fresh interpreter ends on it
            traceback.print_exc()
            status = 1
        finally:
            sys.stdout.flush(); sys.stderr.flush()
            os.dup2(saved[0], 1); os.dup2(saved[1], 2)
    statuses.append(status)
print(json.dumps(statuses))
"""


def run_cli_batch(runs: list[list[str]], folder, env: dict[str, str]) -> list[
        subprocess.CompletedProcess]:
    """Each ``trainop`` argv of ``runs`` run one after the other in ONE fresh interpreter with
    ``env`` (where the environment is the point: a package made unimportable, TensorFlow's
    start-up lines), each with its own stdout and stderr (the descriptors, in files under
    ``folder``): one interpreter start for them all instead of one each."""
    import json
    import sys
    from pathlib import Path

    folder = Path(folder)
    plan = [[list(argv), str(folder / f"{k}.out"), str(folder / f"{k}.err")]
            for k, argv in enumerate(runs)]
    done = subprocess.run([sys.executable, "-c", _BATCH, json.dumps(plan)], capture_output=True,
                          text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    statuses = json.loads(done.stdout.splitlines()[-1])
    return [subprocess.CompletedProcess(["trainop", *argv], status,
                                        Path(out).read_text(), Path(err).read_text())
            for (argv, out, err), status in zip(plan, statuses, strict=True)]
