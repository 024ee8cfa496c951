"""The C++ metadata reader's build across torch versions: C++20 first (torch 2.14's headers need
it), C++17 after it, and a reason of one line per standard where neither compiles."""

from __future__ import annotations

import pytest
import torch

from trainop.kernels.native import build, metadata

_ERRORS = {
    "-std=c++20": "x.cpp:1:1: error: unrecognized command-line option '-std=c++20'",
    "-std=c++17": ("intrusive_ptr.h:775:27: error: 'strong_ordering' in namespace 'std' does "
                   "not name a type"),
}


def _fake_compiler(monkeypatch, tmp_path, failing):
    """``compile_shared`` replaced: the standards in ``failing`` fail with their error (after
    a note line, as gcc writes), the others write the target; returns the commands seen."""
    monkeypatch.setenv("TRAINOP_CACHE_DIR", str(tmp_path))
    seen = []

    def compile_shared(target, command):
        standard = next(flag for flag in command if flag.startswith("-std="))
        seen.append(standard)
        if standard in failing:
            raise build.CompileError(command, 1, f"In file included from x.h:3,\n"
                                                 f"{_ERRORS[standard]}\nmore: error: later\n")
        target.write_bytes(b"built")

    monkeypatch.setattr(metadata, "compile_shared", compile_shared)
    return seen


def test_cxx20_first_and_cached(monkeypatch, tmp_path):
    seen = _fake_compiler(monkeypatch, tmp_path, failing=())
    target = metadata._build(["c++"], ".so")
    assert seen == ["-std=c++20"] and target.read_bytes() == b"built"
    assert metadata._build(["c++"], ".so") == target and seen == ["-std=c++20"]  # cached


def test_cxx17_where_cxx20_does_not_compile(monkeypatch, tmp_path):
    seen = _fake_compiler(monkeypatch, tmp_path, failing=("-std=c++20",))
    target = metadata._build(["c++"], ".so")
    assert seen == ["-std=c++20", "-std=c++17"] and target.exists()
    assert len(list(tmp_path.iterdir())) == 1


def test_neither_standard_names_each_first_error(monkeypatch, tmp_path):
    _fake_compiler(monkeypatch, tmp_path, failing=tuple(_ERRORS))
    with pytest.raises(RuntimeError) as caught:
        metadata._build(["c++"], ".so")
    assert str(caught.value) == (
        f"`c++` could not compile metadata.cpp against torch {torch.__version__}'s headers "
        f"(-std=c++20: {_ERRORS['-std=c++20']}; -std=c++17: {_ERRORS['-std=c++17']})")
    assert not list(tmp_path.iterdir())


def test_first_error_without_an_error_line():
    assert build.CompileError(["cc"], 3, "").first_error() == "`cc` exited with 3"
    assert build.CompileError(["cc"], 1, "a\nlast words\n").first_error() == "last words"
