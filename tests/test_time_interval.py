"""timeInterval windows beyond the conformance cases: pane geometry, life-cycle invariants,
snapshot/restore, resolutions and bad input."""

from __future__ import annotations

import contextlib
import math
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.windows import (
    EVENT_TIME_MAX,
    EventType,
    PaneTiming,
    SnapshotError,
    StreamWindow,
    TimeIntervalSpec,
    TimeIntervalWindow,
    WatermarkError,
    WindowClauseError,
    WindowStateError,
    WindowTupleError,
    _time_interval,
    make_window,
    parse_window_clause,
    seconds_to_ticks,
)

S = 1_000_000_000


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def __call__(self, e: Any) -> None:
        self.events.append((e.type.name, e.interval_start, e.interval_end, e.partition,
                            [t["id"] for t in e.tuples], e.pane_index, e.pane_timing))


def _window(clause: str, partition_by: str | None = None,
            **kw: Any) -> tuple[TimeIntervalWindow[Any], Recorder]:
    rec = Recorder()
    w = TimeIntervalWindow(clause, event_time="ts", partition_by=partition_by, **kw)
    w.register_listener(rec, (EventType.INITIAL_FULL, EventType.TRIGGER, EventType.CLOSE))
    return w, rec


# ------------------------------------------------------------------ clause


def test_clause_defaults_follow_spl() -> None:
    spec = parse_window_clause("timeInterval, intervalDuration(10)")
    assert spec == TimeIntervalSpec(10, 10, 0.0, 0.0, False)
    assert spec.ticks() == (10 * S, 10 * S, 0, 0)
    assert spec.clause() == "timeInterval, intervalDuration(10)"


def test_options_may_come_in_any_order_and_round_trip() -> None:
    a = parse_window_clause("timeInterval, discardAge(2), intervalDuration(4), intervalOffset(1), "
                            "creationPeriod(2), partitioned")
    assert isinstance(a, TimeIntervalSpec)
    assert a.partitioned
    assert parse_window_clause(a.clause()) == a


def test_offset_is_reduced_modulo_the_period_in_ticks() -> None:
    a = parse_window_clause("timeInterval, intervalDuration(10), intervalOffset(13)")
    b = parse_window_clause("timeInterval, intervalDuration(10), intervalOffset(3)")
    assert a.ticks() == b.ticks()


def test_clause_seconds_truncate_to_ticks_per_resolution() -> None:
    spec = TimeIntervalSpec(1.1, 0.0015, 0.0, 0.0)
    assert spec.ticks("ns")[:2] == (1_100_000_000, 1_500_000)
    assert spec.ticks("us")[:2] == (1_100_000, 1_500)
    assert spec.ticks("ms")[:2] == (1_100, 1)
    assert seconds_to_ticks(1.0005, "ms") == 1000
    with pytest.raises(WindowClauseError, match="at least one tick"):
        TimeIntervalSpec(1.0, 0.0005).ticks("ms")
    with pytest.raises(WindowClauseError, match="resolution 'days'"):
        seconds_to_ticks(1.0, "days")


@pytest.mark.parametrize(("clause", "offending", "message"), [
    ("timeInterval, creationPeriod(2)", None, "needs intervalDuration"),
    ("timeInterval, intervalDuration(0)", "intervalDuration(0)", "must be > 0"),
    ("timeInterval, intervalDuration(5), creationPeriod(-1)", "creationPeriod(-1)", "must be > 0"),
    ("timeInterval, intervalDuration(5), discardAge(-1)", "discardAge(-1)", "must be >= 0"),
    ("timeInterval, intervalDuration(5), intervalOffset(-2)", "intervalOffset(-2)", "must be >= 0"),
    ("timeInterval, intervalDuration(5), dicardAge(1)", "dicardAge(1)", "did you mean 'discardAge'"),
    ("timeInterval, intervalDuration(5), intervalDuration(6)", "intervalDuration(6)", "given twice"),
    ("timeInterval, intervalDuration(5), partitioned, partitionAge(3)", "partitionAge(3)",
     "no partition eviction"),
    ("timeInterval, intervalDuration(5), partitioned, discardAge(1)", "discardAge(1)",
     "after 'partitioned'"),
    ("timeInterval, intervalDuration(x)", "x", "must be a number"),
])
def test_bad_clauses_point_at_the_offending_text(clause: str, offending: str | None,
                                                 message: str) -> None:
    with pytest.raises(WindowClauseError, match=message) as info:
        parse_window_clause(clause)
    exc = info.value
    assert exc.clause == clause
    if offending is not None:
        assert exc.position == clause.index(offending)
        assert str(exc).split("\n")[-1].strip() == "^" * len(offending)


def test_make_window_builds_either_engine() -> None:
    assert isinstance(make_window("timeInterval, intervalDuration(5)"), TimeIntervalWindow)
    assert isinstance(make_window("sliding, count(2)"), StreamWindow)
    with pytest.raises(WindowClauseError, match="not a timeInterval clause"):
        TimeIntervalWindow("tumbling, count(2)")


# ---------------------------------------------------------- pane geometry


def _brute_force_panes(t: int, d: int, p: int, o: int) -> list[tuple[int, int]]:
    """Every grid pane [n*p + o, n*p + o + d) containing t, by scanning n."""
    n_hi = (t - o) // p + 1
    n_lo = (t - o - d) // p - 1
    return [(n * p + o, n * p + o + d) for n in range(n_lo, n_hi + 1)
            if n * p + o <= t < n * p + o + d]


_secs = st.integers(min_value=1, max_value=50_000).map(lambda ms: ms / 1000)


@settings(max_examples=400, deadline=None)
@given(d=_secs, p=_secs, o=st.integers(min_value=0, max_value=100_000).map(lambda ms: ms / 1000),
       t=st.one_of(st.integers(min_value=0, max_value=10**12),
                   st.integers(min_value=1_600_000_000 * S, max_value=EVENT_TIME_MAX)))
def test_a_tuple_goes_to_exactly_the_panes_that_contain_it(d: float, p: float, o: float, t: int) -> None:
    w, _ = _window(f"timeInterval, intervalDuration({d}), creationPeriod({p}), intervalOffset({o})")
    dt, pt, _, ot = w.spec.ticks()
    expected = _brute_force_panes(t, dt, pt, ot)
    assert w.insert({"id": "x", "ts": t}) is bool(expected)
    assert w.panes() == expected
    assert w.unassigned == (0 if expected else 1)
    for start, _end in expected:
        assert w.contents(start) == [{"id": "x", "ts": t}]


def test_insertion_events_name_each_pane_latest_first() -> None:
    w = TimeIntervalWindow("timeInterval, intervalDuration(10), creationPeriod(5)", event_time="ts")
    seen: list[Any] = []
    w.register_listener(lambda e: seen.append((e.type, e.pane, e.pane_timing)), (EventType.INSERTION,))
    w.insert({"id": "a", "ts": 107 * S})
    assert seen == [(EventType.INSERTION, (105 * S, 115 * S), PaneTiming.EARLY),
                    (EventType.INSERTION, (100 * S, 110 * S), PaneTiming.EARLY)]


def test_pane_info_on_each_event_is_what_spl_reports_at_that_moment() -> None:
    w = TimeIntervalWindow("timeInterval, intervalDuration(10), discardAge(10)", event_time="ts")
    seen: list[Any] = []
    w.register_listener(lambda e: seen.append((e.type.name, e.pane_index, e.pane_timing.name)))
    w.insert({"id": "a", "ts": 101 * S})
    w.watermark(110 * S)
    w.insert({"id": "b", "ts": 102 * S})
    w.watermark(111 * S)
    w.watermark(120 * S)
    assert seen == [
        ("INSERTION", 0, "EARLY"),
        ("INITIAL_FULL", 0, "EARLY"),  # the timing turns on-complete only after INITIAL_FULL
        ("TRIGGER", 0, "ON_COMPLETE"),
        ("INSERTION", 1, "LATE"),
        ("TRIGGER", 1, "LATE"),
        ("CLOSE", 2, "LATE"),
    ]


# ---------------------------------------------------- life-cycle invariants

_step = st.one_of(
    st.tuples(st.just("tuple"), st.integers(min_value=90, max_value=160), st.sampled_from("kl")),
    st.tuples(st.just("wm"), st.integers(min_value=90, max_value=170), st.none()),
)


def _run(w: TimeIntervalWindow[Any], steps: list[tuple[str, int, str | None]]) -> list[dict[str, Any]]:
    accepted = []
    for i, (kind, sec, key) in enumerate(steps):
        if kind == "tuple":
            tup = {"id": f"t{i}", "ts": sec * S // 2, "k": key}
            if w.insert(tup):
                accepted.append(tup)
        else:
            w.watermark(sec * S // 2)
    return accepted


@settings(max_examples=300, deadline=None)
@given(d=st.integers(1, 12), p=st.integers(1, 12), a=st.integers(0, 12),
       partitioned=st.booleans(), steps=st.lists(_step, max_size=40))
def test_life_cycle_invariants(d: int, p: int, a: int, partitioned: bool,
                               steps: list[tuple[str, int, str | None]]) -> None:
    clause = (f"timeInterval, intervalDuration({d / 2}), creationPeriod({p / 2}), discardAge({a / 2})"
              + (", partitioned" if partitioned else ""))
    w, rec = _window(clause, "k" if partitioned else None)
    original_insert = w.insert

    def insert(tup: Any, event_time: int | None = None) -> bool:
        # A tuple is dropped exactly when it is older than the drop point at arrival.
        drop = w.drop_point
        stored = original_insert(tup, event_time)
        if drop is not None and tup["ts"] < drop:
            assert not stored
        return stored

    w.insert = insert  # type: ignore[method-assign]
    accepted = _run(w, steps)
    for name, _start, end, _key, _ids, index, timing in rec.events:
        assert end <= (w.watermark_value or 0), "no pane fires before the watermark reaches its end"
        if name == "TRIGGER":
            assert (timing is PaneTiming.ON_COMPLETE) == (index == 0)
    w.watermark(EVENT_TIME_MAX)
    assert w.panes() == [], "the max watermark closes every pane"
    assert w.insert({"id": "late", "ts": 0, "k": "k"}) is False, "after max everything is dropped"

    by_pane_key: dict[tuple[int, Any], list[tuple[Any, ...]]] = {}
    for ev in rec.events:
        by_pane_key.setdefault((ev[1], ev[3]), []).append(ev)
    for (start, key), evs in by_pane_key.items():
        names = [e[0] for e in evs]
        assert names.count("CLOSE") == 1 and names[-1] == "CLOSE"
        assert names.count("INITIAL_FULL") <= 1
        if "INITIAL_FULL" in names:
            assert names.index("INITIAL_FULL") < names.index("TRIGGER")
        # Each accepted tuple of this pane partition is in a TRIGGER and in the CLOSE.
        mine = [t["id"] for t in accepted
                if start <= t["ts"] < start + w.spec.ticks()[0] and (not partitioned or t["k"] == key)]
        triggered = {i for e in evs if e[0] == "TRIGGER" for i in e[4]}
        assert triggered == set(mine)
        assert evs[-1][4] == mine  # CLOSE lists the contents in arrival order
    indexes: dict[int, set[int]] = {}
    for ev in rec.events:
        if ev[0] == "TRIGGER":
            indexes.setdefault(ev[1], set()).add(ev[5])
    for idx in indexes.values():
        assert idx == set(range(len(idx))), "pane indexes count trigger rounds from 0"


# ---------------------------------------------------- snapshot and restore


@settings(max_examples=300, deadline=None)
@given(d=st.integers(1, 12), p=st.integers(1, 12), a=st.integers(0, 12), partitioned=st.booleans(),
       steps=st.lists(_step, max_size=40), cut=st.integers(0, 40))
def test_snapshot_restore_at_any_point_continues_like_an_uninterrupted_run(
        d: int, p: int, a: int, partitioned: bool, steps: list[Any], cut: int) -> None:
    clause = (f"timeInterval, intervalDuration({d / 2}), creationPeriod({p / 2}), discardAge({a / 2})"
              + (", partitioned" if partitioned else ""))
    key = "k" if partitioned else None
    whole, rec_whole = _window(clause, key)
    _run(whole, steps)
    whole.watermark(EVENT_TIME_MAX)

    first, rec = _window(clause, key)
    cut = min(cut, len(steps))
    _run(first, steps[:cut])
    blob = msgpack.packb(first.checkpoint())
    second, rec2 = _window(clause, key)
    second.reset(msgpack.unpackb(blob))
    # Tuple ids of the second half must not collide with the first: renumber by offset.
    _run_offset(second, steps[cut:], cut)
    second.watermark(EVENT_TIME_MAX)
    assert rec.events + rec2.events == rec_whole.events
    assert second.dropped == whole.dropped


def _run_offset(w: TimeIntervalWindow[Any], steps: list[Any], offset: int) -> None:
    for i, (kind, sec, key) in enumerate(steps, start=offset):
        if kind == "tuple":
            w.insert({"id": f"t{i}", "ts": sec * S // 2, "k": key})
        else:
            w.watermark(sec * S // 2)


def test_snapshot_stores_a_tuple_shared_by_panes_once() -> None:
    w, _ = _window("timeInterval, intervalDuration(10), creationPeriod(2)")
    w.insert({"id": "a", "ts": 105 * S})
    snap = w.snapshot()
    assert len(snap["tuples"]) == 1 and len(snap["panes"]) == 5
    w2, _ = _window("timeInterval, intervalDuration(10), creationPeriod(2)")
    w2.restore(msgpack.unpackb(msgpack.packb(snap)))
    shared = [w2.contents(s)[0] for s, _ in w2.panes()]
    assert all(t is shared[0] for t in shared)


def test_reset_to_initial_state_forgets_panes_and_watermark() -> None:
    w, rec = _window("timeInterval, intervalDuration(10)")
    w.insert({"id": "a", "ts": 105 * S})
    w.watermark(107 * S)
    w.reset(None)
    assert w.panes() == [] and w.watermark_value is None and rec.events == []
    assert w.insert({"id": "b", "ts": 1 * S}) is True


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda s: s.update(format="x"), "not a timeInterval window snapshot"),
    (lambda s: s.update(clause="timeInterval, intervalDuration(3)"), "cannot restore window"),
    (lambda s: s.update(resolution="ms"), "resolution"),
    (lambda s: s.pop("panes"), "missing or has a bad field"),
    (lambda s: s["panes"][0].update(start=101 * S), "not on this window's pane grid"),
    (lambda s: s["panes"][0].update(timing="soon"), "bad field"),
    (lambda s: s["panes"][0].update(parts=[[None, [7]]]), "bad field"),
    (lambda s: s.update(watermark=1.5), "watermark"),
])
def test_a_bad_snapshot_is_refused_and_the_window_is_unchanged(mutate: Any, message: str) -> None:
    w, _ = _window("timeInterval, intervalDuration(10)")
    w.insert({"id": "a", "ts": 105 * S})
    snap = w.snapshot()
    mutate(snap)
    with pytest.raises(SnapshotError, match=message):
        w.restore(snap)
    assert w.panes() == [(100 * S, 110 * S)]


# --------------------------------------------------------------- bad input


@pytest.mark.parametrize(("tup", "message"), [
    ({"id": "a"}, "no event-time attribute 'ts'"),
    ({"id": "a", "ts": 1.5}, "is a float"),
    ({"id": "a", "ts": math.nan}, "is a float"),
    ({"id": "a", "ts": "100"}, "expected an integer"),
    ({"id": "a", "ts": True}, "expected an integer"),
    ({"id": "a", "ts": -1}, "outside 0..2\\*\\*63-1"),
    ({"id": "a", "ts": EVENT_TIME_MAX + 1}, "outside"),
])
def test_a_bad_event_time_is_rejected_and_leaves_the_window_unchanged(tup: Any, message: str) -> None:
    w, _ = _window("timeInterval, intervalDuration(10)")
    w.insert({"id": "ok", "ts": 105 * S})
    before = w.snapshot()
    with pytest.raises(WindowTupleError, match=message):
        w.insert(tup)
    assert w.snapshot() == before


def test_a_bad_partition_key_is_rejected() -> None:
    w, _ = _window("timeInterval, intervalDuration(10), partitioned", "k")
    with pytest.raises(WindowTupleError, match=r"cannot compute the partition key \(k\) of tuple"):
        w.insert({"id": "a", "ts": 5 * S})
    with pytest.raises(WindowTupleError, match=r"partition key \['unhashable'\] .* is not hashable"):
        w.insert({"id": "a", "ts": 5 * S, "k": ["unhashable"]})
    assert w.panes() == []


def test_a_partitioned_window_needs_a_partitioner_and_an_unpartitioned_one_refuses_it() -> None:
    w = TimeIntervalWindow("timeInterval, intervalDuration(10), partitioned", event_time="ts")
    with pytest.raises(WindowStateError, match="partitioned but has no partitioner"):
        w.insert({"ts": 1})
    with pytest.raises(WindowStateError, match="not partitioned"):
        TimeIntervalWindow("timeInterval, intervalDuration(10)", partition_by="k")


def test_a_batch_error_names_the_tuple() -> None:
    w, _ = _window("timeInterval, intervalDuration(10)")
    with pytest.raises(WindowTupleError, match="tuple 1 of the batch"):
        w.insert_batch([{"id": "a", "ts": 1}, {"id": "b"}])
    assert w.insert_batch([{"id": "c"}], event_times=[2]) == 1


def test_watermarks_that_do_not_advance_are_ignored_and_bad_ones_rejected() -> None:
    w, rec = _window("timeInterval, intervalDuration(10), discardAge(10)")
    w.insert({"id": "a", "ts": 101 * S})
    assert w.watermark(111 * S) is True
    w.insert({"id": "b", "ts": 102 * S})
    assert w.watermark(111 * S) is False
    assert w.watermark(105 * S) is False
    assert [e[0] for e in rec.events] == ["INITIAL_FULL", "TRIGGER"]
    for bad in (math.nan, 1.5, "max", None, EVENT_TIME_MAX + 1):
        with pytest.raises(WatermarkError):
            w.watermark(bad)  # type: ignore[arg-type]
    assert w.watermark_value == 111 * S


def test_punctuation_and_system_time_do_not_drive_panes() -> None:
    w, rec = _window("timeInterval, intervalDuration(10)")
    w.insert({"id": "a", "ts": 1 * S})
    w.punctuate("window")
    w.punctuate("final")
    w.advance_time(10**12)
    assert rec.events == [] and w.next_deadline() is None
    with pytest.raises(ValueError, match="expected 'window' or 'final'"):
        w.punctuate("other")


def test_integer_tick_resolutions() -> None:
    w = TimeIntervalWindow("timeInterval, intervalDuration(10), creationPeriod(5)",
                           event_time="ms", resolution="ms")
    w.insert({"id": "a", "ms": 107_000})
    assert w.panes() == [(100_000, 110_000), (105_000, 115_000)]


def test_an_event_time_function_and_an_explicit_event_time() -> None:
    w = TimeIntervalWindow("timeInterval, intervalDuration(10)", event_time=lambda t: t[1])
    w.insert(("a", 3 * S))
    w.insert(("b", 0), event_time=12 * S)
    assert w.panes() == [(0, 10 * S), (10 * S, 20 * S)]
    bare = TimeIntervalWindow("timeInterval, intervalDuration(10)")
    with pytest.raises(WindowTupleError, match="no event time"):
        bare.insert({"ts": 1})


def test_the_drop_point_is_exact_to_the_tick() -> None:
    w, _ = _window("timeInterval, intervalDuration(10), discardAge(5)")
    w.watermark(120 * S + 7)
    assert w.drop_point == 115 * S + 7
    assert w.insert({"id": "a", "ts": 115 * S + 6}) is False
    assert w.insert({"id": "b", "ts": 115 * S + 7}) is True
    assert w.dropped == 1


@settings(max_examples=200, deadline=None)
@given(d=st.integers(1, 12), p=st.integers(1, 12), a=st.integers(0, 12), partitioned=st.booleans(),
       steps=st.lists(_step, max_size=60), size=st.integers(1, 7))
def test_insert_batch_equals_one_by_one_insertion(d: int, p: int, a: int, partitioned: bool,
                                                  steps: list[Any], size: int) -> None:
    clause = (f"timeInterval, intervalDuration({d / 2}), creationPeriod({p / 2}), discardAge({a / 2})"
              + (", partitioned" if partitioned else ""))
    key = "k" if partitioned else None
    one, rec_one = _window(clause, key)
    many, rec_many = _window(clause, key)
    pending: list[Any] = []
    for i, (kind, sec, k) in enumerate(steps):
        if kind == "tuple":
            tup = {"id": f"t{i}", "ts": sec * S // 2, "k": k}
            one.insert(tup)
            pending.append(tup)
            if len(pending) == size:
                many.insert_batch(pending)
                pending = []
        else:
            many.insert_batch(pending)
            pending = []
            one.watermark(sec * S // 2)
            many.watermark(sec * S // 2)
    many.insert_batch(pending)
    assert rec_many.events == rec_one.events
    assert many.snapshot() == one.snapshot()


@settings(max_examples=300, deadline=None)
@given(d=st.integers(1, 6), p=st.integers(1, 6), a=st.integers(0, 12), partitioned=st.booleans(),
       steps=st.lists(st.one_of(
           st.tuples(st.just("tuple"), st.integers(180, 200), st.sampled_from([0, 1, "k", None]),
                     st.sampled_from(["ok", "ok", "ok", "float", "late", "nokey", "listkey"])),
           st.tuples(st.just("wm"), st.integers(170, 210), st.none(), st.none())), max_size=80),
       size=st.integers(1, 30))
def test_runs_inside_one_period_go_in_at_once_as_one_by_one(
        d: int, p: int, a: int, partitioned: bool, steps: list[Any], size: int) -> None:
    """`_insert_in_one_period` (every run tried, whatever its length): aligned windows
    (duration a multiple of the period), int, str and None keys, and runs it must leave to the
    per-tuple loop (a float or late time, a missing or unhashable key, two periods)."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(_time_interval, "_BULK_RUN", 1)
        _one_period_case(d, p, a, partitioned, steps, size)


def _one_period_case(d: int, p: int, a: int, partitioned: bool, steps: list[Any], size: int) -> None:
    clause = (f"timeInterval, intervalDuration({d * p / 4}), creationPeriod({p / 4}), discardAge({a / 2})"
              + (", partitioned" if partitioned else ""))
    key = "k" if partitioned else None
    one, rec_one = _window(clause, key)
    many, rec_many = _window(clause, key)
    pending: list[Any] = []

    def flush() -> None:
        nonlocal pending
        try:
            many.insert_batch(pending)
        except WindowTupleError as exc:  # the bad tuple's predecessors stay; the rest go on
            rest = pending[getattr(exc, "index", 0) + 1:]
            pending = []
            for t in rest:
                with contextlib.suppress(WindowTupleError):
                    many.insert(t)
        pending = []

    for i, (kind, sec, k, how) in enumerate(steps):
        if kind == "tuple":
            tup: dict[str, Any] = {"id": f"t{i}", "ts": sec * S // 4, "k": k}
            if how == "float":
                tup["ts"] = sec / 4
            elif how == "late":
                tup["ts"] = 0
            elif how == "nokey":
                del tup["k"]
            elif how == "listkey":
                tup["k"] = [k]
            with contextlib.suppress(WindowTupleError):
                one.insert(tup)
            pending.append(tup)
            if len(pending) >= size:
                flush()
        else:
            flush()
            one.watermark(sec * S // 4)
            many.watermark(sec * S // 4)
    flush()
    assert rec_many.events == rec_one.events
    assert many.snapshot() == one.snapshot()
    assert many.dropped == one.dropped


@pytest.mark.parametrize("bad, why", [
    ({"id": "c", "ts": 3}, r"cannot compute the partition key \(k\)"),
    ({"id": "c", "k": 1}, r"no event-time attribute 'ts'"),
    ({"id": "c", "ts": 3.5, "k": 1}, r"event time 3.5 is a float"),
])
def test_insert_batch_reading_attributes_inline_says_what_a_tuple_lacks(bad: dict[str, Any],
                                                                        why: str) -> None:
    """A window keyed and timed by attribute names reads them inline (a subscript, not the
    itemgetter's call): a tuple lacking one, or with a bad time, fails as `insert` says."""
    w, _ = _window("timeInterval, intervalDuration(10), partitioned", "k")
    with pytest.raises(WindowTupleError, match="tuple 1 of the batch: .*" + why):
        w.insert_batch([{"id": "a", "ts": 1, "k": 1}, bad, {"id": "d", "ts": 4, "k": 1}])
    assert [t["id"] for t in w.contents(0, 1)] == ["a"]


def test_insert_batch_stops_at_a_bad_tuple_after_storing_the_ones_before() -> None:
    w, _ = _window("timeInterval, intervalDuration(10), partitioned", "k")
    with pytest.raises(WindowTupleError, match=r"tuple 2 of the batch: partition key \{\} .* not hashable"):
        w.insert_batch([{"id": "a", "ts": 1, "k": 1}, {"id": "b", "ts": 2, "k": 2},
                        {"id": "c", "ts": 3, "k": {}}, {"id": "d", "ts": 4, "k": 1}])
    assert [t["id"] for t in w.contents(0, 1)] == ["a"]
    assert [t["id"] for t in w.contents(0, 2)] == ["b"]
