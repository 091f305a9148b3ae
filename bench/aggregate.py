"""Throughput of SPL Aggregate over a partitioned sliding time window, against a hand-written loop.

Usage::

    .venv/bin/python bench/aggregate.py [--n N] [--rate R] [--repeat K] [--recompute-n M]

Workload: quotes ``{"sym": int, "price": int}`` for 1000 symbols picked at
random (seeded), aggregated per symbol over
``sliding, time(60), time(1), partitioned`` into ``{sym, sum, avg, max}``
(``Sum``, ``Average``, ``Max`` of the price), one result per symbol and a
window mark every second. The window has ``flavor="cpp"``, as IBM's Aggregate
(a C++ operator) has: one timer for the window, partitions emptied by time
eviction dropped.

Clock. Time windows make throughput depend on how many triggers and
evictions fall on each input tuple, i.e. on the input rate in *window* time.
The bench therefore runs on the virtual clock with a source that advances it:
``R`` quotes per virtual second (default 10,000), in batches every 10 ms of
virtual time. Each virtual second still brings its 1000 partition triggers
(one result per 10 quotes at the default rate) and, once 60 s have passed, as
many evictions as arrivals (the window then holds 60 * R quotes), exactly as
a real-time stream at R quotes/s would; but nothing ever waits, so the wall
time measured is the CPU work of that stream. On the real clock the same job
would idle between arrivals, or, fed as fast as possible, see a few seconds of
window time for millions of quotes, so no eviction and almost no trigger.

Compared (K alternating runs; tuples/s = N / best wall seconds; CPU seconds best and median):

  (a) riverbed: ``source -> Aggregate -> sink`` through ``run_graph`` (the
      whole runtime: channels, batches, window timers, events, submit);
  (b) a hand-written loop over the same quotes: per symbol a deque of
      (arrival, price), a running sum and a monotonic max queue, evicting
      lazily at each 1 s tick; the same results in one Python loop;
  (c) with ``--recompute-n M``: riverbed with ``Aggregate(incremental=False)``
      on the first M quotes, which rescans every partition's window at each
      trigger (what incrementality saves).

Both variants produce the same results; the script checks an
order-independent digest of them (count, marks, sums) and fails otherwise.
At the default N = 1,000,000 a run takes about 20 s on one core
(``--recompute-n`` adds much more: it rescans up to 60 * R quotes a second).

What the ratio includes: riverbed's figure is the whole job (source, channels,
the window engine raising an event per quote and per trigger, Aggregate,
submitting each result and its window mark, the sink); the loop does only
the arithmetic. A lower ``--rate`` means more results per quote (at R = 2000
one per two quotes), where per-result costs (each window mark ends an output
batch) dominate.
"""

from __future__ import annotations

import argparse
import gc
import platform
import random
import sys
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median
from typing import Any

from riverbed.graph import Graph, Operator, Punct, Source
from riverbed.operators import Aggregate, Average, Max, Sum
from riverbed.runtime import VirtualClock, run_graph

SYMBOLS = 1000
SEED = 20250701
SECOND = 1_000_000_000
BATCH_NS = 10_000_000  # the source submits a batch every 10 ms of virtual time
WINDOW_S = 60
TICK_S = 1
CLAUSE = f"sliding, time({WINDOW_S}), time({TICK_S}), partitioned"

Quote = dict[str, int]


def make_quotes(n: int) -> list[Quote]:
    rng = random.Random(SEED)
    return [{"sym": rng.randrange(SYMBOLS), "price": rng.randrange(1, 100_000)} for _ in range(n)]


def batches(quotes: Sequence[Quote], rate: int) -> list[tuple[int, Sequence[Quote]]]:
    """(virtual time ns, quotes) every BATCH_NS; the first batch at time BATCH_NS."""
    per_batch = max(1, rate * BATCH_NS // SECOND)
    return [((i // per_batch + 1) * BATCH_NS, quotes[i:i + per_batch])
            for i in range(0, len(quotes), per_batch)]


@dataclass
class Digest:
    """Order-independent summary of the results: every variant must produce the same."""

    results: int = 0
    marks: int = 0
    sums: int = 0
    avgs: int = 0
    maxes: int = 0
    mixed: int = 0

    def add(self, sym: int, total: int, avg: int, high: int) -> None:
        self.results += 1
        self.sums += total
        self.avgs += avg
        self.maxes += high
        self.mixed += (sym + 1) * (total % 1_000_003)


# ------------------------------------------------------------------ riverbed


class PacedQuotes(Source):
    """Submits each batch at its virtual time: the virtual clock jumps from batch to batch."""

    def __init__(self, plan: list[tuple[int, Sequence[Quote]]]) -> None:
        self.plan = plan

    async def run(self) -> None:
        ctx: Any = self.context
        submit = self.submit
        for due, batch in self.plan:
            await ctx.sleep_until(due)
            for q in batch:
                submit(q)
        await ctx.flush()


class DigestSink(Operator):
    def __init__(self) -> None:
        self.digest = Digest()

    def on_tuple(self, tup: Any, port: int) -> None:
        self.digest.add(tup["sym"], tup["sum"], tup["avg"], tup["max"])

    def on_punct(self, punct: Punct, port: int) -> None:
        if punct is Punct.WINDOW:
            self.digest.marks += 1


def run_riverbed(plan: list[tuple[int, Sequence[Quote]]], incremental: bool = True) -> Digest:
    g = Graph("aggregate-bench")
    quotes = g.source("quotes", PacedQuotes(plan))
    agg = g.operator("agg", Aggregate({"sum": Sum("price"), "avg": Average("price"), "max": Max("price")},
                                      copy=("sym",), incremental=incremental),
                     [quotes.window(CLAUSE, partition_by="sym", flavor="cpp")])
    sink = DigestSink()
    g.sink("sink", sink, [agg])
    run_graph(g, clock=VirtualClock())
    return sink.digest


# --------------------------------------------------------------- hand-written


class _Symbol:
    """One symbol's window by hand: arrivals and prices in order, running sum, max queue."""

    __slots__ = ("added", "arrivals", "maxq", "prices", "removed", "total")

    def __init__(self) -> None:
        self.arrivals: deque[int] = deque()
        self.prices: deque[int] = deque()
        self.total = 0
        self.maxq: deque[tuple[int, int]] = deque()  # (arrival number, price), prices decreasing
        self.added = 0
        self.removed = 0


def run_loop(plan: list[tuple[int, Sequence[Quote]]]) -> Digest:
    """The same results by hand: the ticks due up to each batch fire first, then it is inserted."""
    digest = Digest()
    add = digest.add
    window_ns, tick_ns = WINDOW_S * SECOND, TICK_S * SECOND
    symbols: dict[int, _Symbol] = {}
    next_tick = tick_ns
    for due, batch in plan:
        while next_tick <= due:
            limit = next_tick - window_ns  # a quote stays while it has been in at most 60 s
            for sym, st in list(symbols.items()):
                arrivals, prices, maxq = st.arrivals, st.prices, st.maxq
                while arrivals and arrivals[0] < limit:
                    arrivals.popleft()
                    st.total -= prices.popleft()
                    st.removed += 1
                    if maxq[0][0] == st.removed:
                        maxq.popleft()
                if not prices:
                    del symbols[sym]  # as IBM's C++ window drops an emptied partition
                    continue
                total, n = st.total, len(prices)
                q = abs(total) // n
                add(sym, total, q if total >= 0 else -q, maxq[0][1])
                digest.marks += 1
            next_tick += tick_ns
        for quote in batch:
            sym = quote["sym"]
            price = quote["price"]
            entry = symbols.get(sym)
            if entry is None:
                entry = symbols[sym] = _Symbol()
            entry.arrivals.append(due)
            entry.prices.append(price)
            entry.total += price
            entry.added += 1
            maxq = entry.maxq
            while maxq and maxq[-1][1] < price:
                maxq.pop()
            maxq.append((entry.added, price))
    return digest


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="quotes (default 1,000,000)")
    parser.add_argument("--rate", type=int, default=10_000, help="quotes per virtual second")
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs per variant, alternating (best and median reported)")
    parser.add_argument("--recompute-n", type=int, default=0,
                        help="also run Aggregate(incremental=False) on this many quotes")
    args = parser.parse_args(argv)
    quotes = make_quotes(args.n)
    plan = batches(quotes, args.rate)
    print(f"Aggregate {{Sum, Average, Max}} over '{CLAUSE}' (flavor cpp), {SYMBOLS} symbols")
    print(f"{args.n:,} quotes at {args.rate:,}/virtual s = {plan[-1][0] / SECOND:.0f} virtual s; "
          f"window holds up to {WINDOW_S * args.rate:,} quotes; "
          f"Python {platform.python_version()} on {platform.machine()}")
    reference: Digest | None = None
    variants: list[tuple[str, int, Any]] = [
        ("riverbed Aggregate (runtime, incremental)", args.n, lambda: run_riverbed(plan)),
        ("hand-written loop", args.n, lambda: run_loop(plan)),
    ]
    if args.recompute_n:
        small = batches(quotes[:args.recompute_n], args.rate)
        variants.append(("riverbed Aggregate (incremental=False)", args.recompute_n,
                         lambda: run_riverbed(small, incremental=False)))
    walls: list[list[float]] = [[] for _ in variants]
    cpus: list[list[float]] = [[] for _ in variants]
    for _ in range(args.repeat):  # the variants alternate, so a change of load hits them alike
        for i, (name, n, fn) in enumerate(variants):
            gc.collect()
            w0, c0 = time.perf_counter(), time.process_time()
            digest = fn()
            walls[i].append(time.perf_counter() - w0)
            cpus[i].append(time.process_time() - c0)
            if n == args.n:  # every timed run's results are checked, not only the last
                if reference is None:
                    reference = digest
                elif digest != reference:
                    print(f"MISMATCH: {name} gives {digest}, expected {reference}", file=sys.stderr)
                    return 1
    for i, (name, n, _fn) in enumerate(variants):
        print(f"  {name:<44} {n / min(walls[i]):>12,.0f} tuples/s  (best {min(walls[i]):.2f} s wall, "
              f"{min(cpus[i]):.2f} s CPU; median {median(cpus[i]):.2f} s CPU)", flush=True)
    assert reference is not None
    print(f"results: {reference.results:,} tuples and {reference.marks:,} marks, identical in all "
          f"{args.repeat} runs of each")
    riverbed_rate = args.n / min(walls[0])
    loop_rate = args.n / min(walls[1])
    print(f"ratio: the hand-written loop is {loop_rate / riverbed_rate:.1f}x faster than riverbed "
          f"(by CPU time: best {min(cpus[0]) / min(cpus[1]):.2f}x, "
          f"median {median(cpus[0]) / median(cpus[1]):.2f}x)")
    if args.recompute_n:
        rec = args.recompute_n / min(walls[2])
        print(f"incremental vs recompute: {riverbed_rate / rec:.1f}x the throughput "
              f"(recompute measured on {args.recompute_n:,} quotes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
