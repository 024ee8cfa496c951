"""trainop in RETURNN's torch engine: ``import trainop.returnn; trainop.returnn.use_in_engine()``
in a RETURNN config replaces the engine's updater by trainop's (``docs/updater.md``)."""

from trainop.interfaces.returnn_engine import SEMANTICS, EngineUpdater, use_in_engine

__all__ = ["SEMANTICS", "EngineUpdater", "use_in_engine"]
