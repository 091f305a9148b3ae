"""A job with a periodic consistent region ends when its operators end.

The region's periodic task looks at the region every half period (or half ``drain_timeout``,
whichever is shorter); the job waited for its next look after everything had ended, so a job
with ``period=600`` lived on for 90 s (default ``drain_timeout``) after its last tuple. The
region now ends the task when its last member ends. A `VirtualClock` shows it without waiting:
the job's end is the clock's time when `run` returns. With a parallel region, waiting for its
workers to exit must not move that clock either (it polled with 50 ms timeouts of the loop,
each of which a `VirtualClock` jumps over at once).
"""

from __future__ import annotations

from typing import Any

import pytest

from riverbed.checkpoint import MemoryStore
from riverbed.graph import Graph, Operator, Source
from riverbed.runtime import Job, VirtualClock, run_virtual

S = 1_000_000_000
N = 50_000


class Numbers(Source):
    replayable = True

    def __init__(self) -> None:
        self.next = 0

    def generate(self) -> Any:
        ctx: Any = self.context
        while self.next < N:  # a replica emits its share: every width-th number
            i = self.next
            self.next += 1
            if i % ctx.width == ctx.channel:
                yield {"i": i}

    def snapshot(self) -> Any:
        return self.next

    def restore(self, state: Any) -> None:
        self.next = state


class Keep(Operator):
    def __init__(self) -> None:
        self.got: list[Any] = []

    def on_tuple(self, tup: Any, port: int) -> None:
        self.got.append(tup)


@pytest.mark.parametrize("parallel", [False, True], ids=["one-process", "replicated"])
def test_a_job_with_a_long_period_ends_with_its_operators(parallel: bool) -> None:
    g = Graph("ends")
    if parallel:
        with g.parallel(2):
            src = g.source("numbers", Numbers())
    else:
        src = g.source("numbers", Numbers())
    keep = Keep()
    g.sink("keep", keep, [src])
    g.consistent_region(src, name="r", period=600.0)
    clock = VirtualClock()
    job = Job(g, clock=clock, checkpoints=MemoryStore())
    run_virtual(job.run(), clock)
    assert sorted(t["i"] for t in keep.got) == list(range(N))
    assert clock.now() < S, f"the job ended at {clock.now() / S:g} s of its clock, not with its operators"
