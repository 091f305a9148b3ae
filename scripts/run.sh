#!/usr/bin/env bash
# The README's main-job command: set up, then run the demo job.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
exec .venv/bin/riverbed demo "$@"
