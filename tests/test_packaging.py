"""What a non-editable install ships, and the command's --version."""

from __future__ import annotations

import fnmatch
import subprocess
import sys
from pathlib import Path

import pytest
from cli_in_process import run_cli

import trainop

ROOT = Path(__file__).resolve().parents[1]


def test_package_data_ships_every_kernel_source():
    """The native kernels and the metadata reader build from these files on first use: a
    non-editable install without one of them falls back to slower paths."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = config["tool"]["setuptools"]["package-data"]["trainop.kernels.native"]
    csrc = ROOT / "src" / "trainop" / "kernels" / "native" / "csrc"
    sources = sorted(p.name for p in csrc.iterdir() if p.is_file())
    assert {"driver.c", "metadata.cpp", "rules.h"} <= set(sources)
    for name in sources:
        assert any(fnmatch.fnmatch(f"csrc/{name}", g) for g in globs), name


def test_version_flag(capfd):
    out = run_cli(capfd, "--version")  # in process: the output is the point (`python -m
    assert out.returncode == 0  # trainop` itself is test_bench's test_python_m_trainop)
    assert out.stdout.strip() == f"trainop {trainop.__version__}"


def _doctor(**env):
    """``trainop doctor`` in a fresh process: the native libraries load once a process, so a
    run that must fail to build one, or find them switched off, needs its own."""
    import os

    full = {**os.environ, **env}
    return subprocess.run([sys.executable, "-m", "trainop", "doctor"], capture_output=True,
                          text=True, env=full, timeout=600)


@pytest.mark.native
def test_doctor_reports_versions_kernels_and_choices(monkeypatch, capfd):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # doctor reads it when it runs
    out = run_cli(capfd, "doctor")  # in process: what it reports is the point
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"trainop {trainop.__version__}" in out.stdout
    assert "native C kernels: built and loaded" in out.stdout
    assert "metadata reader (C++): built and loaded" in out.stdout
    lines = out.stdout.splitlines()
    for name in trainop.OPTIMIZER_CLASSES:
        assert any(line.split()[:2] == [name, "native"] for line in lines)
    # #31: the GPU side. Triton is in the test extra; auto never picks it on CUDA until the
    # GPU figures are recorded, and on CUDA Adam maps onto torch's fused kernel.
    assert any(line.startswith("triton: ") and "importable" in line for line in lines)
    assert "TRITON_INTERPRET: '1'" in out.stdout
    cuda = lines[next(i for i, line in enumerate(lines) if "float32 CUDA parameters" in line):]
    assert "opt-in until scripts/gpu_check.sh" in cuda[0]
    picks = dict(line.split()[:2] for line in cuda[1:len(trainop.OPTIMIZER_CLASSES) + 1])
    assert set(picks) == set(trainop.OPTIMIZER_CLASSES)
    assert picks["AdamOptimizer"] == "fused" and "triton" not in picks.values()


def test_doctor_reports_the_optional_packages_and_where_the_gpu_check_is(monkeypatch, capsys):
    """#39: matplotlib (the ``plot`` extra) is reported as tensorboard is, each missing one with
    the extra that installs it; the GPU check doctor points to is named as the source
    checkout's (a wheel does not carry ``scripts/``, and the check runs the repository's CUDA
    tests)."""
    from trainop.__main__ import main
    from trainop.interfaces import doctor

    real = doctor._version
    monkeypatch.setattr(doctor, "_version", lambda name: "not installed"
                        if name in ("matplotlib", "tensorboard") else real(name))
    main(["doctor"])
    lines = capsys.readouterr().out.splitlines()
    assert "  matplotlib: not installed (learning-rate plots: pip install 'trainop[plot]')" \
        in lines
    assert "  tensorboard: not installed (summaries: pip install 'trainop[tensorboard]')" in lines
    assert f"  PyYAML: {real('PyYAML')}" in lines
    gpu = next(line for line in lines if "float32 CUDA parameters" in line)
    assert "scripts/gpu_check.sh (in trainop's source checkout, not in the wheel)" in gpu
    monkeypatch.setattr(doctor, "_version", real)
    main(["doctor"])
    assert f"  matplotlib: {real('matplotlib')}" in capsys.readouterr().out.splitlines()


@pytest.mark.native
def test_doctor_exit_status_names_a_missing_reader(tmp_path):
    import shutil

    from trainop.kernels.native import build

    for kernels in build.cache_dir().glob("trainop-kernels-*.so"):  # built: not the point here
        shutil.copy(kernels, tmp_path)
    out = _doctor(CXX="false", TRAINOP_CACHE_DIR=str(tmp_path))
    assert out.returncode == 1
    assert "metadata reader (C++): NOT in use: the metadata reader could not be built" in \
        out.stdout
    off = _doctor(TRAINOP_NATIVE="0")
    assert off.returncode == 0  # switched off on purpose: reported, not a problem
    assert "NOT in use: switched off by TRAINOP_NATIVE=0" in off.stdout
    assert "foreach" in off.stdout


@pytest.mark.native
def test_a_non_editable_install_builds_and_loads_both_native_libraries(tmp_path):
    """The wheel, installed into its own directory (not this checkout), with an empty kernel
    cache: ``trainop doctor`` run from there builds and loads the C kernels and the C++
    metadata reader from the shipped sources, once each; a fresh interpreter then loads both
    from that cache (nothing rebuilt) and its steps run with the reader. (The one build of the
    C++ reader into an empty cache in the suite: about 20 s of CPU.)"""
    import os

    wheels, site, cache = tmp_path / "wheels", tmp_path / "site", tmp_path / "cache"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                    "-q", "-w", str(wheels), str(ROOT)], check=True, timeout=600,
                   capture_output=True)
    (wheel,) = wheels.glob("trainop-*.whl")
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                    str(site), str(wheel)], check=True, timeout=600, capture_output=True)
    env = {**os.environ, "PYTHONPATH": str(site), "TRAINOP_CACHE_DIR": str(cache)}

    def installed(code: str) -> list[str]:
        out = subprocess.run([sys.executable, "-c", "import trainop, sys; "
                              f"print(trainop.__file__); {code}"], capture_output=True,
                             text=True, env=env, timeout=600, cwd=tmp_path)
        assert out.returncode == 0, out.stdout + out.stderr
        assert out.stdout.splitlines()[0].startswith(str(site))  # the installed copy ran
        return out.stdout.splitlines()[1:]

    doctor = "\n".join(installed("from trainop.__main__ import main; "
                                  "sys.exit(main(['doctor']))"))
    assert "native C kernels: built and loaded" in doctor
    assert "metadata reader (C++): built and loaded" in doctor
    def files() -> list[tuple[str, int]]:  # name and inode: a rebuild replaces the file
        return [(p.name, p.stat().st_ino) for p in sorted(cache.iterdir())]

    built = files()
    assert [name.split("-")[0] for name, _ in built] == ["trainop", "trainop_metadata"], built
    step = installed("from trainop.kernels import native; from trainop.kernels.native import "
                     "metadata; p = __import__('torch').ones(3); p.grad = p.new_ones(3); "
                     "o = trainop.GradientDescentOptimizer(0.5, params=[p]); o.step(); "
                     "o.step(); print(native.available(), metadata.load() is not None, "
                     "metadata.unavailable_reason()); print(p.tolist())")
    assert step == ["True True None", "[0.0, 0.0, 0.0]"]
    assert files() == built  # loaded from the cache, not built again
