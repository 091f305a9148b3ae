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
