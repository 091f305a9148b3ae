"""Lazy time eviction: a C++ sliding time window with a time trigger and no EVICTION listener
arms no eviction timer and evicts at its ticks and when observed. Nothing it reports may differ
from the same window evicting on time (the same window with an EVICTION listener)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from riverbed.windows import EventType, StreamWindow

S = 1_000_000_000
MS = 1_000_000
SEEN = {EventType.TRIGGER, EventType.INITIAL_FULL, EventType.PARTITION_EVICTION, EventType.FINAL}

op = st.one_of(
    st.tuples(st.just("insert"), st.sampled_from("abc")),
    st.tuples(st.just("batch"), st.lists(st.sampled_from("abc"), min_size=1, max_size=4)),
    st.tuples(st.just("advance"), st.sampled_from([0, 1, 300 * MS, 500 * MS, S, S + 1, 2 * S - 1,
                                                   2 * S, 2 * S + 1, 3 * S])),
    st.tuples(st.just("observe"), st.sampled_from("abc")),
    st.tuples(st.just("partitions"), st.just("")),
    st.tuples(st.just("snapshot"), st.just("")),
    st.tuples(st.just("evict_partition"), st.sampled_from("abc")),
    st.tuples(st.just("checkpoint"), st.just("")),
    st.tuples(st.just("reset"), st.just("")),
)


def settled(snapshot: dict[str, Any]) -> dict[str, Any]:
    """A snapshot with its C++ partition memory in a fixed order (a lazy window drops the
    partitions emptied between two ticks in partition order, timers in due order), and its live
    timers without eviction timers (a lazy window arms none)."""
    return {**snapshot, "memory": sorted(snapshot["memory"], key=repr),
            "timer_order": [step for step in snapshot["timer_order"] if step[0] != "evict"]}


def replay(clause: str, ops: list[tuple[str, Any]], *, eager: bool, compiled: bool) -> list[Any]:
    partitioned = "partitioned" in clause
    window: StreamWindow[dict[str, Any]] = StreamWindow(
        clause, flavor="cpp", partition_by="k" if partitioned else None, fast_paths=compiled)
    log: list[Any] = []
    window.register_listener(
        lambda e: log.append((e.type.name, e.partition, [t["i"] for t in e.tuples])), SEEN)
    if eager:
        window.register_listener(lambda e: None, {EventType.EVICTION})
    window.activate(0)
    n = 0
    for kind, arg in ops:
        if kind == "insert":
            n += 1
            window.insert({"k": arg, "i": n})
        elif kind == "batch":
            batch = []
            for k in arg:
                n += 1
                batch.append({"k": k, "i": n})
            window.insert_tuples(batch)
        elif kind == "advance":
            window.advance_time(window.now + arg)
        elif kind == "observe":
            key = arg if partitioned else None
            log.append(("contents", [t["i"] for t in window.contents(key)], window.evicted_count(key)))
        elif kind == "partitions" and partitioned:
            log.append(("partitions", window.partitions()))
        elif kind == "snapshot":
            log.append(("snapshot", settled(window.snapshot())))
        elif kind == "evict_partition" and partitioned:
            window.evict_partition(arg)
        elif kind == "checkpoint":
            log.append(("checkpoint", settled(window.checkpoint())))
        elif kind == "reset":
            window.reset(None)
    window.advance_time(window.now + 5 * S)
    log.append(("end", settled(window.snapshot())))
    return log


P2 = "sliding, time(2), time(1), partitioned"
# Between a tuple's due time (2 s and 1 ns after it arrived) and the next tick: each way of
# looking at the window, and a C++ partition emptied then and made again by a new tuple (it
# goes to the end of the partition order: the next tick triggers it last).
SEEN_BEFORE_THE_TICK = [
    [("insert", "a"), ("advance", 2 * S + 1), ("snapshot", "")],
    [("insert", "a"), ("advance", 2 * S + 1), ("observe", "a")],
    [("insert", "a"), ("advance", 2 * S + 1), ("partitions", "")],
    [("insert", "a"), ("advance", S), ("insert", "a"), ("advance", S + 1), ("evict_partition", "a")],
    [("insert", "a"), ("advance", 500 * MS), ("advance", S), ("insert", "b"), ("advance", 500 * MS),
     ("advance", 1), ("insert", "a"), ("advance", S)],
]


# A tuple due exactly at a tick (it arrived T and 1 ns before it, after the tick before):
# on time its eviction timer was armed after that tick's, so the tick's TRIGGER still holds
# it (found by this file's property test).
TIED = [("advance", S), ("advance", 2 * S - 1), ("insert", "a")]


def _examples(test: Any) -> Any:
    for ops in SEEN_BEFORE_THE_TICK:
        for compiled in (False, True):
            test = example(ops=ops, compiled=compiled, clause=P2)(test)
    for compiled in (False, True):
        test = example(ops=TIED, compiled=compiled, clause="sliding, time(1), time(2), partitioned")(test)
        test = example(ops=[("batch", ["a", "b"]), *TIED[1:]], compiled=compiled,
                       clause="sliding, time(1), time(2)")(test)
    return test


@pytest.mark.parametrize("compiled", [False, True])
def test_a_tuple_due_exactly_at_a_tick_is_in_that_ticks_trigger(compiled: bool) -> None:
    lazy = replay("sliding, time(1), time(2), partitioned", TIED, eager=False, compiled=compiled)
    assert ("TRIGGER", "a", [1]) in lazy  # the tick at 4 s, then the eviction due at 4 s
    assert lazy == replay("sliding, time(1), time(2), partitioned", TIED, eager=True, compiled=compiled)


@pytest.mark.parametrize("compiled", [False, True])
def test_a_restored_tuple_due_exactly_at_a_tick_leaves_as_on_time(compiled: bool) -> None:
    """Restored arrivals were never looked at for ties when they arrived: the restore does."""
    clause = "sliding, time(1), time(2), partitioned"
    source: StreamWindow[dict[str, Any]] = StreamWindow(clause, flavor="cpp", partition_by="k")
    source.activate(0)
    source.advance_time(2 * S + 500 * MS)
    source.insert({"k": "a", "i": 1})
    source.advance_time(2 * S + 999_999_999)
    source.insert({"k": "a", "i": 2})  # due at 4 s, the next tick
    saved = source.snapshot()

    def restored(eager: bool) -> list[Any]:
        window: StreamWindow[dict[str, Any]] = StreamWindow(clause, flavor="cpp", partition_by="k",
                                                            fast_paths=compiled)
        log: list[Any] = []
        window.register_listener(lambda e: log.append((e.type.name, e.partition, [t["i"] for t in e.tuples])),
                                 SEEN)
        if eager:
            window.register_listener(lambda e: None, {EventType.EVICTION})
        window.restore(saved)
        window.advance_time(5 * S)
        log.append(("end", settled(window.snapshot())))
        return log

    assert restored(False) == restored(True)


@settings(max_examples=300, deadline=None)
@_examples
@given(ops=st.lists(op, min_size=1, max_size=40), compiled=st.booleans(),
       clause=st.sampled_from(["sliding, time(2), time(1), partitioned", "sliding, time(2), time(1)",
                               "sliding, time(1), time(2), partitioned",
                               "sliding, time(3), time(1), partitioned"]))
def test_a_lazily_evicting_window_reports_what_an_eagerly_evicting_one_does(
        ops: list[tuple[str, Any]], compiled: bool, clause: str) -> None:
    lazy = replay(clause, ops, eager=False, compiled=compiled)
    eager = replay(clause, ops, eager=True, compiled=compiled)
    assert lazy == eager


def test_without_an_eviction_listener_no_eviction_timer_is_armed() -> None:
    """The eviction due at 2.5 s (+1 ns) is no timer of its own: the next deadline is the tick
    at 3 s; a window whose evictions are heard wakes at 2.5 s. C++ has dropped the emptied
    partition by the tick either way."""
    for eager, first in ((False, 3 * S), (True, 2 * S + 500 * MS + 1)):
        window: StreamWindow[dict[str, Any]] = StreamWindow(
            "sliding, time(2), time(1), partitioned", flavor="cpp", partition_by="k")
        triggered: list[Any] = []
        window.register_listener(lambda e, seen=triggered: seen.append(e.partition),
                                 {EventType.TRIGGER})
        if eager:
            window.register_listener(lambda e: None, {EventType.EVICTION})
        window.activate(0)
        window.advance_time(500 * MS)
        window.insert({"k": "a"})
        window.advance_time(2 * S)
        assert window.next_deadline() == first
        window.advance_time(3 * S)
        assert window.partitions() == [] and triggered == ["a", "a", ""]  # "": C++'s empty tick


@pytest.mark.parametrize("late", [False, True])
def test_an_eviction_listener_added_later_makes_the_window_evict_on_time(late: bool) -> None:
    window: StreamWindow[dict[str, Any]] = StreamWindow("sliding, time(2), time(1)", flavor="cpp")
    evicted: list[int] = []
    window.activate(0)
    window.advance_time(500 * MS)
    window.insert({"i": 1})
    if late:
        window.advance_time(2 * S)  # still held: due at 2.5 s
    window.register_listener(lambda e: evicted.extend(t["i"] for t in e.tuples), {EventType.EVICTION})
    window.advance_time(2 * S + 500 * MS)
    assert evicted == []  # due at 2.5 s and 1 ns
    window.advance_time(2 * S + 500 * MS + 1)
    assert evicted == [1]


def test_evicted_count_counts_on_when_a_cpp_partition_is_dropped_and_made_again() -> None:
    window: StreamWindow[dict[str, Any]] = StreamWindow(
        "sliding, time(1), time(1), partitioned", flavor="cpp", partition_by="k")
    window.register_listener(lambda e: None, {EventType.TRIGGER})
    window.activate(0)
    window.insert({"k": "a"})
    window.insert({"k": "a"})
    base = window.evicted_count("a")
    window.advance_time(3 * S)  # both evicted, the partition dropped
    assert window.partitions() == []
    window.insert({"k": "a"})
    assert window.evicted_count("a") == base + 2
    other = window.evicted_count("b")
    assert other == 0  # unknown
    window.insert({"k": "b"})
    assert abs(window.evicted_count("b") - base) >= 1 << 48  # a new key: a base of its own


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("clause", ["sliding, count(3), time(1)", "sliding, count(3), count(2)"])
def test_evicted_count_counts_count_evictions_on_every_insert_path(compiled: bool, clause: str) -> None:
    for flavor in ("java", "cpp"):
        window: StreamWindow[dict[str, Any]] = StreamWindow(clause, flavor=flavor, fast_paths=compiled)
        window.activate(0)
        window.insert({"i": 0})
        base = window.evicted_count()
        for i in range(1, 10):
            window.insert({"i": i})
        assert window.evicted_count() - base == 7  # ten in, three kept
