"""Overrides of a recipe's options before they are checked: ``"key"`` or ``"key.sub"`` ->
value (``trainop train --set``, ``load_recipe(overrides=...)``), so that an override is
validated exactly as the file's own value would be."""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping
from typing import Any

from trainop.configs import Text, check_keys
from trainop.configs.pyconfig import final_value
from trainop.contract.validation import describe

__all__ = ["apply_overrides"]


def apply_overrides(values: Mapping[str, Any], overrides: Mapping[str, Any],
                    keys: Iterable[str], where: str, mappings: Container[str] = ()
                    ) -> dict[str, Any]:
    """``values`` (a new dict) with each override set: its head must be one of ``keys`` (else
    a ``ValueError`` naming the closest); a ``Text`` value is read as ``--set`` text
    (``final_value``: data within the evaluator's bounds, else the text); a dotted key sets
    one entry of the head's dict (``TypeError`` where the head's value is not a dict, or is
    unset and the head is not one of ``mappings``, the options whose value is a dict)."""
    out = dict(values)
    keys = list(keys)
    for dotted, value in overrides.items():
        head, _, sub = str(dotted).partition(".")
        check_keys({head: None}, keys, where)
        value = final_value(value) if isinstance(value, Text) else value
        if sub:
            nested = out.get(head)
            if not isinstance(nested, Mapping | None):
                raise TypeError(f"Expected `{head}` to be a dict to override {dotted!r}, got "
                                f"{describe(nested)}")
            if nested is None and head not in mappings:
                raise TypeError(f"Expected `{head}` to be a dict to override {dotted!r}, got "
                                f"an option that is not a dict (unset here); set it whole: "
                                f"{head}=VALUE")
            value = {**(nested or {}), sub: value}
        out[head] = value
    return out
