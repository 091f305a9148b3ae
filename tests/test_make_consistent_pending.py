"""make_consistent() from a source that already passed the barrier of the checkpoint under way
(another source asked for it) waited for that checkpoint and returned True, though it holds
none of what the source submitted since: a source that acknowledges its input on True (SPL's
makeConsistent contract) would lose it in a crash."""

from __future__ import annotations

import asyncio
from typing import Any

from riverbed.checkpoint import MemoryStore
from riverbed.graph import Graph, Operator, Schema, Source
from riverbed.runtime import Job, VirtualClock
from riverbed.testing import run_until_crash


class Feed(Source):
    """Submits five tuples, flushing each, lets `Asker` go on, then asks for a checkpoint."""

    replayable = True

    def __init__(self, asked: asyncio.Event, gate: asyncio.Event, seen: list[tuple[int, int]],
                 store: MemoryStore) -> None:
        self.asked, self.gate, self.seen, self.store, self.offset = asked, gate, seen, store, 0

    async def run(self) -> None:
        ctx: Any = self.context
        await self.asked.wait()
        for _ in range(5):
            self.submit({"i": self.offset})
            self.offset += 1
            await ctx.flush()  # the first serves the barrier Asker asked for
        self.gate.set()
        at_call = self.offset
        assert await ctx.make_consistent()
        latest = self.store.latest_good()
        assert latest is not None
        self.seen.append((at_call, latest.states["feed"]["operator"]))

    def snapshot(self) -> Any:
        return self.offset

    def restore(self, state: Any) -> None:
        self.offset = state


class Asker(Source):
    """Asks for a checkpoint at once, and sends its barrier only once Feed has gone on."""

    replayable = True

    def __init__(self, asked: asyncio.Event, gate: asyncio.Event) -> None:
        self.asked, self.gate = asked, gate

    async def run(self) -> None:
        ctx: Any = self.context
        assert ctx.request_checkpoint() == 1
        self.asked.set()
        await self.gate.wait()
        await ctx.flush()


class Sink(Operator):
    def on_tuple(self, tup: Any, port: int) -> None:
        pass


def test_make_consistent_after_passing_the_pending_checkpoint_waits_for_a_new_one() -> None:
    store = MemoryStore(keep_last=100)
    asked, gate = asyncio.Event(), asyncio.Event()
    seen: list[tuple[int, int]] = []
    g = Graph("driven")
    feed = g.source("feed", Feed(asked, gate, seen, store), schema=Schema(i="int64"))
    ask = g.source("ask", Asker(asked, gate), schema=Schema(i="int64"))
    g.sink("out", Sink(), [feed, ask])
    g.consistent_region([feed, ask], name="r", trigger="operator_driven")
    assert run_until_crash(Job(g, clock=VirtualClock(), region_checkpoints={"r": store}), None)
    assert seen == [(5, 5)]  # True: a committed checkpoint holds all five
