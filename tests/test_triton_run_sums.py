"""The per-tensor level of the Triton read pass and NovoGrad's moment add a tensor's runs'
sums in one vector load (``norms.runs_total``): a tensor of several runs (above a million
elements, at the real run length) gets the float64 sum of all of them, as the float64 norm
computed here."""

from __future__ import annotations

import pytest
import torch
from interpreter_shortcuts import nested_calls_unpatched

from trainop.kernels import triton as tk

pytestmark = [pytest.mark.skipif(not tk.available(), reason="Triton is not installed"),
              pytest.mark.filterwarnings("ignore::RuntimeWarning")]


def test_a_tensor_of_several_runs_sums_every_run(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with nested_calls_unpatched():  # (the interpreter's shortcuts: the same numbers)
        _several_runs()


def _several_runs():
    gen = torch.Generator().manual_seed(0)
    # 1,026 blocks: a run of 1,024 and one of two, the last block 5 elements (the real run
    # length; any number of runs, cheaply: test_triton_run_loads)
    big = torch.randn((1 << 20) + 1029, generator=gen)
    small = torch.randn(5, generator=gen)
    norms = tk.l2_norms([small, big])
    expect = torch.stack([small.double().norm(), big.double().norm()]).float()
    assert torch.equal(norms, expect)
    squares = tk.square_sums([big, small])
    torch.testing.assert_close(squares, torch.stack([(big.double() ** 2).sum(),
                                                      (small.double() ** 2).sum()]),
                               rtol=1e-14, atol=0)
