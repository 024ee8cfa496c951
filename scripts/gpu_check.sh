#!/usr/bin/env bash
# One GPU check (#31, #38), for a machine lent for 15 minutes: the script itself stops within
# 8 minutes (a deadline; each phase's limit is cut to what is left of it). Every phase runs
# under `timeout -s INT` (SIGKILL 10 s later): an overrun pytest still writes its JUnit XML, and
# `trainop bench` has already written one JSON line per workload measured.
#   preflight       scripts/gpu_preflight.py, into env.txt: the card, its clocks and power
#                   limit (nvidia-smi); Python, torch, triton, jax, optax, numpy, the pytest
#                   plugins; the C compiler and Python.h Triton builds its launchers with.
#                   Stops (exit 3) with one clear line each without a CUDA device, a C
#                   compiler or Python.h.
#   install         pip install --no-deps --no-build-isolation --no-index (nothing downloaded)
#   doctor          `trainop doctor` (the native kernels build once, before the test workers)
#   bench_targeted  `trainop bench --device cuda`: the workloads with targets, torch's and
#                   optax's peers beside them (optax on the one-tensor Adam only;
#                   XLA_PYTHON_CLIENT_PREALLOCATE=false); first, on a cool card, before
#                   anything else has run on it
#   bench_other     the other optimizers
#   probe_*         three 10-second probes (scripts/gpu_probes.py, into probes.txt): the
#                   NovoGrad tail (2^20 + 1 elements against the reference), Triton's launch
#                   cost (host us per launch), steps timed back to back against one at a time
#   tests           one pytest run over the CUDA test files: -n 8 (xdist) and --timeout 60
#                   per test where installed (the benchmarks compiled most kernels already)
#   clocks          nvidia-smi's clocks again, appended to env.txt
# Files in $OUT (a device machine returns at most 8): summary.txt gpu_check.log env.txt
# tests.xml bench.jsonl bench.md probes.txt. Exit status: 0 every phase passed, 1 a phase failed, timed
# out or was skipped, 2 bad usage, 3 the preflight stopped the check.
#
#   bash scripts/gpu_check.sh              # the check
#   bash scripts/gpu_check.sh --dry-run    # print the plan, run nothing
# Environment: PYTHON (default python3), OUT (default ./gpu-check), GPU_CHECK_SCALE (default 1),
# GPU_CHECK_TESTS (test files, space-separated), GPU_CHECK_LIMITS (e.g. "tests=60,bench_other=20"),
# GPU_CHECK_BUDGET (seconds, default 480): for a short first try, and for the CPU tests.
set -uo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-python3}"
OUT="${OUT:-$ROOT/gpu-check}"
SCALE="${GPU_CHECK_SCALE:-1}"
BUDGET="${GPU_CHECK_BUDGET:-480}"
KILL_AFTER=10
DRY=0
case "${1:-}" in
  --dry-run) DRY=1 ;;
  "") ;;
  *) echo "gpu_check: unknown argument '$1' (expected --dry-run or nothing)" >&2; exit 2 ;;
esac

read -r -a TESTS <<< "${GPU_CHECK_TESTS:-tests/test_cuda.py tests/test_triton_cuda.py \
tests/test_cuda_capture.py tests/test_cuda_tf_parity.py}"
ORDER=(preflight install doctor bench_targeted bench_other probe_novograd_tail probe_launch
       probe_back_to_back tests clocks)
declare -A LIMIT=([preflight]=60 [install]=30 [doctor]=45 [bench_targeted]=110 [bench_other]=70
                  [probe_novograd_tail]=10 [probe_launch]=10 [probe_back_to_back]=10
                  [tests]=125 [clocks]=10)
PROBES=(novograd_tail launch back_to_back)
# The GPU suite's workloads by run (key prefixes, see `trainop bench --help`): targets first.
declare -A BENCH=([targeted]=adam,post_backward,mixed,captured [other]=other)
FILES="summary.txt gpu_check.log env.txt tests.xml bench.jsonl bench.md probes.txt"
NVSMI_FIELDS=name,driver_version,pstate,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,\
power.draw,power.limit,temperature.gpu,memory.total

if [[ -n ${GPU_CHECK_LIMITS:-} ]]; then
  IFS=, read -r -a pairs <<< "$GPU_CHECK_LIMITS"
  for pair in "${pairs[@]}"; do
    name=${pair%%=*} value=${pair#*=}
    if [[ -z ${LIMIT[$name]+x} || ! $value =~ ^[1-9][0-9]*$ ]]; then
      echo "gpu_check: GPU_CHECK_LIMITS: '$pair' is not PHASE=SECONDS (phases: ${ORDER[*]})" >&2
      exit 2
    fi
    LIMIT[$name]=$value
  done
fi
if [[ ! $BUDGET =~ ^[1-9][0-9]*$ ]]; then
  echo "gpu_check: GPU_CHECK_BUDGET must be a whole number of seconds, got '$BUDGET'" >&2; exit 2
fi
RESERVE=$((LIMIT[clocks] + KILL_AFTER))  # what every phase before the last leaves for it

if [[ $DRY == 1 ]]; then
  echo "gpu_check (dry run): python '$PY', output '$OUT', scale $SCALE"
  total=0
  for phase in "${ORDER[@]}"; do
    echo "  $phase: at most ${LIMIT[$phase]} s"; total=$((total + LIMIT[$phase]))
  done
  echo "  tests: ${TESTS[*]} (-n 8 --timeout 60 where pytest-xdist and pytest-timeout are)"
  echo "  bench --gpu-workloads: ${BENCH[targeted]} | ${BENCH[other]}"
  echo "  probes: ${PROBES[*]} (scripts/gpu_probes.py, into probes.txt)"
  echo "  files: $FILES"
  echo "  total at most $total s; each phase SIGINT at its limit, SIGKILL ${KILL_AFTER} s later;"
  echo "  deadline $BUDGET s for the whole (a phase's limit is cut to what is left)"
  exit 0
fi

mkdir -p "$OUT" || { echo "gpu_check: cannot create '$OUT'" >&2; exit 2; }
LOG="$OUT/gpu_check.log"
ENV="$OUT/env.txt"
: > "$LOG"
: > "$ENV"
rm -f "$OUT/tests.xml" "$OUT/bench.jsonl" "$OUT/bench.md" "$OUT/summary.txt" "$OUT/probes.txt"
SUMMARY=()
FAILED=0
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"  # runs even if the install fails
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # JAX takes what it needs, not 75% of the card
export PYTHONUNBUFFERED=1 GPU_CHECK_NVSMI_FIELDS="$NVSMI_FIELDS"
cd "$ROOT" || exit 2

log() { echo "$*" | tee -a "$LOG"; }

# phase NAME OUTFILE CMD...: CMD under the phase's limit (cut to the deadline), its stdout
# appended to OUTFILE, its stderr to the log; one summary line.
phase() {
  local name=$1 file=$2; shift 2
  local limit=${LIMIT[$name]} left=$((BUDGET - SECONDS - KILL_AFTER)) rc start=$SECONDS
  [[ $name != clocks ]] && left=$((left - RESERVE))
  ((left < limit)) && limit=$left
  if ((limit < 3 && limit < LIMIT[$name])); then  # cut by the deadline to almost nothing
    log "=== $name: SKIPPED (${SECONDS} s of the ${BUDGET} s deadline gone)"
    SUMMARY+=("$(printf '%-20s %-22s' "$name" "SKIPPED (deadline)")")
    FAILED=1
    return 124
  fi
  log "=== $name (limit $limit s): $*"
  timeout -s INT --kill-after="$KILL_AFTER" "$limit" "$@" >> "$file" 2>> "$LOG"
  rc=$?
  local took=$((SECONDS - start)) what="ok"
  if [[ $rc == 124 ]]; then what="TIMED OUT (SIGINT)"
  elif [[ $rc == 137 ]]; then what="TIMED OUT (SIGKILL)"
  elif [[ $rc != 0 ]]; then what="FAILED (exit $rc)"; fi
  [[ $rc != 0 ]] && FAILED=1
  SUMMARY+=("$(printf '%-20s %-22s %4ss' "$name" "$what" "$took")")
  log "=== $name: $what after ${took}s"
  return $rc
}

existing() { local f out=(); for f in "$@"; do [[ -f $f ]] && out+=("$f"); done; echo "${out[@]}"; }

{ echo "gpu_check $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $ROOT"
  echo "git: $(git -C "$ROOT" log -1 --format='%h %s' 2>/dev/null || echo 'not a checkout')"
} >> "$ENV"
phase preflight "$ENV" "$PY" "$ROOT/scripts/gpu_preflight.py"
rc=$?
if [[ $rc != 0 ]]; then
  case $rc in
    124|137) why="gpu_check: the preflight did not finish within its limit (a cold machine's
gpu_check: first torch import and CUDA start are slow: raise GPU_CHECK_LIMITS' preflight)" ;;
    *) why="$(grep '^gpu_check: ' "$LOG")" ;;
  esac
  { echo "$why"; echo "gpu_check: stopped before anything ran; log in $LOG, machine in $ENV"
  } | tee "$OUT/summary.txt" >&2
  exit 3
fi

phase install "$LOG" "$PY" -m pip install -q --no-deps --no-build-isolation --no-index \
  --disable-pip-version-check -e "$ROOT"
phase doctor "$LOG" "$PY" -m trainop doctor

for run in targeted other; do
  phase "bench_$run" "$OUT/bench.md" "$PY" -m trainop bench --device cuda --scale "$SCALE" \
    --repeats 10 --warmup 3 --no-progress --jsonl "$OUT/bench.jsonl" \
    --gpu-workloads "${BENCH[$run]}"
done

for probe in "${PROBES[@]}"; do
  phase "probe_$probe" "$OUT/probes.txt" "$PY" "$ROOT/scripts/gpu_probes.py" "$probe"
done

read -r -a test_files <<< "$(existing "${TESTS[@]}")"
if grep -q '^pytest: not installed' "$ENV" || ((${#test_files[@]} == 0)); then
  log "=== tests: skipped (pytest not installed for $PY, or none of ${TESTS[*]} here)"
  SUMMARY+=("$(printf '%-20s %-22s' tests "SKIPPED (no pytest/tests)")")
  FAILED=1
else
  pytest_args=(-p no:cacheprovider -q -rfEs --junitxml="$OUT/tests.xml")
  grep -q '^pytest-xdist: [0-9]' "$ENV" && pytest_args+=(-n 8)
  grep -q '^pytest-timeout: [0-9]' "$ENV" && pytest_args+=(--timeout 60)
  phase tests "$LOG" "$PY" -m pytest "${pytest_args[@]}" "${test_files[@]}"
fi

echo "--- at the end:" >> "$ENV"
if command -v nvidia-smi > /dev/null; then
  phase clocks "$ENV" nvidia-smi --query-gpu="$NVSMI_FIELDS" --format=csv
else
  echo "nvidia-smi: not available" >> "$ENV"
fi

# xml_count ATTR: the first <testsuite>'s ATTR in tests.xml ("?" without one).
xml_count() {
  local suite
  suite=$(grep -o '<testsuite [^>]*>' "$OUT/tests.xml" 2>/dev/null | head -n 1)
  local got
  got=$(grep -o " $1=\"[0-9]*\"" <<< "$suite" | tr -dc 0-9)
  echo "${got:-?}"
}

{
  echo "=== gpu_check summary: $(grep -m 1 '^cuda: ' "$ENV" || echo 'cuda: ?'); ${SECONDS} s in all"
  printf '%s\n' "${SUMMARY[@]}"
  if [[ -f $OUT/tests.xml ]]; then
    echo "tests.xml: $(xml_count tests) tests, $(xml_count failures) failures," \
      "$(xml_count errors) errors, $(xml_count skipped) skipped"
  else
    echo "tests.xml: not written"
  fi
  lines=0
  [[ -f $OUT/bench.jsonl ]] && lines=$(wc -l < "$OUT/bench.jsonl")
  echo "bench.jsonl: $lines workload(s) measured"
  [[ -f $OUT/bench.md ]] && grep -E '^(Targets:|Interrupted after)' "$OUT/bench.md"
  echo "files in $OUT: $(cd "$OUT" && ls | tr '\n' ' ')"
} | tee -a "$LOG" > "$OUT/summary.txt"
cat "$OUT/summary.txt"
exit $FAILED
