"""Recipes: OpenSeq2Seq configs, RETURNN configs and trainop's YAML/JSON format, read as data
(never executed) and built into a ``TrainOp`` or an ``Updater`` (``docs/recipes.md``).

- ``load_recipe(source)`` (``trainop.load_recipe``): a path or a dict -> ``Recipe``.
- ``Recipe``: ``format``, ``options``, ``optimizer_class``, ``unresolved``, ``build(model)``.
"""

from trainop.interfaces.recipes.load import load_recipe
from trainop.interfaces.recipes.recipe import Recipe

__all__ = ["Recipe", "load_recipe"]
