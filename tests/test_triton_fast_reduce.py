"""The conftest's faster interpreter fold for trainop's block sums (``triton_fast_reduce``)
gives the bits of the interpreter's own fold: the float64 sums of squares of the read pass
(blocks of ``BLOCK`` elements and a partial one, magnitudes over 60 decades, and a list with
NaN and infinities), each computed with the patch and with Triton's ``generic_reduce``."""

from __future__ import annotations

import pytest
import torch
import triton_fast_reduce as fast

from trainop.kernels import triton as tk
from trainop.kernels.triton.launch import BLOCK

pytestmark = pytest.mark.skipif(not tk.available(), reason="Triton is not installed")


def _lists():
    gen = torch.Generator().manual_seed(3)

    def spread(n):
        exponent = torch.randint(-30, 30, (n,), generator=gen).float()
        return torch.randn(n, generator=gen) * torch.pow(10.0, exponent)

    wild = spread(9)
    wild[2], wild[5], wild[7] = float("nan"), float("inf"), -float("inf")
    return [[spread(1), spread(7), spread(BLOCK + 1)], [wild, spread(3)]]


def _bits(t: torch.Tensor) -> list[int]:
    return t.double().view(torch.int64).tolist()


def test_the_fast_fold_gives_the_interpreters_bits(monkeypatch):
    from triton.runtime import interpreter

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert fast.patch_block_sums()
    patched = interpreter.ReduceOps.generic_reduce
    folds, fold = [], fast._folded

    def counted(data, axis):
        folds.append(data.shape[axis])
        return fold(data, axis)

    monkeypatch.setattr(fast, "_folded", counted)
    fast_sums = [tk.square_sums(tensors) for tensors in _lists()]
    assert folds, "the block sums did not take the fast fold"
    monkeypatch.setattr(interpreter.ReduceOps, "generic_reduce", patched.original)
    slow_sums = [tk.square_sums(tensors) for tensors in _lists()]
    for ours, theirs in zip(fast_sums, slow_sums, strict=True):
        assert _bits(ours) == _bits(theirs), (ours, theirs)
    assert fast_sums[1][0].isnan() and fast_sums[0].isfinite().all()
