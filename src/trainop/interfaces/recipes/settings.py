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
import contextlib
import os
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from trainop.configs.returnn_lookups import Text

if TYPE_CHECKING:
    from trainop.interfaces.recipes.recipe import Recipe

__all__ = ["FLAGS", "add_set_argument", "load_with_settings", "parse_settings"]


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


#: RETURNN config names that ``trainop train`` takes from its own flags: a ``--set`` of one
#: that changes no training option says which flag to use.
FLAGS = {"num_epochs": "the run length from --steps (micro-steps) and --steps-per-epoch",
         "random_seed": "the seed from --seed", "model": "the output folder from --out"}


def load_with_settings(path: str | os.PathLike, settings: dict[str, Text]) -> Recipe:
    """``load_recipe(path)`` with ``settings`` applied and checked as the file's own values
    would be; ``recipe.settings`` says, one line per setting, where each took effect.

    A RETURNN Python config gets ``NAME`` as its command line's ``++NAME VALUE``
    (``config_values``) and a dotted ``NAME.KEY`` as an override of that training option;
    an OpenSeq2Seq config gets both as ``base_params`` keys (its ``run.py --NAME=VALUE``); a
    YAML/JSON recipe as overrides. A setting that changes no training option is a
    ``ValueError`` saying why: the flag trainop takes it from, or a name the file does not
    know (the closest named), or one it uses only for what trainop does not train."""
    from trainop.interfaces.recipes.load import load_recipe

    names = {k: v for k, v in settings.items() if "." not in k}
    dotted = {k: v for k, v in settings.items() if "." in k}
    structured = os.path.splitext(os.fspath(path))[1].lower() in (".yaml", ".yml", ".json")
    with _quiet():  # the command prints recipe.notes as its own lines
        if structured:
            recipe = load_recipe(path, overrides=settings)
        else:
            recipe = load_recipe(path, config_values=names or None, overrides=dotted)
    if recipe.format != "returnn" or structured or not names:
        recipe.settings = [f"--set {k}={v}: {k} = {_shown(recipe, k)}" for k, v in
                           settings.items()]
        return recipe
    recipe.settings = [f"--set {k}={v}: {k} = {_shown(recipe, k)}" for k, v in dotted.items()]
    recipe.settings[:0] = _effects(path, recipe, names, dotted)
    return recipe


@contextlib.contextmanager
def _quiet():
    """Loading's RecipeWarning/LegacyFlagWarning dropped: the command prints the notes."""
    from trainop.training.returnn.unknown_options import LegacyFlagWarning, RecipeWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecipeWarning)
        warnings.simplefilter("ignore", LegacyFlagWarning)
        yield


def _shown(recipe: Recipe, dotted: str) -> str:
    """The option's value after loading (``repr``, short)."""
    head, _, sub = dotted.partition(".")
    value = recipe.options.get(head)
    if sub and isinstance(value, dict):
        value = value.get(sub)
    text = getattr(value, "__name__", None) or repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _effects(path, recipe: Recipe, names: dict[str, Text], dotted: dict[str, Text]) -> list[str]:
    """Where each RETURNN ``--set NAME`` took effect: the training options that differ from a
    load without it; ``ValueError`` for one that changes none (see ``load_with_settings``)."""
    from trainop.interfaces.recipes.load import load_recipe

    keys = set(recipe.training_keys())
    lines = []
    for name, value in names.items():
        others = {k: v for k, v in names.items() if k != name}
        try:
            with _quiet():
                without = load_recipe(path, config_values=others or None, overrides=dotted)
        except (ValueError, TypeError):  # the file needs it (a pending option it supplies)
            lines.append(f"--set {name}={value}: supplies what the file needs")
            continue
        changed = [k for k in sorted(keys) if not _same(recipe.options.get(k, _NONE),
                                                        without.options.get(k, _NONE))]
        if name in keys:
            lines.append(f"--set {name}={value}: the training option {name} = "
                         f"{_shown(recipe, name)}")
        elif changed:
            lines.append(f"--set {name}={value}: changes " + ", ".join(
                f"{k} = {_shown(recipe, k)}" for k in changed))
        else:
            raise ValueError(_why_not(path, name, value, keys))
    return lines


_NONE = object()


def _same(a: Any, b: Any) -> bool:
    try:
        if a is b or a == b:
            return True
    except Exception:  # noqa: BLE001 - a value whose == raises (an array) is compared by repr
        pass
    return repr(a) == repr(b)


def _why_not(path, name: str, value: str, keys: set[str]) -> str:
    """The one-line reason a ``--set NAME`` changes no training option."""
    from trainop.configs import closest_names, evaluate_python_config
    from trainop.configs.reading import read_text

    if name in FLAGS:
        return (f"--set {name}={value} changes no training option: trainop train takes "
                f"{FLAGS[name]}")
    parsed = evaluate_python_config(read_text(os.fspath(path)), os.fspath(path), partial=True)
    known = set(parsed.values) | set(parsed.unresolved) | parsed.looked_up
    if name in known:
        how = "reads" if name in parsed.looked_up else "sets"
        return (f"--set {name}={value} changes no training option: the file {how} {name!r} "
                f"only for what trainop does not train (the network, the data)")
    hints = closest_names(name, [k for k in known | keys if not k.startswith("<")])
    return (f"--set {name}={value}: the config neither sets nor reads {name!r}, and it is no "
            f"training option" + (f"; did you mean {', '.join(map(repr, hints))}?"
                                  if hints else ""))
