"""Example graph: temperature sensors -> per-sensor moving average -> alerts on sudden change -> file.

    riverbed run examples/sensors.py -p sensors=200 -p seconds=5 -p out=out/alerts.jsonl

* ``sensors`` simulated sensors each report a temperature ``rate`` times a second
  (a random walk with the odd jump), paced on the runtime's clock;
* ``average``: a per-sensor ``sliding, count(10), count(5)`` window; every 5
  readings it submits the average of the last 10;
* ``alerts``: a per-sensor ``tumbling, delta(avg, 1.5)`` window over those
  averages: when a sensor's average has moved more than 1.5 degrees away from
  where the window started, the window tumbles and an alert names the span;
* ``file``: alerts as JSON lines, flushed on each window mark and at the end.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from riverbed.graph import Graph, Operator, Punct, Schema, Source
from riverbed.operators import FileSink
from riverbed.windows import EventType, StreamWindowEvent

NS = 1_000_000_000

READING = Schema(sensor="rstring", temp="float64", ts="timestamp")
AVERAGE = Schema(sensor="rstring", avg="float64", ts="timestamp")
ALERT = Schema(sensor="rstring", start="float64", end="float64", readings="int64", ts="timestamp")


class Sensors(Source):
    """Readings from simulated sensors, ``rate`` rounds a second for ``seconds`` seconds."""

    replayable = True

    def __init__(self, sensors: int, rate: float, seconds: float, seed: int) -> None:
        self.sensors, self.rate, self.seconds, self.seed = sensors, rate, seconds, seed

        self.round = 0
        self.origin: int | None = None  # the time of round 0: a restart goes on from it
        self.rng = random.Random(seed)
        self.temps = [20.0 + self.rng.uniform(-2, 2) for _ in range(sensors)]

    async def run(self) -> None:
        rng, temps = self.rng, self.temps
        names = [f"sensor-{i:04d}" for i in range(self.sensors)]
        ctx: Any = self.context
        step = int(NS / self.rate)
        if self.origin is None:  # (a checkpoint without it, of an older riverbed: from now)
            self.origin = ctx.now() - self.round * step
        rounds = int(self.seconds * self.rate)
        while self.round < rounds:
            if ctx.stopping:
                return
            now = self.origin + self.round * step
            await ctx.sleep_until(now)
            for i, name in enumerate(names):
                temps[i] += rng.gauss(0, 0.05) + (rng.choice((-3, 3)) if rng.random() < 0.002 else 0)
                self.submit({"sensor": name, "temp": round(temps[i], 3), "ts": now})
            self.round += 1

    def snapshot(self) -> Any:
        """Replayable: the round to produce next, when round 0 was (so that a restart stamps
        the next round where an uninterrupted run would), the temperatures and the generator's
        state."""
        version, internal, gauss = self.rng.getstate()
        return {"round": self.round, "origin": self.origin, "temps": self.temps,
                "rng": [version, list(internal), gauss]}

    def restore(self, state: Any) -> None:
        if state is None:
            return
        self.round = state["round"]
        self.origin = state.get("origin")
        self.temps = list(state["temps"])
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))


class MovingAverage(Operator):
    """Average of the sliding window's contents on each trigger."""

    def on_window_event(self, event: StreamWindowEvent[Any], port: int) -> None:
        if event.type is EventType.TRIGGER and event.tuples:
            tuples = event.tuples
            avg = sum(t["temp"] for t in tuples) / len(tuples)
            self.submit({"sensor": event.partition, "avg": round(avg, 3), "ts": tuples[-1]["ts"]})


class ChangeAlert(Operator):
    """An alert when a delta window tumbles: the arriving average is more than the delta away
    from where the window began (SPL raises the EVICTION before that tuple's INSERTION)."""

    window_punctuation = "generating"

    def __init__(self) -> None:
        self.tumbled: dict[Any, tuple[float, int]] = {}

    def on_window_event(self, event: StreamWindowEvent[Any], port: int) -> None:
        if event.type is EventType.EVICTION and event.tuples:
            self.tumbled[event.partition] = (event.tuples[0]["avg"], len(event.tuples))
        elif event.type is EventType.INSERTION and event.partition in self.tumbled:
            start, count = self.tumbled.pop(event.partition)
            arriving = event.tuples[0]
            self.submit({"sensor": event.partition, "start": start, "end": arriving["avg"],
                         "readings": count + 1, "ts": arriving["ts"]})
            self.submit_punct(Punct.WINDOW)

    def snapshot(self) -> Any:
        return [[k, v[0], v[1]] for k, v in self.tumbled.items()]

    def restore(self, state: Any) -> None:
        self.tumbled = {k: (start, count) for k, start, count in state or []}


def _jsonl(path: str) -> FileSink:
    """JSON lines, flushed on each window mark (FileSink's default), into a directory made now."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return FileSink(path, format="json")


def build(params: dict[str, Any]) -> Graph:
    g = Graph("sensors", params)
    readings = g.source("sensors", Sensors(int(params.get("sensors", 200)),
                                           float(params.get("rate", 50)),
                                           float(params.get("seconds", 5)),
                                           int(params.get("seed", 7))), schema=READING)
    averages = g.operator("average", MovingAverage(),
                          [readings.window("sliding, count(10), count(5), partitioned",
                                           partition_by="sensor")], [AVERAGE])
    alerts = g.operator("alerts", ChangeAlert(),
                        [averages.window("tumbling, delta(avg, 1.5), partitioned",
                                         partition_by="sensor")], [ALERT])
    g.sink("file", _jsonl(str(params.get("out", "out/alerts.jsonl"))), [alerts])
    return g
