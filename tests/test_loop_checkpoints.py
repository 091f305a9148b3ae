"""Checkpoints of a graph with a feedback loop: the barrier that comes back round the loop, and
what is in flight on the loop at a checkpoint (`riverbed.core._loops`)."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from riverbed.checkpoint import MemoryStore
from riverbed.graph import Graph, Operator, Schema, Source
from riverbed.operators import Beacon
from riverbed.runtime import Job, VirtualClock
from riverbed.testing import run_until_crash

ROW = Schema(seq="int64", looped="boolean")
N = 20_000


class Merge(Operator):
    def on_tuple(self, tup: Any, port: int) -> None:
        self.submit(tup)


class Once(Operator):
    """Every tuple goes out, and round the loop once more."""

    def on_tuple(self, tup: Any, port: int) -> None:
        self.submit(tup, 0)
        if not tup["looped"]:
            self.submit({**tup, "looped": True}, 1)


class Rows(Operator):
    """A sink whose rows are its state."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, bool]] = []

    def on_tuple(self, tup: Any, port: int) -> None:
        self.rows.append((tup["seq"], tup["looped"]))

    def snapshot(self) -> Any:
        return list(self.rows)

    def restore(self, state: Any) -> None:
        self.rows = [tuple(r) for r in state]


def loop_graph(sink: Rows, trigger: int | None = None) -> Graph:
    g = Graph("loop")
    src = g.source("src", Beacon(iterations=N, trigger_count=trigger,
                                 output={"seq": lambda i: i, "looped": False}), schema=ROW)
    merged = g.operator("merge", Merge(), [src])
    out, back = g.operator("once", Once(), [merged], [ROW, ROW])
    g.add_input("merge", back.feedback())
    g.sink("sink", sink, [out])
    return g


def _uninterrupted() -> Counter[tuple[int, bool]]:
    whole = Rows()
    assert run_until_crash(Job(loop_graph(whole), clock=VirtualClock()), None)
    return Counter(whole.rows)


def test_checkpoints_of_a_loop_commit_and_change_nothing() -> None:
    """The barrier back round the loop started a second alignment: the looped tuples were held
    from then on, the next checkpoint failed ("barrier of checkpoint 2 while aligning
    checkpoint 1") and the region reset, losing what was in flight on the loop."""
    store = MemoryStore(keep_last=100)
    rows = Rows()
    job = Job(loop_graph(rows, trigger=3000), clock=VirtualClock(), checkpoints=store,
              checkpoint_period=100)
    assert run_until_crash(job, None)
    assert Counter(rows.rows) == _uninterrupted()
    assert [i.id for i in store.list()] == [1, 2, 3, 4, 5, 6]  # each trigger, none failed
    assert job.regions[0].metrics.resets == 0


@pytest.mark.parametrize("checkpoint", [1, 3, 6])
def test_a_restart_from_a_checkpoint_of_a_loop_loses_nothing_in_flight_on_it(checkpoint: int) -> None:
    """What was in flight on the loop was in no state: 2,048 looped rows were lost."""
    store = MemoryStore(keep_last=100)
    assert run_until_crash(Job(loop_graph(Rows(), trigger=3000), clock=VirtualClock(),
                               checkpoints=store, checkpoint_period=100), None)
    taken = store.load(checkpoint)
    assert taken.states["merge"].get("loop")  # something was in flight at each
    one = MemoryStore(keep_last=100)
    one.save(taken.id, taken.states, job=taken.job, time_ns=taken.time_ns)
    again = Rows()
    assert run_until_crash(Job(loop_graph(again, trigger=3000), clock=VirtualClock(taken.time_ns),
                               checkpoints=one, checkpoint_period=100), None)
    assert Counter(again.rows) == _uninterrupted()


class Readings(Source):
    """As fast as the graph takes them: a file read, say."""

    def generate(self) -> Any:
        return ({"seq": i, "looped": False} for i in range(N))


def test_a_loop_that_sends_more_than_it_takes_in_does_not_stall() -> None:
    """Each operator of the loop waited for room in the next one's inbox: with both full,
    neither moved again (0 % CPU, for good). A feedback connection's batches now never wait."""
    g = Graph("loop")
    src = g.source("src", Readings(), schema=ROW)
    merged = g.operator("merge", Merge(), [src])
    out, back = g.operator("once", Once(), [merged], [ROW, ROW])
    g.add_input("merge", back.feedback())
    rows = Rows()
    g.sink("sink", rows, [out])

    async def main() -> None:
        await asyncio.wait_for(Job(g, clock=VirtualClock()).run(), timeout=60)

    asyncio.run(main())
    assert Counter(seq for seq, looped in rows.rows if not looped) == Counter(range(N))
    assert any(looped for _, looped in rows.rows)


def test_a_feedback_connection_whose_barrier_comes_first_is_not_waited_for() -> None:
    """A feedback connection may bring the region's barrier before the operator took its
    state (here it closes no loop: its upstream is fed by another source). The barrier was
    dropped, then waited for after the snapshot: no checkpoint ever committed, and the region
    reset until it gave up."""
    def graph(sink: Rows, region: bool) -> Graph:
        g = Graph("early")
        s1 = g.source("s1", Beacon(iterations=200, period=0.1,
                                   output={"seq": lambda i: i, "looped": False}), schema=ROW)
        s2 = g.source("s2", Beacon(iterations=2000, period=0.01,
                                   output={"seq": lambda i: -i, "looped": True}), schema=ROW)
        b = g.operator("b", Merge(), [s2])
        a = g.operator("a", Merge(), [s1])
        g.add_input("a", b.feedback())
        g.sink("sink", sink, [a])
        if region:
            g.consistent_region([s1, s2], period=0.5, drain_timeout=2.0)
        return g

    plain = Rows()
    assert run_until_crash(Job(graph(plain, False), clock=VirtualClock()), None)
    sink = Rows()
    store = MemoryStore(keep_last=100)
    job = Job(graph(sink, True), clock=VirtualClock(), checkpoints=store)
    assert run_until_crash(job, None)
    assert len(store.list()) >= 30 and job.regions[0].metrics.resets == 0
    # (what b sends after a ended is dropped, as without a region)
    assert Counter(sink.rows) == Counter(plain.rows)


class CountingMerge(Merge):
    """Counts what it passes on; its snapshot is its live counter (no copy)."""

    def __init__(self) -> None:
        self.seen = {"n": 0}

    def on_tuple(self, tup: Any, port: int) -> None:
        self.seen["n"] += 1
        self.submit(tup)

    def snapshot(self) -> Any:
        return self.seen

    def restore(self, state: Any) -> None:
        self.seen = dict(state)


def test_a_loop_heads_live_snapshot_is_taken_when_its_state_is_not_after_the_round_trip() -> None:
    """The state waits for the barrier to come round the loop before it is reported: a snapshot
    returning a live structure took in the looped items meanwhile, and the restore, which hands
    those items over again, counted them twice."""
    def graph(merge: CountingMerge) -> Graph:
        g = Graph("loop")
        src = g.source("src", Beacon(iterations=N, trigger_count=3000,
                                     output={"seq": lambda i: i, "looped": False}), schema=ROW)
        merged = g.operator("merge", merge, [src])
        out, back = g.operator("once", Once(), [merged], [ROW, ROW])
        g.add_input("merge", back.feedback())
        g.sink("sink", Rows(), [out])
        return g

    whole = CountingMerge()
    assert run_until_crash(Job(graph(whole), clock=VirtualClock()), None)
    store = MemoryStore(keep_last=100)
    assert run_until_crash(Job(graph(CountingMerge()), clock=VirtualClock(), checkpoints=store,
                               checkpoint_period=100), None)
    taken = store.load(3)
    one = MemoryStore(keep_last=100)
    one.save(taken.id, taken.states, job=taken.job, time_ns=taken.time_ns)
    again = CountingMerge()
    assert run_until_crash(Job(graph(again), clock=VirtualClock(taken.time_ns), checkpoints=one,
                               checkpoint_period=100), None)
    assert again.seen == whole.seen
