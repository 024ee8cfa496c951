#!/usr/bin/env bash
# Set up (if needed) and run the main job, about a minute on 2 cores after set-up: the quick-start
# example (TF style and torch style agreeing), then examples/demo.py (OpenSeq2Seq's optimize_loss
# in mixed precision, RETURNN's Updater from a config file, the numerics check tracing a NaN).
# The benchmarks are a separate command: `.venv/bin/trainop bench` (see BENCHMARKS.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python examples/quickstart.py
.venv/bin/python examples/demo.py
