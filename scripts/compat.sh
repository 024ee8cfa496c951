#!/usr/bin/env bash
# scripts/compat.sh VERSION [pytest arguments...]: run trainop's compatibility subset against
# torch VERSION, in a virtual environment of its own, cached and reused:
#   ${TRAINOP_COMPAT_CACHE:-${XDG_CACHE_HOME:-~/.cache}/trainop/compat}/torch-VERSION
# The first run per version creates it: `pip install --no-deps torch==VERSION` plus torch's own
# pure-Python requirements; if `import torch` fails without the nvidia-* CUDA libraries (PyPI's
# Linux wheels are CUDA builds), it installs torch's full requirements once (2-3 GB; pip's cache
# keeps the wheels). Later runs reuse the venv and only reinstall trainop (editable, no deps).
# Measured on this 2-core machine under a load of 12-20 (idle would be faster): the first run
# per version 16-20 min to install (torch 2.6.0 + its nvidia-* wheels from PyPI, ~3 GB: 20 min;
# 2.14.1 from a local wheel: 15.5 min); a cached run ~1 min of setup. The tests (~2,200) then
# ran over 40 min under that load.
#
# The subset (SUBSET below, printed at the start) covers every layer: algorithms and
# optimizers, kernels (foreach, native C and its C++ metadata reader, flat buffers), the
# contract, processing, schedules, the training step (optimize_loss, Updater, numerics),
# interfaces (checkpoints, recipes), torch's own habits and interop (torch.optim, schedulers,
# state_dict), distributed (ZeRO, FSDP2, DCP) and torch.compile. Left out: TensorFlow parity,
# RETURNN's engine, Lightning/HF, the docs site and Triton (their packages pin their own torch).
# Extra arguments go to pytest (e.g. `-x`, `-k adam`); TRAINOP_COMPAT_TESTS replaces the subset.
set -euo pipefail
VERSION=${1:?usage: scripts/compat.sh TORCH_VERSION [pytest args...]}
shift
cd "$(dirname "$0")/.."
ROOT=$(pwd)
CACHE=${TRAINOP_COMPAT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trainop/compat}
VENV=$CACHE/torch-$VERSION
PY=$VENV/bin/python
BASE_PYTHON=${TRAINOP_COMPAT_PYTHON:-python3}
SUBSET=(
  # algorithms, optimizers, the contract
  tests/test_generic.py tests/test_fast_paths.py tests/test_contract.py
  tests/test_contract_step.py tests/test_contract_state.py tests/test_contract_lr.py
  tests/test_contract_hooks.py tests/test_contract_construction.py tests/test_contrib.py
  tests/test_novograd.py
  # kernels: native C, the C++ metadata reader, flat buffers
  tests/test_native.py tests/test_native_metadata.py tests/test_native_rows.py tests/test_flat.py
  # processing, schedules
  tests/test_processing_pipeline.py tests/test_processing_scalers.py tests/test_schedules.py
  tests/test_torch_schedulers_over_schedules.py
  # the training step
  tests/test_training_optimize_loss.py tests/test_updater.py tests/test_numerics.py
  # interfaces: torch.optim checkpoints, recipes
  tests/test_torch_optim_checkpoints.py tests/test_recipes.py
  # torch's habits and interop
  tests/test_torch_style.py tests/test_torch_habits.py tests/test_torch_interop.py
  # distributed (gloo), torch.compile, and what needs a newer torch
  tests/test_zero.py tests/test_fsdp2.py tests/test_fsdp2_checkpoints.py tests/test_compile.py
  tests/test_torch_versions.py
)
WHICH="the subset (every layer; TF parity, RETURNN, Lightning/HF, docs, Triton left out)"
if [ -n "${TRAINOP_COMPAT_TESTS:-}" ]; then
  read -r -a SUBSET <<<"$TRAINOP_COMPAT_TESTS"
  WHICH="TRAINOP_COMPAT_TESTS (not the whole subset)"
fi

started=$(date +%s)
if [ ! -f "$VENV/.trainop-compat-ready" ]; then
  echo "compat: creating $VENV (torch $VERSION; first run only)"
  rm -rf "$VENV"
  mkdir -p "$CACHE"
  "$BASE_PYTHON" -m venv "$VENV"
  "$PY" -m pip install -q --upgrade pip setuptools wheel
  "$PY" -m pip install -q --no-deps "torch==$VERSION"
  # torch's own requirements, less the CUDA libraries and Triton (the GPU runtime)
  mapfile -t pure < <("$PY" - <<'EOF'
import re
from importlib.metadata import requires
for line in requires("torch") or []:
    spec, _, marker = line.partition(";")
    spec = re.sub(r"[\s()]", "", spec)
    name = re.match(r"[A-Za-z0-9_.-]+", spec).group(0).lower()
    if "extra" not in marker and not name.startswith("nvidia-") and name != "triton":
        print(spec)
EOF
)
  "$PY" -m pip install -q "${pure[@]}"
  if ! "$PY" -c "import torch" >/dev/null 2>&1; then
    echo "compat: torch $VERSION does not import without its CUDA libraries;" \
         "installing its full requirements (nvidia-*, 2-3 GB, once; pip caches the wheels)"
    "$PY" -m pip install -q "torch==$VERSION"
  fi
  "$PY" -c "import torch; print(torch.__version__)" >"$VENV/.trainop-compat-ready"
  echo "compat: torch $VERSION installed in $(( $(date +%s) - started )) s"
fi
# trainop's own requirements and what the subset needs (already there: a few seconds)
if ! { "$PY" -m pip install -q numpy pyyaml tqdm pytest pytest-xdist hypothesis matplotlib \
         tensorboard &&
       "$PY" -m pip install -q --no-deps --no-build-isolation -e "$ROOT"; } >"$VENV/.install.log" 2>&1
then cat "$VENV/.install.log"; exit 1; fi
installed=$("$PY" -c "import torch; print(torch.__version__)")
setup=$(( $(date +%s) - started ))
echo "compat: torch $installed ($VENV), set up in $setup s"
echo "compat: $WHICH:"
printf '  %s\n' "${SUBSET[@]}"
cd "$ROOT"
status=0
# workers as scripts/test.sh's (TRAINOP_TEST_WORKERS, else one per core); a file's tests on one
"$PY" -m pytest -p no:cacheprovider -q -n "${TRAINOP_TEST_WORKERS:-$(nproc)}" --dist loadfile \
  "${SUBSET[@]}" "$@" || status=$?
echo "compat: torch $installed: pytest exit $status after $(( $(date +%s) - started )) s in all"
exit "$status"
