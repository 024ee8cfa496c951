"""The TF name of each piece of optimizer state, and how a load finds it in a checkpoint.

Every piece of state has a *target* (the key a ``names`` map may use to name it, and the key
``LoadReport.tf_names`` lists):

    target                          default TF name (before scopes)
    "<param>"                       names[param] (exact: a parameter is never guessed)
    "<param>[<slot>]"               "<variable>/<suffix>" (suffix from ``slot_names``; the
                                    variable is the master copy's name for a half parameter)
    "<param>[master]"               "FP32-master-copy/<variable>" (OpenSeq2Seq's float32
                                    master of a float16 variable)
    "optimizer.<name>"              "<name>" (``beta1_power``, ``beta2_power``, ``global_step``)
    "loss_scaler.<state>"           OpenSeq2Seq's unnamed scaler variables, in the order its
                                    scaler creates them (``Variable``, ``Variable_1``, ...)

TF puts optimizer state under the scopes active when the update op was built (OpenSeq2Seq:
``Loss_Optimization/...``, even ``Loss_Optimization/cond_1/beta1_power`` inside its
``tf.cond``). ``find`` takes, in order: the name ``names`` gives for the target; the default
name; the one checkpoint variable whose name ends with ``/`` + the default name. Several such
variables are a ``ValueError`` that asks for the name in ``names``: never a guess.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["MASTER_SCOPE", "SCALER_NAMES", "find", "is_state_key"]

MASTER_SCOPE = "FP32-master-copy"

#: OpenSeq2Seq's scalers create unnamed ``tf.Variable``s: TF names them ``Variable``,
#: ``Variable_1``, ... in creation order (automatic_loss_scaler.py).
SCALER_NAMES: dict[str, dict[str, str]] = {
    "BackoffLossScaler": {"iteration": "Variable", "last_overflow_iteration": "Variable_1",
                          "loss_scale": "Variable_2"},
    "LogMaxLossScaler": {"iteration": "Variable", "loss_scale": "Variable_1",
                         "x_hat": "Variable_2", "slow_x_hat": "Variable_3",
                         "xsquared_hat": "Variable_4", "b1_correction": "Variable_5",
                         "b2_correction": "Variable_6"},
}

_STATE = re.compile(r"^(?P<param>.+)\[(?P<what>\w+)\]$")


def is_state_key(key: str, params: Mapping) -> bool:
    """Whether a ``names`` key names optimizer state rather than a parameter."""
    if key in params:
        return False
    if key.startswith(("optimizer.", "loss_scaler.")):
        return True
    match = _STATE.match(key)
    return match is not None and match["param"] in params


def find(tensors: Mapping, target: str, default: str, overrides: Mapping[str, str]) -> str:
    """The checkpoint name holding ``target`` (see the module doc); the name to report as
    missing when there is none."""
    if target in overrides:
        return overrides[target]
    if default in tensors:
        return default
    scoped = [n for n in tensors if n.endswith("/" + default)]
    if len(scoped) > 1:
        raise ValueError(f"Cannot tell which checkpoint variable is {target}: "
                         f"{sorted(scoped)[:5]} all end with '/{default}'; name it in `names`, "
                         f"e.g. names[{target!r}] = {sorted(scoped)[0]!r}")
    return scoped[0] if scoped else default
