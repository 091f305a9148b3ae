"""Example graph: per-sensor panes computed in a parallel region, a channel per core.

    riverbed run examples/parallel_panes.py -p width=2 -p sensors=200 -p seconds=30 -p out=out/panes.csv

* ``readings``: ``sensors`` simulated sensors, each reporting ``rate`` times a second for
  ``seconds`` seconds, stamped with event time ``ts``, paced on the runtime's clock (in the
  job's process);
* ``panes``, inside ``with g.parallel(width, partition_by="sensor")``: an Aggregate over a
  per-sensor ``timeInterval, intervalDuration(10), partitioned`` window, one row per sensor
  and 10 s of event time (readings, average and maximum temperature). It runs as ``width``
  channels, each in a worker process (at most one per core; ``-p processes=N`` says
  otherwise). A sensor's readings all reach one channel, in order, so every pane is the one
  width 1 computes: only the order in which channels' rows reach the file can differ;
* ``file``: the panes as CSV (sensor, pane start in ns, readings, average, maximum).

``width`` defaults to the CPU count; ``riverbed graph examples/parallel_panes.py`` draws the
region, and the status view shows its channels and worker processes.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from riverbed.graph import Graph, Schema, Source
from riverbed.operators import Aggregate, Average, Count, FileSink, IntervalStart, Max

NS = 1_000_000_000

READING = Schema(sensor="rstring", temp="float64", ts="timestamp")


class Sensors(Source):
    """A random walk per sensor, ``rate`` rounds a second; replayable (its state: the round)."""

    replayable = True

    def __init__(self, sensors: int, rate: float, seconds: float, seed: int) -> None:
        self.sensors, self.rate, self.seconds, self.seed = sensors, rate, seconds, seed
        self.round = 0
        self.origin: int | None = None  # the time of round 0: a restart goes on from it

    async def run(self) -> None:
        ctx: Any = self.context
        names = [f"sensor-{i:04d}" for i in range(self.sensors)]
        step, rounds = int(NS / self.rate), int(self.seconds * self.rate)
        if self.origin is None:  # (a checkpoint of an older riverbed held the round alone)
            self.origin = ctx.now() - self.round * step
        while self.round < rounds and not ctx.stopping:
            now = self.origin + self.round * step
            await ctx.sleep_until(now)
            rng = random.Random(self.seed * 1_000_003 + self.round)  # a round's values from its number
            for name in names:
                self.submit({"sensor": name, "temp": round(20 + rng.gauss(0, 2), 3), "ts": now})
            self.round += 1

    def snapshot(self) -> Any:
        """The round to produce next and when round 0 was: a restart stamps the next round
        where an uninterrupted run would (the restored clock is the checkpoint's time, which
        the last round produced had already taken)."""
        return {"round": self.round, "origin": self.origin}

    def restore(self, state: Any) -> None:
        if isinstance(state, dict):
            self.round, self.origin = state["round"], state["origin"]
        else:  # a checkpoint of an older riverbed: the round alone
            self.round = state or 0


def build(params: dict[str, Any]) -> Graph:
    p: dict[str, Any] = {"sensors": 100, "rate": 10, "seconds": 30, "seed": 1,
                         "out": "out/panes.csv"} | params
    g = Graph("parallel_panes", params)
    readings = g.source("readings", Sensors(int(p["sensors"]), float(p["rate"]), float(p["seconds"]),
                                            int(p["seed"])),
                        schema=READING, event_time="ts")
    width = int(p["width"]) if "width" in p else None  # None: the CPU count
    with g.parallel(width, partition_by="sensor"):
        panes = g.operator("panes", Aggregate({"start": IntervalStart(), "readings": Count(),
                                               "avg": Average("temp"), "max": Max("temp")},
                                              copy=("sensor",)),
                           [readings.window("timeInterval, intervalDuration(10), partitioned",
                                            partition_by="sensor")], [None])
    Path(str(p["out"])).parent.mkdir(parents=True, exist_ok=True)
    g.sink("file", FileSink(str(p["out"]), format="csv"), [panes])
    return g
