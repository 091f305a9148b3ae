"""The keyed path cut into micro-batches the way Spark cuts it, without Spark.

Rows from the source are taken ``rounds * groups`` at a time (Spark's offsets
count rows); each key group runs `host_group` with its state stored between
batches; their bundled outputs go through the driver stage, which sorts each
batch. The sink must see what the runtime's sink sees, in the same order,
whatever the keys' skew or the cut.
"""

from __future__ import annotations

from typing import Any

import pytest

from riverbed.graph import FrozenGraph, Graph, Operator, Punct
from riverbed.operators import Aggregate, Count, Functor, Sum
from riverbed.runtime import Job, VirtualClock, run_virtual
from riverbed.spark_bridge._deploy import keyed_stages
from riverbed.spark_bridge._driver import ChannelMerge
from riverbed.spark_bridge._keyed import KEYED_OUT_DDL, bundle_rows, host_group
from riverbed.spark_bridge._plan import plan
from riverbed.spark_bridge._source import arrow_batch, route_of, source_rows
from riverbed.testing import At, ListSink, ListSource
from riverbed.windows import EventType, StreamWindowEvent
from tests.spark_fakes import FakeBatch


def _runtime(graph: FrozenGraph) -> list[Any]:
    clock = VirtualClock()
    job = Job(graph, clock=clock)
    run_virtual(job.run(), clock)
    return list(job.runners["sink"].op.items)  # type: ignore[attr-defined]


def _bridge(graph: FrozenGraph, *, groups: int = 2, bundle: int = 8, rounds: int = 2) -> list[Any]:
    p = plan(graph, "keyed", groups=groups)
    labels = [5, 2, 7][:p.groups]  # labels need not be 0..G-1
    rows = list(source_rows(graph, p.sources[0], 0, route=route_of(graph, p.keyed, p.groups, bundle, labels)))
    hosted, stage = keyed_stages(graph, p, labels, None)  # what deploy builds, without Spark
    states: dict[int, bytes] = {}
    per_batch = rounds * p.groups
    for batch_id, start in enumerate(range(0, len(rows), per_batch)):
        by_group: dict[int, list[tuple[Any, ...]]] = {}
        for row in rows[start:start + per_batch]:
            by_group.setdefault(row[5], []).append(row[:5])
        out: list[tuple[Any, ...]] = []
        for label, group_rows in by_group.items():
            produced, states[label] = host_group(hosted, None, (label,), group_rows, states.get(label))
            out += bundle_rows(produced, label)
        stage.process(FakeBatch(arrow_batch(out, KEYED_OUT_DDL)), batch_id)
    return list(stage.operator("sink").items)


class _Each(Operator):
    """Submits each tumble's tuples' sum; preserves window marks (copies, one per group)."""

    window_events = frozenset({EventType.EVICTION})

    def on_window_event(self, event: StreamWindowEvent[Any], port: int) -> None:
        if event.tuples:
            self.submit({"k": event.partition, "s": sum(t["v"] for t in event.tuples)})


def _graph(items: list[Any], clause: str, *, preserving: bool = False) -> FrozenGraph:
    g = Graph("g")
    s = g.source("src", ListSource(items))
    if preserving:  # marks pass through: each group forwards the copy it got
        a = g.operator("each", _Each(), [s.window(clause, partition_by="k")])
        a = g.operator("copy", Functor(), [a])
    else:  # Aggregate generates a mark per tumble of a partition: each one goes on
        a = g.operator("agg", Aggregate({"s": Sum("v"), "n": Count()}, copy=("k",)),
                       [s.window(clause, partition_by="k")])
    g.sink("sink", ListSink(), [a])
    return g.freeze()


@pytest.mark.parametrize("rounds", [1, 2, 5])
def test_skewed_keys_come_out_in_the_runtimes_order_whatever_the_cut(rounds: int) -> None:
    items = [{"k": 0, "v": i} for i in range(16)] + [{"k": i % 2, "v": 100 + i} for i in range(20)]
    graph = _graph(items, "tumbling, count(1), partitioned")
    assert _bridge(graph, rounds=rounds) == _runtime(_graph(items, "tumbling, count(1), partitioned"))


def test_a_quiet_groups_time_window_fires_with_the_others() -> None:
    ns = 1_000_000_000
    items: list[Any] = []
    for i in range(40):  # key 1 only at the start: its group goes quiet, its window must still tumble
        items += [At(i * ns // 4), {"k": 0 if i > 3 else i % 2, "v": i}]
    clause = "tumbling, time(1), partitioned"
    assert _bridge(_graph(items, clause)) == _runtime(_graph(items, clause))


def test_window_marks_copied_to_every_group_come_out_once() -> None:
    items: list[Any] = [{"k": i % 3, "v": i} for i in range(12)]
    items[6:6] = [Punct.WINDOW]
    clause = "tumbling, count(2), partitioned"
    want = _runtime(_graph(items, clause, preserving=True))
    got = _bridge(_graph(items, clause, preserving=True), groups=3)
    assert got.count(Punct.WINDOW) == want.count(Punct.WINDOW) >= 1
    assert [t for t in got if t is not Punct.WINDOW] == [t for t in want if t is not Punct.WINDOW]


def test_channel_merge_of_finals_watermarks_and_marks() -> None:
    m = ChannelMerge(2)
    assert not m.final(0) and m.final(1)
    assert m.watermark(0, 10) is None and m.watermark(1, 5) == 5 and m.watermark(1, 12) == 10
    assert not m.window(0) and not m.window(0) and m.window(1) and m.window(1) and not m.window(1)
    restored = ChannelMerge(2)
    restored.restore(m.state())
    assert restored.state() == m.state()


@pytest.mark.parametrize("rounds", [1, 3])
def test_event_time_panes_from_runs_of_tuples_match_the_runtime(rounds: int) -> None:
    # Tuples into a timeInterval window travel as runs (one list per group and stamped time);
    # stamped times that change mid-round and watermarks between them split the runs.
    ns = 1_000_000_000
    items: list[Any] = []
    for i in range(60):
        if i % 7 == 0:
            items.append(At(i * ns // 3))
        items.append({"k": i % 3 if i < 40 else 0, "v": i, "ts": i * 250})

    def graph() -> FrozenGraph:
        g = Graph("g")
        s = g.source("src", ListSource(items), event_time="ts", resolution="ms")
        a = g.operator("agg", Aggregate({"s": Sum("v"), "n": Count()}, copy=("k",)),
                       [s.window("timeInterval, intervalDuration(2), partitioned", partition_by="k")])
        g.sink("sink", ListSink(), [a])
        return g.freeze()

    want, got = _runtime(graph()), _bridge(graph(), rounds=rounds, bundle=5)
    assert len(want) >= 10
    # Panes of keys in different groups closed by one watermark come out group by group.
    for k in range(3):
        assert [t for t in got if isinstance(t, dict) and t["k"] == k] == \
            [t for t in want if isinstance(t, dict) and t["k"] == k]
    assert got.count(Punct.WINDOW) == want.count(Punct.WINDOW)
