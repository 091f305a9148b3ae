#!/usr/bin/env bash
# Create bench/.venv-bytewax (a virtualenv of its own, never riverbed's) with Bytewax in it.
#
# Bytewax 0.21.1 is the newest release with wheels for CPython 3.11 on Linux x86-64.
# Idempotent: does nothing when the venv already imports that version.
# Environment: PYTHON (default python3, must be 3.11), BYTEWAX_VERSION (default 0.21.1).
set -euo pipefail
cd "$(dirname "$0")"
PYTHON="${PYTHON:-python3}"
VERSION="${BYTEWAX_VERSION:-0.21.1}"
VENV=.venv-bytewax

if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" - "$VERSION" <<'EOF' 2>/dev/null
import sys
from importlib.metadata import version
sys.exit(0 if version("bytewax") == sys.argv[1] else 1)
EOF
then
    echo "bytewax $VERSION already installed in bench/$VENV"
    exit 0
fi

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
    echo "setup_bytewax: $PYTHON is $("$PYTHON" -V 2>&1), expected 3.11 (set PYTHON=...)" >&2
    exit 1
fi
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "bytewax==$VERSION"
"$VENV/bin/python" -c 'from importlib.metadata import version; print("installed bytewax", version("bytewax"))'
