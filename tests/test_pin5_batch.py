"""Pin of the gradient batch's fast path (issue #40, round-5 audit, T24): ``pipeline.step()``
over float32 and float64 parameters together is not the uniform float32 batch; its global norm
is TF's ``clip_by_global_norm`` norm, ``sqrt(sum g^2)`` (``test_processing_misc.py`` checks the
same numbers through ``apply_gradients``, which does not take the fast path)."""

from __future__ import annotations

import torch
from admitted import admitted

import trainop
from trainop.processing import ClipByGlobalNorm, GradientPipeline


def test_step_over_float32_and_float64_parameters_clips_by_their_global_norm():
    f = torch.nn.Parameter(torch.tensor([1.0, 1.0]))
    d = torch.nn.Parameter(torch.tensor([2.0], dtype=torch.float64))
    pipe = GradientPipeline(trainop.GradientDescentOptimizer([f, d], learning_rate=1.0),
                            [ClipByGlobalNorm(1.0)])
    f.grad = torch.tensor([3.0, 4.0])
    d.grad = torch.tensor([12.0], dtype=torch.float64)
    result = admitted(pipe.step)
    assert float(result.global_norm) == 13.0  # sqrt(9 + 16 + 144)
    torch.testing.assert_close(f.detach(), torch.tensor([1 - 3 / 13, 1 - 4 / 13]))
    torch.testing.assert_close(d.detach(), torch.tensor([2 - 12 / 13], dtype=torch.float64))
