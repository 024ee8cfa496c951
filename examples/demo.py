"""What trainop is for, in under a minute: a recipe's training step, number for number.

1. OpenSeq2Seq's ``optimize_loss``: a small transformer, mixed precision (bfloat16 weights,
   float32 masters), automatic loss scaling, clipping, a learning-rate policy, accumulation.
2. RETURNN's ``Updater`` from the config file ``examples/returnn_lstm.config`` (parsed, never
   executed) on an LSTM.
3. ``trainop.check_numerics``: a NaN injected at step 3 is traced to its module and op.
"""

from __future__ import annotations

import os

import torch
from torch import nn

import trainop

HERE = os.path.dirname(os.path.abspath(__file__))


def openseq2seq_transformer() -> None:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).to(torch.bfloat16)
    x = torch.randn(8, 10, 32).to(torch.bfloat16)
    y = torch.randn(8, 10, 32)
    lr = trainop.schedules.policy("transformer_policy", learning_rate=2.0, d_model=32,
                                  warmup_steps=10)
    train_op = trainop.optimize_loss(
        lambda: nn.functional.mse_loss(model(x).float(), y), "Adam",
        {"beta1": 0.9, "beta2": 0.98, "epsilon": 1e-9}, lr, model=model, dtype="mixed",
        loss_scaling="Backoff", clip_gradients=1.0, iter_size=2)
    print("1. OpenSeq2Seq optimize_loss (mixed precision, Backoff, clip 1.0, iter_size 2)")
    print(f"   {train_op.pipeline!r}".replace("\n", "\n   "))
    for step in range(40):
        loss = train_op()
        if step % 10 == 0 or step == 39:
            r, scale = train_op.last_result, float(train_op.optimizer.loss_scale)
            print(f"   micro-step {step:2d}: loss {float(loss):.4f}, global_step "
                  f"{int(train_op.global_step)}, loss scale {scale:g}, {r.why()}")


def returnn_lstm() -> None:
    torch.manual_seed(0)
    model = nn.LSTM(4, 16, batch_first=True)
    head = nn.Linear(16, 1)
    params = list(model.parameters()) + list(head.parameters())
    updater = trainop.Updater(os.path.join(HERE, "returnn_lstm.config"), params)
    x, y = torch.randn(16, 12, 4), torch.randn(16, 1)
    print("2. RETURNN Updater from examples/returnn_lstm.config")
    print(f"   optimizer {type(updater.optimizer).__name__}, epsilon "
          f"{updater.optimizer.param_groups[0]['epsilon']:g}, accumulation 2, global-norm clip")
    for step in range(30):
        out, _ = model(x)
        loss = nn.functional.mse_loss(head(out[:, -1]), y)
        updater.step(loss)
        loss = loss.detach()
        if step % 10 == 0 or step == 29:
            print(f"   micro-step {step:2d}: loss {loss.item():.4f}, global_train_step "
                  f"{int(updater.global_train_step)}")


def numerics() -> None:
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 8)
            self.broken = False

        def forward(self, x):
            h = torch.tanh(self.lin(x))
            return torch.log(h - 1.0) if self.broken else h  # tanh < 1: log of a negative

    model = nn.Sequential(Block(), Block(), Block(), nn.Linear(8, 1))
    opt = trainop.AdamOptimizer(params=model.parameters(), learning_rate=1e-3)
    x = torch.randn(16, 8)
    print("3. trainop.check_numerics: a NaN appears in layer 1 at step 3")
    try:
        with trainop.check_numerics(model, optimizer=opt):
            for step in range(5):
                model[1].broken = step == 3
                opt.zero_grad()
                model(x).pow(2).mean().backward()
                opt.step()
    except trainop.NumericsError as e:
        print(f"   NumericsError: phase={e.phase!r} module={e.module!r} op={e.op!r} "
              f"step={e.step}")


if __name__ == "__main__":
    openseq2seq_transformer()
    returnn_lstm()
    numerics()
