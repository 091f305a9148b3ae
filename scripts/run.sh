#!/usr/bin/env bash
# The README's main-job command: set up, then run the example sensor graph on the asyncio
# runtime (simulated sensors -> per-sensor moving average -> change alerts -> out/alerts.jsonl)
# with the live status view. Extra arguments go to `riverbed run`, e.g. -p seconds=30.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
exec .venv/bin/riverbed run examples/sensors.py "$@"
