"""Adam, Nadam, AdamW and LazyAdam on Triton (``csrc/rules.h``'s ``adam`` and ``lazy_adam``),
and TF's every-row sparse Adam/Nadam, TF's step size computed on the device from the float32
beta powers::

    alpha = lr*sqrt(1 - beta2_power)/(1 - beta1_power)       (float32, as TF)
    adam:        var -= var*wd (wd != 0); m += (g - m)*(1-beta1); v += (g*g - v)*(1-beta2)
                 var -= num*alpha/(sqrt(v) + eps), num = m  |  g*(1-beta1) + m*beta1  (Nadam)
    lazy_adam:   (the touched rows) var -= var*wd (wd != 0)
                 m = m*beta1 + g*(1-beta1); v = v*beta2 + g*g*(1-beta2)
                 var -= alpha*m/(sqrt(v) + eps)
    adam_sparse, nadam_sparse (TF's sparse Adam / contrib's sparse Nadam, one launch over
    every element of the table, after one that maps each row to its place among the
    gradient's rows; ``g`` the touched row's gradient):
                 var -= var*wd (touched rows, wd != 0: AdamW's decay first)
                 m = m*beta1 (+ g*(1-beta1) on touched rows); v = v*beta2 (+ g*g*(1-beta2))
                 adam_sparse:  var -= alpha*m/(sqrt(v) + eps)              (every row)
                 nadam_sparse: var -= (g*(1-beta1) + m*beta1)*alpha/(sqrt(v) + eps)
                               (touched rows only)

Each in the reference's order of operations (``algorithms/adam.py``: ``adam``,
``lazy_adam_sparse``, ``decay_moments_sparse`` then ``adam_sparse``/``nadam_sparse``).
hyper: lr, beta1, beta2, epsilon, use_nesterov (0/1), wd, beta1_power, beta2_power (the
powers are the optimizer's 0-dim float32 tensors: never read on the host).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from trainop.kernels.triton import interpreted
from trainop.kernels.triton._common import gathered, hyper, live, prologue, put, tensor
from trainop.kernels.triton.launch import BLOCK, OPTIONS, complement, launch

__all__ = ["RULES"]

#: Whether this module's kernels were decorated for Triton's interpreter.
INTERPRETED = interpreted()


@triton.jit
def _alpha(h):
    """TF's step size from the float32 beta powers, on the device."""
    lr, beta1_power, beta2_power = hyper(h, 0), hyper(h, 7), hyper(h, 8)
    return tl.div_rn(lr * tl.sqrt_rn(1.0 - beta2_power), 1.0 - beta1_power)


@triton.jit
def _adam(var, grad, m, v, half, h, mult, inf, n, idx, width,
          HAS_MULT: tl.constexpr, HAS_INF: tl.constexpr,
          BLOCK: tl.constexpr, ROWS: tl.constexpr, HALF: tl.constexpr,
          TABLE: tl.constexpr, ALIGNED: tl.constexpr, LAZY: tl.constexpr):
    mask, at, g, t = prologue(grad, mult, n, inf, idx, width, HAS_MULT, HAS_INF, BLOCK, ROWS,
                              TABLE, ALIGNED)
    var = tensor(var, 0, t, idx, n, TABLE, ALIGNED)
    m = tensor(m, 2, t, idx, n, TABLE, ALIGNED)
    v = tensor(v, 3, t, idx, n, TABLE, ALIGNED)
    half = tensor(half, 4, t, idx, n, TABLE, ALIGNED)
    beta1, one_minus_beta1 = hyper(h, 1), hyper(h, 2)
    one_minus_beta2, eps, nesterov = hyper(h, 3), hyper(h, 4), hyper(h, 5)
    wd, beta2 = hyper(h, 6), hyper(h, 9)
    alpha = _alpha(h)
    x = tl.load(var + at, mask=mask)
    x = tl.where(wd != 0.0, x - x * wd, x)
    m0 = tl.load(m + at, mask=mask)
    v0 = tl.load(v + at, mask=mask)
    if LAZY:  # contrib LazyAdam's form (TF's sparse kernel): blend, alpha first
        mi = m0 * beta1 + g * one_minus_beta1
        vi = v0 * beta2 + g * g * one_minus_beta2
        step = tl.div_rn(alpha * mi, tl.sqrt_rn(vi) + eps)
    else:
        mi = m0 + (g - m0) * one_minus_beta1
        vi = v0 + (g * g - v0) * one_minus_beta2
        num = tl.where(nesterov != 0.0, g * one_minus_beta1 + mi * beta1, mi)
        step = tl.div_rn(num * alpha, tl.sqrt_rn(vi) + eps)
    tl.store(m + at, mi, mask=mask)
    tl.store(v + at, vi, mask=mask)
    put(var, half, at, x - step, mask, HALF)


@triton.jit
def _adam_every_row(var, grad, m, v, half, h, mult, inf, n, where, width,
                    HAS_MULT: tl.constexpr, HAS_INF: tl.constexpr, BLOCK: tl.constexpr,
                    ROWS: tl.constexpr, HALF: tl.constexpr, NADAM: tl.constexpr):
    offs, mask = live(n, inf, HAS_INF, BLOCK)
    g, touched = gathered(grad, offs, mask, where, width)
    beta1, one_minus_beta1 = hyper(h, 1), hyper(h, 2)
    one_minus_beta2, eps = hyper(h, 3), hyper(h, 4)
    wd, beta2 = hyper(h, 6), hyper(h, 9)
    alpha = _alpha(h)
    x = tl.load(var + offs, mask=mask)
    x = tl.where(touched, tl.where(wd != 0.0, x - x * wd, x), x)
    mi = tl.load(m + offs, mask=mask) * beta1
    vi = tl.load(v + offs, mask=mask) * beta2
    m_scaled = g * one_minus_beta1
    mi = tl.where(touched, mi + m_scaled, mi)
    vi = tl.where(touched, vi + g * g * one_minus_beta2, vi)
    tl.store(m + offs, mi, mask=mask)
    tl.store(v + offs, vi, mask=mask)
    if NADAM:  # only the touched rows of var move (and are written)
        step = tl.div_rn(alpha * (m_scaled + mi * beta1), tl.sqrt_rn(vi) + eps)
        put(var, half, offs, x - step, touched, HALF)
    else:
        put(var, half, offs, x - tl.div_rn(alpha * mi, tl.sqrt_rn(vi) + eps), mask, HALF)


@triton.jit
def _places(where, idx, count, BLOCK: tl.constexpr):
    """The every-row rules' row map: ``where[idx[k]] = k`` (the rows are distinct)."""
    k = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = k < count
    tl.store(where + tl.load(idx + k, mask=mask, other=0), k, mask=mask)


def _row_map(var, rows) -> torch.Tensor:
    """int64 per row of ``var``: its place in ``rows`` (distinct), or -1; on the device."""
    where = torch.full((var.shape[0],), -1, dtype=torch.int64, device=var.device)
    count = rows.numel()
    if count:
        _places[((count + BLOCK - 1) // BLOCK,)](where, rows, count, BLOCK=BLOCK, **OPTIONS)
    return where


def _scalars(layout, values):
    lr, beta1, beta2, eps, nesterov, wd, beta1_power, beta2_power = values
    return layout.scalars([lr, beta1, complement(beta1), complement(beta2), eps, nesterov, wd,
                           beta1_power, beta2_power, beta2])


def adam(lists, values, multiplier, found_inf, layout, rows=None, half=None) -> None:
    launch(_adam, lists, layout, _scalars(layout, values), multiplier, found_inf, rows=rows,
           half=half, LAZY=False)


def lazy_adam(lists, values, multiplier, found_inf, layout, rows=None, half=None) -> None:
    launch(_adam, lists, layout, _scalars(layout, values), multiplier, found_inf, rows=rows,
           half=half, LAZY=True)


def adam_sparse(lists, values, multiplier, found_inf, layout, rows=None, half=None) -> None:
    launch(_adam_every_row, lists, layout, _scalars(layout, values), multiplier, found_inf,
           where=_row_map(lists[0][0], rows), half=half, NADAM=False)


def nadam_sparse(lists, values, multiplier, found_inf, layout, rows=None, half=None) -> None:
    launch(_adam_every_row, lists, layout, _scalars(layout, values), multiplier, found_inf,
           where=_row_map(lists[0][0], rows), half=half, NADAM=True)


#: ``adam_sparse`` and ``nadam_sparse``: sparse only (``rows`` required), over every row.
RULES = {"adam": adam, "lazy_adam": lazy_adam, "adam_sparse": adam_sparse,
         "nadam_sparse": nadam_sparse}
