"""`result_submit`: a result and its window mark in one call, exactly as submit then submit_punct."""

from __future__ import annotations

from typing import Any

import pytest

from riverbed.graph import Graph, Operator, Punct, Schema
from riverbed.operators._utility_support import result_submit
from riverbed.runtime import VirtualClock, run_graph
from riverbed.testing import ListSink, ListSource


class Results(Operator):
    """A row and a window mark per input tuple (every third tuple: two rows, then one mark)."""

    def __init__(self, one_call: bool) -> None:
        self.one_call = one_call

    def setup(self) -> None:
        self.result = result_submit(self, 0)

    def on_tuple(self, tup: Any, port: int) -> None:
        row = {"v": tup["v"] * 10}
        if tup["v"] % 3 == 0:
            self.submit({"v": -1})
        if self.one_call:
            self.result(row)
        else:
            self.submit(row)
            self.submit_punct(Punct.WINDOW)


def _run(one_call: bool, inputs: list[Any], schema: Schema | None) -> tuple[list[Any], list[Any], Any]:
    g = Graph("results")
    src = g.source("src", ListSource(inputs))
    out, errors = g.operator("op", Results(one_call), [src], [schema], error_port=True)
    sink, failed = ListSink(), ListSink()
    g.sink("sink", sink, [out])
    g.sink("errors", failed, [errors])
    metrics = run_graph(g, clock=VirtualClock())
    return sink.items, failed.items, metrics.operators["op"].outputs[0]


@pytest.mark.parametrize("schema", [None, Schema(v="int32")])
def test_a_result_and_its_mark_in_one_call_equal_submit_then_submit_punct(schema: Schema | None) -> None:
    # With the int32 schema, 10 * 300_000_000 does not fit: that row goes to the error port
    # and its mark still goes out, as with two calls.
    inputs: list[Any] = [{"v": v} for v in (1, 2, 3, 300_000_000, 5, 6)] + [Punct.WINDOW, {"v": 7}]
    one = _run(True, inputs, schema)
    two = _run(False, inputs, schema)
    assert one[0] == two[0] and one[1] == two[1]
    assert one[2] == two[2] and one[2].window_puncts_submitted == 8
    rows = [x for x in one[0] if not isinstance(x, Punct)]
    assert one[0].count(Punct.WINDOW) == 8  # 7 results, 1 forwarded and one[0][-1] is Punct.FINAL
    assert rows[:3] == [{"v": 10}, {"v": 20}, {"v": -1}]
    assert len([x for x in one[1] if not isinstance(x, Punct)]) == (schema is not None)


def test_under_a_host_without_it_a_result_is_submit_then_submit_punct() -> None:
    calls: list[Any] = []

    class Bare(Operator):
        def submit(self, tup: Any, port: int = 0) -> None:
            calls.append(("submit", tup, port))

        def submit_punct(self, punct: Punct = Punct.WINDOW, port: int = 0) -> None:
            calls.append(("punct", punct, port))

    op = Bare()
    op.context = object()  # type: ignore[assignment]
    result_submit(op, 1)({"v": 1})
    assert calls == [("submit", {"v": 1}, 1), ("punct", Punct.WINDOW, 1)]
