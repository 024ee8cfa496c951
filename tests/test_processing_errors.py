"""Every validation branch of trainop.processing, in one table: (id, call, exception type,
message pattern). Messages name the argument, the allowed range or type, and the value. A call
that is rejected before the step starts changes nothing (params, slots, scaler, counters)."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import pytest
import torch

import trainop
from trainop.processing import (
    LARC,
    AutomaticLossScaler,
    BackoffLossScaler,
    ClipByAverageNorm,
    ClipByGlobalNorm,
    ClipByNorm,
    ClipByValue,
    FilterZeroGradients,
    GradientNoise,
    GradientPipeline,
    Gradients,
    LogMaxLossScaler,
    LossScale,
    MixedPrecisionOptimizerWrapper,
    MultitaskOptimizerWrapper,
    NanInfFilter,
    SkipNonFinite,
    StaticLossScaler,
    clip_by_average_norm,
    clip_by_global_norm,
    clip_by_norm,
    clip_by_value,
    clip_gradients_by_global_norm,
    global_norm,
    larc,
)
from trainop.processing.loss_scale import as_loss_scaler


class Row(NamedTuple):
    id: str
    call: Callable[[], object]
    exc: type[Exception]
    match: str


def v(n=2, dtype=torch.float32):
    return torch.zeros(n, dtype=dtype, requires_grad=True)


def g(n=2, dtype=torch.float32):
    return torch.ones(n, dtype=dtype)


def pipe(*procs, opt=None):
    return GradientPipeline(opt or trainop.GradientDescentOptimizer(0.1), list(procs))


def mp(loss_scale=None, params=None):
    return MixedPrecisionOptimizerWrapper(trainop.GradientDescentOptimizer(0.1, params=params),
                                          loss_scale)


def _with_state_half():
    w = v(2, torch.float16)
    opt = trainop.GradientDescentOptimizer(0.1, params=[w])
    opt.state[w]["x"] = torch.zeros(2)
    return MixedPrecisionOptimizerWrapper(opt)


def _bad_regularizer():
    w = v(2, torch.float16)
    m = mp()
    m.add_regularizer(w, lambda x: 3.0)
    return m.compute_gradients(lambda: (w * 1).float().sum(), var_list=[w])


def _processor_load():
    SkipNonFinite().load_state_dict({"consecutive": 0})


NUM = r"\(0, inf\)"
ERRORS = [
    # ---- the batch (every entry point that takes pairs)
    Row("pairs_not_iterable", lambda: Gradients(5), TypeError,
        r"Expected `grads_and_vars` to be an iterable of \(gradient, variable\) pairs, got 5"),
    Row("pairs_string", lambda: Gradients("ab"), TypeError, r"`grads_and_vars`.*'ab' \(str\)"),
    Row("pair_not_pair", lambda: Gradients([(g(),)]), TypeError,
        r"Expected grads_and_vars\[0\] to be a \(gradient, variable\) pair"),
    Row("pair_var_not_tensor", lambda: Gradients([(g(), 3.0)]), TypeError,
        r"Expected the variable of grads_and_vars\[0\] to be a dense torch.Tensor, got 3.0"),
    Row("pair_grad_not_tensor", lambda: Gradients([([1.0, 2.0], v())]), TypeError,
        r"Expected the gradient of grads_and_vars\[0\] to be None, a dense or a sparse COO"),
    Row("pair_grad_shape", lambda: Gradients([(g(3), v(2))]), ValueError,
        r"Expected the gradient of grads_and_vars\[0\] to have the variable's shape \(2,\), "
        r"got \(3,\)"),
    Row("replace_pair_presence", lambda: Gradients([(g(), v())]).replace_pair(
        0, None, v(), same_values=True), ValueError, "keep whether the pair has a gradient"),
    Row("batch_scale_type", lambda: Gradients([(g(), v())]).scale("2"), TypeError,
        r"Expected `factor` to be a real number, got '2'"),
    Row("batch_scale_tensor", lambda: Gradients([(g(), v())]).scale(torch.ones(2)), TypeError,
        r"Expected `factor` to be a real number or a 0-dim floating-point tensor, got a tensor "
        r"of shape \(2,\)"),
    Row("batch_scale_each", lambda: Gradients([(g(), v())]).scale_each(torch.ones(3)),
        TypeError, r"Expected `factors` to be a 1-D floating-point tensor with one entry per "
        r"present gradient \(1\)"),
    Row("batch_skip_if_flag", lambda: Gradients([(g(), v())]).skip_if(True, 1), TypeError,
        r"Expected `flag` to be a 0-dim bool tensor, got True"),
    Row("batch_skip_if_reason", lambda: Gradients([(g(), v())]).skip_if(torch.tensor(True), 0),
        ValueError, r"Expected `reason` in \[1, inf\), got 0$"),
    Row("batch_widen_on_use_index", lambda: Gradients([(g(dtype=torch.float16), v())])
        .widen_on_use([1]), ValueError, r"Expected `indices\[0\]` in \[0, 0\], got 1$"),
    Row("batch_widen_on_use_type", lambda: Gradients([(g(dtype=torch.float16), v())])
        .widen_on_use([True]), TypeError, r"Expected `indices\[0\]` to be an integer, got True"),
    Row("batch_widen_on_use_pair", lambda: Gradients([(g(), v())]).widen_on_use([0]),
        ValueError, r"Expected `indices\[0\]` \(0\) to name a pair with a dense "
        r"float16/bfloat16 gradient of a float32 variable, got a dense torch.float32 "
        r"gradient of a torch.float32 variable"),
    Row("batch_read_norms_from_type", lambda: Gradients([(g(), v())]).read_norms_from([1.0]),
        TypeError, r"Expected `sources` to be a list of tensors, got \[1.0\]"),
    Row("batch_read_norms_from_count", lambda: Gradients([(g(), v())]).read_norms_from([]),
        ValueError, r"Expected `sources` to hold one tensor per present gradient \(1\), "
        r"got 0"),
    Row("batch_map_present", lambda: Gradients([(g(), v())]).map_present(None), TypeError,
        r"Expected `fn` to be callable, got None"),
    Row("noise_like", lambda: GradientNoise(0.1).noise_like([0.0]), TypeError,
        r"Expected `g` to be a torch.Tensor, got \[0.0\]"),
    Row("pipeline_step_closure", lambda: pipe().step(closure=3), TypeError,
        r"Expected `closure` to be callable or None, got 3"),
    # ---- TF clip functions
    Row("global_norm_generator", lambda: global_norm(x for x in [g()]), TypeError,
        r"Expected `t_list` to be a sequence of tensors, got <generator"),
    Row("global_norm_element", lambda: global_norm([g(), 3.0]), TypeError,
        r"Expected `t_list\[1\]` to be a torch.Tensor, got 3.0 \(float\)"),
    Row("global_norm_layout", lambda: global_norm([torch.eye(2).to_sparse_csr()]), TypeError,
        r"Expected `t_list\[0\]` to be a dense or sparse COO tensor, got layout"),
    Row("global_norm_int", lambda: global_norm([torch.ones(2, dtype=torch.int64)]), TypeError,
        r"Expected t_list\[0\] to have a floating dtype, got torch.int64"),
    Row("global_norm_mixed", lambda: global_norm([g(), g(2, torch.float64)]), TypeError,
        r"Expected every tensor of `t_list` to have the same dtype, got "
        r"\['float32', 'float64'\]"),
    Row("global_norm_name", lambda: global_norm([g()], name=3), TypeError,
        r"Expected `name` to be None or a string, got 3"),
    Row("cbgn_clip_negative", lambda: clip_by_global_norm([g()], -1.0), ValueError,
        rf"Expected `clip_norm` in {NUM}, got -1.0$"),
    Row("cbgn_clip_zero", lambda: clip_by_global_norm([g()], 0), ValueError,
        rf"Expected `clip_norm` in {NUM}, got 0.0$"),
    Row("cbgn_clip_type", lambda: clip_by_global_norm([g()], "1"), TypeError,
        r"Expected `clip_norm` to be a real number, got '1' \(str\)"),
    Row("cbgn_clip_tensor_shape", lambda: clip_by_global_norm([g()], torch.ones(2)), TypeError,
        r"Expected `clip_norm` to be a real number or a 0-dim floating-point tensor, got a "
        r"tensor of shape \(2,\)"),
    Row("cbgn_use_norm", lambda: clip_by_global_norm([g()], 1.0, use_norm=-2.0), ValueError,
        r"Expected `use_norm` in \[0, inf\), got -2.0$"),
    Row("cbgn_not_sequence", lambda: clip_by_global_norm(g(), 1.0), TypeError,
        "Expected `t_list` to be a sequence"),
    Row("clip_by_norm_t", lambda: clip_by_norm([1.0], 1.0), TypeError,
        r"Expected `t` to be a torch.Tensor, got \[1.0\] \(list\)"),
    Row("clip_by_norm_clip", lambda: clip_by_norm(g(), float("nan")), ValueError,
        rf"Expected `clip_norm` in {NUM}, got nan$"),
    Row("clip_by_norm_axes_type", lambda: clip_by_norm(g(), 1.0, axes="0"), TypeError,
        r"Expected `axes` to be None, an int or a sequence of ints, got '0'"),
    Row("clip_by_norm_axes_item", lambda: clip_by_norm(g(), 1.0, axes=[0.5]), TypeError,
        r"Expected `axes` to be an integer, got 0.5"),
    Row("clip_by_norm_axes_range", lambda: clip_by_norm(g(), 1.0, axes=[1]), ValueError,
        r"Expected `axes` in \[-1, 1\), got 1$"),
    Row("clip_by_value_order", lambda: clip_by_value(g(), 1.0, -1.0), ValueError,
        r"Expected `clip_value_min` <= `clip_value_max`, got 1.0 > -1.0"),
    Row("clip_by_value_type", lambda: clip_by_value(g(), "a", 1.0), TypeError,
        r"Expected `clip_value_min` to be a real number, got 'a'"),
    Row("clip_by_value_int_tensor", lambda: clip_by_value(g(), torch.tensor(0), 1.0),
        TypeError, r"Expected `clip_value_min` to be a real number or a floating-point tensor, "
        r"got a tensor of dtype torch.int64"),
    Row("clip_by_value_nan", lambda: clip_by_value(g(), float("nan"), 1.0), ValueError,
        r"Expected `clip_value_min` to be a number, got nan"),
    Row("clip_by_average_norm_clip", lambda: clip_by_average_norm(g(), -1), ValueError,
        rf"Expected `clip_norm` in {NUM}, got -1.0$"),
    Row("clip_by_average_norm_t", lambda: clip_by_average_norm(None, 1.0), TypeError,
        r"Expected `t` to be a torch.Tensor, got None"),
    Row("clip_gradients_pairs", lambda: clip_gradients_by_global_norm([g()]), TypeError,
        r"Expected grads_and_vars\[0\] to be a \(gradient, variable\) pair"),
    Row("clip_gradients_clip", lambda: clip_gradients_by_global_norm([(g(), v())], 0.0),
        ValueError, rf"Expected `clip_norm` in {NUM}, got 0.0$"),
    # ---- processors
    Row("ClipByGlobalNorm", lambda: ClipByGlobalNorm(-1.0), ValueError,
        rf"Expected `clip_norm` in {NUM}, got -1.0$"),
    Row("ClipByGlobalNorm_tensor", lambda: ClipByGlobalNorm(torch.tensor(1)), TypeError,
        r"0-dim floating-point tensor, got a tensor of shape \(\) and dtype torch.int64"),
    Row("ClipByNorm", lambda: ClipByNorm(True), TypeError,
        r"Expected `clip_norm` to be a real number, got True \(bool\)"),
    Row("ClipByAverageNorm", lambda: ClipByAverageNorm(0.0), ValueError,
        rf"Expected `clip_norm` in {NUM}, got 0.0$"),
    Row("ClipByValue_order", lambda: ClipByValue(2.0, 1.0), ValueError,
        r"Expected `clip_value_min` <= `clip_value_max`, got 2.0 > 1.0"),
    Row("ClipByValue_type", lambda: ClipByValue(-1.0, None), TypeError,
        r"Expected `clip_value_max` to be a real number, got None"),
    Row("NanInfFilter", lambda: NanInfFilter(upstream_sparse_inf=1), TypeError,
        r"Expected `upstream_sparse_inf` to be a bool, got 1 \(int\)"),
    Row("SkipNonFinite_negative", lambda: SkipNonFinite(-1), ValueError,
        r"Expected `max_consecutive_skips` in \[0, inf\), got -1$"),
    Row("SkipNonFinite_type", lambda: SkipNonFinite(1.5), TypeError,
        r"Expected `max_consecutive_skips` to be an integer, got 1.5"),
    Row("GradientNoise_stddev", lambda: GradientNoise(0.0), ValueError,
        rf"Expected `stddev` in {NUM}, got 0.0$"),
    Row("GradientNoise_generator", lambda: GradientNoise(0.1, generator="seed"), TypeError,
        r"Expected `generator` to be None, an int seed or a torch.Generator, got 'seed'"),
    Row("GradientNoise_generator_bool", lambda: GradientNoise(0.1, generator=True), TypeError,
        r"Expected `generator` to be None, an int seed or a torch.Generator, got True"),
    Row("LARC_eta", lambda: LARC(0.0), ValueError, rf"Expected `larc_eta` in {NUM}, got 0.0$"),
    Row("LARC_mode", lambda: LARC(0.1, "clipping"), ValueError,
        r"Expected `larc_mode` to be one of \['clip', 'scale'\], got 'clipping'"),
    Row("LARC_mode_type", lambda: LARC(0.1, None), TypeError,
        r"Expected `larc_mode` to be one of \['clip', 'scale'\], got None"),
    Row("LARC_min_update", lambda: LARC(0.1, min_update=-1), ValueError,
        r"Expected `min_update` in \[0, inf\), got -1.0$"),
    Row("LARC_epsilon", lambda: LARC(0.1, epsilon="0"), TypeError,
        r"Expected `epsilon` to be a real number, got '0'"),
    Row("LARC_learning_rate", lambda: LARC(0.1, learning_rate=-0.1), ValueError,
        r"Expected `learning_rate` in \[0, inf\), got -0.1$"),
    Row("LARC_from_params_unknown", lambda: LARC.from_params({"larc_eta": 0.1, "eta": 1}),
        ValueError, r"Expected the keys of `larc_params` to be among \['larc_eta', "
        r"'larc_mode', 'min_update', 'epsilon'\], got unknown keys \['eta'\]"),
    Row("LARC_from_params_missing", lambda: LARC.from_params({"larc_mode": "clip"}),
        ValueError, r"Expected `larc_params` to contain 'larc_eta', got keys \['larc_mode'\]"),
    Row("LARC_from_params_type", lambda: LARC.from_params([("larc_eta", 1.0)]), TypeError,
        r"Expected `larc_params` to be a dict or None, got \[\('larc_eta', 1.0\)\]"),
    Row("LARC_alone_without_lr", lambda: LARC(0.1)([(g(), v())]), ValueError,
        r"LARC needs the learning rate: pass `learning_rate=`"),
    Row("larc_function_lr", lambda: larc([(g(), v())], None, 0.1), TypeError,
        r"Expected `learning_rate` to be a real number or a 0-dim tensor, got None"),
    Row("Processor_load_state", _processor_load, ValueError,
        r"Expected `state_dict` with keys \['consecutive', 'total'\], got \['consecutive'\]"),
    # ---- loss scalers
    Row("Static_value", lambda: StaticLossScaler(0), ValueError,
        rf"Expected `loss_scale` in {NUM}, got 0.0$"),
    Row("Static_type", lambda: StaticLossScaler("1"), TypeError,
        r"Expected `loss_scale` to be a real number, got '1'"),
    Row("Backoff_scale_min", lambda: BackoffLossScaler(scale_min=0.0), ValueError,
        rf"Expected `scale_min` in {NUM}, got 0.0$"),
    Row("Backoff_scale_max", lambda: BackoffLossScaler(scale_min=4.0, scale_max=2.0),
        ValueError, r"Expected `scale_max` in \[4, inf\), got 2.0$"),
    Row("Backoff_step_factor", lambda: BackoffLossScaler(step_factor=0.5), ValueError,
        r"Expected `step_factor` in \[1, inf\), got 0.5$"),
    Row("Backoff_step_window_type", lambda: BackoffLossScaler(step_window=2000.0), TypeError,
        r"Expected `step_window` to be an integer, got 2000.0 \(float\)"),
    Row("Backoff_step_window", lambda: BackoffLossScaler(step_window=0), ValueError,
        r"Expected `step_window` in \[1, inf\), got 0$"),
    Row("LogMax_log_max", lambda: LogMaxLossScaler(log_max=0.0), ValueError,
        rf"Expected `log_max` in {NUM}, got 0.0$"),
    Row("LogMax_beta1", lambda: LogMaxLossScaler(beta1=1.0), ValueError,
        r"Expected `beta1` in \[0, 1\), got 1.0$"),
    Row("LogMax_beta2", lambda: LogMaxLossScaler(beta2=-0.1), ValueError,
        r"Expected `beta2` in \[0, 1\), got -0.1$"),
    Row("LogMax_std", lambda: LogMaxLossScaler(overflow_std_dev=-1.0), ValueError,
        r"Expected `overflow_std_dev` in \[0, inf\), got -1.0$"),
    Row("LogMax_scale_max", lambda: LogMaxLossScaler(scale_max=0.5), ValueError,
        r"Expected `scale_max` in \[1, inf\), got 0.5$"),
    Row("LogMax_scale_min", lambda: LogMaxLossScaler(scale_min=-1.0), ValueError,
        rf"Expected `scale_min` in {NUM}, got -1.0$"),
    Row("LogMax_quirks", lambda: LogMaxLossScaler(upstream_quirks="yes"), TypeError,
        r"Expected `upstream_quirks` to be a bool, got 'yes'"),
    Row("Automatic_algorithm", lambda: AutomaticLossScaler("Dynamic"), ValueError,
        r"Expected `algorithm` to be one of \['Backoff', 'LogMax'\], got 'Dynamic'"),
    Row("Automatic_algorithm_type", lambda: AutomaticLossScaler(1), TypeError,
        r"Expected `algorithm` to be one of \['Backoff', 'LogMax'\], got 1 \(int\)"),
    Row("Automatic_params_type", lambda: AutomaticLossScaler("Backoff", [1]), TypeError,
        r"Expected `params` to be a dict or None, got \[1\]"),
    Row("Automatic_params_key", lambda: AutomaticLossScaler("Backoff", {"log_max": 1.0}),
        ValueError, r"Expected the keys of `params` to be among \['scale_min', 'scale_max', "
        r"'step_factor', 'step_window'\], got unknown keys \['log_max'\]"),
    Row("Automatic_params_value_type",
        lambda: AutomaticLossScaler("LogMax", {"beta1": "0.9"}), TypeError,
        r"Expected `beta1` to be a real number, got '0.9'"),
    Row("update_has_nan", lambda: BackoffLossScaler().update(1, 1.0), TypeError,
        r"Expected `has_nan` to be a bool or a 0-dim bool tensor, got 1 \(int\)"),
    Row("update_amax", lambda: BackoffLossScaler().update(False, torch.ones(2)), TypeError,
        r"Expected `amax` to be a real number or a 0-dim floating-point tensor, got a tensor "
        r"of shape \(2,\)"),
    Row("update_amax_type", lambda: LogMaxLossScaler().update(False, "1"), TypeError,
        r"Expected `amax` to be a real number or a 0-dim floating-point tensor, got '1'"),
    Row("scaler_load_state", lambda: BackoffLossScaler().load_state_dict({"loss_scale": 1.0}),
        ValueError, r"Expected `state_dict` with keys \['iteration', "
        r"'last_overflow_iteration', 'loss_scale'\], got \['loss_scale'\]"),
    Row("as_loss_scaler_type", lambda: as_loss_scaler("Backoff"), TypeError,
        r"Expected `loss_scale` to be None, a real number > 0 or a loss scaler "
        r"\(StaticLossScaler, BackoffLossScaler, LogMaxLossScaler, AutomaticLossScaler\), got "
        r"'Backoff'"),
    Row("LossScale_value", lambda: LossScale(-1.0), ValueError,
        rf"Expected `loss_scale` in {NUM}, got -1.0$"),
    # ---- pipeline
    Row("pipeline_optimizer", lambda: GradientPipeline(torch.optim.SGD([v()], lr=0.1)),
        TypeError, r"Expected `optimizer` to be a trainop.Optimizer, a "
        r"MultitaskOptimizerWrapper or a MixedPrecisionOptimizerWrapper, got SGD"),
    Row("pipeline_processors", lambda: GradientPipeline(trainop.AdamOptimizer(), 5), TypeError,
        r"Expected `processors` to be an iterable of trainop.processing processors, got 5"),
    Row("pipeline_processor_item",
        lambda: GradientPipeline(trainop.AdamOptimizer(), [ClipByNorm(1.0), "clip"]),
        TypeError, r"Expected processors\[1\] to be a trainop.processing processor "
        r"\(e.g. ClipByGlobalNorm\), got 'clip'"),
    Row("pipeline_duplicate_stage", lambda: pipe(ClipByGlobalNorm(1.0), ClipByGlobalNorm(2.0)),
        ValueError, r"Expected at most one processor per stage, got "
        r"ClipByGlobalNorm\(clip_norm=1.0\) and ClipByGlobalNorm\(clip_norm=2.0\) for stage "
        r"'clip_by_global_norm'"),
    Row("pipeline_duplicate_loss_scale", lambda: GradientPipeline(mp(), [LossScale(2.0)]),
        ValueError, "Expected at most one processor per stage.*'unscale'"),
    Row("pipeline_larc_and_clip", lambda: pipe(LARC(0.001), ClipByGlobalNorm(1.0)),
        ValueError, r"Expected global-norm clipping \(clip_gradients / ClipByGlobalNorm\) and "
        r"LARC \(larc_params\) not to be used together, got both"),
    Row("pipeline_apply_empty", lambda: pipe().apply_gradients([]), ValueError,
        "No variables provided."),
    Row("pipeline_apply_all_none", lambda: pipe().apply_gradients([(None, v())]), ValueError,
        "No gradients provided for any variable"),
    Row("pipeline_apply_dtype", lambda: pipe().apply_gradients([(g(2, torch.float64), v())]),
        TypeError, r"to have the variable's dtype torch.float32, got torch.float64"),
    Row("pipeline_global_step", lambda: pipe().apply_gradients([(g(), v())],
                                                               global_step=torch.zeros(())),
        TypeError, r"Expected `global_step` to be None or a 0-dim integer tensor"),
    Row("pipeline_name", lambda: pipe().apply_gradients([(g(), v())], name=""), ValueError,
        "Must specify the optimizer name"),
    Row("pipeline_zero_filter_twice", lambda: pipe(FilterZeroGradients()).apply_gradients(
        [(g(), w := v()), (g(), w)]), ValueError,
        r"Expected each variable at most once with FilterZeroGradients"),
    Row("pipeline_scale_loss", lambda: pipe(LossScale(2.0)).scale_loss(1.0), TypeError,
        r"Expected `loss` to be a tensor \(or a callable returning one\), got 1.0"),
    Row("pipeline_compute_loss", lambda: pipe(LossScale(2.0)).compute_gradients(lambda: 2.0),
        TypeError, r"Expected `loss` to be a tensor \(or a callable returning one\), got 2.0"),
    Row("pipeline_minimize_no_grad",
        lambda: pipe(opt=trainop.GradientDescentOptimizer(0.1, params=[v()])).minimize(
            torch.ones((), requires_grad=True) * 1), ValueError,
        "No gradients provided for any variable"),
    Row("pipeline_zero_grad", lambda: pipe().zero_grad(set_to_none=1), TypeError,
        r"Expected `set_to_none` to be a bool, got 1"),
    Row("pipeline_load_state_keys", lambda: pipe().load_state_dict({"stages": {}}), ValueError,
        r"Expected `state_dict` with keys \['consecutive_skips', 'skipped_steps', 'stages'\], "
        r"got \['stages'\]$"),
    Row("pipeline_load_state_stages", lambda: pipe(SkipNonFinite()).load_state_dict(
        {"stages": {}, "skipped_steps": 0, "consecutive_skips": 0}), ValueError,
        r"Expected state for the stages \['check'\], got \{\}"),
    # ---- wrappers
    Row("multitask_opt", lambda: MultitaskOptimizerWrapper(torch.optim.SGD([v()], lr=0.1)),
        TypeError, r"Supplied optimizer must be an instance of trainop.Optimizer: expected "
        r"`opt` to be a trainop.Optimizer, got SGD"),
    Row("mp_optimizer", lambda: MixedPrecisionOptimizerWrapper("Adam"), TypeError,
        r"Expected `optimizer` to be a trainop.Optimizer, got 'Adam' \(str\)"),
    Row("mp_loss_scale_type", lambda: mp(loss_scale="Backoff"), TypeError,
        r"Expected `loss_scale` to be None, a real number > 0 or a loss scaler"),
    Row("mp_loss_scale_value", lambda: mp(loss_scale=-2), ValueError,
        rf"Expected `loss_scale` in {NUM}, got -2.0$"),
    Row("mp_state_exists", _with_state_half, ValueError,
        r"Expected `optimizer` to have no state for its float16/bfloat16 params yet"),
    Row("mp_master_unknown", lambda: mp().master(v()), ValueError,
        r"Expected `var` to be a float16/bfloat16 variable with a master copy, got tensor"),
    Row("mp_regularizer_var", lambda: mp().add_regularizer(v(), lambda x: x.sum()), TypeError,
        r"Expected `var` to be a float16/bfloat16 tensor \(regularize float32 variables "
        r"through the loss\)"),
    Row("mp_regularizer_fn", lambda: mp().add_regularizer(v(2, torch.float16), 1e-4),
        TypeError, r"Expected `regularizer` to be callable, got 0.0001"),
    Row("mp_regularizer_result", _bad_regularizer, TypeError,
        r"Expected `regularizer\(var\)` to be a tensor \(or a callable returning one\), got 3.0"),
    Row("mp_zero_grad", lambda: mp().zero_grad(set_to_none=None), TypeError,
        r"Expected `set_to_none` to be a bool, got None"),
    Row("mp_load_state_keys", lambda: mp().load_state_dict({"optimizer": {}}), ValueError,
        r"Expected `state_dict` with keys \['loss_scaler', 'masters', 'optimizer'\]"),
    Row("mp_load_state_masters", lambda: mp().load_state_dict(
        {"optimizer": {}, "loss_scaler": {}, "masters": [torch.zeros(1)]}), ValueError,
        r"Expected 0 master copies in `state_dict`, got \[tensor"),
]


@pytest.mark.parametrize("row", ERRORS, ids=[r.id for r in ERRORS])
def test_error(row):
    with pytest.raises(row.exc, match=row.match):
        row.call()


def test_ids_are_unique():
    ids = [r.id for r in ERRORS]
    assert len(ids) == len(set(ids))


def test_rejected_call_changes_nothing():
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    scaler = BackoffLossScaler()
    skip = SkipNonFinite()
    opt = trainop.AdamOptimizer(0.1)
    p = GradientPipeline(opt, [LossScale(scaler), ClipByGlobalNorm(1.0), skip])
    p.apply_gradients([(torch.tensor([0.5, float("nan")]), w)])
    p.apply_gradients([(torch.tensor([0.5, 0.5]), w)])
    before = ([w.detach().clone()] + [t.clone() for t in opt.state[w].values()]
              + [t.clone() for t in opt.param_groups[0]["non_slot"].values()]
              + [t.clone() for t in scaler.state_dict().values()]
              + [skip.total.clone(), p.skipped_steps.clone()])
    for bad in ({"global_step": torch.zeros(())}, {"name": 5}):
        with pytest.raises((TypeError, ValueError)):
            p.apply_gradients([(torch.tensor([float("nan"), 1.0]), w)], **bad)
    with pytest.raises(TypeError):
        p.apply_gradients([(torch.tensor([1, 2]), w)])
    after = ([w.detach()] + list(opt.state[w].values())
             + list(opt.param_groups[0]["non_slot"].values())
             + list(scaler.state_dict().values()) + [skip.total, p.skipped_steps])
    for a, b in zip(before, after, strict=True):
        assert torch.equal(a, b)
