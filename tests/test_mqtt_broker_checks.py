"""Connect-time checks of what a source can observe of the broker's settings (issue 16, item 8).

What cannot be observed (persistence, autosave_interval, queue limits, MQTT 3.1.1's in-flight
window) is documented in riverbed.mqtt._checks and the README; these tests pin down what can,
against real mosquitto brokers set up to defeat the guarantees. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import orjson
import pytest

from riverbed.mqtt import BrokerWarning, ConnectInfo, MQTTSource, connect_warnings

from .mqtt_broker import Broker, broker, start_broker
from .test_mqtt import READING, _graph, _publish, _reading, _run

__all__ = ["broker"]  # the fixture, imported for pytest


async def _until(condition: Callable[[], bool], timeout: float = 10) -> None:
    """Polling for an event of the source (its counters), bounded."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.005)


def _checks(src: MQTTSource) -> list[str]:
    return [w.check for w in src.broker_warnings]


def test_a_broker_that_lost_the_session_is_reported_and_new_messages_are_not_taken_for_repeats() -> None:
    # No persistence: a restart forgets the session. The source had acked nothing (no
    # checkpoints), so its packet ids 1..5 were still "unacknowledged, in the stream"; the new
    # session numbers its messages 1..5 again, and the source used to skip them as redeliveries.
    b = start_broker(settings={"persistence": "false"})
    try:
        src = MQTTSource(b.host, b.port, topics=["s/#"], schema=READING, client_id="lost-session",
                         ack="checkpoint", max_records=10, backoff=(0.02, 0.2))
        g, sink = _graph(src)

        async def feed() -> None:
            await _publish(b.port, [("s/a", orjson.dumps(_reading("a", i, 1.0))) for i in range(5)])
            await _until(lambda: src.records_submitted >= 5)
            b.restart()
            await _until(lambda: src.reconnects >= 1)
            await _publish(b.port, [("s/a", orjson.dumps(_reading("a", i, 1.0))) for i in range(5, 10)])

        metrics = _run(g, src, feed, timeout=15)
    finally:
        b.close()
    assert [t["seq"] for t in sink.tuples] == list(range(10))
    assert src.sessions_lost == 1 and _checks(src) == ["session_lost"]
    assert "LOST" in src.broker_warnings[0].message and "persistence true" in src.broker_warnings[0].message
    assert metrics.operators["mqtt"].counters["broker_warnings"].value == 1


def test_mqtt5_receive_maximum_and_a_downgraded_qos_are_warned_about() -> None:
    # mosquitto's defaults for the in-flight window (20), and a listener capped at QoS 0.
    b = start_broker(settings={"max_inflight_messages": None, "max_qos": "0"})
    try:
        v5 = MQTTSource(b.host, b.port, topics=["q/#"], schema=READING, client_id="checks-5", protocol="5",
                        qos=1, ack="checkpoint", max_records=1)
        g, sink = _graph(v5)
        _run(g, v5, lambda: _publish(b.port, [("q/a", orjson.dumps(_reading("a", 1, 1.0)))], qos=0))
        v311 = MQTTSource(b.host, b.port, topics=["q/#"], schema=READING, client_id="checks-311",
                          qos=1, ack="checkpoint", max_records=1)
        g, _ = _graph(v311)
        _run(g, v311, lambda: _publish(b.port, [("q/a", orjson.dumps(_reading("a", 2, 1.0)))], qos=0))
    finally:
        b.close()
    assert len(sink.tuples) == 1
    assert sorted(_checks(v5)) == ["qos_downgraded", "receive_maximum"]
    text = " ".join(w.message for w in v5.broker_warnings)
    assert "Receive Maximum 20" in text and "max_inflight_messages 0" in text
    assert "granted QoS 0 for 'q/#', 1 was asked" in text
    # MQTT 3.1.1 has no CONNACK properties: only the SUBACK tells; no claim about the window.
    assert _checks(v311) == ["qos_downgraded"]


def test_a_broker_set_up_as_the_readme_says_gets_no_warning(broker: Broker) -> None:
    src = MQTTSource(broker.host, broker.port, topics=["ok/#"], schema=READING, client_id="checks-ok",
                     protocol="5", ack="checkpoint", max_records=1)
    g, _ = _graph(src)
    _run(g, src, lambda: _publish(broker.port, [("ok/a", orjson.dumps(_reading("a", 1, 1.0)))]))
    assert src.broker_warnings == type(src.broker_warnings)() and src.sessions_lost == 0


@pytest.mark.parametrize(("info", "checkpointed", "expected"), [
    (ConnectInfo(True, True, True, "5", {"SessionExpiryInterval": 60}), True, ["session_expiry"]),
    (ConnectInfo(True, True, True, "5", {"SessionExpiryInterval": 3600}), True, []),
    (ConnectInfo(True, True, True, "5", {"ReceiveMaximum": 65535}), True, []),  # no limit
    (ConnectInfo(True, False, False, "5", {"ReceiveMaximum": 10}), False, []),  # acks on receipt
    (ConnectInfo(False, False, False, "3.1.1"), True, []),  # a first connect: no session yet
    (ConnectInfo(False, True, False, "3.1.1"), True, ["session_lost"]),  # restored, but gone
    (ConnectInfo(True, False, False, "3.1.1", {}, (("a/#", 1, 0x80), ("b", 1, 1))), False,
     ["subscription_refused"]),
])
def test_connect_warnings(info: ConnectInfo, checkpointed: bool, expected: list[str]) -> None:
    got = connect_warnings(info, client_id="c", checkpointed=checkpointed, session_expiry=3600)
    assert [w.check for w in got] == expected
    assert all(isinstance(w, BrokerWarning) and w.message for w in got)
    if expected == ["session_lost"]:
        assert "restored from a checkpoint" in got[0].message
