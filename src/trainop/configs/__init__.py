"""Config files as data: Python configs (RETURNN, OpenSeq2Seq) parsed and never executed, trainop's
YAML/JSON loaded with safe loaders, every value bounded (``bounds``), every problem with a file
one ``RecipeError``, and strict key checking with the closest valid name.

This package imports nothing from the training step or the interfaces: both use it.
"""

from trainop.configs.errors import RecipeError
from trainop.configs.files import load_config
from trainop.configs.pyconfig import PyConfig, Symbol, Unresolved, evaluate_python_config
from trainop.configs.returnn_lookups import Text
from trainop.configs.schema import check_keys, closest, closest_names

__all__ = ["PyConfig", "RecipeError", "Symbol", "Text", "Unresolved", "check_keys", "closest",
           "closest_names", "evaluate_python_config", "load_config"]
