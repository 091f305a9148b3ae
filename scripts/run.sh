#!/usr/bin/env bash
# The README's main-job command: set up, then run the sensor demo end to end over MQTT:
# a local broker (mosquitto if installed, else the embedded amqtt in a child process, with a
# warning listing its gaps), simulated sensors publishing batches to sensors/<site>/temp,
# riverbed ingesting them with the sensors' own timestamps as event time, 10 s panes every
# 5 s per sensor (average, max; late readings per the timeInterval rules), alerts to
# out/alerts.jsonl and pane results to out/panes.jsonl, with the live status view.
# It ends on its own after `seconds` (default 20); then the broker is stopped.
# Extra arguments go to `riverbed run`, e.g. scripts/run.sh -p seconds=30 -p sensors=50.
# The previous (broker-less) sensor job is still there: .venv/bin/riverbed run examples/sensors.py
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh        # also installs amqtt, the embedded broker used when mosquitto is missing
scripts/install_broker.sh   # mosquitto, where root and apt-get allow
exec .venv/bin/python -m riverbed.mqtt.demo --script examples/sensors_mqtt.py -- "$@"
