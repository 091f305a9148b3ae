"""The pieces of riverbed.mqtt that MQTTSource and the Spark MQTT input share (issue 17, item 4):
`PayloadDecoder`, `BadMessages`, and what `MQTTClient` offers a host that is not a graph
source (a first connection that fails at once, a session plan that does not subscribe again).
"""

from __future__ import annotations

import asyncio
import pickle
from typing import Any

import orjson
import pytest

from riverbed.mqtt import (
    BadMessage,
    BadMessages,
    ClientConfig,
    MQTTClient,
    MQTTConfigError,
    MQTTConnectError,
    PayloadDecoder,
    Received,
)

from .mqtt_broker import Broker, broker, free_port

__all__ = ["broker"]  # the fixture, imported for pytest

SCHEMA = {"sensor": "rstring", "seq": "int64", "temp": "float64", "topic": "rstring", "site": "rstring"}


def test_a_decoder_refuses_as_the_source_does_and_decides_the_same_once_pickled() -> None:
    dec = PayloadDecoder("json", SCHEMA, topic_levels={"site": 0}, max_payload=200)
    good = orjson.dumps({"sensor": "a", "seq": 1, "temp": 20})
    batch = orjson.dumps([{"sensor": "b", "seq": 2, "temp": 1.5}, 17, {"sensor": "c", "seq": "x", "temp": 1}])
    assert dec.decode("plant/a", good) == ([{"sensor": "a", "seq": 1, "temp": 20.0, "topic": "plant/a",
                                             "site": "plant"}], [])
    records, bad = dec.decode("plant/b", batch)
    assert records == [{"sensor": "b", "seq": 2, "temp": 1.5, "topic": "plant/b", "site": "plant"}]
    assert [(b.kind, b.index) for b in bad] == [("invalid", 1), ("invalid", 1)]  # codec, then schema
    assert "expected an object" in bad[0].reason and "seq" in bad[1].reason
    assert dec.decode("p", b"{no")[1][0].kind == "undecodable"
    assert dec.decode("p", b"x" * 201)[1] == [BadMessage("p", b"x" * 201, "oversized",
                                                          "payload of 201 bytes > max_payload=200")]
    # An empty batch was dropped with no word: no record, and no refusal either.
    assert dec.decode("p", b"[]") == ([], [BadMessage("p", b"[]", "invalid",
                                                      "the message holds no record (an empty batch)")])
    # A decode function's [] skips the message on purpose (a heartbeat): no refusal.
    skip = PayloadDecoder("function", {"v": "int64"}, decode=lambda b: [], topic_attribute=None)
    assert skip.decode("p", b"ping") == ([], [])
    clone = pickle.loads(pickle.dumps(dec))  # as Spark ships it to its tasks
    for topic, payload in [("plant/a", good), ("plant/b", batch), ("p", b"{no"), ("p", b"x" * 201)]:
        assert clone.decode(topic, payload) == dec.decode(topic, payload)
    with pytest.raises(MQTTConfigError, match="topic attribute 'topic' is not in the schema"):
        PayloadDecoder("json", {"v": "int64"})
    with pytest.raises(MQTTConfigError, match="max_payload=0"):
        PayloadDecoder("json", max_payload=0)


def test_bad_messages_are_counted_kept_logged_handed_over_and_dead_lettered() -> None:
    logged: list[tuple[str, dict[str, Any]]] = []
    seen: list[BadMessage] = []
    put: list[BadMessage] = []

    class Letters:  # stands in for DeadLetters: only put() is called
        def put(self, bad: BadMessage) -> None:
            put.append(bad)

    bads = BadMessages(on_bad=seen.append, log=lambda e, f: logged.append((e, f)))
    bads.dead_letters = Letters()  # type: ignore[assignment]
    one, two = BadMessage("t", b"x", "undecodable", "why"), BadMessage("t", b"y", "invalid", "because", 2)
    bads.report(one)
    bads.report(two)
    assert bads.counts == {"undecodable": 1, "invalid": 1} and bads.total == 2
    assert list(bads.recent) == seen == put == [one, two]
    assert logged[1] == ("mqtt bad payload", {"topic": "t", "kind": "invalid", "reason": "because"})


def test_a_first_connection_can_fail_at_once_and_says_where() -> None:
    port = free_port()  # nothing listens there

    async def connect(retry: bool) -> None:
        async with MQTTClient(ClientConfig("127.0.0.1", port), retry_first_connect=retry):
            pass

    with pytest.raises(MQTTConnectError, match=f"cannot connect to the MQTT broker at 127.0.0.1:{port}"
                                               ".*check the host") as info:
        asyncio.run(asyncio.wait_for(connect(False), 10))
    assert isinstance(info.value, ConnectionError)  # the Spark source's connect error was one
    with pytest.raises(TimeoutError):  # the default keeps trying
        asyncio.run(asyncio.wait_for(connect(True), 0.5))


def test_a_session_plan_keeps_the_broker_from_resending_retained_messages(broker: Broker) -> None:
    cfg = ClientConfig(broker.host, broker.port, client_id="planned", persistent=True)

    async def session(plan: bool) -> list[Received]:
        def keep(present: bool) -> tuple[list[str], list[tuple[str, int]]]:
            return [], [] if present else [("ret/#", 1)]

        async with MQTTClient(cfg, subscriptions=[("ret/#", 1)], session_plan=keep if plan else None) as c:
            async with MQTTClient(ClientConfig(broker.host, broker.port)) as pub:
                await pub.publish("ret/live", b"new", 1)
            got: list[Received] = []
            while not any(m.payload == b"new" for m in got):
                got += await c.receive(5)
            return got

    async def main() -> None:
        async with MQTTClient(ClientConfig(broker.host, broker.port)) as pub:
            await pub.publish("ret/x", b"retained", 1, retain=True)
        first = await session(plan=True)
        assert [m.payload for m in first] == [b"retained", b"new"]  # a new session subscribes
        again = await session(plan=True)
        assert [m.payload for m in again] == [b"new"]  # the kept subscription: no resend
        resubscribed = await session(plan=False)
        assert [m.payload for m in resubscribed] == [b"retained", b"new"]

    asyncio.run(asyncio.wait_for(main(), 30))
