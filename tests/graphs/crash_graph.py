"""The crash-test graph: FileSource -> Throttle -> windowed sums -> stateful Custom -> FileSink.

Run by tests/test_crash_recovery.py as `riverbed run` subprocesses that are killed with
SIGKILL at random instants and restarted from their checkpoints; the transactional sink's
file must end byte-identical to an uninterrupted run.
"""

from __future__ import annotations

from typing import Any

from riverbed.graph import Graph, Operator, Schema
from riverbed.operators import Custom, FileSink, FileSource, Throttle
from riverbed.windows import EventType, StreamWindowEvent

READING = Schema(seq="int64", sensor="int64", value="int64")
SUM = Schema(sensor="int64", first="int64", last="int64", total="int64")
RUNNING = Schema(sensor="int64", first="int64", last="int64", total="int64", running="int64")


class WindowSums(Operator):
    """Per sensor, the sum of every 7 readings (a partitioned tumbling count window)."""

    window_events = frozenset({EventType.EVICTION})

    def on_window_event(self, event: StreamWindowEvent[Any], port: int) -> None:
        tuples = event.tuples
        if tuples:
            self.submit({"sensor": event.partition, "first": tuples[0]["seq"],
                         "last": tuples[-1]["seq"], "total": sum(t["value"] for t in tuples)})


def running_total(op: Custom, tup: Any, port: int) -> None:
    totals = op.state
    key = str(tup["sensor"])
    totals[key] = totals.get(key, 0) + tup["total"]
    op.submit({**tup, "running": totals[key]})


def build(params: dict[str, Any]) -> Graph:
    g = Graph("crash")
    readings = g.source("read", FileSource(params["input"], format="csv", schema=READING),
                        schema=READING)
    paced = g.operator("pace", Throttle(float(params.get("rate", 20000))), [readings], [READING])
    sums = g.operator("sums", WindowSums(), [paced.window("tumbling, count(7), partitioned",
                                                          partition_by="sensor")], [SUM])
    running = g.operator("running", Custom(running_total, state={}), [sums], [RUNNING])
    g.sink("write", FileSink(params["out"], format="csv", transactional=True), [running])
    return g
