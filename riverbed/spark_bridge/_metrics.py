"""What ran where: Spark accumulators the bridge's tasks report to, and a summary of them.

Spark's own metrics count a stage's tasks; they do not say which key group
(or which part of a file source) a task handled, nor in which Python worker.
Each keyed group's task adds ``(stage, group, Spark stage id, partition,
worker pid, start ns, end ns)`` to a `list_accumulator`; `spread` sums that up per
keyed stage: how many tasks, partitions and worker processes (local[N] runs
one Python worker per concurrent task) and how much of the stage's busy time
had two or more of its tasks running at once.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from typing import Any

__all__ = ["list_accumulator", "record_task", "spread"]


def list_accumulator(spark: Any) -> Any:
    """A Spark accumulator of a list that tasks extend."""
    from pyspark.accumulators import AccumulatorParam

    class _Log(AccumulatorParam):  # type: ignore[type-arg]
        def zero(self, value: Any) -> list[Any]:
            return []

        def addInPlace(self, a: list[Any], b: list[Any]) -> list[Any]:
            a.extend(b)
            return a

    return spark.sparkContext.accumulator([], _Log())


def record_task(log: Any, stage: int, group: int, started_ns: int, *, read_ns: int = 0,
                hosted_ns: int = 0) -> None:
    """A keyed group's task ran from ``started_ns`` until now (wall clock, ns), of which
    ``read_ns`` taking its rows from Spark and ``hosted_ns`` in the hosted operators."""
    if log is None:
        return
    from pyspark import TaskContext

    task = TaskContext.get()
    ids = (task.stageId(), task.partitionId()) if task is not None else (-1, -1)
    log.add([(stage, group, *ids, os.getpid(), started_ns, time.time_ns(), read_ns, hosted_ns)])


def spread(entries: list[tuple[int, ...]]) -> dict[int, dict[str, Any]]:
    """Per keyed stage: tasks, key groups, Spark partitions and Python worker processes that ran
    them, and the share of the stage's busy time during which two or more of its tasks ran."""
    by_stage: dict[int, list[tuple[int, ...]]] = defaultdict(list)
    for e in entries:
        by_stage[e[0]].append(e)
    out: dict[int, dict[str, Any]] = {}
    for stage, rows in sorted(by_stage.items()):
        marks = sorted([(r[5], 1) for r in rows] + [(r[6], -1) for r in rows])
        running, last, busy, both = 0, 0, 0, 0
        for at, step in marks:
            if running:
                busy += at - last
                if running >= 2:
                    both += at - last
            running += step
            last = at
        out[stage] = {"tasks": len(rows), "groups": len({r[1] for r in rows}),
                      "partitions": len({r[3] for r in rows}), "workers": len({r[4] for r in rows}),
                      "overlap": both / busy if busy else 0.0,
                      "task_s": sum(r[6] - r[5] for r in rows) / 1e9,
                      "read_s": sum(r[7] for r in rows if len(r) > 7) / 1e9,
                      "hosted_s": sum(r[8] for r in rows if len(r) > 8) / 1e9}
    return out
