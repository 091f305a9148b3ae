"""Review 43, finding 5, 6 and the small ones: schema mismatches refused when the graph is
built, failures that name the output attribute, and two parameters' messages.

5. Pair with inputs of different schemas, Union with an input lacking (or retyping) an output
   attribute, a standard deviation into a declared int64: each failed the job at its first
   tuple or window; now `Graph.freeze` lists them, naming operator, port and attribute.
6. An Aggregate failure ("'<' not supported ...") now says which output attribute's function
   raised, on every path that builds rows (compiled, reference loop, incremental mirrors).
Small: DeDuplicate(delta=nan) deduplicated nothing, silently; Split's hint was a predicate.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from riverbed.graph import Graph, GraphValidationError, Schema
from riverbed.operators import (
    Aggregate,
    Average,
    Count,
    DeDuplicate,
    Max,
    Min,
    Pair,
    PopulationStdDev,
    SampleStdDev,
    Split,
    Sum,
    Union,
)
from riverbed.operators._params import OperatorParameterError
from riverbed.runtime import JobError, VirtualClock, run_graph
from riverbed.testing import ListSink, ListSource

KV = Schema(k="int64", v="float64")


def _freeze_errors(g: Graph) -> str:
    with pytest.raises(GraphValidationError) as info:
        g.freeze()
    return str(info.value)


def _graph(op: Any, schemas: list[Schema | None], out: Schema | None, window: str | None = None
           ) -> Graph:
    g = Graph("g")
    ins = [g.source(f"s{i}", ListSource([]), schema=s) for i, s in enumerate(schemas)]
    ports = [p.window(window) if window else p for p in ins]
    o = g.operator("op", op, ports, [out])
    g.sink("k", ListSink(), [o])
    return g


def test_pair_inputs_of_another_schema_than_the_output_are_refused() -> None:
    text = _freeze_errors(_graph(Pair(), [KV, Schema(k="int64", name="rstring")], KV))
    assert "operator 'op'" in text and "input port 1's schema" in text
    assert "lacks 'v'" in text and "adds 'name'" in text


def test_pair_inputs_differing_without_a_declared_output_are_refused() -> None:
    text = _freeze_errors(_graph(Pair(), [KV, Schema(k="int64", v="float32")], None))
    assert "input port 1's schema" in text and "input port 0's" in text
    assert "makes 'v' float32" in text


def test_pair_of_one_schema_and_undeclared_ports_are_accepted() -> None:
    _graph(Pair(), [KV, Schema(k="int64", v="float64")], Schema(k="int64", v="float64")).freeze()
    _graph(Pair(), [KV, None], None).freeze()


def test_union_inputs_lacking_or_retyping_an_output_attribute_are_refused() -> None:
    text = _freeze_errors(_graph(Union(), [KV, Schema(k="int64", name="rstring"),
                                           Schema(k="rstring", v="float64")], KV))
    assert "input port 1's schema" in text and "lacks 'v'" in text
    assert "input port 2's schema" in text and "has 'k' as rstring (the output's is int64)" in text
    assert "input port 0" not in text


def test_union_inputs_with_more_attributes_than_the_output_are_accepted() -> None:
    _graph(Union(), [Schema(k="int64", v="float64", extra="rstring"), KV], KV).freeze()


@pytest.mark.parametrize("fn", [SampleStdDev("v"), PopulationStdDev("v")])
def test_a_standard_deviation_into_an_integral_output_is_refused(fn: Any) -> None:
    text = _freeze_errors(_graph(Aggregate({"sd": fn}), [Schema(v="int64")], Schema(sd="int64"),
                                 "tumbling, count(3)"))
    assert f"output 'sd' = {fn!r}" in text and "'sd' is int64" in text
    _graph(Aggregate({"sd": fn}), [Schema(v="int64")], Schema(sd="float64"),
           "tumbling, count(3)").freeze()


# ------------------------------------------------------------------ finding 6


def _run(op: Aggregate, rows: list[Any], window: str) -> str:
    """The job's message, and the notes of what the operator raised."""
    g = Graph("g")
    s = g.source("s", ListSource(rows))
    o = g.operator("op", op, [s.window(window)])
    g.sink("k", ListSink(), [o])
    with pytest.raises(JobError) as info:
        run_graph(g, clock=VirtualClock())
    notes = [n for e in info.value.errors for n in getattr(e.__cause__ or getattr(e, "cause", e),
                                                            "__notes__", [])]
    return "\n".join([str(info.value), *notes])


CLAUSE: dict[str, Any] = {"n": Count(), "s": Sum("v"), "m": Min("w"), "mx": Max("v")}
ROWS = [{"v": 1, "w": 1}, {"v": 2, "w": None}, {"v": 3, "w": 2}]


@pytest.mark.parametrize("window", ["tumbling, count(3)", "sliding, count(3), count(1)",
                                    "sliding, count(2), count(1)", "sliding, count(3), count(3)"])
@pytest.mark.parametrize("incremental", [True, False])
@pytest.mark.parametrize("reference", [False, True])
@pytest.mark.parametrize("group_by", [None, "g"])
def test_a_failing_output_function_is_named(window: str, incremental: bool, reference: bool,
                                            group_by: str | None) -> None:
    op = Aggregate(CLAUSE, incremental=incremental, group_by=group_by)
    op._reference = reference
    rows = [dict(r, g=0) for r in ROWS]
    text = _run(op, rows, window)
    # ('<' in the folds, '>' in the monotonic queue)
    assert "TypeError: output 'm' = Min(value='w'): '" in text and "' not supported" in text, text


def test_a_failing_expression_and_a_shared_sum_are_named() -> None:
    text = _run(Aggregate({"n": Count(), "x": lambda t: t["missing"]}), ROWS, "tumbling, count(3)")
    # A KeyError's text is its key (here the attribute): the output is a note of it.
    assert "KeyError: 'missing'" in text and "\noutput 'x' = " in text
    assert "(of the last tuple)" in text
    # Sum and Average of one attribute share an accumulator; the Sum's recompute raised.
    text = _run(Aggregate({"s": Sum("v"), "a": Average("v")}),
                [{"v": 1}, {"v": "x"}, {"v": 2}, {"v": 3}], "sliding, count(2), count(1)")
    assert "TypeError: output 's' = Sum(value='v'): unsupported operand" in text


# ------------------------------------------------------------------ small ones


@pytest.mark.parametrize("delta", [math.nan, math.inf, -1])
def test_dedup_needs_a_finite_delta(delta: float) -> None:
    with pytest.raises(OperatorParameterError, match="expected a finite number >= 0"):
        DeDuplicate(key="k", delta_attribute="t", delta=delta)
    DeDuplicate(key="k", delta_attribute="t", delta=0.5)


def test_split_s_hint_is_an_index_not_a_predicate() -> None:
    with pytest.raises(OperatorParameterError) as info:
        Split(index=3)
    assert "e.g. lambda t: 0 if t['price'] > 10 else 1" in str(info.value)
    assert "> 10)" not in str(info.value)


def test_a_user_function_that_raises_keeps_its_text_and_gets_a_note() -> None:
    """The user's own exception stays as raised (an error port records it as it is); the
    output it came from is a note."""
    def reading(t: dict[str, Any]) -> int:
        raise ValueError("poison")

    text = _run(Aggregate({"s": Sum(reading)}), ROWS, "tumbling, count(3)")
    named = ("output 's' = Sum(value=test_a_user_function_that_raises_keeps_its_text_and_gets_a_note"
             ".<locals>.reading)")
    assert f"ValueError: poison ({named}) at EVICTION" in text  # the job's message shows the note
    assert "\noutput 's' = Sum(value=test_a_user_function_that_raises_keeps_its_text_and_gets_a_note" \
        ".<locals>.reading)" in text
