"""Config files as data: Python configs (RETURNN, OpenSeq2Seq) parsed and never executed, trainop's
YAML/JSON loaded with safe loaders, and strict key checking with the closest valid name.

This package imports nothing from the training step or the interfaces: both use it.
"""

from trainop.configs.files import load_config
from trainop.configs.pyconfig import PyConfig, Symbol, Unresolved, evaluate_python_config
from trainop.configs.schema import check_keys, closest

__all__ = ["PyConfig", "Symbol", "Unresolved", "check_keys", "closest", "evaluate_python_config",
           "load_config"]
