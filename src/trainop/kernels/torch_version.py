"""The torch versions trainop runs on, and one message for a feature the installed torch lacks.

trainop is tested on torch ``FLOOR`` (pyproject.toml's ``torch>=``) through ``NEWEST_TESTED``
(``scripts/compat.sh VERSION`` runs the compatibility subset against one version). A feature
that needs more than the installed torch has calls ``require`` first, which raises
``TorchVersionError`` naming the feature, the torch version it needs and the one installed:
one clear line instead of an ``AttributeError`` or ``ImportError`` from deep inside torch.
``FEATURES`` lists each such feature with the version that brought it and the torch API it
needs (both checked: the version, and the attribute's presence). Below the floor,
``import trainop`` warns once (``TorchVersionWarning``), naming the APIs that set the floor.
"""

from __future__ import annotations

import importlib
import re

import torch

__all__ = ["FEATURES", "FLOOR", "FLOOR_APIS", "NEWEST_TESTED", "TorchVersionError",
           "TorchVersionWarning", "installed", "require", "supports", "warn_below_floor"]

#: The oldest torch trainop is tested on (pyproject.toml's ``torch>=``): 2.13.0 (CI's). 2.6.0
#: fails (``scripts/compat.sh 2.6.0``: FSDP2's spawned ranks exit 1, ``torch.compile`` of a
#: step recurses, a numerics and an ``optimize_loss`` check); 2.7 to 2.12 are not tested yet.
FLOOR = (2, 13)
#: The newest torch trainop is tested on.
NEWEST_TESTED = (2, 14, 1)

#: What rules out torch < 2.6 whatever else: APIs trainop calls, present from 2.6 on. torch
#: 2.4.1 lacks all four (``scripts/compat.sh 2.4.1``: about 150 failures in 19 files), and so
#: does 2.5.1 (read in its wheel; its suite not run).
FLOOR_APIS = (
    "torch._foreach_rsqrt / torch._foreach_rsqrt_ (Adagrad, Adadelta, ProximalAdagrad: foreach)",
    "torch.nn.modules.module.register_module_forward_hook(with_kwargs=True) (numerics checks)",
    "torch.distributed.fsdp.fully_shard (FSDP2; before 2.6 only under torch.distributed."
    "_composable)",
    "named parameters in torch.optim.Optimizer (`params=model.named_parameters()`)",
)

#: feature -> (the torch version that brought it, the API it needs: ``module:attribute``).
FEATURES: dict[str, tuple[tuple[int, ...], str]] = {
    "FSDP2 (fully_shard)": ((2, 6), "torch.distributed.fsdp:fully_shard"),
    "numerics checks (global module forward hooks with kwargs)":
        ((2, 6), "torch.nn.modules.module:register_module_forward_hook"),
    "the foreach path of Adagrad, Adadelta and ProximalAdagrad": ((2, 6), "torch:_foreach_rsqrt"),
}


class TorchVersionError(RuntimeError):
    """A trainop feature needs a newer torch than the one installed."""


class TorchVersionWarning(UserWarning):
    """The installed torch is older than the oldest one trainop is tested on."""


def _parse(version: str) -> tuple[int, ...]:
    numbers = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(part) for part in numbers.group(0).split(".")) if numbers else (0,)


def installed() -> tuple[int, ...]:
    """The installed torch's version as numbers, e.g. ``(2, 14, 1)`` (local tags dropped)."""
    return _parse(torch.__version__)


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(str(part) for part in version)


def _api_present(api: str) -> bool:
    module_name, _, attribute = api.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return False
    return hasattr(module, attribute)


def supports(feature: str) -> bool:
    """Whether the installed torch has ``feature`` (a key of ``FEATURES``)."""
    if feature not in FEATURES:
        raise ValueError(f"Expected `feature` to be one of {sorted(FEATURES)}, got {feature!r}")
    version, api = FEATURES[feature]
    return installed()[:len(version)] >= version and _api_present(api)


def require(feature: str) -> None:
    """Raise ``TorchVersionError`` unless the installed torch has ``feature``."""
    if not supports(feature):
        version = _dotted(FEATURES[feature][0])
        raise TorchVersionError(
            f"trainop: {feature} needs torch>={version}; torch {torch.__version__} is installed "
            f"(trainop is tested on torch {_dotted(FLOOR)} to {_dotted(NEWEST_TESTED)}: "
            f"pip install 'torch>={version}')")


def warn_below_floor() -> None:
    """Warn once (at ``import trainop``) if the installed torch is below ``FLOOR``."""
    if installed()[:len(FLOOR)] < FLOOR:
        import warnings

        warnings.warn(f"trainop: torch {torch.__version__} is installed, older than torch "
                      f"{_dotted(FLOOR)}, the oldest trainop is tested on (below 2.6 it lacks "
                      f"{'; '.join(FLOOR_APIS)}): pip install 'torch>={_dotted(FLOOR)}'",
                      TorchVersionWarning, stacklevel=3)
