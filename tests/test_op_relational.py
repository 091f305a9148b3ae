"""Filter, Functor, Punctor and Custom through the real runtime on the virtual clock.

Every test asserts the exact items of each output port, punctuation included
(standard-operators.md sections 4-7). `run` is the harness the utility
operator tests share: it records each output item with its clock time, and a
`Call` item in an input list runs code at that point of the feed (after every
earlier item has been handled), which is where the snapshot tests take their
snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from riverbed.checkpoint._codec import decode_value, encode_value
from riverbed.graph import Graph, GraphValidationError, Operator, Punct, Schema, Watermark
from riverbed.operators._params import OperatorParameterError
from riverbed.operators._relational import Custom, Filter, Functor, Punctor
from riverbed.runtime import JobError, VirtualClock, run_graph
from riverbed.testing import At, ListSink, ListSource, at

S = 1_000_000_000
W, F = Punct.WINDOW, Punct.FINAL


# ------------------------------------------------------------------- harness


@dataclass(frozen=True)
class Call:
    """In an input list: run ``fn`` once every earlier item of every port has been handled."""

    fn: Callable[[], None]


class Script(ListSource):
    """A `ListSource` that also runs `Call` items."""

    async def run(self) -> None:
        ctx: Any = self.context
        for item in self.items:
            if isinstance(item, Call):
                item.fn()
            elif isinstance(item, At):
                await ctx.sleep_until(item.time_ns)
            elif isinstance(item, Watermark):
                ctx.set_watermark(item.value)
            elif item is Punct.WINDOW:
                self.submit_punct()
            else:
                self.submit(item)
        await ctx.flush()


def run(op: Operator, inputs: list[Any] | Mapping[int, list[Any]], *, outputs: int = 1,
        start: float = 0.0, schemas: list[Any] | None = None, in_schema: Any = None,
        window: str | None = None, sinks_out: list[ListSink] | None = None
        ) -> list[list[tuple[float, Any]]]:
    """Run ``op`` in a job; per output port, the ``(seconds, item)`` pairs that reached it
    (``sinks_out`` receives the sinks before the job starts)."""
    per_port = dict(inputs) if isinstance(inputs, Mapping) else {0: inputs}
    g = Graph("harness")
    ports: list[Any] = []
    for port in range(max(per_port) + 1):
        stream = g.source(f"in{port}", Script(per_port.get(port, [])), schema=in_schema)
        ports.append(stream.window(window) if window is not None and port == 0 else stream)
    streams = g.operator("op", op, ports, schemas if schemas is not None else [None] * outputs)
    streams = streams if isinstance(streams, tuple) else (streams,)
    sinks = [ListSink() for _ in streams]
    for i, (stream, sink) in enumerate(zip(streams, sinks, strict=True)):
        g.sink(f"out{i}", sink, [stream])
    if sinks_out is not None:
        sinks_out.extend(sinks)
    run_graph(g, clock=VirtualClock(round(start * S)))
    return [[(t / S, x) for t, x in zip(sink.times, sink.items, strict=True)] for sink in sinks]


def items(port: list[tuple[float, Any]]) -> list[Any]:
    return [x for _, x in port]


def plain(state: Any) -> Any:
    """``state`` after a round trip through the checkpoint encoding (proves it is plain data)."""
    return decode_value(encode_value(state, checkpoint_id=1, key="op"), checkpoint_id=1, key="op")


def run_split(make: Callable[[], Operator], inputs: Mapping[int, list[Any]], cut: float, *,
              outputs: int = 1, schemas: list[Any] | None = None) -> Any:
    """Snapshot-restore-continue: run once with a snapshot taken right after ``at(cut)`` in
    port 0's items, restore it into a fresh instance and feed that the rest (port 0's items
    after ``at(cut)``, the other ports' items from their first ``at()`` beyond ``cut``) on a
    clock starting at ``cut``: it must emit exactly what the uninterrupted run emitted after
    the snapshot, at the same times. Returns the snapshot."""
    snap: list[Any] = []
    counts: list[int] = []
    sinks: list[ListSink] = []
    first = make()

    def take() -> None:
        snap.append(plain(first.snapshot()))
        counts.extend(len(sink.items) for sink in sinks)

    cut_ns = round(cut * S)
    marked = {p: list(v) for p, v in inputs.items()}
    cut_at = next(i for i, x in enumerate(marked[0]) if isinstance(x, At) and x.time_ns == cut_ns)
    marked[0].insert(cut_at + 1, Call(take))
    whole = run(first, marked, outputs=outputs, schemas=schemas, sinks_out=sinks)
    assert snap, "the cut was never reached"
    rest: dict[int, list[Any]] = {0: list(inputs[0][cut_at + 1:])}
    for p, feed in inputs.items():
        if p:
            later = [i for i, x in enumerate(feed) if isinstance(x, At) and x.time_ns > cut_ns]
            rest[p] = list(feed[later[0]:]) if later else []
    second = make()
    second.restore(snap[0])
    resumed = run(second, rest, outputs=outputs, start=cut, schemas=schemas)
    for port in range(len(whole)):
        assert resumed[port] == whole[port][counts[port]:], f"output port {port}"
    return snap[0]


# -------------------------------------------------------------------- Filter


def test_filter_routes_matches_to_port_0_others_to_port_1_and_marks_to_both() -> None:
    out = run(Filter(lambda t: t["v"] > 1), [{"v": 1}, {"v": 2}, W, {"v": 3}, {"v": 0}], outputs=2)
    assert items(out[0]) == [{"v": 2}, W, {"v": 3}, F]
    assert items(out[1]) == [{"v": 1}, W, {"v": 0}, F]


def test_filter_with_one_output_drops_non_matches_and_defaults_to_true() -> None:
    out = run(Filter(filter=lambda t: t["v"] % 2 == 0), [{"v": 1}, {"v": 2}, W, {"v": 4}])
    assert items(out[0]) == [{"v": 2}, W, {"v": 4}, F]
    everything = run(Filter(), [{"v": 1}, W, {"v": 2}])
    assert items(everything[0]) == [{"v": 1}, W, {"v": 2}, F]


def test_filter_parameter_errors_name_the_operator_and_the_fix() -> None:
    with pytest.raises(OperatorParameterError, match=r"Filter: filter must be a callable"):
        Filter(True)  # type: ignore[arg-type]
    with pytest.raises(OperatorParameterError, match=r"Filter: unknown parameter 'filtr'.*'filter'"):
        Filter(filtr=lambda t: True)


def test_filter_refuses_a_windowed_port_and_a_third_output() -> None:
    with pytest.raises(GraphValidationError,
                       match=r"operator 'op': input port 0 has a window .*takes no window"):
        run(Filter(), [{"v": 1}], window="tumbling, count(2)")
    with pytest.raises(GraphValidationError,
                       match=r"operator 'op': has 3 output ports; Filter takes 1 to 2 \[operator\]"):
        run(Filter(), [{"v": 1}], outputs=3)


# ------------------------------------------------------------------- Functor


def test_functor_assigns_auto_assigns_and_filters() -> None:
    op = Functor(lambda t: t["price"] > 10,
                 output={"total": lambda t: t["price"] * t["qty"], "venue": "X"})
    out = run(op, [{"sym": "A", "price": 11, "qty": 2}, {"sym": "B", "price": 5, "qty": 1}, W,
                   {"sym": "C", "price": 20, "qty": 3}])
    assert items(out[0]) == [
        {"sym": "A", "price": 11, "qty": 2, "total": 22, "venue": "X"}, W,
        {"sym": "C", "price": 20, "qty": 3, "total": 60, "venue": "X"}, F]


def test_functor_emits_one_tuple_per_output_port_and_forwards_marks_to_every_port() -> None:
    op = Functor(outputs=[{"double": lambda t: 2 * t["v"]}, None, {"v": lambda t: -t["v"]}])
    out = run(op, [{"v": 1}, W, {"v": 2}], outputs=3)
    assert items(out[0]) == [{"v": 1, "double": 2}, W, {"v": 2, "double": 4}, F]
    assert items(out[1]) == [{"v": 1}, W, {"v": 2}, F]
    assert items(out[2]) == [{"v": -1}, W, {"v": -2}, F]


def test_functor_output_schema_keeps_exactly_its_attributes() -> None:
    op = Functor(output={"label": lambda t: f"{t['sym']}:{t['price']}"})
    out = run(op, [{"sym": "A", "price": 1.5, "qty": 3}],
              schemas=[Schema(sym="rstring", label="rstring")])
    assert items(out[0]) == [{"sym": "A", "label": "A:1.5"}, F]
    with pytest.raises(JobError, match=r"attribute 'missing' is neither assigned nor in the input"):
        run(Functor(), [{"sym": "A"}], schemas=[Schema(sym="rstring", missing="int64")])
    with pytest.raises(GraphValidationError, match=r"assigns 'nope', which the port's schema"):
        run(Functor(output={"nope": 1}), [{"sym": "A"}], schemas=[Schema(sym="rstring")])


def test_output_clauses_are_checked_against_declared_schemas_at_freeze() -> None:
    g = Graph("clauses")
    s = g.source("s", ListSource([]), schema=Schema(sym="rstring", price="float64"))
    g.operator("f", Functor(outputs=[{"label": "x"}, {}]), [s],
               [Schema(sym="rstring", label="rstring", qty="int64"), Schema(sym="rstring", n="int64")])
    g.operator("p", Punctor(lambda t: True, "after", output={"nope": 1}), [s], [Schema(sym="rstring")])
    with pytest.raises(GraphValidationError) as info:
        g.freeze()
    assert [f"{e.operator}: {e.message}" for e in info.value.errors] == [
        "f: output port 0 attribute 'qty' is neither assigned nor in the input schema; add it "
        "to the output clause",
        "f: output port 1 attribute 'n' is neither assigned nor in the input schema; add it to "
        "the output clause",
        "p: output port 0 assigns 'nope', which the port's schema tuple<rstring sym> does not have"]


def test_functor_logic_state_runs_before_the_filter_and_survives_a_restore() -> None:
    def make() -> Functor:
        state: dict[str, Any] = {"seen": 0}

        def logic(st: dict[str, Any], tup: Any) -> None:
            st["seen"] += 1

        return Functor(lambda t: t["v"] > 0, state=state, logic=logic,
                       output={"seen": lambda t: state["seen"]})

    feed = [{"v": 1}, {"v": -1}, {"v": 2}, at(1), {"v": 3}, {"v": -3}, {"v": 4}]
    out = run(make(), feed)
    assert [t["seen"] for t in items(out[0])[:-1]] == [1, 3, 4, 6]  # filtered tuples count too
    run_split(make, {0: feed}, 1.0)


def test_functor_refuses_more_clauses_than_ports_and_output_with_outputs() -> None:
    with pytest.raises(GraphValidationError, match=r"2 output clauses for 1 output port\(s\)"):
        run(Functor(outputs=[{}, {}]), [{"v": 1}])
    with pytest.raises(OperatorParameterError, match=r"give output .* or outputs .*not both"):
        Functor(output={}, outputs=[{}])


# ------------------------------------------------------------------- Punctor


def test_punctor_after_puts_a_mark_after_the_tuple_and_drops_incoming_marks() -> None:
    op = Punctor(lambda t: t["last"], "after", output={"n": lambda t: t["v"] * 10})
    out = run(op, [{"v": 1, "last": False}, W, {"v": 2, "last": True}, {"v": 3, "last": True}])
    assert items(out[0]) == [{"v": 1, "last": False, "n": 10}, {"v": 2, "last": True, "n": 20}, W,
                             {"v": 3, "last": True, "n": 30}, W, F]


def test_punctor_before_puts_the_mark_first() -> None:
    op = Punctor(punctuate=lambda t: t["v"] % 2 == 0, position="before")
    out = run(op, [{"v": 1}, {"v": 2}, {"v": 3}, W, {"v": 4}])
    assert items(out[0]) == [{"v": 1}, W, {"v": 2}, {"v": 3}, W, {"v": 4}, F]


def test_punctor_requires_a_condition_and_a_valid_position() -> None:
    with pytest.raises(OperatorParameterError, match=r"position='middle': expected 'before' or 'after'"):
        Punctor(lambda t: True, "middle")  # type: ignore[arg-type]
    with pytest.raises(OperatorParameterError, match=r"Punctor: punctuate must be a callable"):
        Punctor(position="after")


# -------------------------------------------------------------------- Custom


def test_custom_forwards_nothing_but_final_and_sees_every_punctuation() -> None:
    seen: list[Any] = []

    def on_tuple(op: Custom, tup: Any, port: int) -> None:
        op.state["n"] += 1
        op.submit({**tup, "port": port, "n": op.state["n"]}, port)

    def on_punct(op: Custom, punct: Punct, port: int) -> None:
        seen.append((punct, port))
        if punct is Punct.WINDOW and port == 1:
            op.submit_punct(Punct.WINDOW, 0)  # only explicit marks reach the output

    initial = {"n": 0}
    op = Custom(on_tuple, on_punct, state=initial)
    out = run(op, {0: [{"v": 1}, W, at(1), {"v": 2}], 1: [at(0.5), {"v": 9}, W]}, outputs=2)
    assert items(out[0]) == [{"v": 1, "port": 0, "n": 1}, W, {"v": 2, "port": 0, "n": 3}, F]
    assert items(out[1]) == [{"v": 9, "port": 1, "n": 2}, F]
    assert seen == [(W, 0), (W, 1), (F, 1), (F, 0)]  # port 1 ended first, at 0.5 s
    assert initial == {"n": 0}  # the argument is copied, never changed


def test_custom_state_snapshot_restore_continue() -> None:
    def make() -> Custom:
        def on_tuple(op: Custom, tup: Any, port: int) -> None:
            total = op.state["totals"].get(tup["k"], 0) + tup["v"]
            op.state["totals"][tup["k"]] = total
            op.submit({"k": tup["k"], "total": total})

        return Custom(on_tuple, state={"totals": {}})

    feed = [{"k": "a", "v": 1}, {"k": "b", "v": 2}, at(1), {"k": "a", "v": 3}, at(2), {"k": "b", "v": 4}]
    run_split(make, {0: feed}, 1.0)
    op = make()
    run(op, feed)
    op.reset_to_initial_state()
    assert op.state == {"totals": {}}


def test_custom_without_tuple_logic_says_so() -> None:
    with pytest.raises(JobError, match=r"Custom 'op' received a tuple on input port 0 but has no "
                                       r"on_tuple logic"):
        run(Custom(), [{"v": 1}])


def test_custom_cannot_end_an_output_early_and_says_so() -> None:
    # SPL's submit(Sys.FinalMarker, port) has no equivalent: the operator fails, saying why.
    op = Custom(lambda o, t, p: o.submit_punct(Punct.FINAL, 0))
    with pytest.raises(JobError, match=r"only window marks can be submitted; .* SPL's "
                                       r"submit\(Sys.FinalMarker\) is not supported"):
        run(op, [{"v": 1}])


def test_custom_between_dense_window_marks_keeps_order_marks_and_per_tuple_errors() -> None:
    # A mark after each tuple (Aggregate's and Join's outputs): Custom takes the tuples one at
    # a time there (its on_tuples for runs of one cost ~1 µs a mark); same output, same errors.
    seen: list[Any] = []

    def on_tuple(op: Custom, tup: Any, port: int) -> None:
        if tup["v"] == 2:
            raise ValueError("two")
        seen.append(tup["v"])
        op.submit(tup)

    def on_punct(op: Custom, punct: Punct, port: int) -> None:
        seen.append(punct)
        if punct is Punct.WINDOW:
            op.submit_punct()

    items: list[Any] = [x for v in range(4) for x in ({"v": v}, W)]
    g = Graph("dense")
    good, errors = g.operator("c", Custom(on_tuple, on_punct), [g.source("s", ListSource(items))],
                              error_port=True)
    out, failed = ListSink(), ListSink()
    g.sink("out", out, [good])
    g.sink("failed", failed, [errors])
    run_graph(g, clock=VirtualClock())
    assert seen == [0, W, 1, W, W, 3, W, F]
    assert out.items == [{"v": 0}, W, {"v": 1}, W, W, {"v": 3}, W, F]
    assert [e["tuple"] for e in failed.tuples] == [{"v": 2}]
