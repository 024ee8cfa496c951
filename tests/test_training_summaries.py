"""optimize_loss's summaries: OpenSeq2Seq's tags in TensorBoard event files, with the right values
at the right steps, and no host read on the steps in between."""

from __future__ import annotations

import contextlib
import math

import pytest
import torch
from host_reads import ALL_READS, READS, no_host_reads
from torch import nn

import trainop

event_accumulator = pytest.importorskip(
    "tensorboard.backend.event_processing.event_accumulator")


def _read(logdir):
    acc = event_accumulator.EventAccumulator(str(logdir), size_guidance={"scalars": 0,
                                                                          "histograms": 0})
    acc.Reload()
    return acc


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))


def test_every_tag_with_its_value_at_its_step(tmp_path):
    model = _model()
    x, y = torch.randn(8, 3), torch.randn(8, 1)
    lr_fn = trainop.schedules.policy("poly_decay", learning_rate=0.1, decay_steps=20,
                                     power=1.0)
    op = trainop.optimize_loss(lambda: nn.functional.mse_loss(model(x), y), "Momentum",
                               {"momentum": 0.9}, lr_fn, model=model, clip_gradients=0.05,
                               summaries=["learning_rate", "gradients", "gradient_norm",
                                          "global_gradient_norm", "variables",
                                          "variable_norm"],
                               summary_writer=str(tmp_path), summary_frequency=2)
    expected = {}
    for step in range(5):
        params = {n: p.detach().clone() for n, p in model.named_parameters()}
        loss = nn.functional.mse_loss(model(x), y)
        grads = torch.autograd.grad(loss, list(model.parameters()))
        norm = math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads))
        coef = 0.05 / max(norm, 0.05)
        if step % 2 == 0:
            expected[step] = {"loss": float(loss), "norm": norm, "coef": coef,
                              "lr": 0.1 * (1 - step / 20), "params": params,
                              "grads": dict(zip(params, grads, strict=True))}
        op()
    acc = _read(tmp_path)
    tags = set(acc.Tags()["scalars"])
    names = [n for n, _ in model.named_parameters()]
    assert {"learning_rate", "global_gradient_norm", "global_clipped_gradient_norm",
            "train_loss"} <= tags
    assert {f"gradient_norm/{n}" for n in names} | {f"variable_norm/{n}" for n in names} <= tags
    assert set(acc.Tags()["histograms"]) == ({f"gradients/{n}" for n in names}
                                              | {f"variables/{n}" for n in names})
    for tag in ("learning_rate", "train_loss", "global_gradient_norm"):
        assert [e.step for e in acc.Scalars(tag)] == [0, 2, 4]
    for e in acc.Scalars("learning_rate"):
        assert e.value == pytest.approx(expected[e.step]["lr"], rel=1e-6)
    for e in acc.Scalars("train_loss"):
        assert e.value == pytest.approx(expected[e.step]["loss"], rel=1e-6)
    for e in acc.Scalars("global_gradient_norm"):
        assert e.value == pytest.approx(expected[e.step]["norm"], rel=1e-5)
    for e in acc.Scalars("global_clipped_gradient_norm"):
        exp = expected[e.step]
        assert e.value == pytest.approx(exp["norm"] * exp["coef"], rel=1e-5)
    for n in names:
        for e in acc.Scalars(f"gradient_norm/{n}"):  # after clipping, before LARC
            exp = expected[e.step]
            assert e.value == pytest.approx(
                float(torch.linalg.vector_norm(exp["grads"][n].double())) * exp["coef"],
                rel=1e-5)
        for e in acc.Scalars(f"variable_norm/{n}"):  # the value before the update
            assert e.value == pytest.approx(
                float(torch.linalg.vector_norm(expected[e.step]["params"][n].double())),
                rel=1e-6)
        hist = acc.Histograms(f"variables/{n}")
        assert [h.step for h in hist] == [0, 2, 4]
        assert hist[1].histogram_value.num == expected[2]["params"][n].numel()
        assert hist[1].histogram_value.sum == pytest.approx(
            float(expected[2]["params"][n].double().sum()), rel=1e-5, abs=1e-6)


def test_larc_and_loss_scale_tags(tmp_path):
    model = _model().to(torch.bfloat16)
    x, y = torch.randn(8, 3).to(torch.bfloat16), torch.randn(8, 1)
    op = trainop.optimize_loss(lambda: nn.functional.mse_loss(model(x).float(), y), "SGD",
                               {}, 0.1, model=model, dtype="mixed", loss_scaling="Backoff",
                               larc_params={"larc_eta": 0.002},
                               summaries=["larc_summaries", "loss_scale"],
                               summary_writer=str(tmp_path), summary_frequency=1)
    op()
    acc = _read(tmp_path)
    names = [n for n, _ in model.named_parameters()]
    tags = set(acc.Tags()["scalars"])
    for n in names:
        assert {f"larc_clip_on/{n}", f"larc_grad_update/{n}", f"larc_final_lr/{n}"} <= tags
        trust = acc.Scalars(f"larc_grad_update/{n}")[0].value
        assert acc.Scalars(f"larc_final_lr/{n}")[0].value == pytest.approx(0.1 * trust,
                                                                           rel=1e-6)
        assert acc.Scalars(f"larc_clip_on/{n}")[0].value == float(trust < 1.0)
    assert acc.Scalars("loss_scale")[0].value == 2.0 ** 14  # Backoff starts at scale_max




# The foreach path reads the skip flag of a loss-scaled step once (a documented limit of the
# non-fused, non-native paths; docs/design.md "The gate"), so it runs here without one.
@pytest.mark.parametrize("mode,implementation", [("float32", None), ("mixed-iter_size", None),
                                                 ("float32", "foreach")])
def test_no_host_read_on_non_summary_steps(tmp_path, mode, implementation):
    model = _model()
    x, y = torch.randn(8, 3), torch.randn(8, 1)
    kwargs = {}
    if mode != "float32":
        model = model.to(torch.bfloat16)
        x = x.to(torch.bfloat16)
        kwargs = {"dtype": "mixed", "loss_scaling": "Backoff", "iter_size": 2}
    lr_fn = trainop.schedules.policy("poly_decay", learning_rate=0.1, decay_steps=20,
                                     power=1.0)
    op = trainop.optimize_loss(lambda: nn.functional.mse_loss(model(x).float(), y), "Adam",
                               {"implementation": implementation}, lr_fn, model=model,
                               clip_gradients=1.0, summary_writer=str(tmp_path),
                               summary_frequency=3, **kwargs)
    reads = READS if implementation is None else ALL_READS
    updates = 0
    for k in range(12):
        summary = op._core.update_steps % 3 == 0 and (
            mode == "float32" or k % 2 == 0)
        with contextlib.nullcontext() if summary else no_host_reads(reads):
            op()
        updates = op._core.update_steps
    assert updates == (12 if mode == "float32" else 6)
    assert int(op.global_step) == updates


def test_no_summaries_without_a_writer_reads_nothing():
    model = _model()
    x, y = torch.randn(8, 3), torch.randn(8, 1)
    op = trainop.optimize_loss(lambda: nn.functional.mse_loss(model(x), y), "Adam", {},
                               trainop.schedules.policy("poly_decay", learning_rate=0.1,
                                                        decay_steps=20, power=1.0),
                               model=model, clip_gradients=1.0)
    with no_host_reads(READS):
        for _ in range(3):
            op()


def test_rejected_call_creates_no_log_directory(tmp_path):
    model = _model()
    logdir = tmp_path / "logs"
    with pytest.raises(ValueError, match="beta1"):
        trainop.optimize_loss(lambda: model(torch.zeros(1, 3)).sum(), "Adam", {"beta1": 2.0},
                              0.1, model=model, summary_writer=str(logdir))
    assert not logdir.exists()


def test_float32_automatic_scaling_still_writes_the_loss_scale(tmp_path):
    """Upstream creates the scaler for the summary even where it does not scale the loss."""
    model = _model()
    x, y = torch.randn(8, 3), torch.randn(8, 1)
    op = trainop.optimize_loss(lambda: nn.functional.mse_loss(model(x), y), "SGD", {}, 0.1,
                               model=model, loss_scaling="Backoff",
                               summary_writer=str(tmp_path), summary_frequency=1)
    op()
    assert _read(tmp_path).Scalars("loss_scale")[0].value == 2.0 ** 14


def test_larc_final_lr_uses_the_learning_rate_of_its_update(tmp_path):
    """Spec §3 reference (eta 0.002, w = [3, 4], g = [0.6, 0.8]: trust 0.1 at lr 0.1) under a
    decaying lr: larc_final_lr is lr(global_step before the update) * trust, not the next
    step's lr."""
    w = torch.tensor([3.0, 4.0], requires_grad=True)
    g = torch.tensor([0.6, 0.8])
    op = trainop.optimize_loss(lambda: (w * g).sum(), "SGD", {},
                               lambda gs: 0.1 / (1.0 + gs.float()), var_list=[w],
                               larc_params={"larc_eta": 0.002},
                               summaries=["learning_rate", "larc_summaries"],
                               summary_writer=str(tmp_path), summary_frequency=1)
    expected = []
    for step in range(2):
        norm_w = float(torch.linalg.vector_norm(w.detach().double()))
        lr = 0.1 / (1 + step)
        trust = min(0.002 * norm_w / (lr * (1.0 + 1e-7)), 1.0)
        expected.append((lr, trust))
        op()
    acc = _read(tmp_path)
    assert expected[0][1] == pytest.approx(0.1, rel=1e-6)
    assert [e.value for e in acc.Scalars("learning_rate")] == pytest.approx(
        [lr for lr, _ in expected], rel=1e-6)
    assert [e.value for e in acc.Scalars("larc_grad_update/var_0")] == pytest.approx(
        [t for _, t in expected], rel=1e-5)
    assert [e.value for e in acc.Scalars("larc_final_lr/var_0")] == pytest.approx(
        [lr * t for lr, t in expected], rel=1e-5)
    assert [e.step for e in acc.Scalars("larc_final_lr/var_0")] == [0, 1]


def test_gradient_summaries_show_the_accumulated_gradients(tmp_path):
    """With iter_size the per-variable gradient summaries are of what the update processes:
    sum(g_k)/iter_size, unscaled, with the float32 regularization gradient of a half variable
    in mixed mode, clipped (upstream summarizes the accumulators after clipping)."""
    w = torch.tensor([[1.0, 2.0]], dtype=torch.float16, requires_grad=True)
    b = torch.tensor([0.5], requires_grad=True)  # a float32 variable in a mixed model
    trainop.apply_regularization([w], trainop.l2_regularizer(0.5))
    op = trainop.optimize_loss(lambda k: (w.float() * k).sum() + b.sum() * k.sum(), "SGD", {},
                               0.0, var_list=[w, b], dtype="mixed", loss_scaling="Backoff",
                               iter_size=2, accumulate_first=True, clip_gradients=2.0,
                               summaries=["gradients", "gradient_norm",
                                          "global_gradient_norm"],
                               summary_writer=str(tmp_path), summary_frequency=1)
    op(torch.tensor([1.0, 0.0]))
    op(torch.tensor([3.0, 0.0]))
    gw = torch.tensor([[(1.0 + 3.0) / 2 + 0.5 * 1.0, 0.5 * 2.0]], dtype=torch.float64)
    gb = torch.tensor([(1.0 + 3.0) / 2], dtype=torch.float64)
    norm = math.sqrt(float((gw ** 2).sum() + (gb ** 2).sum()))  # sqrt(11.25) = 3.354
    coef = 2.0 / norm
    acc = _read(tmp_path)
    assert acc.Scalars("global_gradient_norm")[0].value == pytest.approx(norm, rel=1e-6)
    assert acc.Scalars("gradient_norm/var_0")[0].value == pytest.approx(
        float(torch.linalg.vector_norm(gw)) * coef, rel=1e-6)
    assert acc.Scalars("gradient_norm/var_1")[0].value == pytest.approx(2.0 * coef, rel=1e-6)
    hist = acc.Histograms("gradients/var_0")[0].histogram_value
    assert hist.sum == pytest.approx(float(gw.sum()) * coef, rel=1e-6)
    assert hist.max == pytest.approx(2.5 * coef, rel=1e-6)


def test_larc_summaries_with_a_none_gradient_label_the_right_variables(tmp_path):
    """LARC's per-tensor statistics cover the variables with a gradient; an unused variable
    (None gradient, which upstream cannot handle: Q7) gets no LARC tags and shifts no label.
    Spec §3: w = [3, 4], g = [0.6, 0.8] -> t = 0.1; w2 = 0, g2 = [1, 0] -> t = min_update."""
    unused = torch.ones(3, requires_grad=True)
    w = torch.tensor([3.0, 4.0], requires_grad=True)
    w2 = torch.zeros(2, requires_grad=True)
    model = nn.ParameterDict({"a_unused": nn.Parameter(unused), "b_w": nn.Parameter(w),
                              "c_w2": nn.Parameter(w2)})
    p = dict(model.named_parameters())
    op = trainop.optimize_loss(
        lambda: (p["b_w"] * torch.tensor([0.6, 0.8])).sum() + p["c_w2"][0], "SGD", {}, 0.1,
        model=model, larc_params={"larc_eta": 0.002}, summaries=["larc_summaries"],
        summary_writer=str(tmp_path), summary_frequency=1)
    op()
    acc = _read(tmp_path)
    tags = set(acc.Tags()["scalars"])
    assert not any(t.endswith("a_unused") for t in tags)
    assert acc.Scalars("larc_grad_update/b_w")[0].value == pytest.approx(0.1, rel=1e-6)
    assert acc.Scalars("larc_grad_update/c_w2")[0].value == pytest.approx(1e-7, rel=1e-6)
    assert acc.Scalars("larc_final_lr/c_w2")[0].value == pytest.approx(1e-8, rel=1e-6)
    assert acc.Scalars("larc_clip_on/b_w")[0].value == 1.0
    assert torch.equal(p["a_unused"].detach(), torch.ones(3))
    assert p["b_w"].detach().tolist() == pytest.approx([3 - 0.006, 4 - 0.008], rel=1e-6)
