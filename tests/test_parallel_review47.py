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


def test_a_keyless_tuple_is_held_with_the_rest_while_a_checkpoint_aligns() -> None:
    # A member with two inputs from outside the region, aligning checkpoint 1: input A has
    # delivered its barrier, B not yet, so what comes on A meanwhile belongs to checkpoint 2
    # and is held. The split's failed tuple was handled at once, its record landing in
    # checkpoint 1's epoch: a restore to checkpoint 1 replayed the tuple and recorded it twice
    # (review 47). It now comes as an item of the stream, held like the tuple itself.
    from riverbed.core import TupleFailed
    from riverbed.graph import CheckpointBarrier
    from riverbed.runtime._worker import _ChannelGraph
    from riverbed.testing import ListSink, ListSource

    class Two(Operator):
        def on_tuple(self, tup: Any, port: int) -> None:
            if "k" not in tup:
                raise KeyError("k")  # the member's own failure on such a tuple
            self.submit(tup)

    def errors_seen(bad_via_split: bool) -> list[Any]:
        g = Graph("g")
        a = g.source("A", ListSource([]))
        b = g.source("B", ListSource([]))
        out, err = g.operator("m", Two(), [a, b], error_port=True)
        g.sink("s", ListSink(), [out])
        g.sink("e", ListSink(), [err])
        sync = _ChannelGraph(g.freeze(), ("m",), now=0, name="w",
                             consistent_region=("", frozenset({"A", "B", "m", "s", "e"})))
        barrier, bad = CheckpointBarrier(1, ""), {"v": -1}
        entries: list[tuple[str, int, Any]] = [
            ("A", 0, [{"k": 1, "v": 1}]), ("A", 0, barrier), ("A", 0, [{"k": 1, "v": 2}]),
            ("A", 0, TupleFailed(bad, KeyError("k")) if bad_via_split else [bad]), ("B", 0, barrier)]
        for operator, port, item in entries:  # as the worker's receive feeds them
            sync.feed(operator, port, item)
            if type(item) is CheckpointBarrier:
                sync.barrier(item)
        return [x if not isinstance(x, list) else [t.get("tuple", t) for t in x]
                for (_op, p, x) in sync.take_exits() if p == 1]

    # the record after the barrier, in checkpoint 2's epoch, as the member's own failure's
    assert errors_seen(True) == errors_seen(False) == [CheckpointBarrier(1, ""), [{"v": -1}]]


class _BadReading(Exception):
    """An exception that pickles but does not unpickle (``__init__`` takes two arguments)."""

    def __init__(self, sensor: Any, why: str) -> None:
        super().__init__(f"{sensor}: {why}")


def _sensor(t: Any) -> Any:
    if "k" not in t:
        raise _BadReading(t.get("v"), "no sensor")
    return t["k"]


@pytest.mark.parametrize("width", [1, 2])
def test_a_key_error_that_does_not_unpickle_is_still_the_members_tuple_failure(width: int) -> None:
    # The worker could not read the message carrying it back: the job failed in the worker's
    # receive, half the rows lost (review 47). Its text goes instead.
    items: list[Any] = [{"k": f"s{i % 7}", "v": i} for i in range(60)]
    items.insert(30, {"v": -1})
    g = Graph("unpickle")
    src = g.source("src", Items(items))
    with g.parallel(width, partition_by=_sensor):
        out, errors = g.operator("pass", Pass(), [src], error_port=True)
    sink, failed = Collect(), Collect()
    g.sink("sink", sink, [out])
    g.sink("errors", failed, [errors])
    job = Job(g, clock=VirtualClock())
    run_virtual(job.run(), job.clock)
    assert len(sink.tuples) == 60
    (record,) = failed.tuples
    assert record["tuple"] == {"v": -1} and "_BadReading('-1: no sensor')" in record["error"]
    assert "splits by _sensor: every tuple" in record["error"]  # (not its repr, an address)


def test_a_keyless_tuple_is_failed_by_every_member_taking_the_stream() -> None:
    # m1 and m2 both take the stream entering the region: the split's failed tuple went to
    # the first only, and m2 lost it without a record (review 47), where each member had it.
    class Two(Operator):
        def on_tuple(self, tup: Any, port: int) -> None:
            self.submit(tup)

    items: list[Any] = [{"k": f"s{i % 5}", "v": i} for i in range(20)]
    items.insert(10, {"v": -1})
    g = Graph("two")
    src = g.source("src", Items(items))
    with g.parallel(2, partition_by="k"):
        o1, e1 = g.operator("m1", Pass(), [src], error_port=True)
        o2, e2 = g.operator("m2", Two(), [o1, src], error_port=True)
    sinks = {name: Collect() for name in ("o2", "e1", "e2")}
    g.sink("o2", sinks["o2"], [o2])
    g.sink("e1", sinks["e1"], [e1])
    g.sink("e2", sinks["e2"], [e2])
    job = Job(g, clock=VirtualClock())
    run_virtual(job.run(), job.clock)
    assert len(sinks["o2"].tuples) == 40  # each good tuple from m1 and from the stream
    for name, member in (("e1", "m1"), ("e2", "m2")):
        (record,) = sinks[name].tuples
        assert record["operator"] == member and record["tuple"] == {"v": -1}


class _SlowExit(Operator):
    """Channel 1's worker takes 2 s to exit after EOF (a library's cleanup at exit would)."""

    def on_tuple(self, tup: Any, port: int) -> None:
        self.submit(tup)

    def on_shutdown(self) -> None:
        if self.context.channel == 1:
            from multiprocessing import util

            util.Finalize(None, time.sleep, args=(2.0,), exitpriority=0)  # the slow exit, injected


def test_waiting_for_a_slow_worker_to_exit_does_not_spin_on_a_virtual_clock() -> None:
    # The keep-alive selected on every worker's sentinel: one that had exited stayed readable,
    # and the loop spun until the others exited (2.7 s of CPU for a 3 s wait; review 47).
    import resource

    g = Graph("spin")
    src = g.source("src", Items([{"k": f"s{i % 5}", "v": i} for i in range(100)]))
    with g.parallel(2, partition_by="k", processes=2):
        out = g.operator("op", _SlowExit(), [src])
    sink = Collect()
    g.sink("sink", sink, [out])
    job = Job(g, clock=VirtualClock())
    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.monotonic()
    run_virtual(job.run(), job.clock)
    waited = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert len(sink.tuples) == 100 and waited >= 2.0
    assert cpu < 0.5, cpu
