"""Property tests: random clauses and inputs, snapshot/restore, and a naive model."""

from __future__ import annotations

import json
import math
import operator
import struct
from collections import deque
from decimal import Decimal
from typing import Any

import msgpack
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from riverbed.windows import EventType, StreamWindow, WindowStateError, WindowTupleError
from riverbed.windows._delta import make_reader
from riverbed.windows._policy import Delta
from riverbed.windows._timers import Timer, TimerQueue
from tests.window_fuzz import Recorder, apply, clauses, ops


def _build(clause: str, flavor: str, fast: bool = True) -> StreamWindow[dict[str, Any]]:
    return StreamWindow(clause, flavor=flavor, partition_by="k" if "partitioned" in clause else None,
                        fast_paths=fast)


def _run(window: StreamWindow[dict[str, Any]], script: list[tuple[Any, ...]], start: int = 0) -> None:
    for seq, op in enumerate(script, start):
        try:
            apply(window, op, seq)
        except WindowStateError:
            assert op[0] == "t", "only inserting after final may be refused"


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["java", "cpp"]).flatmap(lambda f: st.tuples(st.just(f), clauses(f))),
       st.data())
def test_random_windows_never_crash_and_keep_their_invariants(flavor_clause: tuple[str, str],
                                                              data: st.DataObject) -> None:
    flavor, clause = flavor_clause
    window = _build(clause, flavor)
    rec = Recorder(window)
    window.register_listener(rec)
    window.activate(0)
    _run(window, data.draw(ops(window.is_partitioned)))
    # The total that tupleCount relies on is exactly what the partitions hold.
    if window.config.evictor is not None:
        assert window._state.total == sum(len(p.tuples) for p in window._state.parts.values())
    inserted = [e for e in rec.events if e[0] == "INSERTION"]
    assert all(len(e[2]) == 1 for e in inserted)
    # No tuple leaves a window twice.
    gone = [i for e in rec.events if e[0] in ("EVICTION", "PARTITION_EVICTION") for i in e[2]]
    assert len(gone) == len(set(gone))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["java", "cpp"]).flatmap(lambda f: st.tuples(st.just(f), clauses(f))),
       st.data())
def test_snapshot_restore_continue_equals_an_uninterrupted_run(flavor_clause: tuple[str, str],
                                                               data: st.DataObject) -> None:
    flavor, clause = flavor_clause
    probe = _build(clause, flavor)
    script = data.draw(ops(probe.is_partitioned))
    split = data.draw(st.integers(0, len(script)))

    whole = _build(clause, flavor)
    rec_whole = Recorder(whole)
    whole.register_listener(rec_whole)
    whole.activate(0)
    _run(whole, script[:split])
    before = len(rec_whole.events)
    _run(whole, script[split:], split)

    first = _build(clause, flavor)
    first.activate(0)
    _run(first, script[:split])
    raw = msgpack.packb(first.snapshot())
    second = _build(clause, flavor)
    rec_second = Recorder(second)
    second.register_listener(rec_second)
    second.restore(msgpack.unpackb(raw))
    _run(second, script[split:], split)
    assert rec_second.events == rec_whole.events[before:]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["java", "cpp"]).flatmap(lambda f: st.tuples(st.just(f), clauses(f))),
       st.data())
def test_fast_paths_raise_the_same_events_as_the_generic_engine(flavor_clause: tuple[str, str],
                                                                data: st.DataObject) -> None:
    flavor, clause = flavor_clause
    fast, slow = _build(clause, flavor), _build(clause, flavor, fast=False)
    rec_fast, rec_slow = Recorder(fast), Recorder(slow)
    fast.register_listener(rec_fast)
    slow.register_listener(rec_slow)
    for w in (fast, slow):
        w.activate(0)
    assert slow.tuple_inserter() == slow._insert_generic
    script = data.draw(ops(fast.is_partitioned))
    _run(fast, script)
    _run(slow, script)
    assert rec_fast.events == rec_slow.events


class NaiveSliding:
    """Sliding windows by definition, recomputed from the full history (unpartitioned)."""

    def __init__(self, evict: str, size: int) -> None:
        self.evict, self.size = evict, size
        self.history: list[tuple[int, int, int]] = []  # (id, value, arrival)

    def contents(self, now: int) -> list[int]:
        if self.evict == "count":
            return [i for i, _, _ in self.history[-self.size:]]
        if self.evict == "time":
            return [i for i, _, at in self.history if now - at <= self.size * 1_000_000_000]
        # delta, values in order: everything within `size` of the newest value
        newest = self.history[-1][1] if self.history else 0
        return [i for i, v, _ in self.history if newest - v <= self.size]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["count", "time", "delta"]), st.integers(1, 4), st.sampled_from(["java", "cpp"]),
       st.lists(st.tuples(st.integers(0, 3), st.sampled_from([0, 300, 900, 1500])), max_size=60))
def test_sliding_contents_agree_with_the_naive_model(evict: str, size: int, flavor: str,
                                                     arrivals: list[tuple[int, int]]) -> None:
    clause = {"count": f"sliding, count({size})", "time": f"sliding, time({size})",
              "delta": f"sliding, delta(v, {size})"}[evict]
    window: StreamWindow[dict[str, Any]] = StreamWindow(clause, flavor=flavor)
    naive = NaiveSliding(evict, size)
    seen: list[list[int]] = []
    window.register_listener(lambda e: seen.append([t["id"] for t in e.tuples])
                             if e.type.name == "TRIGGER" else None)
    window.activate(0)
    value = 0
    for i, (step, dt_ms) in enumerate(arrivals):
        window.advance_time(window.now + dt_ms * 1_000_000)
        value += step  # increasing values: the delta model's precondition
        window.insert({"id": i, "v": value})
        naive.history.append((i, value, window.now))
        assert seen[-1] == naive.contents(window.now)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 6), st.sampled_from(["java", "cpp"]),
       st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 9)), max_size=80))
def test_tumbling_count_flushes_consecutive_chunks(size: int, flavor: str,
                                                   arrivals: list[tuple[str, int]]) -> None:
    window: StreamWindow[dict[str, Any]] = StreamWindow(
        f"tumbling, count({size}), partitioned", flavor=flavor, partition_by="k")
    flushed: dict[str, list[list[int]]] = {}
    window.register_listener(lambda e: flushed.setdefault(e.partition, []).append(
        [t["id"] for t in e.tuples]) if e.type.name == "EVICTION" else None)
    per_key: dict[str, list[int]] = {}
    for i, (key, _) in enumerate(arrivals):
        window.insert({"id": i, "k": key})
        per_key.setdefault(key, []).append(i)
    for key, ids in per_key.items():
        chunks = [ids[j:j + size] for j in range(0, len(ids) - size + 1, size)]
        assert flushed.get(key, []) == chunks
        assert [t["id"] for t in window.contents(key)] == ids[len(chunks) * size:]


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 5), st.lists(st.integers(-3, 6), max_size=60))
def test_tumbling_delta_starts_a_window_when_the_oldest_is_exceeded(bound: int, steps: list[int]) -> None:
    window: StreamWindow[dict[str, Any]] = StreamWindow(f"tumbling, delta(v, {bound})")
    flushed: list[list[int]] = []
    window.register_listener(lambda e: flushed.append([t["id"] for t in e.tuples])
                             if e.type.name == "EVICTION" else None)
    expected: list[list[int]] = []
    current: deque[tuple[int, int]] = deque()
    value = 100
    for i, step in enumerate(steps):
        value += step
        if current and value - current[0][1] > bound:
            expected.append([j for j, _ in current])
            current.clear()
        current.append((i, value))
        window.insert({"id": i, "v": value})
    assert flushed == expected
    assert json.loads(json.dumps(window.snapshot()))["partitions"][0]["tuples"] == [
        {"id": j, "v": v} for j, v in current]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["java", "cpp"]).flatmap(lambda f: st.tuples(st.just(f), clauses(f))),
       st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 12)), max_size=60),
       st.booleans())
def test_insert_batch_equals_one_by_one(flavor_clause: tuple[str, str], rows: list[tuple[str, int]],
                                        listen: bool) -> None:
    flavor, clause = flavor_clause
    one, many = _build(clause, flavor), _build(clause, flavor)
    rec_one, rec_many = Recorder(one), Recorder(many)
    if listen:
        one.register_listener(rec_one)
        many.register_listener(rec_many)
    for w in (one, many):
        w.activate(0)
    tuples = [{"id": i, "k": k, "v": v} for i, (k, v) in enumerate(rows)]
    for t in tuples:
        one.insert(t)
    many.insert_batch(tuples)
    assert rec_one.events == rec_many.events
    assert one.snapshot() == many.snapshot()


# ------------------------------------------------- batches, delta values, timers

_ODD_VALUES = st.one_of(st.integers(0, 12), st.floats(0, 12, width=32), st.sampled_from(
    [None, "7", float("nan"), float("inf"), True, 2**1100]))


def _batch_ops(partitioned: bool) -> st.SearchStrategy[list[tuple[Any, ...]]]:
    row = st.tuples(st.sampled_from("abc"), st.integers(0, 12) | _ODD_VALUES)
    batch_op = st.tuples(st.just("batch"), st.lists(row, max_size=8))
    tuple_op = st.tuples(st.just("t"), row)
    time_op = st.tuples(st.just("at"), st.sampled_from([0, 1, 250, 999, 1000, 1001, 2500]))
    punct_op = st.tuples(st.just("punct"), st.sampled_from(["window", "window", "final"]))
    choices = [batch_op, batch_op, tuple_op, time_op, time_op, punct_op]
    if partitioned:
        choices.append(st.tuples(st.just("evict"), st.sampled_from("abc")))
    return st.lists(st.one_of(*choices), max_size=30)


def _apply_batch_op(window: StreamWindow[dict[str, Any]], op: tuple[Any, ...], seq: int) -> str:
    """Apply one op; return what it raised (type and message), '' when nothing."""
    try:
        if op[0] == "batch":  # a list: the window's compiled batch path, where it has one
            window.insert_batch([{"id": seq * 100 + i, "k": k, "v": v} for i, (k, v) in enumerate(op[1])])
        elif op[0] == "t":
            window.insert({"id": seq * 100, "k": op[1][0], "v": op[1][1]})
        else:
            apply(window, op, seq)
    except (WindowStateError, WindowTupleError, OverflowError) as exc:
        failed_at = f" at tuple {window.batch_failed_at}" if op[0] == "batch" else ""
        return f"{type(exc).__name__}: {exc}{failed_at}"
    return ""


@st.composite
def _fast_path_clauses(draw: st.DrawFn) -> tuple[str, str]:
    """A flavor and a clause that has a fast insert and batch path (see ``_fastpath``)."""
    flavor = draw(st.sampled_from(["java", "cpp"]))
    n = draw(st.integers(1, 4))
    m = draw(st.integers(1, 4))
    d = draw(st.integers(0, 4))
    t = draw(st.sampled_from(["1", "0.5", "2.5"]))
    clause = draw(st.sampled_from([
        f"tumbling, count({n})", f"tumbling, delta(v, {d})", f"tumbling, time({t})", "tumbling, punct()",
        f"sliding, count({n}), count({m})", f"sliding, time({t}), count({m})",
        f"sliding, delta(v, {d}), count({m})"]))
    return flavor, clause + (", partitioned" if draw(st.booleans()) else "")


@settings(max_examples=400, deadline=None)
@given(st.one_of(_fast_path_clauses(),
                 st.sampled_from(["java", "cpp"]).flatmap(lambda f: st.tuples(st.just(f), clauses(f)))),
       st.booleans(), st.sampled_from([None, "int32", "float64", "float32", "timestamp", "decimal64"]),
       st.data())
def test_fast_batches_and_inserts_leave_the_state_of_the_generic_engine(
        flavor_clause: tuple[str, str], listen: bool, v_type: str | None, data: st.DataObject) -> None:
    """Batches (from generators, with bad tuples) between clock moves, on the fast paths and
    on the generic engine inserting one by one: same errors, state, timers (and events)."""
    flavor, clause = flavor_clause
    types = {"v": v_type} if v_type else None
    fast, slow = (StreamWindow(clause, flavor=flavor, attribute_types=types, fast_paths=compiled,
                               partition_by="k" if "partitioned" in clause else None)
                  for compiled in (True, False))
    rec_fast, rec_slow = Recorder(fast), Recorder(slow)
    if listen:
        fast.register_listener(rec_fast)
        slow.register_listener(rec_slow)
    for w in (fast, slow):
        w.activate(0)
    script = data.draw(_batch_ops(fast.is_partitioned))
    for seq, op in enumerate(script):
        assert _apply_batch_op(fast, op, seq) == _apply_batch_op(slow, op, seq)
        assert fast.snapshot() == slow.snapshot()
        assert fast.next_deadline() == slow.next_deadline()
    assert rec_fast.events == rec_slow.events


def _old_reader_check(kind: str, v: Any) -> Any:
    """The delta reader's validation before it had a fast lane (reference model)."""
    if kind == "timestamp":
        if isinstance(v, bool) or not isinstance(v, int):
            raise WindowTupleError("timestamp")
        return v
    if kind == "decimal":
        if isinstance(v, bool) or not isinstance(v, (Decimal, int)):
            raise WindowTupleError("decimal")
        if isinstance(v, Decimal) and not v.is_finite():
            raise WindowTupleError("finite")
        return v
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise WindowTupleError("number")
    if kind == "int":
        if not isinstance(v, int):
            raise WindowTupleError("int")
        return v
    if math.isnan(v):
        raise WindowTupleError("nan")
    if isinstance(v, float) and math.isinf(v):
        raise WindowTupleError("finite")
    if kind == "float32":
        return struct.unpack("f", struct.pack("f", float(v)))[0]
    if kind == "float":
        return float(v)
    return v


class _Float(float):
    pass


class _Int(int):
    pass


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(["number", "int", "float", "float32", "timestamp", "decimal"]),
       st.one_of(st.integers(), st.integers(2**1020, 2**1030).map(lambda i: -i if i % 2 else i),
                 st.floats(), st.decimals(), st.booleans(), st.text(max_size=2), st.none(),
                 st.floats(allow_nan=False).map(_Float), st.integers().map(_Int)))
def test_delta_reader_accepts_and_rejects_what_the_full_validation_does(kind: str, value: Any) -> None:
    read = make_reader(Delta("v", 1), kind, "eviction", operator.itemgetter("v"))
    try:
        expected: Any = _old_reader_check(kind, value)
    except (WindowTupleError, OverflowError) as exc:
        with pytest.raises(type(exc)):
            read({"v": value})
        return
    got = read({"v": value})
    assert type(got) is type(expected)
    assert got == expected or (got != got and expected != expected)
    with pytest.raises(WindowTupleError, match="the tuple has no attribute 'v'"):
        read({"w": value})


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(
    st.tuples(st.just("arm"), st.integers(0, 20)),
    st.tuples(st.just("rearm"), st.integers(0, 30), st.integers(0, 20)),
    st.tuples(st.just("cancel"), st.integers(0, 30)),
    st.tuples(st.just("pop"), st.integers(0, 20))), max_size=60))
def test_timer_queue_fires_in_due_then_arming_order(ops_: list[tuple[Any, ...]]) -> None:
    """The heap + in-order lane against a sorted list of (due, arming order) entries."""
    queue = TimerQueue()
    timers: list[Timer] = []
    model: dict[int, tuple[int, int]] = {}  # timer index -> (due, arming order), while armed
    now = 0
    for order, op in enumerate(ops_):
        if op[0] == "arm":
            due = now + op[1]
            timers.append(queue.arm(due, lambda: None))
            model[len(timers) - 1] = (due, order)
        elif op[0] == "rearm" and op[1] < len(timers) and op[1] not in model:
            queue.rearm(timers[op[1]], now + op[2])
            model[op[1]] = (now + op[2], order)
        elif op[0] == "cancel" and op[1] < len(timers):
            timers[op[1]].cancel()
            model.pop(op[1], None)
        elif op[0] == "pop":
            now += op[1]
            expected = sorted((v, i) for i, v in model.items() if v[0] <= now)
            fired = []
            while (timer := queue.pop_due(now)) is not None:
                fired.append(timers.index(timer))
            assert fired == [i for _, i in expected]
            for i in fired:
                del model[i]
        live = sorted(model.values())
        assert queue.next_due() == (live[0][0] if live else None)


@pytest.mark.parametrize("clause", [
    "tumbling, count(3)", "tumbling, delta(v, 2)", "tumbling, time(1)", "tumbling, punct()",
    "sliding, count(3), count(2)", "sliding, time(1), count(2)", "sliding, delta(v, 2), count(2)"])
@pytest.mark.parametrize("partitioned", [False, True])
def test_insert_functions_kept_by_a_host_follow_the_window(clause: str, partitioned: bool) -> None:
    """``tuple_inserter()``/``inserter()`` asked for once keep working after restore, reset and
    final: an old function hands over to the window's current one."""
    clause += ", partitioned" if partitioned else ""
    w: StreamWindow[dict[str, Any]] = StreamWindow(clause, partition_by="k" if partitioned else None)
    w.activate(0)
    insert, insert_batch = w.tuple_inserter(), w.inserter()
    insert({"id": 0, "k": "a", "v": 1})
    snap = w.snapshot()
    insert_batch([{"id": 1, "k": "a", "v": 1}])
    w.restore(snap)
    insert({"id": 2, "k": "a", "v": 1})
    assert [t["id"] for t in w.contents("a" if partitioned else None)] == [0, 2]
    w.reset_to_initial_state()
    insert_batch([{"id": 3, "k": "a", "v": 1}])
    assert [t["id"] for t in w.contents("a" if partitioned else None)] == [3]
    w.final_mark()
    with pytest.raises(WindowStateError, match="final punctuation"):
        insert({"id": 4, "k": "a", "v": 1})
    with pytest.raises(WindowStateError, match="final punctuation"):
        insert_batch([{"id": 5, "k": "a", "v": 1}])


_FAST_PATH_CLAUSES = [
    "tumbling, count(3)", "tumbling, time(1)", "tumbling, delta(v, 2)", "tumbling, punct()",
    "sliding, count(3), count(2)", "sliding, time(1), count(2)", "sliding, delta(v, 3), count(2)",
    "sliding, count(2)", "sliding, time(2.5), time(1)",
]
_TYPE_SETS = [{EventType.INSERTION}, {EventType.EVICTION}, {EventType.TRIGGER, EventType.INITIAL_FULL},
              {EventType.INSERTION, EventType.TRIGGER}, set(), set(EventType)]


@pytest.mark.parametrize("clause", [*_FAST_PATH_CLAUSES,
                                    *(c + ", partitioned" for c in _FAST_PATH_CLAUSES)])
@pytest.mark.parametrize("types", _TYPE_SETS, ids=lambda t: "+".join(sorted(e.name for e in t)) or "none")
@settings(max_examples=25, deadline=None)
@given(flavor=st.sampled_from(["java", "cpp"]), fast=st.booleans(), data=st.data())
def test_a_listener_restricted_to_some_types_sees_exactly_those_events(
        clause: str, types: set[EventType], flavor: str, fast: bool, data: st.DataObject) -> None:
    everything, some = _build(clause, flavor, fast), _build(clause, flavor, fast)
    rec_all, rec_some = Recorder(everything), Recorder(some)
    everything.register_listener(rec_all)
    some.register_listener(rec_some, types)
    for w in (everything, some):
        w.activate(0)
    script = data.draw(ops(everything.is_partitioned))
    _run(everything, script)
    _run(some, script)
    assert rec_some.events == [e for e in rec_all.events if EventType(e[0]) in types]


@pytest.mark.parametrize("clause", [*_FAST_PATH_CLAUSES,
                                    *(c + ", partitioned" for c in _FAST_PATH_CLAUSES)])
@settings(max_examples=25, deadline=None)
@given(flavor=st.sampled_from(["java", "cpp"]), fast=st.booleans(),
       chosen=st.lists(st.sampled_from([*_TYPE_SETS, None]), min_size=2, max_size=4), data=st.data())
def test_listeners_restricted_to_different_types_are_called_in_registration_order(
        clause: str, flavor: str, fast: bool, chosen: list[set[EventType] | None],
        data: st.DataObject) -> None:
    # Each event type keeps its own list of listeners; whatever mix of restrictions they have,
    # every event goes to the listeners that asked for its type, in the order they registered.
    w = _build(clause, flavor, fast)
    calls: list[tuple[int, EventType, Any, list[Any]]] = []
    for index, types in enumerate(chosen):
        def listener(event: Any, index: int = index) -> None:
            calls.append((index, event.type, event.partition, list(event.tuples)))
        w.register_listener(listener, types)
    w.activate(0)
    _run(w, data.draw(ops(w.is_partitioned)))
    expected = []
    i = 0
    while i < len(calls):  # group the calls by event: one event's calls share type and contents
        _, etype, key, tuples = calls[i]
        wanted = [n for n, types in enumerate(chosen) if types is None or etype in types]
        got = [n for n, *_ in calls[i:i + len(wanted)]]
        assert got == wanted, f"{etype.name} went to {got}, wanted {wanted}"
        assert all(c[1:] == (etype, key, tuples) for c in calls[i:i + len(wanted)])
        expected.extend(wanted)
        i += len(wanted)
    assert [c[0] for c in calls] == expected


@pytest.mark.parametrize("clause", [*_FAST_PATH_CLAUSES,
                                    *(c + ", partitioned" for c in _FAST_PATH_CLAUSES)])
@pytest.mark.parametrize("flavor", ["java", "cpp"])
def test_a_listener_that_reenters_the_window_does_not_change_what_later_listeners_see(
        clause: str, flavor: str) -> None:
    # The fast paths reuse one INSERTION (and EVICTION) event object per window; a listener
    # that inserts into the window while handling one must not change the event that the
    # listeners after it then receive. The generic path builds every event afresh.
    def run(fast: bool) -> list[Any]:
        w = _build(clause, flavor, fast)
        seen: list[Any] = []
        nested: list[int] = []

        def reenter(event: Any) -> None:
            if event.type in (EventType.INSERTION, EventType.EVICTION) and len(nested) < 4 \
                    and event.tuples[0]["id"] < 100:
                nested.append(100 + len(nested))
                w.insert({"id": nested[-1], "k": event.tuples[0]["k"], "v": 1})

        w.register_listener(reenter)
        w.register_listener(lambda e: seen.append((e.type.name, e.partition, [t["id"] for t in e.tuples])))
        w.activate(0)
        for i in range(12):
            w.insert({"id": i, "k": "ab"[i % 2], "v": i % 4})
        return seen

    fast, generic = run(True), run(False)
    assert fast == generic
    assert any(ids and ids[0] >= 100 for _, _, ids in fast)  # the nested insertions happened


@pytest.mark.parametrize("clause", ["sliding, count(2), count(1)", "tumbling, count(3)"])
def test_an_event_kept_past_its_call_never_shows_a_later_tuple(clause: str) -> None:
    w = _build(clause, "java")
    kept: list[tuple[Any, list[int]]] = []
    w.register_listener(lambda e: kept.append((e, [t["id"] for t in e.tuples])),
                        [EventType.INSERTION, EventType.EVICTION])
    w.activate(0)
    for i in range(6):
        w.insert({"id": i, "k": "a", "v": 0})
    assert len(kept) >= 6
    for event, delivered in kept:  # valid during its call only; afterwards never another tuple
        assert [t["id"] for t in event.tuples] in ([], delivered)


def test_a_listener_type_must_be_an_event_type() -> None:
    w = _build("sliding, count(2)", "java")
    with pytest.raises(TypeError, match="EventType members, got 'TRIGGER'"):
        w.register_listener(lambda e: None, ["TRIGGER"])  # type: ignore[list-item]


class _FailingRecorder(Recorder):
    """Records events, and raises on the ``fail_on``-th one (each failing once)."""

    def __init__(self, window: StreamWindow[Any], fail_on: set[int]) -> None:
        super().__init__(window)
        self.fail_on, self.seen = fail_on, 0

    def handle_event(self, event: Any) -> None:
        self.seen += 1
        super().handle_event(event)
        if self.seen in self.fail_on:
            raise RuntimeError(f"listener failed at event {self.seen}")


@settings(max_examples=300, deadline=None)
@given(st.one_of(_fast_path_clauses(),
                 st.sampled_from(["java", "cpp"]).flatmap(lambda f: st.tuples(st.just(f), clauses(f)))),
       st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 12)), max_size=60),
       st.sets(st.integers(1, 12), max_size=3), st.booleans())
@example(("java", "tumbling, count(2), partitioned"), [("a", i) for i in range(9)], {1, 3}, False)
def test_a_hosts_batch_insert_names_the_failing_tuple_and_goes_on_as_one_by_one(
        flavor_clause: tuple[str, str], rows: list[tuple[str, int]], fail_on: set[int],
        insertions: bool) -> None:
    # What a host does: insert_tuples, and when it raises, note the tuple at batch_failed_at
    # and go on after it; one by one, a failing insert names its tuple directly.
    flavor, clause = flavor_clause
    one, many = _build(clause, flavor), _build(clause, flavor)
    rec_one, rec_many = _FailingRecorder(one, set()), _FailingRecorder(many, set())
    # Without INSERTION events (as a runtime host listens), tumbling count windows stay inline.
    types = None if insertions else [t for t in EventType if t is not EventType.INSERTION]
    one.register_listener(rec_one, types)
    many.register_listener(rec_many, types)
    for w in (one, many):
        w.activate(0)
    for rec in (rec_one, rec_many):  # listeners fail from the first insertion on
        rec.fail_on, rec.seen = set(fail_on), 0
    tuples = [{"id": i, "k": k, "v": v} for i, (k, v) in enumerate(rows)]
    # (A listener failing inside an update can leave some windows unable to go on: whatever
    # is raised, one by one and in a batch must raise it at the same tuples.)
    failed_one = []
    for t in tuples:
        try:
            one.insert(t)
        except Exception as exc:
            failed_one.append((t["id"], type(exc).__name__))
    failed_many, start = [], 0
    while start < len(tuples):
        try:
            many.insert_tuples(tuples[start:])
            break
        except Exception as exc:
            i = start + many.batch_failed_at
            failed_many.append((tuples[i]["id"], type(exc).__name__))
            start = i + 1
    assert failed_many == failed_one
    assert rec_many.events == rec_one.events
    if not failed_one:
        assert many.snapshot() == one.snapshot()


@settings(max_examples=400, deadline=None)
@given(st.one_of(_fast_path_clauses(),
                 st.sampled_from(["java", "cpp"]).flatmap(lambda f: st.tuples(st.just(f), clauses(f)))),
       st.sets(st.integers(1, 12), max_size=3), st.booleans(), st.data())
def test_a_failing_listener_never_leaves_the_window_unable_to_go_on(
        flavor_clause: tuple[str, str], fail_on: set[int], insertions: bool, data: st.DataObject) -> None:
    # A host that routes a listener's error and goes on (an error port) must find the window
    # whole: whatever follows raises only the listener's own errors or the window's typed ones.
    flavor, clause = flavor_clause
    window = _build(clause, flavor)
    rec = _FailingRecorder(window, set())
    window.register_listener(rec, None if insertions else
                             [t for t in EventType if t is not EventType.INSERTION])
    window.activate(0)
    rec.fail_on = set(fail_on)
    for seq, op in enumerate(data.draw(ops(window.is_partitioned))):
        try:
            apply(window, op, seq)
        except WindowStateError:
            assert op[0] == "t", "only inserting after final may be refused"
        except (RuntimeError, WindowTupleError) as exc:
            assert isinstance(exc, WindowTupleError) or "listener failed" in str(exc), exc
    if window.config.evictor is not None:
        assert window._state.total == sum(len(p.tuples) for p in window._state.parts.values())


@pytest.mark.parametrize(("clause", "flavor", "values", "fail_on"), [
    ("sliding, delta(v, 0), count(2)", "cpp", [0, 1, 1, 0, 1], 3),  # an eviction's listener fails
])
def test_a_window_goes_on_after_a_listener_failed_mid_eviction(clause: str, flavor: str,
                                                              values: list[int], fail_on: int) -> None:
    window = _build(clause, flavor)
    rec = _FailingRecorder(window, set())
    window.register_listener(rec)
    window.activate(0)
    rec.fail_on = {fail_on}
    failures = 0
    for i, v in enumerate(values):
        try:
            window.insert({"id": i, "k": "a", "v": v})
        except RuntimeError as exc:
            assert "listener failed" in str(exc)
            failures += 1
    assert failures == 1
    part = window._state.parts[None]
    assert len(part.tuples) == len(part.values)


def test_an_emptied_java_partition_keeps_little_memory() -> None:
    # The Java flavor keeps every partition it ever had (spec R25); each kept two empty deques
    # (delta values, arrival times) its window never used: 1.7 KB a key ever seen.
    import tracemalloc

    from riverbed.windows import StreamWindow

    w: StreamWindow[dict[str, int]] = StreamWindow("tumbling, count(1), partitioned", flavor="java",
                                                   partition_by="k")
    w.activate(0)
    for i in range(1000):  # (the dict of partitions grows in steps: past its first ones)
        w.insert({"k": -1 - i})
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(20_000):
            w.insert({"k": i})
        per_key = (tracemalloc.get_traced_memory()[0] - before) / 20_000
    finally:
        tracemalloc.stop()
    assert len(w.partitions()) == 21_000
    assert per_key < 700, per_key
