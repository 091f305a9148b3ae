"""``python -m riverbed.mqtt.demo``: the MQTT sensor demo with its own broker.

Starts a local broker with `start_broker` (mosquitto if installed, else the
embedded amqtt in a child process, with a warning listing its gaps), runs
``riverbed run SCRIPT -p host=... -p port=... [ARGS...]`` as a child process
(live status view included), then stops the broker, whatever the outcome.
Arguments after the options go to ``riverbed run``::

    python -m riverbed.mqtt.demo -- -p seconds=30 -p sensors=50
    python -m riverbed.mqtt.demo --broker amqtt

Ctrl-C reaches ``riverbed run`` (it drains the graph; a second one aborts);
this process waits for it, then stops the broker. SIGINT, SIGTERM and SIGHUP sent to
this process alone are passed on to ``riverbed run``. The exit code is
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
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # until the child is waited on
        try:
            child = subprocess.Popen(cmd)
            rc = _wait_passing_signals(child)
        finally:
            signal.signal(signal.SIGINT, previous)
    return rc


_PASSED = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
_FROM_THE_TERMINAL = 0x80  # si_code SI_KERNEL: a tty's Ctrl-C (or hangup) to its foreground group


def _wait_passing_signals(child: subprocess.Popen[bytes]) -> int:
    """Wait for ``child``, passing it the stop signals this process gets. A Ctrl-C at a
    terminal reaches both processes already (one process group): passed on, it would be the
    child's second, which aborts. So a SIGINT is passed only when it was sent to this process
    alone (``kill -INT``, a process manager): the signal's origin (``si_code``) tells which.
    The signals are blocked and taken with `signal.sigtimedwait`, which gives that origin, a
    Python handler does not; SIGCHLD wakes the wait when the child ends."""
    waited = _PASSED | {signal.SIGCHLD}
    signal.pthread_sigmask(signal.SIG_BLOCK, waited)
    handlers = {s: signal.signal(s, signal.default_int_handler) for s in _PASSED}  # none ignored:
    try:  # an ignored signal is dropped even while blocked
        while child.poll() is None:
            info = signal.sigtimedwait(waited, 1.0)  # (the timeout: a SIGCHLD missed is not waited on)
            if info is None or info.si_signo == signal.SIGCHLD:
                continue
            if info.si_code == _FROM_THE_TERMINAL and info.si_signo != signal.SIGTERM:
                continue  # the child had it from the terminal too
            child.send_signal(info.si_signo)
        return child.returncode
    finally:
        for s, handler in handlers.items():
            signal.signal(s, handler)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, waited)


if __name__ == "__main__":
    raise SystemExit(main())
