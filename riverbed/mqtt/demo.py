"""``python -m riverbed.mqtt.demo``: the MQTT sensor demo with its own broker.

Starts a local broker with `start_broker` (mosquitto if installed, else the
embedded amqtt in a child process, with a warning listing its gaps), runs
``riverbed run SCRIPT -p host=... -p port=... [ARGS...]`` as a child process
(live status view included), then stops the broker, whatever the outcome.
Arguments after the options go to ``riverbed run``::

    python -m riverbed.mqtt.demo -- -p seconds=30 -p sensors=50
    python -m riverbed.mqtt.demo --broker amqtt

Ctrl-C reaches ``riverbed run`` (it drains the graph; a second one aborts);
this process waits for it, then stops the broker. ``riverbed run`` runs in a
process group of its own, and this process passes it SIGINT, SIGTERM and
SIGHUP (as SIGTERM) once each, whoever sent them (a terminal, ``kill`` of
this process or of its group). The exit code is
``riverbed run``'s, or 2 when no broker can be started.
"""

from __future__ import annotations

import argparse
import logging
import signal
import subprocess
import sys
from collections.abc import Sequence

from ._broker import BrokerUnavailable, start_broker

__all__ = ["main"]

DEFAULT_SCRIPT = "examples/sensors_mqtt.py"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m riverbed.mqtt.demo", description=__doc__.split("\n")[0])
    parser.add_argument("--script", default=DEFAULT_SCRIPT, help=f"graph script (default {DEFAULT_SCRIPT})")
    parser.add_argument("--broker", choices=("auto", "mosquitto", "amqtt"), default="auto",
                        help="auto: mosquitto if installed, else the embedded amqtt")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: a free port")
    parser.add_argument("run_args", nargs=argparse.REMAINDER, help="passed to riverbed run")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    extra = list(args.run_args)
    if extra and extra[0] == "--":
        extra = extra[1:]
    try:
        broker = start_broker(args.host, args.port,
                              prefer=None if args.broker == "auto" else args.broker)
    except BrokerUnavailable as exc:
        print(f"riverbed demo: {exc}", file=sys.stderr)
        return 2
    with broker:
        print(f"riverbed demo: {broker.kind} broker on {broker.host}:{broker.port}"
              f"{' (embedded fallback, see the warning above)' if broker.kind == 'amqtt' else ''}",
              file=sys.stderr, flush=True)
        cmd = [sys.executable, "-m", "riverbed", "run", args.script,
               "-p", f"host={broker.host}", "-p", f"port={broker.port}", *extra]
        return _run_passing_signals(cmd)


# What this process passes on, as what: a hangup (the terminal closed) is a stop, as SIGTERM
# (`riverbed run` drains on SIGINT and SIGTERM; a SIGHUP would end it without draining).
_PASSED = {signal.SIGINT: signal.SIGINT, signal.SIGTERM: signal.SIGTERM,
           signal.SIGHUP: signal.SIGTERM}


def _run_passing_signals(cmd: list[str]) -> int:
    """Run ``cmd`` and wait for it, passing it each stop signal this process gets, once. It
    runs in a process group of its own, so nothing reaches it but what is passed here: a
    terminal's Ctrl-C (sent to the foreground group, this process's), a ``kill -INT`` of this
    process and a ``kill -INT -PGID`` of its group each reach it exactly once (a second signal
    aborts the job: passing on a signal the child also had made one Ctrl-C two). A signal that
    comes before the child exists is passed on once it does."""
    child: subprocess.Popen[bytes] | None = None
    early: list[signal.Signals] = []

    def pass_on(signum: int, frame: object) -> None:
        passed = _PASSED[signal.Signals(signum)]
        if child is None:
            early.append(passed)
        elif child.poll() is None:
            child.send_signal(passed)

    previous = {s: signal.signal(s, pass_on) for s in _PASSED}
    try:
        child = subprocess.Popen(cmd, process_group=0)
        for passed in early:
            child.send_signal(passed)
        return child.wait()  # (a handler runs between the waits; PEP 475 resumes the wait)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


if __name__ == "__main__":
    raise SystemExit(main())
