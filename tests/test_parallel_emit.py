"""How a worker sends what its replicas produce: up to 16 batches' messages a write, and never
held while a replica waits for its input (`runtime/_worker._Hold`)."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import threading
import time
from typing import Any

import pytest

from riverbed.graph import Graph, Operator, Source
from riverbed.runtime import Job, JobError
from riverbed.runtime._parallel_wire import channel_of

pytestmark = pytest.mark.usefixtures("no_worker_leftovers")

BATCH = 100  # the job's batch size: a replica's batch


def _key(channel: int) -> str:
    """A key of ``channel`` in a keyed region of width 2."""
    return next(k for k in (f"k{i}" for i in range(100)) if channel_of(k, 2) == channel)


class Numbers(Source):
    """``n`` numbered tuples of its channel's key, produced as fast as they are pulled."""

    def __init__(self, n: int) -> None:
        self.n = n

    def generate(self) -> Any:
        key = _key(self.context.channel)  # type: ignore[attr-defined]
        for i in range(self.n):
            yield {"k": key, "i": i}


class Collect(Operator):
    def __init__(self) -> None:
        self.tuples: list[Any] = []

    def on_tuple(self, tup: Any, port: int) -> None:
        self.tuples.append(tup)


def _numbers_by_key(tuples: list[Any]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for t in tuples:
        out.setdefault(t["k"], []).append(t["i"])
    return out


def test_a_fast_replica_sends_many_batches_a_message() -> None:
    n = 100_000  # a channel: 1,000 batches of BATCH
    g = Graph("fast")
    sink = Collect()
    with g.parallel(2, partition_by="k"):
        src = g.source("numbers", Numbers(n))
    g.sink("sink", sink, [src])
    job = Job(g, batch_size=BATCH)
    asyncio.run(job.run())
    # Every tuple, in order, per channel.
    assert _numbers_by_key(sink.tuples) == {_key(0): list(range(n)), _key(1): list(range(n))}
    metrics = job.channel_metrics()
    # A message a batch, as before; a write a batch before, now one a 16 batches or 10 ms
    # (1000 / 16 = 63, plus the timer's).
    assert all(m.worker_messages > n // BATCH for m in metrics)
    assert all(0 < m.worker_writes < (n // BATCH) // 4 for m in metrics), \
        [m.worker_writes for m in metrics]


class Shared(list[Any]):
    """Events or pipes per channel, shared by the job's process and the workers it forks (the
    host copies each operator it runs: the copy must hold the same objects)."""

    def __deepcopy__(self, memo: dict[int, Any]) -> Shared:
        return self


class WaitsForTheJob(Source):
    """A replica that produces ``batches`` batches at once, then waits until the job has seen
    every one of its tuples (a tail waiting for its file to grow), 20 s at most, on an Event or
    in a blocking read of a pipe (a C call the kernel restarts after a signal); a wait that
    timed out is told by the tuple after it. The other channel's replica, with ``busy_other``,
    only produces, slowly (its operators busy, 20 ms a batch, while this one's output waits:
    the wait for it ends while they work)."""

    def __init__(self, seen: Shared, how: str, busy_other: bool, batches: int) -> None:
        self.seen, self.how, self.busy_other, self.batches = seen, how, busy_other, batches

    def generate(self) -> Any:
        me = self.context.channel  # type: ignore[attr-defined]
        key = _key(me)
        if self.busy_other and me == 1:
            for i in range(10 * BATCH):  # the first batch is quick, the others are not
                yield {"k": key, "i": i, "busy": i >= BATCH}
            return
        for i in range(self.batches * BATCH):
            yield {"k": key, "i": i, "busy": False}
        started = time.monotonic()
        if self.how == "event":
            self.seen[me].wait(20)
        else:
            os.read(self.seen[me][0], 1)  # the test writes it after 20 s if the sink did not
        late = time.monotonic() - started > 10
        yield {"k": key, "i": self.batches * BATCH, "late": late, "busy": False}


class Busy(Operator):
    def on_tuple(self, tup: Any, port: int) -> None:
        if tup["busy"]:
            end = time.perf_counter() + 0.0002  # 20 ms a batch of BATCH
            while time.perf_counter() < end:
                pass
        self.submit(tup)


class SaysWhenAllCame(Collect):
    def __init__(self, seen: Shared, how: str, batches: int) -> None:
        super().__init__()
        self.seen, self.how, self.batches = seen, how, batches
        self.count = [0, 0]

    def on_tuple(self, tup: Any, port: int) -> None:
        super().on_tuple(tup, port)
        channel = channel_of(tup["k"], 2)
        self.count[channel] += 1
        if self.count[channel] == self.batches * BATCH:
            if self.how == "event":
                self.seen[channel].set()
            else:
                os.write(self.seen[channel][1], b"x")


@pytest.mark.parametrize(("how", "processes", "busy_other"),
                         [("event", 2, False), ("pipe", 2, False), ("event", 1, True),
                          ("pipe", 1, True)])
def test_what_a_replica_produced_does_not_wait_while_the_replica_waits(
        how: str, processes: int, busy_other: bool) -> None:
    if how == "event":
        fork = multiprocessing.get_context("fork")
        seen = Shared([fork.Event(), fork.Event()])
    else:
        seen = Shared([os.pipe(), os.pipe()])
    batches = 2 if busy_other else 20
    g = Graph("tail")
    sink = SaysWhenAllCame(seen, how, batches)
    with g.parallel(2, partition_by="k").processes(processes):
        src = g.source("tail", WaitsForTheJob(seen, how, busy_other, batches))
        out = g.operator("busy", Busy(), [src])
    g.sink("sink", sink, [out])
    # A blocked read must end even if the output never came: the test then fails, not hangs.
    failsafe = threading.Timer(20, lambda: [os.write(w, b"x") for _, w in seen]) \
        if how == "pipe" else None
    if failsafe is not None:
        failsafe.start()
    try:
        asyncio.run(Job(g, batch_size=BATCH).run())
    finally:
        if failsafe is not None:
            failsafe.cancel()
            for r, w in seen:
                os.close(r)
                os.close(w)
    waited = [t for t in sink.tuples if "late" in t]
    # Each waiting replica's batches held at its wait reached the job while it waited: no wait
    # timed out (4 batches after 16 sent in one message; with a busy other channel in the same
    # process, the wait for the output ends while that channel works, and the output goes
    # while the replica waits).
    assert len(waited) == (1 if busy_other else 2) and not any(t["late"] for t in waited)


class FailsAfter(Source):
    def generate(self) -> Any:
        key = _key(self.context.channel)  # type: ignore[attr-defined]
        for i in range(15 * BATCH):
            yield {"k": key, "i": i}
        raise RuntimeError("the input broke")


@pytest.mark.parametrize("width", [1, 2])
def test_what_replicas_produced_before_one_failed_reaches_the_job(width: int) -> None:
    g = Graph("fails")
    sink = Collect()
    with g.parallel(width, partition_by="k"):
        src = g.source("src", FailsAfter())
    g.sink("sink", sink, [src])
    with pytest.raises(JobError, match="the input broke"):
        asyncio.run(Job(g, batch_size=BATCH).run())
    # The 15 batches of the replica that failed were held, not sent: they are sent before the
    # failure, as without a region (where the sink gets them all too).
    got = _numbers_by_key(sink.tuples)
    assert any(v == list(range(15 * BATCH)) for v in got.values()), {k: len(v) for k, v in got.items()}
