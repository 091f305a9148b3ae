"""Aligned checkpoints through the runtime: barriers, operator and window state, restore on start.

The store here is the in-memory `MemoryStore`; the RocksDB store has its own tests. A crash is a job
aborted at an arbitrary virtual instant; the restarted job must finish with exactly the
output of a run that never crashed.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.checkpoint import Checkpoint, MemoryStore
from riverbed.graph import Graph, Operator, Punct, Schema, Source
from riverbed.runtime import Job, JobError, VirtualClock, run_virtual
from riverbed.testing import ListSource, run_until_crash
from riverbed.windows import EventType, StreamWindowEvent
from tests.test_checkpoint_failures import Ticks

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
    store.save(1, {"readings": None}, job="ckpt", time_ns=0)  # this job's name, not its graph
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


@settings(max_examples=25, deadline=None)
@given(stop=st.integers(min_value=1, max_value=58))
def test_a_clean_stop_then_restart_gives_the_uninterrupted_output(stop: int) -> None:
    """Issue 16.1: with checkpoints, a stop suspends the job at a checkpoint it takes (no final,
    no window flushed), so a restart continues: nothing lost, nothing twice."""
    n = 600
    reference = Output()
    assert run_until_crash(Job(build(n, reference), clock=VirtualClock()), None)

    store = MemoryStore(keep_last=1000)
    first = Output()
    stop_at = stop / 10  # seconds, somewhere in the 6 s the run takes
    assert run_until_crash(Job(build(n, first), clock=VirtualClock(), checkpoints=store,
                               checkpoint_period=0.35), None, [(stop_at, Job.stop)])
    newest = store.latest_good()
    assert newest is not None
    if newest.states["readings"]["operator"] < n:  # stopped before the source's end
        assert not any(newest.states["out"]["finals"]), "the stop's checkpoint holds a drained sink"
        assert first.rows == newest.states["out"]["operator"], "output after the stop's barrier"
    second = Output()
    restarted = Job(build(n, second), clock=VirtualClock(), checkpoints=store, checkpoint_period=0.35)
    assert run_until_crash(restarted, None)
    assert restarted.restored_from == newest.id
    assert second.rows == reference.rows, f"stopped at {stop_at} s, restored from {newest.id}"


def test_a_stop_takes_a_checkpoint_and_none_after_it() -> None:
    store = MemoryStore(keep_last=1000)
    job = Job(build(600, Output()), clock=VirtualClock(), checkpoints=store, checkpoint_period=1.0)
    assert run_until_crash(job, None, [(2.5, Job.stop)])
    ids = [info.id for info in store.list()]
    assert ids == [1, 2, 3]  # at 1 s and 2 s, then the stop's at 2.5 s
    assert 240 <= store.load(3).states["readings"]["operator"] <= 250  # the offset at the stop


def _generating_holder_graph(holder: Operator, out: Output) -> Graph:
    """A holding operator that generates watermarks itself (``event_time`` of its own, with a
    minimum gap), then event-time panes: a restore must not send a watermark its gap forbids."""
    from riverbed.graph import EventTime
    from riverbed.operators import Aggregate, Count, IntervalStart

    class Jittered(Readings):
        """Event times (``ts``, ms) 10 ms apart, each up to 27 ms late: out of order."""

        async def run(self) -> None:
            ctx: Any = self.context
            while self.offset < self.n:
                i = self.offset
                await ctx.sleep_until(i * S // 100)
                self.submit({"seq": i, "ts": i * 10 + (i * 37 % 4) * 9})
                self.offset += 1

    g = Graph("gen")
    src = g.source("readings", Jittered(300), schema=Schema(seq="int64", ts="int64"))
    held = g.operator("hold", holder, [src], event_time=EventTime.of("ts", resolution="ms",
                                                                    minimum_gap=0.025))
    panes = g.operator("panes", Aggregate({"n": Count(), "start": IntervalStart()}),
                       [held.window("timeInterval, intervalDuration(0.05)")])
    g.sink("out", out, [panes])
    return g


@pytest.mark.parametrize("holder", ["throttle", "delay"])
def test_restoring_a_holding_operator_that_generates_watermarks_from_any_checkpoint(holder: str) -> None:
    """Issue 16.5: the held items a restored Throttle/Delay sends follow the runner's restored
    watermark state (minimum gap included), from every checkpoint of a run."""
    from riverbed.operators import Delay, Throttle

    def make() -> Operator:
        return Throttle(60.0) if holder == "throttle" else Delay(0.25)

    reference = Output()
    assert run_until_crash(Job(_generating_holder_graph(make(), reference), clock=VirtualClock()), None)
    store = MemoryStore(keep_last=1000)
    assert run_until_crash(Job(_generating_holder_graph(make(), Output()), clock=VirtualClock(),
                               checkpoints=store, checkpoint_period=0.15), None)
    checkpoints = _all(store)
    assert len(checkpoints) > 10
    for cid, ckpt in checkpoints.items():
        if not ckpt.states["hold"]["operator"]["held"]:
            continue
        one = MemoryStore()
        one.save(cid, ckpt.states, job=ckpt.job, time_ns=ckpt.time_ns)
        again = Output()
        # Restarted later than the checkpoint, as after a crash: its held items are all due.
        job = Job(_generating_holder_graph(make(), again), clock=VirtualClock(ckpt.time_ns + S // 2),
                  checkpoints=one)
        assert run_until_crash(job, None)
        assert again.rows == reference.rows, f"restored from checkpoint {cid}"


def test_a_stop_while_a_source_waits_on_backpressure_loses_nothing(tmp_path: Any) -> None:
    """Issue 16.1, found by the SIGTERM crash test: a stop cancels an async source that waits
    on a full inbox in the middle of a flush; what it had not delivered yet was dropped while
    its state (and so the stop's checkpoint) counted it as emitted."""
    from riverbed.operators import FileSource

    path = tmp_path / "in.csv"
    path.write_text("".join(f"{i},{i % 4},{i % 13}\n" for i in range(9000)))
    schema = Schema(seq="int64", sensor="int64", value="int64")

    def graph(out: Output) -> Graph:
        g = Graph("bp")
        src = g.source("read", FileSource(str(path), format="csv", schema=schema), schema=schema)
        g.sink("out", out, [src], queue_batches=1)  # one batch waiting: the source blocks
        return g

    store = MemoryStore(keep_last=1000)
    first = Output()
    assert run_until_crash(Job(graph(first), clock=VirtualClock(), checkpoints=store), None,
                           [(0.0, Job.stop)])
    stopped = store.latest_good()
    assert stopped is not None and stopped.states["read"]["operator"]["tuples"] < 9000
    assert [r["seq"] for r in stopped.states["out"]["operator"]] == \
        list(range(stopped.states["read"]["operator"]["tuples"]))
    second = Output()
    assert run_until_crash(Job(graph(second), clock=VirtualClock(), checkpoints=store), None)
    assert [r["seq"] for r in second.rows] == list(range(9000))


def test_a_cancelled_flush_keeps_what_it_did_not_deliver() -> None:
    import asyncio

    from riverbed.core import OutputPort, OutputPortMetrics
    from riverbed.runtime._channel import Inbox
    from riverbed.runtime._runner import Delivery, deliver

    async def main() -> list[Any]:
        full, free = Inbox(1), Inbox(100)
        out = OutputPort(None, OutputPortMetrics(), lambda tup, why: None)
        delivery = Delivery()
        delivery.targets = [(free, 0), (full, 0)]
        await full.put(0, ["blocker"])
        out.buf.extend([1, 2])
        out.control(Punct.WINDOW)
        out.buf.extend([3])
        task = asyncio.ensure_future(deliver(out, delivery))
        await asyncio.sleep(0)  # it delivered [1, 2] to `free` and waits on `full`
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        got_full = [await full.get()]
        again = asyncio.ensure_future(deliver(out, delivery))
        while not again.done():
            got_full.append(await full.get())
        await again
        while len(full._items):
            got_full.append(await full.get())
        got_free = []
        while len(free._items):
            got_free.append(await free.get())
        return [got_free, got_full]

    got_free, got_full = run_virtual(main(), VirtualClock())
    assert [p for _, p in got_free] == [[1, 2], Punct.WINDOW, [3]]  # [1, 2] once, not twice
    assert [p for _, p in got_full] == [["blocker"], [1, 2], Punct.WINDOW, [3]]


class _FailsAt3(Operator):
    def on_tuple(self, tup: Any, port: int) -> None:
        if tup["x"] == 3:
            raise ValueError("three")


def test_run_until_crash_raises_a_failure_of_the_job_itself() -> None:
    # It returned False, which a test reads as "the crash it asked for happened".
    def job() -> Job:
        g = Graph("fails")
        s = g.source("s", ListSource([{"x": i} for i in range(5)]))
        g.sink("k", _FailsAt3(), [s])
        return Job(g, clock=VirtualClock())

    with pytest.raises(JobError, match="three"):
        run_until_crash(job(), None)
    with pytest.raises(JobError, match="three"):
        run_until_crash(job(), 10**12)  # it failed before the crash was due


def test_a_source_waiting_for_the_clock_sends_its_barrier_at_once() -> None:
    # An idle source (items at 0 s and 3 s) and a busy one into a Union, then 1 s panes. The
    # idle source's barrier went out only when it woke, and the Union, aligning, held the busy
    # source's tuples until then: with checkpoints every 0.45 s the panes were [(1 s, 6)]
    # instead of 11, 10, 10 (a fuzz review).
    from riverbed.operators import Aggregate, Count, Union
    from riverbed.testing import ListSink, at

    def build(sink: ListSink) -> Graph:
        g = Graph("idle")
        busy = g.source("busy", ListSource([x for i in range(30) for x in (at(0.05 + i / 10), {"i": i})]))
        idle = g.source("idle", ListSource([{"i": -1}, at(3.0), {"i": -2}]))
        u = g.operator("union", Union(), [busy, idle])
        agg = g.operator("agg", Aggregate({"n": Count()}), [u.window("tumbling, time(1)")])
        g.sink("sink", sink, [agg])
        return g

    panes = []
    for kwargs in ({}, {"checkpoints": MemoryStore(), "checkpoint_period": 0.45}):
        sink = ListSink()
        job = Job(build(sink), clock=VirtualClock(), **kwargs)  # type: ignore[arg-type]
        run_virtual(job.run(), job.clock)  # type: ignore[arg-type]
        panes.append([(t, x["n"]) for x, t in zip(sink.items, sink.times, strict=True)
                      if isinstance(x, dict)])
    assert panes[0] == [(1_000_000_000, 11), (2_000_000_000, 10), (3_000_000_000, 10)]
    assert panes[1] == panes[0]


# ------------------------------------------------------- a snapshot that stays live


class _Gen(Source):
    replayable = True

    def __init__(self, n: int) -> None:
        self.n, self.i = n, 0

    def generate(self) -> Any:
        while self.i < self.n:
            self.i += 1
            yield {"i": self.i}
            if self.i % 5000 == 0:
                self.context.request_checkpoint()

    def snapshot(self) -> Any:
        return self.i

    def restore(self, state: Any) -> None:
        self.i = state


class _LiveCounter(Operator):
    """Its snapshot is its live dict, which it goes on changing after the barrier."""

    def __init__(self) -> None:
        self.state: dict[str, Any] = {"n": 0, "seen": []}

    def on_tuple(self, tup: Any, port: int) -> None:
        self.state["n"] += 1
        self.state["seen"].append(tup["i"])
        self.submit(tup)

    def snapshot(self) -> Any:
        return self.state

    def restore(self, state: Any) -> None:
        self.state = {"n": state["n"], "seen": list(state["seen"])}


class _Behind(Operator):
    """A sink: the barrier reaches it after the counter, which takes more tuples meanwhile."""

    def on_tuple(self, tup: Any, port: int) -> None:
        pass


def test_what_an_operator_does_after_its_barrier_stays_out_of_the_checkpoint() -> None:
    # The region held each reported state by reference until every member reported; a
    # snapshot returning the live dict took the tuples after the barrier in (a restart counted
    # them twice, exit 0).
    g = Graph("live")
    src = g.source("gen", _Gen(200_000))
    g.sink("behind", _Behind(), [g.operator("count", _LiveCounter(), [src])])
    store = MemoryStore(keep_last=1000)
    assert run_until_crash(Job(g, clock=VirtualClock(), checkpoints=store), None)
    checkpoints = [store.load(c.id).states for c in store.list()]
    assert len(checkpoints) > 3
    for states in checkpoints:
        counted = states["count"]["operator"]
        assert counted["n"] == states["gen"]["operator"] == len(counted["seen"])


class _SlowStore(MemoryStore):
    """A store whose save takes 0.3 s of the event loop (a big state, a slow disk)."""

    def __init__(self) -> None:
        super().__init__(keep_last=100)
        self.saved_at: list[float] = []

    def save(self, checkpoint_id: int, states: Any, *, job: str, time_ns: int) -> None:
        import time

        self.saved_at.append(time.monotonic())
        time.sleep(0.3)  # the save itself is what is slow here (not a wait for something)
        super().save(checkpoint_id, states, job=job, time_ns=time_ns)


def test_a_save_longer_than_the_period_is_followed_by_as_long_without_one() -> None:
    # Saves run on the event loop: with a 0.3 s save and a 0.1 s period the next checkpoint
    # started as soon as one committed, and the job had the loop a tenth of the time.
    import asyncio

    from riverbed.operators import Beacon
    from riverbed.runtime import RealClock

    logged: list[dict[str, Any]] = []

    class Log:
        def info(self, event: str, **fields: Any) -> None:
            logged.append({"event": event, **fields})

        warning = error = info

    g = Graph("slow")
    g.sink("out", _Behind(), [g.source("beat", Beacon(iterations=150, period=0.01))])
    store = _SlowStore()
    job = Job(g, clock=RealClock(), checkpoints=store, checkpoint_period=0.1, logger=Log())
    asyncio.run(job.run())
    gaps = [b - a for a, b in itertools.pairwise(store.saved_at)]
    assert len(gaps) >= 2 and min(gaps) >= 0.55, gaps  # each save, then as long without one
    assert [e["event"] for e in logged].count("checkpoint_slow") == 1


class _Deep(Operator):
    """A state nested 600 levels deep (a linked list of [value, next] cells)."""

    def __init__(self) -> None:
        self.cells: Any = None
        for i in range(600):
            self.cells = [i, self.cells]

    def on_tuple(self, tup: Any, port: int) -> None:
        self.cells = [tup["i"], self.cells[1]]

    def snapshot(self) -> Any:
        return self.cells

    def restore(self, state: Any) -> None:
        self.cells = state


def test_a_state_nested_deeper_than_python_recurses_to_copy_is_still_saved() -> None:
    # Copying the operator's state at its barrier recursed once a level: 600 levels failed the
    # job at its first checkpoint ("maximum recursion depth exceeded"), which the store saves.
    g = Graph("deep")
    g.sink("deep", _Deep(), [g.source("gen", _Gen(20_000))])
    store = MemoryStore(keep_last=1000)
    assert run_until_crash(Job(g, clock=VirtualClock(), checkpoints=store), None)
    assert len(store.list()) >= 3


class _NaiveDelay(Operator):
    """Sends each tuple on a second later from a call_at() timer, with no snapshot/restore."""

    def on_tuple(self, tup: Any, port: int) -> None:
        self.context.call_at(self.context.now() + S, lambda: self.submit(tup))


def test_timers_no_checkpoint_holds_and_timers_final_drops_are_told() -> None:
    # Both lost tuples silently: timers are not in checkpoints (a restart dropped those
    # pending), and the ones pending when final ended the operator never fired.
    logged: list[dict[str, Any]] = []

    class Log:
        def info(self, event: str, **fields: Any) -> None:
            logged.append({"event": event, **fields})

        warning = error = info

    g = Graph("timers")
    sink = _Behind()
    g.sink("out", sink, [g.operator("delay", _NaiveDelay(), [g.source("src", Ticks(20))])])
    job = Job(g, clock=VirtualClock(), checkpoints=MemoryStore(), checkpoint_period=0.5, logger=Log())
    run_virtual(job.run(), job.clock)  # type: ignore[arg-type]
    told = {e["event"]: e for e in logged if e["event"].startswith("operator_timers")}
    assert told["operator_timers_not_checkpointed"]["operator"] == "delay"
    assert told["operator_timers_dropped"]["operator"] == "delay"
    assert told["operator_timers_dropped"]["timers"] == 10  # the last second's tuples


class _DueNow(Operator):
    """At tuple 5 sets a timer due now (and one due a nanosecond later)."""

    def on_tuple(self, tup: Any, port: int) -> None:
        if tup["i"] == 5:
            now = self.context.now()
            self.context.call_at(now, lambda: self.submit({"i": -1}))
            self.context.call_at(now + 1, lambda: self.submit({"i": -2}))
        self.submit(tup)


def test_a_timer_already_due_when_the_inputs_end_fires_before_final() -> None:
    # The source's tuples and final came at one instant: the timer due then was dropped with
    # the core, silently.
    from riverbed.testing import ListSink

    g = Graph("due")
    sink = ListSink()
    g.sink("out", sink, [g.operator("x", _DueNow(), [g.source("src", _Gen(20))])])
    job = Job(g, clock=VirtualClock())
    run_virtual(job.run(), job.clock)  # type: ignore[arg-type]
    assert [t["i"] for t in sink.tuples].count(-1) == 1 and -2 not in [t["i"] for t in sink.tuples]
    assert sink.items[-1] is Punct.FINAL
