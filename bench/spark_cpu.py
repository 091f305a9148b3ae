"""CPU seconds used by this process and everything it started (the JVM, Spark's Python workers,
the bridge's feeder processes): a measure of a Spark run that other jobs on the machine
disturb far less than its wall time."""

from __future__ import annotations

import os


def cpu_seconds() -> float | None:
    """User + system CPU of this process and its descendants, reaped children included (None
    without psutil)."""
    try:
        import psutil  # type: ignore[import-untyped]
    except ImportError:
        return None
    me = psutil.Process(os.getpid())
    total = 0.0
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total
