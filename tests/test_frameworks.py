"""trainop optimizers inside the frameworks that drive the optimizer for you (real packages,
CPU, a few steps; skipped when a package is not installed):

- Lightning: ``configure_optimizers`` returns a trainop optimizer; with ``gradient_clip_val`` and
  ``accumulate_grad_batches`` the run equals the same loop written by hand (loss / 2 per
  micro-batch, ``clip_grad_norm_``, ``step``, ``zero_grad``), and the optimizer's counter equals
  the number of updates.
- HF Transformers: ``Trainer(optimizers=(trainop_opt, scheduler))`` trains a tiny GPT-2 built
  from a config (no download): the loss goes down and the optimizer's slots and counters
  advance once per step.
- Both with ``OneCycleLR`` (which cycles Adam's momentum through ``betas``): a run stopped
  halfway and resumed from the framework's own checkpoint ends bit for bit as the run
  straight through.
"""

from __future__ import annotations

import logging
import os
import warnings

import pytest
import torch

import trainop

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

BATCHES, ACCUMULATE, CLIP = 8, 2, 0.05


def _data():
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(BATCHES * 4, 3, generator=gen)
    return torch.utils.data.TensorDataset(x, x @ torch.tensor([[1.0], [-2.0], [0.5]]) + 0.1)


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def test_lightning_configure_optimizers_with_clipping_and_accumulation(tmp_path):
    lightning = pytest.importorskip("lightning")

    class Module(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = _net()
            self.losses = []

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.losses.append(loss.detach())
            return loss

        def configure_optimizers(self):
            return trainop.AdamOptimizer(self.parameters(), lr=0.05)

    module = Module()
    logging.getLogger("lightning").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = lightning.Trainer(
            accelerator="cpu", devices=1, max_epochs=1, gradient_clip_val=CLIP,
            accumulate_grad_batches=ACCUMULATE, logger=False, enable_checkpointing=False,
            enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)
        trainer.fit(module, torch.utils.data.DataLoader(_data(), batch_size=4))
    opt = trainer.optimizers[0]
    assert isinstance(opt, trainop.AdamOptimizer)
    assert int(opt.param_groups[0]["non_slot"]["step"]) == BATCHES // ACCUMULATE
    assert sorted(opt.get_slot_names()) == ["m", "v"]

    # The same run by hand: Lightning divides the loss by the accumulation count and clips the
    # accumulated gradients by their global norm before each update.
    net = _net()
    ref = trainop.AdamOptimizer(net.parameters(), lr=0.05)
    norms = []
    for i, (x, y) in enumerate(torch.utils.data.DataLoader(_data(), batch_size=4)):
        (torch.nn.functional.mse_loss(net(x), y) / ACCUMULATE).backward()
        if (i + 1) % ACCUMULATE == 0:
            norms.append(torch.nn.utils.clip_grad_norm_(net.parameters(), CLIP))
            ref.step()
            ref.zero_grad()
    assert all(n > CLIP for n in norms)  # the clip was active at every update
    for a, b in zip(module.net.parameters(), net.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    losses = torch.stack(module.losses)
    assert losses[-2:].mean() < losses[:2].mean()


def test_hf_trainer_with_a_trainop_optimizer(tmp_path):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    transformers.logging.set_verbosity_error()
    config = transformers.GPT2Config(vocab_size=32, n_positions=16, n_embd=16, n_layer=1,
                                     n_head=2)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config)
    gen = torch.Generator().manual_seed(5)
    pattern = torch.arange(12) % 4 + 3  # a repeating sequence: learnable in a few steps
    data = [{"input_ids": pattern.roll(int(torch.randint(4, (1,), generator=gen))),
             "labels": None} for _ in range(32)]
    for item in data:
        item["labels"] = item["input_ids"]
    steps = 8
    opt = trainop.AdamOptimizer(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), max_steps=steps, per_device_train_batch_size=4,
        logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True,
        dataloader_num_workers=0, seed=0)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data,
                                   optimizers=(opt, scheduler))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == steps
    assert sum(losses[-2:]) < sum(losses[:2])
    assert int(opt.param_groups[0]["non_slot"]["step"]) == steps
    # beta1_power = beta1^steps: the TF counters advanced once per Trainer step.
    torch.testing.assert_close(opt.param_groups[0]["non_slot"]["beta1_power"],
                               torch.tensor(0.9 ** (steps + 1)))
    wte = model.transformer.wte.weight
    assert opt.get_slot(wte, "m") is not None and bool(opt.get_slot(wte, "v").gt(0).any())


# ---------------------------------------------------------------- OneCycleLR: train, resume
def _lightning_onecycle_module(lightning, total_steps):
    class Module(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = _net()

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self):
            opt = trainop.AdamOptimizer(self.parameters(), lr=0.01)
            sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05,
                                                        total_steps=total_steps)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    return Module()


def _lightning_fit(lightning, module, max_steps, root, ckpt_path=None):
    logging.getLogger("lightning").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = lightning.Trainer(  # whole epochs: an epoch cut short restarts on resume
            accelerator="cpu", devices=1, max_epochs=max_steps // 4, logger=False,
            enable_checkpointing=False, enable_progress_bar=False,
            enable_model_summary=False, default_root_dir=root)
        trainer.fit(module, torch.utils.data.DataLoader(_data(), batch_size=8),
                    ckpt_path=ckpt_path)  # 4 updates an epoch: resumed at an epoch's end
    return trainer


def test_lightning_onecycle_trains_and_resumes_bit_exactly(tmp_path):
    """OneCycleLR (cycle_momentum=True: it writes the groups' ``betas``) with trainop's Adam:
    a run stopped after 4 updates (one epoch) and resumed from Lightning's checkpoint ends
    with the very parameters, slots and momentum of the run straight through 8 updates."""
    lightning = pytest.importorskip("lightning")
    whole = _lightning_onecycle_module(lightning, 8)
    straight = _lightning_fit(lightning, whole, 8, tmp_path / "a")
    first = _lightning_onecycle_module(lightning, 8)
    half = _lightning_fit(lightning, first, 4, tmp_path / "b")
    half.save_checkpoint(tmp_path / "half.ckpt")
    resumed_module = _lightning_onecycle_module(lightning, 8)
    resumed = _lightning_fit(lightning, resumed_module, 8, tmp_path / "c",
                             ckpt_path=str(tmp_path / "half.ckpt"))
    for a, b in zip(whole.net.parameters(), resumed_module.net.parameters(), strict=True):
        assert torch.equal(a, b)
    opt_a, opt_b = straight.optimizers[0], resumed.optimizers[0]
    group_a, group_b = opt_a.param_groups[0], opt_b.param_groups[0]
    assert int(group_b["non_slot"]["step"]) == 8
    assert group_a["betas"] == group_b["betas"] and group_a["lr"] == group_b["lr"]
    assert torch.equal(group_a["non_slot"]["beta1_power"], group_b["non_slot"]["beta1_power"])
    for p, q in zip(whole.net.parameters(), resumed_module.net.parameters(), strict=True):
        assert torch.equal(opt_a.get_slot(p, "m"), opt_b.get_slot(q, "m"))
    assert whole.net[0].weight.ne(_net()[0].weight).all()  # it trained


def _hf_run(transformers, tmp_path, max_steps, resume=None):
    config = transformers.GPT2Config(vocab_size=32, n_positions=16, n_embd=16, n_layer=1,
                                     n_head=2)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config)
    pattern = torch.arange(12) % 4 + 3
    data = [{"input_ids": pattern.roll(i % 4), "labels": pattern.roll(i % 4)}
            for i in range(32)]
    opt = trainop.AdamOptimizer(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.02, total_steps=6)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), max_steps=max_steps, per_device_train_batch_size=4,
        save_strategy="steps", save_steps=3, report_to=[], use_cpu=True, disable_tqdm=True,
        dataloader_num_workers=0, seed=0, logging_steps=1)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data,
                                   optimizers=(opt, scheduler))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train(resume_from_checkpoint=resume)
    return model, opt


def test_hf_trainer_onecycle_trains_and_resumes_bit_exactly(tmp_path):
    """HF Trainer with OneCycleLR over trainop's Adam: resuming from the checkpoint saved at
    step 3 ends at step 6 bit for bit as the run straight through."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    transformers.logging.set_verbosity_error()
    model_a, opt_a = _hf_run(transformers, tmp_path / "a", 6)
    _hf_run(transformers, tmp_path / "b", 3)
    model_b, opt_b = _hf_run(transformers, tmp_path / "b", 6,
                             resume=str(tmp_path / "b" / "checkpoint-3"))
    for a, b in zip(model_a.parameters(), model_b.parameters(), strict=True):
        assert torch.equal(a, b)
    group_a, group_b = opt_a.param_groups[0], opt_b.param_groups[0]
    assert int(group_b["non_slot"]["step"]) == 6
    assert group_a["betas"] == group_b["betas"] and group_a["beta1"] == group_b["beta1"]
    assert torch.equal(group_a["non_slot"]["beta1_power"], group_b["non_slot"]["beta1_power"])


# ------------------------------------------- a trainop schedule as the lr, under HF Trainer
class _TwoHeads(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(3, 1), torch.nn.Linear(3, 1)

    def forward(self, x, labels):
        return {"loss": torch.nn.functional.mse_loss(self.a(x) + self.b(x), labels)}


def test_hf_trainer_refuses_a_scheduled_lr_and_restores_every_group(tmp_path):
    """Issue #39: the Trainer builds its LambdaLR over accelerate's ``AcceleratedOptimizer``,
    which wraps the trainop optimizer. The refusal is the same one line as for a scheduler
    built on the optimizer itself, and both groups (one scheduled, one float) are left exactly
    as they were (no ``initial_lr`` left behind)."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from trainop import schedules
    transformers.logging.set_verbosity_error()
    model = _TwoHeads()
    policy = schedules.ExponentialDecay(0.1, 1, 0.5)
    opt = trainop.AdamOptimizer([{"params": model.a.parameters(), "lr": 0.5},
                                 {"params": model.b.parameters(), "lr": policy}])
    before = [{k: v for k, v in g.items() if k != "non_slot"} for g in opt.param_groups]
    data = [{"x": torch.ones(3), "labels": torch.ones(1)} for _ in range(4)]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=2,
        save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True,
        dataloader_num_workers=0)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data,
                                   optimizers=(opt, None))
    with pytest.raises(TypeError, match=r"^AdamOptimizer: a torch LR scheduler cannot drive "
                                        r"param group\(s\) \[1\]: their learning rate is a "
                                        r"trainop schedule \(ExponentialDecay\)"):
        trainer.train()
    after = [{k: v for k, v in g.items() if k != "non_slot"} for g in opt.param_groups]
    assert after == before and after[1]["lr"] is policy
    assert int(opt.param_groups[0]["non_slot"]["step"]) == 0  # refused before any update
