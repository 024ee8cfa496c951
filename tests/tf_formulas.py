"""TF1's dense update rules in float64 numpy, written from the upstream definitions
(shared/spec/tf1.md §2; NovoGrad: shared/spec/openseq2seq.md §7.1; AdagradDA: TF's
``ApplyAdagradDA`` with ``global_step + 1``), not from trainop's code.

``step(name, hp, var, g, slots, t)`` updates ``var`` (a float64 array) and ``slots`` (a dict of
float64 arrays, created on first use with TF's initial values) in place for one apply of one
variable; ``t`` is the number of applies before this one (TF's beta powers are ``beta**(t+1)``
in float32, AdagradDA's step is ``t + 1``). ``hp`` holds every hyperparameter by trainop's
constructor name (``lr`` ...), already rounded to float32 as TF casts them to the variable's
dtype.
"""

from __future__ import annotations

import numpy as np


def f32(x: float) -> float:
    return float(np.float32(x))


def beta_power(beta: float, t: int) -> float:
    """TF's float32 ``beta_power`` during apply ``t + 1``: float32 multiplies from ``beta``."""
    power = np.float32(beta)
    for _ in range(t):
        power = np.float32(power * np.float32(beta))
    return float(power)


def _slot(slots, name, like, value=0.0):
    if name not in slots:
        slots[name] = np.full_like(like, value)
    return slots[name]


def _gd(hp, var, g, slots, t):
    var -= hp["lr"] * g


def _momentum(hp, var, g, slots, t, decay=0.0):
    accum = _slot(slots, "momentum", var)
    var -= decay * var
    mom, lr = hp["momentum"], hp["lr"]
    accum *= mom
    accum += g
    if hp.get("use_nesterov", False):
        var -= lr * g + lr * mom * accum
    else:
        var -= lr * accum


def _momentum_w(hp, var, g, slots, t):
    _momentum(hp, var, g, slots, t, decay=_decay(hp))


def _adagrad(hp, var, g, slots, t):
    accum = _slot(slots, "accumulator", var, hp.get("initial_accumulator_value", f32(0.1)))
    accum += g * g
    var -= hp["lr"] * g / np.sqrt(accum)


def _adagrad_da(hp, var, g, slots, t):
    ga = _slot(slots, "gradient_accumulator", var)
    gga = _slot(slots, "gradient_squared_accumulator", var, f32(0.1))
    ga += g
    gga += g * g
    lr, l1, l2, step = hp["lr"], hp.get("l1_regularization_strength", 0.0), \
        hp.get("l2_regularization_strength", 0.0), t + 1
    denom = l2 * step * lr + np.sqrt(gga)
    if l1 > 0:
        var[...] = -lr * np.sign(ga) * np.maximum(np.abs(ga) - l1 * step, 0) / denom
    else:
        var[...] = -lr * ga / denom


def _adadelta(hp, var, g, slots, t):
    accum = _slot(slots, "accum", var)
    accum_update = _slot(slots, "accum_update", var)
    rho, eps = hp.get("rho", f32(0.95)), hp.get("epsilon", f32(1e-8))
    accum[...] = rho * accum + (1 - rho) * g * g
    update = np.sqrt(accum_update + eps) / np.sqrt(accum + eps) * g
    var -= hp["lr"] * update
    accum_update[...] = rho * accum_update + (1 - rho) * update * update


def _rmsprop(hp, var, g, slots, t):
    ms = _slot(slots, "rms", var, 1.0)
    mom = _slot(slots, "momentum", var)
    decay, eps = hp.get("decay", f32(0.9)), hp.get("epsilon", f32(1e-10))
    ms[...] = ms + (g * g - ms) * (1 - decay)
    if hp.get("centered", False):
        mg = _slot(slots, "mg", var)
        mg[...] = mg + (g - mg) * (1 - decay)
        denom = ms - mg * mg + eps
    else:
        denom = ms + eps
    mom[...] = hp.get("momentum", 0.0) * mom + hp["lr"] * g / np.sqrt(denom)
    var -= mom


def _decay(hp):
    wd = hp["weight_decay"]
    return hp["lr"] * wd if hp.get("decay_scaled_by_lr") else wd


def _adam(hp, var, g, slots, t, nesterov=False, decay=0.0):
    m, v = _slot(slots, "m", var), _slot(slots, "v", var)
    b1, b2 = hp.get("beta1", f32(0.9)), hp.get("beta2", f32(0.999))
    eps = hp.get("epsilon", f32(1e-8))
    alpha = hp["lr"] * np.sqrt(1 - beta_power(b2, t)) / (1 - beta_power(b1, t))
    var -= decay * var
    m[...] = m + (g - m) * (1 - b1)
    v[...] = v + (g * g - v) * (1 - b2)
    direction = (1 - b1) * g + b1 * m if nesterov else m
    var -= alpha * direction / (np.sqrt(v) + eps)


def _adam_w(hp, var, g, slots, t):
    _adam(hp, var, g, slots, t, decay=_decay(hp))


def _nadam(hp, var, g, slots, t):
    _adam(hp, var, g, slots, t, nesterov=True)


def _ftrl(hp, var, g, slots, t):
    accum = _slot(slots, "accum", var, hp.get("initial_accumulator_value", f32(0.1)))
    linear = _slot(slots, "linear", var)
    lr, p = hp["lr"], hp.get("learning_rate_power", -0.5)
    l1 = hp.get("l1_regularization_strength", 0.0)
    l2 = hp.get("l2_regularization_strength", 0.0)
    shrink = hp.get("l2_shrinkage_regularization_strength", 0.0)
    gs = g + 2 * shrink * var if shrink > 0 else g
    new_accum = accum + g * g
    linear += gs - (new_accum ** -p - accum ** -p) / lr * var
    quad = new_accum ** -p / lr + 2 * l2
    var[...] = np.where(np.abs(linear) > l1, (l1 * np.sign(linear) - linear) / quad, 0.0)
    accum[...] = new_accum


def _proximal(var, g, lr_t, l1, l2):
    prox = var - lr_t * g
    if l1 > 0:
        var[...] = np.sign(prox) * np.maximum(np.abs(prox) - lr_t * l1, 0) / (1 + lr_t * l2)
    else:
        var[...] = prox / (1 + lr_t * l2)


def _proximal_gd(hp, var, g, slots, t):
    _proximal(var, g, hp["lr"], hp.get("l1_regularization_strength", 0.0),
              hp.get("l2_regularization_strength", 0.0))


def _proximal_adagrad(hp, var, g, slots, t):
    accum = _slot(slots, "accumulator", var, hp.get("initial_accumulator_value", f32(0.1)))
    accum += g * g
    _proximal(var, g, hp["lr"] / np.sqrt(accum), hp.get("l1_regularization_strength", 0.0),
              hp.get("l2_regularization_strength", 0.0))


def _novograd(hp, var, g, slots, t):
    m = _slot(slots, "momentum", var)
    ema = slots.setdefault("grad_norm_ema", np.zeros(()))
    b1, b2 = hp.get("beta1", f32(0.95)), hp.get("beta2", f32(0.98))
    eps, wd = hp.get("epsilon", f32(1e-8)), hp.get("weight_decay", 0.0)
    n2 = float(np.sum(g * g))
    if hp.get("second_moment", "persistent") == "openseq2seq":  # never stored: v = n2
        d = g / np.sqrt(n2 + eps)
    else:  # the paper: a persistent moment, first value n2; eps outside the root
        v = n2 if ema == 0 else b2 * float(ema) + (1 - b2) * n2
        ema[...] = v
        d = g / (np.sqrt(v) + eps)
    if wd > 0:
        d = d + wd * var
    if hp.get("grad_averaging", False):
        d = d * (1 - b1)
    m[...] = b1 * m + d
    var -= hp["lr"] * m


RULES = {
    "GradientDescentOptimizer": _gd,
    "MomentumOptimizer": _momentum,
    "MomentumWOptimizer": _momentum_w,
    "AdagradOptimizer": _adagrad,
    "AdagradDAOptimizer": _adagrad_da,
    "AdadeltaOptimizer": _adadelta,
    "RMSPropOptimizer": _rmsprop,
    "AdamOptimizer": _adam,
    "LazyAdamOptimizer": _adam,  # dense: Adam (§2.10)
    "AdamWOptimizer": _adam_w,
    "NadamOptimizer": _nadam,
    "FtrlOptimizer": _ftrl,
    "ProximalGradientDescentOptimizer": _proximal_gd,
    "ProximalAdagradOptimizer": _proximal_adagrad,
    "NovoGrad": _novograd,
}


def step(name, hp, var, g, slots, t) -> None:
    RULES[name](hp, var, g, slots, t)
