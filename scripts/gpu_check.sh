#!/usr/bin/env bash
# One GPU check for issue #31, at most 8 minutes on one H100 (every phase bounded by `timeout`):
#   0. preflight: Python, torch, a CUDA device (stops at once, exit 3, without one);
#   1. install this checkout into the machine's own Python (--no-deps: nothing is downloaded);
#   2. `trainop doctor` (Triton, CUDA, what `auto` picks);
#   3. the CUDA tests (pytest, every failure reported, not stopping at the first);
#   4. `trainop bench --device cuda` (the GPU suite, in three runs so that a timeout loses one).
# Writes a log, the tables (markdown and JSON) and a summary to $OUT (default ./gpu-check/).
# Exit status: 0 all phases passed, 1 a phase failed or timed out, 3 no CUDA device.
#
#   bash scripts/gpu_check.sh              # the check
#   bash scripts/gpu_check.sh --dry-run    # print the phases and their limits, run nothing
# Environment: PYTHON (default python3), OUT, GPU_CHECK_SCALE (default 1).
set -uo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-python3}"
OUT="${OUT:-$ROOT/gpu-check}"
SCALE="${GPU_CHECK_SCALE:-1}"
DRY=0
case "${1:-}" in
  --dry-run) DRY=1 ;;
  "") ;;
  *) echo "gpu_check: unknown argument '$1' (expected --dry-run or nothing)" >&2; exit 2 ;;
esac

# The CUDA test files: the existing ones and #31's (those not in this checkout are left out).
TESTS_A=(tests/test_cuda.py tests/test_triton_cuda.py)
TESTS_B=(tests/test_cuda_capture.py tests/test_cuda_tf_parity.py)
# phase -> seconds (sum 450 s; the 8-minute budget keeps 30 s for Python's start-ups)
declare -A LIMIT=([preflight]=20 [install]=30 [doctor]=30 [tests_existing]=90 [tests_new]=50
                  [bench_main]=120 [bench_other1]=55 [bench_other2]=55)
ORDER=(preflight install doctor tests_existing tests_new bench_main bench_other1 bench_other2)
# The GPU suite's workloads by run (key prefixes, see `trainop bench --help`).
BENCH_main=adam,post_backward,mixed,captured
BENCH_other1=other_Ada,other_Ftrl,other_Gradient,other_Lazy
BENCH_other2=other_Momentum,other_Nadam,other_Novo,other_Proximal,other_RMS

if [[ $DRY == 1 ]]; then
  echo "gpu_check (dry run): python '$PY', output '$OUT', scale $SCALE"
  total=0
  for phase in "${ORDER[@]}"; do
    echo "  $phase: at most ${LIMIT[$phase]} s"; total=$((total + LIMIT[$phase]))
  done
  echo "  tests: ${TESTS_A[*]} | ${TESTS_B[*]}"
  echo "  bench --gpu-workloads: $BENCH_main | $BENCH_other1 | $BENCH_other2"
  echo "  total at most $total s"
  exit 0
fi

mkdir -p "$OUT" || { echo "gpu_check: cannot create '$OUT'" >&2; exit 2; }
LOG="$OUT/gpu_check.log"
: > "$LOG"
SUMMARY=()
FAILED=0
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"  # runs even if the install fails
cd "$ROOT" || exit 2

log() { echo "$*" | tee -a "$LOG"; }

# phase NAME OUTFILE CMD...: run CMD under the phase's limit, output to OUTFILE and the log.
phase() {
  local name=$1 file=$2; shift 2
  local start=$SECONDS rc
  log "=== $name (limit ${LIMIT[$name]} s): $*"
  timeout --kill-after=5 "${LIMIT[$name]}" "$@" > "$OUT/$file" 2>&1
  rc=$?
  cat "$OUT/$file" >> "$LOG"
  local took=$((SECONDS - start)) what="ok"
  if [[ $rc == 124 || $rc == 137 ]]; then what="TIMED OUT"; elif [[ $rc != 0 ]]; then
    what="FAILED (exit $rc)"; fi
  [[ $rc != 0 ]] && FAILED=1
  SUMMARY+=("$(printf '%-15s %-18s %4ss  %s' "$name" "$what" "$took" "$file")")
  log "=== $name: $what after ${took}s"
  return $rc
}

existing() { local f out=(); for f in "$@"; do [[ -f $f ]] && out+=("$f"); done; echo "${out[@]}"; }

# 0. preflight: fail fast and clearly without a GPU.
if ! phase preflight preflight.txt "$PY" -c '
import sys
try:
    import torch
except Exception as exc:
    sys.exit(f"gpu_check: torch not importable: {exc}")
if not torch.cuda.is_available():
    sys.exit(f"gpu_check: no CUDA device (torch {torch.__version__}, CUDA build "
             f"{torch.version.cuda}): this check needs a GPU")
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name(0)}")
'; then
  cat "$OUT/preflight.txt" >&2
  echo "gpu_check: stopped before anything ran; log in $LOG" >&2
  exit 3
fi

phase install install.txt "$PY" -m pip install --no-deps --no-build-isolation -e "$ROOT"
phase doctor doctor.txt "$PY" -m trainop doctor

if "$PY" -m pytest --version > /dev/null 2>&1; then
  read -r -a files_a <<< "$(existing "${TESTS_A[@]}")"
  read -r -a files_b <<< "$(existing "${TESTS_B[@]}")"
  phase tests_existing tests_existing.txt "$PY" -m pytest -p no:cacheprovider -q -rfEs \
    --junitxml="$OUT/tests_existing.xml" "${files_a[@]}"
  phase tests_new tests_new.txt "$PY" -m pytest -p no:cacheprovider -q -rfEs \
    --junitxml="$OUT/tests_new.xml" "${files_b[@]}"
else
  log "=== tests: pytest is not installed for $PY; skipped"
  SUMMARY+=("tests          SKIPPED (no pytest)")
  FAILED=1
fi

for run in main other1 other2; do
  workloads="BENCH_$run"
  phase "bench_$run" "bench_$run.md" "$PY" -m trainop bench --device cuda --scale "$SCALE" \
    --repeats 10 --warmup 3 --no-progress --json "$OUT/bench_$run.json" \
    --gpu-workloads "${!workloads}"
done

{
  echo
  echo "=== gpu_check summary ($(head -n 1 "$OUT/preflight.txt"); ${SECONDS}s in all)"
  printf '%s\n' "${SUMMARY[@]}"
  for f in tests_existing tests_new; do
    [[ -f $OUT/$f.txt ]] && echo "$f: $(grep -E '(passed|failed|error|skipped|no tests)' \
      "$OUT/$f.txt" | tail -n 1)"
  done
  for f in bench_main bench_other1 bench_other2; do
    [[ -f $OUT/$f.md ]] && echo "$f: $(grep -E '^Targets:' "$OUT/$f.md" | tail -n 1)"
  done
  echo "files in $OUT"
} | tee -a "$LOG" "$OUT/summary.txt"
exit $FAILED
