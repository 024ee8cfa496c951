"""The conftest's shim for Triton < 3.8's interpreter under numpy >= 2.4 (#38): the GPU machine
has Triton 3.6, whose interpreter gives a scalar ``__index__ = int(self.handle.data)`` on a
1-element array, which numpy 2.4 refuses; every kernel with a runtime loop bound failed."""

from __future__ import annotations

import operator
from types import SimpleNamespace

import numpy as np
import pytest
import triton_numpy_shim as shim


def test_needed_only_by_triton_before_3_8_with_numpy_2_4_or_later():
    assert shim.needs_shim((3, 6), (2, 4)) and shim.needs_shim((3, 7), (2, 5))
    assert not shim.needs_shim((3, 8), (2, 4)) and not shim.needs_shim((3, 9), (2, 5))
    assert not shim.needs_shim((3, 6), (2, 3)) and not shim.needs_shim((3, 6), (1, 26))
    assert not shim.needs_shim(None, (2, 4)) and not shim.needs_shim((3, 6), None)


def test_a_one_element_scalar_indexes_again(monkeypatch):
    """Triton 3.6's patch of ``tensor.__index__`` (the line that fails), then the shim's, in
    the interpreter's own patch scope (restored in reverse order after a kernel)."""
    interpreter = pytest.importorskip("triton.runtime.interpreter")

    def triton36(tensor, scope):  # Triton 3.6's _patch_lang_tensor, its __index__ line
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data))

    monkeypatch.setattr(interpreter, "_patch_lang_tensor", triton36)
    monkeypatch.setattr(shim, "_version", {"triton": (3, 6), "numpy": (2, 4)}.get)
    assert shim.patch_triton_interpreter()
    assert shim.patch_triton_interpreter()  # once only: the second call wraps nothing more
    assert interpreter._patch_lang_tensor.__closure__[0].cell_contents is triton36

    class Tensor:
        pass

    scalar = Tensor()
    scalar.handle = SimpleNamespace(data=np.array([7], dtype=np.int32))
    scope = interpreter._LangPatchScope()
    if np.lib.NumpyVersion(np.__version__) >= "2.4.0":  # what failed without the shim
        triton36(Tensor, scope)
        with pytest.raises(TypeError, match="only 0-dimensional arrays"):
            operator.index(scalar)
    interpreter._patch_lang_tensor(Tensor, scope)
    assert operator.index(scalar) == 7 and list(range(scalar)) == list(range(7))
    scope.restore()
    assert not hasattr(Tensor, "__index__")
