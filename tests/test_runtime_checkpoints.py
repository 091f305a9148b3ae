"""Aligned checkpoints through the runtime: barriers, operator and window state, restore on start.

The store here is the in-memory `MemoryStore`; the RocksDB store has its own tests. A crash is a job
aborted at an arbitrary virtual instant; the restarted job must finish with exactly the
output of a run that never crashed.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.checkpoint import Checkpoint, MemoryStore
from riverbed.graph import Graph, Operator, Schema, Source
from riverbed.runtime import Job, JobError, VirtualClock, run_virtual
from riverbed.testing import run_until_crash
from riverbed.windows import EventType, StreamWindowEvent

S = 1_000_000_000


def _all(store: MemoryStore) -> dict[int, Checkpoint]:
    """Every checkpoint the store holds (the tests keep them all: keep_last=1000)."""
    return {info.id: store.load(info.id) for info in store.list()}


class Readings(Source):
    """A replayable source: its state is the offset of the next reading."""

    replayable = True

    def __init__(self, n: int) -> None:
        self.n = n
        self.offset = 0

    async def run(self) -> None:
        ctx: Any = self.context
        while self.offset < self.n:
            i = self.offset
            await ctx.sleep_until((i // 10 + 1) * S // 10)  # ten readings every 0.1 s
            self.submit({"sensor": i % 4, "value": i % 13, "seq": i})
            self.offset += 1

    def snapshot(self) -> Any:
        return self.offset

    def restore(self, state: Any) -> None:
        self.offset = state


class WindowSum(Operator):
    def on_window_event(self, event: StreamWindowEvent[Any], port: int) -> None:
        if event.type is EventType.EVICTION and event.tuples:
            self.submit({"sensor": event.partition, "sum": sum(t["value"] for t in event.tuples),
                         "last": event.tuples[-1]["seq"]})


class RunningTotal(Operator):
    """A stateful custom operator: a running total per sensor."""

    def __init__(self) -> None:
        self.totals: dict[int, int] = {}

    def on_tuple(self, tup: Any, port: int) -> None:
        total = self.totals.get(tup["sensor"], 0) + tup["sum"]
        self.totals[tup["sensor"]] = total
        self.submit({**tup, "total": total})

    def snapshot(self) -> Any:
        return [[k, v] for k, v in self.totals.items()]

    def restore(self, state: Any) -> None:
        self.totals = dict(state)


class Output(Operator):
    """A sink whose output is its state: what a checkpoint restores is what was 'written'."""

    def __init__(self) -> None:
        self.rows: list[Any] = []
        self.committed: list[int] = []

    def on_tuple(self, tup: Any, port: int) -> None:
        self.rows.append(tup)

    def snapshot(self) -> Any:
        return list(self.rows)

    def restore(self, state: Any) -> None:
        self.rows = list(state)

    def on_checkpoint_committed(self, checkpoint_id: int) -> None:
        self.committed.append(checkpoint_id)


def build(n: int, out: Output) -> Graph:
    g = Graph("ckpt")
    src = g.source("readings", Readings(n), schema=Schema(sensor="int64", value="int64", seq="int64"))
    sums = g.operator("sums", WindowSum(), [src.window("tumbling, count(5), partitioned",
                                                       partition_by="sensor")])
    totals = g.operator("totals", RunningTotal(), [sums])
    g.sink("out", out, [totals])
    return g



def test_checkpoints_commit_periodically_and_hold_every_operator() -> None:
    store = MemoryStore(keep_last=1000)
    out = Output()
    job = Job(build(400, out), clock=VirtualClock(), checkpoints=store, checkpoint_period=0.5)
    assert run_until_crash(job, None)
    saved = _all(store)
    assert len(saved) >= 5
    assert out.committed == sorted(saved)
    state = saved[3].states
    assert set(state) == {"readings", "sums", "totals", "out"}
    # Consistency: the sink holds exactly the results of the readings the source had emitted.
    offset = state["readings"]["operator"]
    assert all(row["last"] < offset for row in state["out"]["operator"])
    window = state["sums"]["windows"][0]
    assert window["format"] == "riverbed.window/1"


@settings(max_examples=25, deadline=None)
@given(crash=st.integers(min_value=1, max_value=60))
def test_a_crash_at_any_instant_then_restart_gives_the_uninterrupted_output(crash: int) -> None:
    n = 600
    reference = Output()
    assert run_until_crash(Job(build(n, reference), clock=VirtualClock()), None)

    store = MemoryStore(keep_last=1000)
    first = Output()
    crash_at = crash * S // 10  # somewhere in the 6 s the run takes
    completed = run_until_crash(Job(build(n, first), clock=VirtualClock(), checkpoints=store,
                              checkpoint_period=0.35), crash_at)
    if completed:
        assert first.rows == reference.rows
        return
    second = Output()
    restarted = Job(build(n, second), clock=VirtualClock(), checkpoints=store, checkpoint_period=0.35)
    assert run_until_crash(restarted, None)
    assert second.rows == reference.rows, f"crash at {crash_at / S} s, restored from " \
                                          f"{restarted.restored_from}"


def test_restoring_a_checkpoint_of_another_graph_is_refused() -> None:
    store = MemoryStore(keep_last=1000)
    store.save(1, {"readings": None}, job="other", time_ns=0)
    job = Job(build(10, Output()), clock=VirtualClock(), checkpoints=store)
    with pytest.raises(JobError, match="has no state for operator"):
        run_virtual(job.run(), job.clock)  # type: ignore[arg-type]


def test_a_fan_in_operator_aligns_barriers_from_both_connections() -> None:
    class Merge(Operator):
        def __init__(self) -> None:
            self.seen = 0

        def on_tuple(self, tup: Any, port: int) -> None:
            self.seen += 1
            self.submit(tup)

        def snapshot(self) -> Any:
            return self.seen

    store = MemoryStore(keep_last=1000)
    g = Graph("fanin")
    a = g.source("a", Readings(200))
    b = g.source("b", Readings(300))
    m = g.operator("merge", Merge(), [[a, b]])
    out = Output()
    g.sink("out", out, [m])
    job = Job(g, clock=VirtualClock(), checkpoints=store, checkpoint_period=0.5)
    assert run_until_crash(job, None)
    for ckpt in _all(store).values():
        s = ckpt.states
        # Aligned: merge saw exactly what both sources had emitted at their barriers.
        assert s["merge"]["operator"] == s["a"]["operator"] + s["b"]["operator"]
        assert len(s["out"]["operator"]) == s["merge"]["operator"]


def test_the_graph_says_what_checkpoints_can_guarantee() -> None:
    class Transactional(Output):
        transactional = True

    assert build(10, Output()).freeze().guarantee() == (
        "at-least-once", ["sink 'out' is not transactional"])
    assert build(10, Transactional()).freeze().guarantee() == ("exactly-once", [])
    g = Graph("lossy")
    g.sink("out", Transactional(), [g.source("s", ListLike())])
    assert g.freeze().guarantee() == ("at-most-once", ["source 's' cannot replay"])


class ListLike(Source):
    def generate(self) -> Any:
        return iter([])
