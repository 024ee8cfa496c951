#!/usr/bin/env bash
# Set up (if needed) and run the main job, about a minute on 2 cores after set-up:
# 1. the quick-start example (TF style and torch style agreeing);
# 2. `trainop train` with the OpenSeq2Seq-style recipe examples/openseq2seq_transformer.py
#    (LazyAdam, transformer_policy, max_grad_norm; read as data, never run), replayed with
#    TensorFlow's own ops (--compare-tf: the largest deviation per step);
# 3. `trainop train` with the RETURNN config examples/returnn_lstm.config (Adam, accumulation,
#    clipping, NaN filter) - each writes a dashboard PNG and TensorBoard events under runs/;
# 4. examples/demo.py: optimize_loss in mixed precision, and the numerics check tracing a NaN.
# The benchmarks are a separate command: `.venv/bin/trainop bench` (see BENCHMARKS.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python examples/quickstart.py
echo
.venv/bin/python -m trainop train examples/openseq2seq_transformer.py --steps 60 \
  --out runs/openseq2seq --compare-tf --no-progress
echo
.venv/bin/python -m trainop train examples/returnn_lstm.config --steps 60 --out runs/returnn \
  --no-progress
echo
.venv/bin/python examples/demo.py
