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

from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.operators._aggregate_math import Numbers, average_values, float_mean, float_sum, sum_values

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
