#!/usr/bin/env bash
# Mutation testing of one layer with mutmut 3 (docs/mutation_audit.md):
#
#   bash scripts/mutation.sh LAYER      # e.g. configs, contract/overlap (--list: the layers)
#   bash scripts/mutation.sh LAYER 'NAME*'   # (re)test the named mutants only (globs; e.g. the
#                                            # survivors, after a test was added for them)
#
# The layer's files and tests are pyproject.toml's [tool.trainop.mutation.LAYER]; the settings
# every layer shares are its [tool.mutmut]. mutmut runs in a copy of the worktree,
# build/mutation/LAYER (the worktree is never changed; a rerun keeps the results of mutants
# whose code did not change), at low priority. It prints the survivors and the score;
# `cd build/mutation/LAYER && mutmut show NAME` shows a mutant's diff.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-$ROOT/.venv/bin/python}
if [ "${1:-}" = "--list" ] || [ $# -lt 1 ]; then
  "$PY" scripts/mutation_layer.py --list
  [ $# -eq 1 ] && exit 0 || exit 2
fi
LAYER=$1
shift
"$PY" -c "import mutmut" 2>/dev/null || { echo "mutmut is not installed: pip install 'mutmut>=3,<4' (the test extra)"; exit 2; }
"$PY" scripts/mutation_layer.py "$LAYER" >/dev/null   # an unknown layer stops here
RUN="$ROOT/build/mutation/${LAYER//\//-}"
mkdir -p "$RUN"
# the copy: everything tracked or not ignored, but mutmut's own folder (kept across runs)
git ls-files -co --exclude-standard -z \
  | tar -c --null --ignore-failed-read -T - -f - 2>/dev/null | tar -x -f - -C "$RUN"
"$PY" scripts/mutation_layer.py "$LAYER" > "$RUN/pyproject.toml"
cd "$RUN"
unset PYTHONPATH   # mutmut puts its mutated copy of src first
MUTMUT=$(dirname "$PY")/mutmut
nice -n "${NICE:-10}" "$MUTMUT" run --max-children "${JOBS:-2}" "$@" || true
"$MUTMUT" export-cicd-stats >/dev/null
"$MUTMUT" results || true
"$PY" "$ROOT/scripts/mutation_layer.py" --score "$RUN"
