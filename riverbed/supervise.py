"""``riverbed run --restarts N``: the job runs in a process of its own, restarted when it dies.

The command becomes a supervisor: it starts ``riverbed run`` (the same arguments, without
``--restarts``) as a child process and waits. A child killed by a signal (kill -9, the
kernel's out-of-memory killer, a segmentation fault) or ending with exit code 1 (an operator
failed, or a consistent region ran out of reset attempts) is started again, up to N times,
after a backoff that doubles from 0.2 s to 30 s (and starts over after a child that ran
3 s); with ``--checkpoint-dir`` each new process
resumes from the newest good checkpoint, so nothing is lost. A child that drained (0), was
refused (2) or aborted (3), and any child once the supervisor itself was asked to stop, ends
the supervisor with the child's code. The first SIGINT/SIGTERM is passed on to the child,
which stops cleanly; a second is passed on too (the child aborts). The child runs in a
process group of its own, so a signal to the supervisor's group (a Ctrl-C at a terminal,
``kill -- -PGID``) reaches it once, through the supervisor. Under systemd, whose default
KillMode=control-group signals every process of the unit, use ``KillMode=mixed`` (the
supervisor alone gets SIGTERM) so the child is not told twice.

The child learns how often it was restarted from ``RIVERBED_RESTARTS`` (shown by its status
view, logs and metrics).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["RESTARTS_ENV", "SUPERVISOR_ENV", "child_arguments", "end_with_parent", "follow_supervisor",
           "supervise"]

RESTARTS_ENV = "RIVERBED_RESTARTS"
SUPERVISOR_ENV = "RIVERBED_SUPERVISOR"  # the supervisor's pid, in its child's environment
_PR_SET_PDEATHSIG = 1  # prctl(2)


def follow_supervisor() -> None:
    """In a job process the supervisor started: stop (SIGTERM, taken as a stop) when the
    supervisor goes. Its child runs in a process group of its own, so a SIGKILL of the
    supervisor left it running, holding the store's lock: a new supervisor was refused
    (StoreLocked) until the orphan ended. Linux only (prctl); elsewhere nothing changes."""
    # Read once and not passed on: a `riverbed run` this job starts is no child of the
    # supervisor, and took its own parent for a supervisor gone (it stopped at once, exit 0).
    parent = os.environ.pop(SUPERVISOR_ENV, None)
    if parent:
        end_with_parent(int(parent), signal.SIGTERM)


def end_with_parent(parent: int, sig: int) -> None:
    """Have the kernel send this process ``sig`` when its parent (pid ``parent``, the thread
    that forked it) ends; sent at once if it already has. Linux only (prctl); elsewhere
    nothing changes."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it went before prctl: nothing would tell
        os.kill(os.getpid(), sig)
_FIRST_BACKOFF, _MAX_BACKOFF = 0.2, 30.0
_STABLE = 3.0  # a child that ran this long was no crash loop: the backoff starts over
_EXIT_FAILED, _EXIT_INVALID, _EXIT_ABORTED = 1, 2, 3


def child_arguments(argv: Sequence[str]) -> list[str]:
    """The ``riverbed`` arguments for the child: ``argv`` without ``--restarts N``."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == "--restarts":
            skip = True
            continue
        if arg.startswith("--restarts="):
            continue
        out.append(arg)
    return out


def _cause(code: int) -> str:
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def supervise(argv: Sequence[str], restarts: int, log: Any,
              *, backoff: tuple[float, float] = (_FIRST_BACKOFF, _MAX_BACKOFF),
              on_start: Callable[[subprocess.Popen[bytes]], None] | None = None) -> int:
    """Run ``riverbed <argv>`` in child processes, restarting a dead one up to ``restarts``
    times; the exit code of the last child (1 once the restarts are used up)."""
    stop = threading.Event()
    child: subprocess.Popen[bytes] | None = None

    def forward(signum: int, _frame: Any) -> None:
        stop.set()
        if child is not None and child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        attempt = 0
        delay = backoff[0]
        while True:
            env = dict(os.environ, **{RESTARTS_ENV: str(attempt), SUPERVISOR_ENV: str(os.getpid())})
            # Its own process group: a Ctrl-C at a terminal (or a signal to the supervisor's
            # group) reaches the supervisor alone, which passes it on once. In the same group
            # the child got it twice, directly and passed on, and took the second for "abort".
            child = subprocess.Popen([sys.executable, "-m", "riverbed", *argv], env=env,
                                     process_group=0)
            log.info("job process started", pid=child.pid, restarts=attempt)
            if on_start is not None:
                on_start(child)
            started = time.monotonic()
            code = child.wait()
            if stop.is_set() or code in (0, _EXIT_INVALID, _EXIT_ABORTED):
                if not stop.is_set() and code in (_EXIT_INVALID, _EXIT_ABORTED):
                    log.error("job process ended, not restarted", code=code,
                              cause="refused (the script, graph, parameters or checkpoints "
                                    "need a fix; its message says which)" if code == _EXIT_INVALID
                              else "aborted")
                return code if code >= 0 else _EXIT_FAILED
            if attempt >= restarts:
                log.error("job process died, no restarts left", cause=_cause(code), restarts=attempt)
                return _EXIT_FAILED
            if time.monotonic() - started > _STABLE:
                delay = backoff[0]  # it ran a while: this is not a crash loop
            attempt += 1
            log.warning("job process restarted", cause=_cause(code), restart=attempt, of=restarts,
                        backoff_s=delay, hint="it resumes from the newest good checkpoint"
                        if "--checkpoint-dir" in " ".join(argv) else "no --checkpoint-dir: it starts over")
            if stop.wait(delay):
                return _EXIT_FAILED if code != 0 else 0
            delay = min(delay * 2, backoff[1])
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
