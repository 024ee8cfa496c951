"""TensorFlow's C++ log lines kept out of ``trainop train``'s output.

TensorFlow is imported by ``--compare-tf`` and, when TensorFlow is installed, by TensorBoard's
event writer; its C++ start-up lines (``I0000 00:00:...``, the "before absl::InitializeLog"
notice, the CPU-feature note) are not silenced by ``TF_CPP_MIN_LOG_LEVEL`` in every TensorFlow
2 release, so the blocks that may import or run it capture file descriptor 2 and write back
every other line (real errors still show).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator

from trainop.bench.quiet import stderr_to

__all__ = ["tf_logs_dropped"]

_TF_LOG_LINE = re.compile(r"^([IWE]\d{4} \d\d:\d\d:|WARNING: All log messages before absl|"
                          r"To enable the following instructions: )")


@contextlib.contextmanager
def tf_logs_dropped() -> Iterator[None]:
    """Run the block with stderr (the descriptor) captured; then write back all but
    TensorFlow's log lines. ``TF_CPP_MIN_LOG_LEVEL`` defaults to 2 for what it does silence."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with tempfile.TemporaryFile(mode="w+b") as captured:
        try:
            with stderr_to(captured.fileno()):
                yield
        finally:
            captured.seek(0)
            kept = [line for line in captured.read().decode(errors="replace").splitlines()
                    if not _TF_LOG_LINE.match(line)]
            if kept:
                print("\n".join(kept), file=sys.stderr)
