"""Pins of RETURNN's learning-rate control at its edges (issue #34): RETURNN's own
``LearningRateControl`` (the installed ``returnn`` package) computes the expected rates live on
the same options and scores; trainop's must equal them."""
from __future__ import annotations

import pytest
import torch

import trainop

returnn_config = pytest.importorskip("returnn.config")
lrc_module = pytest.importorskip("returnn.learning_rate_control")
from returnn_files import returnn_opt_file  # noqa: E402


def _rates(make, config, scores):
    control = make(config)
    out = []
    for epoch, score in enumerate(scores, start=1):
        out.append(control.get_learning_rate_for_epoch(epoch))
        control.set_epoch_error(epoch, {"dev_score": score})
    out.append(control.get_learning_rate_for_epoch(len(scores) + 1))
    return out


def _returnn(config):
    c = returnn_config.Config()
    c.update(dict(config))
    return lrc_module.load_learning_rate_control_from_config(c)


CASES = {
    # relative error (2 - 3) / 2 == -0.5 exactly at the threshold: no decay, growth
    "newbob-rel-at-threshold": ({"learning_rate_control": "newbob_rel", "learning_rate": 1.0,
                                 "newbob_relative_error_threshold": -0.5,
                                 "newbob_learning_rate_growth": 2.0}, [3.0, 2.0]),
    "newbob-abs-at-threshold": ({"learning_rate_control": "newbob_abs", "learning_rate": 1.0,
                                 "newbob_error_threshold": -1.0,
                                 "newbob_learning_rate_growth": 2.0}, [3.0, 2.0]),
    "min-learning-rate-floor": ({"learning_rate_control": "newbob_rel", "learning_rate": 1.0,
                                 "min_learning_rate": 0.4}, [3.0, 3.0, 3.0, 3.0]),
    "multi-epoch-at-grow-threshold": ({"learning_rate_control": "newbob_multi_epoch",
                                       "learning_rate": 1.0, "newbob_multi_num_epochs": 1,
                                       "newbob_relative_error_threshold": -0.5,
                                       "newbob_relative_error_grow_threshold": -0.5,
                                       "newbob_learning_rate_growth": 2.0}, [3.0, 2.0]),
    "multi-epoch-window": ({"learning_rate_control": "newbob_multi_epoch", "learning_rate": 1.0,
                            "newbob_multi_num_epochs": 2,
                            "newbob_relative_error_grow_threshold": -0.4,
                            "newbob_learning_rate_growth": 2.0}, [2.0, 1.0, 1.0]),
    "min-epochs-per-new-lr": ({"learning_rate_control": "newbob_rel", "learning_rate": 1.0,
                               "learning_rate_control_min_num_epochs_per_new_lr": 2},
                              [3.0, 3.0, 3.0, 3.0, 3.0]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_rates_at_the_edges_equal_returnn(name):
    config, scores = CASES[name]
    assert _rates(trainop.LearningRateControl, config, scores) == _rates(_returnn, config, scores)


class _Lin(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(2))


def _updater(**options):
    model = _Lin()
    u = trainop.Updater({"optimizer": {"class": "sgd"}, "backend": "torch", **options},
                        model, initial_learning_rate=0.1)
    return u, model


def test_set_current_train_step_sets_the_step_tensor_the_update_reads():
    u, _ = _updater()
    u.set_current_train_step(global_train_step=7, epoch=1)
    assert int(u.global_train_step) == 7


@pytest.mark.filterwarnings("ignore:Invalid gradient")
def test_the_invalid_gradient_counter_restarts_at_a_new_epoch():
    # RETURNN's torch engine: the consecutive-invalid counter restarts with each epoch, so one
    # NaN step per epoch never exceeds num_allowed_consec_invalid_gradient_steps = 1
    u, model = _updater(num_allowed_consec_invalid_gradient_steps=1)
    for epoch in (1, 2, 3):
        u.set_current_train_step(global_train_step=epoch - 1, epoch=epoch)
        model.w.grad = torch.full_like(model.w, float("nan"))
        u.step()
    assert torch.equal(model.w.detach(), torch.ones(2))  # every NaN step skipped


def _engine_drive(updater, model, plan):
    """RETURNN's torch engine calls: per ``(global_train_step, input, calls step)``."""
    xs = (torch.tensor([[1.0, 2.0]]), torch.tensor([[3.0, -1.0]]), torch.tensor([[0.5, 0.5]]))
    for step, x, stepped in plan:
        updater.set_current_train_step(global_train_step=step, epoch=1, epoch_continuous=0.0)
        (model(xs[x]) ** 2).sum().backward()  # a gradient that depends on the parameters
        if stepped:
            updater.step()
            model.zero_grad(set_to_none=True)
    return [p.detach().clone() for p in model.parameters()]


def _linear():
    torch.manual_seed(0)
    return torch.nn.Linear(2, 1)


def test_a_jump_of_the_engines_step_is_not_a_micro_step():
    # global_train_step 0 ends without step() and the engine resumes at 5: no micro-step is
    # handed over at the jump (only a step of +1 means "the previous one ended without an
    # update"), so the gradients of steps 0 and 5 are summed into the update at 5, as RETURNN's
    # own torch updater (the oracle, driven by the same calls) makes it
    import trainop.returnn
    returnn_updater = pytest.importorskip("returnn.torch.updater")
    config = {"optimizer": {"class": "sgd"}, "learning_rate": 0.1}
    plan = [(0, 0, False), (5, 1, True), (6, 2, True)]
    ours_model = _linear()
    ours = trainop.returnn.SEMANTICS["tf"](config=returnn_config.Config(dict(config)),
                                           network=ours_model, device="cpu")
    ours.create_optimizer()
    theirs_model = _linear()
    theirs = returnn_updater.Updater(config=returnn_config.Config(dict(config)),
                                     network=theirs_model, device="cpu")
    theirs.create_optimizer()
    torch.testing.assert_close(_engine_drive(ours, ours_model, plan),
                               _engine_drive(theirs, theirs_model, plan))


class _TwoLinear(torch.nn.Module):
    def __init__(self, first: str):
        super().__init__()
        torch.manual_seed(0)
        for name in (first, "b" if first == "a" else "a"):
            self.add_module(name, torch.nn.Linear(2, 2, bias=False))

    def forward(self, x):
        return self.b(self.a(x))


def test_an_opt_pt_with_the_parameters_in_another_order_is_refused(tmp_path):
    # the same names and shapes, registered in another order: read in the file's order, each
    # moment would land on the other parameter; trainop refuses (RETURNN remaps by name)
    import trainop.returnn
    pytest.importorskip("returnn.torch.updater")
    config = {"optimizer": {"class": "adam"}}
    path = returnn_opt_file(tmp_path / "theirs.opt.pt", config, _TwoLinear("a"), torch.ones(1, 2))
    ours = trainop.returnn.SEMANTICS["torch"](config=returnn_config.Config(dict(config)),
                                              network=_TwoLinear("b"), device="cpu")
    ours.create_optimizer()
    with pytest.raises(ValueError, match=r"\['b.weight', 'a.weight'\] \(list\) in this order"):
        ours.load_optimizer(path)
    assert ours.optimizer.state_dict()["state"] == {}
