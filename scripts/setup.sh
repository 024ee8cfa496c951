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
# pyproject.toml's [tool.trainop] test-no-deps (timm, without the torchvision it would pull:
# the reason is written there)
mapfile -t NO_DEPS < <(.venv/bin/python -c 'try:
    import tomllib
except ImportError:  # Python 3.10: the TOML reader pip carries
    from pip._vendor import tomli as tomllib
print(*tomllib.load(open("pyproject.toml", "rb"))["tool"]["trainop"]["test-no-deps"], sep="\n")')
.venv/bin/python -m pip install -q --no-deps "${NO_DEPS[@]}"
