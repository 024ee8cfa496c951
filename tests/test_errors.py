"""Every validation branch, in one table, and the rule that a rejected call mutates nothing.

Each row of ``ERRORS`` is (id, a callable that builds or does the thing, the exception type, a
regex the message must match). Constructor messages name the argument, the allowed range and
the value. The no-mutation tests check that params, slots, non-slot counters and
``global_step`` are exactly unchanged after a call that raises.
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Callable
from typing import NamedTuple

import pytest
import torch
from torch import nn

import trainop
from trainop import (
    AdadeltaOptimizer,
    AdagradDAOptimizer,
    AdagradOptimizer,
    AdamOptimizer,
    AdamWOptimizer,
    FtrlOptimizer,
    GradientDescentOptimizer,
    LazyAdamOptimizer,
    MomentumOptimizer,
    MomentumWOptimizer,
    NadamOptimizer,
    NovoGrad,
    ProximalAdagradOptimizer,
    ProximalGradientDescentOptimizer,
    RMSPropOptimizer,
)
from trainop.contract import validation as V
from trainop.contract.hyper import evaluate_hyper


class Row(NamedTuple):
    id: str
    call: Callable[[], object]
    exc: type[Exception]
    match: str


def w(values=(1.0, 2.0), dtype=torch.float32):
    return torch.tensor(values, dtype=dtype, requires_grad=True)


def g(values=(0.1, 0.1), dtype=torch.float32):
    return torch.tensor(values, dtype=dtype)


def gd():
    return GradientDescentOptimizer(0.1)


def torch_gd():
    return GradientDescentOptimizer(0.1, params=[w()])


def apply(pairs, **kwargs):
    return lambda: gd().apply_gradients(pairs, **kwargs)


def add_group(opt_factory, **values):
    def call():
        opt = opt_factory()
        opt.add_param_group({"params": [w()], **values})
    return call


def lr(name="learning_rate", interval=r"\[0, inf\)", value=r"-1\.0"):
    return rf"Expected `{name}` in {interval}, got {value}$"


def not_real(name, shown):
    return rf"Expected `{name}` to be a real number, got {shown}$"


def not_bool(name, shown):
    return rf"Expected `{name}` to be a bool, got {shown}$"


NON_LEAF = w() * 2
SPARSE_VAR = torch.sparse_coo_tensor([[0]], [1.0], (2,), check_invariants=False).requires_grad_()
with warnings.catch_warnings():  # torch: "Sparse CSR tensor support is in beta state"
    warnings.simplefilter("ignore", UserWarning)
    SPARSE_CSR_GRAD = torch.tensor([[0.1, 0.0], [0.0, 0.1]]).to_sparse_csr()
LONG_STRING = "x" * 100


def torch_step(**gate):
    opt = torch_gd()
    for p in opt.param_groups[0]["params"]:
        p.grad = torch.ones_like(p)
    return opt.step(**gate)


def flattened():
    opt = torch_gd()
    trainop.flatten(opt)
    return opt


def replaced_after_flatten():
    opt = flattened()
    p = opt.param_groups[0]["params"][0]
    p.grad.fill_(1.0)
    opt.step()
    p.data = p.detach().clone()
    return opt.step()


ERRORS: list[Row] = [
    # ------------------------------------------------------------ learning_rate, every class
    Row("gd-lr-negative", lambda: GradientDescentOptimizer(-1.0), ValueError, lr()),
    Row("gd-lr-string", lambda: GradientDescentOptimizer("0.1"), TypeError,
        not_real("learning_rate", r"'0\.1' \(str\)")),
    Row("gd-lr-bool", lambda: GradientDescentOptimizer(True), TypeError,
        not_real("learning_rate", r"True \(bool\)")),
    Row("gd-lr-none", lambda: GradientDescentOptimizer(None), TypeError,
        not_real("learning_rate", r"None \(NoneType\)")),
    Row("gd-lr-nan", lambda: GradientDescentOptimizer(math.nan), ValueError, lr(value="nan")),
    Row("gd-lr-inf", lambda: GradientDescentOptimizer(math.inf), ValueError, lr(value="inf")),
    Row("gd-lr-complex", lambda: GradientDescentOptimizer(1j), TypeError,
        not_real("learning_rate", r"1j \(complex\)")),
    Row("gd-lr-long-string-truncated", lambda: GradientDescentOptimizer(LONG_STRING), TypeError,
        r"got 'x{76}\.\.\. \(str\)$"),
    Row("gd-lr-tensor-negative", lambda: GradientDescentOptimizer(torch.tensor(-1.0)),
        ValueError, lr()),
    Row("gd-lr-tensor-2-elements", lambda: GradientDescentOptimizer(torch.tensor([0.1, 0.2])),
        TypeError, r"^params argument given to the optimizer should be an iterable of Tensors "
        r"or dicts, but got torch\.FloatTensor: GradientDescentOptimizer read it as its first "
        r"TF argument `learning_rate`"),
    Row("gd-lr-keyword-tensor-2-elements",
        lambda: GradientDescentOptimizer(learning_rate=torch.tensor([0.1, 0.2])), ValueError,
        r"^Tensor lr must be 1-element: expected `learning_rate` to be a 1-element tensor "
        r"\(a 0-dim one, or of shape \(1,\) or \(1, 1\)\), got a tensor of shape \(2,\)$"),
    Row("gd-lr-tensor-int", lambda: GradientDescentOptimizer(torch.tensor(1)), TypeError,
        r"`learning_rate` to be a floating-point tensor, got a tensor of shape \(\) and dtype "
        r"torch\.int64$"),
    Row("momentum-lr-negative", lambda: MomentumOptimizer(-1.0, 0.9), ValueError, lr()),
    Row("adagrad-lr-negative", lambda: AdagradOptimizer(-1.0), ValueError, lr()),
    Row("adagradda-lr-negative", lambda: AdagradDAOptimizer(-1.0, None), ValueError, lr()),
    Row("adadelta-lr-negative", lambda: AdadeltaOptimizer(-1.0), ValueError, lr()),
    Row("rmsprop-lr-negative", lambda: RMSPropOptimizer(-1.0), ValueError, lr()),
    Row("adam-lr-negative", lambda: AdamOptimizer(-1.0), ValueError, lr()),
    Row("lazyadam-lr-negative", lambda: LazyAdamOptimizer(-1.0), ValueError, lr()),
    Row("nadam-lr-negative", lambda: NadamOptimizer(-1.0), ValueError, lr()),
    Row("adamw-lr-negative", lambda: AdamWOptimizer(0.0, -1.0), ValueError, lr()),
    Row("momentumw-lr-negative", lambda: MomentumWOptimizer(0.0, -1.0, 0.9), ValueError, lr()),
    Row("novograd-lr-negative", lambda: NovoGrad(-1.0), ValueError, lr()),
    Row("proximalgd-lr-negative", lambda: ProximalGradientDescentOptimizer(-1.0), ValueError,
        lr()),
    # (lr = 0 is a step that leaves the parameters unchanged: tests/test_contract_lr.py)
    Row("ftrl-lr-negative", lambda: FtrlOptimizer(-1.0), ValueError, lr()),
    Row("ftrl-lr-tensor-negative", lambda: FtrlOptimizer(torch.tensor(-1.0)), ValueError,
        lr()),
    Row("proximaladagrad-lr-negative", lambda: ProximalAdagradOptimizer(-1.0), ValueError,
        lr()),
    # ------------------------------------------------------------ other hyperparameters
    Row("momentum-negative", lambda: MomentumOptimizer(0.1, -0.5), ValueError,
        lr("momentum", value=r"-0\.5")),
    Row("momentum-string", lambda: MomentumOptimizer(0.1, "0.9"), TypeError,
        not_real("momentum", r"'0\.9' \(str\)")),
    Row("momentum-use_nesterov-not-bool", lambda: MomentumOptimizer(0.1, 0.9, use_nesterov=1),
        TypeError, not_bool("use_nesterov", r"1 \(int\)")),
    Row("adam-beta1-one", lambda: AdamOptimizer(beta1=1.0), ValueError,
        lr("beta1", r"\[0, 1\)", r"1\.0")),
    Row("adam-beta1-negative", lambda: AdamOptimizer(beta1=-0.1), ValueError,
        lr("beta1", r"\[0, 1\)", r"-0\.1")),
    Row("adam-beta2-above", lambda: AdamOptimizer(beta2=1.5), ValueError,
        lr("beta2", r"\[0, 1\)", r"1\.5")),
    Row("adam-epsilon-negative", lambda: AdamOptimizer(epsilon=-1e-8), ValueError,
        lr("epsilon", value=r"-1e-08")),
    Row("adam-beta1-tensor-one", lambda: AdamOptimizer(beta1=torch.tensor(1.0)), ValueError,
        lr("beta1", r"\[0, 1\)", r"1\.0")),
    Row("nadam-beta1-one", lambda: NadamOptimizer(beta1=1.0), ValueError,
        lr("beta1", r"\[0, 1\)", r"1\.0")),
    Row("lazyadam-epsilon-negative", lambda: LazyAdamOptimizer(epsilon=-1.0), ValueError,
        lr("epsilon")),
    Row("adagrad-initial-accumulator-zero", lambda: AdagradOptimizer(0.1, 0.0), ValueError,
        lr("initial_accumulator_value", r"\(0, inf\)", r"0\.0")),
    Row("adagrad-initial-accumulator-negative", lambda: AdagradOptimizer(0.1, -1.0),
        ValueError, lr("initial_accumulator_value", r"\(0, inf\)")),
    Row("adagrad-initial-accumulator-string", lambda: AdagradOptimizer(0.1, "0.1"), TypeError,
        not_real("initial_accumulator_value", r"'0\.1' \(str\)")),
    Row("adagradda-initial-gga-zero",
        lambda: AdagradDAOptimizer(0.1, None, initial_gradient_squared_accumulator_value=0.0),
        ValueError, lr("initial_gradient_squared_accumulator_value", r"\(0, inf\)", r"0\.0")),
    Row("adagradda-l1-negative",
        lambda: AdagradDAOptimizer(0.1, None, l1_regularization_strength=-1.0), ValueError,
        lr("l1_regularization_strength")),
    Row("adagradda-l2-negative",
        lambda: AdagradDAOptimizer(0.1, None, l2_regularization_strength=-1.0), ValueError,
        lr("l2_regularization_strength")),
    Row("adagradda-global-step-float", lambda: AdagradDAOptimizer(0.1, torch.tensor(0.0)),
        TypeError, r"Expected `global_step` to be None or a 0-dim integer tensor, got tensor"),
    Row("adagradda-global-step-1d", lambda: AdagradDAOptimizer(0.1, torch.tensor([0])),
        TypeError, r"`global_step` to be None or a 0-dim integer tensor"),
    Row("adagradda-global-step-bool", lambda: AdagradDAOptimizer(0.1, torch.tensor(True)),
        TypeError, r"`global_step` to be None or a 0-dim integer tensor"),
    Row("adagradda-global-step-int", lambda: AdagradDAOptimizer(0.1, 3), TypeError,
        r"`global_step` to be None or a 0-dim integer tensor, got 3 \(int\)"),
    Row("adadelta-rho-above", lambda: AdadeltaOptimizer(rho=1.5), ValueError,
        lr("rho", r"\[0, 1\]", r"1\.5")),
    Row("adadelta-rho-negative", lambda: AdadeltaOptimizer(rho=-0.5), ValueError,
        lr("rho", r"\[0, 1\]", r"-0\.5")),
    Row("adadelta-epsilon-negative", lambda: AdadeltaOptimizer(epsilon=-1.0), ValueError,
        lr("epsilon")),
    Row("rmsprop-decay-above", lambda: RMSPropOptimizer(0.1, decay=1.5), ValueError,
        lr("decay", r"\[0, 1\]", r"1\.5")),
    Row("rmsprop-momentum-negative", lambda: RMSPropOptimizer(0.1, momentum=-1.0), ValueError,
        lr("momentum")),
    Row("rmsprop-epsilon-negative", lambda: RMSPropOptimizer(0.1, epsilon=-1.0), ValueError,
        lr("epsilon")),
    Row("rmsprop-centered-not-bool", lambda: RMSPropOptimizer(0.1, centered="yes"), TypeError,
        not_bool("centered", r"'yes' \(str\)")),
    Row("ftrl-lr-power-positive", lambda: FtrlOptimizer(0.1, learning_rate_power=0.5),
        ValueError, lr("learning_rate_power", r"\(-inf, 0\]", r"0\.5")),
    Row("ftrl-initial-accumulator-negative",
        lambda: FtrlOptimizer(0.1, initial_accumulator_value=-0.1), ValueError,
        lr("initial_accumulator_value", value=r"-0\.1")),
    Row("ftrl-l1-negative", lambda: FtrlOptimizer(0.1, l1_regularization_strength=-1.0),
        ValueError, lr("l1_regularization_strength")),
    Row("ftrl-l2-negative", lambda: FtrlOptimizer(0.1, l2_regularization_strength=-1.0),
        ValueError, lr("l2_regularization_strength")),
    Row("ftrl-l2-shrinkage-negative",
        lambda: FtrlOptimizer(0.1, l2_shrinkage_regularization_strength=-1.0), ValueError,
        lr("l2_shrinkage_regularization_strength")),
    Row("ftrl-accum-name-empty", lambda: FtrlOptimizer(0.1, accum_name=""), ValueError,
        r"Must specify the optimizer name: expected `accum_name` to be a non-empty string, "
        r"got ''"),
    Row("ftrl-linear-name-not-string", lambda: FtrlOptimizer(0.1, linear_name=5), TypeError,
        r"Expected `linear_name` to be a non-empty string, got 5 \(int\)"),
    Row("proximalgd-l1-negative",
        lambda: ProximalGradientDescentOptimizer(0.1, l1_regularization_strength=-1.0),
        ValueError, lr("l1_regularization_strength")),
    Row("proximalgd-l2-negative",
        lambda: ProximalGradientDescentOptimizer(0.1, l2_regularization_strength=-1.0),
        ValueError, lr("l2_regularization_strength")),
    Row("proximaladagrad-initial-accumulator-zero",
        lambda: ProximalAdagradOptimizer(0.1, initial_accumulator_value=0.0), ValueError,
        lr("initial_accumulator_value", r"\(0, inf\)", r"0\.0")),
    Row("proximaladagrad-l1-negative",
        lambda: ProximalAdagradOptimizer(0.1, l1_regularization_strength=-1.0), ValueError,
        lr("l1_regularization_strength")),
    Row("novograd-beta1-one", lambda: NovoGrad(beta1=1.0), ValueError,
        lr("beta1", r"\[0, 1\)", r"1\.0")),
    Row("novograd-beta2-negative", lambda: NovoGrad(beta2=-0.5), ValueError,
        lr("beta2", r"\[0, 1\)", r"-0\.5")),
    Row("novograd-epsilon-negative", lambda: NovoGrad(epsilon=-1.0), ValueError,
        lr("epsilon")),
    Row("novograd-weight-decay-negative", lambda: NovoGrad(weight_decay=-1.0), ValueError,
        lr("weight_decay")),
    Row("novograd-grad-averaging-not-bool", lambda: NovoGrad(grad_averaging=1), TypeError,
        not_bool("grad_averaging", r"1 \(int\)")),
    Row("novograd-second-moment-unknown", lambda: NovoGrad(second_moment="adam"), ValueError,
        r"Expected `second_moment` to be one of \['persistent', 'openseq2seq'\], got 'adam'$"),
    Row("novograd-second-moment-not-string", lambda: NovoGrad(second_moment=2), TypeError,
        r"Expected `second_moment` to be one of \['persistent', 'openseq2seq'\], got 2 \(int\)"),
    Row("adamw-weight-decay-negative", lambda: AdamWOptimizer(-0.1), ValueError,
        lr("weight_decay", value=r"-0\.1")),
    Row("adamw-weight-decay-string", lambda: AdamWOptimizer("0.1"), TypeError,
        not_real("weight_decay", r"'0\.1' \(str\)")),
    Row("momentumw-weight-decay-negative", lambda: MomentumWOptimizer(-0.1, 0.1, 0.9),
        ValueError, lr("weight_decay", value=r"-0\.1")),
    Row("extended-weight-decay-negative",
        lambda: trainop.extend_with_decoupled_weight_decay(GradientDescentOptimizer)(
            -1.0, learning_rate=0.1), ValueError, lr("weight_decay")),
    Row("extend-not-an-optimizer", lambda: trainop.extend_with_decoupled_weight_decay(int),
        TypeError, r"Expected `base` to be a trainop\.Optimizer subclass, got "),
    Row("adamw-decay-var-list-not-iterable",
        lambda: AdamWOptimizer(0.1).apply_gradients([(g(), w())], decay_var_list=5), TypeError,
        r"Expected `decay_var_list` to be an iterable of tensors or None, got 5 \(int\)"),
    # ------------------------------------------------------------ name, use_locking
    Row("name-none", lambda: GradientDescentOptimizer(0.1, name=None), ValueError,
        r"Must specify the optimizer name: expected `name` to be a non-empty string, "
        r"got None"),
    Row("name-empty", lambda: AdamOptimizer(name=""), ValueError,
        r"Must specify the optimizer name.*got ''"),
    Row("name-not-string", lambda: AdamOptimizer(name=7), TypeError,
        r"Expected `name` to be a non-empty string, got 7 \(int\)"),
    Row("use-locking-not-bool", lambda: AdamOptimizer(use_locking=1), TypeError,
        not_bool("use_locking", r"1 \(int\)")),
    Row("use-locking-none", lambda: FtrlOptimizer(0.1, use_locking=None), TypeError,
        not_bool("use_locking", r"None \(NoneType\)")),
    Row("implementation-unknown", lambda: AdamOptimizer(implementation="cuda"), ValueError,
        r"Expected `implementation` to be one of \[.*'reference'.*\], got 'cuda'$"),
    Row("implementation-not-string", lambda: AdamOptimizer(implementation=1), TypeError,
        r"Expected `implementation` to be one of \[.*\], got 1 \(int\)"),
    Row("implementation-fused-not-offered", lambda: AdadeltaOptimizer(implementation="fused"),
        ValueError, r"Expected `implementation` to be one of \[.*\], got 'fused'$"),
    Row("implementation-fused-dtype", lambda: AdamOptimizer(
        params=[w(dtype=torch.float16)], implementation="fused"), ValueError,
        r"implementation='fused' supports dtypes .*got a parameter of dtype torch\.float16"),
    Row("implementation-native-dtype", lambda: FtrlOptimizer(
        0.1, params=[w(dtype=torch.bfloat16)], implementation="native"), ValueError,
        r"implementation='native' runs CPU parameters of dtypes \['torch\.float32', "
        r"'torch\.float64'\], got a parameter of dtype torch\.bfloat16 on cpu; use "
        r"implementation='foreach'$"),
    Row("implementation-native-not-offered", lambda: trainop.extend_with_decoupled_weight_decay(
        GradientDescentOptimizer)(0.1, 0.1, implementation="native"), ValueError,
        r"Expected `implementation` to be one of \[.*\], got 'native'$"),
    # ------------------------------------------------------------ torch style, param groups
    Row("params-int-dtype", lambda: GradientDescentOptimizer(
        0.1, params=[torch.zeros(2, dtype=torch.int64)]), TypeError,
        r"Expected params\[0\] to have a floating dtype in \['torch\.float16', "
        r"'torch\.bfloat16', 'torch\.float32', 'torch\.float64'\], got torch\.int64"),
    Row("params-group-lr-negative", lambda: GradientDescentOptimizer(
        0.1, params=[{"params": [w()], "lr": -1.0}]), ValueError, lr()),
    Row("add-param-group-not-dict", lambda: torch_gd().add_param_group([w()]), TypeError,
        r"Expected `param_group` to be a dict, got \["),
    Row("add-param-group-lr-negative", add_group(torch_gd, lr=-1.0), ValueError, lr()),
    Row("add-param-group-lr-string", add_group(torch_gd, lr="fast"), TypeError,
        not_real("learning_rate", r"'fast' \(str\)")),
    Row("add-param-group-beta1", add_group(lambda: AdamOptimizer(params=[w()]), beta1=1.0),
        ValueError, lr("beta1", r"\[0, 1\)", r"1\.0")),
    Row("add-param-group-momentum", add_group(lambda: MomentumOptimizer(
        0.1, 0.9, params=[w()]), momentum=-1.0), ValueError, lr("momentum")),
    Row("add-param-group-use-nesterov", add_group(lambda: MomentumOptimizer(
        0.1, 0.9, params=[w()]), use_nesterov="yes"), TypeError,
        not_bool("use_nesterov", r"'yes' \(str\)")),
    Row("add-param-group-centered", add_group(lambda: RMSPropOptimizer(
        0.1, params=[w()]), centered=0), TypeError, not_bool("centered", r"0 \(int\)")),
    Row("add-param-group-rho", add_group(lambda: AdadeltaOptimizer(params=[w()]), rho=2.0),
        ValueError, lr("rho", r"\[0, 1\]", r"2\.0")),
    Row("add-param-group-l1", add_group(lambda: FtrlOptimizer(0.1, params=[w()]),
                                        l1=-1.0), ValueError, lr("l1_regularization_strength")),
    Row("add-param-group-ftrl-lr-negative", add_group(
        lambda: FtrlOptimizer(0.1, params=[w()]), lr=-1.0), ValueError, lr()),
    Row("add-param-group-second-moment", add_group(lambda: NovoGrad(params=[w()]),
                                                   second_moment="x"), ValueError,
        r"Expected `second_moment` to be one of"),
    Row("add-param-group-weight-decay", add_group(lambda: AdamWOptimizer(0.1, params=[w()]),
                                                  weight_decay=-1.0), ValueError,
        lr("weight_decay")),
    Row("add-param-group-int-param", lambda: torch_gd().add_param_group(
        {"params": [torch.zeros(2, dtype=torch.int32)]}), TypeError,
        r"Expected params\[0\] to have a floating dtype"),
    # ------------------------------------------------------------ apply_gradients
    Row("apply-empty", apply([]), ValueError, r"^No variables provided\.$"),
    Row("apply-not-iterable", apply(5), TypeError,
        r"Expected `grads_and_vars` to be an iterable of \(gradient, variable\) pairs, "
        r"got 5 \(int\)"),
    Row("apply-pair-of-three", apply([(g(), w(), None)]), TypeError,
        r"Expected grads_and_vars\[0\] to be a \(gradient, variable\) pair, got \("),
    Row("apply-pair-not-iterable", apply([(g(), w()), 3]), TypeError,
        r"Expected grads_and_vars\[1\] to be a \(gradient, variable\) pair, got 3 \(int\)"),
    Row("apply-tensors-not-pairs", apply([g()]), TypeError,
        r"Expected grads_and_vars\[0\] to be a \(gradient, variable\) pair, got <tensor "
        r"shape=\(2,\) dtype=torch\.float32> \(a tensor, not a pair: pass \[\(gradient, "
        r"variable\), \.\.\.\]\)"),
    Row("apply-a-tensor", apply(g()), TypeError,
        r"Expected `grads_and_vars` to be an iterable of \(gradient, variable\) pairs, "
        r"got <tensor shape=\(2,\) dtype=torch\.float32>"),
    Row("apply-pair-as-set", apply([{1, 2}]), TypeError,
        r"Expected grads_and_vars\[0\] to be a \(gradient, variable\) pair, got "),
    Row("apply-all-none", apply([(None, w()), (None, w([3.0]))]), ValueError,
        r"No gradients provided for any variable: \['<tensor shape=\(2,\) "
        r"dtype=torch\.float32>', '<tensor shape=\(1,\) dtype=torch\.float32>'\]\."),
    Row("apply-var-not-tensor", apply([(g(), [1.0, 2.0])]), TypeError,
        r"Expected the variable of grads_and_vars\[0\] to be a torch\.Tensor variable, "
        r"got \[1\.0, 2\.0\] \(list\)"),
    Row("apply-var-int-dtype", apply([(torch.ones(2, dtype=torch.int64),
                                       torch.ones(2, dtype=torch.int64))]), TypeError,
        r"Expected the variable of grads_and_vars\[0\] to have a floating dtype in .*"
        r"got torch\.int64"),
    Row("apply-var-sparse", apply([(g(), SPARSE_VAR)]), TypeError,
        r"Expected the variable of grads_and_vars\[0\] to be a dense tensor, got layout "
        r"torch\.sparse_coo"),
    Row("apply-var-non-leaf", apply([(g(), NON_LEAF)]), TypeError,
        r"Trying to update a Tensor that is not a leaf variable: the variable of "
        r"grads_and_vars\[0\]"),
    Row("apply-grad-list", apply([([0.1, 0.1], w())]), TypeError,
        r"Gradient must be a Tensor, a sparse COO Tensor \(IndexedSlices\) or None: the "
        r"gradient of grads_and_vars\[0\] is \[0\.1, 0\.1\] \(list\)"),
    Row("apply-grad-csr", apply([(SPARSE_CSR_GRAD, w([[1.0, 2.0], [3.0, 4.0]]))]), TypeError,
        r"Gradient must be a Tensor, a sparse COO Tensor \(IndexedSlices\) or None: the "
        r"gradient of grads_and_vars\[0\] has layout torch\.sparse_csr"),
    Row("apply-grad-dtype", apply([(g(dtype=torch.float64), w())]), TypeError,
        r"Expected the gradient of grads_and_vars\[0\] to have the variable's dtype "
        r"torch\.float32, got torch\.float64"),
    Row("apply-grad-shape", apply([(g((0.1, 0.1, 0.1)), w())]), ValueError,
        r"Expected the gradient of grads_and_vars\[0\] to have the variable's shape \(2,\), "
        r"got \(3,\)"),
    Row("apply-grad-sparse-shape", apply([(torch.sparse_coo_tensor([[0]], [0.1], (3,)), w())]),
        ValueError, r"to have the variable's shape \(2,\), got \(3,\)"),
    Row("apply-grad-device", apply([(torch.zeros(2, device="meta"), w())]), ValueError,
        r"Expected the gradient of grads_and_vars\[0\] to be on the variable's device cpu, "
        r"got meta"),
    Row("apply-global-step-float", apply([(g(), w())], global_step=torch.tensor(0.0)),
        TypeError, r"Expected `global_step` to be None or a 0-dim integer tensor, got a "
        r"tensor of shape \(\) and dtype torch\.float32"),
    Row("apply-global-step-1d", apply([(g(), w())], global_step=torch.tensor([0])), TypeError,
        r"got a tensor of shape \(1,\) and dtype torch\.int64"),
    Row("apply-global-step-bool", apply([(g(), w())], global_step=torch.tensor(False)),
        TypeError, r"got a tensor of shape \(\) and dtype torch\.bool"),
    Row("apply-global-step-complex", apply([(g(), w())], global_step=torch.tensor(1j)),
        TypeError, r"`global_step` to be None or a 0-dim integer tensor"),
    Row("apply-global-step-int", apply([(g(), w())], global_step=0), TypeError,
        r"Expected `global_step` to be None or a 0-dim integer tensor, got 0 \(int\)"),
    Row("apply-name-empty", apply([(g(), w())], name=""), ValueError,
        r"Must specify the optimizer name"),
    Row("apply-name-not-string", apply([(g(), w())], name=3), TypeError,
        r"Expected `name` to be a non-empty string, got 3 \(int\)"),
    # ------------------------------------------------------------ hyperparameters at apply time
    Row("callable-lr-returns-string", lambda: GradientDescentOptimizer(
        lambda: "fast").apply_gradients([(g(), w())]), TypeError,
        r"Expected `learning_rate` to evaluate to a real number or a 1-element floating-point "
        r"tensor, got 'fast' \(str\)"),
    Row("callable-lr-returns-none", lambda: GradientDescentOptimizer(
        lambda: None).apply_gradients([(g(), w())]), TypeError,
        r"`learning_rate` to evaluate to a real number.*got None \(NoneType\)"),
    Row("callable-lr-returns-bool", lambda: GradientDescentOptimizer(
        lambda: True).apply_gradients([(g(), w())]), TypeError,
        r"`learning_rate` to evaluate to a real number.*got True \(bool\)"),
    Row("callable-lr-returns-2-element-tensor", lambda: GradientDescentOptimizer(
        lambda: torch.tensor([0.1, 0.2])).apply_gradients([(g(), w())]), ValueError,
        r"`learning_rate` to be a 1-element tensor .*got a tensor of shape \(2,\)"),
    Row("callable-lr-returns-int-tensor", lambda: GradientDescentOptimizer(
        lambda: torch.tensor(1)).apply_gradients([(g(), w())]), TypeError,
        r"got a tensor of shape \(\) and dtype torch\.int64"),
    Row("callable-momentum-returns-string", lambda: MomentumOptimizer(
        0.1, lambda: "x").apply_gradients([(g(), w())]), TypeError,
        r"Expected `momentum` to evaluate to a real number"),
    Row("callable-l1-named-by-argument", lambda: FtrlOptimizer(
        0.1, l1_regularization_strength=lambda: "x").apply_gradients([(g(), w())]), TypeError,
        r"Expected `l1_regularization_strength` to evaluate to a real number"),
    Row("torch-style-callable-lr-returns-string", lambda: _torch_step_with_lr(lambda: "x"),
        TypeError, r"Expected `learning_rate` to evaluate to a real number"),
    # ------------------------------------------------------------ compute_gradients, minimize
    Row("gate-gradients-bad", lambda: gd().compute_gradients(
        (w() * 2).sum(), var_list=[w()], gate_gradients=3), ValueError,
        r"gate_gradients must be one of: Optimizer\.GATE_NONE, Optimizer\.GATE_OP, "
        r"Optimizer\.GATE_GRAPH\.  Not 3$"),
    Row("gate-gradients-string", lambda: gd().minimize(
        lambda: w().sum(), var_list=[w()], gate_gradients="op"), ValueError,
        r"gate_gradients must be one of.*Not 'op'"),
    Row("aggregation-method-bad", lambda: gd().compute_gradients(
        (w() * 2).sum(), var_list=[w()], aggregation_method=7), ValueError,
        r"Expected `aggregation_method` to be None or one of AggregationMethod\.ADD_N, "
        r"EXPERIMENTAL_TREE, EXPERIMENTAL_ACCUMULATE_N \(0, 1, 2\), got 7"),
    Row("colocate-not-bool", lambda: gd().compute_gradients(
        (w() * 2).sum(), var_list=[w()], colocate_gradients_with_ops=1), TypeError,
        not_bool("colocate_gradients_with_ops", r"1 \(int\)")),
    Row("loss-not-tensor", lambda: gd().compute_gradients(3.0, var_list=[w()]), TypeError,
        r"Expected `loss` to be a tensor \(or a callable returning one\), got 3\.0 \(float\)"),
    Row("loss-callable-returns-float", lambda: gd().minimize(lambda: 3.0, var_list=[w()]),
        TypeError, r"Expected `loss` to be a tensor \(or a callable returning one\), got 3\.0"),
    Row("loss-integer", lambda: gd().compute_gradients(torch.tensor(3), var_list=[w()]),
        ValueError, r"Invalid type torch\.int64 for `loss`, expected: \['torch\.float16', "
        r"'torch\.bfloat16', 'torch\.float32', 'torch\.float64'\]\.$"),
    Row("loss-complex", lambda: gd().compute_gradients(torch.tensor(1j), var_list=[w()]),
        ValueError, r"Invalid type torch\.complex64 for `loss`"),
    Row("grad-loss-integer", lambda: gd().minimize(
        (w() * 2).sum(), var_list=[w()], grad_loss=torch.tensor(1)), ValueError,
        r"Invalid type torch\.int64 for `grad_loss`"),
    Row("grad-loss-not-tensor", lambda: gd().minimize(
        (w() * 2), var_list=[w()], grad_loss=[1.0, 1.0]), TypeError,
        r"Expected `grad_loss` to be a tensor"),
    Row("grad-loss-shape", lambda: gd().minimize(
        lambda: w() * 2, var_list=[w()], grad_loss=torch.ones(3)), ValueError,
        r"Expected `grad_loss` to have the loss's shape \(2,\), got \(3,\)"),
    Row("var-list-empty", lambda: gd().compute_gradients((w() * 2).sum(), var_list=[]),
        ValueError, r"^No variables to optimize\.$"),
    Row("var-list-none-nothing-owned", lambda: gd().minimize(lambda: (w() * 2).sum()),
        ValueError, r"^No variables to optimize\.$"),
    Row("var-list-not-iterable", lambda: gd().compute_gradients((w() * 2).sum(), var_list=5),
        TypeError, r"Expected `var_list` to be an iterable of tensors or None, got 5 \(int\)"),
    Row("var-list-no-requires-grad", lambda: gd().compute_gradients(
        (w() * 2).sum(), var_list=[torch.ones(2)]), TypeError,
        r"Expected var_list\[0\] to require grad: a tensor that does not require grad cannot "
        r"be optimized \(<tensor shape=\(2,\) dtype=torch\.float32>\)"),
    Row("var-list-int-dtype", lambda: gd().compute_gradients(
        (w() * 2).sum(), var_list=[torch.ones(2, dtype=torch.int32)]), TypeError,
        r"Expected var_list\[0\] to have a floating dtype in .*got torch\.int32"),
    Row("var-list-non-leaf", lambda: gd().compute_gradients(
        NON_LEAF.sum(), var_list=[NON_LEAF]), TypeError,
        r"Trying to update a Tensor that is not a leaf variable: var_list\[0\]"),
    Row("minimize-no-gradients", lambda: gd().minimize(lambda: torch.tensor(5.0),
                                                       var_list=[w()]), ValueError,
        r"No gradients provided for any variable, check your graph for ops that do not "
        r"support gradients, between variables \['<tensor shape=\(2,\) dtype=torch\.float32>'"
        r"\] and loss "),
    Row("minimize-no-gradients-tensor-loss", lambda: gd().minimize(torch.tensor(5.0),
                                                                   var_list=[w()]), ValueError,
        r"No gradients provided for any variable, .* and loss <tensor shape=\(\) "
        r"dtype=torch\.float32>\.$"),
    Row("minimize-unrelated-variable", lambda: gd().minimize(
        (w() * 5).sum(), var_list=[w([3.0])]), ValueError,
        r"No gradients provided for any variable"),
    # ------------------------------------------------------------ registry
    Row("registry-unknown-name", lambda: trainop.get_optimizer_class("adamax"), ValueError,
        r"Unknown optimizer name 'adamax'; valid names \(case-insensitive, 'Optimizer' suffix "
        r"optional\): \[.*'adam'.*'sgd'.*\]"),
    Row("registry-empty-name", lambda: trainop.get_optimizer_class(""), ValueError,
        r"Unknown optimizer name ''"),
    Row("registry-name-not-string", lambda: trainop.get_optimizer_class(AdamOptimizer),
        TypeError, r"Expected `name` to be an optimizer name \(str\), got "),
    Row("register-empty-name", lambda: trainop.register_optimizer("", AdamOptimizer),
        TypeError, r"Expected `name` to be a non-empty string, got '' \(str\)"),
    Row("register-name-not-string", lambda: trainop.register_optimizer(None, AdamOptimizer),
        TypeError, r"Expected `name` to be a non-empty string, got None"),
    Row("register-not-an-optimizer",
        lambda: trainop.register_optimizer("mine", torch.optim.SGD), TypeError,
        r"Expected `cls` to be a trainop\.Optimizer subclass, got "),
    Row("register-instance", lambda: trainop.register_optimizer("mine", gd()), TypeError,
        r"Expected `cls` to be a trainop\.Optimizer subclass"),
    # ------------------------------------------------------------ _validation helpers
    Row("check-real-nan-no-interval", lambda: V.check_real("power", math.nan), ValueError,
        r"Expected `power` to be a number, got nan"),
    Row("check-real-bool", lambda: V.check_real("power", False), TypeError,
        not_real("power", r"False \(bool\)")),
    Row("check-int-float", lambda: V.check_int("steps", 1.0), TypeError,
        r"Expected `steps` to be an integer, got 1\.0 \(float\)"),
    Row("check-int-bool", lambda: V.check_int("steps", True), TypeError,
        r"Expected `steps` to be an integer, got True \(bool\)"),
    Row("check-int-range", lambda: V.check_int("steps", 0, V.Interval(0, low_closed=False)),
        ValueError, r"Expected `steps` in \(0, inf\), got 0$"),
    Row("check-choice-type", lambda: V.check_choice("mode", None, ("a", "b")), TypeError,
        r"Expected `mode` to be one of \['a', 'b'\], got None \(NoneType\)"),
    Row("check-choice-value", lambda: V.check_choice("mode", "c", ("a", "b")), ValueError,
        r"Expected `mode` to be one of \['a', 'b'\], got 'c'"),
    Row("check-callable-or-none", lambda: V.check_callable_or_none("fn", 3), TypeError,
        r"Expected `fn` to be callable or None, got 3 \(int\)"),
    Row("check-hyper-open-interval", lambda: V.check_hyper(
        "x", 1.0, V.Interval(0.0, 1.0, low_closed=False, high_closed=False)), ValueError,
        r"Expected `x` in \(0, 1\), got 1\.0"),
    Row("evaluate-hyper-string", lambda: evaluate_hyper("lr", "x", torch.tensor(0)), TypeError,
        r"Expected `lr` to evaluate to a real number"),
    # ------------------------------------------------------------ the gate (step, apply)
    Row("gate-multiplier-float", lambda: torch_step(grad_multiplier=0.5), TypeError,
        r"Expected `grad_multiplier` to be None or a 0-dim tensor, got 0\.5 \(float\)"),
    Row("gate-found-inf-shape", lambda: gd().apply_gradients(
        [(g(), w())], found_inf=torch.zeros(2)), TypeError,
        r"Expected `found_inf` to be None or a 0-dim tensor"),
    # ------------------------------------------------------------ trainop.flatten misuse
    Row("flatten-twice", lambda: trainop.flatten(flattened()), ValueError,
        r"already flattened \(trainop\.flatten was called twice\)"),
    Row("flatten-not-trainop", lambda: trainop.flatten(torch.optim.SGD([w()], lr=0.1)),
        TypeError, r"Expected `optimizer` to be a trainop\.Optimizer, got .*SGD"),
    Row("flatten-tf-style", lambda: trainop.flatten(gd()), ValueError,
        r"needs an optimizer constructed with its parameters"),
    Row("flatten-model-type", lambda: trainop.flatten(torch_gd(), model=[1]), TypeError,
        r"Expected `model` to be None or a torch\.nn\.Module, got \[1\]"),
    Row("flatten-mixed-devices", lambda: trainop.flatten(GradientDescentOptimizer(0.1, params=[
        w(), torch.zeros(2, device="meta", requires_grad=True)])), ValueError,
        r"param_groups\[0\] has parameters on several devices \['cpu', 'meta'\]"),
    Row("flatten-parameter-replaced", replaced_after_flatten, ValueError,
        r"was replaced after trainop\.flatten"),
]



def _torch_step_with_lr(lr_value):
    p = w()
    opt = GradientDescentOptimizer(lr_value, params=[p])
    p.sum().backward()
    opt.step()


def test_error_table_ids_are_unique():
    ids = [row.id for row in ERRORS]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("row", ERRORS, ids=[row.id for row in ERRORS])
def test_error(row: Row):
    with pytest.raises(row.exc) as info:
        row.call()
    assert type(info.value) is row.exc  # not a subclass (e.g. torch's own errors)
    assert re.search(row.match, str(info.value)), str(info.value)


def test_validation_helpers_accept_valid_values():
    """The counterparts of the table: valid values pass through the same helpers."""
    assert V.check_real("x", 1) == 1.0 and isinstance(V.check_real("x", 1), float)
    assert V.check_int("n", 3, V.Interval(0)) == 3
    assert V.check_bool("b", False) is False
    assert V.check_choice("m", "a", ("a",)) == "a"
    assert V.check_name("Adam") == "Adam"
    assert V.check_callable_or_none("f", None) is None
    fn = lambda: 0.1  # noqa: E731
    assert V.check_hyper("lr", fn, V.Interval(0)) is fn
    assert V.check_hyper("lr", torch.tensor(0.5), V.Interval(0)).item() == 0.5
    assert str(V.Interval()) == "(-inf, inf)"
    assert str(V.Interval(0.0, 1.0, high_closed=False)) == "[0, 1)"
    assert math.nan not in V.Interval()
    assert V.describe("x" * 100).endswith("... (str)")
    # Boundary values that are allowed.
    GradientDescentOptimizer(0.0)
    AdamOptimizer(beta1=0.0, beta2=0.0, epsilon=0.0)
    AdadeltaOptimizer(rho=1.0)
    RMSPropOptimizer(0.1, decay=0.0)
    RMSPropOptimizer(0.1, decay=1.0)
    FtrlOptimizer(1e-9, learning_rate_power=0.0, initial_accumulator_value=0.0)
    FtrlOptimizer(0.0)
    ProximalAdagradOptimizer(0.0)
    MomentumOptimizer(0.1, 0.0)
    NovoGrad(second_moment="openseq2seq", grad_averaging=True)
    AdagradDAOptimizer(0.1, torch.tensor(0, dtype=torch.int32))
    GradientDescentOptimizer(lambda: 0.1)
    GradientDescentOptimizer(torch.tensor(0.1, dtype=torch.float64))


# ============================================================================ no mutation
def _state(opt, variables, global_step=None):
    """A deep copy of everything a call could change."""
    params = [v.detach().clone() for v in variables]
    slots = {id(p): {k: s.clone() for k, s in st.items()} for p, st in opt.state.items()}
    groups = [
        {"params": [id(p) for p in grp["params"]],
         "non_slot": {k: s.clone() for k, s in grp["non_slot"].items()},
         "hyper": {k: v for k, v in grp.items() if k not in ("params", "non_slot")}}
        for grp in opt.param_groups
    ]
    step = None if global_step is None else global_step.clone()
    return params, slots, groups, step


def _assert_same_state(before, after):
    params0, slots0, groups0, step0 = before
    params1, slots1, groups1, step1 = after
    assert all(torch.equal(a, b) for a, b in zip(params0, params1, strict=True))
    assert slots0.keys() == slots1.keys()
    for key in slots0:
        assert slots0[key].keys() == slots1[key].keys()
        assert all(torch.equal(slots0[key][k], slots1[key][k]) for k in slots0[key])
    assert len(groups0) == len(groups1)
    for g0, g1 in zip(groups0, groups1, strict=True):
        assert g0["params"] == g1["params"] and g0["hyper"] == g1["hyper"]
        assert g0["non_slot"].keys() == g1["non_slot"].keys()
        assert all(torch.equal(g0["non_slot"][k], g1["non_slot"][k]) for k in g0["non_slot"])
    if step0 is not None:
        assert torch.equal(step0, step1) and step0.dtype == step1.dtype


def _bad_third_pair(kind, v2):
    return {
        "not-a-pair": 3,
        "triple": (g(), v2, None),
        "grad-wrong-shape": (g((0.1, 0.1, 0.1)), v2),
        "grad-wrong-dtype": (g(dtype=torch.float64), v2),
        "grad-not-tensor": ([0.1, 0.1], v2),
        "grad-wrong-device": (torch.zeros(2, device="meta"), v2),
        "var-non-leaf": (g(), v2 * 2),
        "var-int": (torch.ones(2, dtype=torch.int64), torch.ones(2, dtype=torch.int64)),
        "var-not-tensor": (g(), "w"),
    }[kind]


BAD_KINDS = ["not-a-pair", "triple", "grad-wrong-shape", "grad-wrong-dtype", "grad-not-tensor",
             "grad-wrong-device", "var-non-leaf", "var-int", "var-not-tensor"]
NO_MUTATION_CLASSES = [
    lambda: AdamOptimizer(0.1),
    lambda: MomentumOptimizer(0.1, 0.9),
    lambda: RMSPropOptimizer(0.1, centered=True),
    lambda: AdagradDAOptimizer(0.1, None),
    lambda: NovoGrad(0.1),
    lambda: AdamWOptimizer(0.1, 0.1),
]


def _warm(make_opt):
    """An optimizer that has already run twice on v0, v1 (TF style), and a fresh v2."""
    v0, v1, v2 = w(), w((3.0, 4.0)), w((5.0, 6.0))
    step = torch.tensor(2, dtype=torch.int64)
    opt = make_opt()
    for _ in range(2):
        opt.apply_gradients([(g(), v0), (g((0.2, -0.3)), v1)])
    return opt, (v0, v1, v2), step


@pytest.mark.parametrize("kind", BAD_KINDS)
@pytest.mark.parametrize("make_opt", NO_MUTATION_CLASSES,
                         ids=["adam", "momentum", "rmsprop", "adagradda", "novograd", "adamw"])
def test_rejected_mixed_batch_mutates_nothing(make_opt, kind):
    opt, (v0, v1, v2), step = _warm(make_opt)
    before = _state(opt, [v0, v1, v2], step)
    # Two good pairs (one for a new variable), then a malformed third pair.
    batch = [(g(), v0), (g(), v2), _bad_third_pair(kind, v2), (g(), v1)]
    with pytest.raises((TypeError, ValueError), match=r"grads_and_vars\[2\]"):
        opt.apply_gradients(batch, global_step=step)
    _assert_same_state(before, _state(opt, [v0, v1, v2], step))
    assert v2 not in opt.state
    # The optimizer still works afterwards, exactly as if the bad call never happened.
    opt.apply_gradients([(g(), v0), (g(), v1)], global_step=step)
    ref, (r0, r1, _), ref_step = _warm(make_opt)
    ref.apply_gradients([(g(), r0), (g(), r1)], global_step=ref_step)
    assert torch.equal(v0, r0) and torch.equal(v1, r1) and int(step) == int(ref_step) == 3


def _failing_calls(opt, v0, v1, v2, step):
    """Calls that fail after the pairs themselves were accepted."""
    return {
        "bad-global-step": lambda: opt.apply_gradients(
            [(g(), v0), (g(), v2)], global_step=torch.tensor(1.0)),
        "bad-name": lambda: opt.apply_gradients([(g(), v0), (g(), v2)], global_step=step,
                                                name=""),
        "all-none": lambda: opt.apply_gradients([(None, v0), (None, v2)], global_step=step),
        "empty": lambda: opt.apply_gradients([], global_step=step),
        "minimize-no-gradients": lambda: opt.minimize(lambda: torch.tensor(1.0),
                                                      global_step=step, var_list=[v0, v2]),
        "minimize-bad-gate": lambda: opt.minimize(lambda: (v0 * v2).sum(), global_step=step,
                                                  var_list=[v0, v2], gate_gradients=5),
        "minimize-bad-grad-loss": lambda: opt.minimize(
            lambda: v0 * v2, global_step=step, var_list=[v0, v2], grad_loss=torch.ones(3)),
        "minimize-var-without-grad": lambda: opt.minimize(
            lambda: (v0 * 2).sum(), global_step=step, var_list=[v0, torch.ones(2)]),
    }


@pytest.mark.parametrize("call", ["bad-global-step", "bad-name", "all-none", "empty",
                                  "minimize-no-gradients", "minimize-bad-gate",
                                  "minimize-bad-grad-loss", "minimize-var-without-grad"])
@pytest.mark.parametrize("make_opt", NO_MUTATION_CLASSES[:2], ids=["adam", "momentum"])
def test_rejected_call_mutates_nothing(make_opt, call):
    opt, (v0, v1, v2), step = _warm(make_opt)
    before = _state(opt, [v0, v1, v2], step)
    with pytest.raises((TypeError, ValueError)):
        _failing_calls(opt, v0, v1, v2, step)[call]()
    _assert_same_state(before, _state(opt, [v0, v1, v2], step))
    assert v2 not in opt.state


@pytest.mark.parametrize("new_variable", [False, True])
def test_callable_hyperparameter_failure_mutates_nothing(new_variable):
    broken = [False]

    def lr():
        return "x" if broken[0] else 0.1

    v0, v1, v2 = w(), w((3.0, 4.0)), w((5.0, 6.0))
    step = torch.tensor(0)
    opt = AdamOptimizer(lr)
    opt.apply_gradients([(g(), v0), (g(), v1)], global_step=step)
    before = _state(opt, [v0, v1, v2], step)
    broken[0] = True
    pairs = [(g(), v0), (g(), v1)] + ([(g(), v2)] if new_variable else [])
    with pytest.raises(TypeError, match="`learning_rate` to evaluate"):
        opt.apply_gradients(pairs, global_step=step)
    _assert_same_state(before, _state(opt, [v0, v1, v2], step))
    assert v2 not in opt.state


def test_first_call_rejected_leaves_fresh_optimizer_empty():
    opt = AdamOptimizer(0.1)
    v0 = w()
    with pytest.raises(TypeError):
        opt.apply_gradients([(g(), v0), (g(dtype=torch.float64), w())])
    assert opt.param_groups == [] and len(opt.state) == 0
    assert opt.variables() == [] and opt.get_slot(v0, "m") is None
    assert torch.equal(v0.detach(), g((1.0, 2.0)))


@pytest.mark.parametrize("given", ["list", "tensor", "grads"])
def test_apply_gradients_of_tensors_is_refused_and_changes_nothing(given):
    """#39: ``apply_gradients([g])`` (tensors, not pairs) unpacked a 2-element gradient as a
    (gradient, variable) pair and updated the user's gradient in place; TF raises."""
    model = nn.Linear(2, 1)
    opt = AdamOptimizer(0.1, params=model.parameters())
    model(torch.ones(3, 2)).sum().backward()
    grad = model.weight.grad.view(2)  # a gradient of 2 elements
    grads = [p.grad.clone() for p in model.parameters()]
    params = [p.detach().clone() for p in model.parameters()]
    call = {"list": [grad], "tensor": grad,
            "grads": [p.grad for p in model.parameters()]}[given]
    with pytest.raises(TypeError, match=r"grads_and_vars"):
        opt.apply_gradients(call)
    assert all(torch.equal(p.grad, gr) for p, gr in zip(model.parameters(), grads, strict=True))
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), params, strict=True))
    assert len(opt.state) == 0 and opt.param_groups[0]["non_slot"].keys() == {"step"}


def test_torch_style_failure_mutates_nothing():
    broken = [False]

    def lr():
        return None if broken[0] else 0.1

    model = nn.Linear(3, 2)
    opt = MomentumOptimizer(lr, 0.9, params=model.parameters())
    x = torch.randn(4, 3)
    for _ in range(2):
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
    params = list(model.parameters())
    before = _state(opt, params)
    grads = [p.grad.clone() for p in params]
    broken[0] = True
    with pytest.raises(TypeError):
        opt.step()
    _assert_same_state(before, _state(opt, params))
    assert all(torch.equal(p.grad, gr) for p, gr in zip(params, grads, strict=True))


def test_rejected_param_group_is_not_added():
    p0 = w()
    opt = AdamOptimizer(0.1, params=[p0])
    for bad in ({"params": [w()], "beta1": 2.0},
                {"params": [w(), torch.zeros(2, dtype=torch.int64)]},
                {"params": [w()], "lr": "x"}):
        with pytest.raises((TypeError, ValueError)):
            opt.add_param_group(bad)
    assert len(opt.param_groups) == 1 and opt.param_groups[0]["params"] == [p0]


def test_adamw_decay_var_list_is_reset_after_a_failure():
    v0, v1 = w(), w((3.0, 4.0))
    opt = AdamWOptimizer(0.5, learning_rate=0.0)
    with pytest.raises(TypeError):
        opt.apply_gradients([(g(), v0), (g(dtype=torch.float64), v1)], decay_var_list=[v0])
    with pytest.raises(TypeError):
        opt.apply_gradients([(g(), v0)], decay_var_list=7)
    assert torch.equal(v0.detach(), g((1.0, 2.0)))
    # A later call without a list decays every variable.
    opt.apply_gradients([(g(), v0), (g(), v1)])
    assert torch.equal(v0.detach(), g((0.5, 1.0)))
    assert torch.equal(v1.detach(), g((1.5, 2.0)))
