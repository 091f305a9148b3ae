"""MQTTSource and the broker's persistent session (review 43, findings 1, 2 and 4).

1. Subscribing again to a filter the broker's session kept makes it send every retained message
   again, as new: an ``ack="checkpoint"`` source delivered them twice at each broker restart
   (reconnect) and each job restart. MQTT 5 subscriptions ask for Retain Handling 1 (review
   47 made every connection subscribe every filter: what a session holds is only a belief).
2. ``topics`` changed between two runs of one client_id: the old filter stayed in the session,
   delivering messages of a topic no longer subscribed (and, MQTT 5, a message matching the old
   and the new filter twice). Filters no longer wanted are now unsubscribed.
4. ``ack="receive"`` with a client_id used a clean session: what was published while the source
   reconnected after a broker restart was lost. Any client_id now gives a persistent session.

Against a real mosquitto (tests/mqtt_broker.py), on the wall clock; every wait polls for an
event with a deadline.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from structlog.testing import capture_logs

from riverbed.checkpoint import MemoryStore
from riverbed.graph import Graph
from riverbed.mqtt import ClientConfig, MQTTClient, MQTTSource
from riverbed.runtime import Job, JobError
from riverbed.testing import ListSink

from .mqtt_broker import Broker, broker
from .test_mqtt import READING, _graph, _publish, _reading, _run
from .test_mqtt_dedup import _run_job, _until

__all__ = ["broker"]  # the fixture, imported for pytest


def _seqs(sink: ListSink) -> list[int]:
    return sorted(t["seq"] for t in sink.tuples)


async def _publish_retained(port: int, topics: list[str]) -> None:
    async with MQTTClient(ClientConfig("127.0.0.1", port)) as client:
        for i, topic in enumerate(topics):
            await client.publish(topic, orjson.dumps(_reading("r", i, 1.0)), 1, retain=True)


def _source(broker: Broker, topics: list[str], protocol: str, client_id: str) -> MQTTSource:
    return MQTTSource(broker.host, broker.port, topics=topics, schema=READING, client_id=client_id,
                      ack="checkpoint", protocol=protocol, backoff=(0.02, 0.2))  # type: ignore[arg-type]


def _checkpointing(src: MQTTSource, store: MemoryStore) -> tuple[Job, Graph, ListSink]:
    g, sink = _graph(src)
    return Job(g, checkpoints=store, checkpoint_period=0.02), g, sink


@pytest.mark.parametrize("protocol", ["5"])
def test_retained_messages_come_once_across_a_broker_restart_and_a_job_restart(
        broker: Broker, protocol: str) -> None:
    """Before: the 3 retained readings came again after the broker restart (6 in the first
    run) and again in the second run. MQTT 5 only: every filter is subscribed at every
    connection (review 47: what the session holds is only a belief), and an MQTT 3.1.1 broker
    sends retained messages again at each subscribe (README: a dedup_key drops them)."""
    asyncio.run(_publish_retained(broker.port, [f"ret/a/{i}" for i in range(3)]))
    store = MemoryStore()
    first = _source(broker, ["ret/#"], protocol, "ret43")
    job1, _, sink1 = _checkpointing(first, store)

    async def feed1() -> None:
        await _until(lambda: first.messages_acked >= 3)  # in a committed checkpoint, acknowledged
        broker.restart()  # graceful: mosquitto saves the session, subscription included
        await _until(lambda: first.reconnects >= 1)
        await _publish(broker.port, [("ret/a/x", orjson.dumps(_reading("x", 10, 1.0)))])
        await _until(lambda: 10 in _seqs(sink1) and first.messages_acked >= 4)
        job1.abort()

    with pytest.raises(JobError, match="aborted"):
        _run_job(job1, first, feed1)
    assert _seqs(sink1) == [0, 1, 2, 10]

    second = _source(broker, ["ret/#"], protocol, "ret43")
    job2, _, sink2 = _checkpointing(second, store)

    async def feed2() -> None:
        await _publish(broker.port, [("ret/a/x", orjson.dumps(_reading("x", 11, 1.0)))])
        await _until(lambda: 11 in _seqs(sink2))
        job2.abort()

    with pytest.raises(JobError, match="aborted"):
        _run_job(job2, second, feed2)
    assert job2.restored_from is not None
    # Before: [0, 1, 2, 11]. (Reading 10, acknowledged just before the abort, may come again
    # if the abort beat its ack to the broker: that is no retained message.)
    assert [seq for seq in _seqs(sink2) if seq != 10] == [11]
    assert second.sessions_lost == 0 and not second.broker_warnings


@pytest.mark.parametrize("protocol", ["3.1.1", "5"])
def test_filters_dropped_from_topics_at_a_restart_are_unsubscribed(broker: Broker, protocol: str) -> None:
    """Before: the second run, on ``chg/b/#`` only, still got ``chg/a/x`` (the session kept
    ``chg/#``), and with MQTT 5 each ``chg/b/x`` reading twice (both filters match)."""
    store = MemoryStore()
    first = _source(broker, ["chg/#"], protocol, "chg43")
    job1, _, sink1 = _checkpointing(first, store)

    async def feed1() -> None:
        await _publish(broker.port, [("chg/a/x", orjson.dumps(_reading("a", 0, 1.0)))])
        await _until(lambda: first.messages_acked >= 1)
        job1.abort()

    with pytest.raises(JobError, match="aborted"):
        _run_job(job1, first, feed1)
    assert _seqs(sink1) == [0]

    second = _source(broker, ["chg/b/#"], protocol, "chg43")
    job2, _, sink2 = _checkpointing(second, store)

    async def feed2() -> None:
        await _publish(broker.port, [("chg/a/x", orjson.dumps(_reading("a", 1, 1.0))),
                                     ("chg/b/x", orjson.dumps(_reading("b", 2, 1.0))),
                                     ("chg/b/x", orjson.dumps(_reading("b", 3, 1.0)))])
        await _until(lambda: 3 in _seqs(sink2) and second.messages_acked >= 2)  # (committed)
        job2.abort()

    with capture_logs() as logs, pytest.raises(JobError, match="aborted"):
        _run_job(job2, second, feed2)
    assert _seqs(sink2) == [2, 3]
    (changed,) = [e for e in logs if e["event"] == "mqtt subscriptions changed"]
    assert changed["unsubscribed"] == ["chg/#"] and changed["subscribed"] == ["chg/b/#"]
    (region,) = job2.regions  # the checkpoint records what the session now holds
    assert region.last_committed is not None
    state = store.load(region.last_committed).states["mqtt"]["operator"]
    assert state["topics"] == [["chg/b/#", 1]]


def test_a_checkpoint_without_topics_still_restores_and_subscribes_all() -> None:
    """Checkpoints written before ``topics`` was in them: the filters are unknown, so the
    source subscribes all of them, as it did before."""
    from riverbed.mqtt._client import plan_subscriptions  # (here: the other tests run on old code)

    src = MQTTSource("127.0.0.1", 1883, topics=["t/a/#", "t/b"], client_id="old-ck", ack="checkpoint")
    old: dict[str, Any] = {"client_id": "old-ck", "records": 4, "acks": [[3, 1, 77]],
                           "acks_pending": [[2, 55]]}
    src.restore(old)
    assert src.records_submitted == 4 and src._committed == {2: 55, 3: 77}
    assert src._plan(True) == ((), [("t/a/#", 1), ("t/b", 1)])
    assert "topics" not in src.snapshot()
    # and the plan itself: every wanted filter, always; those recorded and no longer wanted go
    wanted = {"a/#": 1, "b": 1}
    assert plan_subscriptions(True, wanted, wanted) == ([], [("a/#", 1), ("b", 1)])
    assert plan_subscriptions(False, wanted, wanted) == ((), [("a/#", 1), ("b", 1)])
    assert plan_subscriptions(True, {"a/#": 1, "old": 1, "b": 0}, wanted) == (
        ["old"], [("a/#", 1), ("b", 1)])


def test_receive_mode_with_a_client_id_keeps_what_is_published_while_it_reconnects(
        broker: Broker) -> None:
    """Finding 4 (225 of 4,000 lost at QoS 2): with a clean session, what was published after
    the broker came back and before the source subscribed again was lost. The source waits 2 s
    before reconnecting, and the readings 5..9 are published in that time.

    ``dedup_key``: a persistent session may repeat QoS 2 messages across a broker restart
    (mosquitto restores those whose PUBCOMP it had not read as unsent, and sends them again
    with DUP, after paho delivered them at the PUBREL): a repeat, never a loss."""
    src = MQTTSource(broker.host, broker.port, topics=["rcv/#"], qos=2, schema=READING,
                     client_id="rcv43", max_records=11, backoff=(2.0, 2.0),
                     dedup_key="seq")  # ack="receive"
    g, sink = _graph(src)

    async def feed() -> None:
        await _publish(broker.port, [("rcv/a", orjson.dumps(_reading("a", i, 1.0))) for i in range(5)], qos=2)
        await _until(lambda: src.records_submitted >= 5)
        broker.restart()  # graceful: mosquitto saves the session
        await _publish(broker.port, [("rcv/a", orjson.dumps(_reading("a", i, 1.0))) for i in range(5, 10)],
                       qos=2)
        await _until(lambda: src.reconnects >= 1)
        await _publish(broker.port, [("rcv/a", orjson.dumps(_reading("a", 10, 1.0)))], qos=2)

    _run(g, src, feed)
    assert _seqs(sink) == list(range(11))  # before: 0..4 and 10
    assert src.sessions_lost == 0
