"""A module-scoped fixture: Triton's kernels on CPU tensors (``TRITON_INTERPRET=1``) while a
test module runs, the variable restored after. A module takes it by importing it under the name
``_interpreter`` (pytest finds a fixture by its name in the module)."""
from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True, scope="module")
def interpreter_for_the_module():
    """Triton's kernels on CPU tensors (the interpreter), for the importing module."""
    saved = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    yield
    if saved is None:
        del os.environ["TRITON_INTERPRET"]
    else:
        os.environ["TRITON_INTERPRET"] = saved
