"""The workloads as riverbed graphs: sources, window operators and sinks written as a user would.

Two ways of writing each windowed workload (``path``):

* ``toolkit``: what the README teaches, the standard toolkit:
  ``Aggregate`` with its output functions (``Sum``, ``Average``, ``Last``,
  ``Count``, ``IntervalStart``) on the declared window (W4 and W4inc are the
  same graph: Aggregate keeps its Average incrementally anyway, with
  ``aggregate_incomplete_windows=True`` so the first 999 triggers report too);
  for ``chain``: ``Filter -> Functor -> Functor``.
* ``listener``: an `Operator` of our own on the window's events, aggregating
  the tuples a window event hands it (`workloads`' record functions sum them
  in arrival order), except ``W4inc``, which keeps a running sum from the
  INSERTION and EVICTION events of its sliding window.

``W4hand`` has no window: the running sum over a deque is written by hand, as
a Bytewax user writes it in ``stateful_map``; ``toolkit`` is the standard
``Custom`` operator with that logic per tuple, ``listener`` an `Operator` of
our own taking each batch of tuples (``on_tuples``).

The sink takes each batch of results in one call (``on_tuples``), as Bytewax's
sink (``write_batch``) does.

Latency: `latency_graph` builds W1 or W4 with a paced source (`PacedReadings`)
that stamps each reading with its emission time (``perf_counter_ns``) in an
extra ``emitted`` attribute; the operator copies the stamp of the newest
reading of the window into its result, and the sink records the difference
with its own ``perf_counter_ns`` when it sees the result.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

from workloads import (
    CHAIN_MIN,
    HOT_F,
    PANE_MS,
    SLIDE_MS,
    W1_COUNT,
    W4_COUNT,
    Digest,
    Reading,
    Record,
    pane_record,
    w1_record,
    w4_record,
)

from riverbed.graph import Graph, Operator, Schema, Source
from riverbed.operators import (
    Aggregate,
    Average,
    Count,
    Custom,
    Filter,
    Functor,
    IntervalStart,
    Last,
    Sum,
)
from riverbed.windows import EventType, PaneEvent, StreamWindowEvent

EVICTION = EventType.EVICTION
INSERTION = EventType.INSERTION
TRIGGER = EventType.TRIGGER

READING = Schema(sensor="int64", value="float64", ts="int64")
STAMPED = Schema(sensor="int64", value="float64", ts="int64", emitted="int64")

CLAUSES = {
    "W1": f"tumbling, count({W1_COUNT}), partitioned",
    "W2": f"timeInterval, intervalDuration({PANE_MS // 1000}), partitioned",
    "W3": f"timeInterval, intervalDuration({PANE_MS // 1000}), creationPeriod({SLIDE_MS // 1000}), "
          "partitioned",
    "W4": f"sliding, count({W4_COUNT}), count(1)",
    "W4inc": f"sliding, count({W4_COUNT}), count(1)",
}
PARTITIONED = {"W1", "W2", "W3"}
EVENT_TIME = {"W2", "W3"}


# ----------------------------------------------------------------- sources


class Readings(Source):
    """The pre-generated readings, as fast as the runtime takes them."""

    def __init__(self, readings: Sequence[Reading]) -> None:
        self.readings = readings

    def generate(self) -> Any:
        return iter(self.readings)


class PacedReadings(Source):
    """Readings at ``rate`` per second on the real clock, each stamped with its emission time.

    Every millisecond (asyncio's timer resolution) it submits the readings
    whose scheduled time has come, then sleeps; ``emitted`` is read when each
    reading is submitted.
    """

    def __init__(self, readings: Sequence[Reading], rate: float) -> None:
        # Copies made now, stamped when sent: the paced loop does as little as it can.
        self.readings = [{**r, "emitted": 0} for r in readings]
        self.rate = rate
        self.elapsed_ns = 0  # from the first submission to the last

    async def run(self) -> None:
        ctx: Any = self.context
        submit = self.submit
        clock = time.perf_counter_ns
        readings = self.readings
        n = len(readings)
        ns_per_reading = 1e9 / self.rate
        start = clock()
        i = 0
        while i < n and not ctx.stopping:
            due = min(n, int((clock() - start) / ns_per_reading) + 1)
            while i < due:
                r = readings[i]
                r["emitted"] = clock()
                submit(r)
                i += 1
            self.elapsed_ns = clock() - start
            await ctx.sleep_until(ctx.now() + 1_000_000)


# --------------------------------------------------------------- operators


class TumblingAvg(Operator):
    """W1: sum and average of each tumbling count window (EVICTION carries its tuples)."""

    window_events = frozenset({EVICTION})

    def __init__(self, stamp: bool = False) -> None:
        self.stamp = stamp

    def on_window_event(self, event: StreamWindowEvent[Reading], port: int) -> None:
        if event.type is EVICTION:
            tuples = event.tuples
            rec = w1_record(tuples)
            if self.stamp:
                rec["emitted"] = tuples[-1]["emitted"]
            self.submit(rec)


class PaneAvg(Operator):
    """W2, W3: count and average of each pane partition when its pane triggers."""

    window_events = frozenset({TRIGGER})

    def on_window_event(self, event: StreamWindowEvent[Reading], port: int) -> None:
        if event.type is TRIGGER:
            assert isinstance(event, PaneEvent)
            self.submit(pane_record(event.partition, event.interval_start, event.tuples))  # type: ignore[arg-type]


class MovingAvg(Operator):
    """W4: the average of the sliding window's contents on every trigger, summing them each time."""

    window_events = frozenset({TRIGGER})

    def __init__(self, stamp: bool = False) -> None:
        self.stamp = stamp

    def on_window_event(self, event: StreamWindowEvent[Reading], port: int) -> None:
        if event.type is TRIGGER:
            tuples = event.tuples
            rec = w4_record(tuples)
            if self.stamp:
                rec["emitted"] = tuples[-1]["emitted"]
            self.submit(rec)


class RunningAvg(Operator):
    """W4inc: a running sum kept from INSERTION and EVICTION events; TRIGGER reports it."""

    window_events = frozenset({INSERTION, EVICTION, TRIGGER})

    def __init__(self, stamp: bool = False) -> None:
        self.stamp = stamp
        self.total = 0.0

    def on_window_event(self, event: StreamWindowEvent[Reading], port: int) -> None:
        etype = event.type
        if etype is INSERTION:
            self.total += event.tuples[0]["value"]
        elif etype is EVICTION:
            for t in event.tuples:
                self.total -= t["value"]
        elif etype is TRIGGER:
            tuples = event.tuples
            rec = {"ts": tuples[-1]["ts"], "avg": self.total / len(tuples)}
            if self.stamp:
                rec["emitted"] = tuples[-1]["emitted"]
            self.submit(rec)


class DigestSink(Operator):
    def __init__(self, digest: Digest) -> None:
        self.digest = digest

    def on_tuple(self, tup: Record, port: int) -> None:
        self.digest.add(tup)

    def on_tuples(self, tuples: Iterator[Record], port: int) -> None:
        add = self.digest.add
        for tup in tuples:
            add(tup)


def _slide(op: Custom, r: Reading, port: int) -> None:
    """W4hand's step as `Custom` logic: Bytewax's ``slide`` (bench/bytewax_flows.py)."""
    state = op.state
    window = state["window"]
    total = state["total"]
    if len(window) == W4_COUNT:
        total -= window.popleft()
    v = r["value"]
    total += v
    window.append(v)
    state["total"] = total
    op.submit({"ts": r["ts"], "avg": total / len(window)})


class SlideByHand(Operator):
    """W4hand with a batch at a time: the same steps in one loop."""

    window_punctuation = "free"

    def __init__(self) -> None:
        self.window: deque[float] = deque()
        self.total = 0.0

    def on_tuples(self, tuples: Iterator[Reading], port: int) -> None:
        window, total, submit = self.window, self.total, self.submit
        popleft, append = window.popleft, window.append
        for r in tuples:
            if len(window) == W4_COUNT:
                total -= popleft()
            v = r["value"]
            total += v
            append(v)
            submit({"ts": r["ts"], "avg": total / len(window)})
        self.total = total


class LatencySink(Operator):
    """Records, per result, the time since its newest reading was emitted (ns)."""

    def __init__(self) -> None:
        self.latencies: list[int] = []

    def on_tuple(self, tup: Record, port: int) -> None:
        self.latencies.append(time.perf_counter_ns() - tup["emitted"])


# ------------------------------------------------------------------ graphs


PATHS = ("toolkit", "listener")


def toolkit_operator(workload: str, stamp: bool = False) -> Operator:
    """The workload's window operator as the README teaches it: an `Aggregate`."""
    extra = ("emitted",) if stamp else ()
    if workload == "W1":
        return Aggregate({"end": Last("ts"), "sum": Sum("value"), "avg": Average("value")},
                         copy=("sensor", *extra))
    if workload in ("W2", "W3"):
        return Aggregate({"start": IntervalStart(), "count": Count(), "avg": Average("value")},
                         copy=("sensor",))
    if workload in ("W4", "W4inc"):
        return Aggregate({"ts": Last("ts"), "avg": Average("value")}, copy=extra,
                         aggregate_incomplete_windows=True)
    raise ValueError(f"no Aggregate for workload {workload!r}")


def _operator(workload: str, stamp: bool = False, path: str = "listener") -> Operator:
    if path == "toolkit":
        return toolkit_operator(workload, stamp)
    if workload == "W1":
        return TumblingAvg(stamp)
    if workload in ("W2", "W3"):
        return PaneAvg()
    if workload == "W4":
        return MovingAvg(stamp)
    return RunningAvg(stamp)


# The readings' schema is declared (and so checked per tuple) unless `--no-schema` clears this:
# Bytewax and the loop check nothing, which `--no-schema` matches.
DECLARE_SCHEMA = True


def throughput_graph(workload: str, readings: Sequence[Reading], digest: Digest,
                     path: str = "listener") -> Graph:
    g = Graph(f"bench-{workload}-{path}")
    # Only the event-time workloads declare event time: it makes the source emit watermarks.
    src = g.source("readings", Readings(readings), schema=READING if DECLARE_SCHEMA else None,
                   event_time="ts" if workload in EVENT_TIME else None, resolution="ms")
    if workload == "W4hand":
        # No window; a deque in Custom's state (not plain data: this job takes no checkpoints).
        logic = (Custom(_slide, state={"window": deque(), "total": 0.0}) if path == "toolkit"
                 else SlideByHand())
        out = g.operator("slide", logic, [src])
    elif workload == "chain":
        if path != "toolkit":
            raise ValueError("the stateless chain has only the toolkit path")
        kept = g.operator("filter", Filter(lambda t: t["value"] >= CHAIN_MIN), [src])
        hot = g.operator("fahrenheit", Functor(output={"f": lambda t: t["value"] * 1.8 + 32.0}), [kept])
        out = g.operator("hot", Functor(output={"hot": lambda t: t["f"] >= HOT_F}), [hot])
    else:
        port = src.window(CLAUSES[workload], partition_by="sensor" if workload in PARTITIONED else None)
        out = g.operator("agg", _operator(workload, path=path), [port])
    g.sink("sink", DigestSink(digest), [out])
    return g


def latency_graph(workload: str, source: PacedReadings, sink: LatencySink,
                  path: str = "listener") -> Graph:
    if workload not in ("W1", "W4", "W4inc"):
        raise ValueError(f"latency is measured for W1, W4 and W4inc, not {workload!r}")
    g = Graph(f"latency-{workload}-{path}")
    src = g.source("readings", source, schema=STAMPED)
    port = src.window(CLAUSES[workload], partition_by="sensor" if workload in PARTITIONED else None)
    out = g.operator("agg", _operator(workload, stamp=True, path=path), [port])
    g.sink("sink", sink, [out])
    return g
