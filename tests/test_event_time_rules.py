"""Event-time rules a graph is validated against (SPL E4, E26, E27), and the clocks' deadlines.

Findings of the event-time review: different definitions meeting at an operator were accepted
(a window read one source's milliseconds as microseconds), a timeInterval window on a stream
without the event-time attribute failed only at run time, and a float deadline made the
virtual clock's time a float, which checkpoints refused.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from riverbed.checkpoint import MemoryStore
from riverbed.graph import EventTime, Graph, GraphValidationError, Operator, Schema, Source, event_time_region
from riverbed.operators import Aggregate, Count, IntervalStart, Union
from riverbed.run import EXIT_INVALID, run
from riverbed.runtime import Job, RealClock, VirtualClock, run_virtual
from riverbed.testing import ListSink, ListSource

S = 1_000_000_000
ROOT = Path(__file__).resolve().parent.parent
TS = Schema(src="rstring", ts="int64")
PANES = "timeInterval, intervalDuration(10), partitioned"


class Pair(Operator):
    """Two input ports, one output: forwards everything (a Join's shape, without its rules)."""

    def on_tuple(self, tup: Any, port: int) -> None:
        self.submit(tup)


def _errors(g: Graph) -> list[Any]:
    with pytest.raises(GraphValidationError) as info:
        g.freeze()
    return info.value.errors


def _two_sources(g: Graph, a: dict[str, Any], b: dict[str, Any],
                 schema_b: Schema = TS) -> tuple[Any, Any]:
    s1 = g.source("a", ListSource([]), schema=TS, **a)
    s2 = g.source("b", ListSource([]), schema=schema_b, **b)
    return s1, s2


# ---------------------------------------------------------------- finding 3: E27 definitions


def test_two_resolutions_meeting_at_a_union_are_refused_naming_both_sources() -> None:
    g = Graph("mixed")
    a, b = _two_sources(g, {"event_time": "ts", "resolution": "ms"},
                        {"event_time": "ts", "resolution": "us"})
    u = g.operator("u", Union(), [a, b])
    agg = g.operator("agg", Aggregate({"start": IntervalStart(), "n": Count()}, copy=("src",)),
                     [u.window(PANES, partition_by="src")])
    g.sink("show", ListSink(), [agg])
    errors = _errors(g)
    # Reported once, where they meet (not again at every operator downstream).
    assert [(e.operator, e.rule) for e in errors] == [("u", "event-time")]
    text = str(errors[0])
    assert "'a' (event_time='ts', int64, resolution='ms')" in text
    assert "'b' (event_time='ts', int64, resolution='us')" in text
    assert "input port 0" in text and "input port 1" in text


@pytest.mark.parametrize(("b", "schema_b", "differs"), [
    ({"event_time": "t2"}, Schema(src="rstring", ts="int64", t2="int64"), "event_time='t2'"),
    ({"event_time": "ts"}, Schema(src="rstring", ts="uint64"), "uint64"),
])
def test_another_attribute_or_type_meeting_at_two_ports_is_refused(
        b: dict[str, Any], schema_b: Schema, differs: str) -> None:
    g = Graph("mixed")
    s1, s2 = _two_sources(g, {"event_time": "ts"}, b, schema_b)
    both = g.operator("both", Pair(), [s1, s2])
    g.sink("out", ListSink(), [both])
    errors = _errors(g)
    assert [(e.operator, e.rule) for e in errors] == [("both", "event-time")]
    assert differs in str(errors[0]) and "'a'" in str(errors[0])


def test_definitions_differing_only_in_lag_and_gap_meet_and_the_largest_apply() -> None:
    g = Graph("lags")
    a, b = _two_sources(g, {"event_time": "ts", "resolution": "ms", "lag": 2.0, "minimum_gap": 0.1},
                        {"event_time": "ts", "resolution": "ms", "lag": 0.5, "minimum_gap": 1.0})
    u = g.operator("u", Union(), [a, b])
    g.sink("out", ListSink(), [u.window(PANES, partition_by="src")])
    region = event_time_region(g.freeze())
    assert region["u"] == EventTime("ts", "ms", lag_ns=2 * S, minimum_gap_ns=S)
    assert region["out"] == region["u"]
    assert region["a"].lag_ns == 2 * S and region["b"].lag_ns == S // 2  # their own


def test_definitions_meeting_only_through_streams_without_the_attribute_are_valid() -> None:
    # E27: the region stops at a stream that lacks the attribute, so nothing meets at `u`.
    g = Graph("stops")
    a, b = _two_sources(g, {"event_time": "ts", "resolution": "ms"},
                        {"event_time": "ts", "resolution": "us"})
    counts = Schema(src="rstring", n="int32")
    ca = g.operator("ca", Aggregate({"n": Count()}, copy=("src",)),
                    [a.window("tumbling, count(2)")], [counts])
    cb = g.operator("cb", Aggregate({"n": Count()}, copy=("src",)),
                    [b.window("tumbling, count(2)")], [counts])
    u = g.operator("u", Union(), [ca, cb])
    g.sink("out", ListSink(), [u])
    g.freeze()


def test_the_same_definition_twice_is_valid_and_runs() -> None:
    g = Graph("same")
    rows = [{"src": "a", "ts": t * 1000} for t in range(100, 126)]
    a = g.source("a", ListSource(rows), schema=TS, event_time="ts", resolution="ms")
    b = g.source("b", ListSource([{**r, "src": "b"} for r in rows]), schema=TS,
                 event_time="ts", resolution="ms")
    u = g.operator("u", Union(), [a, b])
    agg = g.operator("agg", Aggregate({"start": IntervalStart(), "n": Count()}, copy=("src",)),
                     [u.window(PANES, partition_by="src")])
    sink = ListSink()
    g.sink("out", sink, [agg])
    clock = VirtualClock()
    run_virtual(Job(g, clock=clock).run(), clock)
    got = sorted((t["src"], t["start"], t["n"]) for t in sink.tuples)
    assert got == sorted((s, start, 6 if start == 120_000 else 10)
                         for s in "ab" for start in (100_000, 110_000, 120_000))


def test_riverbed_run_exits_2_on_meeting_definitions(tmp_path: Path) -> None:
    script = tmp_path / "g.py"
    script.write_text(
        "from riverbed.graph import Graph, Schema\n"
        "from riverbed.operators import Union\n"
        "from riverbed.testing import ListSink, ListSource\n"
        "def build(p):\n"
        "    g = Graph('g')\n"
        "    sch = Schema(ts='int64')\n"
        "    a = g.source('a_ms', ListSource([]), schema=sch, event_time='ts', resolution='ms')\n"
        "    b = g.source('b_us', ListSource([]), schema=sch, event_time='ts', resolution='us')\n"
        "    g.sink('s', ListSink(), [g.operator('u', Union(), [a, b])])\n"
        "    return g\n")
    said: list[str] = []
    code = run(str(script), params=[], status=False, log_format="json", echo=said.append)
    assert code == EXIT_INVALID
    assert "'a_ms'" in "".join(said) and "'b_us'" in "".join(said)


# ---------------------------------------------------------------- finding 6: the window's schema


def _two_aggregates(second_input: Schema | None) -> Graph:
    """The review's case: a window on the output of a first timeInterval Aggregate (or, for
    schemas an Aggregate cannot make, of an operator declaring that output)."""
    g = Graph("g11")
    src = g.source("src", ListSource([]), schema=Schema(ts="timestamp"), event_time="ts")
    if second_input is not None and second_input.type_of("start") is not None:
        a1 = g.operator("a1", Aggregate({"start": IntervalStart(), "n": Count()}),
                        [src.window("timeInterval, intervalDuration(10)")], [second_input])
    else:
        a1 = g.operator("a1", Pair(), [src], [second_input])
    a2 = g.operator("a2", Aggregate({"n": Count()}), [a1.window("timeInterval, intervalDuration(30)")])
    g.sink("n", ListSink(), [a2])
    return g


def test_a_time_interval_window_on_a_stream_without_the_attribute_is_refused() -> None:
    errors = _errors(_two_aggregates(Schema(start="timestamp", n="int32")))
    assert [(e.operator, e.rule) for e in errors] == [("a2", "unknown-attribute")]
    assert "input port 0" in str(errors[0]) and "'ts'" in str(errors[0])
    assert "'src'" in str(errors[0])


def test_a_time_interval_window_on_the_attribute_of_another_type_is_refused() -> None:
    errors = _errors(_two_aggregates(Schema(ts="float64", n="int32")))
    assert [(e.operator, e.rule) for e in errors] == [("a2", "attribute-type")]
    errors = _errors(_two_aggregates(Schema(ts="int64", n="int32")))
    assert [(e.operator, e.rule) for e in errors] == [("a2", "attribute-type")]
    assert "timestamp" in str(errors[0]) and "'src'" in str(errors[0])


def test_a_time_interval_window_whose_stream_keeps_the_attribute_is_valid() -> None:
    _two_aggregates(Schema(ts="timestamp", n="int32")).freeze()
    _two_aggregates(None).freeze()  # undeclared: checked at run time


# ---------------------------------------------------------------- finding 7: float deadlines


class Paced(Source):
    """Paces itself with float deadlines (``start + i * 0.01e9``)."""

    replayable = True

    def __init__(self) -> None:
        self.i = 0

    async def run(self) -> None:
        ctx: Any = self.context
        start = ctx.now()
        while self.i < 120:
            await ctx.sleep_until(start + self.i * 0.01e9)
            self.submit({"ts": 10**18 + self.i})
            self.i += 1

    def snapshot(self) -> int:
        return self.i

    def restore(self, state: Any) -> None:
        self.i = state or 0


def test_a_float_deadline_keeps_the_virtual_clock_an_int_and_checkpoints_work() -> None:
    g = Graph("paced")
    s = g.source("s", Paced(), schema=Schema(ts="timestamp"), event_time="ts")
    sink = ListSink()
    g.sink("n", sink, [s])
    store = MemoryStore(keep_last=100)
    clock = VirtualClock()
    run_virtual(Job(g, clock=clock, checkpoints=store, checkpoint_period=0.5).run(), clock)
    assert len(sink.tuples) == 120
    assert len(store.list()) >= 2


@pytest.mark.parametrize("make", [VirtualClock, RealClock])
def test_both_clocks_round_a_float_deadline_and_refuse_what_is_no_time(make: Any) -> None:
    clock = make()
    fired: list[int] = []

    async def main() -> None:
        now = clock.now()
        await clock.sleep_until(now + 1_000.6)
        if isinstance(clock, VirtualClock):
            assert clock.now() == now + 1_001 and isinstance(clock.now(), int)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def fire() -> None:
            fired.append(clock.now())
            done.set_result(None)

        clock.call_at(clock.now() + 2_000.4, fire)
        await done
        for bad, error in (("soon", TypeError), (None, TypeError), (float("nan"), ValueError),
                           (float("inf"), ValueError)):
            with pytest.raises(error, match="deadline"):
                await clock.sleep_until(bad)
            with pytest.raises(error, match="deadline"):
                clock.call_at(bad, lambda: None)

    if isinstance(clock, VirtualClock):
        run_virtual(main(), clock)
        assert fired == [1_001 + 2_000]
    else:
        asyncio.run(main())
    assert all(isinstance(t, int) for t in fired)


# ---------------------------------------------------------------- finding 9: the README


def test_the_readme_says_replicas_lateness_depends_on_their_share() -> None:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("### Sources in a region (replicas)"):text.index("### Placement")]
    flat = " ".join(section.split())
    assert "what is late depends on the width" in flat
    assert "(SPL E27)" in " ".join(text.split())
