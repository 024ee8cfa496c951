#!/usr/bin/env bash
# Set up (if needed), lint, and run the whole test suite. Exits non-zero on any failure,
# including "no tests collected" (pytest's exit code 5).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
# --cov: branch coverage of the layers in pyproject.toml's [tool.coverage.run] (issue #40);
# the table of their missed branches is printed after the tests
.venv/bin/python -m pytest -p no:cacheprovider --cov --cov-report=term-missing:skip-covered "$@"
