"""RETURNN's per-epoch learning-rate control: trainop's ``LearningRateControl`` against
reference rate sequences produced by running RETURNN's own ``returnn/learning_rate_control.py``
(returnn 1.20261022.211313 from PyPI, its classes built with the same options) on the same
score sequences; then the control driving an Updater, and its checkpoints."""

from __future__ import annotations

import pytest
import torch

import trainop

# config -> the dev scores of epochs 1, 2, ... (None: no score)
SCEN = {'constant-warmup': ({'learning_rate_control': 'constant',
                      'learning_rate': 1.0,
                      'learning_rates': [0.1, 0.3, 0.6]},
                     [None, None, None, None, None, None]),
 'newbob-rel': ({'learning_rate_control': 'newbob_rel',
                 'learning_rate': 1.0,
                 'min_learning_rate': 0.2},
                [3.0, 2.5, 2.49, 2.0, 1.99, 1.98, 1.97, 1.5]),
 'newbob-div-old-relative-lr': ({'learning_rate_control': 'newbob',
                                 'learning_rate': 0.5,
                                 'newbob_relative_error_div_by_old': True,
                                 'learning_rate_control_relative_error_relative_lr': True,
                                 'newbob_learning_rate_growth': 1.2,
                                 'newbob_learning_rate_decay': 0.7,
                                 'newbob_relative_error_threshold': -0.05},
                                [3.0, 2.5, 2.45, 2.44, 2.0, 1.9, 1.89, 1.7]),
 'newbob-abs': ({'learning_rate_control': 'newbob_abs',
                 'learning_rate': 1.0,
                 'newbob_error_threshold': -0.1},
                [3.0, 2.5, 2.45, 2.2, 2.15, 2.14, 1.0]),
 'newbob-multi-epoch': ({'learning_rate_control': 'newbob_multi_epoch',
                         'learning_rate': 1.0,
                         'newbob_multi_num_epochs': 3,
                         'newbob_multi_update_interval': 2,
                         'newbob_relative_error_grow_threshold': -0.2,
                         'newbob_learning_rate_growth': 1.5},
                        [3.0, 2.0, 1.5, 1.4, 1.39, 1.38, 1.37, 1.36, 0.9, 0.6, 0.4]),
 'min-epochs-per-lr': ({'learning_rate_control': 'newbob_rel',
                        'learning_rate': 1.0,
                        'learning_rate_control_min_num_epochs_per_new_lr': 3},
                       [3.0, 2.99, 2.98, 2.97, 2.96, 2.95, 2.94, 2.93])}
# RETURNN's rates for epochs 1 .. len(scores) + 1 (each asked before that epoch's score is set).
UPSTREAM = {'constant-warmup': [0.1, 0.3, 0.6, 0.6, 0.6, 0.6, 0.6],
 'newbob-rel': [1.0, 1.0, 1.0, 0.5, 0.5, 0.25, 0.2, 0.2, 0.2],
 'newbob-abs': [1.0, 1.0, 1.0, 0.5, 0.5, 0.25, 0.125, 0.125],
 'newbob-multi-epoch': [1.0,
                        1.0,
                        1.5,
                        1.5,
                        2.25,
                        2.25,
                        2.25,
                        2.25,
                        1.125,
                        1.125,
                        1.6875,
                        1.6875],
 'min-epochs-per-lr': [1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25],
 'newbob-div-old-relative-lr': [0.5,
                                0.5,
                                0.6,
                                0.42,
                                0.294,
                                0.35279999999999995,
                                0.4233599999999999,
                                0.2963519999999999,
                                0.35562239999999984]}


@pytest.mark.parametrize("name", sorted(SCEN))
def test_rates_equal_returnn(name):
    config, scores = SCEN[name]
    control = trainop.LearningRateControl(config)
    rates = []
    for epoch, score in enumerate(scores, start=1):
        rates.append(control.get_learning_rate_for_epoch(epoch))
        if score is not None:
            control.set_epoch_error(epoch, {"dev_score": score})
    rates.append(control.get_learning_rate_for_epoch(len(scores) + 1))
    assert rates == UPSTREAM[name]   # bit-exact


def test_score_key_search_and_nested_scores():
    control = trainop.LearningRateControl({"learning_rate_control": "newbob_rel"})
    control.set_epoch_error(1, {"train_score": 3.0, "dev_score_output/output_a": 2.0})
    assert control.error_key(1) == "dev_score_output/output_a"
    control.set_epoch_error(2, {"dev_score": {"cost:output": 1.5}, "dev_error": {
        "error:a": 0.3, "error:b": 0.4}})
    assert control.epoch_data[2].error == {"dev_score": 1.5, "dev_error_a": 0.3,
                                           "dev_error_b": 0.4}
    measured = trainop.LearningRateControl({"learning_rate_control": "newbob_rel",
                                           "learning_rate_control_error_measure": "dev_error"})
    measured.set_epoch_error(1, {"dev_error": 0.5, "dev_score": 2.0})
    assert measured.error_key(1) == "dev_error"


def test_drives_the_updater_once_per_epoch_and_resumes():
    model = torch.nn.Linear(2, 1)
    config = {"optimizer": {"class": "sgd"}, "learning_rate": 0.5,
              "learning_rate_control": "newbob_rel"}
    updater = trainop.Updater(config, model)
    control = trainop.LearningRateControl(config)
    seen = []
    for epoch, score in enumerate([3.0, 2.5, 2.49], start=1):
        seen.append(control.apply(updater, epoch))
        assert float(updater.get_current_step_learning_rate()) == seen[-1]
        control.set_epoch_error(epoch, {"dev_score": score})
    assert seen == [0.5, 0.5, 0.5]
    saved = control.state_dict()
    other = trainop.LearningRateControl(config)
    other.load_state_dict(torch.load(_roundtrip(saved), weights_only=True))
    assert other.apply(updater, 4) == control.get_learning_rate_for_epoch(4) == 0.25


def _roundtrip(state):
    import io

    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return buffer


@pytest.mark.parametrize(("state", "match"), [
    ({"control": "constant", "epochs": {}}, "Expected a state of the 'newbob_rel' control"),
    ({"control": "newbob_rel"}, "Expected a learning-rate control state with keys"),
    ({"control": "newbob_rel", "epochs": {0: {"learning_rate": 1.0, "error": {}}}},
     "Expected `epoch` to be an int >= 1, got 0"),
    ({"control": "newbob_rel", "epochs": {1: {"learning_rate": "x", "error": {}}}},
     "Expected `epoch 1 learning_rate` to be a number"),
])
def test_rejected_states_change_nothing(state, match):
    control = trainop.LearningRateControl({"learning_rate_control": "newbob_rel"})
    control.set_epoch_error(1, {"dev_score": 1.0})
    before = control.state_dict()
    with pytest.raises((ValueError, TypeError), match=match):
        control.load_state_dict(state)
    assert control.state_dict() == before


@pytest.mark.parametrize(("config", "exc", "match"), [
    ({"learning_rate_control": "newbobb"}, ValueError,
     r"Expected `learning_rate_control` to be one of \['constant', 'newbob'"),
    ({"learning_rates": "[0.1, 0.2]"}, ValueError,
     r"Expected `learning_rates` as a str to be a dict literal \{epoch: rate\}"),
    ({"learning_rates": 0.1}, TypeError, "Expected `learning_rates` to be a list"),
    ({"learning_rate": -0.1}, ValueError, r"Expected `learning_rate` in \[0, inf\), got -0.1"),
    ({"learning_rates": [0.1, -0.2]}, ValueError, r"Expected `learning_rates\[2\]` in \[0, inf\)"),
    ({"newbob_multi_num_epochs": 0, "learning_rate_control": "newbob_multi_epoch"},
     ValueError, "Expected `newbob_multi_num_epochs` to be an int >= 1, got 0"),
    ({"newbob_learning_rate_decay": "half"}, TypeError,
     "Expected `newbob_learning_rate_decay` to be a number"),
])
def test_config_errors(config, exc, match):
    with pytest.raises(exc, match=match):
        trainop.LearningRateControl(config)


def test_reads_a_returnn_config_file(tmp_path):
    path = tmp_path / "setup.config"
    path.write_text("learning_rate = 0.001\nlearning_rates = [0.0001, 0.0005]\n"
                    "learning_rate_control = 'newbob_multi_epoch'\n"
                    "newbob_multi_num_epochs = 3\nnetwork = {}\n")
    control = trainop.LearningRateControl(str(path))
    assert [control.get_learning_rate_for_epoch(e) for e in (1, 2, 3)] == [0.0001, 0.0005,
                                                                            0.0005]


# More RETURNN 1.20261022.211313 references (the same procedure: RETURNN's
# load_learning_rate_control_from_config on a returnn.config.Config updated with the config;
# for epoch 1..N, get_learning_rate_for_epoch(epoch), then set_epoch_error(epoch, scores) where
# a number means {"dev_score": number}). The same loop also matched RETURNN on 3000 random
# configs and score sequences (a one-off check, not part of CI).
# name: (config, scores of epochs 1.., RETURNN's rates of epochs 1..N)
MORE = {
    "warmup-str": ({"learning_rate": 0.5, "learning_rates": "{1: 0.1, 2: 0.2}"}, [],
                   [0.1, 0.2, 0.2, 0.2]),
    "warmup-dict-gap": ({"learning_rate": 0.5, "learning_rates": {1: 0.1, 3: 0.3}}, [],
                        [0.1, 0.1, 0.3, 0.3, 0.3]),
    "warmup-then-newbob": (
        {"learning_rate_control": "newbob", "learning_rate": 0.01,
         "learning_rates": [0.002, 0.004, 0.006], "newbob_learning_rate_decay": 0.7,
         "newbob_relative_error_threshold": -0.02},
        [5.0, 4.0, 3.5, 3.4, 3.3, 3.0, 2.99, 2.98],
        [0.002, 0.004, 0.006, 0.006, 0.006, 0.006, 0.006, 0.0042, 0.0029399999999999995]),
    "div-by-old": (
        {"learning_rate_control": "newbob_rel", "newbob_relative_error_div_by_old": True,
         "newbob_relative_error_threshold": -0.105},
        [10.0, 9.0, 8.0, 7.5, 7.0, 6.0, 5.9], [1.0, 1.0, 0.5, 0.5, 0.25, 0.125, 0.125, 0.0625]),
    "div-by-new": (
        {"learning_rate_control": "newbob_rel", "newbob_relative_error_threshold": -0.105},
        [10.0, 9.0, 8.0, 7.5, 7.0, 6.0, 5.9], [1.0, 1.0, 1.0, 1.0, 0.5, 0.25, 0.25, 0.125]),
    "min-lr-clamp": (
        {"learning_rate_control": "newbob_rel", "learning_rate": 0.1, "min_learning_rate": 0.02,
         "newbob_learning_rate_decay": 0.3},
        [2.0, 2.0, 2.1, 2.2, 2.3, 2.4], [0.1, 0.1, 0.03, 0.02, 0.02, 0.02, 0.02]),
    "growth": (
        {"learning_rate_control": "newbob_rel", "learning_rate": 0.1,
         "newbob_learning_rate_growth": 1.1},
        [3.0, 2.0, 1.5, 1.6, 1.2],
        [0.1, 0.1, 0.11000000000000001, 0.12100000000000002, 0.06050000000000001,
         0.06655000000000001]),
    "multi-epoch-defaults": (
        {"learning_rate_control": "newbob_multi_epoch", "learning_rate": 0.3},
        [5.0, 4.9, 4.85, 4.8, 4.78, 4.77, 4.76, 4.75, 4.74, 4.73, 4.72, 4.71, 4.7],
        [0.3] * 10 + [0.15] * 4),
    # 8 relative errors: numpy's mean (-0.1027283468674236) is 1 ulp above the plain
    # sum / 8 (-0.10272834686742362), which is the threshold: only numpy's mean decays epoch 10
    "multi-epoch-numpy-mean": (
        {"learning_rate_control": "newbob_multi_epoch", "newbob_multi_num_epochs": 8,
         "newbob_multi_update_interval": 1,
         "newbob_relative_error_threshold": -0.10272834686742362},
        [2.05, 2.48, 2.34, 1.13, 2.52, 2.18, 1.6, 1.06, 2.73],
        [1.0, 1.0, 0.5, 0.25, 0.25, 0.125, 0.125, 0.125, 0.125, 0.0625]),
    "error-measure": (
        {"learning_rate_control": "newbob_rel",
         "learning_rate_control_error_measure": "dev_error"},
        [{"dev_score": 3.0, "dev_error": 0.5}, {"dev_score": 2.0, "dev_error": 0.499},
         {"dev_score": 1.0, "dev_error": 0.498}, {"dev_score": 0.5, "dev_error": 0.3}],
        [1.0, 1.0, 0.5, 0.25, 0.25]),
    "error-default-dev-score": (
        {"learning_rate_control": "newbob_rel"},
        [{"dev_score": 3.0, "dev_error": 0.5}, {"dev_score": 2.0, "dev_error": 0.499},
         {"dev_score": 1.0, "dev_error": 0.498}, {"dev_score": 0.5, "dev_error": 0.3}],
        [1.0, 1.0, 1.0, 1.0, 1.0]),
    "nested-scores": (
        {"learning_rate_control": "newbob_rel"},
        [{"dev_score": {"cost:output": 3.0, "cost:ctc": 5.0}, "train_score": 1.0},
         {"dev_score": {"cost:output": 2.99, "cost:ctc": 4.0}, "train_score": 0.5},
         {"dev_score": {"cost:output": 2.0, "cost:ctc": 4.5}, "train_score": 0.4},
         {"dev_score": {"cost:output": 1.99, "cost:ctc": 4.5}, "train_score": 0.3}],
        [1.0, 1.0, 0.5, 0.5, 0.25]),
    "train-score-only": (
        {"learning_rate_control": "newbob_rel"},
        [{"train_score": 1.0}, {"train_score": 0.999}, {"train_score": 0.9}],
        [1.0, 1.0, 0.5, 0.5]),
}


def _rates_of(control, scores, n):
    rates = []
    for epoch in range(1, n + 1):
        rates.append(control.get_learning_rate_for_epoch(epoch))
        if epoch <= len(scores):
            s = scores[epoch - 1]
            control.set_epoch_error(epoch, s if isinstance(s, dict) else {"dev_score": s})
    return rates


@pytest.mark.parametrize("name", sorted(MORE))
def test_more_rates_equal_returnn(name):
    config, scores, expected = MORE[name]
    assert _rates_of(trainop.LearningRateControl(config), scores, len(expected)) == expected


def test_callable_decay_nan_score_and_zero_score():
    control = trainop.LearningRateControl({"learning_rate_control": "newbob_abs",
                                           "learning_rate_decay": lambda lr: lr - 0.25})
    assert _rates_of(control, [1.0, 1.0, float("nan")], 4) == [1.0, 1.0, 0.75, 0.75]
    bad = trainop.LearningRateControl({"learning_rate_control": "newbob_rel",
                                       "learning_rate_decay": lambda lr: "x"})
    _rates_of(bad, [1.0, 1.5], 2)
    before = bad.state_dict()
    with pytest.raises(TypeError, match=r"newbob_learning_rate_decay\(1.0\)"):
        bad.get_learning_rate_for_epoch(3)
    assert bad.state_dict() == before
    zero = trainop.LearningRateControl({"learning_rate_control": "newbob_rel"})
    _rates_of(zero, [1.0, 0.0], 2)
    with pytest.raises(ValueError, match="'dev_score' score it divides by is 0"):
        zero.get_learning_rate_for_epoch(3)
    assert 3 not in zero.epoch_data
    negative = trainop.LearningRateControl({"learning_rate_control": "newbob_rel",
                                            "learning_rate_decay": lambda lr: lr - 2.0})
    _rates_of(negative, [1.0, 1.5], 2)
    with pytest.raises(ValueError, match=r"newbob_learning_rate_decay\(1.0\)` in \[0, inf\)"):
        negative.get_learning_rate_for_epoch(3)
    assert 3 not in negative.epoch_data
