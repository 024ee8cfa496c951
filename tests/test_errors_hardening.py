"""#16's hardening rows (the checked C boundary, step validation, overlapping parameters,
float32-range hyperparameters, flat buffers): every error pinned in one table, each bad step
shown to change nothing, and the inputs that used to crash the process run in subprocesses that
must exit normally (a result or a clear error)."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import NamedTuple

import pytest
import torch
from optimizer_kwargs import kwargs_for

import trainop
from trainop.processing.loss_scale import BackoffLossScaler
from trainop.registry import OPTIMIZER_CLASSES

SLOTTED = [name for name, cls in OPTIMIZER_CLASSES.items()
           if name not in ("GradientDescentOptimizer", "ProximalGradientDescentOptimizer")]


class Row(NamedTuple):
    id: str
    call: Callable[[], object]
    exc: type[Exception]
    match: str


def _adam_step(edit: Callable[[torch.optim.Optimizer, torch.Tensor], None],
               cls=trainop.AdamOptimizer, warm: int = 1, **kw) -> None:
    """``warm`` steps (2: the step plan is cached), ``edit``, one more step."""
    p = torch.ones(4, requires_grad=True)
    opt = cls(params=[p], **({"learning_rate": 0.1} | kw))
    for _ in range(warm):
        p.grad = torch.ones(4)
        opt.step()
    edit(opt, p)
    p.grad = torch.ones_like(p)
    opt.step()


def _set_data(value):
    return lambda opt, p: setattr(p, "data", value)


def _set_group(key, value):
    return lambda opt, p: opt.param_groups[0].__setitem__(key, value)


def _set_slot(name, value):
    return lambda opt, p: opt.state[p].__setitem__(name, value)


def _sparse(indices, shape=(5, 2)):
    n = len(indices)
    return torch.sparse_coo_tensor(torch.tensor([indices]), torch.ones(n, shape[1]), shape)


def _sparse_step(cls, indices):
    table = torch.zeros(5, 2, requires_grad=True)
    opt = cls(0.1, params=[table])
    table.grad = _sparse(indices)
    opt.step()


def _overlapping():
    x = torch.zeros(10)
    return [x[:6].requires_grad_(), x[4:].requires_grad_()]


def _flat_grad_set(size):
    p = torch.zeros(3, requires_grad=True)
    opt = trainop.GradientDescentOptimizer(1.0, params=[p])
    trainop.flatten(opt)
    opt.step()
    p.grad.set_(torch.ones(size))
    opt.step()


def _flat_slot(value):
    p = torch.zeros(3, requires_grad=True)
    opt = trainop.AdamOptimizer(0.1, params=[p])
    trainop.flatten(opt)
    opt.step()
    opt.state[p]["m"] = value
    opt.step()


RANGE = r"Expected `{}` in {} and within float32's finite range"
ERRORS: list[Row] = [
    # ------------------------------------------------ float32's finite range
    Row("epsilon-1e39", lambda: trainop.AdamOptimizer(0.1, epsilon=1e39), ValueError,
        RANGE.format("epsilon", re.escape("[0, inf)")) + r".*got 1e\+39"),
    Row("lr-1e300", lambda: trainop.GradientDescentOptimizer(1e300), ValueError,
        RANGE.format("learning_rate", re.escape("[0, inf)")) + r".*got 1e\+300"),
    Row("initial-accumulator-1e39",
        lambda: trainop.AdagradOptimizer(0.1, initial_accumulator_value=1e39), ValueError,
        RANGE.format("initial_accumulator_value", re.escape("(0, inf)"))),
    Row("scale-max-1e39", lambda: BackoffLossScaler(scale_max=1e39), ValueError,
        r"Expected `scale_max` in .* within float32's finite range"),
    Row("tensor-lr-1e39", lambda: trainop.AdamOptimizer(torch.tensor(1e39, dtype=torch.float64)),
        ValueError, RANGE.format("learning_rate", re.escape("[0, inf)"))),
    # ------------------------------------------------ param_groups edited after construction
    Row("group-lr-nan", lambda: _adam_step(_set_group("lr", math.nan)), ValueError,
        r"Expected `learning_rate` in \[0, inf\), got nan"),
    Row("group-lr-negative", lambda: _adam_step(_set_group("lr", -1.0)), ValueError,
        r"Expected `learning_rate` in \[0, inf\), got -1\.0"),
    Row("group-beta1-1.5", lambda: _adam_step(_set_group("beta1", 1.5)), ValueError,
        r"Expected `beta1` in \[0, 1\), got 1\.5"),
    Row("group-epsilon-inf", lambda: _adam_step(_set_group("epsilon", math.inf)), ValueError,
        r"Expected `epsilon` in \[0, inf\), got inf"),
    Row("group-lr-callable-nan", lambda: _adam_step(_set_group("lr", lambda: math.nan)),
        ValueError, r"Expected `learning_rate` in \[0, inf\), got nan"),
    Row("group-use-nesterov-yes",
        lambda: _adam_step(_set_group("use_nesterov", "yes"), trainop.MomentumOptimizer,
                           momentum=0.9),
        TypeError, r"Expected `use_nesterov` to be a bool, got 'yes'"),
    # ------------------------------------------------ slots replaced with other shapes/dtypes
    Row("slot-0dim", lambda: _adam_step(_set_slot("m", torch.zeros(()))), ValueError,
        r"Expected the slot 'm' of a variable of shape \(4,\) to have shape \(4,\), got \(\)"),
    Row("slot-shape-1", lambda: _adam_step(_set_slot("v", torch.zeros(1))), ValueError,
        r"Expected the slot 'v' of a variable of shape \(4,\) to have shape \(4,\), got \(1,\)"),
    Row("slot-float64", lambda: _adam_step(_set_slot("m", torch.zeros(4, dtype=torch.float64))),
        ValueError, r"Expected the slot 'm' of a variable of shape \(4,\) to have dtype "
                    r"torch\.float32, got torch\.float64"),
    Row("slot-sparse", lambda: _adam_step(_set_slot("v", torch.zeros(4).to_sparse())),
        ValueError, r"Expected the slot 'v' .* to be a dense \(strided\) tensor, got layout "
                    r"torch\.sparse_coo"),
    Row("slot-expanded", lambda: _adam_step(_set_slot("m", torch.zeros(1).expand(4))),
        ValueError, r"Expected the slot 'm' .* to have elements of its own, got stride \(0,\)"),
    Row("slot-view-of-its-parameter",
        lambda: _adam_step(lambda opt, p: opt.state[p].__setitem__("m", p.detach()), warm=2),
        ValueError, r"Expected the parameters and slots an update writes not to share memory, "
                    r"got parameter 0 \(shape \(4,\)\) and the slot 'm' of parameter 0"),
    Row("param-dtype-changed-after-plan",
        lambda: _adam_step(_set_data(torch.ones(4, dtype=torch.float64)), warm=2), ValueError,
        r"Expected the slot 'm' of a variable of shape \(4,\) to have dtype torch\.float64, "
        r"got torch\.float32"),
    Row("param-reshaped-after-plan", lambda: _adam_step(_set_data(torch.ones(6)), warm=2),
        ValueError, r"Expected the slot 'm' of a variable of shape \(6,\) to have shape "
                    r"\(6,\), got \(4,\)"),
    Row("novograd-ema-float64",
        lambda: _adam_step(_set_slot("grad_norm_ema", torch.zeros((), dtype=torch.float64)),
                           trainop.NovoGrad),
        ValueError, r"Expected the slot 'grad_norm_ema' .* dtype torch\.float32, got "
                    r"torch\.float64"),
    Row("novograd-ema-shape",
        lambda: _adam_step(_set_slot("grad_norm_ema", torch.zeros(4)), trainop.NovoGrad),
        ValueError, r"Expected the slot 'grad_norm_ema' .* to have shape \(\), got \(4,\)"),
    # ------------------------------------------------ sparse rows
    Row("sparse-row-out-of-range", lambda: _sparse_step(trainop.AdamOptimizer, [1, 7]),
        ValueError, r"indices of params\[0\]\.grad \(a sparse gradient\) to lie in \[0, 5\) "
                    r"in dimension 0, got 7"),
    Row("sparse-row-negative", lambda: _sparse_step(trainop.AdagradOptimizer, [2, -1, 2]),
        ValueError, r"to lie in \[0, 5\) in dimension 0, got -1"),
    # ------------------------------------------------ overlapping parameters
    Row("overlap-construction", lambda: trainop.AdamOptimizer(0.1, params=_overlapping()),
        ValueError, r"Expected parameters that do not share memory, got parameters 0 "
                    r"\(shape \(6,\)\) and 1 \(shape \(6,\)\)"),
    Row("overlap-expanded",
        lambda: trainop.AdamOptimizer(0.1, params=[torch.zeros(1, 3).expand(4, 3)
                                                   .requires_grad_()]),
        ValueError, r"parameter 0 \(shape \(4, 3\), stride \(0, 1\)\) whose own elements "
                    r"overlap"),
    Row("overlap-tf-style",
        lambda: trainop.FtrlOptimizer(0.1).apply_gradients(
            [(torch.ones(6), v) for v in _overlapping()]),
        ValueError, r"Expected parameters that do not share memory"),
    # ------------------------------------------------ flat buffers
    Row("flat-grad-set-other-size", lambda: _flat_grad_set(5), ValueError,
        r"gradient of a flattened parameter \(shape \(3,\), torch\.float32\) was replaced in "
        r"place by a tensor of shape \(5,\)"),
    Row("flat-slot-1", lambda: _flat_slot(torch.ones(1)), ValueError,
        r"Expected the slot 'm' of a flattened parameter of shape \(3,\) to have that shape, "
        r"got \(1,\)"),
    # ------------------------------------------------ the C boundary itself
    Row("boundary-slot-numel",
        lambda: trainop.kernels.native.run("momentum", [[torch.zeros(8)], [torch.ones(8)],
                                                        [torch.zeros(())]], [0.1, 0.9, 0.0]),
        ValueError, r"native momentum call: slot list 0\[0\] must have its variable's shape "
                    r"\(8,\) \(8 elements\), got shape \(\) \(1 elements\)"),
    Row("boundary-written-overlap",
        lambda: (lambda x: trainop.kernels.native.run(
            "momentum", [[x[:6]], [torch.ones(6)], [x[2:8]]], [0.1, 0.9, 0.0]))(torch.zeros(8)),
        ValueError, r"native momentum call: tensors it writes .* share memory"),
    Row("boundary-list-count",
        lambda: trainop.kernels.native.run("adam", [[torch.zeros(2)], [torch.ones(2)]], []),
        ValueError, r"native adam kernel reads 4 tensor lists, got 2"),
]


def test_error_table_ids_are_unique():
    ids = [row.id for row in ERRORS]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("row", ERRORS, ids=[row.id for row in ERRORS])
def test_error(row: Row):
    if row.id.startswith("boundary") and not trainop.kernels.native.available():
        pytest.skip("no C kernels")
    with pytest.raises(row.exc) as info:
        row.call()
    assert type(info.value) is row.exc
    assert re.search(row.match, str(info.value)), str(info.value)


def _snapshot(opt, params):
    return ([p.detach().clone() for p in params],
            {id(p): {k: v.clone() for k, v in opt.state[p].items()} for p in params},
            [{k: v.clone() for k, v in g["non_slot"].items()} for g in opt.param_groups])


def _same(a, b):
    assert all(torch.equal(x, y) for x, y in zip(a[0], b[0], strict=True))
    assert a[1].keys() == b[1].keys()
    for k in a[1]:
        assert a[1][k].keys() == b[1][k].keys()
        assert all(torch.equal(a[1][k][n], b[1][k][n]) for n in a[1][k])
    for x, y in zip(a[2], b[2], strict=True):
        assert x.keys() == y.keys() and all(torch.equal(x[n], y[n]) for n in x)


@pytest.mark.parametrize("name", ["AdamOptimizer", "NadamOptimizer", "LazyAdamOptimizer",
                                  "AdagradOptimizer", "FtrlOptimizer", "MomentumOptimizer"])
@pytest.mark.parametrize("rows", [[0, 5], [-1, 2], [3, 3, -2]], ids=["past", "neg", "dup-neg"])
def test_bad_sparse_rows_change_nothing(name, rows):
    """Sparse Adam/Nadam used to decay ``m`` before torch raised; nothing moves now."""
    dense = torch.randn(3, 2, requires_grad=True)
    table = torch.randn(5, 2, requires_grad=True)
    opt = OPTIMIZER_CLASSES[name](params=[dense, table], **kwargs_for(name))
    dense.grad, table.grad = torch.ones(3, 2), _sparse([1, 2])
    opt.step()
    before = _snapshot(opt, [dense, table])
    dense.grad, table.grad = torch.ones(3, 2), _sparse(rows)
    with pytest.raises(ValueError, match="to lie in"):
        opt.step()
    _same(before, _snapshot(opt, [dense, table]))


_RESHAPE_CASES = [(name, impl) for name in SLOTTED
                  for impl in OPTIMIZER_CLASSES[name].IMPLEMENTATIONS]


@pytest.mark.parametrize("change", ["reshaped", "reshaped-old-grad", "float64"])
@pytest.mark.parametrize(("name", "impl"), _RESHAPE_CASES)
def test_a_parameter_changed_under_the_optimizer_changes_nothing(name, impl, change):
    """``p.data = t`` of another shape or dtype between steps (the issue's row: torch's
    RuntimeError half-way, after slots and the decoupled-decay params had changed): a clear
    error before anything moves, on every implementation, for the middle one of three
    parameters in two param groups, once the step plan is cached (two steps before)."""
    ps = [torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True),
          torch.randn(2, 2, requires_grad=True)]
    opt = OPTIMIZER_CLASSES[name](params=[{"params": ps[:1]}, {"params": ps[1:]}],
                                  implementation=impl, **kwargs_for(name))
    for _ in range(2):
        for p in ps:
            p.grad = torch.full(p.shape, 0.5)
        opt.step()
    ps[1].data = torch.ones(4, dtype=torch.float64) if change == "float64" else torch.ones(6)
    if change != "reshaped-old-grad":
        ps[1].grad = torch.full_like(ps[1], 0.5)
    before = _snapshot(opt, ps)
    with pytest.raises((ValueError, TypeError),
                       match=r"to have (the variable's )?(shape|dtype)|variable's shape"):
        opt.step()
    _same(before, _snapshot(opt, ps))


@pytest.mark.parametrize("name", SLOTTED)
def test_bad_slot_or_group_value_changes_nothing(name):
    ps = [torch.randn(3, requires_grad=True), torch.randn(5, requires_grad=True)]
    opt = OPTIMIZER_CLASSES[name](params=ps, **kwargs_for(name))
    for p in ps:
        p.grad = torch.ones_like(p)
    opt.step()
    before = _snapshot(opt, ps)
    slot = next(n for n in opt.state[ps[1]] if opt.state[ps[1]][n].dim() > 0)
    saved = opt.state[ps[1]][slot]
    opt.state[ps[1]][slot] = torch.zeros(())
    with pytest.raises(ValueError, match="to have shape"):
        opt.step()
    opt.state[ps[1]][slot] = saved
    _same(before, _snapshot(opt, ps))
    opt.param_groups[0]["lr"] = -1.0
    with pytest.raises(ValueError, match=r"got -1\.0"):
        opt.step()
    _same(before, _snapshot(opt, ps))
    opt.param_groups[0]["lr"] = 0.01
    opt.step()  # and it steps again


def test_flat_buffers_follow_a_replaced_gradient():
    for how in ("assign", "data", "set_"):
        ps = [torch.zeros(3, requires_grad=True), torch.zeros(2, requires_grad=True)]
        opt = trainop.GradientDescentOptimizer(1.0, params=ps)
        trainop.flatten(opt)
        for p in ps:
            p.grad.fill_(1.0)
        opt.step()
        new = torch.full((3,), 2.0)
        if how == "assign":
            ps[0].grad = new
        elif how == "data":
            ps[0].grad.data = new
        else:
            ps[0].grad.set_(new)
        opt.step()
        assert torch.equal(ps[0].detach(), torch.full((3,), -3.0)), how
        assert torch.equal(ps[1].detach(), torch.full((2,), -2.0)), how


def _run(code: str) -> subprocess.CompletedProcess:
    src = os.path.join(os.path.dirname(trainop.__file__), os.pardir)
    env = {**os.environ, "PYTHONPATH": os.path.abspath(src), "OMP_NUM_THREADS": "2"}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=env, timeout=300)


_PRELUDE = """
import sys, torch, trainop
sys.path.insert(0, {tests!r})
from optimizer_kwargs import kwargs_for
from trainop.registry import OPTIMIZER_CLASSES
def attempt(label, fn):
    try:
        fn()
        print(label, "ok")
    except (ValueError, TypeError) as e:
        print(label, "error", type(e).__name__)
    except RuntimeError as e:  # torch's own error: reported (no test expects one)
        print(label, "torch-error", type(e).__name__)
"""


def _prelude() -> str:
    return _PRELUDE.format(tests=os.path.dirname(__file__))


_CRASH_INPUTS = """
for name in {names!r}:
    cls = OPTIMIZER_CLASSES[name]
    def zero_dim_slot():
        p = torch.ones(1_000_000, requires_grad=True)
        opt = cls(params=[p], **kwargs_for(name)); p.grad = torch.ones_like(p); opt.step()
        n = next(k for k, s in opt.state[p].items() if s.dim() > 0)
        opt.state[p][n] = torch.zeros(()); opt.step()
    def negative_row():
        t = torch.zeros(6, 4, requires_grad=True)
        opt = cls(params=[t], **kwargs_for(name))
        t.grad = torch.sparse_coo_tensor(torch.tensor([[3, -1, 3]]), torch.ones(3, 4), (6, 4))
        opt.step()
    def resized_slot():
        p = torch.ones(100_000, requires_grad=True)
        opt = cls(params=[p], **kwargs_for(name)); p.grad = torch.ones_like(p); opt.step()
        n = next(k for k, s in opt.state[p].items() if s.dim() > 0)
        opt.state[p][n].resize_(10); opt.step()
    for label, fn in [("zero", zero_dim_slot), ("neg", negative_row),
                      ("resize", resized_slot)]:
        attempt(name + " " + label, fn)
print("done")
""".replace("{names!r}", repr(SLOTTED))

_ODD_LAYOUTS = """
import os, socket
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
dist.init_process_group("gloo", rank=0, world_size=1)
mesh = init_device_mesh("cpu", (1,))

class Sub(torch.Tensor):
    pass

def run(name, make):
    cls = OPTIMIZER_CLASSES[name]
    params = make()
    opt = cls(params=params, **kwargs_for(name))
    for p in params:
        p.grad = torch.ones_like(p)
    opt.step()
    if make is resized:  # shrunk in place under the optimizer, after the plan was cached
        params[0].requires_grad_(False).resize_(4).requires_grad_(True)
        params[0].grad = torch.ones(4)
    opt.step()
    for p in params:
        assert bool(torch.isfinite(p.detach().full_tensor() if hasattr(p, "full_tensor")
                                   else p.detach()).all())

def dtensor():
    return [torch.nn.Parameter(distribute_tensor(torch.randn(4, 3), mesh, [Replicate()]))]
def dtensor_shard():
    return [torch.nn.Parameter(distribute_tensor(torch.randn(4, 3), mesh, [Shard(0)]))]
def subclass():
    return [torch.nn.Parameter(torch.randn(4, 3).as_subclass(Sub))]
def noncontig():
    return [torch.randn(3, 4).t().requires_grad_()]
def expanded():
    return [torch.randn(1, 3).expand(4, 3).requires_grad_()]
def overlapping():
    x = torch.randn(10)
    return [x[:6].requires_grad_(), x[4:].requires_grad_()]
def resized():
    return [torch.randn(8, requires_grad=True)]
for name in OPTIMIZER_CLASSES:
    for make in (dtensor, dtensor_shard, subclass, noncontig, expanded, overlapping, resized):
        attempt(name + " " + make.__name__, lambda: run(name, make))
dist.destroy_process_group()
print("done")
"""


@pytest.fixture(scope="module")
def fresh_interpreter() -> dict[str, tuple[subprocess.CompletedProcess, list[str]]]:
    """The two snippets below, one after the other in ONE fresh interpreter (one start of torch
    and trainop, not two): each one's lines (ending in "done") after its own header, and the
    process, which must end normally."""
    headers = ("== crash inputs", "== odd layouts")
    out = _run(_prelude() + f"print({headers[0]!r})\n" + _CRASH_INPUTS
               + f"print({headers[1]!r})\n" + _ODD_LAYOUTS)
    lines = out.stdout.splitlines()
    starts = [lines.index(h) if h in lines else len(lines) for h in headers]
    return {"crash": (out, lines[starts[0] + 1:starts[1]]), "layouts": (out, lines[starts[1] + 1:])}


def test_crash_inputs_exit_normally_in_a_subprocess(fresh_interpreter):
    """The rows that used to crash the process (a 0-dim slot on a large parameter, an
    uncoalesced sparse gradient with a negative row, a slot resized in place after the plan
    was cached): every slot-holding optimizer, each in one fresh interpreter."""
    out, lines = fresh_interpreter["crash"]
    assert out.returncode == 0, out.stderr[-2000:]
    assert lines[-1] == "done"
    for line in lines[:-1]:
        name, label, outcome = line.split()[:3]
        assert outcome == "error", line  # each of these is a clear error now


def test_dtensor_subclass_and_odd_layouts_exit_normally_in_a_subprocess(fresh_interpreter):
    """#15 acceptance 2: every optimizer with DTensor parameters (1-rank gloo mesh), a tensor
    subclass, non-contiguous, expanded, overlapping and resized parameters: each run in a
    fresh interpreter ends normally with a result or a clear error."""
    out, lines = fresh_interpreter["layouts"]
    assert out.returncode == 0, out.stderr[-3000:]
    assert lines[-1] == "done", out.stdout[-2000:]
    outcomes = {tuple(line.split()[:2]): line.split()[2] for line in lines[:-1]}
    assert len(outcomes) == 7 * len(OPTIMIZER_CLASSES)
    for (name, kind), outcome in outcomes.items():
        if kind in ("overlapping", "expanded") or (kind == "resized" and name in SLOTTED):
            assert outcome == "error", (name, kind)  # slots of the old size: rejected
        else:  # DTensor: slots take the parameter's placements, the update its local tensors
            assert outcome == "ok", (name, kind)
