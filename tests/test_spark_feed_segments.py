"""A key group's rows fed a segment at a time (`_keyed.feed_segments`, one `SyncGraph.feed_marked`
call per stretch of one stamped time) give the rows, order keys, timer outputs, state and last
item that the item-at-a-time loop `host_group` ran before gives, micro-batch by micro-batch."""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import Any

import pytest

from riverbed.core import SyncGraph
from riverbed.graph import FrozenGraph, Graph, Operator, Punct
from riverbed.operators import Aggregate, Count, Sum
from riverbed.spark_bridge._keyed import _RUN, Hosted, expand, feed_segments, host_group, rows_of
from riverbed.spark_bridge._rows import (
    KIND_BUNDLE,
    KIND_COMMAND,
    KIND_TIME,
    KIND_TUPLE,
    KIND_WATERMARK,
    encode,
    item_of,
    pack_seqs,
    source_ord,
)
from riverbed.spark_bridge._source import route_of, source_rows
from riverbed.testing import At, ListSink, ListSource
from riverbed.windows import EventType, StreamWindowEvent

NS = 1_000_000_000
Taken = list[tuple[bytes, int, list[Any]]]


class _Panes(Operator):
    window_events = frozenset({EventType.TRIGGER})

    def on_window_event(self, event: StreamWindowEvent[Any], port: int) -> None:
        self.submit({"k": event.partition, "n": len(event.tuples), "v": sum(t["v"] for t in event.tuples)})


def _items(n: int = 90) -> list[Any]:
    """Readings whose stamped time moves every few (so segments end), one without a key (the
    window refuses it: it goes to the error port, from inside a run) and two late."""
    items: list[Any] = []
    for i in range(n):
        if i % 11 == 0:
            items.append(At(i * NS // 4))
        if i == 31:
            items.append({"v": i, "ts": i * 250})
        elif i in (50, 51):
            items.append({"k": 1, "v": i, "ts": 100})  # late: its pane closed long ago
        else:
            items.append({"k": i % 4, "v": i, "ts": i * 250})
    return items


def _key(tup: Any) -> Any:
    return tup["k"]


def _event_time_graph() -> FrozenGraph:
    g = Graph("et")
    s = g.source("src", ListSource(_items()), event_time="ts", resolution="ms")
    a, errors = g.operator("agg", _Panes(), [s.window("timeInterval, intervalDuration(2), partitioned",
                                                       partition_by=_key)], error_port=True)
    g.sink("sink", ListSink(), [a])
    g.sink("errors", ListSink(), [errors])
    return g.freeze()


def _timed_graph() -> FrozenGraph:
    """A processing-time window: its timers fire between segments and inside them."""
    items: list[Any] = []
    for i in range(70):
        if i % 9 == 0:
            items.append(At(i * NS // 5))
        items.append({"k": i % 3, "v": i})
        if i % 17 == 16:
            items.append(Punct.WINDOW)
    g = Graph("timed")
    s = g.source("src", ListSource(items))
    a = g.operator("agg", Aggregate({"s": Sum("v"), "n": Count()}, copy=("k",)),
                   [s.window("tumbling, time(1), partitioned", partition_by="k")])
    g.sink("sink", ListSink(), [a])
    return g.freeze()


def _reference(host: SyncGraph, entry: tuple[str, int], rows: list[Any], *, runs: bool,
               on_timer: Callable[[int], None], emit: Callable[..., None]) -> tuple[bytes, int] | None:
    """`host_group`'s loop as it was (no hooks, no splitter): an item at a time."""
    items = expand(rows, runs=runs)
    for it in items:
        ord_, kind, at = it[0], it[1], it[2]
        host.advance(at, on_timer)
        if kind == _RUN:
            host.feed(*entry, it[4])
        elif kind == KIND_TUPLE:
            host.feed(*entry, [it[4]])
        else:
            item = item_of(kind, it[3], None)
            if item is not None:
                host.feed(*entry, item)
        if host.exits:
            emit(host.take_exits(), ord_, at)
    return (items[-1][0], int(items[-1][2])) if items else None


def _run(graph: FrozenGraph, rows: list[Any], feeder: Any, *, runs: bool, per_batch: int) -> list[Any]:
    """Everything fed through ``feeder``, ``per_batch`` rows a micro-batch, state stored between."""
    results: list[Any] = []
    state: Any = None
    for start in range(0, len(rows), per_batch):
        part = rows[start:start + per_batch]
        host = (SyncGraph(graph, ["agg"], state=state) if state is not None
                else SyncGraph(graph, ["agg"], now=int(part[0][2])))
        taken: Taken = []
        timers: Taken = []
        last = feeder(host, ("src", 0), part, runs=runs,
                      on_timer=lambda when, h=host, t=timers: t.append((b"", when, h.take_exits())),
                      emit=lambda exits, cause, at, t=taken: t.append((cause, at, exits)),
                      **({"where": "agg/0"} if feeder is feed_segments else {}))
        state = host.state()
        results.append((taken, timers, last, state))
    return results


@pytest.mark.parametrize("per_batch", [1, 3, 1000])
@pytest.mark.parametrize(("make", "runs"), [(_event_time_graph, True), (_event_time_graph, False),
                                            (_timed_graph, False), (_timed_graph, True)])
@pytest.mark.parametrize("bundle", [7, 40, 0])  # source items a round of bundles; 0: rows, no bundles
def test_segments_give_what_the_item_at_a_time_loop_gave(make: Callable[[], FrozenGraph], runs: bool,
                                                          per_batch: int, bundle: int) -> None:
    graph = make()
    bundled = bundle > 0
    route = route_of(graph, "agg", 2, bundle, [0, 1]) if bundled else None
    rows = [r[:5] for r in source_rows(graph, "src", 0, route=route) if not bundled or r[5] == 0]
    want = _run(graph, rows, _reference, runs=runs, per_batch=per_batch)
    got = _run(graph, rows, feed_segments, runs=runs, per_batch=per_batch)
    assert got == want
    taken = [t for batch in want for t in batch[0]]
    fired = [t for batch in want for t in batch[1] if t[2]]
    assert len(taken) + len(fired) >= 10  # panes, marks and watermarks came out
    if make is _event_time_graph:
        errors = [e for _, _, exits in taken for e in exits if e[1] == 1 and type(e[2]) is list]
        assert len(errors) == 1 and "k" not in errors[0][2][0]["tuple"]  # from inside a run
    else:
        assert len(fired) >= 3  # timers raised panes


def test_host_group_feeds_segments_into_a_time_interval_window_with_the_same_rows() -> None:
    graph = _event_time_graph()
    rows = [r[:5] for r in source_rows(graph, "src", 0, route=route_of(graph, "agg", 2, 7, [0, 1]))
            if r[5] == 1]
    tail: list[tuple[bytes, int]] = []
    out, _ = host_group(Hosted(graph, ("agg",), ("src", 0)), None, (1,), rows, None, tail=tail)
    host = SyncGraph(graph, ["agg"], now=int(rows[0][2]))
    want: list[Any] = []

    def on_timer(when: int) -> None:
        rows_of(want, host.take_exits(), source_ord(when, 0, 0), when, (1,))

    last = _reference(host, ("src", 0), rows, runs=True, on_timer=on_timer,
                      emit=lambda exits, cause, at: rows_of(want, exits, cause, at, (1,)))
    assert out == want
    assert len(out) >= 10
    assert tail == [last]


def test_a_command_row_is_refused_where_no_hooks_take_it() -> None:
    graph = _event_time_graph()
    host = SyncGraph(graph, ["agg"])
    rows = [(source_ord(0, 0, 1), KIND_TIME, 0, 0, None),
            (source_ord(0, 0, 2), KIND_COMMAND, 0, 0, encode(1))]
    with pytest.raises(ValueError, match="agg/0: a command row, but this stage takes no commands"):
        feed_segments(host, ("src", 0), rows, runs=True, on_timer=lambda when: None,
                      emit=lambda *a: None, where="agg/0")


def test_two_runs_of_one_time_in_a_row_are_fed_apart_each_with_its_own_order_key() -> None:
    # The feeder makes no such bundle (a mark or a time mark comes between), but the loop fed
    # each entry apart: the refused tuple's error is ordered after the first run's last tuple.
    graph = _event_time_graph()
    run1 = [{"k": 0, "v": 1, "ts": 10}, {"v": 2, "ts": 20}, {"k": 2, "v": 3, "ts": 30}]
    run2 = [{"k": 0, "v": 4, "ts": 40}]
    entries = [[KIND_TIME, 0, 0, 0], [KIND_TUPLE, 0, pack_seqs(array("Q", [1, 2, 3])), run1],
               [KIND_TUPLE, 0, pack_seqs(array("Q", [4])), run2], [KIND_WATERMARK, 0, 5000, 5],
               [KIND_TIME, 0, 0, 6]]
    rows = [(source_ord(0, 0, 0), KIND_BUNDLE, 0, 0, encode([0, entries]))]
    want = _run(graph, rows, _reference, runs=True, per_batch=1)
    got = _run(graph, rows, feed_segments, runs=True, per_batch=1)
    assert got == want
    taken = want[0][0]
    assert taken[0][0] == source_ord(0, 0, 3)  # the error, after the first run
    assert taken[0][2][0][1] == 1


def test_what_a_run_raised_is_ordered_after_its_last_tuple() -> None:
    graph = _event_time_graph()
    run = [{"k": 0, "v": 1, "ts": 10}, {"v": 2, "ts": 20}, {"k": 2, "v": 3, "ts": 30}]
    entries = [[KIND_TUPLE, 0, pack_seqs(array("Q", [7, 8, 9])), run], [KIND_TIME, 0, 0, 10]]
    rows = [(source_ord(0, 3, 7), KIND_BUNDLE, 0, 0, encode([3, entries]))]
    got = _run(graph, rows, feed_segments, runs=True, per_batch=1)
    assert got == _run(graph, rows, _reference, runs=True, per_batch=1)
    assert [cause for cause, _, _ in got[0][0]] == [source_ord(0, 3, 9)]
    alone = _run(graph, rows, feed_segments, runs=False, per_batch=1)
    assert alone == _run(graph, rows, _reference, runs=False, per_batch=1)
    assert [cause for cause, _, _ in alone[0][0]] == [source_ord(0, 3, 8)]  # each tuple alone


@pytest.mark.parametrize("cols", [(4,), (4, "case-1")])
def test_rows_of_makes_each_exit_a_row_ordered_after_its_cause(cols: tuple[Any, ...]) -> None:
    from riverbed.graph import Watermark
    from riverbed.spark_bridge._rows import KIND_FINAL, KIND_TUPLE, KIND_WATERMARK, KIND_WINDOW, derived_ord

    exits = [("agg", 0, [{"a": 1}, {"a": 2}]), ("agg", 0, Punct.WINDOW), ("agg", 1, [{"e": 3}]),
             ("agg", 0, Watermark(9)), ("agg", 0, []), ("agg", 0, Punct.FINAL)]
    cause = source_ord(5, 0, 2)
    want = [(derived_ord(cause, 0), KIND_TUPLE, 5, 0, {"a": 1}, 0, *cols),
            (derived_ord(cause, 1), KIND_TUPLE, 5, 0, {"a": 2}, 0, *cols),
            (derived_ord(cause, 2), KIND_WINDOW, 5, 0, None, 0, *cols),
            (derived_ord(cause, 3), KIND_TUPLE, 5, 0, {"e": 3}, 1, *cols),
            (derived_ord(cause, 4), KIND_WATERMARK, 5, 9, None, 0, *cols),
            (derived_ord(cause, 5), KIND_FINAL, 5, 0, None, 0, *cols)]
    out: list[Any] = [("earlier",)]
    rows_of(out, exits, cause, 5, cols)
    assert out[1:] == want
    assert [r[0][-4:] for r in out[1:]] == [i.to_bytes(4, "big") for i in range(6)]
