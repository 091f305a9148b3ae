"""A timeInterval windowed port takes a marked run (tuples among watermarks and window marks)
whole, applying in place only the watermarks that change a pane: what the operator sees and
submits, its windows' state and its metrics are exactly those of feeding every item alone.

The runs are random: event times that move forward with jitter (late tuples, tuples past the
drop point), watermarks at random places (some not advancing), window marks, bad tuples,
partitioned or not, tumbling, sliding, offset and with gaps between panes, with or without a
discard age. An operator that records every pane event with the watermark and drop point its
window had then, and every window mark with them, makes any skipped watermark that mattered,
or one applied late or early, show."""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.core import MarkedBatch, OperatorError, SyncGraph
from riverbed.graph import FrozenGraph, Graph, Operator, PortInput, Punct, Schema, Watermark
from riverbed.operators import Aggregate, Count, Sum
from riverbed.testing import ListSink, ListSource
from riverbed.windows import StreamWindowEvent, TimeIntervalWindow, _time_interval


class PaneLog(Operator):
    """Submits every pane event and every window mark it hears, with what its window held as
    event time then (watermark, drop point) and the operator's watermark."""

    def on_window_event(self, event: StreamWindowEvent[Any], port: int) -> None:
        self.submit({"event": event.type.name, "start": event.interval_start,
                     "end": event.interval_end, "key": event.partition,
                     "ids": [t["v"] for t in event.tuples], "index": event.pane_index,
                     "timing": event.pane_timing.name, **self._time(port)})

    def on_punct(self, punct: Punct, port: int) -> None:
        if punct is Punct.WINDOW:
            self.submit({"event": "MARK", **self._time(port)})

    def _time(self, port: int) -> dict[str, Any]:
        window = self.context.window(port)
        assert isinstance(window, TimeIntervalWindow)
        return {"window_wm": window.watermark_value, "drop": window.drop_point,
                "wm": self.context.watermark}


def _graph(op: Operator, clause: str, *, partitioned: bool, sources: int = 1,
           error_port: bool = False) -> FrozenGraph:
    g = Graph("g")
    schema = Schema(k="int64", v="int64", ts="int64")
    streams = tuple(g.source(f"src{i}", ListSource([]), schema=schema, event_time="ts",
                             resolution="ms") for i in range(sources))
    port = PortInput(streams, clause, "k" if partitioned else None)
    out = g.operator("op", op, [port], error_port=error_port)
    for i, s in enumerate(out if isinstance(out, tuple) else (out,)):
        g.sink(f"sink{i}", ListSink(), [s])
    return g.freeze()


def _flat(exits: list[tuple[str, int, Any]]) -> dict[int, list[Any]]:
    """Each port's stream, item by item (a batch's tuples one by one). An error tuple's text
    names the failed tuple's place in the batch the window was given ("tuple 3 of the batch:
    ..."), which depends on how the host batched the tuples: that prefix is left out."""
    out: dict[int, list[Any]] = {}
    for _, port, item in exits:
        seq = out.setdefault(port, [])
        if type(item) is list:
            seq.extend(("tuple", _unplaced(t)) for t in item)
        elif isinstance(item, Watermark):
            seq.append(("watermark", item.value))
        else:
            seq.append(("punct", item))
    return out


def _unplaced(tup: Any) -> Any:
    if isinstance(tup, dict) and isinstance(tup.get("error"), str):
        return {**tup, "error": re.sub(r"^tuple \d+ of the batch: ", "", tup["error"])}
    return tup


def _feed(host: SyncGraph, items: list[Any], whole: bool, controls: bool,
          source: str = "src0") -> dict[int, list[Any]]:
    if whole:
        at = [i for i, x in enumerate(items) if x is Punct.WINDOW or type(x) is Watermark]
        batch = MarkedBatch(items, len(items) - len(at), None, at if controls else None)
        host.feed(source, 0, batch)
    else:
        for x in items:
            host.feed(source, 0, x if x is Punct.WINDOW or type(x) is Watermark else [x])
    return _flat(host.take_exits())


def _state(host: SyncGraph) -> Any:
    core = host.core("op")
    pm = core.metrics.inputs[0]
    window = core.windows[0]
    assert isinstance(window, TimeIntervalWindow)
    return (core.checkpoint_state(drain=False), core.watermark, pm.tuples_processed,
            pm.tuples_dropped_late, pm.window_puncts_processed, pm.errors, window.dropped,
            window.unassigned, window.drop_point)


_item = st.one_of(
    st.tuples(st.just("t"), st.integers(-2600, 700), st.integers(0, 250), st.integers(0, 3)),
    st.tuples(st.just("w"), st.integers(-400, 1200), st.just(0), st.just(0)),
    st.tuples(st.just("m"), st.just(0), st.just(0), st.just(0)),
)


def _items(steps: list[tuple[str, int, int, int]], bad: bool = False) -> list[Any]:
    """Tuples whose times move forward (a step of ``advance``) with ``jitter`` around the
    clock, watermarks ``offset`` from it, window marks; with ``bad``, every 13th tuple has a
    float event time."""
    clock, out = 5000, []
    for n, (kind, a, b, key) in enumerate(steps):
        if kind == "t":
            clock += b
            ts: Any = max(0, clock + a)
            if bad and n % 13 == 5:
                ts = float(ts)
            out.append({"k": key, "v": n, "ts": ts})
        elif kind == "w":
            out.append(Watermark(clock + a))
        else:
            out.append(Punct.WINDOW)
    return out


def _clause(d: int, p: int, a: int, o: int, partitioned: bool) -> str:
    return (f"timeInterval, intervalDuration({d / 4}), creationPeriod({p / 4}), discardAge({a / 4}),"
            f" intervalOffset({o / 8})" + (", partitioned" if partitioned else ""))


_clauses = {"d": st.integers(1, 8), "p": st.integers(1, 8), "a": st.sampled_from([0, 0, 1, 3, 8]),
            "o": st.integers(0, 7), "partitioned": st.booleans()}


def _compare(make: Any, clause: str, partitioned: bool, runs: list[list[Any]], *,
             controls: bool = True, error_port: bool = False) -> None:
    graph = _graph(make(), clause, partitioned=partitioned, error_port=error_port)
    whole = SyncGraph(graph, ["op"])
    alone = SyncGraph(graph, ["op"])
    for items in runs:
        assert _feed(whole, items, True, controls) == _feed(alone, items, False, controls)
        assert _state(whole) == _state(alone)


@settings(max_examples=400, deadline=None)
@given(**_clauses, steps=st.lists(_item, max_size=80), split=st.integers(0, 80),
       controls=st.booleans())
def test_a_marked_run_whole_raises_what_each_item_alone_raises(
        d: int, p: int, a: int, o: int, partitioned: bool, steps: list[Any], split: int,
        controls: bool) -> None:
    items = _items(steps)
    _compare(PaneLog, _clause(d, p, a, o, partitioned), partitioned,
             [items[:split], items[split:], [Watermark(10**7)]], controls=controls)


@settings(max_examples=200, deadline=None)
@given(**_clauses, steps=st.lists(_item, max_size=80))
def test_aggregate_over_a_marked_run_whole_submits_what_it_submits_item_by_item(
        d: int, p: int, a: int, o: int, partitioned: bool, steps: list[Any]) -> None:
    items = _items(steps)
    _compare(lambda: Aggregate({"n": Count(), "s": Sum("v")}), _clause(d, p, a, o, partitioned),
             partitioned, [items, [Watermark(10**7)]])


@settings(max_examples=150, deadline=None)
@given(**_clauses, steps=st.lists(_item, max_size=80))
def test_bad_tuples_in_a_marked_run_go_to_the_error_port_as_item_by_item(
        d: int, p: int, a: int, o: int, partitioned: bool, steps: list[Any]) -> None:
    items = _items(steps, bad=True)
    _compare(PaneLog, _clause(d, p, a, o, partitioned), partitioned,
             [items, [Watermark(10**7)]], error_port=True)


def test_a_bad_tuple_without_an_error_port_stops_the_job_naming_it() -> None:
    items = _items([("t", 0, 300, 1)] * 5 + [("w", 0, 0, 0)] + [("t", 0, 300, 1)] * 15, bad=True)
    graph = _graph(PaneLog(), _clause(4, 4, 0, 0, False), partitioned=False)
    for whole in (True, False):
        host = SyncGraph(graph, ["op"])
        with pytest.raises(OperatorError, match="float"):
            _feed(host, items, whole, True)


@settings(max_examples=150, deadline=None)
@given(**_clauses, steps=st.lists(_item, max_size=60),
       other=st.lists(st.integers(0, 3000), max_size=4))
def test_a_port_with_two_connections_moves_with_their_lowest_watermark(
        d: int, p: int, a: int, o: int, partitioned: bool, steps: list[Any],
        other: list[int]) -> None:
    clause = _clause(d, p, a, o, partitioned)
    graph = _graph(PaneLog(), clause, partitioned=partitioned, sources=2)
    whole = SyncGraph(graph, ["op"])
    alone = SyncGraph(graph, ["op"])
    items = _items(steps)
    chunk = max(1, len(items) // (len(other) + 1))
    for n, start in enumerate(range(0, len(items) + 1, chunk)):
        part = items[start:start + chunk]
        assert _feed(whole, part, True, True) == _feed(alone, part, False, True)
        if n < len(other):  # the other connection's watermark moves between runs
            for host in (whole, alone):
                host.feed("src1", 0, Watermark(5000 + other[n] * (n + 1)))
        assert _flat(whole.take_exits()) == _flat(alone.take_exits())
        assert _state(whole) == _state(alone)


def test_quiet_watermarks_are_forwarded_in_place_between_the_panes_results() -> None:
    """W2's shape: a watermark every 100 ms, a pane every second; each watermark leaves in its
    place, after the results of the pane it completes, and the window ends at the last one."""
    clause = "timeInterval, intervalDuration(1), partitioned"
    items: list[Any] = []
    for ms in range(0, 3000, 10):
        items.append({"k": ms % 3, "v": ms, "ts": ms})
        if ms % 100 == 99 - 9:
            items.append(Watermark(ms))
    graph = _graph(PaneLog(), clause, partitioned=True)
    whole, alone = SyncGraph(graph, ["op"]), SyncGraph(graph, ["op"])
    out = _feed(whole, items, True, True)
    assert out == _feed(alone, items, False, True)
    seq = out[0]
    watermarks = [x[1] for x in seq if x[0] == "watermark"]
    assert watermarks == [x.value for x in items if type(x) is Watermark]
    first_pane = next(i for i, x in enumerate(seq) if x[0] == "tuple")
    assert seq[first_pane - 1] == ("watermark", 990)
    assert seq[first_pane + 9] == ("watermark", 1090)  # 3 keys: INITIAL_FULL, TRIGGER, CLOSE
    window = whole.core("op").windows[0]
    assert isinstance(window, TimeIntervalWindow) and window.watermark_value == 2990


@settings(max_examples=300, deadline=None)
@given(d=st.integers(1, 4), p=st.integers(1, 6), a=st.integers(0, 6), partitioned=st.booleans(),
       gaps=st.lists(st.integers(0, 400), min_size=1, max_size=120),
       keys=st.lists(st.sampled_from([0, 1, "k", None]), min_size=1, max_size=5),
       cuts=st.lists(st.integers(0, 120), max_size=6), late=st.booleans())
def test_a_run_in_time_order_across_periods_goes_in_as_one_by_one(
        d: int, p: int, a: int, partitioned: bool, gaps: list[int], keys: list[Any],
        cuts: list[int], late: bool) -> None:
    """`_insert_in_one_period` for a run whose times move forward across pane boundaries (a
    marked run inserted whole crosses one at each pane): a period at a time, as one by one."""
    clause = (f"timeInterval, intervalDuration({d * p / 8}), creationPeriod({p / 8}), "
              f"discardAge({a / 8})" + (", partitioned" if partitioned else ""))
    events: list[list[Any]] = [[], []]
    one = TimeIntervalWindow(clause, event_time="ts", partition_by="k" if partitioned else None)
    many = TimeIntervalWindow(clause, event_time="ts", partition_by="k" if partitioned else None)
    for w, log in ((one, events[0]), (many, events[1])):
        w.register_listener(lambda e, log=log: log.append(
            (e.type.name, e.interval_start, e.partition, [t["v"] for t in e.tuples],
             e.pane_index, e.pane_timing)))
    ts, tuples = 10_000, []
    for n, gap in enumerate(gaps):
        ts += gap
        tuples.append({"v": n, "ts": ts, "k": keys[n % len(keys)]})
    if late:  # a watermark first: the run's earliest tuples are late, or dropped
        for w in (one, many):
            w.watermark(10_000 + gaps[0] + 300)
    bounds = [0, *sorted(c for c in cuts if c < len(tuples)), len(tuples)]
    with pytest.MonkeyPatch.context() as m:
        m.setattr(_time_interval, "_BULK_RUN", 1)
        for lo, hi in itertools.pairwise(bounds):
            many.insert_batch(tuples[lo:hi])
    for t in tuples:
        one.insert(t)
    for w in (one, many):
        w.watermark(ts + 10**6)
    assert events[1] == events[0]
    assert many.snapshot() == one.snapshot() and many.dropped == one.dropped


def test_a_late_tuple_at_the_end_of_a_run_triggers_its_pane_at_the_next_runs_first_watermark() -> None:
    """A late tuple (after the watermark, before the drop point) goes into a complete pane at
    the end of one run; the next run's first watermark must trigger that pane again, though
    it is far from the pane's close."""
    clause = "timeInterval, intervalDuration(1), discardAge(5)"
    graph = _graph(PaneLog(), clause, partitioned=False)
    whole, alone = SyncGraph(graph, ["op"]), SyncGraph(graph, ["op"])
    first = [{"k": 0, "v": 1, "ts": 100}, Watermark(1200), {"k": 0, "v": 2, "ts": 500}]
    assert _feed(whole, first, True, True) == _feed(alone, first, False, True)
    second = [Watermark(1300), {"k": 0, "v": 3, "ts": 1400}]
    out = _feed(whole, second, True, True)
    assert out == _feed(alone, second, False, True)
    events = [(x[1]["event"], x[1]["ids"], x[1]["timing"]) for x in out[0] if x[0] == "tuple"]
    assert events == [("TRIGGER", [1, 2], "LATE")]
    assert out[0][-1] == ("watermark", 1300)


@settings(max_examples=300, deadline=None)
@given(**_clauses, steps=st.lists(st.tuples(st.booleans(), st.integers(0, 120), st.integers(-300, 150),
                                            st.integers(0, 3)), max_size=120),
       split=st.integers(0, 120))
def test_a_sources_run_passed_over_in_quiet_runs_raises_what_each_item_alone_raises(
        d: int, p: int, a: int, o: int, partitioned: bool, steps: list[tuple[bool, int, int, int]],
        split: int) -> None:
    """A source's run: event times in order, rising watermarks, no window marks. Its runs of
    quiet watermarks are passed over in one step (`_quiet_run`); a watermark ahead of the
    tuples after it (they may be late, or below its drop point) stops the step there."""
    clock, last, items = 5000, 0, []
    for n, (is_tuple, advance, offset, key) in enumerate(steps):
        clock += advance
        if is_tuple:
            items.append({"k": key, "v": n, "ts": clock})
        else:
            last = max(last + 1, clock + offset)
            items.append(Watermark(last))
    _compare(PaneLog, _clause(d, p, a, o, partitioned), partitioned,
             [items[:split], items[split:], [Watermark(10**7)]])
