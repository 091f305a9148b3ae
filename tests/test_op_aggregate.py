"""SPL Aggregate through the real runtime: when it outputs, what it outputs, and its state.

Every test runs the operator in a job on the virtual clock (`run_operator`) and
checks the exact output tuples and window marks; the expected values follow
standard-operators.md section 1 and IBM's ``Aggregate_cpp.cgt``/``Aggregate.h``.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.checkpoint import MemoryStore
from riverbed.graph import Graph, GraphValidationError, Operator, Punct, Schema, Source, Watermark
from riverbed.operators._aggregate import Aggregate
from riverbed.operators._aggregate_functions import (
    Any as AnyOf,
)
from riverbed.operators._aggregate_functions import (
    ArgMax,
    ArgMin,
    Average,
    Collect,
    CollectArgMax,
    CollectArgMin,
    CollectDistinct,
    Count,
    CountAll,
    CountByDistinct,
    CountByGroup,
    CountDistinct,
    CountGroups,
    Custom,
    First,
    IntervalEnd,
    IntervalStart,
    Last,
    Max,
    MaxCount,
    Min,
    MinCount,
    PaneIndex,
    PaneTimingOf,
    PopulationStdDev,
    SampleStdDev,
    Scope,
    Sum,
)
from riverbed.operators._params import OperatorParameterError
from riverbed.runtime import Job, JobError, VirtualClock, run_graph
from riverbed.testing import ListSink, ListSource, at, run_operator, run_until_crash
from riverbed.windows import PaneTiming

W = Punct.WINDOW
F = Punct.FINAL
S = 1_000_000_000


def rows(*values: Any, key: str = "v") -> list[dict[str, Any]]:
    return [{key: v} for v in values]


SUM_N = {"s": Sum("v"), "n": Count()}

# ---------------------------------------------------------------- parameters


def test_spl_parameter_names_are_accepted_and_a_parameter_given_twice_is_refused() -> None:
    out = run_operator(Aggregate(SUM_N, groupBy="g"), [{"g": 1, "v": 2}, {"g": 2, "v": 3}],
                       window="tumbling, count(2)")
    assert out.items == [{"g": 1, "s": 2, "n": 1}, {"g": 2, "s": 3, "n": 1}, W, F]
    with pytest.raises(OperatorParameterError, match="'group_by' given twice"):
        Aggregate(SUM_N, group_by="g", groupBy="h")
    with pytest.raises(OperatorParameterError, match=r"unknown parameter 'groupby'.*did you mean 'group_by'"):
        Aggregate(SUM_N, groupby="g")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"partitionBy": "k"}, r"partitionBy is declared on the input port.*partition_by=\.\.\."),
    ({"output": {"n": Count()}, "aggregate_incomplete_windows": 1}, "expected True or False"),
    ({"output": [("n", Count())]}, "expected a mapping of attribute names"),
    ({"output": {"n": Count()}, "group_by": 3}, "group_by=3: expected an attribute name"),
    ({"output": {"n": Count()}, "copy": "sym"}, "copy='sym': expected a sequence"),
    ({}, "nothing to output"),
    ({"output": {"n": Count}}, r"output 'n' = Count: the function, not a call of it; did you mean "
                               r"Count\(\)\?"),
    ({"output": {"s": Sum}}, r"did you mean Sum\(\.\.\.\)\?"),
    ({"output": {"avg": Aggregate({"n": Count()})}}, "an operator, not an output function"),
])
def test_bad_parameters_are_refused_when_building(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(OperatorParameterError, match=message):
        Aggregate(**kwargs)


def test_a_function_argument_must_be_an_attribute_or_a_function() -> None:
    with pytest.raises(OperatorParameterError, match=r"Sum\(42\): the argument must be an attribute name"):
        Sum(42)  # type: ignore[arg-type]
    with pytest.raises(OperatorParameterError, match="result must be a function"):
        Custom(list, lambda c, t: c, 3)  # type: ignore[arg-type]


@pytest.mark.parametrize(("op", "window", "message"), [
    (Aggregate(SUM_N, aggregate_incomplete_windows=True), "tumbling, count(2)",
     "aggregate_incomplete_windows=True needs a sliding .*'tumbling, count.2.' is tumbling"),
    (Aggregate(SUM_N, aggregate_evicted_partitions=True), "sliding, count(2), count(1)",
     "aggregate_evicted_partitions=True needs a tumbling, partitioned window with a partition "
     "eviction policy"),
    (Aggregate(SUM_N, aggregate_evicted_partitions=True), "tumbling, count(2)",
     "aggregate_evicted_partitions=True needs a tumbling"),
    (Aggregate({"start": IntervalStart()}), "tumbling, count(2)",
     "output 'start' = IntervalStart.. describes a timeInterval pane"),
    (Aggregate(SUM_N), None, "input port 0 must be windowed: tumbling with count, delta, time or punct"),
])
def test_windows_and_parameters_that_do_not_fit_are_refused_with_the_graph(
        op: Aggregate, window: str | None, message: str) -> None:
    with pytest.raises(GraphValidationError, match=message) as info:
        run_operator(op, rows(1), window=window)
    assert [(e.operator, e.rule) for e in info.value.errors] == [("op", "operator")]


def test_an_integer_average_into_a_declared_float_is_refused_with_the_graph() -> None:
    # SPL's Average(T) is a T: 1 and 2 average to 1, which passed a float64 output's check.
    g = Graph("avg")
    s = g.source("s", ListSource([]), schema=Schema(v="int32", f="float64"))
    g.operator("a", Aggregate({"a": Average("v"), "b": Average("f"), "c": Average("v")}),
               [s.window("tumbling, count(2)")], [Schema(a="float64", b="float64", c="int64")])
    with pytest.raises(GraphValidationError) as info:
        g.freeze()
    assert [e.message for e in info.value.errors] == [
        "output 'a' = Average(value='v'): the average of 'v' (int32) is an integer, truncated "
        "(SPL's Average(T) is a T), but 'a' is float64: average a float "
        "(Average(lambda t: float(t['v']))) or declare 'a' an integer"]


def test_an_output_the_declared_schema_lacks_is_refused_with_the_graph() -> None:
    # Every result would fail the port's check, first when a window fires: a 10-minute pane
    # failed the job 10 minutes in, where a Functor's is refused at freeze (exit 2).
    g = Graph("undeclared")
    s = g.source("s", ListSource([]), schema=Schema(k="rstring", v="float64"))
    g.operator("a", Aggregate({"avg": Average("v"), "n": Count()}, copy=("k",)),
               [s.window("tumbling, time(600)")], [Schema(avg="float64")])
    with pytest.raises(GraphValidationError) as info:
        g.freeze()
    assert [e.message for e in info.value.errors] == [
        "output 'k', 'n': not in the output port's schema tuple<float64 avg>; declare them there "
        "or leave them out of output, copy and group_by"]


def test_every_misfit_is_listed_with_the_attributes_the_schema_lacks() -> None:
    g = Graph("misfits")
    s = g.source("s", ListSource([]), schema=Schema(k="rstring", v="int64"))
    g.operator("a", Aggregate({"n": Count(), "s": Sum("value"), "start": IntervalStart()},
                              group_by=["k", "site"], copy=("region",),
                              aggregate_incomplete_windows=True),
               [s.window("tumbling, count(2)")])
    g.operator("b", Aggregate({"top": ArgMax("v", "name")}), [s])
    with pytest.raises(GraphValidationError) as info:
        g.freeze()
    found = [(e.operator, e.message) for e in info.value.errors]
    assert [m for o, m in found if o == "a"] == [
        "aggregate_incomplete_windows=True needs a sliding (or timeInterval) window; "
        "'tumbling, count(2)' is tumbling and only aggregates whole windows",
        "output 'start' = IntervalStart() describes a timeInterval pane; the window is "
        "'tumbling, count(2)'",
        "group_by reads attribute 'site', which the input schema tuple<rstring k, int64 v> "
        "does not have",
        "output 'region' = Last(value='region') reads attribute 'region', which the input "
        "schema tuple<rstring k, int64 v> does not have",
        "output 's' = Sum(value='value') reads attribute 'value', which the input schema "
        "tuple<rstring k, int64 v> does not have"]
    first, *rest = [m for o, m in found if o == "b"]
    assert first.startswith("input port 0 must be windowed")
    assert rest == [
        "output 'top' = ArgMax(value='v', arg='name') reads attribute 'name', which the input "
        "schema tuple<rstring k, int64 v> does not have"]


# ----------------------------------------------------------------- tumbling


def test_tumbling_count_outputs_each_flush_then_a_mark_and_final_does_not_flush() -> None:
    out = run_operator(Aggregate(SUM_N), rows(1, 2, 3, 4, 5, 6, 7), window="tumbling, count(3)")
    assert out.items == [{"s": 6, "n": 3}, W, {"s": 15, "n": 3}, W, F]  # 7 stays pending


def test_tumbling_time_an_empty_flush_outputs_only_a_mark() -> None:
    out = run_operator(Aggregate(SUM_N), [{"v": 1}, at(1), {"v": 2}, at(5), {"v": 3}, at(7)],
                       window="tumbling, time(2)")
    assert out.items == [{"s": 3, "n": 2}, W, W, {"s": 3, "n": 1}, W, F]


@pytest.mark.parametrize("flavor", ["java", "cpp"])
def test_tumbling_punct_marks_flush_and_an_empty_flush_gives_only_a_mark(flavor: str) -> None:
    # java: an empty EVICTION; cpp: EMPTY_WINDOW_PUNCT. Either way one mark, and no forwarded one.
    out = run_operator(Aggregate(SUM_N), [{"v": 1}, {"v": 2}, W, W, {"v": 3}, W, {"v": 4}],
                       window="tumbling, punct()", flavor=flavor)
    assert out.items == [{"s": 3, "n": 2}, W, W, {"s": 3, "n": 1}, W, F]


@pytest.mark.parametrize(("flavor", "expected"), [
    # java: a timer per partition from its creation; b (created at 2.5) would tumble at 4.5
    ("java", [{"k": "a", "s": 1, "n": 1}, W, W, F]),
    # cpp: one timer for the window; at 4 it flushes b (a was dropped once flushed)
    ("cpp", [{"k": "a", "s": 1, "n": 1}, W, {"k": "b", "s": 2, "n": 1}, W, F]),
])
def test_tumbling_time_partitioned_follows_the_flavors_timers(flavor: str, expected: list[Any]) -> None:
    items = [{"k": "a", "v": 1}, at(2.5), {"k": "b", "v": 2}, at(4.2)]
    out = run_operator(Aggregate(SUM_N, copy=("k",)), items,
                       window="tumbling, time(2), partitioned", partition_by="k", flavor=flavor)
    assert out.items == expected


def test_tumbling_delta_flushes_before_the_tuple_that_exceeds_the_oldest() -> None:
    out = run_operator(Aggregate(SUM_N), rows(1, 2, 3, 4, 10, 11), window="tumbling, delta(v, 2)")
    assert out.items == [{"s": 6, "n": 3}, W, {"s": 4, "n": 1}, W, F]


def test_tumbling_partitioned_with_group_by_one_batch_and_mark_per_partition_flush() -> None:
    data = [("a", "x", 1), ("b", "x", 10), ("a", "y", 2), ("b", "x", 20), ("a", "x", 3)]
    out = run_operator(Aggregate({"s": Sum("v")}, group_by="g", copy=("k",)),
                       [{"k": k, "g": g, "v": v} for k, g, v in data],
                       window="tumbling, count(2), partitioned", partition_by="k")
    assert out.items == [{"k": "a", "g": "x", "s": 1}, {"k": "a", "g": "y", "s": 2}, W,
                         {"k": "b", "g": "x", "s": 30}, W, F]


@pytest.mark.parametrize(("flavor", "flag", "expected"), [
    # java keeps the emptied partition b, so evicting it later gives an empty aggregation: a mark
    ("java", True, [{"k": "a", "s": 3, "n": 2}, W, {"k": "b", "s": 18, "n": 3}, W, W, F]),
    ("java", False, [{"k": "b", "s": 18, "n": 3}, W, F]),
    ("cpp", True, [{"k": "a", "s": 3, "n": 2}, W, {"k": "b", "s": 18, "n": 3}, W, F]),
    ("cpp", False, [{"k": "b", "s": 18, "n": 3}, W, F]),
])
def test_aggregate_evicted_partitions_aggregates_an_evicted_partition_like_a_flush(
        flavor: str, flag: bool, expected: list[Any]) -> None:
    data = [("a", 1), ("a", 2), ("b", 5), ("b", 6), ("b", 7), ("c", 1)]
    out = run_operator(Aggregate(SUM_N, copy=("k",), aggregateEvictedPartitions=flag),
                       [{"k": k, "v": v} for k, v in data],
                       window="tumbling, count(3), partitioned, partitionCount(1)", partition_by="k",
                       flavor=flavor)
    assert out.items == expected


# ------------------------------------------------------------------ sliding


@pytest.mark.parametrize("incremental", [True, False])
def test_sliding_outputs_nothing_not_even_a_mark_before_the_window_is_full(incremental: bool) -> None:
    out = run_operator(Aggregate(SUM_N, incremental=incremental), rows(1, 2, 3, 4, 5),
                       window="sliding, count(3), count(1)")
    assert out.items == [{"s": 6, "n": 3}, W, {"s": 9, "n": 3}, W, {"s": 12, "n": 3}, W, F]


def test_aggregate_incomplete_windows_outputs_from_the_first_trigger() -> None:
    out = run_operator(Aggregate(SUM_N, aggregateIncompleteWindows=True), rows(1, 2, 3, 4),
                       window="sliding, count(3), count(1)")
    assert out.items == [{"s": 1, "n": 1}, W, {"s": 3, "n": 2}, W, {"s": 6, "n": 3}, W,
                         {"s": 9, "n": 3}, W, F]


def test_a_count_evicting_window_with_a_time_trigger_waits_for_initial_full() -> None:
    # IBM's docs call time-triggered windows full from the start; its code gates on INITIAL_FULL.
    out = run_operator(Aggregate(SUM_N), [{"v": 1}, at(0.5), {"v": 2}, at(1.5), {"v": 3}, at(2.5),
                                          {"v": 4}, at(3.2)],
                       window="sliding, count(3), time(1)")
    assert out.items == [{"s": 6, "n": 3}, W, {"s": 9, "n": 3}, W, F]


@pytest.mark.parametrize(("flavor", "expected"), [
    # java: full at activation, so the tick before any tuple gives a mark, as do empty ticks
    ("java", [W, {"s": 1, "n": 1}, W, {"s": 1, "n": 1}, W, W, W, F]),
    # cpp: INITIAL_FULL comes right before the first insertion; the 1 s tick finds nothing full
    ("cpp", [{"s": 1, "n": 1}, W, {"s": 1, "n": 1}, W, W, W, F]),
])
def test_a_time_evicting_window_is_full_from_the_start_and_empty_triggers_give_a_mark(
        flavor: str, expected: list[Any]) -> None:
    out = run_operator(Aggregate(SUM_N), [at(1.5), {"v": 1}, at(5.5)],
                       window="sliding, time(2), time(1)", flavor=flavor)
    assert out.items == expected


def test_sliding_delta_eviction_is_full_at_its_first_eviction() -> None:
    out = run_operator(Aggregate(SUM_N), rows(1, 2, 3, 4, 5), window="sliding, delta(v, 2), count(1)")
    assert out.items == [{"s": 9, "n": 3}, W, {"s": 12, "n": 3}, W, F]


def test_a_delta_trigger_fires_before_the_arriving_tuple_is_inserted() -> None:
    out = run_operator(Aggregate(SUM_N), rows(1, 2, 3, 4, 7), window="sliding, count(3), delta(v, 2)")
    assert out.items == [{"s": 6, "n": 3}, W, {"s": 9, "n": 3}, W, F]  # windows before 4, before 7


def test_an_evicted_partition_must_be_full_again_before_it_outputs() -> None:
    data = [("a", 1), ("a", 2), ("b", 1), ("a", 3), ("a", 4)]
    out = run_operator(Aggregate(SUM_N, copy=("k",)), [{"k": k, "v": v} for k, v in data],
                       window="sliding, count(2), count(1), partitioned, partitionCount(1)",
                       partition_by="k")
    assert out.items == [{"k": "a", "s": 3, "n": 2}, W, {"k": "a", "s": 7, "n": 2}, W, F]


@pytest.mark.parametrize("incremental", [True, False])
def test_count_all_counts_every_partition_of_a_sliding_window(incremental: bool) -> None:
    data = [("a", 1), ("b", 1), ("a", 2), ("b", 2)]
    out = run_operator(Aggregate({"n": Count(), "all": CountAll()}, copy=("k",), incremental=incremental),
                       [{"k": k, "v": v} for k, v in data],
                       window="sliding, count(2), count(1), partitioned", partition_by="k")
    assert out.items == [{"k": "a", "n": 2, "all": 3}, W, {"k": "b", "n": 2, "all": 4}, W, F]


@pytest.mark.parametrize("incremental", [True, False])
def test_groups_come_in_the_order_of_their_oldest_tuple_in_the_window(incremental: bool) -> None:
    data = [("x", 1), ("y", 2), ("x", 3), ("y", 4), ("z", 5)]
    out = run_operator(Aggregate({"s": Sum("v"), "sizes": CountByGroup(), "groups": CountGroups()},
                                 group_by="g", incremental=incremental),
                       [{"g": g, "v": v} for g, v in data], window="sliding, count(4), count(5)")
    assert out.items == [{"g": "y", "s": 6, "sizes": [2, 1, 1], "groups": 3},
                         {"g": "x", "s": 3, "sizes": [2, 1, 1], "groups": 3},
                         {"g": "z", "s": 5, "sizes": [2, 1, 1], "groups": 3}, W, F]


def test_incoming_window_marks_are_dropped_and_final_does_not_flush_a_sliding_window() -> None:
    out = run_operator(Aggregate(SUM_N), [{"v": 1}, W, {"v": 2}, W], window="sliding, count(3), count(1)")
    assert out.items == [F]


def test_group_by_several_names_and_a_function() -> None:
    data = [{"a": 1, "b": "x", "v": 1}, {"a": 1, "b": "x", "v": 2}, {"a": 2, "b": "x", "v": 4}]
    out = run_operator(Aggregate({"s": Sum("v")}, group_by=("a", "b")), data, window="tumbling, count(3)")
    assert out.items == [{"a": 1, "b": "x", "s": 3}, {"a": 2, "b": "x", "s": 4}, W, F]
    out = run_operator(Aggregate({"s": Sum("v"), "a": Last("a")}, group_by=lambda t: t["v"] % 2), data,
                       window="sliding, count(3), count(3)")
    assert out.items == [{"s": 1, "a": 1}, {"s": 6, "a": 2}, W, F]  # odd group first: its tuple is oldest


def test_list_valued_group_keys_are_grouped_by_content() -> None:
    data = [{"g": [1, 2], "v": 1}, {"g": [3], "v": 2}, {"g": [1, 2], "v": 4}]
    out = run_operator(Aggregate({"s": Sum("v")}, group_by="g"), data, window="sliding, count(3), count(3)")
    assert out.items == [{"g": [1, 2], "s": 5}, {"g": [3], "s": 2}, W, F]


# ------------------------------------------------------------- timeInterval


def test_time_interval_outputs_per_pane_partition_trigger_and_late_partitions_need_initial_full() -> None:
    items = [{"k": "a", "v": 1, "ts": 101 * S}, {"k": "b", "v": 2, "ts": 102 * S}, Watermark(110 * S),
             {"k": "a", "v": 3, "ts": 105 * S}, Watermark(112 * S),  # late: re-triggers a
             {"k": "c", "v": 5, "ts": 106 * S}, Watermark(113 * S)]  # c is late in a complete pane
    op = Aggregate({"s": Sum("v"), "start": IntervalStart(), "end": IntervalEnd(), "i": PaneIndex(),
                    "t": PaneTimingOf()}, copy=("k",))
    out = run_operator(op, items, window="timeInterval, intervalDuration(10), discardAge(10), partitioned",
                       partition_by="k", event_time="ts")
    pane = {"start": 100 * S, "end": 110 * S}
    assert out.items == [
        {"k": "a", "s": 1, **pane, "i": 0, "t": PaneTiming.ON_COMPLETE}, W,
        {"k": "b", "s": 2, **pane, "i": 0, "t": PaneTiming.ON_COMPLETE}, W,
        {"k": "a", "s": 4, **pane, "i": 1, "t": PaneTiming.LATE}, W,
        F,  # closing the pane (and the maximum watermark before final) outputs nothing
    ]
    out = run_operator(Aggregate({"s": Sum("v")}, copy=("k",), aggregate_incomplete_windows=True), items,
                       window="timeInterval, intervalDuration(10), discardAge(10), partitioned",
                       partition_by="k", event_time="ts")
    assert {"k": "c", "s": 5} in out.items


# ---------------------------------------------------------------- functions

DATA = [
    {"g": "x", "v": 3, "f": 1.5, "s": "a", "l": [1, 2], "w": "p"},
    {"g": "y", "v": -1, "f": 2.5, "s": "b", "l": [3, 0], "w": "q"},
    {"g": "x", "v": 3, "f": -0.5, "s": "c", "l": [0, 5], "w": "r"},
    {"g": "x", "v": -2, "f": 0.25, "s": "a", "l": [2, 2], "w": "p"},
]

FUNCTIONS: dict[str, Any] = {
    "count": Count(), "count_all": CountAll(), "groups": CountGroups(), "by_group": CountByGroup(),
    "any": AnyOf("v"), "first": First("v"), "last": Last("v"),
    "collect": Collect("s"), "distinct": CollectDistinct("s"), "by_distinct": CountByDistinct("s"),
    "n_distinct": CountDistinct("s"),
    "sum": Sum("v"), "fsum": Sum("f"), "ssum": Sum("s"), "lsum": Sum("l"),
    "avg": Average("v"), "favg": Average("f"), "lavg": Average("l"),
    "min": Min("v"), "max": Max("v"), "smin": Min("s"), "smax": Max("s"), "lmin": Min("l"), "lmax": Max("l"),
    "min_count": MinCount("v"), "max_count": MaxCount("v"),
    "argmin": ArgMin("v", "w"), "argmax": ArgMax("v", "s"),
    "cargmin": CollectArgMin("v", "s"), "cargmax": CollectArgMax("v", "s"),
    "sd": SampleStdDev("v"), "psd": PopulationStdDev("v"),
    "custom": Custom(lambda: 0, lambda c, t: c + 2 * t["v"], lambda c: -c),
    "expr": lambda t: t["v"] * 10, "const": "k",
    "computed": Sum(lambda t: t["v"] * t["f"]),
}


def test_every_function_over_one_window() -> None:
    out = run_operator(Aggregate(FUNCTIONS), DATA, window="tumbling, count(4)")
    [row] = out.tuples
    assert out.items[1:] == [W, F]
    sd, psd = row.pop("sd"), row.pop("psd")
    assert row == {
        "count": 4, "count_all": 4, "groups": 1, "by_group": [4],
        "any": -2, "first": 3, "last": -2,
        "collect": ["a", "b", "c", "a"], "distinct": ["a", "b", "c"], "by_distinct": [2, 1, 1],
        "n_distinct": 3,
        "sum": 3, "fsum": 3.75, "ssum": "abca", "lsum": [6, 9],
        "avg": 0, "favg": 0.9375, "lavg": [1, 2],  # integer averages truncate: 3/4 -> 0, 9/4 -> 2
        "min": -2, "max": 3, "smin": "a", "smax": "c", "lmin": [0, 0], "lmax": [3, 5],
        "min_count": 2, "max_count": 1,  # IBM's swap: MinCount counts the maximum (3, twice)
        "argmin": "p", "argmax": "a",  # ties go to the oldest tuple: v=3 in rows 0 and 2
        "cargmin": ["a"], "cargmax": ["a", "c"],
        "custom": -6, "expr": -20, "const": "k", "computed": 4.5 + -2.5 + -1.5 + -0.5,
    }
    assert sd == pytest.approx(math.sqrt(20.75 / 3))
    assert psd == pytest.approx(math.sqrt(20.75 / 4))


def test_every_function_per_group() -> None:
    out = run_operator(Aggregate(FUNCTIONS, group_by="g"), DATA, window="tumbling, count(4)")
    x, y = out.tuples
    assert (x["g"], x["count"], x["count_all"], x["groups"], x["by_group"]) == ("x", 3, 4, 2, [3, 1])
    assert (y["g"], y["count"], y["count_all"], y["groups"], y["by_group"]) == ("y", 1, 4, 2, [3, 1])
    assert (x["sum"], x["avg"], x["min_count"], x["max_count"], x["argmax"]) == (4, 1, 2, 1, "a")
    assert (y["sd"], y["psd"], y["sum"], y["cargmax"]) == (0.0, 0.0, -1, ["b"])  # one value: 0
    assert (x["custom"], y["custom"]) == (-8, 2)  # Custom starts afresh for each group


@pytest.mark.parametrize(("values", "mean"), [
    ([-1, -2], -1), ([-7, 2], -2), ([7, -2], 2), ([1, 2], 1), ([5], 5), ([-3, -3, -4], -3),
    ([1.0, 2], 1.5), ([0.1, 0.2, 0.3], 0.2),
])
def test_average_of_integers_truncates_toward_zero(values: list[Any], mean: Any) -> None:
    out = run_operator(Aggregate({"a": Average("v")}), rows(*values),
                       window=f"tumbling, count({len(values)})")
    assert out.tuples == [{"a": mean}]
    assert type(out.tuples[0]["a"]) is type(mean)


def test_min_count_and_max_count_follow_ibms_swapped_code() -> None:
    out = run_operator(Aggregate({"minc": MinCount("v"), "maxc": MaxCount("v")}), rows(1, 1, 1, 5, 5),
                       window="tumbling, count(5)")
    assert out.tuples == [{"minc": 2, "maxc": 3}]  # 5 (the max) twice, 1 (the min) three times


def test_float_sums_are_exact_and_rounded_once() -> None:
    out = run_operator(Aggregate({"s": Sum("v"), "a": Average("v")}), rows(1e100, 1.0, -1e100),
                       window="sliding, count(3), count(1)")
    assert out.tuples == [{"s": 1.0, "a": 1 / 3}]
    out = run_operator(Aggregate({"s": Sum("v")}), rows(1e308, 1e308, math.inf, -math.inf),
                       window="tumbling, count(2)")
    assert out.tuples[0] == {"s": math.inf}
    assert math.isnan(out.tuples[1]["s"])


def test_list_functions_need_equal_lengths() -> None:
    with pytest.raises(JobError, match="Sum: list size mismatch: 1 elements where the first list has 2"):
        run_operator(Aggregate({"s": Sum("l")}), [{"l": [1, 2]}, {"l": [3]}], window="tumbling, count(2)")


def test_unassigned_attributes_of_a_schema_are_copied_with_last() -> None:
    schema = Schema(sym="rstring", avg="float64", n="int32")
    out = run_operator(Aggregate({"n": Count(), "avg": Average("p")}, copy=schema),
                       [{"sym": "a", "p": 1.0}, {"sym": "b", "p": 2.0}], window="tumbling, count(2)")
    assert out.tuples == [{"sym": "b", "avg": 1.5, "n": 2}]
    assert list(out.tuples[0]) == ["sym", "avg", "n"]


def test_functions_are_frozen_values() -> None:
    assert Sum("v") == Sum("v") and Sum("v") != Average("v") and Count() == Count()
    assert repr(ArgMax("v", "w")) == "ArgMax(value='v', arg='w')"
    with pytest.raises(AttributeError):
        Sum("v").value = "w"  # type: ignore[misc]


# ------------------------------------- incremental accumulators vs recompute

finite = st.one_of(st.integers(-10**6, 10**6),
                   st.floats(allow_nan=False, allow_infinity=False, min_value=-1e300, max_value=1e300),
                   st.sampled_from([0.0, -0.0, 0.1, 1e-300, 5e-324, 1e300]))
special = st.sampled_from([math.inf, -math.inf, math.nan])


def same(a: Any, b: Any) -> bool:
    """Equality that takes NaN as equal to NaN and tells -0.0 from 0.0 apart."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(st.one_of(st.tuples(st.just("add"), st.one_of(finite, special)),
                              st.tuples(st.just("remove"), st.none())), max_size=60),
       function=st.sampled_from([Sum("v"), Average("v"), Min("v"), Max("v")]))
def test_an_accumulator_always_equals_recomputing_its_window(ops: list[tuple[str, Any]],
                                                             function: Any) -> None:
    acc = function.accumulator()
    window: deque[dict[str, Any]] = deque()
    scope = Scope(0, 1, [], False)
    for op, value in ops:
        if op == "add":
            t = {"v": value}
            window.append(t)
            acc.add(t)
        elif window:
            acc.remove(window.popleft())
        if window and not acc.broken:
            assert same(acc.result(), function.compute(window, scope)), (list(window), acc.result())


CLAUSES = [
    "sliding, count({n}), count({m})", "sliding, count({n}), time({p})", "sliding, count({n}), delta(d, {d})",
    "sliding, time({t}), count({m})", "sliding, time({t}), time({p})", "sliding, time({t}), delta(d, {d})",
    "sliding, delta(d, {d}), count({m})", "sliding, delta(d, {d}), time({p})",
    "sliding, delta(d, {d}), delta(d, 1)",
]
PARTITION_EVICTIONS = ["", ", partitionCount(2)", ", tupleCount(6)", ", partitionAge(1.5)"]

reading = st.builds(lambda k, g, v, f, d: {"k": k, "g": g, "v": v, "f": f, "d": d},
                    st.sampled_from("abc"), st.sampled_from("xyz"), st.integers(-100, 100),
                    st.one_of(st.integers(-5, 5), st.floats(-1e6, 1e6),
                              st.sampled_from([1e300, -1e300, 0.1])),
                    st.integers(0, 6))
# each reading, then maybe a pause on the clock (seconds)
paced = st.tuples(reading, st.one_of(st.none(), st.none(), st.floats(0.05, 1.5)))


@settings(max_examples=150, deadline=None)
@given(clause=st.sampled_from(CLAUSES), n=st.integers(1, 5), m=st.integers(1, 3),
       t=st.sampled_from([0.5, 1, 2.5]), p=st.sampled_from([0.7, 1]), d=st.integers(0, 3),
       partitioned=st.booleans(), eviction=st.sampled_from(PARTITION_EVICTIONS),
       grouped=st.booleans(), flavor=st.sampled_from(["java", "cpp"]),
       incomplete=st.booleans(), raw=st.lists(paced, min_size=5, max_size=60))
def test_incremental_sliding_aggregation_equals_recomputing_every_trigger(
        clause: str, n: int, m: int, t: float, p: float, d: int, partitioned: bool, eviction: str,
        grouped: bool, flavor: str, incomplete: bool, raw: list[tuple[dict[str, Any], float | None]]
) -> None:
    window = clause.format(n=n, m=m, t=t, p=p, d=d)
    if partitioned:
        window += ", partitioned" + eviction
    items: list[Any] = []
    now = 0.0
    for tup, pause in raw:
        items.append(tup)
        if pause is not None:
            now += pause
            items.append(at(now))
    items.append(at(now + 3))
    output = {"sum": Sum("v"), "fsum": Sum("f"), "avg": Average("v"), "favg": Average("f"),
              "min": Min("v"), "max": Max("f"), "n": Count(), "all": CountAll(), "first": First("v"),
              "last": Last("f"), "collect": Collect("v"), "sizes": CountByGroup()}
    results = []
    ops = []
    for incremental in (True, False):
        op = Aggregate(output, group_by="g" if grouped else None, copy=("k",),
                       aggregate_incomplete_windows=incomplete, incremental=incremental)
        results.append(run_operator(op, items, window=window, flavor=flavor,
                                    partition_by="k" if partitioned else None).items)
        ops.append(op)
    assert same(results[0], results[1]), window
    out_of_order_delta = flavor == "cpp" and "delta(d" in window.split("),")[0]
    if not out_of_order_delta:
        assert ops[0]._resyncs == 0, "the incremental state lost track of the window"


def test_an_out_of_order_cpp_delta_eviction_resynchronises_from_the_window() -> None:
    # C++ evicts every tuple out of delta once arrivals went out of order, not only the oldest run
    data = [{"d": d, "v": v} for v, d in enumerate([5, 6, 2, 9, 10])]
    for incremental in (True, False):
        op = Aggregate({"s": Sum("v"), "c": Collect("v")}, incremental=incremental)
        out = run_operator(op, data, window="sliding, delta(d, 3), count(1)", flavor="cpp")
        assert out.items == [{"s": 4, "c": [1, 3]}, W, {"s": 7, "c": [3, 4]}, W, F]  # v2 left before v1
        assert op._resyncs == (1 if incremental else 0)


def test_list_values_in_a_sliding_window_are_summed_element_wise() -> None:
    out = run_operator(Aggregate({"s": Sum("l"), "a": Average("l"), "mx": Max("l")}),
                       rows([1, 2], [3, 8], [5, 6], key="l"), window="sliding, count(2), count(1)")
    assert out.tuples == [{"s": [4, 10], "a": [2, 5], "mx": [3, 8]},
                          {"s": [8, 14], "a": [4, 7], "mx": [5, 8]}]


def test_values_an_accumulator_cannot_keep_are_recomputed() -> None:
    out = run_operator(Aggregate({"s": Sum("v"), "mx": Max("v")}), rows(*"abcd"),
                       window="sliding, count(2), count(1)")
    assert out.tuples == [{"s": "ab", "mx": "b"}, {"s": "bc", "mx": "c"}, {"s": "cd", "mx": "d"}]
    out = run_operator(Aggregate({"mx": Max("v")}), rows(math.nan, 1.0, 2.0),
                       window="sliding, count(2), count(1)")
    assert math.isnan(out.tuples[0]["mx"])  # IBM's fold keeps a NaN that comes first
    assert out.tuples[1:] == [{"mx": 2.0}]


# ---------------------------------------------------------- snapshot/restore


class Readings(Source):
    """Ten readings every 0.1 s; its state is the offset of the next one."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.offset = 0

    async def run(self) -> None:
        ctx: Any = self.context
        while self.offset < self.n:
            i = self.offset
            await ctx.sleep_until((i // 10 + 1) * S // 10)
            self.submit({"sensor": i % 3, "parity": i % 2, "value": (i * 7) % 11 - 5, "f": i * 0.25})
            self.offset += 1

    def snapshot(self) -> Any:
        return self.offset

    def restore(self, state: Any) -> None:
        self.offset = state


class Output(Operator):
    """A sink whose state is what it received, so a restored run can be compared whole."""

    def __init__(self) -> None:
        self.rows: list[Any] = []

    def on_tuple(self, tup: Any, port: int) -> None:
        self.rows.append(tup)

    def on_punct(self, punct: Punct, port: int) -> None:
        self.rows.append(punct.value)

    def snapshot(self) -> Any:
        return list(self.rows)

    def restore(self, state: Any) -> None:
        self.rows = list(state)


def build(n: int, window: str, out: Output, flavor: str = "java") -> Graph:
    g = Graph("agg")
    src = g.source("readings", Readings(n))
    agg = g.operator("agg", Aggregate({"sum": Sum("value"), "avg": Average("f"), "max": Max("value"),
                                       "n": Count(), "all": CountAll()},
                                      group_by="parity", copy=("sensor",)),
                     [src.window(window, partition_by="sensor", flavor=flavor)])
    g.sink("out", out, [agg])
    return g




@settings(max_examples=40, deadline=None)
@given(crash=st.integers(min_value=2, max_value=45),
       setup=st.sampled_from([("sliding, count(4), count(2), partitioned", "java"),
                              ("sliding, time(0.75), time(0.5), partitioned", "java"),
                              ("sliding, time(0.75), time(0.5), partitioned", "cpp"),
                              ("sliding, time(0.3), count(2), partitioned, tupleCount(25)", "java"),
                              ("sliding, count(5), time(0.3), partitioned, partitionAge(0.2)", "cpp"),
                              ("sliding, delta(value, 4), count(1), partitioned", "cpp")]))
def test_a_crash_then_restart_from_a_checkpoint_gives_the_uninterrupted_output(
        crash: int, setup: tuple[str, str]) -> None:
    n = 450
    window, flavor = setup
    reference = Output()
    # The uninterrupted run takes the same checkpoints: a C++ time window stands still from
    # each checkpoint to its next tuple (C14), so its output is the checkpointed job's, crash or
    # not (not a job's without checkpoints, which it equalled only while every checkpoint came
    # with a tuple; a source waiting for the clock sends its barrier at once now).
    assert run_until_crash(Job(build(n, window, reference, flavor), clock=VirtualClock(),
                               checkpoints=MemoryStore(), checkpoint_period=0.35), None)
    assert len(reference.rows) > 50
    store = MemoryStore()
    first = Output()
    if run_until_crash(Job(build(n, window, first, flavor), clock=VirtualClock(), checkpoints=store,
                     checkpoint_period=0.35), crash * S // 10):
        assert first.rows == reference.rows
        return
    latest = store.latest_good()
    second = Output()
    # The restarted job's clock starts where the checkpoint was taken: time windows continue as if
    # nothing happened (a later restart would follow IBM's reset rules and differ, rightly).
    start = latest.time_ns if latest is not None else 0
    restarted = Job(build(n, window, second, flavor), clock=VirtualClock(start), checkpoints=store,
                    checkpoint_period=0.35)
    assert run_until_crash(restarted, None)
    assert second.rows == reference.rows, f"crash at {crash / 10} s, restored from {restarted.restored_from}"


def test_snapshot_is_plain_data_and_restore_refuses_a_foreign_state() -> None:
    op = Aggregate(SUM_N)
    run_operator(op, [{"k": ("a", 1), "v": 1}, {"k": ("a", 1), "v": 2}],
                 window="sliding, count(2), count(1), partitioned", partition_by="k")
    state = op.snapshot()
    assert state == {"format": "riverbed.aggregate/1", "full": [["a", 1]], "total": 2}
    fresh = Aggregate(SUM_N)
    fresh.restore(state)
    assert fresh._full == {("a", 1)} and fresh._total == 2
    for bad, why in [(None, "NoneType"), ({"format": "other"}, "format 'other'"),
                     ({"format": "riverbed.aggregate/1", "full": [], "total": -1}, "not a tuple count")]:
        with pytest.raises(ValueError, match=f"Aggregate: cannot restore .*{why}"):
            fresh.restore(bad)
    fresh.reset_to_initial_state()
    assert fresh.snapshot() == {"format": "riverbed.aggregate/1", "full": [], "total": 0}


@pytest.mark.parametrize("flavor", ["java", "cpp"])
def test_an_unpartitioned_sliding_count_window_checkpoints_and_restores(flavor: str) -> None:
    # Its snapshot asked the window for partitions(): the first checkpoint failed the job.
    def graph(out: Output) -> Graph:
        g = Graph("agg")
        src = g.source("readings", Readings(300))
        agg = g.operator("agg", Aggregate({"n": Count(), "sum": Sum("value")}),
                         [src.window("sliding, count(6), count(3)", flavor=flavor)])
        g.sink("out", out, [agg])
        return g

    reference = Output()
    assert run_until_crash(Job(graph(reference), clock=VirtualClock()), None)
    store, first = MemoryStore(), Output()
    assert not run_until_crash(Job(graph(first), clock=VirtualClock(), checkpoints=store,
                                   checkpoint_period=0.35), 2 * S)
    latest = store.latest_good()
    assert latest is not None
    second = Output()
    assert run_until_crash(Job(graph(second), clock=VirtualClock(latest.time_ns), checkpoints=store,
                               checkpoint_period=0.35), None)
    assert second.rows == reference.rows


def test_a_declared_output_attribute_left_out_of_the_clause_is_the_groups_last_value() -> None:
    """SPL: an output attribute the clause does not assign takes the input attribute of its
    name (the group's last tuple)."""
    g = Graph("auto-assign")
    s = g.source("s", ListSource([{"sym": "A", "p": 1.0, "q": 1}, {"sym": "A", "p": 2.0, "q": 2}]),
                 schema=Schema(sym="rstring", p="float64", q="int64"))
    out = g.operator("a", Aggregate({"avg": Average("p")}), [s.window("tumbling, count(2)")],
                     [Schema(sym="rstring", avg="float64", q="int64")])
    sink = ListSink()
    g.sink("k", sink, [out])
    run_graph(g, clock=VirtualClock())
    assert sink.tuples == [{"avg": 1.5, "sym": "A", "q": 2}]
    g = Graph("auto-assign-missing")
    s = g.source("s", ListSource([]), schema=Schema(sym="rstring", p="float64"))
    g.operator("a", Aggregate({"avg": Average("p")}), [s.window("tumbling, count(2)")],
               [Schema(sym="rstring", avg="float64", site="rstring")])
    with pytest.raises(GraphValidationError, match=r"output 'site' = Last\(value='site'\) reads "
                                                   r"attribute 'site', which the input schema"):
        g.freeze()
