"""The trace comparator's rules (FORMAT.md, as ``shared/conformance/run.py`` applies them), each
on small hand-made traces: what it accepts and, just as much, what it must refuse."""

from __future__ import annotations

from typing import Any

import pytest

from tests.trace_compare import mismatch


def ev(event: str, partition: Any, *tuples: str, **extra: Any) -> dict[str, Any]:
    return {"event": event, "partition": partition, "tuples": list(tuples), **extra}


def case(window: str, expect: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    return {"name": "t", "window": window, "steps": fields.pop("steps", []), "expect": expect, **fields}


SLIDING = "sliding, count(5), count(1)"
TUMBLING = "tumbling, punct()"


# -- merged evictions ---------------------------------------------------------------------------

def test_sliding_evictions_of_one_step_compare_merged_or_split() -> None:
    batched = [ev("EVICTION", None, "a", "b", step=3)]
    split = [ev("EVICTION", None, "a", step=3), ev("EVICTION", None, "b", step=3)]
    assert mismatch(case(SLIDING, batched), split) is None
    assert mismatch(case(SLIDING, split), batched) is None


def test_sliding_evictions_of_different_steps_do_not_merge() -> None:
    expect = [ev("EVICTION", None, "a", "b", step=3)]
    actual = [ev("EVICTION", None, "a", step=3), ev("EVICTION", None, "b", step=4)]
    assert mismatch(case(SLIDING, expect), actual) is not None


def test_evictions_of_different_partitions_do_not_merge() -> None:
    expect = [ev("EVICTION", "x", "a", "b")]
    actual = [ev("EVICTION", "x", "a"), ev("EVICTION", "y", "b")]
    assert mismatch(case(SLIDING + ", partitioned", expect), actual) is not None


def test_a_tumbling_flush_split_in_two_is_a_mismatch() -> None:
    expect = [ev("EVICTION", None, "a", "b")]
    actual = [ev("EVICTION", None, "a"), ev("EVICTION", None, "b")]
    why = mismatch(case(TUMBLING, expect), actual)
    assert why is not None and "event #0" in why


def test_evictions_apart_do_not_merge() -> None:
    expect = [ev("EVICTION", None, "a", "b"), ev("TRIGGER", None, "c")]
    actual = [ev("EVICTION", None, "a"), ev("TRIGGER", None, "c"), ev("EVICTION", None, "b")]
    assert mismatch(case(SLIDING, expect), actual) is not None


# -- optional fields and numbers -------------------------------------------------------------

def test_an_optional_field_is_compared_only_where_the_case_gives_it() -> None:
    expect = [ev("INSERTION", None, "a"), ev("TRIGGER", None, "a", at=2.0)]
    actual = [ev("INSERTION", None, "a", at=1.0, step=0), ev("TRIGGER", None, "a", at=2.0, step=1)]
    assert mismatch(case(SLIDING, expect), actual) is None
    late = [actual[0], ev("TRIGGER", None, "a", at=2.5, step=1)]
    assert mismatch(case(SLIDING, expect), late) is not None


def test_a_field_the_case_gives_must_be_printed() -> None:
    expect = [ev("TRIGGER", None, "a", step=1)]
    assert mismatch(case(SLIDING, expect), [ev("TRIGGER", None, "a")]) is not None


@pytest.mark.parametrize(("actual_at", "ok"), [(2.0000005, True), (2.000002, False)])
def test_times_compare_within_a_microsecond(actual_at: float, ok: bool) -> None:
    expect = [ev("TRIGGER", None, "a", at=2.0)]
    assert (mismatch(case(SLIDING, expect), [ev("TRIGGER", None, "a", at=actual_at)]) is None) is ok


def test_keys_and_ids_compare_exactly() -> None:
    expect = [ev("INSERTION", "1", "a")]
    assert mismatch(case(SLIDING, expect), [ev("INSERTION", 1, "a")]) is not None
    assert mismatch(case(SLIDING, expect), [ev("INSERTION", "1", "A")]) is not None


def test_missing_and_extra_events_are_named() -> None:
    expect = [ev("INSERTION", None, "a"), ev("INSERTION", None, "b")]
    assert "missing event #1" in str(mismatch(case(SLIDING, expect), expect[:1]))
    assert "extra event #2" in str(mismatch(case(SLIDING, expect), [*expect, ev("TRIGGER", None)]))


# -- unordered ranges -------------------------------------------------------------------------

def test_an_unordered_range_compares_as_a_multiset() -> None:
    expect = [ev("INSERTION", "x", "a"), ev("EVICTION", "x", "a"), ev("EVICTION", "y", "b"),
              ev("INSERTION", "x", "c")]
    window = "tumbling, punct(), partitioned"
    swapped = [expect[0], expect[2], expect[1], expect[3]]
    assert mismatch(case(window, expect, unordered=[[1, 2]]), swapped) is None
    assert mismatch(case(window, expect), swapped) is not None
    outside = [expect[1], expect[0], expect[2], expect[3]]  # crosses the range's bound
    assert mismatch(case(window, expect, unordered=[[1, 2]]), outside) is not None


def test_an_unordered_range_still_needs_the_same_events() -> None:
    expect = [ev("EVICTION", "x", "a"), ev("EVICTION", "y", "b")]
    other = [ev("EVICTION", "y", "b"), ev("EVICTION", "x", "c")]
    assert mismatch(case("tumbling, punct(), partitioned", expect, unordered=[[0, 1]]), other) is not None


# -- order by key ---------------------------------------------------------------------------

def test_by_key_allows_interleaving_across_keys_only() -> None:
    expect = [ev("INSERTION", "x", "a"), ev("INSERTION", "y", "b"), ev("TRIGGER", "x", "a")]
    window = SLIDING + ", partitioned"
    interleaved = [expect[1], expect[0], expect[2]]
    assert mismatch(case(window, expect, order="by_key"), interleaved) is None
    assert mismatch(case(window, expect, order="listed"), interleaved) is not None
    reordered_in_key = [expect[2], expect[1], expect[0]]
    assert mismatch(case(window, expect, order="by_key"), reordered_in_key) is not None


def test_by_key_keys_by_pane_and_partition() -> None:
    expect = [ev("TRIGGER", None, "a", pane=[0.0, 10.0]), ev("TRIGGER", None, "b", pane=[10.0, 20.0])]
    window = "timeInterval, intervalDuration(10.0)"
    assert mismatch(case(window, expect, order="by_key"), expect[::-1]) is None
    assert mismatch(case(window, expect, order="by_key"),
                    [ev("TRIGGER", None, "a", pane=[0.0, 10.0])]) is not None


# -- restarts ---------------------------------------------------------------------------------

def test_events_from_a_restart_up_to_its_reset_are_ignored() -> None:
    steps = [{"tuple": {"id": "a"}}, {"restart": True}, {"at": 5.0}, {"reset": None}, {"at": 9.0}]
    expect = [ev("INSERTION", None, "a", step=0), ev("TRIGGER", None, step=4)]
    c = case("sliding, time(5.0), time(1.0)", expect, steps=steps)
    fresh_pe = [ev("INITIAL_FULL", None, step=2), ev("TRIGGER", None, step=1)]
    assert mismatch(c, [expect[0], *fresh_pe, expect[1]]) is None
    at_reset = ev("TRIGGER", None, step=3)  # the reset step's own events count
    assert mismatch(c, [expect[0], at_reset, expect[1]]) is not None
