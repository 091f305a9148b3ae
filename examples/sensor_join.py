"""Example graph: join two sensor streams, temperature and humidity, per room (SPL Join).

    riverbed run examples/sensor_join.py -p seconds=10 -p out=out/comfort.csv

* ``temperature`` and ``humidity``: simulated readings per room, paced on the clock;
* ``join``: SPL ``Join`` with a ``sliding, time(2)`` window on each side, an
  equality on ``room`` and a match on readings less than a second apart: each
  arriving reading pairs with the other side's recent readings of its room;
* ``comfort``: a Functor computing a heat index from each pair;
* ``file``: the pairs as CSV.

The SPL original::

    stream<rstring room, float64 temp, float64 rh, int64 ts> Pairs = Join(Temps; Hums) {
        window Temps: sliding, time(2.0); Hums: sliding, time(2.0);
        param equalityLHS: Temps.room; equalityRHS: Hums.room;
              match: abs(Temps.ts - Hums.ts) < 1000000000l;
        output Pairs: rh = Hums.rh, ts = Temps.ts;
    }
"""

from __future__ import annotations

import random
from typing import Any

from riverbed.graph import Graph, Schema, Source
from riverbed.operators import FileSink, Functor, Join

NS = 1_000_000_000
TEMP = Schema(room="rstring", temp="float64", ts="timestamp")
HUM = Schema(room="rstring", rh="float64", ts="timestamp")
PAIR = Schema(room="rstring", temp="float64", rh="float64", ts="timestamp")
COMFORT = Schema(room="rstring", temp="float64", rh="float64", ts="timestamp", feels="float64")


class Readings(Source):
    """One attribute per room, every ``period`` seconds, with a random offset per stream."""

    replayable = True

    def __init__(self, attribute: str, base: float, *, rooms: int, period: float, seconds: float,
                 seed: int) -> None:
        self.attribute, self.base, self.rooms = attribute, base, rooms
        self.period_ns, self.rounds = int(period * NS), int(seconds / period)
        self.offset_ns = int(random.Random(seed).uniform(0, period) * NS)
        self.seed, self.round = seed, 0
        self.origin: int | None = None  # the time of round 0: a restart goes on from it

    async def run(self) -> None:
        ctx: Any = self.context
        if self.origin is None:  # (a checkpoint of an older riverbed held the round alone)
            self.origin = ctx.now() - self.round * self.period_ns
        while self.round < self.rounds and not ctx.stopping:
            now = self.origin + self.offset_ns + self.round * self.period_ns
            await ctx.sleep_until(now)
            rng = random.Random(self.seed * 1_000_003 + self.round)
            for r in range(self.rooms):
                self.submit({"room": f"room-{r}", self.attribute: round(self.base + rng.gauss(0, 2), 2),
                             "ts": now})
            self.round += 1

    def snapshot(self) -> Any:
        """The round to produce next and when round 0 was: a restart stamps the next round
        where an uninterrupted run would."""
        return {"round": self.round, "origin": self.origin}

    def restore(self, state: Any) -> None:
        if isinstance(state, dict):
            self.round, self.origin = state["round"], state["origin"]
        else:  # a checkpoint of an older riverbed: the round alone
            self.round = state or 0


def heat_index(t: dict[str, Any]) -> float:
    """A simple apparent-temperature formula (Steadman's, in Celsius), for the example."""
    return round(t["temp"] + 0.33 * (t["rh"] / 100 * 6.105) - 4.0, 2)


def build(params: dict[str, Any]) -> Graph:
    rooms, seconds = int(params.get("rooms", 4)), float(params.get("seconds", 10))
    g = Graph("comfort", params)
    temps = g.source("temperature", Readings("temp", 22.0, rooms=rooms, period=0.5,
                                                          seconds=seconds, seed=1), schema=TEMP)
    hums = g.source("humidity", Readings("rh", 45.0, rooms=rooms, period=0.7,
                                                    seconds=seconds, seed=2), schema=HUM)
    pairs = g.operator("join", Join(
        equality_lhs="room", equality_rhs="room",
        match=lambda t, h: abs(t["ts"] - h["ts"]) < NS,
        output=lambda t, h: {"room": t["room"], "temp": t["temp"], "rh": h["rh"], "ts": t["ts"]}),
        [temps.window("sliding, time(2)"), hums.window("sliding, time(2)")], [PAIR])
    comfort = g.operator("comfort", Functor(output={"feels": heat_index}), [pairs], [COMFORT])
    g.sink("file", FileSink(str(params.get("out", "out/comfort.csv")), format="csv"), [comfort])
    return g
