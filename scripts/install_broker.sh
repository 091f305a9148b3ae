#!/bin/sh
# Install the mosquitto broker that tests/test_mqtt.py starts as a subprocess, if it is missing.
# Needs root and apt-get; otherwise it says so and exits 0 (the MQTT tests then skip; CI runs
# as root, so there they run).
set -eu
if command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ]; then
    echo "mosquitto: already installed"
    exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    # A failing apt-get (offline, a broken mirror) must not end the caller (scripts/run.sh runs
    # under set -e): the main job then falls back to its embedded broker and says so.
    if apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mosquitto >/dev/null; then
        # Debian starts a system broker on 127.0.0.1:1883; the tests use their own on a free port.
        if command -v systemctl >/dev/null 2>&1; then systemctl disable --now mosquitto >/dev/null 2>&1 || true; fi
        echo "mosquitto: installed ($(/usr/sbin/mosquitto -h 2>/dev/null | head -1))"
    else
        echo "mosquitto: apt-get failed, not installed; the main job falls back to an embedded" \
             "broker and the MQTT tests will skip"
    fi
else
    echo "mosquitto: not installed and cannot install it (needs root and apt-get);" \
         "the MQTT tests will skip"
fi
