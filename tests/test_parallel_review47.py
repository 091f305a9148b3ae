"""Parallel regions, from review 47: a tuple the split finds no key for fails as the first
member's tuple would (its error port, or a failure that drains the job), at every width; the
end of a region (a finish, an abort, a reset) neither blocks the event loop nor kills a worker
that finished; on a virtual clock the end of a region takes no virtual time."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import pytest

from riverbed.core import OperatorError
from riverbed.graph import Graph, Operator, Punct, Source
from riverbed.runtime import Job, JobError, VirtualClock, run_virtual
from riverbed.runtime._parallel_wire import channel_of

from .test_parallel_runtime import Collect, Pass

pytestmark = pytest.mark.usefixtures("no_worker_leftovers")


class Items(Source):
    """``items`` as given: tuples, and window marks."""

    def __init__(self, items: list[Any]) -> None:
        self.items = items

    def generate(self) -> Any:
        yield from self.items


def _items(n: int, bad_at: int, *, marks: bool = False) -> list[Any]:
    """``n`` keyed tuples with one without the key (``{"v": -1}``) before tuple ``bad_at``;
    with ``marks``, a window mark after every 7th tuple."""
    out: list[Any] = []
    for i in range(n):
        if i == bad_at:
            out.append({"v": -1})
        out.append({"k": f"s{i % 11}", "v": i})
        if marks and i % 7 == 6:
            out.append(Punct.WINDOW)
    return out


def _run(job: Job, virtual: bool) -> None:
    if virtual:
        run_virtual(job.run(), job.clock)  # type: ignore[arg-type]
    else:
        asyncio.run(job.run())


@pytest.mark.parametrize("width", [1, 2, 3])
@pytest.mark.parametrize("virtual", [False, True], ids=["real-clock", "virtual-clock"])
def test_a_tuple_without_the_key_drains_the_job_keeping_the_tuples_before_it(
        width: int, virtual: bool) -> None:
    # The split raised from the host's task: the job ended at once (no drain), and the whole
    # batch holding the bad tuple, with everything the merge had not let out, was lost (0 of 50
    # rows in the review). Now the first member fails on it, in channel 0, as on a tuple of its
    # own: what came before goes on, the job drains and fails naming it. (Width 1 took no key
    # and let it through: now it fails there too, as at every other width.)
    n, bad_at = 500, 300
    items = _items(n, bad_at)
    items.insert(450, {"v": -3})  # another: the member failed already
    g = Graph("nokey")
    src = g.source("src", Items(items))
    with g.parallel(width, partition_by="k"):
        out = g.operator("pass", Pass(), [src])
    sink = Collect()
    g.sink("sink", sink, [out])
    job = Job(g, batch_size=1000, clock=VirtualClock() if virtual else None)  # one batch: all
    with pytest.raises(JobError) as info:
        _run(job, virtual)
    got = sorted(t["v"] for t in sink.tuples)
    # Before it: every one. After it: channel 0's member ended, the other channels went on.
    assert got == [i for i in range(n) if i < bad_at or channel_of(f"s{i % 11}", width) != 0]
    assert sink.finals == 1
    (err,) = info.value.errors
    assert isinstance(err, OperatorError) and err.operator == "pass" and err.port == 0
    assert "KeyError: 'k' (parallel region 'parallel0' splits by 'k'" in str(err)
    assert "on tuple {'v': -1}" in str(err)
    assert job.metrics.operators["pass"].inputs[0].errors == 1


@pytest.mark.parametrize("width", [1, 2])
@pytest.mark.parametrize("marks", [False, True], ids=["batch", "marked-batch"])
def test_a_tuple_without_the_key_goes_to_the_first_members_error_port(width: int,
                                                                      marks: bool) -> None:
    # Width 1 sent it on (the member's own failure routed it); width 2 failed the job and lost
    # the batch's other tuples. Now at every width: the error port has it, in the core's record
    # shape, and every other tuple (and window mark) goes on.
    n = 200
    items = [*_items(n, 120, marks=marks), {"v": -2}]  # the last of the batch too
    g = Graph("nokey")
    src = g.source("src", Items(items))
    with g.parallel(width, partition_by="k"):
        out, errors = g.operator("pass", Pass(), [src], error_port=True)
    sink, failed = Collect(), Collect()
    g.sink("sink", sink, [out])
    g.sink("errors", failed, [errors])
    job = Job(g, batch_size=1000, clock=VirtualClock())
    run_virtual(job.run(), job.clock)  # type: ignore[arg-type]
    assert sorted(t["v"] for t in sink.tuples) == list(range(n))
    note = "(parallel region 'parallel0' splits by 'k': every tuple entering it needs a hashable key)"
    assert failed.tuples == [
        {"operator": "pass", "port": 0, "tuple": {"v": -1}, "error": f"KeyError('k') {note}"},
        {"operator": "pass", "port": 0, "tuple": {"v": -2}, "error": f"KeyError('k') {note}"}]
    if marks:
        assert sink.marks == sum(1 for x in items if x is Punct.WINDOW)
    assert job.metrics.operators["pass"].inputs[0].errors == 2


class StallOnChannel0(Operator):
    """Channel 0 blocks on its first tuple (reading a pipe nobody writes to) until killed;
    the other channels pass their tuples on and finish."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def on_tuple(self, tup: Any, port: int) -> None:
        if self.context.channel == 0:
            os.read(self.fd, 1)
        self.submit(tup)


def test_an_abort_neither_blocks_the_loop_nor_kills_a_channel_that_finished() -> None:
    # `close` was synchronous: asyncio closes a transport's socket only at the loop's next
    # turn, so the finished worker never saw EOF while `close` joined it for 5 s with the loop
    # blocked, then killed it (exit -9, "killed_by_job": true).
    keys = {channel_of(f"s{i}", 2): f"s{i}" for i in range(10)}
    events: list[tuple[str, dict[str, Any]]] = []

    class Log:
        def info(self, event: str, **fields: Any) -> None:
            events.append((event, fields))

        warning = error = info

    read_end, write_end = os.pipe()
    try:
        g = Graph("stall")
        src = g.source("src", Items([{"k": keys[1], "v": 1}, {"k": keys[0], "v": 0}]))
        with g.parallel(2, partition_by="k"):
            out = g.operator("stall", StallOnChannel0(read_end), [src])
        g.sink("sink", Collect(), [out])
        job = Job(g, logger=Log())
        host = job.parallel[0]
        gaps: list[float] = []
        aborted: list[float] = []

        async def ticker() -> None:
            last = time.monotonic()
            while True:
                await asyncio.sleep(0.005)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        async def main() -> None:
            run = asyncio.ensure_future(job.run())
            deadline = time.monotonic() + 60
            while not host.channels[1].finished:  # (bounded: a broken job fails the test)
                assert time.monotonic() < deadline and not run.done()
                await asyncio.sleep(0.01)
            tick = asyncio.ensure_future(ticker())
            await asyncio.sleep(0.02)
            aborted.append(time.monotonic())
            job.abort()
            try:
                await run
            finally:
                aborted.append(time.monotonic())
                tick.cancel()

        with pytest.raises(JobError, match="aborted"):
            asyncio.run(main())
    finally:
        os.close(read_end)
        os.close(write_end)
    ended = {f["channel"]: f for e, f in events if e == "channel_ended"}
    assert ended[1]["exitcode"] == 0 and ended[1]["finished"] and not ended[1]["killed_by_job"]
    assert ended[0]["killed_by_job"] and not ended[0]["finished"]
    assert aborted[1] - aborted[0] < 2.5, aborted  # was 5 s and more
    assert max(gaps) < 2.0, max(gaps)  # the loop ran meanwhile (was blocked 5 s)


def test_the_end_of_a_region_takes_no_virtual_time() -> None:
    # Waiting for its workers to exit, the job's loop had nothing runnable: a `VirtualClock`
    # jumped to the job's next timer (the status view's, a periodic checkpoint) again and
    # again, tens of virtual seconds and a status line each time.
    g = Graph("end")
    src = g.source("src", Items([{"k": f"s{i % 5}", "v": i} for i in range(100)]))
    with g.parallel(2, partition_by="k"):
        out = g.operator("pass", Pass(), [src])
    sink = Collect()
    g.sink("sink", sink, [out])
    clock = VirtualClock()
    job = Job(g, clock=clock)
    woke: list[int] = []

    async def later() -> None:
        await asyncio.sleep(3600)
        woke.append(clock.now())

    async def main() -> int:
        timer = asyncio.ensure_future(later())
        try:
            await job.run()
            return clock.now()
        finally:
            timer.cancel()

    ended_at = run_virtual(main(), clock)
    assert len(sink.tuples) == 100
    assert not woke and ended_at < 3600 * 10**9, (woke, ended_at)
