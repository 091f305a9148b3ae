"""Channels grouped into worker processes (issue 20): a region of width W runs in
min(W, processes) worker processes (default: the CPU count), channel i in process
i % processes, each channel unchanged (its own operators, replicas, keys, socket, metrics).

Each test pins ``processes`` so it means the same on a machine of any size, and checks what
the user sees: which process and channel each key ran in (``context.channel``), results equal
to the width-1 run's, an operator's failure naming its own channel, and a kill -9 of a process
hosting two channels healing the region with nothing lost or repeated. No timing is guessed:
the kill waits on a gate a replica reaches (a fork-shared event).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from riverbed.checkpoint import RocksDBStore
from riverbed.core import OperatorError
from riverbed.graph import Graph, GraphError, Operator, Schema, Source
from riverbed.operators import FileSink
from riverbed.runtime import Job, JobError, VirtualClock
from riverbed.runtime._parallel_wire import channel_of
from tests.test_parallel_checkpoints import by_key_lines
from tests.test_parallel_replica_checkpoints import (  # _open_gate: autouse, here too
    _GATE,
    Gate,
    _open_gate,  # noqa: F401  (and through it no_worker_leftovers)
    _until_gate,
    build,
)

KEYED = Schema(k="rstring", v="int64")


class Keys(Source):
    """``n`` tuples over 23 keys."""

    def __init__(self, n: int) -> None:
        self.n = n

    def generate(self) -> Any:
        for i in range(self.n):
            yield {"k": f"key{(i * 7) % 23}", "v": i}


class Where(Operator):
    """Each tuple with the process and the channel it ran in."""

    def on_tuple(self, tup: Any, port: int) -> None:
        ctx: Any = self.context
        self.submit({**tup, "pid": os.getpid(), "channel": ctx.channel, "width": ctx.width})


class Rows(Operator):
    def __init__(self) -> None:
        self.rows: list[Any] = []

    def on_tuple(self, tup: Any, port: int) -> None:
        self.rows.append(tup)


def _where(width: int, processes: int | None, n: int = 3000) -> tuple[Job, list[Any]]:
    g = Graph("where")
    src = g.source("src", Keys(n), schema=KEYED)
    with g.parallel(width, partition_by="k").processes(processes):
        out = g.operator("where", Where(), [src])
    sink = Rows()
    g.sink("sink", sink, [out])
    job = Job(g, clock=VirtualClock())
    asyncio.run(job.run())
    return job, sink.rows


def test_width_4_on_2_processes_hosts_channels_0_and_2_in_one_and_1_and_3_in_the_other() -> None:
    job, rows = _where(4, 2)
    pids = [m.pid for m in job.parallel[0].metrics()]
    assert pids[0] == pids[2] and pids[1] == pids[3] and pids[0] != pids[1]
    assert os.getpid() not in pids
    # Every key ran in its own channel (context.channel), in the process hosting that channel.
    for r in rows:
        assert r["channel"] == channel_of(r["k"], 4) and r["width"] == 4
        assert r["pid"] == pids[r["channel"]]
    assert sorted(r["v"] for r in rows) == list(range(3000))
    assert [m.tuples_out for m in job.parallel[0].metrics()] == \
        [sum(r["channel"] == c for r in rows) for c in range(4)]


def test_more_processes_than_channels_gives_one_process_per_channel() -> None:
    job, _ = _where(3, 8, n=300)
    assert len({m.pid for m in job.parallel[0].metrics()}) == 3


def test_one_process_hosts_every_channel_of_a_region() -> None:
    job, rows = _where(3, 1)
    assert len({m.pid for m in job.parallel[0].metrics()}) == 1
    assert {r["channel"] for r in rows} == {0, 1, 2}
    assert all(r["channel"] == channel_of(r["k"], 3) for r in rows)


def test_processes_default_to_the_cpu_count_and_may_come_from_a_parameter(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 3)
    g = Graph("defaults", params={"width": "8"})
    assert g.parallel(partition_by="k").spec.worker_processes() == 3
    assert g.parallel(2, partition_by="k").spec.worker_processes() == 2
    g = Graph("param", params={"processes": "2"})
    assert g.parallel(8, partition_by="k").spec.worker_processes() == 2
    assert g.parallel(8, partition_by="k").processes(5).spec.worker_processes() == 5
    with pytest.raises(GraphError, match=r"processes=0: expected an int from 1"):
        Graph("bad").parallel(4).processes(0)


def test_an_operator_failing_in_a_shared_process_stops_the_job_naming_its_channel() -> None:
    """Channel 3 fails; channel 1 shares its process. The job reports channel 3's error (not
    a channel that died: the process reads on until the job hangs up)."""
    bad = next(f"key{(i * 7) % 23}" for i in range(23) if channel_of(f"key{(i * 7) % 23}", 4) == 3)

    class Boom(Operator):
        def on_tuple(self, tup: Any, port: int) -> None:
            if tup["k"] == bad and tup["v"] > 1000:
                raise ValueError("boom in channel 3")
            self.submit(tup)

    g = Graph("boom")
    src = g.source("src", Keys(3000), schema=KEYED)
    with g.parallel(4, partition_by="k").processes(2):
        out = g.operator("boom", Boom(), [src])
    g.sink("sink", Rows(), [out])
    job = Job(g)
    with pytest.raises(JobError) as info:
        asyncio.run(job.run())
    (err,) = info.value.errors
    assert isinstance(err, OperatorError) and err.operator == "boom"
    assert "ValueError: boom in channel 3" in str(err)
    assert "parallel region 'parallel0', channel 3" in str(err)


def test_replicas_sharing_a_process_each_read_their_own_channel(tmp_path: Path) -> None:
    """Width 3 in one process: each replica sees its own context.channel (a replica emitting
    another channel's key fails the job), and the output is the one source's."""
    n = 21_000
    ref = tmp_path / "reference.csv"
    asyncio.run(Job(build(None, n, FileSink(str(ref), format="csv"), region=False)).run())
    path = tmp_path / "out.csv"
    job = Job(build(3, n, FileSink(str(path), format="csv"), region=False, processes=1))
    asyncio.run(job.run())
    assert len({m.pid for m in job.parallel[0].metrics()}) == 1
    assert by_key_lines(path.read_bytes()) == by_key_lines(ref.read_bytes())


def test_a_process_of_two_channels_killed_mid_run_heals_the_region_exactly(tmp_path: Path) -> None:
    """Width 4 on 2 processes; kill -9 of the process hosting channels 1 and 3 while channel
    1's replica is mid-run, after a commit: the region resets, every channel restarts from the
    last checkpoint in new processes (grouped the same way), and the transactional file holds
    exactly an uninterrupted width-1 run's lines."""
    n = 140_000
    ref = tmp_path / "reference.csv"
    asyncio.run(Job(build(None, n, FileSink(str(ref), format="csv"), region=False)).run())
    expected = ref.read_bytes()
    assert expected.count(b"\n") == n // 5

    path = tmp_path / "out.csv"
    gate = Gate(4_000, after_commit=True)
    _GATE.append(gate)
    with RocksDBStore(tmp_path / "ckpt", keep_last=1000) as store:
        job = Job(build(4, n, FileSink(str(path), format="csv", transactional=True),
                        period=0.02, processes=2),
                  checkpoints=store)
        before: list[int | None] = []

        async def main() -> None:
            run = asyncio.ensure_future(job.run())
            await _until_gate(run, gate)
            before.extend(m.pid for m in job.parallel[0].metrics())
            assert before[1] == before[3] and before[0] == before[2] != before[1]
            assert before[1] is not None
            os.kill(before[1], 9)
            await run

        asyncio.run(main())
        assert job.regions[0].metrics.resets == 1
        assert job.parallel[0].restarts == 1
        after = [m.pid for m in job.parallel[0].metrics()]
        assert not set(after) & set(before), "every channel restarted in a new process"
        assert after[1] == after[3] and after[0] == after[2] != after[1]
    got = path.read_bytes()
    assert sorted(got.splitlines()) == sorted(expected.splitlines())
    assert by_key_lines(got) == by_key_lines(expected)


class Endless(Source):
    """Tuples of 13 keys until the job stops."""

    async def run(self) -> None:
        ctx: Any = self.context
        i = 0
        while not ctx.stopping:
            self.submit({"k": f"key{i % 13}", "v": i})
            i += 1
            if i % 100 == 0:
                await ctx.flush()


class Seen(Operator):
    """Sets ``enough`` (an event of the job's loop) once ``at`` tuples came."""

    def __init__(self, at: int) -> None:
        self.at, self.n = at, 0
        self.enough: asyncio.Event | None = None

    def on_tuple(self, tup: Any, port: int) -> None:
        self.n += 1
        if self.n >= self.at and self.enough is not None:
            self.enough.set()


def test_a_process_of_two_channels_killed_stops_the_job_naming_both_channels() -> None:
    g = Graph("endless")
    src = g.source("src", Endless(), schema=KEYED)
    with g.parallel(4, partition_by="k").processes(2):
        out = g.operator("where", Where(), [src])
    seen = Seen(400)
    g.sink("sink", seen, [out])
    job = Job(g)
    pids: list[int | None] = []

    async def main() -> None:
        seen.enough = asyncio.Event()
        run = asyncio.ensure_future(job.run())
        await asyncio.wait({run, asyncio.ensure_future(seen.enough.wait())},
                           return_when=asyncio.FIRST_COMPLETED)
        assert not run.done()
        pids.extend(m.pid for m in job.parallel[0].metrics())
        assert pids[1] is not None and pids[1] == pids[3]
        os.kill(pids[1], 9)
        await run

    with pytest.raises(JobError) as info:
        asyncio.run(main())
    (err,) = info.value.errors
    text = str(err)
    assert ("channel 1 (pid " in text and "with channel(s) 3 in that process" in text) or \
        ("channel 3 (pid " in text and "with channel(s) 1 in that process" in text), text
    assert f"(pid {pids[1]}, " in text and "killed by signal 9" in text


def test_graph_parallel_takes_processes_as_a_keyword() -> None:
    """`Graph.parallel(..., processes=n)` is the same as `.processes(n)` on the block, and a bad
    value is refused where the region is declared."""
    from riverbed.graph import Graph, GraphError

    g = Graph("kw")
    block = g.parallel(4, partition_by="k", processes=2)
    assert block.spec.processes == 2 and block.spec.worker_processes() == 2
    with pytest.raises(GraphError, match="processes=0"):
        g.parallel(4, processes=0)
