"""``--set NAME=VALUE`` of ``trainop train``/``check-config``: names a Python config sees, and
the training options the file computes with code.

Each ``NAME=VALUE`` is given to the config as RETURNN's command line gives ``++NAME VALUE``
(``load_recipe(config_values={NAME: Text(VALUE)})``: ``config.bool/int/...`` lookups see the
text, and the name's final value is the text read as a Python literal, never run as code).
A ``NAME`` that is still a pending training option after loading (``recipe.pending()``; a
dotted ``lr_policy_params.decay_steps`` included) is set in ``recipe.options`` to the value
read the same way: what ``recipe.build(overrides=...)`` takes.

Where each RETURNN ``--set NAME`` took effect is found from two evaluations of the file,
whatever the number of settings: the load with them all, and one without any (the check).
Each evaluation records which names every value read (``trainop.configs.reads``: a
``config.<lookup>`` of the name, a value computed from one that did, an ``if`` whose test did).
A ``NAME`` changes the training options that read it, in either evaluation, and whose values
the two loads give differently; if the file cannot load without the settings, the names that
reach a training option supply what it needs. With one ``NAME`` this is exactly the load
without it. With several, it is the load without each of them as long as no training option
reads more than one of them; an option that reads several is credited to each of them when it
differs from the check (the load without each, one evaluation per name, took over 900 s for
3,000 names on a file reading 10,000).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from trainop.configs.reads import tracking
from trainop.configs.returnn_lookups import Text
from trainop.training.returnn.options import DEFAULTS as RETURNN_DEFAULTS
from trainop.training.returnn.options import LR_CONTROL_KEYS
from trainop.training.returnn.resolve import LEGACY_FLAGS
from trainop.training.returnn.torch_classes import GROUP_KEYS

if TYPE_CHECKING:
    from trainop.interfaces.recipes.recipe import Recipe

__all__ = ["FLAGS", "add_set_argument", "load_with_settings", "parse_settings"]


def add_set_argument(parser: argparse.ArgumentParser) -> None:
    """The repeatable ``--set NAME=VALUE`` option."""
    parser.add_argument("--set", action="append", metavar="NAME=VALUE",
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
    with _quiet(), tracking(names) as seen:  # the command prints recipe.notes itself
        if structured:
            recipe = load_recipe(path, overrides=settings)
        else:
            recipe = load_recipe(path, config_values=names or None, overrides=dotted)
    if recipe.format != "returnn" or structured or not names:
        recipe.settings = [f"--set {k}={v}: {k} = {_shown(recipe, k)}" for k, v in
                           settings.items()]
        return recipe
    recipe.settings = [f"--set {k}={v}: {k} = {_shown(recipe, k)}" for k, v in dotted.items()]
    recipe.settings[:0] = _effects(path, recipe, seen[-1], names, dotted)
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
    """The option's value after loading (``repr``, short); ``(unset: its default)`` where the
    recipe does not set it (RETURNN reads an unset key as its default, a None as None)."""
    head, _, sub = dotted.partition(".")
    value = recipe.options.get(head, _NONE)
    if sub and isinstance(value, dict):  # a dotted setting: the key is there
        value = value.get(sub)
    if value is _NONE:
        return "(unset: its default)"
    text = getattr(value, "__name__", None) or repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _effects(path, recipe: Recipe, parsed: Any, names: dict[str, Text],
             dotted: dict[str, Text]) -> list[str]:
    """Where each RETURNN ``--set NAME`` took effect: the training options that read it and
    differ from the load without the settings (``parsed``: the evaluation with them);
    ``ValueError`` for one that changes none (see the module doc)."""
    from trainop.interfaces.recipes.load import load_recipe

    keys = set(recipe.training_keys())
    with _quiet(), tracking(names) as seen:
        try:
            without = load_recipe(path, overrides=dotted)
        except (ValueError, TypeError):  # the file needs some of them
            without = None
    checked = seen[-1] if seen else None  # None: the file is beyond a bound without them

    readers: dict[str, frozenset[str]] = {}  # source -> the names it read, either load

    def read(name: str, sources: Sequence[str]) -> bool:
        for source in sources:
            if source not in readers:
                readers[source] = frozenset().union(*(
                    config.reads.of(source) for config in (parsed, checked) if config))
            if name in readers[source]:
                return True
        return False

    shown: dict[str, str] = {}  # an option's value shown once, however many names changed it

    def show(key: str) -> str:
        if key not in shown:
            shown[key] = _shown(recipe, key)
        return shown[key]

    lines = []
    for name, value in names.items():
        if without is None and read(name, _TRAINING_SOURCES):
            lines.append(f"--set {name}={value}: supplies what the file needs")
            continue
        # (without None: no option reads the name, every source being a training source)
        changed = [k for k in sorted(keys) if read(name, _SOURCES.get(k, (k,))) and (
            without is None or not _same(recipe.options.get(k, _NONE),
                                         without.options.get(k, _NONE)))]
        if name in keys:
            lines.append(f"--set {name}={value}: the training option {name} = "
                         f"{_shown(recipe, name)}")
        elif changed:
            lines.append(f"--set {name}={value}: changes " + ", ".join(
                f"{k} = {show(k)}" for k in changed))
        else:
            raise ValueError(_why_not(path, name, value, keys, checked))
    return lines


#: the names of a RETURNN config each training option is read from: itself, but the optimizer,
#: resolved from these (``training.returnn.resolve.optimizer_spec`` and ``torch_kwargs``)
_SOURCES = {"optimizer": ("optimizer", "optimizer_epsilon", "momentum", "optimizer_use_locking",
                          "backend", "behavior_version", *LEGACY_FLAGS, *GROUP_KEYS)}
_TRAINING_SOURCES = (*RETURNN_DEFAULTS, *LR_CONTROL_KEYS, *LEGACY_FLAGS)


_NONE = object()


def _same(a: Any, b: Any) -> bool:
    try:
        if a == b:
            return True
    except Exception:  # noqa: BLE001 - a value whose == raises (an array) is compared by repr
        pass
    return repr(a) == repr(b)


def _why_not(path, name: str, value: str, keys: set[str], parsed: Any = None) -> str:
    """The one-line reason a ``--set NAME`` changes no training option (``parsed``: the file
    as evaluated without the settings; None where it is beyond a bound without them)."""
    if name in FLAGS:
        return (f"--set {name}={value} changes no training option: trainop train takes "
                f"{FLAGS[name]}")
    if parsed is None:  # the file without the settings is beyond a bound of the evaluator
        return (f"--set {name}={value} changes no training option (without the settings "
                f"{os.fspath(path)} is beyond the evaluator's bounds, so what it reads is not "
                f"known)"
                + _did_you_mean(name, keys))
    known = set(parsed.values) | set(parsed.unresolved) | parsed.looked_up
    if name in known:
        how = "reads" if name in parsed.looked_up else "sets"
        return (f"--set {name}={value} changes no training option: the file {how} {name!r} "
                f"only for what trainop does not train (the network, the data)")
    return (f"--set {name}={value}: the config neither sets nor reads {name!r}, and it is no "
            f"training option" + _did_you_mean(name, known | keys))


def _did_you_mean(name: str, known: set[str]) -> str:
    """``"; did you mean 'a', 'b'?"`` of the closest names (no ``<line N>`` statement), or ""."""
    from trainop.configs import closest_names

    hints = closest_names(name, [k for k in known if not k.startswith("<")])
    return f"; did you mean {', '.join(map(repr, hints))}?" if hints else ""
