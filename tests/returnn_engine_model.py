"""The tiny model, loss and step recorder of the RETURNN-engine tests (imported by the RETURNN
configs that ``returnn_engine.run`` writes, and by the tests that replay a run by hand)."""

from __future__ import annotations

import os

import torch


class Model(torch.nn.Module):
    """Linear -> tanh -> LayerNorm -> Linear on Task12AX's 9 inputs, 2 classes."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden = torch.nn.Linear(9, 8)
        self.norm = torch.nn.LayerNorm(8)
        self.out = torch.nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.norm(torch.tanh(self.hidden(x))))


def make_model() -> Model:
    torch.manual_seed(42)
    return Model()


def loss_of(model: torch.nn.Module, data: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The summed cross entropy; ``0.0 + loss * 1.0`` is what RETURNN's ``total_loss`` makes of
    one loss of scale 1 (bit-identical to the loss)."""
    logits = model(data)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 2), targets.reshape(-1).long(),
                                             reduction="none")
    return loss.sum()


_RECORD: list[dict] = []


def record(model: torch.nn.Module, data: torch.Tensor, targets: torch.Tensor, epoch: int,
           step: int) -> None:
    """With ``TRAINOP_RECORD`` set: keep the parameters before this step and its batch, and
    write them all to that file (after every step)."""
    path = os.environ.get("TRAINOP_RECORD")
    if not path:
        return
    _RECORD.append({"epoch": int(epoch), "step": int(step), "data": data.detach().clone(),
                    "targets": targets.detach().clone(),
                    "params": {k: v.detach().clone() for k, v in model.state_dict().items()}})
    torch.save(_RECORD, path)
