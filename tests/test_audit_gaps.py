"""The last mutation audit's misses (training/, interfaces/, configs/), each pinned by a test
that fails on the plausible bug: the torch-backend invalid-step counter's reset, a recipe's
``iter_size`` reaching its TrainOp, and the summary frequency (with a stand-in writer, so the
test runs without TensorBoard)."""

from __future__ import annotations

import textwrap
import warnings

import pytest
import torch

import trainop


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))


def _loss(model, scale=1.0):
    x = torch.linspace(-1, 1, 6).reshape(2, 3)
    return (model(x) ** 2).sum() * scale


def test_a_valid_step_between_invalid_ones_resets_the_torch_backends_counter():
    """RETURNN's PyTorch backend: K consecutive invalid steps are skipped, the K+1-th aborts;
    a valid step in between starts the count again (without the reset the second
    invalid step below would already abort)."""
    model = _model()
    u = trainop.Updater({"backend": "torch", "optimizer": {"class": "sgd"},
                         "learning_rate": 0.1,
                         "num_allowed_consec_invalid_gradient_steps": 1}, model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert not bool(u.step(_loss(model, float("nan"))).applied)
        assert bool(u.step(_loss(model)).applied)
        assert not bool(u.step(_loss(model, float("nan"))).applied)  # count restarted at 0
        with pytest.raises(RuntimeError, match="Got 2 invalid gradients in succession"):
            u.step(_loss(model, float("nan")))


def test_a_recipes_iter_size_reaches_its_train_op(tmp_path):
    """An OpenSeq2Seq recipe's ``iter_size=3`` makes the built TrainOp update on micro-steps
    0, 3, 6 (OpenSeq2Seq's driver: ``k % iter_size == 0``) with the mean of the gradients
    accumulated since the last update (plain SGD, so the update is checked exactly)."""
    path = tmp_path / "os2s.py"
    path.write_text(textwrap.dedent("""
        from open_seq2seq.optimizers.lr_policies import fixed_lr
        base_params = {
            "optimizer": "GradientDescent",
            "lr_policy": fixed_lr,
            "lr_policy_params": {"learning_rate": 0.5},
            "iter_size": 3,
            "max_steps": 10,
        }
    """))
    recipe = trainop.load_recipe(str(path))
    model = _model()
    op = recipe.build(model, loss=lambda scale: _loss(model, scale))
    updates = []
    scales = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    acc = None
    for k, scale in enumerate(scales):
        before = [p.detach().clone() for p in model.parameters()]
        grads = torch.autograd.grad(_loss(model, scale), list(model.parameters()))
        acc = grads if acc is None else [a + g for a, g in zip(acc, grads, strict=True)]
        pending = 1 if k == 0 else (k - 1) % 3 + 1  # micro-steps accumulated so far
        op(scale)
        changed = any(not torch.equal(b, p) for b, p in zip(before, model.parameters(),
                                                             strict=True))
        if changed:
            updates.append(k)
            expected = [b - 0.5 * a / 3 for b, a in zip(before, acc, strict=True)]
            assert pending in (1, 3)
            for e, p in zip(expected, model.parameters(), strict=True):
                torch.testing.assert_close(p.detach(), e, rtol=1e-6, atol=1e-7)
            acc = None
    assert updates == [0, 3, 6]


class _StandInWriter:
    """Records what a SummaryWriter would be asked to write."""

    def __init__(self):
        self.scalars: dict[str, list[int]] = {}

    def add_scalar(self, tag, value, step):
        self.scalars.setdefault(tag, []).append(int(step))

    def add_histogram(self, tag, values, step):
        pass

    def flush(self):
        pass


def test_summaries_are_written_every_summary_frequency_steps_without_tensorboard():
    model = _model()
    writer = _StandInWriter()
    op = trainop.optimize_loss(lambda: _loss(model), "SGD", None, 0.01, model=model,
                               summaries=["learning_rate"], summary_writer=writer,
                               summary_frequency=3)
    for _ in range(8):
        op()
    assert writer.scalars["learning_rate"] == [0, 3, 6]
    assert writer.scalars["train_loss"] == [0, 3, 6]


def test_an_undefined_name_in_a_config_is_listed_never_guessed(tmp_path):
    """A RETURNN config whose ``learning_rate`` refers to a name it never defines: the option
    is absent from ``recipe.options`` (not 0, not RETURNN's default 1.0), listed in
    ``recipe.unresolved`` with the file, the line and the name, and ``build`` asks for it;
    the other options still resolve."""
    path = tmp_path / "undefined.config"
    path.write_text('optimizer = {"class": "adam"}\nlearning_rate = base_lr * 2\n')
    recipe = trainop.load_recipe(str(path))
    assert "learning_rate" not in recipe.options
    where = recipe.unresolved["learning_rate"]
    assert (where.line, where.reason) == (2, "undefined name 'base_lr'")
    assert where.filename.endswith("undefined.config")
    with pytest.raises(ValueError, match=r"learning_rate at .*undefined.config:2: undefined "
                                         r"name 'base_lr'"):
        recipe.build(_model())
    model = _model()
    updater = recipe.build(model, overrides={"learning_rate": 0.25})
    assert float(updater.get_current_step_learning_rate()) == 0.25
