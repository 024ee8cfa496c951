"""How each ``torch.optim`` optimizer's state is a trainop optimizer's, and what does not map.

One ``Rule`` per pair: the torch state keys, the map of one parameter's state each way, the
torch options refused (no trainop counterpart: changing them would change the training), and
the notes stating what differs in the update rules (reported, never approximated silently)::

    torch.optim            trainop                 state map
    Adam                   AdamOptimizer           exp_avg <-> m, exp_avg_sq <-> v,
                                                   step <-> step, beta1^step, beta2^step
    AdamW                  AdamWOptimizer          the same
    SGD (momentum > 0)     MomentumOptimizer       momentum_buffer <-> momentum
    RMSprop                RMSPropOptimizer        square_avg <-> rms, grad_avg <-> mg (centered),
                                                   lr * momentum_buffer <-> momentum
    Adagrad                AdagradOptimizer        sum <-> accumulator

Refused: torch's betas other than the trainop optimizer's (the beta powers are the betas'),
an SGD ``nesterov`` other than ``use_nesterov``, state keys or group options of another
optimizer (NAdam's ``mu_product``/``momentum_decay``), ``amsgrad`` (TF has no max slot),
SGD ``dampening`` != 0 and ``weight_decay`` != 0 (TF's Momentum has neither), Adam's coupled
``weight_decay`` != 0, Adagrad ``lr_decay`` != 0, ``maximize`` (TF minimises), and the
moments of parameters at different steps within a group (trainop keeps one count per group,
as TF keeps one beta power).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from trainop.optimizers.adagrad import AdagradOptimizer
from trainop.optimizers.adam import AdamOptimizer, LazyAdamOptimizer, NadamOptimizer
from trainop.optimizers.momentum import MomentumOptimizer
from trainop.optimizers.rmsprop import RMSPropOptimizer
from trainop.optimizers.weight_decay import AdamWOptimizer, MomentumWOptimizer

__all__ = ["RULES", "Rule", "rule_for"]

_EPS_ADAM = ("torch's Adam adds eps to the bias-corrected root (sqrt(v_hat) + eps), TF's adds "
             "it to sqrt(v) (epsilon-hat): equal when eps_tf = eps_torch * sqrt(1 - beta2^t), "
             "which changes with t; the moments carry over exactly, the next updates differ "
             "where sqrt(v) is near eps")
_EPS_RMS = ("torch's RMSprop divides by sqrt(square_avg) + eps, TF's by sqrt(ms + eps); and "
            "TF's momentum buffer holds lr * torch's buffer (converted with the group's current "
            "lr); a new slot starts at 1 in TF, at 0 in torch")
_EPS_ADAGRAD = ("torch's Adagrad divides by sqrt(sum) + eps, TF's by sqrt(accum) (no eps); "
                "torch's sum starts at initial_accumulator_value (default 0), TF's at 0.1")
_ADAMW = ("torch's AdamW decays p *= 1 - lr * weight_decay, contrib's AdamW var -= "
          "weight_decay * var (not times lr): set trainop's weight_decay to lr * torch's")


@dataclass(frozen=True)
class Rule:
    """One torch.optim <-> trainop pair (see the module doc)."""

    torch_name: str
    trainop: tuple[type, ...]
    excluded: tuple[type, ...]
    keys: Callable[[dict], tuple[str, ...]]  # torch state keys, given the torch group
    to_trainop: Callable[[dict, dict], dict[str, torch.Tensor]]  # (torch entry, torch group)
    to_torch: Callable[[dict, dict], dict[str, torch.Tensor]]  # (trainop slots, torch group)
    refused: dict[str, Any]  # torch option -> the only value that maps
    notes: tuple[str, ...]
    beta_powers: bool = False
    steps: bool = True  # torch keeps a per-parameter ``step`` (SGD does not)
    #: (torch option, index in it or None, trainop hyperparameter) that must agree: the state
    #: depends on them (beta powers on the betas; Nesterov's update on the flag)
    agree: tuple[tuple[str, int | None, str], ...] = ()
    #: torch group options only other optimizers have (``momentum_decay``: NAdam)
    foreign: tuple[str, ...] = ()


def _adam_to_trainop(entry, group):
    return {"m": entry["exp_avg"], "v": entry["exp_avg_sq"]}


def _adam_to_torch(slots, group):
    return {"exp_avg": slots["m"], "exp_avg_sq": slots["v"]}


def _rms_keys(group):
    keys = ("square_avg",)
    if group.get("momentum", 0) > 0:
        keys += ("momentum_buffer",)
    return keys + (("grad_avg",) if group.get("centered") else ())


def _rms_lr(group) -> float:
    lr = float(group["lr"])
    if not lr > 0:
        raise ValueError(f"Expected the torch group's `lr` > 0 to convert RMSprop's momentum "
                         f"buffer (TF keeps lr * buffer), got {lr}")
    return lr


def _rms_to_trainop(entry, group):
    square = entry["square_avg"]
    buffer = entry.get("momentum_buffer")
    slots = {"rms": square, "momentum": (torch.zeros_like(square) if buffer is None
                                         else buffer * _rms_lr(group))}
    if group.get("centered"):
        slots["mg"] = entry["grad_avg"]
    return slots


def _rms_to_torch(slots, group):
    entry = {"square_avg": slots["rms"]}
    if group.get("momentum", 0) > 0:
        entry["momentum_buffer"] = slots["momentum"] / _rms_lr(group)
    if group.get("centered"):
        entry["grad_avg"] = slots["mg"]
    return entry


_BETAS = (("betas", 0, "beta1"), ("betas", 1, "beta2"))
_NOT_ADAM = ("momentum_decay",)  # NAdam's group (its state adds mu_product)

RULES: tuple[Rule, ...] = (
    Rule("AdamW", (AdamWOptimizer,), (), lambda g: ("exp_avg", "exp_avg_sq"),
         _adam_to_trainop, _adam_to_torch, {"amsgrad": False, "maximize": False},
         (_EPS_ADAM, _ADAMW), beta_powers=True, agree=_BETAS, foreign=_NOT_ADAM),
    Rule("Adam", (AdamOptimizer,), (AdamWOptimizer, LazyAdamOptimizer, NadamOptimizer),
         lambda g: ("exp_avg", "exp_avg_sq"), _adam_to_trainop, _adam_to_torch,
         {"amsgrad": False, "maximize": False, "weight_decay": 0,
          "decoupled_weight_decay": False}, (_EPS_ADAM,), beta_powers=True, agree=_BETAS,
         foreign=_NOT_ADAM),
    Rule("SGD", (MomentumOptimizer,), (MomentumWOptimizer,), lambda g: ("momentum_buffer",),
         lambda e, g: {"momentum": e["momentum_buffer"]},
         lambda s, g: {"momentum_buffer": s["momentum"]},
         {"dampening": 0, "weight_decay": 0, "maximize": False}, (), steps=False,
         agree=(("nesterov", None, "use_nesterov"),)),
    Rule("RMSprop", (RMSPropOptimizer,), (), _rms_keys, _rms_to_trainop, _rms_to_torch,
         {"weight_decay": 0, "maximize": False}, (_EPS_RMS,)),
    Rule("Adagrad", (AdagradOptimizer,), (), lambda g: ("sum",),
         lambda e, g: {"accumulator": e["sum"]}, lambda s, g: {"sum": s["accumulator"]},
         {"lr_decay": 0, "weight_decay": 0, "maximize": False}, (_EPS_ADAGRAD,)),
)


def rule_for(optimizer: Any) -> Rule:
    """The rule for a trainop optimizer; ``TypeError`` for one without a torch counterpart."""
    for rule in RULES:
        if isinstance(optimizer, rule.trainop) and not isinstance(optimizer, rule.excluded):
            return rule
    names = ", ".join(f"{r.trainop[0].__name__} (torch.optim.{r.torch_name})" for r in RULES)
    raise TypeError(f"Expected `optimizer` to be one of {names}, got "
                    f"{type(optimizer).__name__}")
