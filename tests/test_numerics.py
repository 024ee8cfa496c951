"""trainop.check_numerics: the first NaN/Inf is named by phase, module, op and step.

Each test injects a non-finite value at a chosen step into one place (a module's forward output,
only the backward pass, the update, the input data) and checks every field of the error against
where it was injected; models with legitimately non-finite values (a masked -inf attention) run
clean when those are ignored.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import trainop
from trainop import NumericsError


class Layer(nn.Module):
    """A linear layer whose forward can be made to take ``log`` of a negative number, or whose
    backward alone can be made non-finite (``sqrt`` at 0: finite forward, infinite gradient)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.fault = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.tanh(self.lin(x))
        if self.fault == "forward":
            y = torch.log(y - 2.0)  # tanh < 1, so every element is log of a negative number
        elif self.fault == "backward":
            y = y + torch.sqrt(torch.zeros_like(y[:, :1]) * y[:, :1])  # sqrt(0): d/dx = inf
        return y


class Stack(nn.Module):
    def __init__(self, n: int = 6) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Layer() for _ in range(n))
        self.head = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def _train(model, opt, steps, x, before_step=None, checker_kwargs=None, loss_fn=None):
    loss_fn = loss_fn or (lambda out: out.pow(2).mean())
    with trainop.check_numerics(model, optimizer=opt, **(checker_kwargs or {})) as checker:
        for step in range(steps):
            if before_step is not None:
                before_step(step)
            opt.zero_grad()
            loss_fn(model(x)).backward()
            opt.step()
    return checker


OPTIMIZERS = [
    ("trainop.Adam", lambda ps, lr=1e-3: trainop.AdamOptimizer(params=ps, learning_rate=lr)),
    ("torch.SGD", lambda ps, lr=1e-3: torch.optim.SGD(ps, lr=lr)),
]


@pytest.mark.parametrize("make_opt", [o for _, o in OPTIMIZERS], ids=[n for n, _ in OPTIMIZERS])
def test_forward_fault_names_module_op_and_step(make_opt):
    model = Stack()
    opt = make_opt(model.parameters())
    x = torch.randn(8, 4)

    def inject(step):
        if step == 3:
            model.layers[2].fault = "forward"

    with pytest.raises(NumericsError) as info:
        _train(model, opt, 6, x, inject)
    e = info.value
    assert (e.phase, e.module, e.op, e.step) == ("forward", "layers.2", "aten.log", 3)
    assert e.tensor_stats.nan == 32 and e.tensor_stats.finite_min is None
    assert e.origin == "model"


def test_params_untouched_by_the_failing_step():
    model = Stack()
    opt = trainop.AdamOptimizer(params=model.parameters(), learning_rate=1e-3)
    x = torch.randn(8, 4)
    snapshot = {}

    def inject(step):
        if step == 2:
            model.layers[4].fault = "forward"
            snapshot.update({n: p.detach().clone() for n, p in model.named_parameters()})

    with pytest.raises(NumericsError):
        _train(model, opt, 4, x, inject)
    for n, p in model.named_parameters():  # the check runs before the update
        assert torch.equal(p, snapshot[n]), n


def test_backward_only_fault_names_node_and_module():
    model = Stack()
    opt = trainop.GradientDescentOptimizer(params=model.parameters(), learning_rate=0.1)
    x = torch.randn(8, 4)

    def inject(step):
        if step == 2:
            model.layers[3].fault = "backward"

    with pytest.raises(NumericsError) as info:
        _train(model, opt, 4, x, inject)
    e = info.value
    assert (e.phase, e.module, e.step) == ("backward", "layers.3", 2)
    assert e.op == "SqrtBackward0"
    assert e.tensor_stats.posinf > 0 or e.tensor_stats.nan > 0


UPDATE_OPTIMIZERS = [
    ("trainop.GD", lambda groups: trainop.GradientDescentOptimizer(params=groups,
                                                                   learning_rate=1e-3)),
    ("trainop.Momentum", lambda groups: trainop.MomentumOptimizer(
        params=groups, learning_rate=1e-3, momentum=0.9)),
    ("torch.SGD", lambda groups: torch.optim.SGD(groups, lr=1e-3)),
]


@pytest.mark.parametrize("make_opt", [o for _, o in UPDATE_OPTIMIZERS],
                         ids=[n for n, _ in UPDATE_OPTIMIZERS])
def test_update_fault_names_parameter(make_opt):
    model = Stack(3)
    head = [model.head.weight]
    rest = [p for n, p in model.named_parameters() if n != "head.weight"]
    opt = make_opt([{"params": rest}, {"params": head}])
    x = torch.randn(8, 4)
    before = {}

    def inject(step):  # from step 2 on, one parameter's learning rate is huge
        if step == 2:
            opt.param_groups[1]["lr"] = 1e38
            before["head"] = model.head.weight.detach().clone()

    with pytest.raises(NumericsError) as info:
        # gradients of size ~1e3-1e4: lr * g overflows float32
        _train(model, opt, 5, x, inject, loss_fn=lambda out: 1e4 * (out - 3).pow(2).mean())
    e = info.value
    assert (e.phase, e.module, e.step, e.parameter, e.slot) == (
        "update", "head", 2, "head.weight", None)
    assert e.op == f"{type(opt).__name__}.step"
    assert e.origin == "optimizer"
    assert e.tensor_stats.shape == (1, 4)
    assert e.tensor_stats.posinf + e.tensor_stats.neginf + e.tensor_stats.nan > 0
    assert torch.isfinite(before["head"]).all()


def test_update_fault_in_optimizer_state_names_slot():
    model = Stack(2)
    opt = trainop.AdamOptimizer(params=model.parameters(), learning_rate=1e-3)
    x = torch.randn(8, 4)

    def inject(step):
        if step == 1:  # the squared gradient overflows v; the parameter itself stays finite
            model.head.weight.register_hook(lambda g: g * 1e30)

    with pytest.raises(NumericsError) as info:
        _train(model, opt, 3, x, inject)
    e = info.value
    assert (e.phase, e.parameter, e.slot, e.step) == ("update", "head.weight", "v", 1)


def test_input_data_reported_as_outside_the_model():
    model = Stack()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8, 4)
    bad = x.clone()
    bad[5, 1] = float("inf")
    data = [x, x, x, bad, x]
    with pytest.raises(NumericsError) as info, \
            trainop.check_numerics(model, optimizer=opt):
        for step in range(5):
            opt.zero_grad()
            model(data[step]).pow(2).mean().backward()
            opt.step()
    e = info.value
    assert (e.phase, e.module, e.op, e.step, e.origin) == ("forward", "<input>", "args[0]", 3,
                                                          "data")
    assert e.tensor_stats.posinf == 1 and e.tensor_stats.shape == (8, 4)


def test_no_optimizer_reads_at_next_call_and_at_exit():
    model = Stack()
    x = torch.randn(8, 4)
    with pytest.raises(NumericsError) as info, trainop.check_numerics(model):
        model(x).sum().backward()
        model.layers[5].fault = "forward"
        model(x).sum()
    assert (info.value.module, info.value.op, info.value.step) == ("layers.5", "aten.log", 0)


class MaskedAttention(nn.Module):
    """Scores masked with -inf before the softmax: a non-finite value that is expected."""

    def __init__(self, d: int = 8) -> None:
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.mask = Mask()
        self.out = nn.Linear(d, d)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = self.mask(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]))
        return self.out(torch.softmax(scores, dim=-1) @ v)


class Mask(nn.Module):
    def forward(self, scores):
        causal = torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1)
        return scores.masked_fill(causal, float("-inf"))


def test_masked_attention_runs_clean_when_mask_ignored():
    model = nn.Sequential(nn.Linear(8, 8), MaskedAttention(), nn.Linear(8, 1))
    opt = trainop.AdamOptimizer(params=model.parameters(), learning_rate=1e-3)
    x = torch.randn(4, 5, 8)
    checker = _train(model, opt, 3, x, checker_kwargs={"ignore": ("mask",)})
    assert checker.step == 3
    with pytest.raises(NumericsError) as info:  # not ignored: the mask's -inf is reported
        _train(model, opt, 1, x)
    assert (info.value.module, info.value.op) == ("1.mask", "aten.masked_fill")


class SafeLog(nn.Module):
    """``log`` where positive, 0 elsewhere: a NaN appears inside (log of a negative number) and
    is removed before the output; its gradient is finite (0 * 1/x)."""

    def forward(self, x):
        return torch.where(x > 0, torch.log(x), torch.zeros_like(x))


def test_nan_removed_inside_ignored_module_does_not_raise():
    model = nn.Sequential(nn.Linear(4, 4), SafeLog(), nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    checker = _train(model, opt, 3, torch.randn(8, 4), checker_kwargs={"ignore": ("1",)})
    assert checker.step == 3


def test_nan_leaving_an_ignored_module_is_reported_where_it_arrives():
    class Leaks(nn.Module):
        def forward(self, x):
            return torch.log(x)  # NaN for negative inputs, and it leaves the module

    class Receives(nn.Module):
        def __init__(self):
            super().__init__()
            self.leaks = Leaks()
            self.lin = nn.Linear(4, 1)

        def forward(self, x):
            return self.lin(self.leaks(x) * 2.0)

    model = nn.Sequential(nn.Linear(4, 4), Receives())
    with pytest.raises(NumericsError) as info, \
            trainop.check_numerics(model, ignore=("leaks",)):
        model(torch.randn(8, 4) - 5.0).sum().backward()
    e = info.value  # the first watched output that carries it: the linear layer after the mul
    assert (e.phase, e.module) == ("forward", "1.lin")
    assert e.op in ("aten.addmm", "aten.linear", "aten.mm")


def test_ignored_module_hides_its_children():
    class Parent(nn.Module):
        def __init__(self):
            super().__init__()
            self.child = Mask()

        def forward(self, s):
            return torch.softmax(self.child(s), -1).nan_to_num(0.0)

    model = nn.Sequential(nn.Linear(4, 4), Parent())
    with trainop.check_numerics(model, ignore=("1",)):
        model(torch.randn(3, 4, 4)).sum()


def test_transformer_encoder_forward_fault():
    torch.manual_seed(1)
    layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.1,
                                       batch_first=True)
    model = nn.TransformerEncoder(layer, num_layers=3, enable_nested_tensor=False)
    opt = trainop.AdamOptimizer(params=model.parameters(), learning_rate=1e-3)
    x = torch.randn(4, 6, 16)
    causal = nn.Transformer.generate_square_subsequent_mask(6)
    model.train()

    def inject(step):
        if step == 2:
            with torch.no_grad():
                model.layers[1].linear1.weight[0, 0] = float("nan")

    with pytest.raises(NumericsError) as info, \
            trainop.check_numerics(model, optimizer=opt, ignore=("<input>.mask",)):
        for step in range(4):
            inject(step)
            opt.zero_grad()
            model(x, mask=causal, is_causal=True).pow(2).mean().backward()
            opt.step()
    e = info.value  # a parameter made NaN outside the updates: named as such
    assert (e.phase, e.module, e.step) == ("forward", "layers.1.linear1", 2)
    assert (e.parameter, e.op) == ("layers.1.linear1.weight", None)
    assert e.tensor_stats.nan == 1


def test_transformer_clean_run_with_causal_mask_and_dropout():
    torch.manual_seed(2)
    layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.1,
                                       batch_first=True)
    model = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    opt = trainop.AdamOptimizer(params=model.parameters(), learning_rate=1e-3)
    x = torch.randn(4, 6, 16)
    causal = nn.Transformer.generate_square_subsequent_mask(6)
    with trainop.check_numerics(model, optimizer=opt, ignore=("<input>.mask",)) as checker:
        for _ in range(3):
            opt.zero_grad()
            model(x, mask=causal).pow(2).mean().backward()
            opt.step()
    assert checker.step == 3


def test_lstm_backward_fault():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(4, 8, num_layers=2, batch_first=True)
            self.proj = Layer()
            self.proj.lin = nn.Linear(8, 4)

        def forward(self, x):
            out, _ = self.lstm(x)
            return self.proj(out[:, -1])

    model = Net()
    opt = trainop.RMSPropOptimizer(params=model.parameters(), learning_rate=1e-3)
    x = torch.randn(3, 5, 4)

    def inject(step):
        if step == 1:
            model.proj.fault = "backward"

    with pytest.raises(NumericsError) as info:
        _train(model, opt, 3, x, inject)
    assert (info.value.phase, info.value.module, info.value.op, info.value.step) == (
        "backward", "proj", "SqrtBackward0", 1)


class LSTMThenLog(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 8, num_layers=2, batch_first=True)
        self.head = nn.Linear(8, 1)
        self.broken = False

    def forward(self, x):
        out, _ = self.lstm(x)
        h = out[:, -1]
        if self.broken:
            h = torch.log(h - 1.0)  # LSTM outputs are in (-1, 1): NaN
        return self.head(h)


def test_lstm_forward_fault():
    model = LSTMThenLog()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(3, 5, 4)

    def inject(step):
        if step == 1:
            model.broken = True

    with pytest.raises(NumericsError) as info:
        _train(model, opt, 3, x, inject)
    e = info.value  # the op in the root module's own code
    assert (e.phase, e.module, e.op, e.step) == ("forward", "", "aten.log", 1)


def test_lstm_saturating_inf_weight_caught_at_update():
    """An infinite input weight saturates the LSTM's gates: forward and backward stay finite,
    and the parameter (still infinite after the update) is reported by the update check."""
    model = nn.Sequential(nn.LSTM(4, 8, batch_first=True))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(3, 5, 4)

    def inject(step):
        if step == 1:
            with torch.no_grad():
                model[0].weight_ih_l0[2, 1] = float("inf")

    with pytest.raises(NumericsError) as info:
        _train(model, opt, 3, x, inject, loss_fn=lambda out: out[0].pow(2).mean())
    e = info.value
    assert (e.phase, e.module, e.step, e.parameter) == ("update", "0", 1, "0.weight_ih_l0")
    assert e.tensor_stats.posinf == 1


def test_pipeline_and_apply_gradients_are_checked():
    model = Stack(3)
    opt = trainop.AdamOptimizer(params=model.parameters(), learning_rate=1e-3)
    pipe = trainop.GradientPipeline(opt, [trainop.processing.ClipByGlobalNorm(1.0)])
    x = torch.randn(8, 4)
    with pytest.raises(NumericsError) as info, trainop.check_numerics(model, optimizer=pipe):
        for step in range(4):
            if step == 2:
                model.layers[1].fault = "forward"
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            pipe.step()
    assert (info.value.module, info.value.op, info.value.step) == ("layers.1", "aten.log", 2)
    # TF style: apply_gradients runs the step hooks too
    model2 = Stack(2)
    opt2 = trainop.GradientDescentOptimizer(learning_rate=0.1)
    with pytest.raises(NumericsError) as info, trainop.check_numerics(model2, optimizer=opt2):
        for step in range(3):
            if step == 1:
                model2.layers[0].fault = "forward"
            opt2.minimize(lambda: model2(x).pow(2).mean(), var_list=list(model2.parameters()))
    assert (info.value.module, info.value.step) == ("layers.0", 1)


def test_overflowed_probe_sum_is_not_an_error():
    class Big(nn.Module):
        def forward(self, x):
            return x * 0 + 3e38  # every element finite; their sum overflows float32

    model = nn.Sequential(nn.Linear(4, 4), Big())
    with trainop.check_numerics(model):
        model(torch.randn(8, 4))


def test_hooks_removed_after_exit_and_error():
    model = Stack(2)
    with trainop.check_numerics(model):
        model(torch.randn(2, 4))
    model.layers[0].fault = "forward"
    model(torch.randn(2, 4))  # no checker: nothing raises
    assert not torch.nn.modules.module._global_forward_hooks


def test_print_tensors_and_add_check_numerics_ops(capsys):
    model = Stack(2)
    checker = trainop.add_check_numerics_ops([model], use_check_numerics=False)
    out = capsys.readouterr().out
    assert "add check for: module 'layers.0.lin'" in out
    try:
        model.layers[1].fault = "forward"
        with pytest.raises(NumericsError) as info:
            model(torch.randn(2, 4))
            checker.check()
    finally:
        checker.remove()
    stats = info.value.tensor_stats
    assert stats.values is not None and torch.isnan(stats.values).all()
    assert "values:" in str(info.value)


def test_add_check_numerics_ops_watches_every_module_when_fetches_is_none():
    model = Stack(3)
    checker = trainop.add_check_numerics_ops(debug_print_added_checks=False)
    try:
        model(torch.randn(2, 4))
        checker.check()
        model.layers[2].fault = "forward"
        model(torch.randn(2, 4))
        with pytest.raises(NumericsError) as info:
            checker.check()
    finally:
        checker.remove()
    assert (info.value.module, info.value.op) == ("layers.2", "aten.log")


def test_ignore_ops_skips_an_op():
    model = nn.Sequential(nn.Linear(8, 8), MaskedAttention(), nn.Linear(8, 1))
    checker = trainop.add_check_numerics_ops(model, ignore_ops=["aten.masked_fill"],
                                             debug_print_added_checks=False)
    try:
        model(torch.randn(2, 5, 8)).sum().backward()
        checker.check()
    finally:
        checker.remove()


def test_error_pickles():
    import pickle

    e = NumericsError("backward", "a.b", "SqrtBackward0", 4)
    e2 = pickle.loads(pickle.dumps(e))
    assert (e2.phase, e2.module, e2.op, e2.step) == ("backward", "a.b", "SqrtBackward0", 4)
    assert str(e2) == str(e)


def test_bench_numerics_runs_and_reports_the_three_candidates():
    from trainop.bench.numerics import render_numerics, run_numerics_benchmark

    result = run_numerics_benchmark(steps=4, rounds=2, warmup=1, batch=2, seq=4,
                                    workloads=((16, 1, 1.2), (32, 2, 1.1)))
    assert [(w["d_model"], w["layers"], w["steps_per_round"]) for w in result["workloads"]] == [
        (16, 1, 4), (32, 2, 1)]
    for w in result["workloads"]:
        assert set(w["median_s"]) == {"plain", "check_numerics", "detect_anomaly"}
        assert w["ratio_to_plain"]["plain"] == 1.0
        assert all(t > 0 for t in w["median_s"].values())
        assert w["passed"] == (w["ratio_to_plain"]["check_numerics"] <= w["target"])
    text = render_numerics(result)
    assert "| detect_anomaly |" in text and "(target <= 1.2x)" in text
    assert "d32 x 2: check_numerics / plain" in text and "(target <= 1.1x)" in text


class SqrtHead(nn.Module):
    """A head whose backward alone can be made non-finite: sqrt at 0 (finite forward)."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.proj = nn.Linear(d, 1)
        self.fault = False

    def forward(self, h):
        out = self.proj(h)
        if self.fault:
            out = out + torch.sqrt(out * 0.0)
        return out


def _transformer_model():
    torch.manual_seed(4)
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.1, batch_first=True)
    return nn.Sequential(nn.TransformerEncoder(layer, 3, enable_nested_tensor=False),
                         SqrtHead(16))


@pytest.mark.parametrize("fault", ["forward", "backward", "update", "data"])
def test_transformer_encoder_every_phase(fault):
    model = _transformer_model()
    head = model[1].proj.weight
    # the head's weight in a group of its own: the update fault gives it a huge learning rate
    opt = trainop.GradientDescentOptimizer(
        params=[{"params": [p for p in model.parameters() if p is not head]},
                {"params": [head]}], learning_rate=1e-3)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 6, 16, generator=g)
    bad = x.clone()
    bad[1, 2, 3] = float("nan")

    def inject(step):
        if step != 2:
            return
        if fault == "forward":  # activations overflow in layer 1's first linear layer
            with torch.no_grad():
                model[0].layers[1].linear1.weight.mul_(1e38)
        elif fault == "backward":
            model[1].fault = True
        elif fault == "update":
            opt.param_groups[1]["lr"] = 3e38

    with pytest.raises(NumericsError) as info, trainop.check_numerics(model, optimizer=opt):
        for step in range(4):
            inject(step)
            opt.zero_grad()
            inputs = bad if fault == "data" and step == 2 else x
            (1e3 * model(inputs).pow(2).mean()).backward()
            opt.step()
    e = info.value
    assert e.step == 2
    expected = {
        "forward": ("forward", "0.layers.1.linear1"),
        "backward": ("backward", "1"),
        "update": ("update", "1.proj"),
        "data": ("forward", "<input>"),
    }[fault]
    assert (e.phase, e.module) == expected
    if fault == "forward":
        assert e.op in ("aten.addmm", "aten.linear", "aten.mm", "aten.bmm")
    if fault == "backward":
        assert e.op == "SqrtBackward0"
    if fault == "update":
        assert e.parameter == "1.proj.weight" and e.op == "GradientDescentOptimizer.step"
    if fault == "data":
        assert e.op == "args[0]" and e.tensor_stats.nan == 1


def test_lstm_input_data_reported_as_data():
    model = LSTMThenLog()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(3, 5, 4)
    bad = x.clone()
    bad[0, 4, 1] = float("inf")
    with pytest.raises(NumericsError) as info, trainop.check_numerics(model, optimizer=opt):
        for step in range(3):
            opt.zero_grad()
            model(bad if step == 1 else x).pow(2).mean().backward()
            opt.step()
    e = info.value
    assert (e.phase, e.module, e.op, e.step, e.origin) == ("forward", "<input>", "args[0]", 1,
                                                          "data")
    assert e.tensor_stats.posinf == 1
