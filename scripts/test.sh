#!/usr/bin/env bash
# Set up (if needed), lint, and run the whole test suite. Exits non-zero on any failure,
# including "no tests collected" (pytest's exit code 5).
# The docs site's render test needs Debian's chromium: as root with apt-get (CI), it is installed
# once here; otherwise (no root, no apt-get, TRAINOP_NO_APT=1) the test is skipped, saying why.
set -euo pipefail
cd "$(dirname "$0")/.."
# Bytecode caches on, whatever the environment says (PYTHONDONTWRITEBYTECODE=1 on the build
# machine): without them every worker rewrites every test module's asserts again (pytest's
# cache is a .pyc) and every process the tests start compiles trainop's modules from source.
unset PYTHONDONTWRITEBYTECODE
bash scripts/setup.sh
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] \
    && command -v apt-get >/dev/null 2>&1 && [ -z "${TRAINOP_NO_APT:-}" ]; then
  echo "scripts/test.sh: installing chromium for the docs render test (apt-get)"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium \
    >/dev/null) || echo "scripts/test.sh: chromium not installed; its test will be skipped"
fi
.venv/bin/ruff check .
# Workers (pytest-xdist): TRAINOP_TEST_WORKERS, else one per core (nproc) but at most one per
# 3 GB of available memory (a worker holds torch, TensorFlow and the spawned ranks of its tests);
# TRAINOP_TEST_WORKERS=0 runs the suite in this one process. --dist loadfile: a file's tests run
# on one worker, in order (module-scoped fixtures are built once; a file's tests may share them);
# --no-loadscope-reorder: the files in the collection's order, the heaviest first
# (tests/slow_first.py; xdist's own order, by number of tests, left the heavy few-test files last).
workers=${TRAINOP_TEST_WORKERS:-}
if [ -z "$workers" ]; then
  cores=$(nproc)
  by_memory=$(awk '/^MemAvailable:/ {print int($2 / (3 * 1024 * 1024))}' /proc/meminfo)
  workers=$(( by_memory < cores ? by_memory : cores ))
  [ "$workers" -ge 1 ] || workers=1
fi
# The native kernels and the C++ metadata reader are built once here, before the workers start
# (each would otherwise build them at the same time on a fresh machine; the cache is shared).
.venv/bin/python -c "from trainop.kernels import native; from trainop.kernels.native import \
metadata; native.available(); metadata.load()"
# --cov: branch coverage of the layers in pyproject.toml's [tool.coverage.run] (issue #40), traced
# only while those layers' own test files run (tests/layer_coverage.py: tracing the whole suite
# would slow it by half); each worker measures its tests, and the table of the layers' missed
# branches, combined over the workers, is printed after the tests. --durations=30: the slowest
# 30 phases (setup, call, teardown) of the run.
.venv/bin/python -m pytest -p no:cacheprovider -n "$workers" --dist loadfile \
  --no-loadscope-reorder --durations=30 \
  --cov --cov-report=term-missing:skip-covered "$@"
# In CI (CI set; TRAINOP_COMPAT=0 skips), the compatibility subset against the newest torch the
# index serves (scripts/compat.sh; the floor, torch 2.13.0, is the torch the suite above ran on),
# in the time left before minute 85 of CI's 90 (none if under 10 min are left); a run stopped
# for time is reported, not failed. The first run per version installs torch (15-20 min; cached
# after in ~/.cache/trainop/compat: setup ~1 min).
if [ -n "${CI:-}" ] && [ "${TRAINOP_COMPAT:-1}" != 0 ]; then
  for version in ${TRAINOP_COMPAT_VERSIONS:-2.14.1}; do
    left=$((5100 - SECONDS))
    if [ "$left" -lt 600 ]; then echo "scripts/test.sh: no time left for compat $version"
    else status=0; timeout "$left" bash scripts/compat.sh "$version" || status=$?
      [ "$status" = 124 ] && echo "scripts/test.sh: compat $version stopped for time"
      [ "$status" = 0 ] || [ "$status" = 124 ] || exit "$status"; fi
  done
fi
