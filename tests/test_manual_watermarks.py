"""A ``generate()`` source with manual watermarks (`SourceContext.set_watermark`): each watermark
leaves after the tuples yielded before it, on every host that pulls a source's items in
batches (the runtime's task, a parallel region's replica).

The runtime pulled up to a batch of items before emitting them, and a watermark set meanwhile
went out at once, ahead of them: every pane's tuples arrived behind the watermark that closed
it and were dropped as late (30 of 30).
"""

from __future__ import annotations

from typing import Any

import pytest

from riverbed.graph import Graph, Schema, Source
from riverbed.operators import Aggregate, Count, IntervalStart
from riverbed.runtime import VirtualClock, channel_of, run_graph
from riverbed.testing import ListSink

S = 1_000_000_000


class Manual(Source):
    """Ten tuples of event time in each 10 s, then the watermark at that 10 s's end."""

    def generate(self) -> Any:
        ctx: Any = self.context
        width = ctx.width or 1
        mine = [k for k in range(4) if channel_of(k, width) == (ctx.channel or 0)]  # a replica's
        for pane in range(10, 13):
            for i in range(10):
                for k in mine:
                    yield {"k": k, "ts": (pane * 10 + i) * S}
            ctx.set_watermark((pane * 10 + 10) * S)


@pytest.mark.parametrize("width", [None, 2])
def test_a_manual_watermark_leaves_after_the_tuples_yielded_before_it(width: int | None) -> None:
    g = Graph("manual")
    sink = ListSink()
    if width is None:
        src = g.source("src", Manual(), schema=Schema(k="int64", ts="timestamp"), event_time="ts",
                       manual_watermarks=True)
        panes = g.operator("agg", Aggregate({"start": IntervalStart(), "n": Count()}),
                           [src.window("timeInterval, intervalDuration(10)")])
    else:  # the source replicated in a region (each replica keeps its channel's keys: one here)
        with g.parallel(width, partition_by="k"):
            src = g.source("src", Manual(), schema=Schema(k="int64", ts="timestamp"),
                           event_time="ts", manual_watermarks=True)
            panes = g.operator("agg", Aggregate({"start": IntervalStart(), "n": Count()}, copy=("k",)),
                               [src.window("timeInterval, intervalDuration(10), partitioned",
                                           partition_by="k")])
    g.sink("out", sink, [panes])
    run_graph(g, clock=VirtualClock())
    if width is None:
        assert sink.tuples == [{"start": p * 10 * S, "n": 40} for p in range(10, 13)]
    else:
        got = sorted((t["start"], t["k"], t["n"]) for t in sink.tuples)
        assert got == [(p * 10 * S, k, 10) for p in range(10, 13) for k in range(4)]


class Readings(Source):
    def generate(self) -> Any:
        for i in range(30):
            yield {"ts": (1000 + i) * S}


def test_an_operator_with_its_own_event_time_sends_only_its_own_watermarks() -> None:
    # E27: a region of event time ends at an operator with its own definition (outputEventTime):
    # the watermarks downstream come from the times it submits. It forwarded its input's too,
    # 900 s ahead of its own times: 29 of 30 tuples late, one pane of 1 instead of three of 10.
    from riverbed.graph import EventTime
    from riverbed.operators import Functor

    g = Graph("restamp")
    src = g.source("src", Readings(), schema=Schema(ts="timestamp"), event_time="ts")
    earlier = g.operator("restamp", Functor(output={"t2": lambda t: t["ts"] - 900 * S}), [src],
                         [Schema(ts="timestamp", t2="timestamp")], event_time=EventTime.of("t2"))
    panes = g.operator("agg", Aggregate({"start": IntervalStart(), "n": Count()}),
                       [earlier.window("timeInterval, intervalDuration(10)")])
    sink = ListSink()
    g.sink("out", sink, [panes])
    run_graph(g, clock=VirtualClock())
    assert sink.tuples == [{"start": p * 10 * S, "n": 10} for p in (10, 11, 12)]


class FarOff(Source):
    def generate(self) -> Any:
        yield {"ts": 100 * S}
        yield {"ts": 2**64}  # past the int64 range of event-time ticks


@pytest.mark.parametrize("batch", [1, 1000])  # the per-tuple submit and the batch's C loops
def test_an_event_time_outside_the_int64_range_is_refused_at_its_source(batch: int) -> None:
    # It passed the source (only the type was checked), and the watermark it gave failed the
    # next operator instead: "operator 'agg': WatermarkError ... outside the int64 range".
    from riverbed.runtime import Job, JobError, run_virtual

    g = Graph("far")
    src = g.source("src", FarOff(), schema=Schema(ts="timestamp"), event_time="ts")
    panes = g.operator("agg", Aggregate({"start": IntervalStart(), "n": Count()}),
                       [src.window("timeInterval, intervalDuration(10)")])
    g.sink("out", ListSink(), [panes])
    job = Job(g, clock=VirtualClock(), batch_size=batch)
    with pytest.raises(JobError, match=r"operator 'src'.*event time 'ts' = 18446744073709551616 is "
                                       r"outside the int64 range"):
        run_virtual(job.run(), job.clock)  # type: ignore[arg-type]
