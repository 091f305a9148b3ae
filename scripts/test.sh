#!/usr/bin/env bash
# The README's test command: set up, lint, type-check, run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
.venv/bin/ruff check riverbed tests bench examples
.venv/bin/mypy
exec .venv/bin/python -m pytest "$@"
