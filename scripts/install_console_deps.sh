#!/bin/sh
# Install what the console's tests need, if missing: Graphviz's dot (the layout of
# `riverbed graph` and `riverbed run --console`) and Debian's Chromium, which
# tests/test_console_browser.py drives through Playwright (Playwright's own browser
# download is never used). Needs root and apt-get; otherwise it says so and exits 0
# (the browser tests then skip; CI runs as root, so there they run).
set -eu
missing=""
command -v dot >/dev/null 2>&1 || missing="$missing graphviz"
command -v chromium >/dev/null 2>&1 || missing="$missing chromium"
if [ -z "$missing" ]; then
    echo "console deps: dot and chromium already installed"
    exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    # shellcheck disable=SC2086  # the list is one word per package
    if apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null; then
        echo "console deps: installed$missing"
    else  # (offline: the tests that need them skip; the caller goes on)
        echo "console deps: apt-get failed,$missing not installed; the browser tests will skip"
    fi
else
    echo "console deps:$missing not installed and cannot install (needs root and apt-get);" \
         "the browser tests will skip and riverbed graph --format svg will say what to install"
fi
