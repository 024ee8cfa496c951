"""Issue #44, bandwidth: float16/bfloat16 lists on the Triton path.

- The read pass (norms, the non-finite flag) gives each program a block of the list: a block
  of a 2-byte list moves as many bytes as a float32 one (it used to be the same 1,024
  elements: 2 KB, too little in flight to keep the memory busy), read from the launches'
  own configuration (their ``BLOCK`` times the dtype's size); its norms are the float64
  formula's, rounded once to float32, across the block thresholds of either size. (The
  runs of partial sums count blocks, whatever their dtype: ``test_triton_run_sums``,
  ``test_triton_run_loads``.)
- The mixed-precision update (float32 masters, float16/bfloat16 gradients and model copies)
  is the float32 formula, each operation rounded as TensorFlow's float32 kernel rounds it,
  and the model copy that value rounded to nearest even, across the block thresholds.
  (That it moves no value through shared memory is checked on the kernels compiled for an
  H100: ``test_triton_interpreter``'s traffic-floor test.)
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from interpreter_mode import interpreter_for_the_module as _interpreter  # noqa: F401

from trainop.kernels import triton as tk

pytestmark = [pytest.mark.skipif(not tk.available(), reason="Triton is not installed"),
              pytest.mark.filterwarnings("ignore::RuntimeWarning")]

HALVES = [torch.float16, torch.bfloat16]
#: Either side of a 1,024- and a 2,048-element block, and a block and a bit past two.
SIZES = [1, 1023, 1024, 1025, 2047, 2048, 2049, 4113]


@pytest.fixture
def blocks(monkeypatch):
    """Per launch of the read pass's block kernel: (its list's dtype, its ``BLOCK``)."""
    from triton.runtime.interpreter import InterpretedFunction

    seen = []
    real = InterpretedFunction.run

    def run(self, *args, **kwargs):
        if self.fn.__name__ == "_block_squares":
            seen.append((args[0].dtype, kwargs["BLOCK"]))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(InterpretedFunction, "run", run)
    return seen


def _formula(tensors) -> torch.Tensor:
    """Each tensor's norm: the float64 square root of the float64 sum of its float32
    (exactly widened) squares, rounded once to float32."""
    return torch.tensor([np.float32(np.sqrt(np.sum(t.float().double().numpy() ** 2)))
                         for t in tensors])


def test_a_read_block_moves_the_same_bytes_for_every_dtype(blocks):
    gen = torch.Generator().manual_seed(0)
    moved = {}
    for dtype in [torch.float32, *HALVES]:
        tensors = [torch.randn(n, generator=gen).to(dtype) for n in SIZES]
        blocks.clear()
        assert torch.equal(tk.l2_norms(tensors), _formula(tensors)), dtype
        assert {d for d, _ in blocks} == {dtype}
        moved[dtype] = {b * dtype.itemsize for _, b in blocks}
    assert moved[torch.float16] == moved[torch.bfloat16] == moved[torch.float32], moved


@pytest.mark.parametrize("half", HALVES, ids=str)
def test_the_mixed_precision_update_across_the_block_thresholds(half):
    """Gradient descent over float32 masters with ``half`` gradients, writing the ``half``
    model copies in the same pass (one table launch over every size of ``SIZES``)."""
    gen = torch.Generator().manual_seed(2)
    masters = [torch.randn(n, generator=gen) for n in SIZES]
    grads = [torch.randn(n, generator=gen).to(half) for n in SIZES]
    copies = [torch.zeros(n, dtype=half) for n in SIZES]
    lr = 0.37
    start = [m.numpy().copy() for m in masters]
    assert tk.run("gradient_descent", [masters, grads], [lr], half=copies)
    for w0, g, m, c in zip(start, grads, masters, copies, strict=True):
        step = (g.float().double().numpy() * np.float32(lr)).astype(np.float32)
        want = (w0.astype(np.float64) - step).astype(np.float32)
        assert np.array_equal(m.numpy(), want)
        # nearest even, from the float32 value (torch's cast rounds so; none saturates here)
        assert torch.equal(c, torch.from_numpy(want).to(half))
