"""``--set NAME=VALUE`` of ``trainop train``/``check-config``: names a Python config sees, and
the training options the file computes with code.

Each ``NAME=VALUE`` is given to the config as RETURNN's command line gives ``++NAME VALUE``
(``load_recipe(config_values={NAME: Text(VALUE)})``: ``config.bool/int/...`` lookups see the
text, and the name's final value is the text read as a Python literal, never run as code).
A ``NAME`` that is still a pending training option after loading (``recipe.pending()``; a
dotted ``lr_policy_params.decay_steps`` included) is set in ``recipe.options`` to the value
read the same way: what ``recipe.build(overrides=...)`` takes.
"""

from __future__ import annotations

import argparse
import os
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from trainop.configs.returnn_lookups import Text, final_value

if TYPE_CHECKING:
    from trainop.interfaces.recipes.recipe import Recipe

__all__ = ["add_set_argument", "load_with_settings", "parse_settings"]


def add_set_argument(parser: argparse.ArgumentParser) -> None:
    """The repeatable ``--set NAME=VALUE`` option."""
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="set a name the config reads (RETURNN's ++NAME VALUE: "
                             "config.bool/int/float/value/list/has see it), or a training "
                             "option the file computes with code (lr_policy_params.decay_steps"
                             "=1000); VALUE is read as data, never run; repeatable")


def parse_settings(items: Sequence[str] | None) -> dict[str, Text]:
    """``{NAME: Text(VALUE)}`` of ``NAME=VALUE`` strings (the last of a repeated name wins);
    ``ValueError`` naming the item otherwise."""
    out: dict[str, Text] = {}
    for item in items or ():
        name, sep, value = item.partition("=")
        if not sep or not all(part.isidentifier() for part in name.split(".")):
            raise ValueError(f"Expected --set NAME=VALUE with NAME a name (or a dotted "
                             f"option such as lr_policy_params.decay_steps), got {item!r}")
        out[name] = Text(value)
    return out


def load_with_settings(path: str | os.PathLike, settings: dict[str, Text]) -> Recipe:
    """``load_recipe(path)`` with ``settings`` as the config's values, and the pending
    training options among them set in ``options``."""
    from trainop.interfaces.recipes.load import load_recipe
    from trainop.training.returnn.unknown_options import LegacyFlagWarning, RecipeWarning

    names = {k: v for k, v in settings.items() if "." not in k}
    with warnings.catch_warnings():  # the command prints recipe.notes as its own lines
        warnings.simplefilter("ignore", RecipeWarning)
        warnings.simplefilter("ignore", LegacyFlagWarning)
        recipe = load_recipe(path, config_values=names or None)
    pending = recipe.pending()
    overrides: dict[str, Any] = {k: final_value(v) for k, v in settings.items()
                                 if k in pending or "." in k}
    if overrides:
        recipe.options = recipe._with(overrides)
    return recipe
