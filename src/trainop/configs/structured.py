"""YAML and JSON recipe text read as bounded data.

YAML is composed with PyYAML's safe loader into its node graph first; the graph's size with
every alias expanded (``*a`` counts the whole of ``&a`` each time) and its nesting are checked
against ``MAX_WEIGHT``/``MAX_DEPTH`` before any Python value is built, so an alias bomb is
refused without being expanded, in the value or in a message. Python tags (``!!python/...``)
are not known to the safe loader. JSON is read by ``json``; its nesting is checked too. An
integer's bits are checked against ``MAX_INT_BITS`` from its digits, before it is converted.
Every problem is a ``RecipeError`` with the file, the line where known and the reason.
"""

from __future__ import annotations

import json
import math
from typing import Any

from trainop.configs.bounds import (
    MAX_DEPTH,
    BoundExceeded,
    KeyGuard,
    Meter,
    check_int_bits,
    check_weight,
)
from trainop.configs.errors import RecipeError

__all__ = ["load_json", "load_yaml"]


def load_yaml(text: str, filename: str) -> Any:
    """The value of one YAML document (``safe_load`` semantics), bounded."""
    try:
        import yaml
    except ImportError:  # pragma: no cover - PyYAML is a dependency
        raise RecipeError(filename, None, "PyYAML is needed to read YAML recipes "
                                          "(pip install pyyaml)") from None
    loader = None
    try:
        loader = yaml.SafeLoader(text)  # the reader checks the characters here
        node = loader.get_single_node()
        if node is None:
            return None
        _node_weight(node, {}, 0)
        _check_keys(loader, node)
        return Meter().check(loader.construct_document(node), "the YAML document")
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        reason = " ".join(p for p in (exc.context, exc.problem) if p)
        raise RecipeError(filename, None if mark is None else mark.line + 1,
                          f"invalid YAML: {reason}") from None
    except yaml.YAMLError as exc:  # the reader's: a character YAML does not allow
        raise RecipeError(filename, None, f"invalid YAML: {str(exc).splitlines()[0]}") from None
    except BoundExceeded as exc:
        raise RecipeError(filename, None, exc.reason) from None
    except RecursionError:
        raise RecipeError(filename, None, f"the YAML document nests deeper than {MAX_DEPTH} "
                                          f"levels (MAX_DEPTH)") from None
    finally:
        if loader is not None:
            loader.dispose()


def _node_weight(node: Any, seen: dict[int, int], level: int) -> int:
    """The size of a YAML node with its aliases expanded (memoized per node, so a bomb costs
    its number of distinct nodes to measure)."""
    key = id(node)
    if key in seen:
        return seen[key]
    if level > MAX_DEPTH:
        raise BoundExceeded(f"the YAML document nests deeper than {MAX_DEPTH} levels "
                            f"(MAX_DEPTH; an alias may refer to itself)")
    value = node.value
    if isinstance(value, str):
        weight = 1 + len(value)
        if node.tag == "tag:yaml.org,2002:int":
            check_int_bits(_yaml_int_bits(value))  # before int() (base 60 is quadratic)
    else:
        weight = 1
        for item in value:
            parts = item if isinstance(item, tuple) else (item,)
            for part in parts:
                weight += _node_weight(part, seen, level + 1)
            if weight > 1 << 62:
                break
    if weight > 1 and not isinstance(value, str):
        check_weight(weight, "the YAML document (aliases expanded)")
    seen[key] = weight
    return weight


def _check_keys(loader: Any, root: Any) -> None:
    """Every mapping's scalar keys, as Python values, through a ``KeyGuard`` (40,000 integer
    keys with one hash would make building the dict quadratic); each node visited once."""
    import yaml

    seen, stack = set(), [root]
    while stack:
        node = stack.pop()
        if id(node) in seen or isinstance(node, yaml.ScalarNode):
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            loader.flatten_mapping(node)  # ``<<: [*a, *b]`` merges: their keys count here too
            guard = KeyGuard()
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode):
                    guard.add(loader.construct_object(key))
                stack.extend((key, value))
        else:
            stack.extend(node.value)


def _yaml_int_bits(text: str) -> int:
    """At most the bits of the YAML integer ``text``: its significant digits (binary, octal,
    decimal, hex, base-60 ``1:30``) but one, each worth a bit or more."""
    digits = text.lstrip("+-").replace("_", "")
    if digits[:2].lower() in ("0b", "0o", "0x"):
        digits = digits[2:]
    return len(digits.lstrip("0")) - 1


def load_json(text: str, filename: str) -> Any:
    """The value of a JSON document, bounded."""
    try:
        return Meter().check(json.loads(text, parse_int=_json_int), "the JSON document")
    except json.JSONDecodeError as exc:
        raise RecipeError(filename, exc.lineno, f"invalid JSON at column {exc.colno}: "
                                                f"{exc.msg}") from None
    except BoundExceeded as exc:
        raise RecipeError(filename, None, exc.reason) from None
    except RecursionError:
        raise RecipeError(filename, None, f"the JSON document nests deeper than {MAX_DEPTH} "
                                          f"levels (MAX_DEPTH)") from None


def _json_int(digits: str) -> int:
    """A JSON integer, its bits checked before it is converted (``d`` decimal digits are at
    least ``floor((d - 1) * log2(10)) + 1`` bits)."""
    check_int_bits(math.floor((len(digits.lstrip("-")) - 1) * math.log2(10)) + 1)
    return int(digits)
