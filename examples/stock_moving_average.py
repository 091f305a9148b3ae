"""Example graph: a moving average of stock prices over a sliding time window (SPL's classic).

    riverbed run examples/stock_moving_average.py -p seconds=10 -p out=out/averages.csv

* ``quotes``: Beacon-like simulated trades for a few symbols, paced on the clock
  (``rate`` trades a second);
* ``average``: SPL ``Aggregate`` over ``sliding, time(5), time(1), partitioned``
  per symbol: every second, per symbol, the average, min and max price and the
  volume of the last 5 seconds (``Average``/``Min``/``Max``/``Sum`` are kept
  incrementally as trades enter and leave the window);
* ``file``: the results as CSV, one line per symbol and second.

The SPL original::

    stream<rstring sym, float64 avg, float64 low, float64 high, int64 volume> Averages
        = Aggregate(Quotes) {
            window Quotes: sliding, time(5.0), time(1.0), partitioned;
            param partitionBy: sym;
            output Averages: avg = Average(price), low = Min(price), high = Max(price),
                             volume = Sum(qty);
        }
"""

from __future__ import annotations

import random
from typing import Any

from riverbed.graph import Graph, Schema, Source
from riverbed.operators import Aggregate, Average, FileSink, Max, Min, Sum

QUOTE = Schema(sym="rstring", price="float64", qty="int64")
AVERAGE = Schema(sym="rstring", avg="float64", low="float64", high="float64", volume="int64")
NS = 1_000_000_000


class Quotes(Source):
    """Random-walk trades for ``symbols`` symbols, ``rate`` a second for ``seconds`` seconds."""

    replayable = True

    def __init__(self, symbols: int, rate: float, seconds: float, seed: int) -> None:
        self.names = [f"SYM{i}" for i in range(symbols)]
        self.rate, self.seconds = rate, seconds
        self.rng = random.Random(seed)
        self.prices = [100.0 + 10 * i for i in range(symbols)]
        self.count = 0
        self.origin: int | None = None  # when the run began: a restart keeps the quotes' pace

    async def run(self) -> None:
        ctx: Any = self.context
        step, total = int(NS / self.rate), int(self.seconds * self.rate)
        if self.origin is None:  # (a checkpoint of an older riverbed: from now)
            self.origin = ctx.now() - self.count * step
        while self.count < total and not ctx.stopping:
            await ctx.sleep_until(self.origin + (self.count + 1) * step)
            i = self.rng.randrange(len(self.names))
            self.prices[i] = round(max(1.0, self.prices[i] * (1 + self.rng.gauss(0, 0.002))), 2)
            self.submit({"sym": self.names[i], "price": self.prices[i],
                         "qty": self.rng.randrange(1, 500)})
            self.count += 1

    def snapshot(self) -> Any:
        version, internal, gauss = self.rng.getstate()
        return {"count": self.count, "origin": self.origin, "prices": self.prices,
                "rng": [version, list(internal), gauss]}

    def restore(self, state: Any) -> None:
        if state is not None:
            self.count, self.prices = state["count"], list(state["prices"])
            self.origin = state.get("origin")
            version, internal, gauss = state["rng"]
            self.rng.setstate((version, tuple(internal), gauss))


def build(params: dict[str, Any]) -> Graph:
    g = Graph("stocks", params)
    quotes = g.source("quotes", Quotes(int(params.get("symbols", 5)), float(params.get("rate", 200)),
                                       float(params.get("seconds", 10)), int(params.get("seed", 3))),
                      schema=QUOTE)
    averages = g.operator("average", Aggregate(
        output={"avg": Average("price"), "low": Min("price"), "high": Max("price"),
                "volume": Sum("qty")}, copy=("sym",)),
        [quotes.window("sliding, time(5), time(1), partitioned", partition_by="sym")], [AVERAGE])
    g.sink("file", FileSink(str(params.get("out", "out/averages.csv")), format="csv"), [averages])
    return g
