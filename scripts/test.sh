#!/usr/bin/env bash
# Set up (if needed), lint, and run the whole test suite. Exits non-zero on any failure,
# including "no tests collected" (pytest's exit code 5).
# The docs site's render test needs Debian's chromium: as root with apt-get (CI), it is installed
# once here; otherwise (no root, no apt-get, TRAINOP_NO_APT=1) the test is skipped, saying why.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] \
    && command -v apt-get >/dev/null 2>&1 && [ -z "${TRAINOP_NO_APT:-}" ]; then
  echo "scripts/test.sh: installing chromium for the docs render test (apt-get)"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium \
    >/dev/null) || echo "scripts/test.sh: chromium not installed; its test will be skipped"
fi
.venv/bin/ruff check .
# --cov: branch coverage of the layers in pyproject.toml's [tool.coverage.run] (issue #40), traced
# only while those layers' own test files run (tests/layer_coverage.py: tracing the whole suite
# would slow it by half); the table of their missed branches is printed after the tests
.venv/bin/python -m pytest -p no:cacheprovider --cov --cov-report=term-missing:skip-covered "$@"
