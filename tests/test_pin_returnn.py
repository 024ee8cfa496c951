"""Pins of RETURNN's learning-rate control at its edges (issue #34): RETURNN's own
``LearningRateControl`` (the installed ``returnn`` package) computes the expected rates live on
the same options and scores; trainop's must equal them."""
from __future__ import annotations

import pytest
import torch

import trainop

returnn_config = pytest.importorskip("returnn.config")
lrc_module = pytest.importorskip("returnn.learning_rate_control")


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
