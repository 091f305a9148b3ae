"""What the Spark benchmarks measure alike: CPU seconds used by this process and everything it
started (the JVM, Spark's Python workers, the bridge's feeder processes), a measure of a Spark
run that other jobs on the machine disturb far less than its wall time; the ratio of those; and
how each keyed stage's tasks spread over the executor cores."""

from __future__ import annotations

import os
import statistics
from typing import Any


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


def cpu_ratio_line(cpu: dict[str, list[float]]) -> str | None:
    """Median CPU seconds of the ``spark`` and ``bridge`` runs and readings per CPU second,
    bridge / spark (None without CPU figures)."""
    if not (cpu["spark"] and cpu["bridge"]):
        return None
    spark, bridge = statistics.median(cpu["spark"]), statistics.median(cpu["bridge"])
    return (f"CPU seconds, medians: spark {spark:.1f}, bridge {bridge:.1f}: readings per CPU "
            f"second, bridge / spark {spark / bridge:.2f}x")


def spread_note(d: Any) -> str:
    """Each keyed stage's tasks: how many, over how many partitions and Python workers, and the
    share of the stage's busy time with two of its tasks running at once."""
    parts = []
    for n, s in d.stage_spread().items():
        parts.append(f"stage {n}: {s['tasks']} tasks, {s['groups']} groups, {s['partitions']} partitions, "
                     f"{s['workers']} workers, 2 running {s['overlap']:.0%} of its busy time")
    return "; ".join(parts) or "no keyed stage"
