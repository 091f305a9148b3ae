"""The chaos graph: a paced, replayable reader of a CSV file -> Chaos (faults injected at random
tuples) -> windowed sums per sensor -> stateful running totals -> transactional FileSink.

The job's region heals (its source replays): each injected fault resets it in place; killed
processes are restarted by ``riverbed run --restarts`` and resume from their checkpoints.
``-p fault_rate=P`` is the chance of a fault per tuple; ``-p seed=S`` seeds it, together
with the process's restart count (RIVERBED_RESTARTS) and the faults it raised already, so a
replayed tuple does not fail again the same way. Run by tests/test_chaos.py and bench/chaos.py.
"""

from __future__ import annotations

import os
import random
from typing import Any

from riverbed.graph import Graph, Operator, Schema, Source
from riverbed.operators import Custom, FileSink
from riverbed.windows import EventType, StreamWindowEvent, WindowType

READING = Schema(seq="int64", sensor="int64", value="int64")
SUM = Schema(sensor="int64", first="int64", last="int64", total="int64")
RUNNING = Schema(sensor="int64", first="int64", last="int64", total="int64", running="int64")


class PacedReadings(Source):
    """The file's readings, ``rate`` a second in chunks of 50 on the job's clock; its state is
    the line it has reached, so it replays exactly from a checkpoint."""

    replayable = True

    def __init__(self, path: str, rate: float) -> None:
        self.path = path
        self.rate = rate
        self.line = 0
        self._rows: list[list[str]] | None = None

    async def run(self) -> None:
        ctx = self.context
        if self._rows is None:  # read once: a region reset restarts run(), which must be quick
            with open(self.path) as f:
                self._rows = [line.split(",") for line in f.read().splitlines()]
        rows = self._rows
        step = round(50 / self.rate * 1e9)
        due = ctx.now()
        while self.line < len(rows) and not ctx.stopping:
            for seq, sensor, value in rows[self.line:self.line + 50]:
                self.submit({"seq": int(seq), "sensor": int(sensor), "value": int(value)})
            self.line = min(self.line + 50, len(rows))
            due += step
            await ctx.sleep_until(due)

    def snapshot(self) -> Any:
        return self.line

    def restore(self, state: Any) -> None:
        self.line = int(state)


class InjectedFault(RuntimeError):
    """What Chaos raises: a stand-in for any failure inside the region."""


class Chaos(Operator):
    """Passes tuples on; fails on a random one now and then (a transient fault)."""

    def __init__(self, rate: float, seed: int) -> None:
        self.rate = rate
        restarts = int(os.environ.get("RIVERBED_RESTARTS", "0") or 0)
        self.rng = random.Random(seed * 1_000_003 + restarts)
        self.raised = 0

    def setup(self) -> None:
        self.faults = self.context.counter("faults")

    def on_tuple(self, tup: Any, port: int) -> None:
        if self.rate and self.rng.random() < self.rate:
            self.raised += 1
            self.faults.inc()
            raise InjectedFault(f"fault {self.raised} at reading {tup['seq']}")
        self.submit(tup)


class WindowSums(Operator):
    """Per sensor, the sum of a window's readings: each flush of a tumbling window, each trigger
    of a sliding one (``-p window=...``; default ``tumbling, count(7), partitioned``)."""

    window_events = frozenset({EventType.EVICTION, EventType.TRIGGER})

    def on_window_event(self, event: StreamWindowEvent[Any], port: int) -> None:
        tuples = event.tuples
        sliding = event.window.type is WindowType.SLIDING
        if tuples and (event.type is EventType.TRIGGER) == sliding:
            self.submit({"sensor": event.partition, "first": tuples[0]["seq"],
                         "last": tuples[-1]["seq"], "total": sum(t["value"] for t in tuples)})


def running_total(op: Custom, tup: Any, port: int) -> None:
    totals = op.state
    key = str(tup["sensor"])
    totals[key] = totals.get(key, 0) + tup["total"]
    op.submit({**tup, "running": totals[key]})


def build(params: dict[str, Any]) -> Graph:
    g = Graph("chaos")
    readings = g.source("read", PacedReadings(params["input"], float(params.get("rate", 20000))),
                        schema=READING)
    faulty = g.operator("chaos", Chaos(float(params.get("fault_rate", 0.0)), int(params.get("seed", 1))),
                        [readings], [READING])
    clause = str(params.get("window", "tumbling, count(7), partitioned"))
    sums = g.operator("sums", WindowSums(), [faulty.window(clause, partition_by="sensor")], [SUM])
    running = g.operator("running", Custom(running_total, state={}), [sums], [RUNNING])
    g.sink("write", FileSink(params["out"], format="csv", transactional=True), [running])
    return g
