"""A learning rate written as a str in a RETURNN config (``learning_rate = "1e-3"``): RETURNN's
``Config.float`` reads it with ``float()``; trainop's Updater and learning-rate control read it
the same way, compared here with RETURNN's own ``Config`` on each value."""

from __future__ import annotations

import pytest
import torch

import trainop

returnn_config = pytest.importorskip("returnn.config")

READ = ["1e-3", " 1e-3 ", "+2.5E-4", "1_000e-6", "0.1\n", "3"]
REFUSED = ["abc", "", "1e-3x", "0x10", "1,5"]


def _returnn_float(key, value):
    config = returnn_config.Config()
    config.update({key: value})
    return config.float(key, 1.0)


@pytest.mark.parametrize("text", READ)
def test_a_str_learning_rate_is_read_as_return_reads_it(text):
    expected = _returnn_float("learning_rate", text)
    w = torch.nn.Parameter(torch.tensor([1.0]))
    updater = trainop.Updater({"learning_rate": text}, [w])
    assert updater.get_effective_learning_rate() == expected == float(text)
    updater.step((3 * w).sum())  # plain gradient descent: w -= lr * 3
    assert float(w) == float(torch.tensor(1.0) - torch.tensor(expected) * 3)
    control = trainop.LearningRateControl({"learning_rate": text, "min_learning_rate": text})
    assert control.default_learning_rate == control.min_learning_rate == expected


@pytest.mark.parametrize("text", REFUSED)
def test_text_that_is_no_number_is_refused_as_returnn_refuses_it(text):
    with pytest.raises(ValueError):
        _returnn_float("learning_rate", text)
    w = torch.nn.Parameter(torch.tensor([1.0]))
    message = (r"Expected `learning_rate` to be a number, or a str that float\(\) reads as one "
               r"\(RETURNN's Config.float: \"1e-3\"\), got " + repr(text).replace("\\", "\\\\"))
    with pytest.raises(ValueError, match=message):
        trainop.Updater({"learning_rate": text}, [w])
    with pytest.raises(ValueError, match=message):
        trainop.LearningRateControl({"learning_rate": text})
    assert float(w) == 1.0


def test_a_str_threshold_is_read_too():
    control = trainop.LearningRateControl({"learning_rate": 1.0,
                                           "newbob_relative_error_threshold": "-0.02"})
    assert control.relative_threshold == _returnn_float("newbob_relative_error_threshold",
                                                        "-0.02") == -0.02
