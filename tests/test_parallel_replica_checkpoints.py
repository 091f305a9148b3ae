"""Replicated sources in a consistent region (issue 20): a source inside a parallel region runs
as one replica per channel, in the channel's worker process, and may start a consistent region.

The job's region asks every worker to start each checkpoint; each replica reports its position
with its channel's operators and emits the barrier between two batches; the barrier aligns at
the merge. A reset (a worker killed with kill -9) and a restart of the job restore every replica
to its checkpointed position: the output is exactly an uninterrupted width-1 run's.

Where a test needs a replica mid-run at a known point, the replica of channel 1 stops at a gate
(an event shared with the test through the fork) and the test awaits the gate, so no timing is
guessed. Outputs are compared per key (each key's results in order) and as sorted lines, as in
test_parallel_checkpoints.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from riverbed.checkpoint import MemoryStore, RocksDBStore
from riverbed.graph import Graph, Operator, Schema, Source
from riverbed.operators import FileSink
from riverbed.runtime import Job
from riverbed.runtime._parallel_wire import channel_of
from tests.test_parallel_checkpoints import (
    Output,
    RunningTotal,
    WindowSum,
    assert_healed_once,
    by_key,
    by_key_lines,
    kill_worker,
    same,
)

SCHEMA = Schema(sensor="int64", value="int64", seq="int64")
OUT_SCHEMA = Schema(sensor="int64", sum="int64", last="int64", total="int64")
SENSORS = 7
FORK = multiprocessing.get_context("fork")


@pytest.fixture(autouse=True)
def _open_gate(no_worker_leftovers: None) -> Iterator[None]:
    """The gate cleared after each test, before the leftovers are looked for."""
    yield
    _GATE.clear()


@dataclass
class Gate:
    """Where channel 1's replica waits: at position ``at`` (``after_commit``: ``at`` positions
    after it heard of its first committed checkpoint). Once over every process: a replica forked
    after the gate was reached passes it."""

    at: int
    after_commit: bool = False
    reached: Any = field(default_factory=FORK.Event)
    go: Any = field(default_factory=FORK.Event)


# The gate is not an attribute of the source: a worker copies its operators (deep), and events
# shared by fork cannot be copied.
_GATE: list[Gate] = []


class Feed(Source):
    """Readings 0..n-1 (sensor i % 7); a replica scans them all and emits its channel's sensors.
    Replayable: its state is the index of the next reading, advanced before each is emitted, so
    a snapshot between two batches covers exactly what was emitted."""

    replayable = True

    def __init__(self, n: int) -> None:
        self.n = n
        self.next = 0
        self.heard: int | None = None  # where it was when it heard of a commit (not state)

    def generate(self) -> Any:
        ctx: Any = self.context
        me, width = ctx.channel, ctx.width
        gate = _GATE[0] if _GATE and me == 1 else None
        while self.next < self.n:
            i = self.next
            self.next = i + 1
            if channel_of(i % SENSORS, width) != me:
                continue
            if gate is not None and not gate.reached.is_set():
                base = self.heard if gate.after_commit else 0
                if base is not None and i >= base + gate.at:
                    gate.reached.set()
                    gate.go.wait()
            yield {"sensor": i % SENSORS, "value": i % 13, "seq": i}

    def snapshot(self) -> Any:
        return self.next

    def restore(self, state: Any) -> None:
        self.next = state

    def on_checkpoint_committed(self, checkpoint_id: int) -> None:
        if self.heard is None:
            self.heard = self.next


def build(width: int | None, n: int, sink: Operator, *, region: bool = True,
          period: float = 0.05, processes: int | None = None) -> Graph:
    """Feed -> per-sensor sums of 5 -> running totals (both with state per channel) -> sink;
    the feed inside the parallel region (``width`` None: no region, one source) of at most
    ``processes`` worker processes."""
    g = Graph("replicas")

    def body() -> Any:
        src = g.source("feed", Feed(n), schema=SCHEMA)
        sums = g.operator("sums", WindowSum(),
                          [src.window("tumbling, count(5), partitioned", partition_by="sensor")])
        return src, g.operator("totals", RunningTotal(), [sums], [OUT_SCHEMA])

    if width is None:
        src, totals = body()
    else:
        with g.parallel(width, partition_by="sensor", processes=processes):
            src, totals = body()
    g.sink("out", sink, [totals])
    if region:
        g.consistent_region(src, name="r", period=period)
    return g


def reference(n: int) -> list[Any]:
    out = Output()
    asyncio.run(Job(build(None, n, out, region=False)).run())
    assert len(out.rows) == n // 5
    return out.rows


async def _until_gate(run: asyncio.Future[Any], gate: Gate) -> None:
    """Wait until channel 1's replica reached the gate (it blocks there), or fail if the job
    ended first."""
    reached = asyncio.ensure_future(asyncio.to_thread(gate.reached.wait, 300))
    try:
        await asyncio.wait({run, reached}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not reached.done():
            gate.reached.set()  # let the thread go
    if run.done():
        run.result()
        pytest.fail("the job ended before channel 1's replica reached its gate: give it more input")
    assert reached.result()


# ------------------------------------------------------------------------ clean runs


@pytest.mark.parametrize("width", [2, 3])
def test_replicas_checkpoint_consistently_and_give_the_one_source_output(width: int,
                                                                        tmp_path: Path) -> None:
    n = 35_000
    expected = reference(n)
    out = Output()
    with RocksDBStore(tmp_path / "ckpt", keep_last=1000) as store:
        job = Job(build(width, n, out, period=0.02), checkpoints=store)
        asyncio.run(job.run())
        same(out.rows, expected)
        positions = consistent(store, expected, width)
        assert positions and out.committed == [i.id for i in store.list()]
    assert [m.tuples_in for m in job.channel_metrics()] == [0] * width, "nothing was split"


def consistent(store: Any, expected: list[Any], width: int) -> list[list[int]]:
    """Every checkpoint in ``store`` holds each channel's state of the region's operators, and
    the sink's state is exactly the results of the readings each replica had emitted (below its
    position) and nothing of the others. Each checkpoint's replica positions."""
    positions = []
    for info in store.list():
        states = store.load(info.id).states
        for name in ("feed", "sums", "totals"):
            assert states[name]["parallel"] == {"region": "parallel0", "width": width, "key": "sensor"}
            assert len(states[name]["channels"]) == width
        at = [ch["operator"] for ch in states["feed"]["channels"]]
        upto = [r for r in expected if r["last"] < at[channel_of(r["sensor"], width)]]
        assert by_key(states["out"]["operator"]) == by_key(upto), f"checkpoint {info.id}"
        positions.append(at)
    return positions


def test_a_replicated_source_takes_part_in_the_jobs_checkpoint_dir_region() -> None:
    """Without a declared region, ``--checkpoint-dir`` makes one over the whole job, replicas
    included (it was refused before); a checkpoint asked while channel 1's replica is mid-run
    (held at its gate) is taken there."""
    n = 7_000
    expected = reference(n)
    out = Output()
    store = MemoryStore(keep_last=1000)
    gate = Gate(3_500)
    _GATE.append(gate)
    job = Job(build(2, n, out, region=False), checkpoints=store)

    async def main() -> None:
        run = asyncio.ensure_future(job.run())
        await _until_gate(run, gate)
        assert job.trigger_checkpoint() is not None
        gate.go.set()
        await run

    asyncio.run(main())
    same(out.rows, expected)
    (at,) = consistent(store, expected, 2)
    assert 3_500 <= at[1] < n


# ----------------------------------------------------------------------------- kill -9


def test_a_worker_killed_mid_run_restores_every_replica_to_its_checkpoint(tmp_path: Path) -> None:
    """kill -9 of channel 1's worker while its replica is mid-run, after a checkpoint committed
    and it emitted more since: the region resets, new workers restore each replica's position,
    and the transactional file holds exactly an uninterrupted width-1 run's lines."""
    n = 210_000
    ref = tmp_path / "reference.csv"
    asyncio.run(Job(build(1, n, FileSink(str(ref), format="csv"), region=False)).run())
    expected = ref.read_bytes()
    assert expected.count(b"\n") == n // 5

    path = tmp_path / "out.csv"
    gate = Gate(7_000, after_commit=True)
    _GATE.append(gate)
    killed: list[int] = []
    at_kill: list[int | None] = []
    with RocksDBStore(tmp_path / "ckpt", keep_last=1000) as store:
        job = Job(build(2, n, FileSink(str(path), format="csv", transactional=True)),
                  checkpoints=store)

        async def main() -> None:
            run = asyncio.ensure_future(job.run())
            await _until_gate(run, gate)
            at_kill.append(job.regions[0].last_committed)
            kill_worker(job, 1, killed)
            await run

        asyncio.run(main())
        assert_healed_once(job, 1, killed[0])
        assert at_kill[0] is not None, "the replica heard of a commit, so one was committed"
        states = store.load(at_kill[0]).states
        position = states["feed"]["channels"][1]["operator"]
        assert position < n, "the checkpoint restored holds channel 1's replica mid-run"
    got = path.read_bytes()
    assert sorted(got.splitlines()) == sorted(expected.splitlines())
    assert by_key_lines(got) == by_key_lines(expected)


# ----------------------------------------------------------------- stop, then restart


def test_a_stop_then_restart_of_the_job_continues_each_replica_where_it_was(tmp_path: Path) -> None:
    """A stop suspends the job at a checkpoint: each replica serves the stop's barrier and ends
    without final; a new job restores every replica's position from RocksDB and the two runs
    together give the uninterrupted output."""
    n = 70_000
    expected = reference(n)
    gate = Gate(20_000)
    _GATE.append(gate)
    first = Output()
    with RocksDBStore(tmp_path / "ckpt", keep_last=1000) as store:
        # No periodic checkpoint comes first: the stop's is taken after the gate.
        job = Job(build(2, n, first, period=600.0), checkpoints=store)

        async def main() -> None:
            run = asyncio.ensure_future(job.run())
            await _until_gate(run, gate)
            job.stop()
            gate.go.set()
            await run

        asyncio.run(main())
        assert job.suspended
        newest = store.latest_good()
        assert newest is not None
        position = newest.states["feed"]["channels"][1]["operator"]
        assert 20_000 <= position < n, "channel 1's replica stopped mid-run, after the gate"
        assert first.rows == newest.states["out"]["operator"], "no output after the stop's barrier"
        assert len(first.rows) < len(expected)
    second = Output()
    with RocksDBStore(tmp_path / "ckpt", keep_last=1000) as store:
        restarted = Job(build(2, n, second, period=600.0), checkpoints=store)
        asyncio.run(restarted.run())
        assert restarted.restored_from == newest.id
    same(second.rows, expected)


# ------------------------------------------------- a replica beside a stream from outside


class Extra(Source):
    """A replayable source in the job's process whose readings are split into the region."""

    replayable = True

    def __init__(self, n: int) -> None:
        self.n = n
        self.next = 0

    def generate(self) -> Any:
        while self.next < self.n:
            i = self.next
            self.next = i + 1
            yield {"sensor": i % SENSORS, "value": -1, "seq": EXTRA + i}

    def snapshot(self) -> Any:
        return self.next

    def restore(self, state: Any) -> None:
        self.next = state


class Pass(Operator):
    def on_tuple(self, tup: Any, port: int) -> None:
        self.submit(tup)


EXTRA = 1_000_000  # the extra readings' seq start here


def test_a_replicas_barrier_aligns_with_the_barrier_of_a_stream_split_into_the_region() -> None:
    """A member fed by a replica and by a stream from outside aligns both barriers in each
    channel: every checkpoint holds exactly the readings each source had emitted."""
    n, extra = 21_000, 7_000
    out = Output()
    g = Graph("both")
    outside = g.source("extra", Extra(extra), schema=SCHEMA)
    with g.parallel(2, partition_by="sensor"):
        feed = g.source("feed", Feed(n), schema=SCHEMA)
        both = g.operator("both", Pass(), [feed, outside])
    g.sink("out", out, [both])
    g.consistent_region([feed, outside], name="r", period=0.02)
    store = MemoryStore(keep_last=1000)
    job = Job(g, checkpoints=store)
    gate = Gate(n // 2)
    _GATE.append(gate)

    async def main() -> None:
        # A checkpoint is under way or asked while channel 1's replica is held mid-run: at least
        # one commits, however fast the rest runs.
        run = asyncio.ensure_future(job.run())
        await _until_gate(run, gate)
        job.trigger_checkpoint()
        gate.go.set()
        await run

    asyncio.run(main())
    assert sorted(r["seq"] for r in out.rows) == list(range(n)) + list(range(EXTRA, EXTRA + extra))
    infos = store.list()
    assert infos
    for info in infos:
        states = store.load(info.id).states
        at = [ch["operator"] for ch in states["feed"]["channels"]]
        upto = [i for i in range(n) if i < at[channel_of(i % SENSORS, 2)]]
        upto += range(EXTRA, EXTRA + states["extra"]["operator"])
        assert sorted(r["seq"] for r in states["out"]["operator"]) == upto, f"checkpoint {info.id}"
