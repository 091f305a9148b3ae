"""The event-time crash graph: FileSource (event time ``ts``) -> Delay -> Throttle ->
timeInterval panes per sensor (Aggregate) -> sliding averages of the panes -> FileSink.

Tuples and watermarks are held by Delay and Throttle on their way (they must leave in order),
panes complete on watermarks, and the sliding window keeps state across checkpoints. Run by
tests/test_crash_recovery.py as `riverbed run` subprocesses stopped with SIGKILL or SIGTERM at
random instants and restarted; the transactional sink's file must end byte-identical to an
uninterrupted run.
"""

from __future__ import annotations

from typing import Any

from riverbed.graph import Graph, Schema
from riverbed.operators import (
    Aggregate,
    Average,
    Count,
    Delay,
    FileSink,
    FileSource,
    IntervalStart,
    Last,
    Max,
    Sum,
    Throttle,
)

READING = Schema(seq="int64", sensor="int64", value="int64", ts="int64")
PANE = Schema(sensor="int64", start="int64", n="int64", total="int64", last="int64")
SMOOTH = Schema(sensor="int64", start="int64", n="int64", avg="float64", peak="int64")


def build(params: dict[str, Any]) -> Graph:
    g = Graph("crash-eventtime")
    readings = g.source("read", FileSource(params["input"], format="csv", schema=READING),
                        schema=READING, event_time="ts", resolution="ms", minimum_gap=0.05)
    delayed = g.operator("delay", Delay(float(params.get("delay", 0.002))), [readings], [READING])
    paced = g.operator("pace", Throttle(float(params.get("rate", 20000))), [delayed], [READING])
    panes = g.operator("panes", Aggregate(
        {"start": IntervalStart(), "n": Count(), "total": Sum("value"), "last": Max("seq")},
        copy=("sensor",)),
        [paced.window("timeInterval, intervalDuration(1), creationPeriod(0.5), discardAge(0.3), "
                      "partitioned", partition_by="sensor")], [PANE])
    smooth = g.operator("smooth", Aggregate(
        {"sensor": Last("sensor"), "start": Last("start"), "n": Sum("n"),
         "avg": Average(lambda t: float(t["total"])), "peak": Max("total")}),
        [panes.window("sliding, count(4), count(1), partitioned", partition_by="sensor")], [SMOOTH])
    g.sink("write", FileSink(params["out"], format="csv", transactional=True), [smooth])
    return g
