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
