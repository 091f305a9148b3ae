"""How many batches an operator's inbox holds: ``queue_batches``, or the host's default.

In one process an inbox holds `INBOX_BATCHES` (8) unless the graph says otherwise; the first
operator of a parallel region has 16 batches in flight to each channel's process by default.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from riverbed.graph import INBOX_BATCHES, Graph, GraphError, Operator, Schema, Source
from riverbed.runtime import Job, run_graph
from riverbed.runtime._parallel import REGION_FEEDS
from riverbed.testing import ListSink

ROW = Schema(k="int64", v="int64")


class Rows(Source):
    """``n`` rows from ``generate``: the runtime takes them a batch at a time and fills inboxes
    (`ListSource` submits from ``run`` and flushes once)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def generate(self) -> Any:
        return ({"k": i % 5, "v": i} for i in range(self.n))


class Pass(Operator):
    def on_tuple(self, tup: Any, port: int) -> None:
        self.submit(tup, 0)


pytestmark = pytest.mark.usefixtures("no_worker_leftovers")


def _graph(queue_batches: int | None, n: int = 20_000) -> tuple[Graph, ListSink]:
    g = Graph("inbox")
    src = g.source("rows", Rows(n), schema=ROW)
    sink = ListSink()
    g.sink("sink", sink, [g.operator("pass", Pass(), [src], queue_batches=queue_batches)])
    return g, sink


@pytest.mark.parametrize(("declared", "holds"), [(None, INBOX_BATCHES), (3, 3), (40, 40)])
def test_an_inbox_holds_what_the_graph_declares_or_the_default(declared: int | None,
                                                                holds: int) -> None:
    g, sink = _graph(declared)
    metrics = run_graph(g, batch_size=10)  # 2000 batches: the source fills the inbox
    assert len(sink.tuples) == 20_000
    m = metrics.operators["pass"]
    assert m.queue_capacity == holds
    assert m.queue_high_water == holds  # filled up to it, never beyond
    assert m.backpressure_waits > 0


def test_the_default_is_eight_batches() -> None:
    assert INBOX_BATCHES == 8
    g, _ = _graph(None, n=10)
    assert run_graph(g).operators["sink"].queue_capacity == 8


@pytest.mark.parametrize(("declared", "flight"), [(None, REGION_FEEDS), (3, 3)])
def test_a_parallel_region_keeps_its_own_default_in_flight_to_each_channel(
        declared: int | None, flight: int) -> None:
    assert REGION_FEEDS == 16
    g = Graph("region")
    src = g.source("rows", Rows(5000), schema=ROW)
    sink = ListSink()
    with g.parallel(2, partition_by="k"):
        out = g.operator("pass", Pass(), [src], queue_batches=declared)
    g.sink("sink", sink, [out])
    job = Job(g, batch_size=10)
    asyncio.run(job.run())
    assert len(sink.tuples) == 5000
    channels = job.channel_metrics()
    assert [c.capacity for c in channels] == [flight, flight]
    assert all(c.tuples_in > 0 for c in channels)


@pytest.mark.parametrize("bad", [0, -2, 2.5, True, "8"])
def test_a_queue_that_is_not_a_positive_int_is_refused_by_name(bad: Any) -> None:
    g = Graph("bad")
    src = g.source("rows", Rows(1), schema=ROW)
    with pytest.raises(GraphError, match=r"queue_batches=.*expected an int >= 1"):
        g.operator("pass", Pass(), [src], queue_batches=bad)
