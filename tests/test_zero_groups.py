"""#39: ``ZeroRedundancyOptimizer`` over trainop's Adam and AdamW with HF's decay/no-decay
param groups (matrices decayed; biases and LayerNorm not), on 2 and 4 gloo ranks. ZeRO assigns
tensors by size, so some rank holds no tensor of a group: that group's counters must still
advance there (TF advances the beta powers once per ``apply_gradients``, whatever got a
gradient), the consolidated checkpoint carries every group's beta powers, and a fresh ZeRO that
loads it continues as the uninterrupted run, bit for bit. A checkpoint whose groups lack the
beta powers (``{'step': 0}``, as ZeRO consolidated them before) is refused through ZeRO's load
path with load_state_dict's own message, before anything changes."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from test_zero import _save_consolidated, _train

import trainop
from trainop.bench._ranks import rank_group, spawn_ranks

STEPS, RESUME_AT, LR, BETA1, BETA2 = 5, 3, 0.05, 0.9, 0.999
CLASSES = {"adam": trainop.AdamOptimizer, "adamw": trainop.AdamWOptimizer}


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(10, 10), torch.nn.LayerNorm(10), torch.nn.Tanh(),
                               torch.nn.Linear(10, 1))


def _groups(model: torch.nn.Module, kind: str) -> list[dict]:
    """HF Trainer's split: weight decay on the Linear weights only (none for Adam)."""
    decay = [p for n, p in model.named_parameters() if n in ("0.weight", "3.weight")]
    rest = [p for n, p in model.named_parameters() if n not in ("0.weight", "3.weight")]
    wd = {"weight_decay": 0.1} if kind == "adamw" else {}
    no_wd = {"weight_decay": 0.0} if kind == "adamw" else {}
    return [{"params": decay, **wd}, {"params": rest, **no_wd}]


def _zero(model: torch.nn.Module, kind: str):
    from torch.distributed.optim import ZeroRedundancyOptimizer

    return ZeroRedundancyOptimizer(_groups(model, kind), optimizer_class=CLASSES[kind], lr=LR)


def _params(model) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def _broken(checkpoint: dict) -> dict:
    """Every group's counters as ZeRO consolidated an empty group's before the fix."""
    for group in checkpoint["param_groups"]:
        group["non_slot"] = {"step": torch.zeros((), dtype=torch.int64)}
    return checkpoint


def _rank(rank: int, port: int, tmp: str, world: int) -> None:
    out = {}
    with rank_group(rank, world, port):
        for kind in CLASSES:
            model = _model()
            zero = _zero(model, kind)
            _train(model, zero, range(RESUME_AT))
            path = _save_consolidated(zero, rank, os.path.join(tmp, f"{kind}.pt"))
            snapshot = {k: v.clone() for k, v in model.state_dict().items()}
            _train(model, zero, range(RESUME_AT, STEPS))  # the uninterrupted run
            resumed = _model()
            resumed.load_state_dict(snapshot)
            zero2 = _zero(resumed, kind)
            zero2.load_state_dict(torch.load(path, weights_only=True))
            _train(resumed, zero2, range(RESUME_AT, STEPS))
            # the broken shape: every rank holds a tensor of a group without beta powers
            broken = _model()
            broken.load_state_dict(snapshot)
            zero3 = _zero(broken, kind)
            zero3.load_state_dict(_broken(torch.load(path, weights_only=True)))
            try:
                _train(broken, zero3, range(RESUME_AT, RESUME_AT + 1))
                refused = None
            except ValueError as err:
                refused = str(err)
            out[kind] = {"uninterrupted": _params(model), "resumed": _params(resumed),
                         "refused": refused,
                         "broken_unchanged": all(torch.equal(a, b) for a, b in zip(
                             _params(broken), snapshot.values(), strict=True)),
                         "local_groups": [len(g["params"]) for g in zero.optim.param_groups]}
    torch.save(out, os.path.join(tmp, f"rank{rank}.pt"))


@pytest.mark.parametrize("world", [2, 4])
def test_zero_with_decay_groups_resumes_bit_for_bit(tmp_path, world):
    assert spawn_ranks(_rank, (str(tmp_path), world), world=world, timeout_s=240) == [0] * world
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(world)]
    for kind, cls in CLASSES.items():
        # the case at issue: some rank holds no tensor of a group (rank 0 none of no-decay's)
        assert ranks[0][kind]["local_groups"][1] == 0, kind
        for out in ranks:
            for a, b in zip(out[kind]["resumed"], out[kind]["uninterrupted"], strict=True):
                assert torch.equal(a, b), kind
            assert "Invalid optimizer checkpoint, group" in out[kind]["refused"], kind
            assert "['beta1_power', 'beta2_power']" in out[kind]["refused"], kind
            assert out[kind]["broken_unchanged"], kind
        saved = torch.load(tmp_path / f"{kind}.pt", weights_only=True)
        # TF's float32 beta powers after RESUME_AT applies: beta^(t + 1), one product a step
        for group in saved["param_groups"]:
            for name, beta in (("beta1_power", BETA1), ("beta2_power", BETA2)):
                want = np.float32(beta)
                for _ in range(RESUME_AT):
                    want = np.float32(want * np.float32(beta))
                assert group["non_slot"][name].item() == want, (kind, name)
            assert int(group["non_slot"]["step"]) == RESUME_AT
        # a plain optimizer refuses the same broken checkpoint with the same message
        model = _model()
        plain = cls(_groups(model, kind), lr=LR)
        with pytest.raises(ValueError) as err:
            plain.load_state_dict(_broken(saved))
        assert str(err.value) in {out[kind]["refused"] for out in ranks}
