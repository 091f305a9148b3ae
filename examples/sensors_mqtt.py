"""Example graph: the sensor demo end to end over MQTT, in one graph.

    riverbed run examples/sensors_mqtt.py -p host=127.0.0.1 -p port=1883 -p seconds=20

(``scripts/run.sh`` starts a broker and runs this.) Two halves, joined only by the broker:

* **publish**: ``sensors`` simulates ``sensors`` temperature sensors on
  ``sites`` sites, each reporting ``rate`` times a second for ``seconds``
  seconds, stamped with the sensor's own clock (``ts``, ns). A fraction
  ``late`` of the readings is held back 2, 4, 8 or 12 s (a sensor that lost
  its link), then sent with its original stamp: out of order. ``publish``
  (an `MQTTSink`) sends each site's readings of a round as one JSON array to
  ``sensors/<site>/temp`` (batches: one message per site per round).
* **ingest**: ``feed`` (an `MQTTSource`) subscribes to ``sensors/+/temp``;
  the site comes from the topic level. ``ts`` is the **event time**:
  watermarks follow the newest reading minus ``lag`` seconds.
  ``panes``, an `Aggregate` on ``timeInterval, intervalDuration(10),
  creationPeriod(5), discardAge(5), partitioned`` per sensor, outputs each
  10 s pane (every 5 s) once the watermark passes its end (timing
  ON_COMPLETE: average, max, count), and again for each late reading that
  still fits (timing LATE). A reading older than the watermark minus
  discardAge is dropped and counted in the ``late`` column of the status view
  (``tuples_dropped_late`` of the panes port). With ``lag=1``: held 2-4 s is
  on time or late, 8-12 s is dropped.
* ``alerts`` compares each on-time pane with the sensor's previous one: an
  alert ``jump`` when the average moved ``delta`` degrees or more, ``hot``
  when the pane's max reached ``threshold``. Alerts go to ``out``, every pane
  result to ``panes`` (JSON lines).

How it ends: after ``seconds`` the simulated sensors release what they hold
back, and publish one end-of-stream record (sensor ``__end__``) to
``sensors/_end/temp``. The sink publishes it last and, with QoS 1 from one
connection, the broker delivers it to the subscriber after every reading. When
``feed`` sees it, it stops: final punctuation, with the maximum watermark,
flushes the open panes and the graph ends. (Readings published by other
clients after the marker are not waited for; stop it with Ctrl-C otherwise.)
The sensors start publishing only once ``feed`` has subscribed, so that no
QoS 1 reading is published before there is a session to queue it for.
"""

from __future__ import annotations

import asyncio
import heapq
import random
from pathlib import Path
from typing import Any

from riverbed.graph import Graph, Operator, Punct, Schema, Source
from riverbed.mqtt import MQTTSink, MQTTSource
from riverbed.operators import (
    Aggregate,
    Average,
    Count,
    FileSink,
    IntervalEnd,
    IntervalStart,
    Max,
    PaneTimingOf,
)

NS = 1_000_000_000
END = "__end__"  # the end-of-stream record's sensor name
DELAYS = (2, 4, 8, 12)  # seconds a held-back reading waits

READING = Schema(sensor="rstring", site="rstring", temp="float64", ts="timestamp")
WIRE = Schema(sensor="rstring", temp="float64", ts="timestamp")  # the site is the topic level
ALERT = Schema(sensor="rstring", site="rstring", kind="rstring", avg="float64", previous="float64",
               max="float64", start="timestamp", end="timestamp")


class Sensors(Source):
    """Simulated sensors, stamped with their own clock; some readings held back (out of order)."""

    def __init__(self, sensors: int, sites: int, rate: float, seconds: float, *, late: float, seed: int,
                 ready: asyncio.Event | None = None) -> None:
        self.sensors, self.sites, self.rate, self.seconds = sensors, sites, rate, seconds
        self.late, self.ready = late, ready
        self.rng = random.Random(seed)
        self.temps = [20.0 + self.rng.uniform(-2, 2) for _ in range(sensors)]
        self.held_back = 0

    async def run(self) -> None:
        if self.ready is not None:
            await self.ready.wait()  # the subscriber has a session: nothing published is lost
        rng, temps = self.rng, self.temps
        names = [(f"sensor-{i:03d}", f"site{i % self.sites}") for i in range(self.sensors)]
        ctx: Any = self.context
        start = ctx.now()
        step = int(NS / self.rate)
        held: list[tuple[int, int, dict[str, Any]]] = []  # (release time, order, reading)
        order = 0
        for rnd in range(int(self.seconds * self.rate)):
            if ctx.stopping:
                return
            now = start + rnd * step
            await ctx.sleep_until(now)
            while held and held[0][0] <= now:
                self.submit(heapq.heappop(held)[2])
            for i, (name, site) in enumerate(names):
                temps[i] += rng.gauss(0, 0.05) + (rng.choice((-3, 3)) if rng.random() < 0.002 else 0)
                reading = {"sensor": name, "site": site, "temp": round(temps[i], 3), "ts": now}
                if rng.random() < self.late:
                    order += 1
                    self.held_back += 1
                    heapq.heappush(held, (now + rng.choice(DELAYS) * NS, order, reading))
                else:
                    self.submit(reading)
            self.submit_punct(Punct.WINDOW)  # the sink publishes this round's batches now
        for _, _, reading in sorted(held):
            self.submit(reading)
        self.submit_punct(Punct.WINDOW)
        self.submit({"sensor": END, "site": "_end", "temp": 0.0, "ts": ctx.now()})


class SensorFeed(MQTTSource):
    """An `MQTTSource` that stops at the publisher's end-of-stream record (not submitted)."""

    end_seen = False

    def setup(self) -> None:
        super().setup()
        inner = self.submit  # the runtime's fast submit, set on the instance before setup

        def submit(tup: Any, port: int = 0) -> None:
            if tup["sensor"] == END:
                self.end_seen = True
                # the caller counts it as a record: the source's loop then ends after this batch
                self.max_records = self.records_submitted + 1
                return
            inner(tup, port)

        self.submit = submit  # type: ignore[method-assign]


class PaneAlerts(Operator):
    """Pane results to port 1 (JSON-ready); alerts to port 0 from on-time panes only (a late
    re-trigger updates the pane file, it does not alert twice)."""

    def __init__(self, delta: float, threshold: float) -> None:
        self.delta, self.threshold = delta, threshold
        self.previous: dict[str, float] = {}

    def on_tuple(self, tup: Any, port: int) -> None:
        pane = dict(tup, timing=tup["timing"].name, avg=round(tup["avg"], 3))
        self.submit(pane, 1)
        if pane["timing"] != "ON_COMPLETE":
            return
        sensor, avg = pane["sensor"], pane["avg"]
        prev = self.previous.get(sensor)
        self.previous[sensor] = avg
        base = {"sensor": sensor, "site": pane["site"], "avg": avg, "max": pane["max"],
                "start": pane["start"], "end": pane["end"]}
        if prev is not None and abs(avg - prev) >= self.delta:
            self.submit(base | {"kind": "jump", "previous": prev}, 0)
        if pane["max"] >= self.threshold:
            self.submit(base | {"kind": "hot", "previous": prev if prev is not None else avg}, 0)

    def snapshot(self) -> Any:
        return self.previous

    def restore(self, state: Any) -> None:
        self.previous = dict(state or {})


def _jsonl(path: str) -> FileSink:
    """JSON lines, flushed on each window mark (FileSink's default), into a directory made now."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return FileSink(path, format="json")


def build(params: dict[str, Any]) -> Graph:
    p: dict[str, Any] = {
        "host": "127.0.0.1", "port": 1883, "seconds": 20, "sensors": 20, "sites": 4, "rate": 5,
        "lag": 1.0, "late": 0.02, "delta": 1.0, "threshold": 22.5, "qos": 1, "seed": 7,
        "out": "out/alerts.jsonl", "panes": "out/panes.jsonl"} | params
    host, port, qos = str(p["host"]), int(p["port"]), int(p["qos"])
    for name, low, what in (("sensors", 0, ">= 0"), ("sites", 1, ">= 1"), ("seconds", 0, ">= 0")):
        if not float(p[name]) >= low:
            raise ValueError(f"-p {name}={p[name]}: expected a number {what}")
    if not float(p["rate"]) > 0:
        raise ValueError(f"-p rate={p['rate']}: expected readings a second, > 0")
    g = Graph("sensors_mqtt", p)

    feed_op = SensorFeed(host, port, topics=["sensors/+/temp"], qos=qos, schema=READING,
                         topic_attribute=None, topic_levels={"site": 1})
    sensors = g.source("sensors", Sensors(int(p["sensors"]), int(p["sites"]), float(p["rate"]),
                                          float(p["seconds"]), late=float(p["late"]), seed=int(p["seed"]),
                                          ready=feed_op.subscribed), schema=READING)
    g.sink("publish", MQTTSink(host, port, topic_of=lambda t: f"sensors/{t['site']}/temp", qos=qos,
                               schema=WIRE, batch=10_000), [sensors])

    feed = g.source("feed", feed_op, schema=READING, event_time="ts", lag=float(p["lag"]))
    window = feed.window("timeInterval, intervalDuration(10), creationPeriod(5), discardAge(5), "
                         "partitioned", partition_by="sensor")
    panes = g.operator("panes", Aggregate({"avg": Average("temp"), "max": Max("temp"), "readings": Count(),
                                           "start": IntervalStart(), "end": IntervalEnd(),
                                           "timing": PaneTimingOf()}, copy=("sensor", "site")),
                       [window], [None])
    alerts, results = g.operator("alerts", PaneAlerts(float(p["delta"]), float(p["threshold"])),
                                 [panes], [ALERT, None])
    g.sink("alert_file", _jsonl(str(p["out"])), [alerts])
    g.sink("pane_file", _jsonl(str(p["panes"])), [results])
    return g
