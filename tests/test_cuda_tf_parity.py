"""#31: the TF parity table (``tests/test_tf_parity.py``: every ``tf.compat.v1.train``
optimizer, dense and sparse) with trainop on CUDA and ``implementation="triton"``, against
TensorFlow's own CPU kernels, within the suite's float32 tolerance. Skipped without CUDA, the
Triton implementation or TensorFlow; ``scripts/gpu_check.sh`` runs it on a GPU.

Not yet run on a GPU: no device was lent to the session that wrote it.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from test_tf_parity import CASES, assert_trajectories_equal, make_gradients, run_trainop
from tf_oracle import run_tf

from trainop.bench.gpu_peers import triton_unavailable

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or triton_unavailable(torch.device("cuda")) is not None,
    reason="needs a CUDA device and implementation='triton'")


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_triton_on_cuda_matches_tensorflow(tf, case, sparse):
    init, grads = make_gradients(sparse)
    theirs = run_tf(tf, lambda gs: case.make_tf(tf, gs, "float32"), case.slots, init, grads,
                    "float32")
    on_triton = dataclasses.replace(case, kwargs={**(case.kwargs or {}),
                                                  "implementation": "triton"})
    ours = run_trainop(on_triton, case.slots, init, grads, "float32", device="cuda")
    assert_trajectories_equal(ours, theirs, "float32")
