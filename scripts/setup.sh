#!/usr/bin/env bash
# Create .venv (once) and install trainop with its test extra into it.
# torch is installed first with the pin torch==2.13.0 so that no newer (CUDA) build is pulled.
# On a machine whose pip finds only PyPI's CUDA wheels, set TORCH_INDEX_URL to a CPU index.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
if ! .venv/bin/python -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '2.13.0')" 2>/dev/null; then
  .venv/bin/python -m pip install -q ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "torch==2.13.0"
fi
.venv/bin/python -m pip install -q -e ".[test]"
# timm (tests/test_timm_*.py: a real client of the optimizers) without its torchvision: PyPI's
# torchvision is built for CUDA torch and does not import beside a CPU torch (tests/timm_client.py)
.venv/bin/python -m pip install -q --no-deps "timm==1.0.31"
