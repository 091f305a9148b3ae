"""Property tests: random clauses and inputs, snapshot/restore, and a naive model."""

from __future__ import annotations

import json
from collections import deque
from typing import Any

import msgpack
from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.windows import StreamWindow, WindowStateError
from tests.window_fuzz import Recorder, apply, clauses, ops


def _build(clause: str, flavor: str) -> StreamWindow[dict[str, Any]]:
    return StreamWindow(clause, flavor=flavor, partition_by="k" if "partitioned" in clause else None)


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
    if window._evictor is not None:
        assert window._total == sum(len(p.tuples) for p in window._parts.values())
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
    fast, slow = _build(clause, flavor), _build(clause, flavor)
    slow._use_fast = False
    rec_fast, rec_slow = Recorder(fast), Recorder(slow)
    fast.register_listener(rec_fast)
    slow.register_listener(rec_slow)
    for w in (fast, slow):
        w.activate(0)
    assert slow._insert == slow._insert_generic
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
