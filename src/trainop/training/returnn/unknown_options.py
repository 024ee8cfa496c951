"""RETURNN config keys that look like training options trainop does not implement, listed
instead of dropped.

A RETURNN config holds everything (network, data, task, ...), so an unknown key is normal.
Two kinds are flagged (``flag_keys``):

- an updater option of RETURNN's Theano backend (``THEANO_OPTIONS``: ``update_clip``,
  ``weight_clip``, ``adamax``, ...; RETURNN's ``returnn/theano/updater.py`` read them, its TF
  and PyTorch backends do not): trainop does not implement them; the recipe trains without
  them, as today's RETURNN would, and the key is listed;
- a key within a small edit distance of an option trainop reads (``gradient_clip_globl_norm``
  -> ``gradient_clip_global_norm``): a misspelling RETURNN would also ignore; listed with
  "did you mean".

``RecipeWarning`` (a ``UserWarning``) carries them from the API and ``LegacyFlagWarning``
(a ``FutureWarning``) the legacy flags: Python's default filters show both; ``trainop
check-config`` and ``trainop train`` print them.

Options today's RETURNN TF updater honours and trainop does not implement
(``UPSTREAM_ONLY``) are refused when set to a true value (``refuse_upstream_only``): training
without them would differ from RETURNN's run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["THEANO_OPTIONS", "UPSTREAM_ONLY", "LegacyFlagWarning", "RecipeWarning", "flag_keys",
           "refuse_upstream_only"]


class RecipeWarning(UserWarning):
    """A recipe option trainop lists rather than uses (a typo, an option it does not
    implement, a legacy flag); shown by default."""


class LegacyFlagWarning(FutureWarning):
    """A RETURNN legacy optimizer flag (``adam = True``, ...): RETURNN's "DEPRECATION
    WARNING", shown by default (a ``FutureWarning``, not the hidden ``DeprecationWarning``)."""


#: RETURNN Theano-backend updater options (``returnn/theano/updater.py``'s ``Updater``).
THEANO_OPTIONS: tuple[str, ...] = (
    "nesterov_momentum", "momentum2", "adadelta_decay", "adadelta_offset",
    "update_multiple_models_average_step", "update_multiple_models_averaging",
    "update_clip", "weight_clip", "max_norm", "adasecant", "adamdelta",
    "adam_fit_learning_rate", "adamax", "ena", "nadam_decay", "eve", "gradient_l2_norm",
    "mean_normalized_sgd", "mean_normalized_sgd_average_interpolation", "smorms3",
    "update_multiple_models", "update_multiple_models_average_step_i",
    "update_multiple_models_param_is_cur_model", "multi_batch_update", "variance_reduction",
    "enforce_triangular_matrix_zero", "gradient_noise_decay", "grad_noise_rel_grad_norm",
    "reset_update_params")

#: options RETURNN's TF updater (``returnn/tf/updater.py``) reads that trainop does not
#: implement -> what they do there.
UPSTREAM_ONLY: dict[str, str] = {
    "deterministic_train": "TF's deterministic gradient aggregation (ADD_N)",
    "debug_save_updater_vars": "saving the optimizer's slot variables for debugging",
}


def refuse_upstream_only(values: Mapping[str, Any]) -> None:
    """``ValueError`` in one line for an ``UPSTREAM_ONLY`` option set to a true value."""
    for key, what in UPSTREAM_ONLY.items():
        value = values.get(key)
        if isinstance(value, bool | int | float | str) and value:
            raise ValueError(f"Expected {key} to be unset or false (RETURNN's TF updater "
                             f"honours it: {what}; trainop does not implement it), got "
                             f"{value!r}")


#: the largest edit distance (relative to the key's length) taken for a misspelling.
MAX_EDITS = 2


def _distance(a: str, b: str, limit: int) -> int:
    """Levenshtein distance of ``a`` and ``b`` (transpositions count 2), ``limit + 1`` once
    it exceeds ``limit``."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        best = row[0]
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
            best = min(best, row[j])
        if best > limit:
            return limit + 1
    return row[-1]


def _misspelling_of(key: str, known: Iterable[str]) -> str | None:
    """The known option ``key`` is a misspelling of: at most ``MAX_EDITS`` edits (1 for keys
    of up to 8 characters), and not a different word that only shares a stem
    (``learning_rates`` vs ``learning_rate``: a plural ``s`` is a different key)."""
    limit = 1 if len(key) <= 8 else MAX_EDITS
    best, distance = None, limit + 1
    for name in known:
        if name.rstrip("s") == key.rstrip("s"):
            continue
        d = _distance(key, name, limit)
        if d < distance:
            best, distance = name, d
    return best if distance <= limit else None


def flag_keys(values: Mapping[str, Any], known: Iterable[str]) -> dict[str, str]:
    """key -> one line for every key of a RETURNN config's ``values`` that is a Theano-era
    updater option or a misspelling of one of the ``known`` options (or of a Theano one)."""
    known = [k for k in known if k not in THEANO_OPTIONS] + list(UPSTREAM_ONLY)
    out: dict[str, str] = {}
    for key in values:
        if not isinstance(key, str) or key in known or key.startswith("_"):
            continue
        if key in THEANO_OPTIONS:
            out[key] = (f"{key!r} is a training option of RETURNN's Theano backend that "
                        f"trainop does not implement (RETURNN's TF and PyTorch backends "
                        f"ignore it too): training runs without it")
            continue
        hint = _misspelling_of(key, [*known, *THEANO_OPTIONS])
        if hint is not None:
            out[key] = (f"unknown key {key!r} is ignored; did you mean {hint!r}? (RETURNN "
                        f"ignores it too: training runs without it)")
    return out
