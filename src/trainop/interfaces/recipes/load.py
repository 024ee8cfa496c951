"""``load_recipe``: read a recipe file (or dict) and detect its format; nothing is executed.

Detection:

- ``.yaml``/``.yml``/``.json`` (or a dict with ``"format": "trainop"``): trainop's own format,
  strict (``trainop_format``); a YAML/JSON file without ``format: trainop`` is an error.
- a file in one of RETURNN's non-Python formats (starting with ``{``: JSON; ``key value``
  lines: the old line format; ``trainop.configs.returnn_text``) is a RETURNN config;
- any other file is a Python config, parsed by ``trainop.configs`` (``ast``; never run):
  ``base_params`` defined, or an import from ``open_seq2seq``: OpenSeq2Seq
  (``base_params`` updated by ``train_params``); otherwise, when it sets a RETURNN training key
  (``optimizer``, ``learning_rate``, ``gradient_clip*``, a legacy flag such as ``adam``, ...)
  or starts with ``#!rnn.py``: RETURNN. Anything else is a ``ValueError``.
- a dict with ``base_params``: OpenSeq2Seq; another dict: RETURNN (as ``trainop.Updater``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from trainop.configs import Symbol, evaluate_python_config
from trainop.configs.files import read_structured
from trainop.configs.reading import read_text
from trainop.configs.returnn_text import parse_returnn_text, returnn_text_kind
from trainop.contract.validation import describe
from trainop.interfaces.recipes import openseq2seq, returnn, trainop_format
from trainop.interfaces.recipes.names import resolve_name
from trainop.interfaces.recipes.overrides import apply_overrides
from trainop.interfaces.recipes.recipe import Recipe, without_unresolved
from trainop.training.returnn.options import DEFAULTS, LR_CONTROL_KEYS, MAPPINGS
from trainop.training.returnn.resolve import check_classes

__all__ = ["load_recipe"]

_YAML_JSON = (".yaml", ".yml", ".json")


def load_recipe(source: str | os.PathLike | Mapping[str, Any], *,
                classes: Mapping[str, type] | None = None,
                config_values: Mapping[str, Any] | None = None,
                overrides: Mapping[str, Any] | None = None) -> Recipe:
    """Load a training recipe: an OpenSeq2Seq Python config, a RETURNN config, or trainop's
    YAML/JSON format (see the module doc and ``docs/recipes.md``).

    Args:
        source: a path, or a dict (an OpenSeq2Seq ``{"base_params": {...}}``, a RETURNN config
            dict, or a trainop recipe ``{"format": "trainop", ...}``).
        classes: keyword-only; name -> class for optimizer classes of your own. A name in
            the recipe (an OpenSeq2Seq ``optimizer`` name or import, a RETURNN ``{"class":
            "mypkg.Lion"}``) is looked up here first, then among trainop's and
            ``torch.optim``'s classes; no module a recipe names is ever imported.
        config_values: keyword-only; name -> value set on a Python config as RETURNN's
            command line and ``Config.update`` set them: ``config.bool/int/float/value/
            typed_value/list/has(name, default)`` in the file see them (unset names give the
            default) and they replace the file's own value of the name. A
            ``trainop.configs.Text`` value is command-line text (``trainop train --set``);
            any other value is typed. ``__file__`` is always the config's path. On an
            OpenSeq2Seq config they set ``base_params``' keys instead (``overrides``), as
            its ``run.py --key=value`` does.
        overrides: keyword-only; option name (``"learning_rate"``, ``"optimizer.epsilon"``,
            ``"lr_policy_params.decay_steps"``) -> value (a ``Text``: command-line text),
            set over the file's own options *before* they are checked, so an override is
            refused exactly as the same value in the file would be. A name that is no
            training option of the recipe's format is an error naming the closest.

    Returns:
        a ``Recipe``: ``format``, ``options``, ``optimizer_class``, ``unresolved``,
        ``build(model, loss=None, *, num_steps=None, steps_per_epoch=None)``.

    Raises:
        RecipeError: (a ``ValueError``) the file cannot be read as data: not a regular file,
            too large, not UTF-8, not valid Python/YAML/JSON, a value beyond the evaluator's
            bounds (``trainop.configs.bounds``); file, line and reason named.
        ValueError: the format cannot be told, a key or a class name is unknown (the closest
            valid names are named), or an option's value is invalid.
        TypeError: ``source`` is neither a path nor a dict, or an option has the wrong type.

    Example:
        >>> import trainop
        >>> recipe = trainop.load_recipe({"base_params": {
        ...     "optimizer": "Momentum", "optimizer_params": {"momentum": 0.9},
        ...     "lr_policy": "poly_decay", "lr_policy_params": {"learning_rate": 0.1},
        ...     "max_steps": 100}})
        >>> recipe.format, recipe.optimizer_class.__name__, recipe.options["loss_scaling"]
        ('openseq2seq', 'MomentumOptimizer', 1.0)
    """
    classes = check_classes(classes)
    if config_values is not None and not (isinstance(config_values, Mapping) and all(
            isinstance(k, str) and k.isidentifier() for k in config_values)):
        raise TypeError(f"Expected `config_values` to be a dict of name -> value with "
                        f"identifier names, got {describe(config_values)}")
    overrides = dict(overrides or {})
    if isinstance(source, Mapping):
        _no_values(config_values, "a dict recipe")
        return _from_dict(dict(source), "<dict>", classes, overrides)
    if not isinstance(source, str | os.PathLike):
        raise TypeError(f"Expected `source` to be a path or a dict, got {describe(source)}")
    path = os.fspath(source)
    if os.path.splitext(path)[1].lower() in _YAML_JSON:
        _no_values(config_values, f"the YAML/JSON recipe {path}")
        _, data = read_structured(path)
        if data.get("format") != "trainop":
            raise ValueError(f"Expected `format: trainop` at the top of {path} (trainop's "
                             f"recipe format; see docs/recipes.md), got format="
                             f"{describe(data.get('format'))}")
        return _from_dict(data, path, classes, overrides)
    text = read_text(path)
    if returnn_text_kind(text, path) != "python":
        _no_values(config_values, f"the RETURNN JSON/line-format config {path}")
        values = parse_returnn_text(text, path)
        if not _RETURNN_KEYS & set(values):
            raise ValueError(f"Expected the RETURNN config {path} to set training keys "
                             f"(optimizer, learning_rate, gradient_clip*, ...), got keys "
                             f"{sorted(values)[:20]}")
        return _returnn_recipe(values, path, classes=classes, overrides=overrides)

    def names(dotted: str) -> Any:
        return classes[dotted] if dotted in classes else resolve_name(dotted)

    parsed = evaluate_python_config(text, filename=path, names=names, partial=True,
                                    file=path, config_values=config_values)
    values = parsed.values
    if "base_params" in values or _imports_openseq2seq(values):
        if config_values:  # run.py --key=value sets base_params' keys, not the file's names
            parsed = evaluate_python_config(text, filename=path, names=names, partial=True,
                                            file=path)
            values = parsed.values
            overrides = {**config_values, **overrides}
        if "base_params" not in values:
            raise ValueError(f"Expected `base_params` in the OpenSeq2Seq config {path}, got "
                             f"none")
        unresolved = {k: v for k, v in parsed.unresolved.items()
                      if k in ("base_params", "train_params")}
        if unresolved:
            where = "; ".join(str(v) for v in unresolved.values())
            raise ValueError(f"Expected `base_params`/`train_params` in {path} to be dict "
                             f"literals, got code: {where}")
        train = values.get("train_params")
        others = {k: v for k, v in parsed.unresolved.items()
                  if k not in ("base_params", "train_params")}
        return _openseq2seq_recipe(values["base_params"],
                                   train if isinstance(train, Mapping) else None, path, classes,
                                   others, overrides)
    if not (_RETURNN_KEYS & set(values) or text.startswith("#!rnn.py")
            or _RETURNN_KEYS & set(parsed.unresolved)):
        raise ValueError(f"Expected {path} to be an OpenSeq2Seq config (with base_params), a "
                         f"RETURNN config (optimizer, learning_rate, gradient_clip*, ...) or a "
                         f"trainop .yaml/.json recipe, got none of their keys")
    return _returnn_recipe(values, path, parsed.unresolved, classes, overrides)


def _no_values(config_values: Mapping[str, Any] | None, what: str) -> None:
    if config_values:
        raise ValueError(f"Expected `config_values` only with a Python config (they set names "
                         f"its code reads), got {sorted(config_values)} for {what}; edit "
                         f"recipe.options or pass build(overrides=...) instead")


_RETURNN_KEYS = {*DEFAULTS, *LR_CONTROL_KEYS} - {"backend", "behavior_version"}


def _imports_openseq2seq(values: Mapping[str, Any]) -> bool:
    return any(isinstance(v, Symbol) and v.name.startswith("open_seq2seq")
               for v in values.values())


def _named(params: Mapping[str, Any], classes: Mapping[str, type]) -> dict[str, Any]:
    """OpenSeq2Seq params with an ``optimizer`` name found in ``classes`` replaced by that
    class."""
    params = dict(params)
    name = params.get("optimizer")
    if isinstance(name, Symbol):
        name = name.name
    if isinstance(name, str) and name in classes:
        params["optimizer"] = classes[name]
    return params


def _openseq2seq_recipe(base: Any, train: Any, source: str, classes: Mapping[str, type],
                        others: Mapping[str, Any],
                        overrides: Mapping[str, Any] | None = None) -> Recipe:
    """The OpenSeq2Seq recipe of ``base_params``/``train_params``; ``others``: what else in
    the file needed code."""
    if not isinstance(base, Mapping):
        raise TypeError(f"Expected `base_params` to be a dict, got {describe(base)}")
    train = _named(train, classes) if isinstance(train, Mapping) else train
    options, unresolved = openseq2seq.options_from(_named(base, classes), train,
                                                   overrides=_named(overrides or {}, classes))
    unresolved.update(others)
    cls = None if "optimizer" in unresolved else openseq2seq.optimizer_class(options["optimizer"])
    return Recipe("openseq2seq", without_unresolved(options), cls, unresolved, "TrainOp", source,
                  ignored=openseq2seq.ignored_keys(base, train if isinstance(train, Mapping)
                                                   else None))


def _from_dict(data: dict[str, Any], source: str, classes: Mapping[str, type],
               overrides: Mapping[str, Any] | None = None) -> Recipe:
    if "format" in data:
        kind, options, cls = trainop_format.options_from(data, classes, overrides)
        builds = "TrainOp" if kind == "openseq2seq" else "Updater"
        return Recipe("trainop", options, cls, {}, builds, source)
    if "base_params" in data:
        return _openseq2seq_recipe(data["base_params"], data.get("train_params"), source,
                                   classes, {}, overrides)
    if not _RETURNN_KEYS & set(data):
        raise ValueError(f"Expected a recipe dict with `base_params` (OpenSeq2Seq), "
                         f"`format: trainop`, or RETURNN training keys (optimizer, "
                         f"learning_rate, gradient_clip*, ...), got keys {sorted(data)[:20]}")
    return _returnn_recipe(data, source, classes=classes, overrides=overrides)


def _returnn_recipe(config: Mapping[str, Any], source: str,
                    unresolved: Mapping[str, Any] | None = None,
                    classes: Mapping[str, type] | None = None,
                    overrides: Mapping[str, Any] | None = None) -> Recipe:
    """The RETURNN recipe of ``config`` (a dict, or a file's evaluated values; ``unresolved``:
    everything in the file that needed code)."""
    unresolved = dict(unresolved or {})
    if overrides:
        config = apply_overrides(config, overrides, _RETURNN_KEYS | {"backend"},
                                 "the overrides (RETURNN's training options)", MAPPINGS)
        for key in overrides:  # an override supplies what the file computed with code
            unresolved.pop(key, None)
            unresolved.pop(key.partition(".")[0], None)
    options, needing, cls = returnn.options_from(config, classes or {})
    listed = {**unresolved, **needing}
    return Recipe("returnn", without_unresolved(options), None if cls is type(None) else cls,
                  listed, "Updater", source, returnn.notes_for(config))
