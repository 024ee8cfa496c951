"""Triton's interpreter before 3.8 with numpy >= 2.4: a scalar's ``__index__``.

Under ``TRITON_INTERPRET=1`` a Triton scalar is a 1-element numpy array, and Triton < 3.8 gives
it ``__index__`` as ``int(self.handle.data)``. numpy 2.4 removed the conversion of an array
with ``ndim > 0`` to a Python scalar (deprecated since 1.25), so every kernel whose loop bound is
a runtime value (``range(n)``) fails with ``TypeError: only 0-dimensional arrays can be
converted to Python scalars``. Triton 3.8 reads the element with ``.squeeze()`` first; this shim
does the same for older Triton (the GPU machine has Triton 3.6 and no network to upgrade), and
nothing where Triton or numpy does not need it.
"""

from __future__ import annotations

import importlib.metadata

__all__ = ["needs_shim", "patch_triton_interpreter"]

_PATCHED = "_trainop_numpy_index_shim"


def _version(name: str) -> tuple[int, ...] | None:
    try:
        text = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None
    parts = []
    for piece in text.split(".")[:2]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def needs_shim(triton: tuple[int, ...] | None, numpy: tuple[int, ...] | None) -> bool:
    """Whether ``triton`` (major, minor) with ``numpy`` (major, minor) needs the shim."""
    return triton is not None and numpy is not None and triton < (3, 8) and numpy >= (2, 4)


def patch_triton_interpreter() -> bool:
    """Give the interpreter's scalars an ``__index__`` that numpy >= 2.4 accepts, where Triton
    is older than 3.8; True if the shim is (now or already) in place."""
    if not needs_shim(_version("triton"), _version("numpy")):
        return False
    try:
        from triton.runtime import interpreter
    except Exception:  # no usable Triton: its tests skip on their own
        return False
    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is None:
        return False
    if getattr(original, _PATCHED, False):
        return True

    def patch_lang_tensor(tensor, scope):
        original(tensor, scope)
        # set after the original, restored before it (the scope restores in reverse order)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    setattr(patch_lang_tensor, _PATCHED, True)
    interpreter._patch_lang_tensor = patch_lang_tensor
    return True
