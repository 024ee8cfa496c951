"""TF1's habit: ``loss`` built once, then ``opt.minimize(loss)`` in a loop. In torch a loss
tensor is one evaluation whose graph the first call frees; the second call says that TF-style
``minimize`` takes a callable that computes the loss (not torch's advice to retain the graph,
which would re-apply the first evaluation's gradient), and changes nothing."""

from __future__ import annotations

import pytest
import torch

import trainop

HINT = (r"^The loss tensor's graph was used and freed by an earlier minimize/compute_gradients: "
        r"TF-style minimize takes a callable that computes the loss, "
        r"`opt.minimize\(lambda: loss_fn\(...\), var_list=...\)`")


def test_a_loss_tensor_given_twice_names_the_callable():
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    opt = trainop.GradientDescentOptimizer(0.5)
    loss = (w * w).sum()
    opt.minimize(loss, var_list=[w])
    assert w.tolist() == [0.0, 0.0]  # w - 0.5 * 2w
    with pytest.raises(RuntimeError, match=HINT) as caught:
        opt.minimize(loss, var_list=[w])
    assert "a second time" in str(caught.value.__cause__)  # torch's own error, chained
    assert w.tolist() == [0.0, 0.0]


def test_a_callable_loss_is_evaluated_at_each_call():
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    opt = trainop.GradientDescentOptimizer(0.25)
    for _ in range(2):
        opt.minimize(lambda: (w * w).sum(), var_list=[w])
    assert w.tolist() == [0.25, 0.5]  # w * (1 - 0.5) twice
