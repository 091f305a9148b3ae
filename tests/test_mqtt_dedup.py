"""``dedup_key``: the repeats a broker restart delivers come out once (issue 16, item 8).

A mosquitto killed between two saves of its database comes back with the session as last
saved and delivers again what the source had already acknowledged. The tests reproduce that
with a real broker (a save forced with SIGUSR1, then SIGKILL), and check the sequence state
through snapshot/restore. Real I/O on the wall clock; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Awaitable, Callable

import orjson
import pytest

from riverbed.checkpoint import MemoryStore
from riverbed.graph import Graph
from riverbed.mqtt import ClientConfig, Dedup, MQTTClient, MQTTConfigError, MQTTSource
from riverbed.runtime import Job, JobError
from riverbed.testing import ListSink

from .mqtt_broker import Broker, broker, start_broker
from .test_mqtt import READING, _graph, _publish, _reading, _run

__all__ = ["broker"]  # the fixture, imported for pytest


async def _until(condition: Callable[[], bool], timeout: float = 10) -> None:
    """Polling for an event of the source (its counters), bounded."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.005)


# ------------------------------------------------------------------ the sequence state


def test_a_sequence_per_scope_drops_what_is_not_above_the_last() -> None:
    d = Dedup("seq", ["sensor"])
    got = [d.admit({"sensor": s, "seq": q}) for s, q in
           [("a", 1), ("a", 2), ("b", 1), ("a", 2), ("a", 1), ("b", 2), ("a", 3), ("b", 2)]]
    assert got == [True, True, True, False, False, True, True, False]
    assert d.dropped == 3
    assert Dedup("seq").admit({"seq": 1.5}) is True  # floats and ints are one kind
    one = Dedup("seq")
    got = [one.admit({"seq": q, "sensor": s}) for s, q in [("a", 5), ("b", 5), ("b", 6)]]
    assert got == [True, False, True]


def test_a_value_that_is_no_sequence_is_refused_with_the_reason() -> None:
    d = Dedup("seq", ["topic"])
    with pytest.raises(ValueError, match="no attribute 'seq'"):
        d.admit({"topic": "t"})
    with pytest.raises(ValueError, match=r"dedup_key 'seq' is None \(NoneType\): expected an int"):
        d.admit({"topic": "t", "seq": None})
    with pytest.raises(ValueError, match=r"dedup_key 'seq' is True"):
        d.admit({"topic": "t", "seq": True})
    assert d.admit({"topic": "t", "seq": 3})
    with pytest.raises(ValueError, match="keeps one kind"):
        d.admit({"topic": "t", "seq": "4"})
    with pytest.raises(ValueError, match="scope values must be strings or numbers"):
        d.admit({"topic": ["t"], "seq": 1})


def test_the_state_survives_snapshot_and_restore_through_a_checkpoint() -> None:
    d = Dedup("seq", ["topic", "sensor"])
    for topic, sensor, seq in [("x", "a", 4), ("x", "b", 7), ("y", "a", "2026-01-01T00:00:03Z")]:
        assert d.admit({"topic": topic, "sensor": sensor, "seq": seq})
    store = MemoryStore()
    store.save(1, {"src": d.snapshot()}, job="j", time_ns=0)  # the checkpoint encoding: lists, not tuples
    again = Dedup("seq", ["topic", "sensor"])
    assert again.restore(store.load(1).states["src"])
    assert again.last == d.last
    assert not again.admit({"topic": "x", "sensor": "a", "seq": 4})
    assert not again.admit({"topic": "y", "sensor": "a", "seq": "2026-01-01T00:00:02Z"})
    assert again.admit({"topic": "x", "sensor": "b", "seq": 8})
    # Taken with another key or scope: its numbers mean nothing here, so nothing is restored.
    assert not Dedup("n", ["topic", "sensor"]).restore(d.snapshot())
    assert not Dedup("seq", ["topic"]).restore(d.snapshot())
    assert not Dedup("seq").restore(None)


def test_dedup_options_are_checked() -> None:
    with pytest.raises(MQTTConfigError, match="dedup_scope='topic' without dedup_key"):
        MQTTSource("h", topics=["a"], dedup_scope="topic")
    with pytest.raises(MQTTConfigError, match=r"dedup_key=''"):
        MQTTSource("h", topics=["a"], dedup_key="")
    with pytest.raises(MQTTConfigError, match="dedup attribute 'n' is not in the schema"):
        MQTTSource("h", topics=["a"], schema=READING, dedup_key="n")
    with pytest.raises(MQTTConfigError, match="dedup attribute 'site' is not in the schema"):
        MQTTSource("h", topics=["a"], schema=READING, dedup_key="seq", dedup_scope=["topic", "site"])


# ------------------------------------------------------------------ through a real broker


def test_messages_delivered_twice_come_out_once(broker: Broker) -> None:
    src = MQTTSource(broker.host, broker.port, topics=["d/#"], schema=READING, dedup_key="seq",
                     dedup_scope="topic", max_records=14)
    g, sink = _graph(src)
    first = [(f"d/{s}", orjson.dumps(_reading(s, i, 1.0))) for i in range(5) for s in "ab"]
    later = [(f"d/{s}", orjson.dumps(_reading(s, 5 + i, 1.0))) for i in range(2) for s in "ab"]
    metrics = _run(g, src, lambda: _publish(broker.port, first + first + later))  # each of `first` twice
    got = sorted((t["topic"], t["seq"]) for t in sink.tuples)
    assert got == [(f"d/{s}", i) for s in "ab" for i in range(7)]
    assert src.duplicates_dropped == 10 and src.bad_messages == 0
    assert metrics.operators["mqtt"].counters["duplicates"].value == 10


def _run_job(job: Job, src: MQTTSource, feed: Callable[[], Awaitable[None]], timeout: float = 30) -> None:
    async def main() -> None:
        task = asyncio.create_task(job.run())
        await asyncio.wait_for(src.subscribed.wait(), timeout)
        try:
            await asyncio.wait_for(feed(), timeout)
        except BaseException:
            task.cancel()
            raise
        await asyncio.wait_for(task, timeout)

    asyncio.run(main())


@pytest.mark.parametrize("dedup", [True, False])
def test_a_broker_killed_between_saves_redelivers_what_was_acked_and_dedup_drops_it(dedup: bool) -> None:
    # autosave every hour: the only save is the one forced below, as if the kill came just
    # before the next periodic one.
    b = start_broker(settings={"autosave_interval": "3600"})
    try:
        async def prepare() -> None:
            session = ClientConfig("127.0.0.1", b.port, client_id="dedup-consumer", persistent=True)
            async with MQTTClient(session, subscriptions=[("k/#", 1)]):
                pass
            await _publish(b.port, [("k/a", orjson.dumps(_reading("a", i, 1.0))) for i in range(10)])

        asyncio.run(prepare())
        db = b.workdir / "mosquitto.db"
        assert b.proc is not None
        b.proc.send_signal(signal.SIGUSR1)  # mosquitto saves its database now
        deadline = time.monotonic() + 10
        while not db.exists():  # polling the broker subprocess's file, bounded
            assert time.monotonic() < deadline, "mosquitto did not save on SIGUSR1"
            time.sleep(0.005)
        src = MQTTSource(b.host, b.port, topics=["k/#"], schema=READING, client_id="dedup-consumer",
                         ack="checkpoint", dedup_key="seq" if dedup else None,
                         max_records=15 if dedup else 25, backoff=(0.02, 0.2))
        g, sink = _graph(src)
        job = Job(g, checkpoints=MemoryStore(), checkpoint_period=0.02)

        async def feed() -> None:
            await _until(lambda: src.messages_acked >= 10)  # committed and acknowledged
            b.kill()
            b.start()  # from the saved database: the 10 are queued again
            await _until(lambda: src.reconnects >= 1)
            await _publish(b.port, [("k/a", orjson.dumps(_reading("a", i, 1.0))) for i in range(10, 15)])

        _run_job(job, src, feed)
    finally:
        b.close()
    seqs = sorted(t["seq"] for t in sink.tuples)
    if dedup:
        assert seqs == list(range(15))
        assert src.duplicates_dropped == 10
    else:  # what the issue saw: acknowledged messages delivered again
        assert seqs == sorted([*range(15), *range(10)])
    assert src.sessions_lost == 0 and not src.broker_warnings  # the session was there, only stale


def test_the_sequences_survive_a_restart_of_riverbed(broker: Broker) -> None:
    store = MemoryStore()

    def build() -> tuple[Graph, MQTTSource, ListSink]:
        src = MQTTSource(broker.host, broker.port, topics=["r/#"], schema=READING, client_id="dedup-restart",
                         ack="checkpoint", dedup_key="seq", dedup_scope="sensor", backoff=(0.02, 0.2))
        g, sink = _graph(src)
        return g, src, sink

    g1, first, sink1 = build()
    job1 = Job(g1, checkpoints=store, checkpoint_period=0.02)

    readings = [("r/x", orjson.dumps(_reading(s, i, 1.0))) for i in range(5) for s in "ab"]

    async def feed1() -> None:
        await _publish(broker.port, readings)
        await _until(lambda: first.messages_acked >= 10)
        job1.abort()  # a crash: nothing drained, no final punctuation

    with pytest.raises(JobError, match="aborted"):
        _run_job(job1, first, feed1)
    assert len(sink1.tuples) == 10
    g2, second, sink2 = build()
    second.max_records = 12  # it counts across restarts: 10 before, 2 now
    job2 = Job(g2, checkpoints=store, checkpoint_period=0.02)
    new = [("r/x", orjson.dumps(_reading(s, 5, 1.0))) for s in "ba"]
    _run_job(job2, second, lambda: _publish(broker.port, [*readings, *new]))  # the 10 again, 2 new
    assert job2.restored_from is not None
    assert [(t["sensor"], t["seq"]) for t in sink2.tuples] == [("b", 5), ("a", 5)]
    assert second.duplicates_dropped == 10
    assert second.sessions_lost == 0 and not second.broker_warnings
