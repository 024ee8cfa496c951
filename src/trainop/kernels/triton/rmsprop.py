"""RMSProp on Triton, TF's dense kernel form (``csrc/rules.h``'s ``rmsprop`` and
``rmsprop_centered``) and the form of TF's sparse kernels (``rmsprop_sparse``,
``rmsprop_centered_sparse``: the touched rows, ``algorithms/rmsprop.py``'s ``blend_form``)::

    dense:  ms += (g*g - ms)*(1-decay); mg += (g - mg)*(1-decay) (centered)
            mom = mom*momentum + g*lr/sqrt(ms + eps)  |  .../sqrt(ms - mg*mg + eps) (centered)
    sparse: ms = ms*decay + g*g*(1-decay); mg = mg*decay + g*(1-decay) (centered)
            mom = mom*momentum + g*lr/sqrt(ms + eps)  |  .../sqrt(ms + eps - mg*mg) (centered)
    var -= mom

hyper: lr, decay, momentum, epsilon (the kernel reads lr, momentum, epsilon, 1-decay, decay).
"""

from __future__ import annotations

import triton
import triton.language as tl

from trainop.kernels.triton import interpreted
from trainop.kernels.triton._common import hyper, prologue, put, tensor
from trainop.kernels.triton.launch import complement, launch

__all__ = ["RULES"]

#: Whether this module's kernels were decorated for Triton's interpreter.
INTERPRETED = interpreted()


@triton.jit
def _rmsprop(var, grad, ms, mg, mom, half, h, mult, inf, n, idx, width, HAS_MULT: tl.constexpr,
             HAS_INF: tl.constexpr, BLOCK: tl.constexpr, ROWS: tl.constexpr, HALF: tl.constexpr,
             TABLE: tl.constexpr, ALIGNED: tl.constexpr,
             CENTERED: tl.constexpr, BLEND: tl.constexpr):
    mask, at, g, t = prologue(grad, mult, n, inf, idx, width, HAS_MULT, HAS_INF, BLOCK, ROWS,
                              TABLE, ALIGNED)
    var = tensor(var, 0, t, idx, n, TABLE, ALIGNED)
    ms = tensor(ms, 2, t, idx, n, TABLE, ALIGNED)
    if CENTERED:  # the table lists the rule's own lists: mg only where it is one
        mg = tensor(mg, 3, t, idx, n, TABLE, ALIGNED)
        mom = tensor(mom, 4, t, idx, n, TABLE, ALIGNED)
        half = tensor(half, 5, t, idx, n, TABLE, ALIGNED)
    else:
        mom = tensor(mom, 3, t, idx, n, TABLE, ALIGNED)
        half = tensor(half, 4, t, idx, n, TABLE, ALIGNED)
    lr, momentum, eps = hyper(h, 0), hyper(h, 1), hyper(h, 2)
    one_minus_decay, decay = hyper(h, 3), hyper(h, 4)
    s0 = tl.load(ms + at, mask=mask)
    if BLEND:  # noqa: SIM108 (a constexpr branch: only one form is compiled)
        s = s0 * decay + g * g * one_minus_decay
    else:
        s = s0 + (g * g - s0) * one_minus_decay
    tl.store(ms + at, s, mask=mask)
    if CENTERED:
        c0 = tl.load(mg + at, mask=mask)
        if BLEND:
            c = c0 * decay + g * one_minus_decay
            denom = tl.sqrt_rn(s + eps - c * c)
        else:
            c = c0 + (g - c0) * one_minus_decay
            denom = tl.sqrt_rn(s - c * c + eps)
        tl.store(mg + at, c, mask=mask)
    else:
        denom = tl.sqrt_rn(s + eps)
    m = tl.load(mom + at, mask=mask) * momentum + tl.div_rn(g * lr, denom)
    tl.store(mom + at, m, mask=mask)
    x = tl.load(var + at, mask=mask)
    put(var, half, at, x - m, mask, HALF)


def _run(lists, values, multiplier, found_inf, layout, centered: bool, blend: bool, rows=None,
         half=None) -> None:
    lr, decay, momentum, eps = values
    h = layout.scalars([lr, momentum, eps, complement(decay), decay])
    if centered:
        var, grad, ms, mg, mom = lists
    else:
        (var, grad, ms, mom), mg = lists, lists[2]  # mg unused: any tensor of the unit's size
    launch(_rmsprop, [var, grad, ms, mg, mom], layout, h, multiplier, found_inf, CENTERED=centered,
           BLEND=blend, rows=rows, half=half)


def _rule(centered: bool, blend: bool):
    def rule(lists, values, multiplier, found_inf, layout, rows=None, half=None) -> None:
        _run(lists, values, multiplier, found_inf, layout, centered, blend, rows, half)
    return rule


RULES = {"rmsprop": _rule(False, False), "rmsprop_centered": _rule(True, False),
         "rmsprop_sparse": _rule(False, True), "rmsprop_centered_sparse": _rule(True, True)}
