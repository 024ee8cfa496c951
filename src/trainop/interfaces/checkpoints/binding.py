"""The ``names`` map: which TF variable (and layout) each model parameter is.

``names`` maps a parameter name (as ``model.named_parameters()`` gives it) to a TF variable
name, to ``(TF name, layout)`` (a ``Layout`` or a pair of functions ``(to_torch, to_tf)``), or
to ``None`` (the parameter has no TF counterpart: left as it is). It may also name optimizer
state whose TF name differs from the default (``"0.weight[m]"``, ``"0.weight[master]"``,
``"optimizer.beta1_power"``, ``"loss_scaler.loss_scale"``: see ``naming``). ``resolve``
checks the map against the model and returns one ``Binding`` per mapped parameter.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from trainop.contract.validation import describe
from trainop.interfaces.checkpoints.layouts import Layout, identity, layout
from trainop.interfaces.checkpoints.naming import is_state_key

__all__ = ["Binding", "resolve"]


@dataclass(frozen=True)
class Binding:
    """A model parameter, its TF variable name and the layout between them."""

    param_name: str
    param: torch.Tensor
    tf_name: str
    layout: Layout


def _layout_of(key: str, value: Any) -> Layout:
    if isinstance(value, Layout):
        return value
    if isinstance(value, tuple) and len(value) == 2 and all(map(callable, value)):
        return layout(*value)
    raise TypeError(f"Expected the layout of `names[{key!r}]` to be a ckpt layout (e.g. "
                    f"ckpt.transpose) or a pair of functions (to_torch, to_tf), got "
                    f"{describe(value)}")


def _entry(key: str, value: Any) -> tuple[str, Layout] | None:
    if value is None:
        return None
    if isinstance(value, str):
        name, lay = value, identity
    elif isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        name, lay = value[0], _layout_of(key, value[1])
    else:
        raise TypeError(f"Expected `names[{key!r}]` to be a TF variable name, a pair (name, "
                        f"layout) or None, got {describe(value)}")
    if not name or name.startswith("/") or name.endswith("/"):
        raise ValueError(f"Expected `names[{key!r}]` to be a TF variable name such as "
                         f"'dense/kernel', got {name!r}")
    return name, lay


def _check_parts(bindings: list[Binding]) -> None:
    shared: dict[str, list[Binding]] = {}
    for b in bindings:
        shared.setdefault(b.tf_name, []).append(b)
    for tf_name, group in shared.items():
        if len(group) == 1 and group[0].layout.part is None:
            continue
        parts = sorted(b.layout.part for b in group if b.layout.part is not None)
        if len(parts) != len(group) or parts != list(range(len(group))):
            raise ValueError(f"Expected the parameters mapped to the TF variable {tf_name!r} "
                             f"({[b.param_name for b in group]}) to be its parts (e.g. "
                             f"ckpt.lstm_kernel_ih and ckpt.lstm_kernel_hh), each once; got "
                             f"layouts {[b.layout.name for b in group]}")


def _overrides(names: Mapping, params: Mapping) -> dict[str, str]:
    out = {}
    for key, value in names.items():
        if isinstance(key, str) and is_state_key(key, params):
            if not isinstance(value, str) or not value:
                raise TypeError(f"Expected `names[{key!r}]` (optimizer state) to be a TF "
                                f"variable name, got {describe(value)}")
            out[key] = value
    return out


def resolve(model: Any, names: Any, *,
            require_all: bool) -> tuple[list[Binding], list[str], dict[str, str]]:
    """``(bindings, unmapped, overrides)``: one binding per parameter mapped to a TF name;
    ``unmapped`` lists the parameters mapped to ``None`` and, when ``require_all`` is False,
    those the map does not name (with ``require_all`` such a parameter is a ``ValueError``);
    ``overrides`` the TF names given for optimizer state."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"Expected `model` to be a torch.nn.Module, got {describe(model)}")
    if not isinstance(names, Mapping):
        raise TypeError(f"Expected `names` to be a dict from parameter name to TF variable "
                        f"name, got {describe(names)}")
    params = dict(model.named_parameters())
    overrides = _overrides(names, params)
    names = {k: v for k, v in names.items() if k not in overrides}
    unknown = sorted(str(k) for k in names if k not in params)
    if unknown:
        raise ValueError(f"Expected the keys of `names` to be parameter names of the model, "
                         f"got {unknown[:5]} (the model has {sorted(params)[:8]}"
                         f"{'...' if len(params) > 8 else ''})")
    missing = [k for k in params if k not in names]
    if missing and require_all:
        raise ValueError(f"Expected `names` to map every parameter of the model (to None to "
                         f"leave one out), it misses {missing[:8]}"
                         f"{f' and {len(missing) - 8} more' if len(missing) > 8 else ''}")
    bindings, unmapped = [], list(missing)
    for key, value in names.items():
        entry = _entry(key, value)
        if entry is None:
            unmapped.append(key)
        else:
            bindings.append(Binding(key, params[key], *entry))
    _check_parts(bindings)
    return bindings, unmapped, overrides
