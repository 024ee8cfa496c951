"""trainop's Updater inside RETURNN's own torch engine (``trainop.returnn.use_in_engine``).

In a RETURNN config::

    import trainop.returnn
    trainop.returnn.use_in_engine()               # RETURNN torch's semantics (bit-identical)
    trainop.returnn.use_in_engine(semantics="tf")  # RETURNN TF's semantics on the torch engine
"""

from __future__ import annotations

from trainop.interfaces.returnn_engine.updater import (
    EngineUpdater,
    TFSemanticsUpdater,
    TorchSemanticsUpdater,
)

__all__ = ["EngineUpdater", "SEMANTICS", "TFSemanticsUpdater", "TorchSemanticsUpdater",
           "use_in_engine"]

#: semantics -> the engine updater class.
SEMANTICS = {"torch": TorchSemanticsUpdater, "tf": TFSemanticsUpdater}


def use_in_engine(semantics: str = "torch") -> type[EngineUpdater]:
    """Make RETURNN's torch engine build trainop's updater (for this process): ``"torch"``
    keeps RETURNN torch's semantics, ``"tf"`` gives RETURNN TF's (see ``docs/updater.md``).
    Returns the class now in use."""
    if semantics not in SEMANTICS:
        raise ValueError(f"Expected `semantics` to be one of {sorted(SEMANTICS)}, got "
                         f"{semantics!r}")
    import returnn.torch.engine as engine  # RETURNN's engine builds `Updater` by this name

    engine.Updater = SEMANTICS[semantics]
    return SEMANTICS[semantics]
