"""How a worker sends what its replicas produce: up to 16 batches' worth a message, and never
held while a replica waits for its input (`runtime/_worker._Hold`)."""

from __future__ import annotations

import asyncio
import multiprocessing
from typing import Any

import pytest

from riverbed.graph import Graph, Operator, Source
from riverbed.runtime import Job
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
    messages = [m.worker_messages for m in job.channel_metrics()]
    # One a batch before; now one a 16 batches or 10 ms (1000 / 16 = 63, plus the timer's).
    assert all(0 < m < (n // BATCH) // 4 for m in messages), messages


class Events(list[Any]):
    """An Event per channel, shared by the job's process and the workers it forks (the host
    copies each operator it runs: the copy must hold the same Events)."""

    def __deepcopy__(self, memo: dict[int, Any]) -> Events:
        return self


class WaitsForTheJob(Source):
    """A replica that produces 20 batches at once, then waits until the job has seen every
    one of its tuples (a tail waiting for its file to grow), 20 s at most; a wait that timed
    out is told by the tuple after it."""

    def __init__(self, seen: Events) -> None:
        self.seen = seen  # set by the job's sink

    def generate(self) -> Any:
        me = self.context.channel  # type: ignore[attr-defined]
        key = _key(me)
        for i in range(20 * BATCH):
            yield {"k": key, "i": i, "late": False}
        late = not self.seen[me].wait(20)
        yield {"k": key, "i": 20 * BATCH, "late": late}


class SaysWhenAllCame(Collect):
    def __init__(self, seen: Events) -> None:
        super().__init__()
        self.seen = seen
        self.count = [0, 0]

    def on_tuple(self, tup: Any, port: int) -> None:
        super().on_tuple(tup, port)
        channel = channel_of(tup["k"], 2)
        self.count[channel] += 1
        if self.count[channel] == 20 * BATCH:
            self.seen[channel].set()


def test_what_a_replica_produced_does_not_wait_while_the_replica_waits() -> None:
    fork = multiprocessing.get_context("fork")
    seen = Events([fork.Event(), fork.Event()])
    g = Graph("tail")
    sink = SaysWhenAllCame(seen)
    with g.parallel(2, partition_by="k"):
        src = g.source("tail", WaitsForTheJob(seen))
    g.sink("sink", sink, [src])
    asyncio.run(Job(g, batch_size=BATCH).run())
    lasts = [t for t in sink.tuples if t["i"] == 20 * BATCH]
    # Each replica's last 4 batches (after 16 sent in one message) reached the job while the
    # replica waited: no wait timed out.
    assert len(lasts) == 2 and not any(t["late"] for t in lasts)
    assert sorted(len(v) for v in _numbers_by_key(sink.tuples).values()) == [20 * BATCH + 1] * 2
