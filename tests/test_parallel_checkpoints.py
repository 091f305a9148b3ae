"""Checkpoints and failures across worker processes (issue 20): a parallel region inside the
job's ``--checkpoint-dir`` region or a declared consistent region checkpoints its channels
together, restores each channel's own state, and resets (new workers from the last checkpoint)
when an operator in a worker fails or a worker is killed, with nothing lost or repeated.

A merge passes tuples in the order the channels answer, which differs from run to run, so
outputs are compared per key (each key's results in order: what a region keeps) and as sorted
lines (nothing lost, nothing twice).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from riverbed.checkpoint import MemoryStore
from riverbed.core import RestoreRefused
from riverbed.graph import Graph, Operator, Schema, Source
from riverbed.runtime import Job, JobError, VirtualClock
from riverbed.runtime._parallel_wire import channel_of
from riverbed.testing import run_until_crash
from riverbed.windows import EventType, StreamWindowEvent

S = 1_000_000_000
SCHEMA = Schema(sensor="int64", value="int64", seq="int64")


pytestmark = pytest.mark.usefixtures("no_worker_leftovers")


class Readings(Source):
    """A replayable source: ten readings every 0.1 s of the job's clock; its state is the offset."""

    replayable = True

    def __init__(self, n: int, per_tick: int = 10, tick: int = S // 10) -> None:
        self.n, self.per_tick, self.tick = n, per_tick, tick
        self.offset = 0

    async def run(self) -> None:
        ctx: Any = self.context
        while self.offset < self.n:
            i = self.offset
            await ctx.sleep_until((i // self.per_tick + 1) * self.tick)
            self.submit({"sensor": i % 7, "value": i % 13, "seq": i})
            self.offset += 1

    def snapshot(self) -> Any:
        return self.offset

    def restore(self, state: Any) -> None:
        self.offset = state


class PacedReadings(Readings):
    """`Readings` paced from when it starts (or restarts at a restored offset), not from time 0:
    on the real clock (epoch time) the absolute ticks have long passed, so `Readings` would
    emit everything at once and a test waiting to act mid-run would find the job ended."""

    async def run(self) -> None:
        ctx: Any = self.context
        base = ctx.now() - (self.offset // self.per_tick) * self.tick
        while self.offset < self.n:
            i = self.offset
            await ctx.sleep_until(base + (i // self.per_tick + 1) * self.tick)
            self.submit({"sensor": i % 7, "value": i % 13, "seq": i})
            self.offset += 1


class WindowSum(Operator):
    """Per sensor, the sum of each 5 readings; raises once on each reading in ``fail_on`` (once
    over all processes: a marker file in ``marks`` says it did, as a worker's memory is lost
    with it)."""

    window_events = frozenset({EventType.EVICTION})

    def __init__(self, fail_on: set[int] | None = None, marks: Path | None = None) -> None:
        self.fail_on = set(fail_on or ())
        self.marks = marks

    def on_window_event(self, event: StreamWindowEvent[Any], port: int) -> None:
        if event.tuples:
            for t in event.tuples:
                if t["seq"] in self.fail_on and self.marks is not None:
                    try:
                        os.close(os.open(self.marks / str(t["seq"]), os.O_CREAT | os.O_EXCL))
                    except FileExistsError:
                        continue
                    raise ZeroDivisionError(f"injected at reading {t['seq']}")
            self.submit({"sensor": event.partition, "sum": sum(t["value"] for t in event.tuples),
                         "last": event.tuples[-1]["seq"]})


class RunningTotal(Operator):
    """State of its own, per sensor, inside the region: a channel's state is its keys'."""

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
    """A sink whose output is its state: a reset takes back what followed the checkpoint."""

    transactional = True

    def __init__(self) -> None:
        self.rows: list[Any] = []
        self.committed: list[int] = []

    def on_tuple(self, tup: Any, port: int) -> None:
        self.rows.append(tup)

    def snapshot(self) -> Any:
        return list(self.rows)

    def restore(self, state: Any) -> None:
        self.rows = list(state)

    def reset_to_initial_state(self) -> None:
        self.rows = []

    def on_checkpoint_committed(self, checkpoint_id: int) -> None:
        self.committed.append(checkpoint_id)


def build(n: int, out: Output, width: int | None = 2, sums: WindowSum | None = None,
          region: bool = False) -> Graph:
    g = Graph("pckpt")
    src = g.source("readings", Readings(n), schema=SCHEMA)

    def body() -> Any:
        s = g.operator("sums", sums or WindowSum(),
                       [src.window("tumbling, count(5), partitioned", partition_by="sensor")])
        return g.operator("totals", RunningTotal(), [s])

    if width is None:
        totals = body()
    else:
        with g.parallel(width, partition_by="sensor"):
            totals = body()
    g.sink("out", out, [totals])
    if region:
        g.consistent_region(src, name="r", period=0.35)
    return g


def by_key(rows: list[Any]) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = defaultdict(list)
    for r in rows:
        out[r["sensor"]].append(r)
    return dict(out)


def reference(n: int) -> list[Any]:
    out = Output()
    assert run_until_crash(Job(build(n, out, None), clock=VirtualClock()), None)
    return out.rows


def same(rows: list[Any], expected: list[Any]) -> None:
    assert by_key(rows) == by_key(expected)
    assert sorted(map(repr, rows)) == sorted(map(repr, expected))


# ------------------------------------------------------------------ checkpoints



def kill_worker(job: Job, channel: int, killed: list[int]) -> None:
    """kill -9 the worker of ``channel`` of the job's first parallel region (its pid into ``killed``)."""
    pid = job.parallel[0].metrics()[channel].pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    killed.append(pid)


def assert_healed_once(job: Job, channel: int, killed: int) -> None:
    """The kill cost one reset of the region and one restart of the worker, in a new process."""
    assert job.regions[0].metrics.resets == 1
    assert job.parallel[0].restarts == 1
    assert job.parallel[0].metrics()[channel].pid not in (None, killed)

def test_a_checkpoint_holds_each_channels_state_of_every_operator_in_the_region() -> None:
    store = MemoryStore(keep_last=1000)
    out = Output()
    job = Job(build(300, out), clock=VirtualClock(), checkpoints=store, checkpoint_period=0.5)
    assert run_until_crash(job, None)
    same(out.rows, reference(300))
    ids = [info.id for info in store.list()]
    assert len(ids) >= 4 and out.committed == ids
    states = store.load(ids[2]).states
    assert set(states) == {"readings", "sums", "totals", "out"}
    for name in ("sums", "totals"):
        assert states[name]["parallel"] == {"region": "parallel0", "width": 2, "key": "sensor"}
        assert len(states[name]["channels"]) == 2
    # Consistent across channels: every sensor's running total is in the channel its key goes
    # to, and the sink holds exactly the results up to the source's offset.
    totals = [dict(map(tuple, ch["operator"])) for ch in states["totals"]["channels"]]
    assert not set(totals[0]) & set(totals[1])
    offset = states["readings"]["operator"]
    assert all(row["last"] < offset for row in states["out"]["operator"])
    for sensor, total in {k: v for t in totals for k, v in t.items()}.items():
        mine = [r for r in states["out"]["operator"] if r["sensor"] == sensor]
        assert mine and mine[-1]["total"] == total


def test_what_a_channel_sends_after_its_barrier_waits_for_the_other_channels_barrier() -> None:
    """A fast channel's tuples after checkpoint n's barrier must not reach the sink before the
    slow channel's barrier n: the sink's state at n would hold results of readings the source's
    state at n has not emitted yet, and a restore would write them twice."""

    class SlowOnOneChannel(Operator):
        def on_tuple(self, tup: Any, port: int) -> None:
            if tup["sensor"] in (0, 1):  # keys of channel 1 at width 2
                deadline = time.perf_counter() + 0.0005
                while time.perf_counter() < deadline:
                    pass
            self.submit(tup)

    assert {channel_of(k, 2) for k in (0, 1)} == {1} and channel_of(6, 2) == 0
    g = Graph("align")
    src = g.source("readings", Readings(4000, per_tick=50, tick=S // 200), schema=SCHEMA)
    with g.parallel(2, partition_by="sensor"):
        slow = g.operator("slow", SlowOnOneChannel(), [src])
    out = Output()
    g.sink("out", out, [slow])
    store = MemoryStore(keep_last=1000)
    asyncio.run(Job(g, checkpoints=store, checkpoint_period=0.05).run())
    assert sorted(r["seq"] for r in out.rows) == list(range(4000))
    infos = store.list()
    assert len(infos) >= 5
    for info in infos:
        states = store.load(info.id).states
        offset = states["readings"]["operator"]
        assert sorted(r["seq"] for r in states["out"]["operator"]) == list(range(offset)), \
            f"checkpoint {info.id}"


@pytest.mark.parametrize("crash", [7, 19, 33, 52])
def test_a_crash_then_restart_gives_the_uninterrupted_output(crash: int) -> None:
    n = 600
    expected = reference(n)
    store = MemoryStore(keep_last=1000)
    first = Output()
    if run_until_crash(Job(build(n, first), clock=VirtualClock(), checkpoints=store,
                           checkpoint_period=0.35), crash * S // 10):
        same(first.rows, expected)
        return
    second = Output()
    restarted = Job(build(n, second), clock=VirtualClock(), checkpoints=store, checkpoint_period=0.35)
    assert run_until_crash(restarted, None)
    assert restarted.restored_from is not None
    same(second.rows, expected)


@pytest.mark.parametrize("stop", [9, 31])
def test_a_stop_then_restart_gives_the_uninterrupted_output(stop: int) -> None:
    n = 600
    expected = reference(n)
    store = MemoryStore(keep_last=1000)
    first = Output()
    assert run_until_crash(Job(build(n, first), clock=VirtualClock(), checkpoints=store,
                               checkpoint_period=0.35), None, [(stop / 10, Job.stop)])
    newest = store.latest_good()
    assert newest is not None and newest.states["readings"]["operator"] < n
    assert first.rows == newest.states["out"]["operator"], "output after the stop's barrier"
    second = Output()
    restarted = Job(build(n, second), clock=VirtualClock(), checkpoints=store, checkpoint_period=0.35)
    assert run_until_crash(restarted, None)
    assert restarted.restored_from == newest.id
    same(second.rows, expected)


def test_restoring_with_another_width_is_refused_naming_both_widths() -> None:
    store = MemoryStore(keep_last=1000)
    assert not run_until_crash(Job(build(600, Output(), 2), clock=VirtualClock(), checkpoints=store,
                                   checkpoint_period=0.35), 2 * S)
    with pytest.raises(JobError) as info:
        run_until_crash_raising(Job(build(600, Output(), 3), clock=VirtualClock(), checkpoints=store))
    (err,) = info.value.errors
    assert isinstance(err, RestoreRefused)
    assert "checkpointed in 2 channel(s)" in str(err) and "now has width 3" in str(err)
    assert "-p width=2" in str(err)


def run_until_crash_raising(job: Job) -> None:
    from riverbed.runtime import run_virtual

    assert isinstance(job.clock, VirtualClock)
    run_virtual(job.run(), job.clock)


def test_a_checkpoint_taken_without_the_region_restores_into_width_one() -> None:
    n = 600
    store = MemoryStore(keep_last=1000)
    assert not run_until_crash(Job(build(n, Output(), None), clock=VirtualClock(), checkpoints=store,
                                   checkpoint_period=0.35), 2 * S)
    second = Output()
    job = Job(build(n, second, 1), clock=VirtualClock(), checkpoints=store, checkpoint_period=0.35)
    assert run_until_crash(job, None)
    assert job.restored_from is not None
    same(second.rows, reference(n))


# ----------------------------------------------------------------------- resets


def test_an_operator_failing_in_a_worker_resets_the_consistent_region(tmp_path: Path) -> None:
    n = 600
    out = Output()
    job = Job(build(n, out, sums=WindowSum({101, 377}, tmp_path), region=True), clock=VirtualClock(),
              checkpoints=MemoryStore(keep_last=1000))
    assert run_until_crash(job, None)
    assert job.regions[0].metrics.resets == 2
    assert job.parallel[0].restarts == 2
    same(out.rows, reference(n))


def test_a_worker_killed_is_restarted_from_the_last_checkpoint_with_a_transactional_file_sink(
        tmp_path: Path) -> None:
    """kill -9 of a worker mid-run: the job's region resets, new workers restore the last
    checkpoint, and the transactional FileSink's file holds exactly an uninterrupted run's lines."""
    from riverbed.operators import FileSink

    n = 6000
    out_schema = Schema(sensor="int64", sum="int64", last="int64", total="int64")

    def graph(path: Path) -> Graph:
        g = Graph("pkill")
        src = g.source("readings", PacedReadings(n, per_tick=50, tick=S // 100), schema=SCHEMA)
        with g.parallel(2, partition_by="sensor"):
            s = g.operator("sums", WindowSum(),
                           [src.window("tumbling, count(5), partitioned", partition_by="sensor")])
            totals = g.operator("totals", RunningTotal(), [s], [out_schema])
        g.sink("out", FileSink(str(path), format="csv", transactional=True), [totals])
        return g

    ref_path = tmp_path / "reference.csv"
    ref_job = Job(graph(ref_path), checkpoints=MemoryStore(keep_last=1000), checkpoint_period=0.1)
    asyncio.run(ref_job.run())
    expected = ref_path.read_bytes()
    assert expected.count(b"\n") == 7 * (n // 7 // 5)  # whole windows: final flushes none

    path = tmp_path / "out.csv"
    job = Job(graph(path), checkpoints=MemoryStore(keep_last=1000), checkpoint_period=0.1)
    killed: list[int] = []

    async def main() -> None:
        run = asyncio.ensure_future(job.run())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        # Kill once a checkpoint committed and the channel has taken tuples since.
        while not (job.last_checkpoint >= 2 and job.parallel[0].metrics()[1].tuples_in > 600):
            assert loop.time() < deadline and not run.done()
            await asyncio.sleep(0.005)
        kill_worker(job, 1, killed)
        await run

    asyncio.run(main())
    assert_healed_once(job, 1, killed[0])
    got = path.read_bytes()
    assert sorted(got.splitlines()) == sorted(expected.splitlines())
    assert by_key_lines(got) == by_key_lines(expected)


def by_key_lines(data: bytes) -> dict[bytes, list[bytes]]:
    out: dict[bytes, list[bytes]] = defaultdict(list)
    for line in data.splitlines():
        out[line.split(b",")[0]].append(line)
    return dict(out)
