"""`Operator.check_ports`: an operator's own rules for its ports, asked at `Graph.freeze`."""

from __future__ import annotations

from typing import Any

import pytest

from riverbed.graph import Graph, GraphValidationError, Operator, PortLayout, Schema, Source
from riverbed.testing import ListSink, ListSource


class NeedsWindow(Operator):
    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.seen: list[PortLayout] = []

    def check_ports(self, ports: PortLayout) -> Any:
        self.seen.append(ports)
        return self.answer if ports.windows[0] is None else None


def freeze_errors(op: Operator, *, windowed: bool = False) -> list[str]:
    g = Graph("checks")
    s = g.source("s", ListSource([]), schema=Schema(v="int64"))
    g.operator("op", op, [s.window("tumbling, count(2)") if windowed else s, s], [None, None],
               error_port=True)
    try:
        g.freeze()
    except GraphValidationError as exc:
        return [f"{e.operator}: {e.message} [{e.rule}]" for e in exc.errors]
    return []


def test_the_layout_holds_windows_schemas_and_data_outputs() -> None:
    op = NeedsWindow(None)
    assert freeze_errors(op, windowed=True) == []
    (layout,) = op.seen
    assert layout.operator == "op"
    assert [None if w is None else w.clause() for w in layout.windows] == ["tumbling, count(2)", None]
    assert layout.input_schemas == (Schema(v="int64"), Schema(v="int64"))
    assert layout.outputs == 2  # the error port is not a data output


@pytest.mark.parametrize(("answer", "errors"), [
    (None, []),
    ([], []),
    ("needs a window", ["op: needs a window [operator]"]),
    (["needs a window", "and more"], ["op: needs a window [operator]", "op: and more [operator]"]),
    (iter(["from a generator"]), ["op: from a generator [operator]"]),
])
def test_what_a_check_may_return(answer: Any, errors: list[str]) -> None:
    assert freeze_errors(NeedsWindow(answer)) == errors


def test_a_check_that_raises_is_reported_as_a_broken_rule() -> None:
    class Broken(Operator):
        def check_ports(self, ports: PortLayout) -> list[str]:
            raise KeyError("oops")

    assert freeze_errors(Broken()) == ["op: Broken.check_ports raised KeyError('oops') [operator]"]


def test_sources_are_asked_too() -> None:
    class Refused(Source):
        def check_ports(self, ports: PortLayout) -> list[str]:
            return [f"{len(ports.windows)} inputs, {ports.outputs} output"]

        def generate(self) -> Any:
            return iter([])

    g = Graph("source-checks")
    g.sink("k", ListSink(), [g.source("s", Refused())])
    with pytest.raises(GraphValidationError, match=r"operator 's': 0 inputs, 1 output \[operator\]"):
        g.freeze()


def test_the_standard_operators_check_the_attributes_they_read_against_declared_schemas() -> None:
    from riverbed.operators import Barrier, DeDuplicate, DynamicFilter, Join

    g = Graph("attributes")
    s = g.source("s", ListSource([]), schema=Schema(k="int64", v="int64"))
    g.operator("dd", DeDuplicate(key="zz", delta_attribute="t", delta=1.0), [s])
    g.operator("df", DynamicFilter(key="k", add_key="kk", remove_key="k"), [s, s])
    g.operator("bar", Barrier(partitionByLHS="k", partitionByRHS="zz"), [s, s])
    g.operator("j", Join(equality_lhs=["k", "q"], equality_rhs=["zz", "v"]),
               [s.window("sliding, count(2)"), s.window("sliding, count(2)")])
    with pytest.raises(GraphValidationError) as info:
        g.freeze()
    lacks = "which the input schema tuple<int64 k, int64 v> does not have"
    assert [f"{e.operator}: {e.message}" for e in info.value.errors] == [
        f"dd: key reads attribute 'zz', {lacks}",
        f"dd: delta_attribute reads attribute 't', {lacks}",
        "df: remove_key (removeKey) goes with a third input port (the removals), and only with "
        "one: the graph gives it 2 input ports and remove_key is set",
        f"df: add_key reads attribute 'kk', {lacks}",
        f"bar: partitionBy of input port 1 reads attribute 'zz', {lacks}",
        f"j: equality_lhs reads attribute 'q', {lacks}",
        f"j: equality_rhs reads attribute 'zz', {lacks}"]


def test_an_operator_passing_its_input_on_unchanged_needs_the_inputs_schema_out() -> None:
    # A narrower or retyped output failed the job at its first tuple (exit 1), not at freeze.
    from riverbed.operators import Delay, Filter, Sort, Split

    given = Schema(k="int32", a="int32")
    g = Graph("narrow")
    s = g.source("s", ListSource([]), schema=given)
    g.operator("filter", Filter(lambda t: True), [s], [Schema(k="int32")])
    g.operator("delay", Delay(1.0), [s], [Schema(k="int32", a="float64")])
    g.operator("sort", Sort(sort_by="k"), [s.window("tumbling, count(2)")],
               [Schema(k="int32", a="int32", b="rstring")])
    g.operator("split", Split(index=lambda t: 0), [s], [given, Schema(a="int32", k="int32")])
    with pytest.raises(GraphValidationError) as info:
        g.freeze()
    found = {e.operator: e.message for e in info.value.errors}
    assert found == {
        "filter": "output port 0 sends input port 0's tuples on unchanged, so its schema must be "
                  "the input's tuple<int32 k, int32 a>; the declared tuple<int32 k> lacks 'a'",
        "delay": "output port 0 sends input port 0's tuples on unchanged, so its schema must be "
                 "the input's tuple<int32 k, int32 a>; the declared tuple<int32 k, float64 a> "
                 "makes 'a' float64 (the input's is int32)",
        "sort": "output port 0 sends input port 0's tuples on unchanged, so its schema must be "
                "the input's tuple<int32 k, int32 a>; the declared tuple<int32 k, int32 a, "
                "rstring b> adds 'b'",
    }  # (Split's second port: the same attributes in another order is the same schema)


def test_a_passed_on_schema_may_space_its_types_another_way() -> None:
    from riverbed.operators import Filter

    g = Graph("spaced")
    s = g.source("s", ListSource([]), schema=Schema(v="map<rstring,int64>", w="list<int64>"))
    g.operator("f", Filter(lambda t: True), [s], [Schema(v="map<rstring, int64>", w="list< int64 >")])
    g.freeze()  # the same types: not refused
