"""Operators that handle a whole run of tuples at once (`Operator.on_tuples`) behave exactly as
one `on_tuple` call per tuple does: same outputs in the same order, window marks in place, a
failing tuple routed to the error port (or the job stopped naming it) with the rest going on,
the same metrics.

Each stateless operator is run twice on the same random input, once as it is and once as a
subclass that has no batch handler of its own (the host then calls ``on_tuple`` per tuple, the
reference), and the two runs must agree item for item.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.core import OperatorError
from riverbed.graph import EventTime, Graph, Operator, Punct, Schema, Source, Watermark
from riverbed.operators._relational import Custom, Filter, Functor, Punctor
from riverbed.operators._utility import DeDuplicate, Split, ThreadedSplit, Union
from riverbed.operators._utility_support import OutputClause
from riverbed.runtime import JobError, JobMetrics, VirtualClock, run_graph
from riverbed.testing import ListSink, ListSource, at

W = Punct.WINDOW


def run_job(op: Operator, items: list[Any], *, outputs: int = 1, error_port: bool = True,
            schemas: list[Any] | None = None, in_schema: Schema | None = None
            ) -> tuple[list[list[Any]], JobMetrics]:
    """Run ``op`` on ``items`` (one batch: the source flushes once); every output port's items,
    the error port's last when there is one, and the job's metrics."""
    g = Graph("batch")
    src = g.source("in", ListSource(items), schema=in_schema)
    declared = schemas if schemas is not None else [None] * outputs
    streams = g.operator("op", op, [src], declared, error_port=error_port)
    streams = streams if isinstance(streams, tuple) else (streams,)
    sinks = [ListSink() for _ in streams]
    for i, (stream, sink) in enumerate(zip(streams, sinks, strict=True)):
        g.sink(f"out{i}", sink, [stream])
    metrics = run_graph(g, clock=VirtualClock())
    return [s.items for s in sinks], metrics


def per_tuple(op_type: type[Operator]) -> Any:
    """``op_type`` without a batch handler of its own: the host calls ``on_tuple`` per tuple."""
    return type(f"PerTuple{op_type.__name__}", (op_type,), {"on_tuples": Operator.on_tuples})


def counts(metrics: JobMetrics) -> Any:
    op = metrics.operators["op"]
    return ([(p.tuples_processed, p.errors, p.window_puncts_processed) for p in op.inputs],
            [(p.tuples_submitted, p.window_puncts_submitted) for p in op.outputs])


def same_both_ways(make: Callable[[Any], Operator], op_type: type[Operator],
                   items: list[Any], **kw: Any) -> list[list[Any]]:
    """Run the batch handler and the per-tuple reference; they must agree (outputs, metrics,
    the state each operator ended with); the outputs."""
    fast_op, slow_op = make(op_type), make(per_tuple(op_type))
    fast, fast_metrics = run_job(fast_op, items, **kw)
    slow, slow_metrics = run_job(slow_op, items, **kw)
    assert fast == slow
    assert counts(fast_metrics) == counts(slow_metrics)
    assert fast_op.snapshot() == slow_op.snapshot()
    return fast


# Tuples {"v": int}; v % 7 == 0 makes the callables under test raise, marks come in between.
values = st.lists(st.one_of(st.integers(-20, 20).map(lambda v: {"v": v}), st.just(W)),
                  max_size=40)


def _check(v: int) -> int:
    if v % 7 == 0:
        raise ValueError(f"v={v} is a multiple of 7")
    return v


# ----------------------------------------------------------- the core's hook


class Doubler(Operator):
    """Submits 2*v for every tuple through a ``map``; v == 3 raises."""

    def __init__(self) -> None:
        self.calls = 0

    def setup(self) -> None:
        self.put = self.context.batch_submit(0)  # type: ignore[attr-defined]

    def on_tuples(self, tuples: Iterator[Any], port: int) -> None:
        self.calls += 1
        self.put(map(self.double, tuples))

    @staticmethod
    def double(tup: Any) -> Any:
        if tup["v"] == 3:
            raise ValueError("three is not allowed")
        return {"v": 2 * tup["v"]}


def test_a_batch_handler_gets_the_whole_batch_in_one_call() -> None:
    op = Doubler()
    out, metrics = run_job(op, [{"v": v} for v in (1, 2, 4, 5)], error_port=False)
    assert out == [[{"v": 2}, {"v": 4}, {"v": 8}, {"v": 10}, Punct.FINAL]]
    assert op.calls == 1
    assert metrics.operators["op"].inputs[0].tuples_processed == 4


def test_a_failing_tuple_goes_to_the_error_port_and_the_rest_go_on_in_order() -> None:
    op = Doubler()
    out, metrics = run_job(op, [{"v": 1}, {"v": 3}, {"v": 4}, {"v": 3}])
    assert out[0] == [{"v": 2}, {"v": 8}, Punct.FINAL]
    errors = [e for e in out[1] if not isinstance(e, Punct)]
    assert [e["tuple"] for e in errors] == [{"v": 3}, {"v": 3}]
    assert "three is not allowed" in errors[0]["error"]
    assert metrics.operators["op"].inputs[0].errors == 2
    assert op.calls == 3  # again after each failure, with the rest of the batch


def test_a_failing_tuple_without_error_port_stops_the_job_naming_it() -> None:
    with pytest.raises(JobError) as info:
        run_job(Doubler(), [{"v": 1}, {"v": 3}, {"v": 4}], error_port=False)
    (err,) = info.value.errors
    assert isinstance(err, OperatorError)
    assert err.tuple == {"v": 3} and err.port == 0
    assert "three is not allowed" in str(err)


def test_window_marks_stay_between_the_tuples_they_came_between() -> None:
    out, _ = run_job(Doubler(), [{"v": 1}, W, {"v": 2}, {"v": 4}, W, W, {"v": 5}])
    assert out[0] == [{"v": 2}, W, {"v": 4}, {"v": 8}, W, W, {"v": 10}, Punct.FINAL]


class Lazy(Operator):
    """Takes one tuple of each batch and returns: a bug the host must not hide."""

    def on_tuples(self, tuples: Iterator[Any], port: int) -> None:
        self.submit(next(tuples))


def test_a_batch_handler_that_leaves_tuples_untaken_stops_the_job() -> None:
    with pytest.raises(JobError) as info:
        run_job(Lazy(), [{"v": 1}, {"v": 2}, {"v": 3}])
    assert "returned before taking every tuple" in str(info.value)
    assert "(2 of 3 left)" in str(info.value)


class Broken(Operator):
    def on_tuples(self, tuples: Iterator[Any], port: int) -> None:
        raise RuntimeError("broken before any tuple")


def test_a_batch_handler_failing_before_any_tuple_is_no_tuple_s_failure() -> None:
    with pytest.raises(JobError) as info:
        run_job(Broken(), [{"v": 1}, {"v": 2}])  # even with an error port: no tuple to route
    (err,) = info.value.errors
    assert isinstance(err, OperatorError) and err.tuple is None
    assert "broken before any tuple" in str(err)


class Pass(Operator):
    """Submits every tuple unchanged, all at once."""

    def setup(self) -> None:
        self.put = self.context.batch_submit(0)  # type: ignore[attr-defined]

    def on_tuple(self, tup: Any, port: int) -> None:
        self.submit(tup)

    def on_tuples(self, tuples: Iterator[Any], port: int) -> None:
        self.put(tuples)


class WatermarkSink(ListSink):
    def on_watermark(self, value: int) -> None:
        self.items.append(("watermark", value))


def _event_time_run(op: Operator) -> tuple[list[Any], list[Any]]:
    g = Graph("et")
    src = g.source("in", ListSource([{"t": 5}, {"t": 9}, {"u": 1}, {"t": 7}, {"t": 12}]))
    out, errors = g.operator("op", op, [src], error_port=True,
                             event_time=EventTime.of("t", resolution="ms", minimum_gap=0.0))
    sink, error_sink = WatermarkSink(), ListSink()
    g.sink("sink", sink, [out])
    g.sink("errors", error_sink, [errors])
    run_graph(g, clock=VirtualClock())
    return sink.items, error_sink.tuples


def test_a_batch_submit_of_an_event_time_operator_moves_the_watermark_per_tuple() -> None:
    items, errors = _event_time_run(Pass())
    assert (items, errors) == _event_time_run(per_tuple(Pass)())
    assert [x for x in items if isinstance(x, tuple)][:3] == [("watermark", 5), ("watermark", 9),
                                                              ("watermark", 12)]
    assert [e["tuple"] for e in errors] == [{"u": 1}]  # no event time: routed, the rest go on


# ------------------------------------------------------- stateless operators


@settings(max_examples=60, deadline=None)
@given(values)
def test_filter_with_one_output(items: list[Any]) -> None:
    same_both_ways(lambda t: t(lambda x: _check(x["v"]) > 0), Filter, items)


@settings(max_examples=60, deadline=None)
@given(values)
def test_filter_with_rejects_port_and_without_condition(items: list[Any]) -> None:
    same_both_ways(lambda t: t(lambda x: _check(x["v"]) % 2), Filter, items, outputs=2)
    same_both_ways(lambda t: t(), Filter, items)


@settings(max_examples=60, deadline=None)
@given(values, st.booleans())
def test_functor_one_output(items: list[Any], with_filter: bool) -> None:
    def make(t: Any) -> Any:
        return t(filter=(lambda x: _check(x["v"]) > -5) if with_filter else None,
                 output={"w": lambda x: _check(x["v"]) * 3, "k": "const"})
    same_both_ways(make, Functor, items)
    same_both_ways(make, Functor, items, schemas=[Schema(v="int64", w="int64", k="rstring")])


@settings(max_examples=60, deadline=None)
@given(values)
def test_functor_logic_and_several_outputs(items: list[Any]) -> None:
    def make(t: Any) -> Any:
        def logic(state: dict[str, Any], tup: Any) -> None:
            state["n"] += 1
            _check(tup["v"] + 1)
        return t(outputs=[{"n": lambda x: 0}, {"w": lambda x: _check(x["v"])}],
                 state={"n": 0}, logic=logic)
    same_both_ways(make, Functor, items, outputs=2)


@settings(max_examples=60, deadline=None)
@given(values, st.sampled_from(["before", "after"]))
def test_punctor(items: list[Any], position: str) -> None:
    same_both_ways(lambda t: t(lambda x: _check(x["v"]) % 3 == 1, position,
                               output={"w": lambda x: x["v"]}), Punctor, items)


@settings(max_examples=60, deadline=None)
@given(values)
def test_custom(items: list[Any]) -> None:
    def on_tuple(op: Custom, tup: Any, port: int) -> None:
        op.state.append(_check(tup["v"]))
        op.submit({"sum": sum(op.state)})
        if tup["v"] % 5 == 0:
            op.submit_punct(W)
    same_both_ways(lambda t: t(on_tuple, state=[]), Custom, items)


class SubclassedCustom(Custom):
    def on_tuple(self, tup: Any, port: int) -> None:
        self.submit({"own": _check(tup["v"])})


def test_custom_subclass_overriding_on_tuple_is_still_called() -> None:
    out, _ = run_job(SubclassedCustom(), [{"v": 1}, {"v": 7}, {"v": 2}])
    assert out[0] == [{"own": 1}, {"own": 2}, Punct.FINAL]
    assert [e["tuple"] for e in out[1] if not isinstance(e, Punct)] == [{"v": 7}]


@settings(max_examples=60, deadline=None)
@given(values)
def test_split_and_threaded_split(items: list[Any]) -> None:
    def index(x: Any) -> Any:
        v = _check(x["v"])
        return [v, -v, v] if v % 4 == 0 else v
    same_both_ways(lambda t: t(index), Split, items, outputs=3)
    same_both_ways(lambda t: t(buffer_size=3), ThreadedSplit, items, outputs=3)


@settings(max_examples=60, deadline=None)
@given(values)
def test_union(items: list[Any]) -> None:
    same_both_ways(lambda t: t(), Union, items)
    with_extra = [dict(x, extra=1) if isinstance(x, dict) and x["v"] % 3 else x for x in items]
    same_both_ways(lambda t: t(), Union, with_extra, schemas=[Schema(v="int64")])


def test_union_missing_attribute_error_names_port_and_attribute() -> None:
    out, _ = run_job(Union(), [{"v": 1}, {"w": 2}], schemas=[Schema(v="int64")])
    errors = [e for e in out[1] if not isinstance(e, Punct)]
    assert out[0] == [{"v": 1}, Punct.FINAL]
    assert errors[0]["tuple"] == {"w": 2}
    assert "has no attribute 'v'" in errors[0]["error"]


# ----------------------------------------------------------- output clauses


class Recorder:
    """Callables that record the order they ran in, and raise on demand."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def fn(self, name: str, fail: bool = False) -> Callable[[Any], Any]:
        def call(tup: Any) -> Any:
            self.calls.append(name)
            if fail:
                raise KeyError(f"{name} failed")
            return (name, tup.get("a"))
        return call


def _outcome(build: Callable[[Any], Any], tup: Any) -> Any:
    try:
        return ("ok", build(tup))
    except Exception as exc:  # the type and message must match too
        return ("error", type(exc).__name__, str(exc))


inputs = st.one_of(
    st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), st.integers(0, 3), max_size=4),
    st.just([("a", 1)]), st.just("text"))


@settings(max_examples=200, deadline=None)
@given(inputs, st.lists(st.sampled_from(["a", "b", "c", "x"]), unique=True),
       st.dictionaries(st.sampled_from(["a", "b", "x"]), st.sampled_from(["call", "fail", "const"])),
       st.booleans())
def test_bind_one_builds_what_bind_builds(tup: Any, names: list[str], kinds: dict[str, str],
                                          declared: bool) -> None:
    schema = Schema(**dict.fromkeys(names, "int64")) if declared and names else None
    if schema is not None and set(kinds) - set(names):
        return  # such a clause is refused at bind time, both ways
    rec_one, rec_ref = Recorder(), Recorder()

    def clause(rec: Recorder) -> OutputClause:
        return OutputClause("T", 0, {a: ("const" if k == "const" else rec.fn(a, k == "fail"))
                                     for a, k in kinds.items()})
    one = _outcome(clause(rec_one).bind_one(schema), tup)
    ref = _outcome(clause(rec_ref).bind(schema), tup)
    assert one == ref
    if one[0] == "ok" and isinstance(one[1], dict):
        assert list(one[1]) == list(ref[1])  # the same attribute order
    assert rec_one.calls == rec_ref.calls


# ------------------------------------------------ marked batches, counted


@pytest.mark.parametrize("schema", [None, Schema(v="int64")])
def test_marks_inside_a_batch_are_counted_once_each_with_or_without_a_schema(
        schema: Schema | None) -> None:
    items: list[Any] = [{"v": v} for v in range(10)]
    out, metrics = run_job(Punctor(lambda x: x["v"] % 3 == 0, "after"), items, error_port=False,
                           schemas=[schema])
    assert out[0] == [x for v in range(10) for x in ([{"v": v}, W] if v % 3 == 0 else [{"v": v}])] \
        + [Punct.FINAL]
    port = metrics.operators["op"].outputs[0]
    assert (port.tuples_submitted, port.window_puncts_submitted) == (10, 4)
    assert metrics.operators["out0"].inputs[0].window_puncts_processed == 4


def test_an_event_time_source_s_marks_and_watermarks_are_counted_apart() -> None:
    g = Graph("et")
    src = g.source("in", ListSource([{"t": 1}, W, {"t": 2}, {"t": 3}, W]), event_time="t",
                   resolution="ms", minimum_gap=0.0)
    g.sink("sink", ListSink(), [src])
    port = run_graph(g, clock=VirtualClock()).operators["in"].outputs[0]
    assert (port.tuples_submitted, port.window_puncts_submitted) == (3, 2)
    assert port.watermarks_submitted == 4  # 1, 2, 3 and the maximum before final


# ------------------------------------------------------------- DeDuplicate

keys = st.one_of(st.integers(0, 4), st.sampled_from(["a", "b"]), st.just([1, 2]),
                 st.just(float("nan")), st.just(1.5), st.just(None))
dedup_items = st.lists(st.one_of(st.tuples(keys, st.integers(0, 30)), st.just(W),
                                 st.integers(0, 3).map(at)), max_size=40)


@settings(max_examples=80, deadline=None)
@given(dedup_items, st.sampled_from(["count", "delta", "time_out"]), st.booleans(), st.booleans(),
       st.booleans())
def test_deduplicate(raw: list[Any], mode: str, reset: bool, duplicates: bool, clause: bool) -> None:
    items: list[Any] = []
    clock = 0.0
    for x in raw:
        if isinstance(x, tuple):
            items.append({"k": x[0], "d": x[1]})
        elif x is W:
            items.append(W)
        else:
            clock += x.time_ns / 1e9
            items.append(at(clock))

    def key(t: Any) -> Any:
        if t["k"] is None:
            raise ValueError("no key")
        return t["k"]

    def make(t: Any) -> Any:
        bound: dict[str, Any] = {"count": {"count": 3}, "time_out": {"time_out": 1.5},
                                 "delta": {"delta_attribute": "d", "delta": 4}}[mode]
        return t(key, reset_on_duplicate=reset, **bound,
                 output={"twice": lambda x: x["d"] * 2} if clause else None)
    out = same_both_ways(make, DeDuplicate, items, outputs=2 if duplicates else 1)
    assert all(isinstance(x, Punct) or "k" in x or "tuple" in x for port in out for x in port)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.integers(-3, 40), st.sampled_from(["mark", "wm", "bad", "seal"])),
                max_size=60),
       st.booleans())
def test_a_marked_batch_knows_where_its_marks_and_watermarks_are(script: list[Any],
                                                                  schema: bool) -> None:
    """Whatever was submitted, marked, or dropped as invalid, every `MarkedBatch` an output
    port hands over lists the indices of exactly its marks and watermarks (receivers slice at
    them instead of testing every item), and the tuples keep their order."""
    from riverbed.core import MarkedBatch, OutputPort, OutputPortMetrics

    dropped: list[Any] = []
    port = OutputPort(Schema(n="int64") if schema else None, OutputPortMetrics(),
                      lambda tup, why: dropped.append(tup))
    sent: list[Any] = []
    for step in script:
        if step == "mark":
            port.mark(Punct.WINDOW)
            sent.append(Punct.WINDOW)
        elif step == "wm":
            port.mark(Watermark(len(sent)))
            sent.append(Watermark(len(sent)))
        elif step == "seal":
            if port.buf:
                port.seal()
        else:
            tup = {"n": "x"} if step == "bad" else {"n": step}
            port.buf.append(tup)
            if not (schema and step == "bad"):
                sent.append(tup)
    got: list[Any] = []
    for entry in port.take():
        if type(entry) is MarkedBatch:
            assert entry.controls == [i for i, x in enumerate(entry)
                                      if x is Punct.WINDOW or type(x) is Watermark]
        got.extend(entry)
    assert got == sent
    assert len(dropped) == (script.count("bad") if schema else 0)


class _Seen(Operator):
    """Records tuples and the watermarks it is told of, in order."""

    def __init__(self) -> None:
        self.items: list[Any] = []

    def on_tuple(self, tup: Any, port: int) -> None:
        self.items.append(tup["n"])

    def on_watermark(self, value: int) -> None:
        self.items.append(("wm", value))


class _Generated(Source):
    """Its items in one batch (a generating source: the host takes them a batch at a time)."""

    def __init__(self, items: list[Any]) -> None:
        self.items = items

    def generate(self) -> Any:
        return iter(self.items)


def _timed_run(items: list[Any], lag: float, gap: float, schema: Schema | None = None) -> list[Any]:
    g = Graph("timed")
    src = g.source("in", _Generated(items), event_time="ts", resolution="ms", lag=lag,
                   minimum_gap=gap, schema=schema)
    seen = _Seen()
    g.sink("seen", seen, [src], error_port=True)
    try:
        run_graph(g, clock=VirtualClock())
    except JobError as exc:
        return [*seen.items, str(exc)]
    return seen.items


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 60), max_size=80),
       st.sampled_from([0.0, 0.002, 0.01]), st.sampled_from([0.0, 0.001, 0.005, 0.1]))
def test_a_sources_batch_of_event_times_gets_its_watermarks_where_one_tuple_at_a_time_would(
        times: list[int], lag: float, gap: float) -> None:
    """A batch of dicts whose event times are all integers takes C loops (the running maximum
    and a binary search for each watermark to send); the same batch with a window mark at its
    end takes the loop a tuple at a time. Both give the same tuples and the same watermarks in
    the same places, whatever the order of the times, the lag and the minimum gap."""
    items: list[Any] = [{"n": i, "ts": t} for i, t in enumerate(times)]
    fast = _timed_run(items, lag, gap)
    reference = _timed_run([*items, Punct.WINDOW], lag, gap)
    assert fast == reference
    assert [x for x in fast if type(x) is int] == list(range(len(items)))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 60), min_size=1, max_size=60),
       st.sampled_from([0.0, 0.002]), st.sampled_from([0.0, 0.001, 0.1]),
       st.one_of(st.none(), st.integers(0, 59)))
def test_a_sources_checked_batch_of_event_times_goes_out_whole_as_one_tuple_at_a_time_would(
        times: list[int], lag: float, gap: float, bad: int | None) -> None:
    """With a declared schema, a batch whose tuples all pass the check goes out whole with its
    watermarks placed in it; one with an invalid tuple (``bad``) takes the checks at sealing,
    which stop the job naming it. Either way the same tuples, watermarks and errors as the
    same batch taken a tuple at a time."""
    schema = Schema(n="int64", ts="int64")
    items: list[Any] = [{"n": i, "ts": t} for i, t in enumerate(times)]
    if bad is not None and bad < len(items):
        items[bad] = {"n": "bad", "ts": items[bad]["ts"]}
    fast = _timed_run(items, lag, gap, schema)
    reference = _timed_run([*items, Punct.WINDOW], lag, gap, schema)
    assert fast == reference


def _plain_run(items: list[Any], batch: int) -> list[Any]:
    g = Graph("plain")
    src = g.source("in", _Generated(items), schema=Schema(n="int64"))
    seen = _Seen()
    g.sink("seen", seen, [src])
    try:
        run_graph(g, clock=VirtualClock(), batch_size=batch)
    except JobError as exc:
        return [*seen.items, str(exc)]
    return seen.items


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.integers(0, 99), st.just("bad"), st.just("mark")), max_size=60),
       st.integers(1, 6))
def test_a_sources_checked_batch_goes_out_whole_as_the_same_batch_with_a_mark_would(
        script: list[Any], size: int) -> None:
    """Without event time, with a declared schema: a batch that passes the check is queued
    whole, with no pass over its items' types; a batch holding a window mark (or an invalid
    tuple) takes that pass and the check at sealing. With a mark added to every batch, the
    sink sees the same tuples, and the job stops at the same invalid tuple, naming it."""
    items: list[Any] = [Punct.WINDOW if x == "mark" else {"n": "x" if x == "bad" else x}
                        for x in script]
    marked: list[Any] = []
    for start in range(0, len(items), size):
        marked += [*items[start:start + size], Punct.WINDOW]
    assert _plain_run(items, size) == _plain_run(marked, size + 1)
