"""MQTTSource's checks of what it is given, and packet ids a broker wraps (a review's findings):
an id in use given to a new message was taken for a repeat (4,465 of 70,000 lost); ack="checkpoint"
in a job without checkpoints never acknowledged, silently; overlapping filters gave each message
twice with MQTT 5; an invalid filter hung the source. Against a real mosquitto where it matters
(tests/mqtt_broker.py); the jobs end after ``max_records`` and nothing sleeps."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
import structlog
from structlog.testing import capture_logs

from riverbed.checkpoint import MemoryStore
from riverbed.mqtt import (
    ClientConfig,
    MQTTClient,
    MQTTConfigError,
    MQTTConnectError,
    MQTTSink,
    MQTTSource,
    Received,
    check_topic_filters,
)
from riverbed.runtime import Job

from .mqtt_broker import Broker, broker
from .test_mqtt import _graph, _publish

__all__ = ["broker"]  # the fixture, imported for pytest

SEQ = {"seq": "int64"}


def _source(out: list[Any], **kw: Any) -> MQTTSource:
    src = MQTTSource("127.0.0.1", 1883, topics=["w/#"], schema=SEQ, topic_attribute=None,
                     client_id="wrap-unit", ack="checkpoint", **kw)
    src.submit = out.append  # type: ignore[method-assign]  # what the runtime binds at setup
    src._logger = structlog.get_logger()  # what setup sets
    return src


def test_a_packet_id_in_use_given_to_a_new_message_is_not_taken_for_a_repeat(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """mosquitto (max_inflight_messages 0) wraps its 16-bit packet ids past 65,535 unacknowledged
    messages: the new message has no DUP flag, and only a DUP with the same topic and payload is
    a repeat. The source warns as it nears that many between two checkpoints."""
    monkeypatch.setattr("riverbed.mqtt._operators.WRAP_WARNING", 3, raising=False)
    out: list[Any] = []
    src = _source(out)
    with capture_logs() as logs:
        src._ingest(Received("w/t", b'{"seq": 1}', 1, 7, False), manual=True)
        src._ingest(Received("w/t", b'{"seq": 2}', 1, 8, False), manual=True)
        src._ingest(Received("w/t", b'{"seq": 3}', 1, 7, False), manual=True)  # id 7 again: new
        src._ingest(Received("w/t", b'{"seq": 1}', 1, 7, False, dup=True), manual=True)  # a repeat
        src._ingest(Received("w/t", b'{"seq": 4}', 1, 8, False, dup=True), manual=True)  # not one
    assert out == [{"seq": 1}, {"seq": 2}, {"seq": 3}, {"seq": 4}]
    assert src.redeliveries_skipped == 1
    assert [e["unacked"] for e in logs if e["event"] == "mqtt packet ids wrapping"] == [3]
    src.snapshot()
    src.on_checkpoint_committed(1)  # both messages of id 7 acked (not connected: kept to skip)
    assert sorted(src._committed) == [7, 8] and not src._unacked


def test_ack_checkpoint_in_a_job_without_checkpoints_is_warned_about(broker: Broker) -> None:
    """Nothing is ever acknowledged there, and each start got the whole history again, silently."""

    def run(checkpoints: MemoryStore | None) -> list[dict[str, Any]]:
        src = MQTTSource(broker.host, broker.port, topics=["nock/#"], schema=SEQ, topic_attribute=None,
                         client_id="nock", ack="checkpoint", max_records=1)
        g, _ = _graph(src, None)

        async def main() -> None:
            job = Job(g, checkpoints=checkpoints, logger=structlog.get_logger().bind(job="nock"))
            task = asyncio.create_task(job.run())
            await asyncio.wait_for(src.subscribed.wait(), 20)
            await _publish(broker.port, [("nock/t", orjson.dumps({"seq": 1}))])
            await asyncio.wait_for(task, 20)

        with capture_logs() as logs:
            asyncio.run(main())
        return [e for e in logs if e["event"] == "mqtt source without checkpoints"]

    (warned,) = run(None)
    assert "acknowledges messages only when a checkpoint" in warned["detail"]
    assert run(MemoryStore()) == []


@pytest.mark.parametrize(("topics", "message"), [
    (["a/#/b"], r"'a/#/b': '#' must be the last level"),
    (["#/x"], r"'#/x': '#' must be the last level"),
    (["a+/b"], r"'a\+/b': a wildcard must be a whole level, not part of 'a\+'"),
    (["a/b#"], r"'a/b#': a wildcard must be a whole level, not part of 'b#'"),
    (["ov/#", "ov/+/temp"], r"'ov/#' and 'ov/\+/temp' overlap .*once per filter"),
    (["a/+/c", "a/b/+"], r"'a/\+/c' and 'a/b/\+' overlap"),
    (["a", "a/#"], r"'a' and 'a/#' overlap"),
    (["a/b", "a/b"], r"'a/b' and 'a/b' overlap"),
])
def test_invalid_or_overlapping_topic_filters_are_refused_at_construction(
        topics: list[str], message: str) -> None:
    with pytest.raises(MQTTConfigError, match=message):
        MQTTSource("h", topics=topics)


def test_filters_that_no_topic_matches_both_of_are_taken() -> None:
    topics = ["plant/+/temp", "plant/+/hum", "alarms/#", "$SYS/broker/#"]
    assert check_topic_filters(topics) == topics
    assert check_topic_filters(["#", "$SYS/#"]) == ["#", "$SYS/#"]  # '#' matches no '$' topic
    assert check_topic_filters(["a/+", "a"]) == ["a/+", "a"]  # 'a/+' does not match 'a'


def test_a_filter_paho_refuses_ends_the_client_with_an_error_not_a_hang(broker: Broker) -> None:
    """The ValueError of paho's subscribe ended the connection task; the client waited for ever."""

    async def main() -> None:
        client = MQTTClient(ClientConfig("127.0.0.1", broker.port), subscriptions=[("a/#/b", 1)],
                            name="bad-filter")
        async with client:
            await client.receive(5)

    with pytest.raises(MQTTConnectError, match=r"'bad-filter' failed: ValueError"):
        asyncio.run(asyncio.wait_for(main(), 20))


def test_raw_payloads_need_a_blob_attribute() -> None:
    """The payload is bytes: an rstring attribute failed only at the first message or tuple."""
    with pytest.raises(MQTTConfigError, match=r"format='raw' .*'payload' of type blob; the schema "
                                              r"has it as rstring: declare payload='blob'"):
        MQTTSink("h", topic="a", format="raw", schema={"payload": "rstring"})
    with pytest.raises(MQTTConfigError, match=r"format='raw' .*lacks it: add payload='blob'"):
        MQTTSource("h", topics=["a"], format="raw", schema={"body": "blob"}, topic_attribute=None)
    MQTTSource("h", topics=["a"], format="raw", schema={"payload": "blob"}, topic_attribute=None)
