"""`SyncGraph.feed_marked`: a marked batch fed in one call gives, apart for each run and control
item, the exits that feeding them one at a time (`feed`, with `advance` before each) gives, and
leaves the host in the same state."""

from __future__ import annotations

from typing import Any

import pytest

from riverbed.core import MarkedBatch, OperatorError, SyncGraph
from riverbed.graph import FrozenGraph, Graph, Operator, Punct, Schema, Watermark
from riverbed.operators import Aggregate, Count, Functor, Sum
from riverbed.testing import ListSink, ListSource
from riverbed.windows import EventType, StreamWindowEvent

Exits = list[tuple[int, list[tuple[str, int, Any]]]]


def _tuples(n: int, start: int = 0) -> list[Any]:
    return [{"k": i % 3, "v": i, "ts": 100 * i} for i in range(start, start + n)]


def _graph(op: Operator, clause: str | None, *, after: Operator | None = None,
           error_port: bool = False, event_time: bool = False) -> FrozenGraph:
    g = Graph("g")
    schema = Schema(k="int64", v="int64", ts="int64") if event_time else None
    src = g.source("src", ListSource([]), schema=schema,
                   **({"event_time": "ts", "resolution": "ms"} if event_time else {}))
    port: Any = src.window(clause, partition_by="k") if clause else src
    out = g.operator("op", op, [port], error_port=error_port)
    streams = out if isinstance(out, tuple) else (out,)
    if after is not None:
        streams = (g.operator("after", after, [streams[0]]), *streams[1:])
    for i, s in enumerate(streams):
        g.sink(f"sink{i}", ListSink(), [s])
    return g.freeze()


def _members(graph: FrozenGraph) -> list[str]:
    return [n for n in ("op", "after") if any(o.name == n for o in graph.operators)]


def _pieces(batch: list[Any], one_by_one: bool) -> list[tuple[int, Any]]:
    """What the host feeds apart, written out plainly: runs of tuples, or each tuple, and each
    control item, with the index of its last item."""
    pieces: list[tuple[int, Any]] = []
    run: list[Any] = []
    for i, x in enumerate(batch):
        if x is Punct.WINDOW or x is Punct.FINAL or isinstance(x, Watermark):
            if run:
                pieces.append((i - 1, run))
                run = []
            pieces.append((i, x))
        elif one_by_one:
            pieces.append((i, [x]))
        else:
            run.append(x)
    if run:
        pieces.append((len(batch) - 1, run))
    return pieces


def _taker(host: SyncGraph, timers: list[Any] | None) -> Any:
    """An ``on_timer`` that takes what each timer raised, as the Spark stage's does."""
    if timers is None:
        return None
    return lambda when: timers.append((when, host.take_exits()))


def _one_at_a_time(host: SyncGraph, batch: list[Any], *, one_by_one: bool = False,
                   timers: list[Any] | None = None) -> Exits:
    on_timer = _taker(host, timers)
    done: Exits = []
    for last, item in _pieces(batch, one_by_one):
        host.advance(host.now(), on_timer)
        host.feed("src", 0, item)
        if host.exits:
            done.append((last, host.take_exits()))
    return done


def _both(graph: FrozenGraph, batch: list[Any], *, one_by_one: bool = False, now: int = 0,
          controls: list[int] | None = None, timers: bool = False) -> tuple[Exits, list[Any] | None]:
    """Exits of the same batch fed one item at a time and in one call, each on a fresh host;
    both hosts must then hold the same state (and with ``timers``, the timers' exits taken
    apart must be equal too). Returns the exits and what the timers raised."""
    members = _members(graph)
    plain, marked = SyncGraph(graph, members, now=now), SyncGraph(graph, members, now=now)
    plain_timers: list[Any] | None = [] if timers else None
    marked_timers: list[Any] | None = [] if timers else None
    expected = _one_at_a_time(plain, batch, one_by_one=one_by_one, timers=plain_timers)
    got = marked.feed_marked("src", 0, batch, controls, one_by_one=one_by_one,
                             on_timer=_taker(marked, marked_timers))
    assert got == expected
    assert marked.state() == plain.state()
    assert marked_timers == plain_timers
    return got, marked_timers


@pytest.mark.parametrize(("clause", "positions"), [
    ("tumbling, punct(), partitioned", [7, 28]),  # each mark flushes the panes: exits of its own
    ("tumbling, count(4), partitioned", [27]),  # the second run fills panes; marks pass unseen
])
def test_a_window_mark_inside_the_batch_ends_a_run_and_its_exits_are_its_own(
        clause: str, positions: list[int]) -> None:
    graph = _graph(Aggregate({"s": Sum("v"), "n": Count()}, copy=("k",)), clause,
                   after=Functor(output={"twice": lambda t: 2 * t["s"]}))
    batch = [*_tuples(7), Punct.WINDOW, *_tuples(20, 7), Punct.WINDOW, *_tuples(3, 27)]
    got, _ = _both(graph, batch)
    assert [i for i, _ in got] == positions
    assert all(e[0] == "after" for _, exits in got for e in exits)  # through the second member
    _both(graph, MarkedBatch(batch, 30, 2, [7, 28]))  # its own controls
    _both(graph, MarkedBatch(batch, 30, 2))  # controls unknown: found by walking


def test_watermarks_close_panes_of_a_time_interval_window_each_with_its_own_exits() -> None:
    class Panes(Operator):
        window_events = frozenset({EventType.TRIGGER})

        def on_window_event(self, event: StreamWindowEvent[Any], port: int) -> None:
            self.submit({"k": event.partition, "n": len(event.tuples),
                         "v": sum(t["v"] for t in event.tuples)})

    graph = _graph(Panes(), "timeInterval, intervalDuration(1), partitioned", event_time=True)
    batch = [*_tuples(12), Watermark(1000), *_tuples(10, 12), Watermark(1500), Watermark(2000),
             *_tuples(5, 22), Watermark(2600)]
    got, _ = _both(graph, batch)
    assert [i for i, _ in got] == [12, 23, 24, 30]  # each watermark's panes, then the watermark
    _both(graph, batch, one_by_one=True)


def test_final_punctuation_in_the_batch_closes_the_members_as_feed_does() -> None:
    graph = _graph(Aggregate({"s": Sum("v")}, copy=("k",)), "tumbling, count(5), partitioned")
    batch = [*_tuples(11), Punct.WINDOW, *_tuples(2, 11), Punct.FINAL]
    got, _ = _both(graph, batch)
    assert got[-1][0] == len(batch) - 1
    assert got[-1][1][-1] == ("op", 0, Punct.FINAL)
    members = _members(graph)
    host = SyncGraph(graph, members)
    host.feed_marked("src", 0, batch)
    assert host.finished
    assert host.feed_marked("src", 0, _tuples(3)) == []  # a finished member takes nothing more


def test_a_sliding_window_fed_one_tuple_at_a_time_orders_each_output_after_its_tuple() -> None:
    graph = _graph(Aggregate({"s": Sum("v")}, copy=("k",)), "sliding, count(3), count(1), partitioned")
    batch = [*_tuples(9), Punct.WINDOW, *_tuples(4, 9)]
    got, _ = _both(graph, batch, one_by_one=True)
    # From each key's third tuple on, every tuple raises its own aggregate (the mark, at 9, none).
    assert [i for i, _ in got] == [6, 7, 8, 10, 11, 12, 13]
    assert [len(exits) for _, exits in got] == [2] * 7  # its aggregate, then a mark


class _Fails(Operator):
    """Doubles ``v``; a tuple with v == 5 raises."""

    def on_tuple(self, tup: Any, port: int) -> None:
        if tup["v"] == 5:
            raise ValueError("five is not allowed")
        self.submit({"v": 2 * tup["v"]})


def test_an_operator_that_fails_routes_the_tuple_to_its_error_port_in_its_runs_exits() -> None:
    graph = _graph(_Fails(), None, error_port=True)
    batch = [*_tuples(4), Punct.WINDOW, *_tuples(4, 4), Watermark(3)]
    got, _ = _both(graph, batch)
    errors = [e for _, exits in got for e in exits if e[1] == 1]
    assert len(errors) == 1 and errors[0][2][0]["tuple"]["v"] == 5
    assert [i for i, exits in got if any(e[1] == 1 for e in exits)] == [8]  # the second run's


def test_an_operator_that_fails_without_an_error_port_stops_the_host_as_feed_does() -> None:
    graph = _graph(_Fails(), None)
    batch = [*_tuples(4), Punct.WINDOW, *_tuples(4, 4)]
    with pytest.raises(OperatorError) as one:
        _one_at_a_time(SyncGraph(graph, ["op"]), batch)
    with pytest.raises(OperatorError) as whole:
        SyncGraph(graph, ["op"]).feed_marked("src", 0, batch)
    assert str(whole.value) == str(one.value)
    assert "five is not allowed" in str(whole.value)


class _Later(Operator):
    """On each tuple, a timer at the current time (due before the next item): it submits how
    many tuples it had seen."""

    def __init__(self) -> None:
        self.seen = 0

    def on_tuple(self, tup: Any, port: int) -> None:
        self.seen += 1
        if tup["v"] % 4 == 0:
            self.context.call_at(self.context.now(), lambda: self.submit({"seen": self.seen}))

    def snapshot(self) -> Any:
        return self.seen

    def restore(self, state: Any) -> None:
        self.seen = state


@pytest.mark.parametrize("timers", [True, False])
def test_a_timer_due_between_two_items_fires_between_them(timers: bool) -> None:
    graph = _graph(_Later(), None)
    batch = [*_tuples(6), Punct.WINDOW, *_tuples(6, 6), Punct.WINDOW]
    got, fired = _both(graph, batch, one_by_one=True, now=5, timers=timers)
    raised = [e[2] for _, exits in got for e in exits if type(e[2]) is list]
    if timers:  # taken apart by the callback, at the time they fired
        assert not raised
        assert fired is not None
        raised = [e[2] for _, exits in fired for e in exits if type(e[2]) is list]
        assert [when for when, _ in fired] == [5, 5, 5]
    else:  # with the next item's exits: after v=0 with v=1's (index 1), and so on
        assert [i for i, exits in got if any(type(e[2]) is list for e in exits)] == [1, 5, 10]
    assert raised == [[{"seen": n}] for n in (1, 5, 9)]  # fired before the next tuple


def test_a_stream_feeding_two_members_goes_through_feed() -> None:
    g = Graph("fan")
    src = g.source("src", ListSource([]))
    a = g.operator("op", Functor(output={"a": lambda t: t["v"]}), [src])
    b = g.operator("after", Functor(output={"b": lambda t: -t["v"]}), [src])
    g.sink("sink0", ListSink(), [a])
    g.sink("sink1", ListSink(), [b])
    graph = g.freeze()
    got, _ = _both(graph, [*_tuples(3), Punct.WINDOW, *_tuples(2, 3), Punct.FINAL])
    assert {e[0] for _, exits in got for e in exits} == {"op", "after"}


class _FailsAt(Operator):
    """Submits each tuple; raises at ``v == at``, or in a timer due at ``timer_at``."""

    def __init__(self, at: int = -1, timer_at: int | None = None) -> None:
        self.at, self.timer_at = at, timer_at

    def on_ports_ready(self) -> None:
        if self.timer_at is not None:
            self.context.call_at(self.timer_at, self._boom)

    def _boom(self) -> None:
        raise RuntimeError("timer")

    def on_tuple(self, tup: Any, port: int) -> None:
        if tup["v"] == self.at:
            raise ValueError("bad")
        self.submit(tup)


@pytest.mark.parametrize("where", ["tuple", "timer"])
def test_a_host_that_drains_failures_ends_the_failed_operator_and_goes_on(where: str) -> None:
    # A parallel region's worker in a job without checkpoints: the operator ends as in the
    # runtime (what it submitted first, then final; later input dropped), the failure is kept.
    op = _FailsAt(at=2) if where == "tuple" else _FailsAt(timer_at=50)
    graph = _graph(op, None, after=Functor(lambda t: t))
    sync = SyncGraph(graph, _members(graph))
    sync.drains_failures = True
    sync.feed("src", 0, _tuples(2))  # v = 0, 1
    sync.advance(100)
    sync.feed("src", 0, _tuples(3, start=2))  # v = 2, 3, 4: dropped (or failing at 2)
    sync.feed("src", 0, Punct.FINAL)
    exits = sync.take_exits()
    assert [e[2] for e in exits] == [_tuples(2), Punct.FINAL]
    assert [type(f.cause) for f in sync.failures] == [ValueError if where == "tuple" else RuntimeError]
    assert sync.finished
