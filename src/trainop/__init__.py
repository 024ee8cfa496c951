"""trainop: TensorFlow 1's optimizer system on PyTorch, with TensorFlow's exact numerics.

The ``tf.train.Optimizer`` contract (``compute_gradients``, ``apply_gradients``, ``minimize``,
slots, gating constants, ``global_step``) on real ``torch.optim.Optimizer`` subclasses, and
every TF1 optimizer, the ``tf.contrib.opt`` ones and OpenSeq2Seq's NovoGrad.
"""

from trainop import schedules
from trainop.configs.errors import RecipeError
from trainop.contract.flat import FlatLayout, flatten
from trainop.contract.optimizer import AggregationMethod, Gate, Optimizer, SlotSpec
from trainop.interfaces.recipes import Recipe, load_recipe
from trainop.interfaces.tensorflow_import import load_triton_before_tensorflow
from trainop.kernels import torch_version as _torch_version
from trainop.optimizers.adadelta import AdadeltaOptimizer
from trainop.optimizers.adagrad import AdagradOptimizer
from trainop.optimizers.adagrad_da import AdagradDAOptimizer
from trainop.optimizers.adam import AdamOptimizer, LazyAdamOptimizer, NadamOptimizer
from trainop.optimizers.ftrl import FtrlOptimizer
from trainop.optimizers.gradient_descent import GradientDescentOptimizer
from trainop.optimizers.momentum import MomentumOptimizer
from trainop.optimizers.novograd import NovoGrad
from trainop.optimizers.proximal import ProximalAdagradOptimizer, ProximalGradientDescentOptimizer
from trainop.optimizers.rmsprop import RMSPropOptimizer
from trainop.optimizers.weight_decay import (
    AdamWOptimizer,
    DecoupledWeightDecayExtension,
    MomentumWOptimizer,
    extend_with_decoupled_weight_decay,
)
from trainop.processing import (
    AutomaticLossScaler,
    GradientPipeline,
    MixedPrecisionOptimizerWrapper,
    MultitaskOptimizerWrapper,
    StepResult,
    clip_by_global_norm,
    clip_gradients_by_global_norm,
    global_norm,
)
from trainop.registry import (
    OPTIMIZER_CLASSES,
    get_optimizer_class,
    optimizer_names,
    register_optimizer,
)
from trainop.training import (
    OPTIMIZER_SUMMARIES,
    LearningRateControl,
    NumericsChecker,
    NumericsError,
    TrainOp,
    Updater,
    add_check_numerics_ops,
    apply_regularization,
    check_numerics,
    get_regularization_loss,
    l1_regularizer,
    l2_regularizer,
    optimize_loss,
)


def _version() -> str:
    """The installed distribution's version (pyproject.toml's, through the package metadata)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("trainop")
    except PackageNotFoundError:  # imported from a source tree that was never installed
        return "0+unknown"


__version__ = _version()

# TensorFlow imported after trainop loads Triton first (interfaces/tensorflow_import.py).
load_triton_before_tensorflow()

__all__ = [
    "LearningRateControl",
    "OPTIMIZER_CLASSES",
    "AdadeltaOptimizer",
    "AdagradDAOptimizer",
    "AdagradOptimizer",
    "AdamOptimizer",
    "AdamWOptimizer",
    "AggregationMethod",
    "DecoupledWeightDecayExtension",
    "FlatLayout",
    "FtrlOptimizer",
    "Gate",
    "GradientDescentOptimizer",
    "LazyAdamOptimizer",
    "MomentumOptimizer",
    "MomentumWOptimizer",
    "NadamOptimizer",
    "NovoGrad",
    "Optimizer",
    "ProximalAdagradOptimizer",
    "ProximalGradientDescentOptimizer",
    "RMSPropOptimizer",
    "SlotSpec",
    "extend_with_decoupled_weight_decay",
    "flatten",
    "get_optimizer_class",
    "optimizer_names",
    "register_optimizer",
    "schedules",
    "AutomaticLossScaler",
    "GradientPipeline",
    "MixedPrecisionOptimizerWrapper",
    "MultitaskOptimizerWrapper",
    "StepResult",
    "clip_by_global_norm",
    "clip_gradients_by_global_norm",
    "global_norm",
    "processing",
    "NumericsChecker",
    "NumericsError",
    "add_check_numerics_ops",
    "check_numerics",
    "OPTIMIZER_SUMMARIES",
    "TrainOp",
    "Recipe",
    "RecipeError",
    "Updater",
    "apply_regularization",
    "get_regularization_loss",
    "l1_regularizer",
    "l2_regularizer",
    "load_recipe",
    "optimize_loss",
    "training",
]

_torch_version.warn_below_floor()  # once, if the installed torch is below the floor
