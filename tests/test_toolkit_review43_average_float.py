"""Review 43, finding 1: Average of an attribute declared float, whose values came as ints.

The schema check accepts an int for float32/float64, and Average applied SPL's integer rule
to ints (1 and 2 averaged to 1; a sliding window gave 1, 2.0 or 1.5 by the mix it held).
SPL's ``Average(float64)`` is a float64: with a declared float input every path (tumbling,
sliding incremental, the runs of a full count window, recompute, the reference loop) must
give the exact mean rounded once. Undeclared, the values' own types still decide.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from riverbed.graph import Schema
from riverbed.operators import Aggregate, Average, PopulationStdDev, SampleStdDev, Sum
from riverbed.testing import run_operator

SCHEMA = Schema(sym="rstring", price="float64")


def _rows(values: list[Any]) -> list[dict[str, Any]]:
    return [{"sym": "a", "price": v} for v in values]


@pytest.mark.parametrize("window", ["tumbling, count(2)", "sliding, count(2), count(1)"])
@pytest.mark.parametrize("incremental", [True, False])
@pytest.mark.parametrize("with_sum", [True, False])
def test_average_of_declared_float_ints_is_a_float(window: str, incremental: bool,
                                                    with_sum: bool) -> None:
    output: dict[str, Any] = {"avg": Average("price")}
    if with_sum:  # (Sum and Average of one attribute share their total)
        output["sum"] = Sum("price")
    out = run_operator(Aggregate(output, incremental=incremental), _rows([1, 2]), window=window,
                       schema=SCHEMA)
    assert [r["avg"] for r in out.tuples] == [1.5]
    assert type(out.tuples[0]["avg"]) is float


def test_sliding_average_does_not_depend_on_the_mix_of_ints_and_floats() -> None:
    out = run_operator(Aggregate({"avg": Average("price")}), _rows([1, 2, 2.0, 1]),
                       window="sliding, count(2), count(1)", schema=SCHEMA)
    assert [r["avg"] for r in out.tuples] == [1.5, 2.0, 1.5]


@pytest.mark.parametrize("reference", [False, True])
def test_a_full_sliding_count_window_of_ints_in_runs_and_one_at_a_time(reference: bool) -> None:
    """A long stream of ints through `sliding, count(3), count(1)`: the runs' int path and the
    reference column loop both give the exact mean rounded once."""
    values = [(i * 7919) % 23 - 11 for i in range(200)]
    op = Aggregate({"avg": Average("price"), "sum": Sum("price")})
    op._reference = reference
    out = run_operator(op, _rows(values), window="sliding, count(3), count(1)", schema=SCHEMA)
    assert (op._runs is None) == reference  # (the runs took the batch where they could)
    expected = [float(Fraction(sum(values[i - 2:i + 1]), 3)) for i in range(2, len(values))]
    assert [r["avg"] for r in out.tuples] == expected
    assert [r["sum"] for r in out.tuples] == [sum(values[i - 2:i + 1]) for i in range(2, len(values))]


def test_grouped_and_partitioned_declared_float_average() -> None:
    rows = [{"sym": s, "price": v} for s, v in [("a", 1), ("b", 4), ("a", 2), ("b", 7)]]
    out = run_operator(Aggregate({"avg": Average("price")}, group_by="sym"),
                       rows, window="tumbling, count(4)", schema=SCHEMA)
    assert [r["avg"] for r in out.tuples] == [1.5, 5.5]


def test_undeclared_ints_keep_spl_integer_average() -> None:
    """Without a declared schema the values' types decide: ints give SPL's integer Average."""
    out = run_operator(Aggregate({"avg": Average("price")}), _rows([1, 2]),
                       window="tumbling, count(2)")
    assert out.tuples == [{"avg": 1}]


def test_declared_integral_input_keeps_spl_integer_average() -> None:
    out = run_operator(Aggregate({"avg": Average("n")}), [{"n": 1}, {"n": 2}],
                       window="sliding, count(2), count(1)", schema=Schema(n="int64"))
    assert out.tuples == [{"avg": 1}]


def test_standard_deviations_of_declared_float_ints_are_floats() -> None:
    """The standard deviations already work in float: ints and their float equals agree."""
    as_ints = run_operator(Aggregate({"s": SampleStdDev("price"), "p": PopulationStdDev("price")}),
                           _rows([1, 2, 4]), window="tumbling, count(3)", schema=SCHEMA)
    as_floats = run_operator(Aggregate({"s": SampleStdDev("price"), "p": PopulationStdDev("price")}),
                             _rows([1.0, 2.0, 4.0]), window="tumbling, count(3)", schema=SCHEMA)
    assert as_ints.tuples == as_floats.tuples


def test_the_error_message_still_names_average() -> None:
    """The float variant put in at setup keeps the user's ``Average(value=...)`` in messages."""
    from riverbed.operators._aggregate_functions import FloatAverage

    assert repr(FloatAverage("price")) == repr(Average("price"))


def test_an_average_of_a_declared_float_into_an_integer_output_is_refused_at_build() -> None:
    """The other way round from `_truncated_averages`' case: a float64 average (1.5) into an
    int64 output failed when the window first fired; whole-number values once passed as ints."""
    from riverbed.graph import Graph, InvalidGraphError
    from riverbed.testing import ListSink, ListSource

    g = Graph("a")
    src = g.source("src", ListSource([{"p": 1}, {"p": 2}]), schema=Schema(p="float64"))
    agg = g.operator("agg", Aggregate({"avg": Average("p")}), [src.window("tumbling, count(2)")],
                     [Schema(avg="int64")])
    g.sink("out", ListSink(), [agg])
    with pytest.raises(InvalidGraphError, match=r"'avg' is int64: declare 'avg' float64"):
        g.freeze()


def test_the_float_average_of_ints_is_their_exact_sum_divided_once() -> None:
    from riverbed.operators._aggregate_math import float_average_values

    big = [2**60 + 1, 2**60 + 3, 7]
    assert float_average_values(big) == float(Fraction(sum(big), 3))
    assert float_average_values([1, 2]) == 1.5 and type(float_average_values([4, 4])) is float
    assert float_average_values([1, 2.5]) == 1.75  # mixed: the general path
