"""What the Spark benchmarks measure alike: CPU seconds used by this process and everything it
started (the JVM, Spark's Python workers, the bridge's feeder processes), a measure of a Spark
run that other jobs on the machine disturb far less than its wall time; the ratio of those; and
how each keyed stage's tasks spread over the executor cores."""

from __future__ import annotations

import os
import statistics
import threading
from typing import Any


class CpuMeter:
    """CPU seconds this process and its descendants spend inside a ``with`` block.

    ``seconds`` is None without psutil. A thread samples the process tree every ``interval``
    seconds, and each process counts the CPU it was last seen using, less what it had used
    at the start. A start/end difference of the tree's totals would miss processes that exit
    during the block: Spark's Python daemon ignores SIGCHLD, so a worker that exits leaves
    no trace in any parent's counts, and the difference then loses the worker's whole life,
    earlier runs included (one bridge run read 16.8 s of CPU that way). Each process counts
    its own time only, as its reaped children are sampled themselves. What is still lost is
    each exiting process's last interval, and processes that live less than one interval.
    """

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self.seconds: float | None = None
        # the same CPU seconds by kind of process (`_kind`): where a bridge run's CPU went
        self.by_kind: dict[str, float] = {}
        self._start: dict[tuple[int, float], float] = {}
        self._last: dict[tuple[int, float], float] = {}
        self._kinds: dict[tuple[int, float], str] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> CpuMeter:
        try:
            import psutil  # type: ignore[import-untyped]  # noqa: F401
        except ImportError:
            return self
        self._start = self._sample()
        self._last = dict(self._start)
        self._thread = threading.Thread(target=self._run, name="cpu-meter", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._last.update(self._sample())
        self.seconds = sum(v - self._start.get(k, 0.0) for k, v in self._last.items())
        for k, v in self._last.items():
            kind = self._kinds.get(k, "other")
            self.by_kind[kind] = self.by_kind.get(kind, 0.0) + v - self._start.get(k, 0.0)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._last.update(self._sample())

    def _sample(self) -> dict[tuple[int, float], float]:
        import psutil

        me = psutil.Process(os.getpid())
        seen: dict[tuple[int, float], float] = {}
        for p in [me, *me.children(recursive=True)]:
            try:
                with p.oneshot():
                    t = p.cpu_times()
                    key = (p.pid, p.create_time())
                    seen[key] = t.user + t.system
                    if key not in self._kinds:
                        self._kinds[key] = "driver" if p.pid == me.pid else _kind(p.cmdline())
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return seen

    def split(self) -> str:
        """``by_kind`` as one line, the largest first."""
        return ", ".join(f"{kind} {s:.1f}" for kind, s in sorted(self.by_kind.items(), key=lambda kv: -kv[1])
                         if s >= 0.05)


def _kind(cmdline: list[str]) -> str:
    """What a process under the benchmark is, by its command line: Spark's JVM, a Python worker
    (or PySpark's daemon that forks them), the bridge's fork server and feeders (forks of it
    keep its command line), or something else (a short-lived helper)."""
    text = " ".join(cmdline)
    if "java" in (os.path.basename(cmdline[0]) if cmdline else ""):
        return "jvm"
    if "pyspark" in text:
        return "python workers"
    if "riverbed.spark_bridge" in text:
        return "feeders"
    return "other"


def cpu_ratio_line(cpu: dict[str, list[float]]) -> str | None:
    """Median CPU seconds of the ``spark`` and ``bridge`` runs and readings per CPU second,
    bridge / spark (None without CPU figures)."""
    if not (cpu["spark"] and cpu["bridge"]):
        return None
    spark, bridge = statistics.median(cpu["spark"]), statistics.median(cpu["bridge"])
    return (f"CPU seconds, medians: spark {spark:.1f}, bridge {bridge:.1f}: readings per CPU "
            f"second, bridge / spark {spark / bridge:.2f}x")


def spread_note(d: Any) -> str:
    """Each keyed stage's tasks: how many, over how many partitions and Python workers, the
    share of the stage's busy time with two of its tasks running at once, and the tasks' wall
    time inside the group function (taking their rows, in the hosted operators)."""
    parts = []
    for n, s in d.stage_spread().items():
        parts.append(f"stage {n}: {s['tasks']} tasks, {s['groups']} groups, {s['partitions']} partitions, "
                     f"{s['workers']} workers, 2 running {s['overlap']:.0%} of its busy time, "
                     f"tasks {s['task_s']:.1f} s (rows in {s['read_s']:.1f}, hosted {s['hosted_s']:.1f})")
    return "; ".join(parts) or "no keyed stage"
