"""Example graph, two windowed stages keyed differently: per-sensor panes, then per-site aggregates.

    riverbed run examples/sensor_sites.py -p sites=4 -p per_site=5 -p seconds=5 -p out=out/sites.csv
    riverbed spark run examples/sensor_sites.py -p out=out/sites.csv     (two keyed stages)

* ``sensors``: ``sites * per_site`` simulated sensors, sensor ``i`` at site
  ``i % sites``, each reporting a temperature ``rate`` times a second;
* ``panes``: an Aggregate over a per-sensor ``tumbling, count(10)`` window:
  every 10 readings of a sensor, one pane (mean, low, high, last time);
* ``spread``: a Functor adding each pane's high minus low;
* ``sites``: an Aggregate over a per-site ``tumbling, count(per_site)``
  window of those panes: each site's sensors finish a pane in the same round,
  so each output sums up one round of a site's panes;
* ``file``: the site aggregates as CSV.

On Spark, ``panes`` and ``spread`` run per key group of sensors, ``sites``
per key group of sites: the panes are repartitioned by site between the two
stages, in one query (``riverbed spark explain`` shows it).

The SPL original::

    stream<rstring sensor, rstring site, float64 mean, float64 low, float64 high, int64 ts> Panes =
        Aggregate(Readings) {
        window Readings: tumbling, count(10), partitioned;
        param partitionBy: sensor;
        output Panes: mean = Average(temp), low = Min(temp), high = Max(temp), ts = Max(ts);
    }
    stream<Panes, tuple<float64 spread>> Spreads = Functor(Panes) {
        output Spreads: spread = high - low;
    }
    stream<rstring site, int64 panes, float64 mean, float64 low, float64 high,
           float64 widest, int64 ts> Sites = Aggregate(Spreads) {
        window Spreads: tumbling, count($perSite), partitioned;
        param partitionBy: site;
        output Sites: panes = Count(), mean = Average(mean), low = Min(low), high = Max(high),
                      widest = Max(spread), ts = Max(ts);
    }
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from riverbed.graph import Graph, Schema, Source
from riverbed.operators import Aggregate, Average, Count, FileSink, Functor, Max, Min

NS = 1_000_000_000

READING = Schema(sensor="rstring", site="rstring", temp="float64", ts="timestamp")
PANE = Schema(sensor="rstring", site="rstring", mean="float64", low="float64", high="float64",
              ts="timestamp")
SPREAD = Schema(sensor="rstring", site="rstring", mean="float64", low="float64", high="float64",
                ts="timestamp", spread="float64")
SITE = Schema(site="rstring", panes="int64", mean="float64", low="float64", high="float64",
              widest="float64", ts="timestamp")


class SiteSensors(Source):
    """Readings of ``sites * per_site`` sensors, ``rate`` rounds a second for ``seconds`` seconds."""

    replayable = True

    def __init__(self, sites: int, per_site: int, rate: float, seconds: float, seed: int) -> None:
        self.sites, self.sensors = sites, sites * per_site
        self.rate, self.seconds, self.seed = rate, seconds, seed
        self.round = 0
        self.origin: int | None = None  # the time of round 0: a restart goes on from it

    async def run(self) -> None:
        ctx: Any = self.context
        names = [f"sensor-{i:04d}" for i in range(self.sensors)]
        sites = [f"site-{i % self.sites:02d}" for i in range(self.sensors)]
        step = int(NS / self.rate)
        if self.origin is None:  # (a checkpoint of an older riverbed held the round alone)
            self.origin = ctx.now() - self.round * step
        while self.round < int(self.seconds * self.rate) and not ctx.stopping:
            now = self.origin + self.round * step
            await ctx.sleep_until(now)
            rng = random.Random(self.seed * 1_000_003 + self.round)  # replayable from any round
            for i, name in enumerate(names):
                temp = 20.0 + i % 7 + rng.gauss(0, 0.5) + (rng.choice((-3, 3)) if rng.random() < 0.01 else 0)
                self.submit({"sensor": name, "site": sites[i], "temp": round(temp, 3), "ts": now})
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
    sites, per_site = int(params.get("sites", 4)), int(params.get("per_site", 5))
    g = Graph("sites", params)
    readings = g.source("sensors", SiteSensors(sites, per_site, float(params.get("rate", 20)),
                                               float(params.get("seconds", 5)),
                                               int(params.get("seed", 11))), schema=READING)
    panes = g.operator("panes", Aggregate(
        {"mean": Average("temp"), "low": Min("temp"), "high": Max("temp"), "ts": Max("ts")},
        copy=("sensor", "site")),
        [readings.window("tumbling, count(10), partitioned", partition_by="sensor")], [PANE])
    spreads = g.operator("spread", Functor(output={"spread": lambda t: round(t["high"] - t["low"], 3)}),
                         [panes], [SPREAD])
    per_site_ = g.operator("sites", Aggregate(
        {"panes": Count(), "mean": Average("mean"), "low": Min("low"), "high": Max("high"),
         "widest": Max("spread"), "ts": Max("ts")}, copy=("site",)),
        [spreads.window(f"tumbling, count({per_site}), partitioned", partition_by="site")], [SITE])
    out = Path(str(params.get("out", "out/sites.csv")))
    out.parent.mkdir(parents=True, exist_ok=True)
    g.sink("file", FileSink(str(out), format="csv"), [per_site_])
    return g
