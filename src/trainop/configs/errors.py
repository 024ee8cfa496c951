"""``RecipeError``: the one error for a recipe file that cannot be read as data.

Everything wrong with the file itself — not a regular file, too large, not UTF-8, not valid
Python/YAML/JSON, a YAML tag or alias expansion beyond the limits, nesting or a value beyond the
evaluator's bounds (``trainop.configs.bounds``) — raises ``RecipeError``, a ``ValueError`` whose
``str()`` is one line: ``<file>:<line>: <reason>`` (``<file>: <reason>`` where no line is
known). Wrong *options* (an unknown key, a value out of range) keep their own
``ValueError``/``TypeError`` messages.
"""

from __future__ import annotations

__all__ = ["RecipeError"]


class RecipeError(ValueError):
    """A recipe file that cannot be read as data.

    Attributes:
        filename: the file (``"<dict>"``/``"<config>"`` for text without one).
        line: the 1-based line, or ``None`` where not known.
        reason: what is wrong, one line.
    """

    def __init__(self, filename: str, line: int | None, reason: str) -> None:
        self.filename, self.line = str(filename), line
        reason = " ".join(str(reason).split())  # one line, whatever the cause said
        self.reason = reason if len(reason) <= 500 else reason[:497] + "..."
        where = self.filename if line is None else f"{self.filename}:{line}"
        super().__init__(f"{where}: {self.reason}")

    def __reduce__(self):  # picklable (multiprocessing, subprocess reports)
        return type(self), (self.filename, self.line, self.reason)
