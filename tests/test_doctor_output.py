"""``trainop doctor``'s ``TRITON_INTERPRET`` line says what the Triton path does with the
value (#47 L1), and a command whose output cannot be written ends in one line and a non-zero
status, not a traceback (#47 L2)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from trainop.kernels import triton as tk

# spellings the Triton path reads as on, and others it reads as off
ON = ["1", "true", "TRUE", "on", "yes", "Yes"]
OFF = ["0", "false", "False", "off", "no", "", "2", "interpret"]


@pytest.mark.parametrize("value", ON + OFF)
def test_doctor_reads_triton_interpret_as_the_triton_path_does(value, monkeypatch, capsys):
    from trainop.__main__ import main

    monkeypatch.setenv("TRITON_INTERPRET", value)
    main(["doctor"])
    line = next(x for x in capsys.readouterr().out.splitlines()
                if x.startswith("TRITON_INTERPRET:"))
    assert tk.interpreted() is (value in ON)
    assert line == (f"TRITON_INTERPRET: {value!r} (Triton kernels on CPU tensors)" if value in ON
                    else f"TRITON_INTERPRET: {value!r} (off: Triton kernels on CUDA tensors "
                    "only)")


def test_doctor_without_triton_interpret(monkeypatch, capsys):
    from trainop.__main__ import main

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    main(["doctor"])
    assert "TRITON_INTERPRET: not set" in capsys.readouterr().out.splitlines()


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
@pytest.mark.parametrize("argv", [["doctor"], ["--version"], ["check-config", "--help"]],
                         ids=["doctor", "version", "help"])
def test_output_that_cannot_be_written_is_one_line(argv):
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "trainop", *argv], stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=600)
    assert done.returncode == 1
    command = "trainop doctor" if argv == ["doctor"] else "trainop"
    assert done.stderr == f"{command}: cannot write the output: No space left on device\n"


class _Failing:
    """A standard output whose writes fail after ``good`` characters (a disk filling up)."""

    def __init__(self, good: int) -> None:
        self.left = good

    def write(self, text: str) -> int:
        self.left -= len(text)
        if self.left < 0:
            raise OSError(28, "No space left on device")
        return len(text)

    def flush(self) -> None:
        if self.left < 0:
            raise OSError(28, "No space left on device")


@pytest.mark.parametrize("good", [0, 10, 300, 2000])
def test_a_write_failing_midway_is_one_line(good, monkeypatch, capsys):
    """In process, wherever the output fails."""
    from trainop.__main__ import main

    monkeypatch.setattr(sys, "stdout", _Failing(good))
    assert main(["doctor"]) == 1
    assert capsys.readouterr().err == \
        "trainop doctor: cannot write the output: No space left on device\n"


def _report(monkeypatch, capsys, versions, native_reason, metadata_reason):
    """``trainop doctor``'s lines and status with the package versions (name -> version; absent:
    not installed) and the two C parts' availability given."""
    import importlib.metadata

    from trainop.__main__ import main
    from trainop.kernels import native
    from trainop.kernels.native import metadata

    def version(name):
        if name not in versions:
            raise importlib.metadata.PackageNotFoundError(name)
        return versions[name]

    monkeypatch.setattr(importlib.metadata, "version", version)
    monkeypatch.setattr(native, "unavailable_reason", lambda: native_reason)
    monkeypatch.setattr(metadata, "unavailable_reason", lambda: metadata_reason)
    status = main(["doctor"])
    return status, capsys.readouterr().out.splitlines()


def test_doctor_reports_versions_and_what_installs_a_missing_package(monkeypatch, capsys):
    import platform

    import torch

    status, lines = _report(monkeypatch, capsys, {"numpy": "9.8.7", "tensorflow-cpu": "2.21.0",
                                                  "PyYAML": "6.0.1", "matplotlib": "3.9.0"},
                            None, None)
    assert status == 0
    assert lines[1] == (f"python {platform.python_version()}, torch {torch.__version__}, numpy "
                        f"9.8.7, {torch.get_num_threads()} threads")
    assert lines[2:6] == ["  tensorflow-cpu: 2.21.0", "  PyYAML: 6.0.1",
                          "  tensorboard: not installed (summaries: pip install "
                          "'trainop[tensorboard]')", "  matplotlib: 3.9.0"]
    assert lines[6:8] == ["native C kernels: built and loaded",
                          "metadata reader (C++): built and loaded"]
    # the other spelling of TensorFlow, and every optional package missing
    status, lines = _report(monkeypatch, capsys, {"numpy": "1", "tensorflow": "2.15.1"},
                            None, None)
    assert lines[2:6] == ["  tensorflow: 2.15.1",
                          "  PyYAML: not installed (YAML configs: a dependency of trainop, pip "
                          "install pyyaml)",
                          "  tensorboard: not installed (summaries: pip install "
                          "'trainop[tensorboard]')",
                          "  matplotlib: not installed (learning-rate plots: pip install "
                          "'trainop[plot]')"]


@pytest.mark.parametrize(("native_reason", "metadata_reason", "status"), [
    (None, None, 0),
    ("switched off (TRAINOP_NATIVE=0)", None, 0),  # asked for: no problem
    ("switched off (TRAINOP_NATIVE=0)", "switched off (TRAINOP_NATIVE=0)", 0),
    ("no C compiler found", None, 1),
    (None, "the build failed: x", 1),
    ("no C compiler found", "the build failed: x", 1),
    ("no C compiler found", "switched off (TRAINOP_NATIVE=0)", 1),  # a problem stays counted
])
def test_doctor_exits_1_when_a_c_part_is_unavailable_without_being_switched_off(
        monkeypatch, capsys, native_reason, metadata_reason, status):
    got, lines = _report(monkeypatch, capsys, {"numpy": "1"}, native_reason, metadata_reason)
    assert got == status
    for label, reason in (("native C kernels", native_reason),
                          ("metadata reader (C++)", metadata_reason)):
        assert (f"{label}: built and loaded" if reason is None
                else f"{label}: NOT in use: {reason}") in lines


def test_doctor_help_says_what_it_reports(capsys):
    from trainop.__main__ import main
    from trainop.interfaces import doctor

    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split()) + " "
    assert " doctor versions, native kernels, and the implementation each optimizer uses " \
        in text
    with pytest.raises(SystemExit):
        main(["doctor", "--help"])
    out = capsys.readouterr().out
    # the module doc's body, as written (line breaks kept), right after the usage
    body = doctor.__doc__.partition("\n\n")[2]
    assert out.index(body.strip()) == out.index("\n\n") + 2


def test_doctor_lists_each_optimizers_pick_on_cpu_and_cuda(monkeypatch, capsys):
    import torch

    import trainop

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    _, lines = _report(monkeypatch, capsys, {"numpy": "1"}, None, None)
    names = sorted(trainop.OPTIMIZER_CLASSES)
    cpu = lines.index("implementation each optimizer picks for float32 CPU parameters:")
    for line, name in zip(lines[cpu + 1:cpu + 1 + len(names)], names, strict=True):
        cls = trainop.OPTIMIZER_CLASSES[name]
        head, _, offers = line.partition(" (offers ")
        assert head.split()[0] == name and head.split()[1] in cls.IMPLEMENTATIONS, line
        assert offers == ", ".join(cls.IMPLEMENTATIONS) + ")", line
    assert "CUDA: not available" in lines
    cuda = next(i for i, x in enumerate(lines)
                if x.startswith("implementation auto picks for float32 CUDA parameters"))
    picks = lines[cuda + 1:cuda + 1 + len(names)]
    assert [x.split()[0] for x in picks] == names and all(len(x.split()) == 2 for x in picks)
    assert all(x.startswith("  ") for x in lines[cpu + 1:cpu + 1 + len(names)] + picks)
    triton_picked = any(x.split()[1] == "triton" for x in picks)
    assert lines[cuda] == "implementation auto picks for float32 CUDA parameters" + (
        "" if triton_picked else " (Triton only when asked for, implementation='triton': "
        "opt-in until scripts/gpu_check.sh (in trainop's source checkout, not in the wheel) "
        "has passed on a GPU)") + ":"
    assert len(lines) == cuda + 1 + len(names)


def test_doctor_names_the_cuda_devices(monkeypatch, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=None: f"GPU number {i}")
    _, lines = _report(monkeypatch, capsys, {"numpy": "1"}, None, None)
    assert "CUDA: 2 device(s), GPU number 0" in lines


class _Refused:
    """A meta-path finder under which ``import triton`` fails with ``message``."""

    def __init__(self, message):
        self.message = message

    def find_spec(self, name, path=None, target=None):
        if name == "triton":
            raise RuntimeError(self.message)
        return None


@pytest.mark.parametrize(("module", "versions", "line"), [
    ({"__version__": "9.9.1"}, {}, "triton: 9.9.1 (importable)"),
    ({}, {"triton": "3.6.0"}, "triton: 3.6.0 (importable)"),  # no __version__: the package's
])
def test_doctor_says_which_triton_imports(monkeypatch, capsys, module, versions, line):
    import types

    fake = types.ModuleType("triton")
    fake.__dict__.update(module)
    monkeypatch.setitem(sys.modules, "triton", fake)
    _, lines = _report(monkeypatch, capsys, {"numpy": "1", **versions}, None, None)
    assert line in lines


def test_doctor_says_why_triton_does_not_import_in_one_line(monkeypatch, capsys):
    monkeypatch.delitem(sys.modules, "triton", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_Refused("x" * 300 + "\nsecond line"),
                                           *sys.meta_path])
    _, lines = _report(monkeypatch, capsys, {"numpy": "1"}, None, None)
    line = next(x for x in lines if x.startswith("triton: "))
    assert line == "triton: " + ("not importable (RuntimeError: " + "x" * 300)[:200]
