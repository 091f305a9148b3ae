"""W1's path (issue 18): a partitioned tumbling count window heard by an Aggregate of Sum and
Average. The window's batch loop raises nothing per tuple and reads an attribute key by
subscript; the Aggregate takes one type check and two fsum passes for both columns. Each is
compared with its reference (the generic window path, the reference column loop, exact
fractions) on random input, including what must leave the fast paths."""

from __future__ import annotations

import linecache
import math
from fractions import Fraction
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from riverbed.operators import Aggregate, Average, Last, Sum, _aggregate_math
from riverbed.operators._aggregate_math import float_total, float_total_mean
from riverbed.testing import run_operator
from riverbed.windows import EventType, StreamWindow
from tests.test_aggregate_fast import exact_float, same, same_items

# ------------------------------------------------------------------------- the window


def _compiled_source(w: StreamWindow[Any]) -> str:
    code = w.inserter().__code__
    return "".join(linecache.cache[code.co_filename][2])


def test_a_keyed_tumbling_count_window_heard_without_insertions_checks_nothing_per_tuple() -> None:
    w: StreamWindow[Any] = StreamWindow("tumbling, count(3), partitioned", partition_by="k")
    w.register_listener(lambda e: None, [EventType.EVICTION])
    w.activate(0)
    source = _compiled_source(w)
    assert "parts[t[key_attr]]" in source  # no key function call, no dict.get call
    loop = source.split("if listeners and not inserted:")[1].split("elif listeners or inserted:")[0]
    assert "live[0]" not in loop.split("try:")[0]  # not checked before each tuple...
    after_flush = loop.split("flush(part)")[1].strip().splitlines()[0]
    assert after_flush.startswith("if not live[0]")  # ...but after each call reaching a listener
    assert "Event(" not in loop  # no INSERTION event
    by_function: StreamWindow[Any] = StreamWindow("tumbling, count(3), partitioned",
                                                  partition_by=lambda t: t["k"])
    by_function.register_listener(lambda e: None, [EventType.EVICTION])
    by_function.activate(0)
    assert "key_of(t)" in _compiled_source(by_function)  # a user function is still called


class _Recorder:
    """Records every event; at the ``listen_at``-th EVICTION registers an INSERTION listener
    (itself), at the ``final_at``-th sends the final mark."""

    def __init__(self, window: StreamWindow[Any], listen_at: int, final_at: int) -> None:
        self.window, self.listen_at, self.final_at = window, listen_at, final_at
        self.evictions = 0
        self.events: list[Any] = []

    def __call__(self, event: Any) -> None:
        self.events.append((event.type.name, event.partition, [t["id"] for t in event.tuples]))
        if event.type is EventType.EVICTION:
            self.evictions += 1
            if self.evictions == self.listen_at:
                self.window.register_listener(self, [EventType.INSERTION])
            if self.evictions == self.final_at:
                self.window.final_mark()


keys = st.one_of(st.sampled_from(["a", "b", "c", 1, 2]), st.just(["unhashable"]), st.just(None))


@settings(max_examples=150, deadline=None)
@given(keys=st.lists(st.one_of(keys, st.just("missing")), min_size=1, max_size=60),
       cuts=st.sets(st.integers(1, 59), max_size=6), size=st.integers(1, 4),
       flavor=st.sampled_from(["java", "cpp"]), listen_at=st.integers(0, 8),
       final_at=st.integers(0, 12))
def test_a_keyed_tumbling_batch_does_what_the_generic_path_does(
        keys: list[Any], cuts: set[int], size: int, flavor: str, listen_at: int,
        final_at: int) -> None:
    tuples = [{"id": i} if k == "missing" else {"id": i, "k": k} for i, k in enumerate(keys)]
    bounds = [0, *sorted(c for c in cuts if c < len(tuples)), len(tuples)]

    def run(fast: bool) -> tuple[Any, ...]:
        w: StreamWindow[Any] = StreamWindow(f"tumbling, count({size}), partitioned", flavor=flavor,
                                            partition_by="k", fast_paths=fast)
        recorder = _Recorder(w, listen_at, final_at)
        w.register_listener(recorder, [EventType.EVICTION])
        w.activate(0)
        failures: list[Any] = []
        for lo, hi in pairwise(bounds):
            start = lo
            while start < hi:
                try:
                    w.inserter()(tuples[start:hi])
                    break
                except Exception as exc:  # WindowStateError, WindowTupleError...
                    failures.append((start + w.batch_failed_at, type(exc).__name__, str(exc)))
                    start += w.batch_failed_at + 1
        return recorder.events, failures, w.snapshot()

    assert run(True) == run(False)


# --------------------------------------------------------------------------- the math


floats = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(-1e3, 1e3).map(lambda x: round(x, 3)),
    st.sampled_from([0.0, -0.0, 0.1, 0.2, 0.3, 1e-300, 5e-324, 1e300, 1.7976931348623157e308,
                     2.0 ** -40, 3.0 * 2.0 ** -60, 1e16, -1e16, 0.5, 1.0]))


@settings(max_examples=1500, deadline=None)
@given(values=st.lists(floats, min_size=1, max_size=120))
@example(values=[0.0, -5e-324])  # the mean, -2.5e-324, rounds to -0.0
def test_the_mean_from_a_shared_total_is_the_exact_mean_rounded_once(values: list[float]) -> None:
    hi = float_total(values)
    if hi is None:  # the sum overflows: left to `average_values`
        assert not _fsum_ok(values) or not math.isfinite(math.fsum(values))
        return
    copy = list(values)
    mean = float_total_mean(values, hi)
    assert values == copy  # the list is left as it was
    exact = sum(map(Fraction, values), Fraction(0)) / len(values)
    # An exact zero is +0.0 (a sum of opposite values); a negative mean too small for a float
    # rounds to -0.0, as IEEE division gives it.
    expected = exact_float(exact)
    assert same(mean, expected + 0.0 if exact == 0 else expected)


def _fsum_ok(values: list[float]) -> bool:
    try:
        math.fsum(values)
    except OverflowError:
        return False
    return True


def test_float_total_refuses_anything_but_floats() -> None:
    assert float_total([1.0, 2]) is None
    assert float_total([1, 2]) is None
    assert float_total([1.0, math.inf]) is None
    assert float_total([1.0, True]) is None
    assert float_total([1.5, 2.25]) == 3.75


def test_sum_and_average_of_one_attribute_pass_over_the_values_twice(
        monkeypatch: pytest.MonkeyPatch) -> None:
    passes: list[int] = []
    fsum = math.fsum

    def counted(values: Any) -> float:
        values = list(values)
        if len(values) >= 100:
            passes.append(len(values))
        return fsum(values)

    monkeypatch.setattr(_aggregate_math, "fsum", counted)
    items = [{"k": 0, "v": round(i * 0.37, 3), "ts": i} for i in range(1, 301)]
    out = run_operator(Aggregate({"end": Last("ts"), "sum": Sum("v"), "avg": Average("v")}),
                       items, window="tumbling, count(100)").items
    rows = [item for item in out if isinstance(item, dict)]
    assert len(rows) == 3
    assert passes == [100, 101] * 3  # the total, then the rest of the exact sum: no more


values_or_odd = st.one_of(floats, floats, floats, st.sampled_from(
    [math.inf, -math.inf, math.nan, 3, -7, True, 10 ** 20, 2.0 ** -1074]))


@settings(max_examples=150, deadline=None)
@given(values=st.lists(values_or_odd, min_size=1, max_size=80), size=st.integers(1, 9),
       keyed=st.booleans(), flavor=st.sampled_from(["java", "cpp"]))
def test_a_tumbling_sum_and_average_equal_the_reference_column_loop(
        values: list[Any], size: int, keyed: bool, flavor: str) -> None:
    items = [{"k": i % 3, "v": v, "ts": i} for i, v in enumerate(values)]
    out = []
    for reference in (False, True):
        op = Aggregate({"end": Last("ts"), "sum": Sum("v"), "avg": Average("v")}, copy=("k",))
        op._reference = reference
        out.append(run_operator(op, items, window=f"tumbling, count({size})"
                                + (", partitioned" if keyed else ""),
                                partition_by="k" if keyed else None, flavor=flavor).items)
    assert same_items(out[0], out[1])
