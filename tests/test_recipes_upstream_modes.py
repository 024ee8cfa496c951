"""An OpenSeq2Seq recipe trains as OpenSeq2Seq's code does where trainop's default for new work
differs (``openseq2seq.UPSTREAM_BEHAVIOUR``): NovoGrad with ``second_moment="openseq2seq"``
unless the recipe asks for the paper's algorithm; ``check-config`` and ``train`` say which mode
and why. The weights are spec §7.1's (TF 2.21 running OpenSeq2Seq's ``novograd.py``)."""

from __future__ import annotations

import pytest
import torch

import trainop
from trainop.__main__ import main

RECIPE = """
from open_seq2seq.optimizers.lr_policies import fixed_lr
from open_seq2seq.optimizers.novograd import NovoGrad

params = {{"beta1": 0.9, "beta2": 0.5, "weight_decay": 0.0{extra}}}
base_params = {{
    "max_steps": 3, "optimizer": NovoGrad, "optimizer_params": params,
    "lr_policy": fixed_lr, "lr_policy_params": {{"learning_rate": 0.1}},
}}
"""
GRADS = [[0.3, -0.4], [3.0, 1.0], [-0.01, 0.02]]
#: spec §7.1: w0 = [1, 2], lr 0.1, beta1 0.9, beta2 0.5, wd 0
OPENSEQ2SEQ = [[0.94, 2.08], [0.7911317, 2.1203771], [0.7018711, 2.0672748]]
PAPER_STEP2 = [0.7534822, 2.1078274]


class _W(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor([1.0, 2.0]))


def _weights(tmp_path, extra: str = "") -> list[list[float]]:
    path = tmp_path / "novograd.py"
    path.write_text(RECIPE.format(extra=extra))
    recipe = trainop.load_recipe(str(path))
    model = _W()
    op = recipe.build(model, lambda g: (model.w * g).sum())
    out = []
    for g in GRADS:
        op(torch.tensor(g))
        out.append(model.w.detach().tolist())
    return out


def test_openseq2seq_recipe_gets_openseq2seqs_novograd(tmp_path):
    got = _weights(tmp_path)
    torch.testing.assert_close(torch.tensor(got), torch.tensor(OPENSEQ2SEQ), rtol=0, atol=2e-7)


def test_the_papers_novograd_is_an_explicit_override(tmp_path):
    got = _weights(tmp_path, ', "second_moment": "persistent"')
    torch.testing.assert_close(torch.tensor(got[1]), torch.tensor(PAPER_STEP2), rtol=0,
                               atol=2e-7)
    assert trainop.NovoGrad(params=[torch.nn.Parameter(torch.ones(1))]).param_groups[0][
        "second_moment"] == "persistent"  # new work: the published algorithm


def test_the_recipes_dict_is_not_changed(tmp_path):
    path = tmp_path / "novograd.py"
    path.write_text(RECIPE.format(extra=""))
    recipe = trainop.load_recipe(str(path))
    recipe.build(_W(), lambda: torch.zeros(()))
    assert "second_moment" not in recipe.options["optimizer_params"]


@pytest.mark.parametrize(("extra", "line"), [
    ("", "  mode: second_moment='openseq2seq' (OpenSeq2Seq's behaviour, chosen for this "
         "recipe: OpenSeq2Seq's NovoGrad never stores its second moment"),
    (', "second_moment": "persistent"', "  mode: second_moment='persistent' (set by the "
                                         "recipe; OpenSeq2Seq's code behaves as "
                                         "second_moment='openseq2seq')"),
])
def test_check_config_and_train_say_which_mode_and_why(tmp_path, capsys, extra, line):
    path = tmp_path / "novograd.py"
    path.write_text(RECIPE.format(extra=extra))
    assert main(["check-config", str(path), "--no-plot"]) == 0
    out = capsys.readouterr().out
    assert line in out
    mode = "'persistent'" if extra else "'openseq2seq'"
    assert f"second_moment={mode}, implementation" in out  # the hyperparameters built
    assert main(["train", str(path), "--out", str(tmp_path / "run"), "--steps", "2",
                 "--no-progress"]) == 0
    assert line in capsys.readouterr().out


@pytest.mark.parametrize("source", ["example", "yaml"])
def test_every_openseq2seq_front_builds_openseq2seqs_novograd(tmp_path, source):
    from pathlib import Path

    if source == "example":
        path = Path(__file__).parents[1] / "examples" / "openseq2seq_jasper.py"
    else:
        path = tmp_path / "r.yaml"
        path.write_text("format: trainop\nopenseq2seq:\n  optimizer: NovoGrad\n"
                        "  lr_policy: fixed_lr\n  lr_policy_params: {learning_rate: 0.1}\n"
                        "  max_steps: 2\n")
    recipe = trainop.load_recipe(str(path))
    model = torch.nn.Linear(2, 1)
    if recipe.options["dtype"] == "mixed":
        model = model.half()
    op = recipe.build(model, lambda: model.weight.float().sum(), num_steps=10)
    inner = getattr(op.optimizer, "optimizer", op.optimizer)  # inside the mixed wrapper
    assert isinstance(inner, trainop.NovoGrad)
    assert inner.param_groups[0]["second_moment"] == "openseq2seq"
