"""MQTTSource subscriptions and reconnects, from review 47 of the broker-fault fixes.

1. A stop in receive mode while a checkpoint was under way: the checkpoint recorded the
   filters, the stop then unsubscribed them, and the restart, trusting the record, subscribed
   nothing: the source stayed deaf, silently.
2. A broker restored from an older save (killed, then restarted from its database) holds the
   session's filters of then: a filter added since was never subscribed again.
   Every filter is now subscribed at every connection (MQTT 5 with Retain Handling 1).
3. A reconnect whose connection closed before its CONNACK failed at once only on the first
   attempt after a drop; the next ones waited aiomqtt's 10 s timeout each.

Against a real mosquitto (riverbed.mqtt._broker), on the wall clock; every wait polls for an
event with a deadline.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from riverbed.checkpoint import MemoryStore
from riverbed.mqtt import ClientConfig, MQTTClient, MQTTSource
from riverbed.mqtt._broker import Broker, free_port, mosquitto_path, start_broker
from riverbed.runtime import Job, JobError

from .test_mqtt import READING, _graph, _publish, _reading
from .test_mqtt_dedup import _until

pytestmark = pytest.mark.skipif(mosquitto_path() is None,
                                reason="mosquitto not installed (run scripts/install_broker.sh)")


@pytest.fixture
def saving_broker() -> Iterator[Broker]:
    """mosquitto saving its database only when told (SIGUSR1): a kill loses what came since."""
    b = start_broker(prefer="mosquitto", settings={"autosave_interval": "3600"})
    try:
        yield b
    finally:
        b.close()


def _seqs(sink: Any) -> list[int]:
    return sorted(t["seq"] for t in sink.tuples)


async def _finish(job: Job, task: asyncio.Task[Any]) -> None:
    job.abort()
    with pytest.raises(JobError, match="aborted"):
        await task


@pytest.mark.parametrize("protocol", ["3.1.1", "5"])
def test_a_stop_during_a_checkpoint_in_receive_mode_receives_after_the_restart(
        saving_broker: Broker, protocol: str) -> None:
    b, store = saving_broker, MemoryStore()

    def source() -> MQTTSource:
        return MQTTSource(b.host, b.port, topics=["sp/#"], schema=READING, client_id="sp47",
                          protocol=protocol, backoff=(0.02, 0.2))  # type: ignore[arg-type]

    async def first() -> None:
        src = source()
        g, sink = _graph(src)
        job = Job(g, checkpoints=store, checkpoint_period=0.2)
        taken = src.snapshot

        def snapshot() -> Any:  # a stop (SIGTERM) comes while this checkpoint is under way
            state = taken()
            if src.records_submitted >= 3 and not job.stopping:
                asyncio.get_running_loop().call_soon(job.stop)
            return state

        src.snapshot = snapshot  # type: ignore[method-assign]
        task = asyncio.create_task(job.run())
        await src.subscribed.wait()
        await _publish(b.port, [("sp/a", orjson.dumps(_reading("a", i, 1.0))) for i in range(3)])
        await asyncio.wait_for(task, 30)
        assert job.suspended and _seqs(sink) == [0, 1, 2]

    async def second() -> None:
        src = source()
        g, sink = _graph(src)
        job = Job(g, checkpoints=store, checkpoint_period=0.2)
        task = asyncio.create_task(job.run())
        await src.subscribed.wait()
        await _publish(b.port, [("sp/a", orjson.dumps(_reading("a", i, 1.0))) for i in range(3, 8)])
        await _until(lambda: len(sink.tuples) >= 5)  # before: nothing came, ever
        assert job.restored_from is not None and _seqs(sink) == [3, 4, 5, 6, 7]
        await _finish(job, task)

    asyncio.run(first())
    asyncio.run(second())


def _save(b: Broker) -> None:
    """Make mosquitto write its database now (SIGUSR1), and wait until it did."""
    assert b.proc is not None
    db = b.workdir / "mosquitto.db"
    before = db.stat().st_mtime_ns if db.exists() else 0
    b.proc.send_signal(signal.SIGUSR1)
    deadline = time.monotonic() + 10
    while not db.exists() or db.stat().st_mtime_ns == before:  # polling for the file, bounded
        assert time.monotonic() < deadline, "mosquitto did not save its database"
        time.sleep(0.01)


@pytest.mark.parametrize("protocol", ["3.1.1", "5"])
def test_a_filter_added_is_read_after_the_broker_restores_an_older_save(
        saving_broker: Broker, protocol: str) -> None:
    b, store = saving_broker, MemoryStore()

    def source(topics: list[str]) -> MQTTSource:
        return MQTTSource(b.host, b.port, topics=topics, schema=READING, client_id="kt47",
                          ack="checkpoint", protocol=protocol, backoff=(0.02, 0.2))  # type: ignore[arg-type]

    async def first() -> None:
        src = source(["k/a"])
        g, _ = _graph(src)
        job = Job(g, checkpoints=store, checkpoint_period=0.05)
        task = asyncio.create_task(job.run())
        await src.subscribed.wait()
        await _publish(b.port, [("k/a", orjson.dumps(_reading("a", 0, 1.0)))])
        await _until(lambda: src.messages_acked >= 1)
        _save(b)  # the broker's database: the session with k/a
        await _finish(job, task)

    async def second() -> None:
        src = source(["k/a", "k/b"])
        g, sink = _graph(src)
        job = Job(g, checkpoints=store, checkpoint_period=0.05)
        task = asyncio.create_task(job.run())
        await src.subscribed.wait()
        await _publish(b.port, [("k/b", orjson.dumps(_reading("b", 1, 1.0)))])
        await _until(lambda: src.messages_acked >= 1)  # k/b subscribed and committed
        b.kill()
        b.start()  # back with its last save: the session holds k/a only
        await _until(lambda: src.reconnects >= 1)
        await _publish(b.port, [("k/a", orjson.dumps(_reading("a", 2, 1.0))),
                                ("k/b", orjson.dumps(_reading("b", 3, 1.0)))])
        await _until(lambda: 3 in _seqs(sink))  # before: k/b was read no more
        assert _seqs(sink) == [1, 2, 3] and src.sessions_lost == 0
        await _finish(job, task)

    asyncio.run(first())
    asyncio.run(second())


def test_reconnects_closed_before_their_connack_fail_at_once(saving_broker: Broker) -> None:
    """A proxy accepts each connection and resets it while the broker behind it is away: each
    attempt must fail at once and the next follow the backoff (before: one every 10 s)."""
    b = saving_broker
    away = False
    attempts = 0
    links: list[asyncio.StreamWriter] = []

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal attempts
        if away:
            attempts += 1
            writer.transport.abort()
            return
        back_reader, back_writer = await asyncio.open_connection(b.host, b.port)
        links.extend((writer, back_writer))
        await asyncio.gather(pipe(reader, back_writer), pipe(back_reader, writer))

    async def main() -> None:
        nonlocal away
        port = free_port()
        server = await asyncio.start_server(handle, "127.0.0.1", port)
        try:
            config = ClientConfig("127.0.0.1", port, client_id="lb47", persistent=True,
                                  backoff=(0.02, 0.2))
            async with MQTTClient(config, subscriptions=[("lb/#", 1)]) as client:
                away = True
                for writer in links:
                    writer.transport.abort()
                await _until(lambda: attempts >= 4, 8)  # before: 1 attempt in 10 s
                away = False
                await _until(lambda: client.connected, 8)
        finally:
            server.close()

    asyncio.run(main())
