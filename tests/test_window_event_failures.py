"""A window listener that raises, in an operator with an error port: the window finishes its
step as if the listener had returned, and the error port receives the tuples the failed event
took out of the window (a tumble's, an eviction's, a final's, a pane's trigger), or one record
with no tuple when the tuples stay (a sliding trigger). Before, the step stopped at the
failure: a tumble's other tuples were lost, a sliding window skipped the arriving tuple, and a
failure at a mark, a timer or a watermark ended the job despite the error port."""

from __future__ import annotations

from typing import Any

import pytest

from riverbed.graph import Graph, Operator, Punct, Watermark
from riverbed.operators import Aggregate, Count, IntervalStart, Sum
from riverbed.runtime import JobError, VirtualClock, run_graph
from riverbed.testing import ListSink, ListSource, at
from riverbed.windows import EventType

POISON = {13, 26}
S = 1_000_000_000

# The events whose tuples leave with them (each goes to the error port when it fails).
GONE = {"INSERTION", "EVICTION", "PARTITION_EVICTION", "FINAL"}

CLAUSES = [
    "tumbling, count(4)",
    "tumbling, count(3), partitioned",
    "tumbling, count(5), partitioned, partitionAge(2.0)",
    "tumbling, count(4), partitioned, partitionCount(1)",
    "tumbling, delta(i, 3)",
    "tumbling, time(2.0)",
    "tumbling, time(2.0), partitioned",
    "tumbling, punct()",
    "sliding, count(4)",
    "sliding, count(4), count(2)",
    "sliding, count(3), count(1), partitioned",
    "sliding, count(5), count(2), partitioned, partitionCount(1)",
    "sliding, time(3.0), count(1)",
    "sliding, time(2.0), time(1.0)",
    "sliding, delta(i, 4), count(1)",
    "sliding, delta(i, 4), count(3), partitioned",
]

WANTED: list[frozenset[EventType] | None] = [
    None,  # every event, INSERTION included (the generic step)
    frozenset({EventType.EVICTION, EventType.TRIGGER, EventType.PARTITION_EVICTION}),  # compiled
]


def items() -> list[Any]:
    """40 tuples over three keys, half a second apart, a window mark after every fifth."""
    out: list[Any] = []
    for i in range(40):
        out.append(at(i * 0.5))
        out.append({"i": i, "k": "abc"[i % 3], "v": i})
        if i % 5 == 4:
            out.append(Punct.WINDOW)
    return out


class Recorder(Operator):
    """Records every event it hears (before deciding), and raises for those holding poison."""

    def __init__(self, wanted: frozenset[EventType] | None, armed: bool) -> None:
        self.window_events = wanted  # type: ignore[misc]
        self.armed = armed
        self.events: list[tuple[str, Any, list[Any]]] = []

    def on_tuple(self, tup: Any, port: int) -> None:
        pass

    def on_window_event(self, event: Any, port: int) -> None:
        tuples = list(event.tuples)
        self.events.append((event.type.name, event.partition, tuples))
        if self.armed and POISON & {t["v"] for t in tuples}:
            raise ValueError("poison")


def run(clause: str, flavor: str, wanted: frozenset[EventType] | None,
        armed: bool) -> tuple[list[tuple[str, Any, list[Any]]], list[Any]]:
    g = Graph("failing-listener")
    s = g.source("s", ListSource(items()))
    partition_by = "k" if "partitioned" in clause else None
    rec = Recorder(wanted, armed)
    _out, errors = g.operator("rec", rec, [s.window(clause, partition_by=partition_by, flavor=flavor)],
                              [None], error_port=True)
    sink = ListSink()
    g.sink("errors", sink, [errors])
    run_graph(g, clock=VirtualClock())
    return rec.events, sink.tuples


@pytest.mark.parametrize("flavor", ["java", "cpp"])
@pytest.mark.parametrize("wanted", WANTED, ids=["all", "no-insertion"])
@pytest.mark.parametrize("clause", CLAUSES)
def test_the_window_raises_the_same_events_and_the_error_port_gets_what_failed(
        clause: str, flavor: str, wanted: frozenset[EventType] | None) -> None:
    reference, none = run(clause, flavor, wanted, armed=False)
    assert none == []
    events, errors = run(clause, flavor, wanted, armed=True)
    assert events == reference  # the failures changed nothing in what the window did
    expected: list[Any] = []
    for etype, _key, tuples in reference:
        if POISON & {t["v"] for t in tuples}:
            expected += (tuples or [None]) if etype in GONE else [None]
    assert expected, "the case must fail somewhere"
    assert [e["tuple"] for e in errors] == expected
    assert {e["operator"] for e in errors} == {"rec"} and {e["port"] for e in errors} == {0}
    assert all(e["error"].startswith("ValueError('poison')") for e in errors)


def test_tumbling_tuples_are_all_accounted_for_when_the_tumble_fails() -> None:
    """The defect as a user met it: a tumble whose handler raised lost all but the last tuple."""
    events, errors = run("tumbling, count(4)", "java", frozenset({EventType.EVICTION}), armed=True)
    emitted = [t["i"] for etype, _k, ts in events if etype == "EVICTION" for t in ts
               if not POISON & {u["v"] for u in ts}]
    routed = [e["tuple"]["i"] for e in errors]
    assert sorted(emitted + routed) == list(range(40))
    assert routed == [12, 13, 14, 15, 24, 25, 26, 27]
    assert errors[0]["error"] == "ValueError('poison') at EVICTION"


def test_a_failed_sliding_trigger_keeps_its_tuples_and_says_where() -> None:
    _events, errors = run("sliding, count(3), count(1), partitioned", "java",
                          frozenset({EventType.TRIGGER}), armed=True)
    # key 'b' holds 13 for three of its triggers (13, 16, 19 arrive), and 26 ('c') likewise
    assert [e["tuple"] for e in errors] == [None] * 6
    assert errors[0]["error"] == "ValueError('poison') at TRIGGER of partition 'b'"


def test_without_an_error_port_a_failing_listener_still_ends_the_job() -> None:
    g = Graph("no-error-port")
    s = g.source("s", ListSource(items()))
    g.sink("rec", Recorder(None, armed=True), [s.window("tumbling, count(4)")])
    with pytest.raises(JobError, match=r"operator 'rec', input port 0: ValueError: poison"):
        run_graph(g, clock=VirtualClock())


# ------------------------------------------------------------- the standard Aggregate


def reading(t: dict[str, Any]) -> int:
    if t["v"] in POISON:
        raise ValueError("poison")
    return int(t["v"])


def aggregate_run(window: str, value: Any, *, event_time: bool) -> tuple[list[Any], list[Any]]:
    g = Graph("aggregate-errors")
    src: list[Any] = []
    for i in range(40):
        src.append({"i": i, "k": "abc"[i % 3], "v": i, "ts": i * S})
        if event_time and i % 4 == 3:
            src.append(Watermark(i * S))
    s = g.source("s", ListSource(src), event_time="ts" if event_time else None,
                 manual_watermarks=event_time)
    output: dict[str, Any] = {"n": Count(), "s": Sum(value)}
    if event_time:
        output["start"] = IntervalStart()
    out, errors = g.operator("agg", Aggregate(output, copy=("k",)),
                             [s.window(window, partition_by="k")], [None], error_port=True)
    results, failed = ListSink(), ListSink()
    g.sink("out", results, [out])
    g.sink("errors", failed, [errors])
    run_graph(g, clock=VirtualClock())
    return results.tuples, failed.tuples


@pytest.mark.parametrize(("window", "event_time", "routed", "failed_panes"), [
    ("timeInterval, intervalDuration(10.0), partitioned", True,
     [10, 13, 16, 19, 20, 23, 26, 29], [("b", 10 * S), ("c", 20 * S)]),
    ("tumbling, count(4), partitioned", False,
     [13, 16, 19, 22, 26, 29, 32, 35], [("b", 70), ("c", 122)]),
])
def test_an_aggregate_whose_function_raises_routes_the_pane_and_goes_on(
        window: str, event_time: bool, routed: list[int], failed_panes: list[tuple[str, int]]) -> None:
    reference, _ = aggregate_run(window, lambda t: int(t["v"]), event_time=event_time)
    results, failed = aggregate_run(window, reading, event_time=event_time)
    assert [e["tuple"]["i"] for e in failed] == routed  # every tuple of each failed pane
    # the user's exception as raised, then the output it came from (a note of it)
    assert all(e["error"].startswith("ValueError('poison') (output 's' = Sum(value=reading)) at ")
               for e in failed), failed[0]["error"]
    which = "start" if event_time else "s"
    assert [r for r in reference if (r["k"], r[which]) not in failed_panes] == results
    assert len(results) == len(reference) - 2


# ------------------------------------------------- a failed event's output is taken back


def test_a_pane_is_output_whole_or_not_at_all() -> None:
    """A group_by Aggregate whose function raises on one group of a tumble: the rows of the
    groups before it are taken back with it (no half pane, no pane without its mark), and
    the tumble's tuples are on the error port."""
    rows = [{"g": "a", "v": 1}, {"g": "b", "v": 0}, {"g": "a", "v": 2},
            {"g": "c", "v": 4}, {"g": "a", "v": 1}, {"g": "a", "v": 2}]
    g = Graph("whole-panes")
    s = g.source("s", ListSource(rows))
    out, errors = g.operator("agg", Aggregate({"x": Sum(lambda t: 1 / t["v"])}, group_by="g"),
                             [s.window("tumbling, count(3)")], [None], error_port=True)
    ok, bad = ListSink(), ListSink()
    g.sink("ok", ok, [out])
    g.sink("bad", bad, [errors])
    run_graph(g, clock=VirtualClock())
    assert ok.items == [{"g": "c", "x": 0.25}, {"g": "a", "x": 1.5}, Punct.WINDOW, Punct.FINAL]
    assert [e["tuple"] for e in bad.tuples] == rows[:3]


def test_a_join_arrival_whose_match_raises_outputs_nothing() -> None:
    from riverbed.operators import Join

    g = Graph("join-failure")
    left = g.source("l", ListSource([{"a": 1}, {"a": 0}, at(1.0), {"a": 2}]))
    right = g.source("r", ListSource([at(0.5), {"b": 1}, at(1.5), {"b": 2}]))
    out, errors = g.operator("join", Join(match=lambda lhs, rhs: rhs["b"] / lhs["a"] > 0),
                             [left.window("sliding, count(5)"), right.window("sliding, count(5)")],
                             [None], error_port=True)
    ok, bad = ListSink(), ListSink()
    g.sink("ok", ok, [out])
    g.sink("bad", bad, [errors])
    run_graph(g, clock=VirtualClock())
    # b=1 meets a=1 (a row) then a=0 (ZeroDivisionError): its arrival outputs nothing. a=2
    # then matches b=1 alone (b=1 stays in its window); b=2 meets a=0 again and fails.
    assert ok.items == [{"a": 2, "b": 1}, Punct.WINDOW, Punct.FINAL]
    assert [e["tuple"] for e in bad.tuples] == [{"b": 1}, {"b": 2}]


@pytest.mark.parametrize("group_by", [None, "k"])
@pytest.mark.parametrize("clause", ["sliding, delta(i, 2), count(1)", "sliding, count(3), count(1)",
                                    "sliding, count(3), count(2)", "sliding, time(2), count(1)",
                                    "sliding, count(4), count(1), partitioned"])
def test_incremental_and_recomputing_aggregates_fail_alike(clause: str, group_by: str | None) -> None:
    """The incremental mirror of a partition that meets a failing value is dropped, not left
    half updated (a row counting a tuple its sum left out): triggers recompute from the window
    and fail there, as ``incremental=False`` does."""
    def run(incremental: bool) -> tuple[list[Any], list[Any]]:
        g = Graph("incremental-failures")
        values = [1, 2, 0, 4, 5, 6, 7, 0, 9, 10, 11, 12]
        s = g.source("s", ListSource([{"i": i, "k": i % 2, "p": i % 3, "v": v}
                                      for i, v in enumerate(values)]))
        out, errors = g.operator(
            "agg", Aggregate({"x": Sum(lambda t: 1 / t["v"]), "n": Count()}, group_by=group_by,
                             incremental=incremental),
            [s.window(clause, partition_by="p" if "partitioned" in clause else None)],
            [None], error_port=True)
        ok, bad = ListSink(), ListSink()
        g.sink("ok", ok, [out])
        g.sink("bad", bad, [errors])
        run_graph(g, clock=VirtualClock())
        return ok.items, bad.tuples

    incremental, recomputed = run(True), run(False)
    assert incremental == recomputed
    assert incremental[1], "some trigger must fail"


def test_what_a_failing_listener_submitted_before_raising_is_taken_back() -> None:
    class HalfWay(Operator):
        window_events = frozenset({EventType.EVICTION})

        def on_window_event(self, event: Any, port: int) -> None:
            for t in event.tuples:
                if t["v"] in POISON:
                    raise ValueError("poison")
                self.submit(t)
            self.submit_punct()

    g = Graph("half-way")
    s = g.source("s", ListSource([{"v": v} for v in range(20)]))
    out, errors = g.operator("half", HalfWay(), [s.window("tumbling, count(5)")], [None],
                             error_port=True)
    ok, bad = ListSink(), ListSink()
    g.sink("ok", ok, [out])
    g.sink("bad", bad, [errors])
    run_graph(g, clock=VirtualClock())
    assert [t["v"] for t in ok.tuples] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 18, 19]
    assert ok.items.count(Punct.WINDOW) == 3
    assert [e["tuple"]["v"] for e in bad.tuples] == [10, 11, 12, 13, 14]
