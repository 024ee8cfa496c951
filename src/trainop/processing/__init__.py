"""Gradient processing and mixed precision, fused into the optimizer's update.

TF's clipping functions, OpenSeq2Seq's loss scalers, LARC and mixed-precision wrapper, RETURNN's
NaN/Inf filter and gradient noise, and contrib's multitask wrapper, as small processors that a
``GradientPipeline`` runs in a fixed order (``STAGES``) and folds into one update pass. See
``docs/processing.md``.
"""

from trainop.processing._base import SKIP_REASONS, STAGES, Processor
from trainop.processing._batch import Gradients
from trainop.processing.clip_ops import (
    clip_by_average_norm,
    clip_by_global_norm,
    clip_by_norm,
    clip_by_value,
    global_norm,
)
from trainop.processing.clipping import (
    ClipByAverageNorm,
    ClipByGlobalNorm,
    ClipByNorm,
    ClipByValue,
    ClipToZero,
)
from trainop.processing.larc import LARC, larc
from trainop.processing.loss_scale import (
    AutomaticLossScaler,
    BackoffLossScaler,
    LogMaxLossScaler,
    LossScale,
    LossScaler,
    StaticLossScaler,
)
from trainop.processing.mixed_precision import MixedPrecisionOptimizerWrapper
from trainop.processing.multitask import (
    FilterZeroGradients,
    MultitaskOptimizerWrapper,
    clip_gradients_by_global_norm,
)
from trainop.processing.noise import GradientNoise
from trainop.processing.nonfinite import NanInfFilter, NonFiniteGradientsError, SkipNonFinite
from trainop.processing.pipeline import GradientPipeline, StepResult

__all__ = [
    "LARC",
    "SKIP_REASONS",
    "STAGES",
    "AutomaticLossScaler",
    "BackoffLossScaler",
    "ClipByAverageNorm",
    "ClipByGlobalNorm",
    "ClipByNorm",
    "ClipByValue",
    "ClipToZero",
    "FilterZeroGradients",
    "GradientNoise",
    "GradientPipeline",
    "Gradients",
    "LogMaxLossScaler",
    "LossScale",
    "LossScaler",
    "MixedPrecisionOptimizerWrapper",
    "MultitaskOptimizerWrapper",
    "NanInfFilter",
    "NonFiniteGradientsError",
    "Processor",
    "SkipNonFinite",
    "StaticLossScaler",
    "StepResult",
    "clip_by_average_norm",
    "clip_by_global_norm",
    "clip_by_norm",
    "clip_by_value",
    "clip_gradients_by_global_norm",
    "global_norm",
    "larc",
]
