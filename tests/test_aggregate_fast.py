"""Aggregate's fast paths against their references: same results, bit for bit.

The exact sums have a fast form (`float_sum`, `float_mean`, the 2**80-scaled
accumulator) and a reference (`Numbers`, and `fractions.Fraction` here);
the operator has a compiled row builder and direct window listeners, and a
reference emitter (``Aggregate._reference = True``) that runs the generic
per-column loop. Each property test feeds both the same random input.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.operators._aggregate_math import (
    Numbers,
    SumAccumulator,
    average_values,
    float_mean,
    float_sum,
    sum_values,
)

floats = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6),
    st.sampled_from([0.0, -0.0, 0.1, 1e-300, 5e-324, -5e-324, 1e300, 1.7976931348623157e308,
                     2.0 ** -40, 3.0 * 2.0 ** -60]))


def same(a: Any, b: Any) -> bool:
    """Equality that takes NaN as equal to NaN and tells -0.0 from 0.0 and int from float apart."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    return type(a) is type(b) and a == b


def exact_float(q: Fraction) -> float:
    """``q`` rounded once to a float (beyond the range: an infinity), +0.0 for zero."""
    try:
        return q.numerator / q.denominator
    except OverflowError:
        return math.inf if q > 0 else -math.inf


def reference(values: list[Any]) -> Numbers:
    acc = Numbers()
    for v in values:
        acc.take(v, 1)
    return acc


@settings(max_examples=400, deadline=None)
@given(values=st.lists(floats, min_size=1, max_size=40))
def test_float_sum_and_mean_are_the_exact_values_rounded_once(values: list[float]) -> None:
    exact = sum(map(Fraction, values), Fraction(0))
    total, mean = float_sum(values), float_mean(values)
    if total is not None:
        assert same(total, exact_float(exact))
    if mean is not None:
        assert same(mean, exact_float(exact / len(values)))
    assert same(sum_values(values, "Sum"), exact_float(exact))
    assert same(average_values(values), exact_float(exact / len(values)))
    assert same(sum_values(values, "Sum"), reference(values).total())
    assert same(average_values(values), reference(values).mean())


@pytest.mark.parametrize("values", [
    [42.759, 31.415, 58.556, 45.318, 29.977, 79.438],  # fsum / n is a unit off: corrected
    [21.47, 8.595, 41.817, 24.066, 55.105, 5.911],  # the corrected quotient still in doubt
    [0.1] * 3, [1.0, 2.0 ** -52, 2.0 ** -53], [-(2.0 ** 10) + 2.0 ** -40, -(2.0 ** -45)],
])
def test_a_mean_fsum_over_n_misses_is_still_the_exact_mean_rounded_once(values: list[float]) -> None:
    exact = sum(map(Fraction, values), Fraction(0)) / len(values)
    assert same(float_mean(values), exact_float(exact))  # type: ignore[arg-type]
    assert same(average_values(values), exact_float(exact))


def test_float_sum_shortcuts_give_way_where_they_cannot_vouch_for_the_result() -> None:
    assert float_sum([1e308, 1e308, -1e308]) is None  # fsum's intermediate overflow
    assert sum_values([1e308, 1e308, -1e308], "Sum") == 1e308
    assert float_sum([math.inf, 1.0]) is None and sum_values([math.inf, 1.0], "Sum") == math.inf
    assert float_mean([1e300, 1.0, 1e-300]) is None  # the exact sum needs more than two floats
    assert average_values([1e300, 1.0, 1e-300]) == exact_float(
        (Fraction(1e300) + 1 + Fraction(1e-300)) / 3)
    assert same(sum_values([-0.0, -0.0], "Sum"), 0.0) and same(average_values([-0.0]), 0.0)


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.one_of(floats, st.integers(-2**70, 2**70), st.booleans(),
                                 st.sampled_from([math.inf, -math.inf, math.nan])),
                       min_size=1, max_size=30))
def test_sums_of_mixed_values_equal_the_per_value_reference(values: list[Any]) -> None:
    assert same(sum_values(values, "Sum"), reference(values).total())
    assert same(average_values(values), reference(values).mean())


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.one_of(floats, st.integers(-2**70, 2**70),
                                 st.sampled_from([math.inf, -math.inf, math.nan, 2.0 ** 1000])),
                       min_size=2, max_size=30), width=st.integers(1, 5))
def test_a_sliding_sum_replaced_in_one_step_equals_remove_then_add(values: list[Any],
                                                                   width: int) -> None:
    """`SumAccumulator.replace` (a full window's step) keeps the same exact state as
    `remove` then `add`, whatever the values."""
    one, two = SumAccumulator(lambda v: v), SumAccumulator(lambda v: v)
    for v in values[:width]:
        one.add(v)
        two.add(v)
    for i in range(width, len(values)):
        one.replace(values[i - width], values[i])
        two.remove(values[i - width])
        two.add(values[i])
        assert same(one.total(), two.total()) and same(one.mean(), two.mean())
        assert same(one.total(), reference(values[i - width + 1:i + 1]).total())


# ------------------------------------------ the compiled operator vs its reference

from riverbed.graph import Punct, Watermark  # noqa: E402
from riverbed.operators._aggregate import Aggregate  # noqa: E402
from riverbed.operators._aggregate_functions import (  # noqa: E402
    Any as AnyOf,
)
from riverbed.operators._aggregate_functions import (  # noqa: E402
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
    Sum,
)
from riverbed.testing import at, run_operator  # noqa: E402
from riverbed.windows import EventType, StreamWindow, TimeIntervalWindow  # noqa: E402

S = 1_000_000_000


class Scaled(Sum):
    """A user's subclass of an SPL function: compiled code must call its own compute."""

    __slots__ = ()

    def compute(self, tuples: Any, scope: Any) -> Any:
        return 2 * len(tuples) + scope.count_all


FUNCTIONS: dict[str, Any] = {
    "count": Count(), "count_all": CountAll(), "groups": CountGroups(), "by_group": CountByGroup(),
    "any": AnyOf("v"), "first": First("v"), "last": Last("f"), "first_fn": First(lambda t: t["v"] - 1),
    "collect": Collect("s"), "distinct": CollectDistinct("s"), "by_distinct": CountByDistinct("s"),
    "n_distinct": CountDistinct("f"), "sum": Sum("v"), "fsum": Sum("f"), "ssum": Sum("s"),
    "avg": Average("v"), "favg": Average("f"), "min": Min("v"), "max": Max("f"), "smin": Min("s"),
    "smax": Max("s"), "fmin": Min("f"), "min_count": MinCount("v"), "max_count": MaxCount("f"),
    "argmin": ArgMin("v", "s"), "argmax": ArgMax("f", "s"), "cargmin": CollectArgMin("v", "s"),
    "cargmax": CollectArgMax("f", "s"), "psd": PopulationStdDev("v"), "sd": SampleStdDev("v"),
    "custom": Custom(lambda: 0, lambda c, t: c + t["v"], lambda c: c),
    "expr": lambda t: t["v"] * 10, "const": "k", "computed": Sum(lambda t: t["v"] * 2),
    "computed_avg": Average(lambda t: t["f"] / 2), "scaled": Scaled("v"),
}

row = st.builds(lambda k, g, v, f, s, d: {"k": k, "g": g, "v": v, "f": f, "s": s, "d": d},
                st.sampled_from("ab"), st.sampled_from("xyz"), st.integers(-50, 50),
                st.one_of(st.floats(-1e6, 1e6), st.integers(-3, 3),
                          st.sampled_from([0.1, 1e300, -1e300, math.inf, math.nan, 2.0 ** -60])),
                st.sampled_from(["p", "q", "r"]), st.integers(0, 6))
STREAM_CLAUSES = ["tumbling, count(3)", "tumbling, delta(d, 2)", "tumbling, time(1)", "tumbling, punct()",
                  "sliding, count(3), count(1)", "sliding, count(4), count(2)", "sliding, time(2), count(1)",
                  "sliding, delta(d, 2), count(1)", "sliding, count(3), time(1)",
                  "sliding, time(2), time(1)", "sliding, time(1), time(2)",
                  "tumbling, count(2), partitioned, tupleCount(4)",
                  "sliding, count(3), count(1), partitioned, partitionCount(1)"]


def outputs(op_args: dict[str, Any], reference: bool, items: list[Any], **run: Any) -> list[Any]:
    op = Aggregate(**op_args)
    op._reference = reference
    return run_operator(op, items, **run).items


def same_items(a: list[Any], b: list[Any]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if isinstance(x, dict) and isinstance(y, dict):
            if x.keys() != y.keys() or list(x) != list(y):
                return False
            if not all(same_value(x[k], y[k]) for k in x):
                return False
        elif x != y:
            return False
    return True


def same_value(a: Any, b: Any) -> bool:
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    return same(a, b)


@settings(max_examples=120, deadline=None)
@given(clause=st.sampled_from(STREAM_CLAUSES), data=st.lists(row, min_size=1, max_size=25),
       grouped=st.booleans(), partitioned=st.booleans(), incremental=st.booleans(),
       flavor=st.sampled_from(["java", "cpp"]), marks=st.sets(st.integers(0, 25)),
       names=st.sets(st.sampled_from(sorted(FUNCTIONS)), min_size=1, max_size=8))
def test_compiled_rows_equal_the_reference_loop_in_every_stream_window(
        clause: str, data: list[dict[str, Any]], grouped: bool, partitioned: bool, incremental: bool,
        flavor: str, marks: set[int], names: set[str]) -> None:
    if partitioned and "partitioned" not in clause:
        clause += ", partitioned"
    items: list[Any] = []
    for i, tup in enumerate(data):
        items.append(tup)
        if i in marks:  # the clock moves, or a window mark (what a punct() window flushes on)
            items.append(at(0.4 * (i + 1)) if i % 2 else Punct.WINDOW)
    args: dict[str, Any] = {"output": {n: FUNCTIONS[n] for n in sorted(names)},
                            "group_by": "g" if grouped else None, "copy": ("k",),
                            "incremental": incremental}
    if clause.startswith("sliding"):
        args["aggregate_incomplete_windows"] = bool(marks)
    run = {"window": clause, "flavor": flavor, "partition_by": "k" if "partitioned" in clause else None}
    fast, ref = outputs(args, False, items, **run), outputs(args, True, items, **run)
    assert same_items(fast, ref), (fast, ref)


@settings(max_examples=60, deadline=None)
@given(data=st.lists(st.tuples(row, st.integers(0, 30)), min_size=1, max_size=25),
       grouped=st.booleans(), incomplete=st.booleans(),
       names=st.sets(st.sampled_from(sorted(FUNCTIONS)), min_size=1, max_size=6))
def test_compiled_rows_equal_the_reference_loop_in_a_time_interval_window(
        data: list[tuple[dict[str, Any], int]], grouped: bool, incomplete: bool, names: set[str]) -> None:
    output = {n: FUNCTIONS[n] for n in sorted(names)}
    output.update({"start": IntervalStart(), "end": IntervalEnd(), "i": PaneIndex(), "t": PaneTimingOf()})
    items: list[Any] = []
    for i, (tup, ts) in enumerate(data):
        items.append({**tup, "ts": 100 * S + ts * S // 2})
        if i % 4 == 3:
            items.append(Watermark(100 * S + i * S))
    args = {"output": output, "group_by": "g" if grouped else None, "copy": ("k",),
            "aggregate_incomplete_windows": incomplete}
    run = {"window": "timeInterval, intervalDuration(4), creationPeriod(2), discardAge(3), partitioned",
           "partition_by": "k", "event_time": "ts"}
    fast, ref = outputs(args, False, items, **run), outputs(args, True, items, **run)
    assert same_items(fast, ref), (fast, ref)


def test_aggregate_asks_a_window_for_insertions_only_where_it_keeps_state(
        monkeypatch: Any) -> None:
    """A tumbling or timeInterval Aggregate, or a sliding one that recomputes without CountAll,
    hears no INSERTION (the window then takes its eventless insert path); an incremental one
    hears them directly, not through the host's generic dispatch, unless a count trigger lets
    each trigger work out what entered and left (then it hears no INSERTION or EVICTION)."""
    asked: list[set[str]] = []
    for cls in (StreamWindow, TimeIntervalWindow):
        original = cls.register_listener

        def spy(self: Any, listener: Any, types: Any = None, original: Any = original) -> None:
            asked.append({t.name for t in (EventType if types is None else types)})
            original(self, listener, types)

        monkeypatch.setattr(cls, "register_listener", spy)

    def heard(**run: Any) -> set[str]:
        asked.clear()
        op = Aggregate({"s": Sum("v")}, incremental=run.pop("incremental", True))
        run_operator(op, [{"v": 1, "ts": 100 * S}], **run)
        return set().union(*asked)

    assert "INSERTION" not in heard(window="tumbling, count(2)")
    assert "INSERTION" not in heard(window="sliding, count(2), count(1)", incremental=False)
    panes = heard(window="timeInterval, intervalDuration(10)", event_time="ts")
    assert panes == {"TRIGGER"}  # a pane's trigger says it completed: no INITIAL_FULL either
    counted = heard(window="sliding, count(2), count(1)")
    assert "INSERTION" not in counted and "EVICTION" not in counted and "TRIGGER" in counted
    for clause in ("sliding, time(2), time(1)", "sliding, count(2), time(1)"):
        timed = heard(window=clause)  # each trigger catches up by the window's evicted_count
        assert "INSERTION" not in timed and "EVICTION" not in timed and "TRIGGER" in timed
    assert "INSERTION" in heard(window="sliding, delta(v, 2), count(1)")


@settings(max_examples=80, deadline=None)
@given(picks=st.lists(st.integers(0, 3), min_size=1, max_size=30),
       values=st.lists(st.one_of(st.integers(-9, 9), st.floats(-1e3, 1e3)), min_size=4, max_size=4),
       clause=st.sampled_from(["sliding, count(3), count(1)", "sliding, count(2), count(3)",
                               "sliding, count(4), count(2)", "sliding, time(2), count(2)",
                               "sliding, count(3), count(1), partitioned",
                               "sliding, time(2), time(1)", "sliding, time(3), time(1), partitioned"]),
       flavor=st.sampled_from(["java", "cpp"]), ticks=st.sets(st.integers(0, 30)))
def test_a_count_triggered_aggregate_follows_the_window_when_one_tuple_object_arrives_many_times(
        picks: list[int], values: list[Any], clause: str, flavor: str, ticks: set[int]) -> None:
    """The event-free sliding path (FIFO eviction) infers what entered and left from the
    window's eviction count: the same tuple object arriving again and again, more arrivals per
    trigger than the window holds, and time eviction between triggers leave it equal to the
    event-driven reference."""
    pool = [{"k": "ab"[i % 2], "v": v} for i, v in enumerate(values)]
    items: list[Any] = []
    for i, p in enumerate(picks):
        items.append(pool[p])
        if i in ticks:
            items.append(at(0.7 * (i + 1)))
    args: dict[str, Any] = {"output": {"s": Sum("v"), "avg": Average("v"), "n": Count(),
                                       "lo": Min("v"), "hi": Max("v")},
                            "copy": ("k",), "aggregate_incomplete_windows": True}
    run = {"window": clause, "flavor": flavor,
           "partition_by": "k" if "partitioned" in clause else None}
    fast, ref = outputs(args, False, items, **run), outputs(args, True, items, **run)
    assert same_items(fast, ref), (fast, ref)


@pytest.mark.parametrize("incomplete", [False, True])
def test_late_data_for_a_partition_a_completed_pane_never_held_is_output_as_before(
        incomplete: bool) -> None:
    """Without INITIAL_FULL events, a pane's ON_COMPLETE trigger records its partitions as full:
    late data for a partition the pane did not hold when it completed is output only with
    aggregate_incomplete_windows, as with the events, while late data for one it held is."""
    items: list[Any] = [{"k": "a", "v": 1, "ts": 1 * S}, Watermark(12 * S),
                        {"k": "b", "v": 2, "ts": 8 * S}, {"k": "a", "v": 3, "ts": 9 * S},
                        Watermark(13 * S)]
    args = {"output": {"s": Sum("v"), "t": PaneTimingOf()}, "copy": ("k",),
            "aggregate_incomplete_windows": incomplete}
    run = {"window": "timeInterval, intervalDuration(10), discardAge(5), partitioned",
           "partition_by": "k", "event_time": "ts"}
    fast, ref = outputs(args, False, items, **run), outputs(args, True, items, **run)
    assert same_items(fast, ref), (fast, ref)
    rows = [(x["k"], x["s"]) for x in fast if isinstance(x, dict)]
    assert rows == ([("a", 1), ("b", 2), ("a", 4)] if incomplete else [("a", 1), ("a", 4)])


@settings(max_examples=100, deadline=None)
@given(steps=st.lists(st.tuples(st.sampled_from([0, 0, 0.3, 0.5, 1.0, 2.5]), st.integers(0, 2),
                                st.one_of(st.integers(-9, 9), st.floats(-1e3, 1e3),
                                          st.sampled_from([0.5, 1e300, math.inf]))),
                      min_size=1, max_size=60),
       clause=st.sampled_from(["sliding, time(3), time(1)", "sliding, time(2), time(1), partitioned",
                               "sliding, time(1), time(1)", "sliding, count(3), time(1)",
                               "sliding, count(1), time(2), partitioned", "sliding, count(3), count(2)",
                               "sliding, time(2), count(2), partitioned", "sliding, count(2), count(1)"]),
       flavor=st.sampled_from(["java", "cpp"]), grouped=st.booleans(), incomplete=st.booleans())
def test_a_fifo_aggregate_catches_up_at_each_trigger_as_events_would_have_it(
        steps: list[tuple[float, int, Any]], clause: str, flavor: str, grouped: bool,
        incomplete: bool) -> None:
    """Count or time eviction and a count or time trigger: the Aggregate hears only TRIGGER and
    catches up from the window's `evicted_count` (one in and one out, many in, many out, all out, a C++
    partition dropped and made again); its rows equal the event-driven reference's."""
    items: list[Any] = []
    now = 0.0
    for i, (gap, k, v) in enumerate(steps):
        if gap:
            now += gap
            items.append(at(now))
        items.append({"k": "abc"[k], "g": "xy"[i % 2], "v": v, "i": i})
    args: dict[str, Any] = {"output": {"s": Sum("v"), "avg": Average("v"), "n": Count(),
                                       "lo": Min("v"), "hi": Max("v"), "last": Last("i")},
                            "copy": ("k",), "group_by": "g" if grouped else None,
                            "aggregate_incomplete_windows": incomplete}
    items.append(at(now + 5))
    run = {"window": clause, "flavor": flavor,
           "partition_by": "k" if "partitioned" in clause else None}
    op = Aggregate(**args)
    fast, ref = run_operator(op, items, **run).items, outputs(args, True, items, **run)
    assert same_items(fast, ref), (fast, ref)
    assert op._resyncs == 0  # caught up at every trigger: the count never sent it back to the window
