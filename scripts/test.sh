#!/usr/bin/env bash
# The README's test command: set up (venv, packages, broker), lint, type-check, run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
scripts/install_broker.sh  # mosquitto for tests/test_mqtt.py (started there on a free port)
scripts/check_java.sh      # Java 17+ for the Spark bridge tests (tests/spark, local mode)
scripts/install_console_deps.sh  # Graphviz's dot and Chromium for tests/test_console_*.py
.venv/bin/ruff check riverbed tests bench examples
.venv/bin/mypy
exec .venv/bin/python -m pytest "$@"
