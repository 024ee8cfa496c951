"""Shared fixtures: deterministic torch, and the TensorFlow oracle loaded once per session."""

import pytest
import torch

# torch warns once per process that sparse invariant checks are "implicitly disabled"; the
# tests build many small sparse tensors by hand, so opt out explicitly (torch's default).
torch.sparse.check_sparse_tensor_invariants.disable()


@pytest.fixture(autouse=True)
def _deterministic_torch():
    torch.manual_seed(0)
    yield


@pytest.fixture(scope="session")
def tf():
    """TensorFlow (the reference implementation); tests needing it skip if it is missing."""
    return pytest.importorskip("tensorflow")
