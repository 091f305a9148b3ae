"""A full sliding count window's batch of triggers taken as one run (`SumRuns`, the window's
`register_trigger_run`): the same rows, marks and errors as one trigger at a time.

The reference is Aggregate's generic column loop (``_reference = True``), which takes no runs.
Batches are cut by clock pauses (`at`), so a run sees batches of every size, smaller and
larger than the window.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from riverbed.core import JobError
from riverbed.graph import Punct
from riverbed.operators import Aggregate, AnyOf, Average, Count, Last, Sum
from riverbed.operators._aggregate_runs import SumRuns
from riverbed.testing import at, run_operator
from riverbed.windows import EventType, StreamWindow, StreamWindowEvent, make_window
from tests.test_aggregate_fast import same_items

OUTPUT = {"ts": Last("ts"), "avg": Average("v"), "total": Sum("v"), "n": Count(), "c": "k",
          "any": AnyOf("v")}


@pytest.fixture
def runs_taken(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many batches runs took (each call's result, counted)."""
    taken = [0]
    take = SumRuns.take

    def counted(self: SumRuns, *args: Any) -> bool:
        done = take(self, *args)
        taken[0] += done
        return done

    monkeypatch.setattr(SumRuns, "take", counted)
    return taken


def items_of(values: list[Any], cuts: set[int]) -> list[Any]:
    items: list[Any] = []
    for i, v in enumerate(values):
        items.append({"ts": i, "v": v, "k": i % 3})
        if i in cuts:
            items.append(at(0.001 * (i + 1)))  # a pause: the source's batch ends here
    return items


def both(items: list[Any], size: int, **args: Any) -> tuple[list[Any], list[Any]]:
    out = []
    for reference in (False, True):
        op = Aggregate(dict(OUTPUT), **args)
        op._reference = reference
        out.append(run_operator(op, items, window=f"sliding, count({size}), count(1)").items)
    return out[0], out[1]


exact = st.floats(-1e6, 1e6).map(lambda x: float(round(x, 3)))
odd = st.sampled_from([1e-300, 2.0 ** -100, math.inf, -math.inf, math.nan, 3, -7, True, 0.1, -0.0])


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.one_of(exact, odd) | exact | exact | exact, min_size=1, max_size=60),
       cuts=st.sets(st.integers(0, 40), min_size=2, max_size=12), size=st.integers(1, 7),
       incomplete=st.booleans(), copy=st.booleans())
@example(values=[float(i) for i in range(20)], cuts={4, 9, 14}, size=3, incomplete=False,
         copy=False)  # three runs in a row
def test_runs_give_the_rows_and_marks_of_one_trigger_at_a_time(
        values: list[Any], cuts: set[int], size: int, incomplete: bool, copy: bool) -> None:
    args: dict[str, Any] = {"aggregate_incomplete_windows": incomplete, "copy": ("k",) if copy else ()}
    fast, ref = both(items_of(values, cuts), size, **args)
    assert same_items(fast, ref), (fast, ref)


def test_a_long_stream_of_floats_goes_by_runs_and_equals_the_reference(runs_taken: list[int]) -> None:
    values = [round((i * 7919 % 1000) * 0.137 - 40.0, 3) for i in range(3000)]
    fast, ref = both(items_of(values, set(range(99, 3000, 250))), 100,
                     aggregate_incomplete_windows=True)
    assert runs_taken[0] >= 10  # every batch after the window first filled
    assert len(fast) == 2 * 3000 + 1 and fast[1:-1:2] == [Punct.WINDOW] * 3000  # and final
    assert same_items(fast, ref)


@settings(max_examples=150, deadline=None)
@given(values=st.lists(st.integers(-10**6, 10**6) | st.sampled_from([2**70, -2**70, 0, -1]),
                       min_size=1, max_size=60),
       cuts=st.sets(st.integers(0, 40), min_size=2, max_size=12), size=st.integers(1, 7))
def test_runs_of_ints_give_the_rows_of_one_trigger_at_a_time(
        values: list[int], cuts: set[int], size: int) -> None:
    # Exact int sums, an int Sum and SPL's integer Average (truncated toward zero).
    fast, ref = both(items_of(values, cuts), size)
    assert same_items(fast, ref), (fast, ref)


def test_a_long_stream_of_ints_goes_by_runs_and_equals_the_reference(runs_taken: list[int]) -> None:
    values = [(i * 7919 % 1000) - 500 for i in range(3000)]
    fast, ref = both(items_of(values, set(range(99, 3000, 250))), 100)
    assert runs_taken[0] >= 10
    assert same_items(fast, ref)
    rows = [x for x in fast if isinstance(x, dict)]
    assert all(type(r["total"]) is int and type(r["avg"]) is int for r in rows)
    assert rows[-1]["avg"] == int(sum(values[-100:]) / 100)  # (toward zero)


def test_a_window_mixing_ints_and_floats_goes_one_trigger_at_a_time(runs_taken: list[int]) -> None:
    values: list[Any] = list(range(40))
    values[25] = 25.0
    fast, ref = both(items_of(values, {9, 19, 29}), 5)
    assert same_items(fast, ref)
    assert runs_taken[0] == 1  # 10-19; 20-29 held 25.0, and 30-39 found it in the window


def test_a_batch_with_a_value_the_scaling_cannot_keep_exact_goes_one_trigger_at_a_time(
        runs_taken: list[int]) -> None:
    values = [float(i % 10) for i in range(40)]
    values[25] = 1e-300  # its sum would be exact only in `SumAccumulator`'s slow path
    fast, ref = both(items_of(values, {9, 19, 29}), 5)
    assert same_items(fast, ref)
    # The batches 10-19 and 30-39 ran; 20-29 held 1e-300, and 30-39 then found it in the window.
    assert runs_taken[0] == 1


def test_a_tuple_missing_an_output_attribute_fails_as_its_own_trigger_does() -> None:
    values = [{"ts": i, "v": float(i), "k": 0} for i in range(20)]
    del values[14]["ts"]
    errors = []
    for reference in (False, True):
        op = Aggregate(dict(OUTPUT))
        op._reference = reference
        with pytest.raises(JobError) as failed:
            run_operator(op, [*values[:10], at(1), *values[10:]], window="sliding, count(4), count(1)")
        errors.append(str(failed.value))
    assert "'ts'" in errors[0] and errors[0] == errors[1]


# ------------------------------------------------------------------- the window's side


def window_with_run(clause: str, answer: bool) -> tuple[StreamWindow[Any], list[Any], list[Any]]:
    window = make_window(clause)
    assert isinstance(window, StreamWindow)
    triggers: list[Any] = []
    offered: list[Any] = []

    def trigger(event: StreamWindowEvent[Any]) -> None:
        triggers.append(event.tuples[-1])

    def run(key: Any, batch: Any, tuples: Any, size: int) -> bool:
        offered.append((key, list(batch), list(tuples), size))
        return answer

    window.register_listener(trigger, [EventType.TRIGGER])
    window.register_trigger_run(run, trigger)
    window.activate(0)
    return window, triggers, offered


def test_a_full_window_offers_its_batch_and_moves_as_if_it_took_each_tuple() -> None:
    taken, triggers, offered = window_with_run("sliding, count(3), count(1)", True)
    refused, refused_triggers, _ = window_with_run("sliding, count(3), count(1)", False)
    for w in (taken, refused):
        w.inserter()([1, 2])  # not yet full: no offer
        w.inserter()([3])
        w.inserter()([4, 5, 6, 7])
    assert offered == [(None, [4, 5, 6, 7], [1, 2, 3], 3)]
    assert triggers == [1, 2, 3]  # the run's triggers were its own to do
    assert refused_triggers == [1, 2, 3, 4, 5, 6, 7]
    assert taken.contents() == refused.contents() == [5, 6, 7]
    assert taken.evicted_count() == refused.evicted_count()


@pytest.mark.parametrize("clause", ["sliding, count(3), count(2)", "sliding, time(3), count(1)",
                                    "sliding, count(3), count(1), partitioned",
                                    "tumbling, count(3)"])
def test_only_a_sliding_count_window_with_a_count_1_trigger_offers_runs(clause: str) -> None:
    window = make_window(clause)
    assert window.register_trigger_run(lambda *a: True, lambda e: None) is False


def test_a_window_with_another_insertion_listener_offers_no_run() -> None:
    window, triggers, offered = window_with_run("sliding, count(2), count(1)", True)
    inserted: list[Any] = []
    window.register_listener(lambda e: inserted.append(e.tuples[0]), [EventType.INSERTION])
    window.inserter()([1, 2, 3, 4])
    window.inserter()([5, 6])
    assert offered == [] and triggers == [1, 2, 3, 4, 5, 6] and inserted == [1, 2, 3, 4, 5, 6]
