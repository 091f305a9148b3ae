"""An MQTTSource whose broker is away when the job starts waited for its first connection
without taking part in checkpoints: the checkpoint's barrier waited with it, and after
``drain_timeout`` (180 s by default) the region reset or, with ``ack="receive"`` (no replay),
the whole job failed ("checkpoint 1 ... took over drain_timeout"), as did a stop meant to
suspend it. It now sends barriers while it waits."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from riverbed.checkpoint import MemoryStore
from riverbed.graph import Graph, Operator, Schema
from riverbed.mqtt import MQTTSource
from riverbed.runtime import Job

SCHEMA = Schema(seq="int64")


class Rows(Operator):
    def on_tuple(self, tup: Any, port: int) -> None:
        pass


def _refusing_port() -> tuple[socket.socket, int]:
    """A port bound but not listening: every connection to it is refused, and no other process
    can take it while the test runs."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock, sock.getsockname()[1]


def test_checkpoints_commit_and_a_stop_suspends_while_the_broker_is_away() -> None:
    # (ack="receive" takes the same path, in the job's region, whose drain_timeout is 180 s)
    ack = "checkpoint"
    held, port = _refusing_port()
    source = MQTTSource("127.0.0.1", port, topics=["away/#"], qos=1, schema=SCHEMA,
                        topic_attribute=None, client_id=f"away-{ack}", ack=ack, idle_flush=0.01)
    g = Graph(f"away-{ack}")
    s = g.source("mqtt", source, schema=SCHEMA)
    g.sink("out", Rows(), [s])
    g.consistent_region(s, name="r", period=600.0, drain_timeout=2.0)
    job = Job(g, checkpoints=MemoryStore())
    (region,) = job.regions

    async def main() -> None:
        task = asyncio.create_task(job.run())
        await asyncio.sleep(0)  # one turn: the job restores (nothing) and starts its operators
        try:
            for _ in range(2):
                committed = region.request_consistent()
                done, _ = await asyncio.wait({committed, task}, timeout=30.0,
                                             return_when=asyncio.FIRST_COMPLETED)
                assert committed in done and committed.result(), \
                    "a checkpoint did not commit while the broker was away"
            assert region.metrics.resets == 0 and region.last_committed == 2
            job.stop()  # a checkpoint, then the job suspends: no connection needed
            done, _ = await asyncio.wait({task}, timeout=30.0)
            assert task in done, "the stop did not end the job while the broker was away"
            task.result()
            assert job.suspended and region.last_committed == 3
        finally:
            if not task.done():
                job.abort()
                await asyncio.wait({task})

    try:
        asyncio.run(main())
    finally:
        held.close()
