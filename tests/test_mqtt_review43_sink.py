"""MQTTSink and brokers at fault (review 43, findings 3, 5 and 6).

3. A message above the broker's maximum packet size: the broker closes the connection on it,
   paho sent it again at each reconnect, and the sink looped for ever (a stop waited for it too).
   It now fails the sink with an error naming the size and the limit: before sending, when the
   broker announced its limit (MQTT 5), or after the connection closed three times in a row
   with it in flight (MQTT 3.1.1).
5. The status view and the metrics did not show a broker that was away; the sink had no MQTT
   counters. Both operators count ``connected``; the sink ``reconnects``, ``queued`` and
   ``published``.
6. paho logged ``failed to receive on socket`` at error at each drop, and a connection the broker
   closed at once left the event loop with a stale registration ("Bad file descriptor"
   tracebacks; the next connection's socket, of the same number, was then no longer read).

Against a real mosquitto (tests/mqtt_broker.py), on the wall clock; every wait polls for an
event with a deadline.
"""

from __future__ import annotations

import asyncio
import logging
import re

import pytest

from riverbed.graph import Graph, Schema
from riverbed.mqtt import MQTTSink, MQTTSource
from riverbed.operators import Beacon
from riverbed.runtime import Job, JobError
from riverbed.runtime._status import render_plain
from riverbed.testing import ListSink

from .mqtt_broker import Broker, broker, start_broker
from .test_mqtt_sink_checkpoints import wait_until

__all__ = ["broker"]  # the fixture, imported for pytest

TIMEOUT = 30.0
PADDED = Schema(seq="int64", pad="rstring")


def _noise(records: list[logging.LogRecord]) -> list[str]:
    """Errors of the event loop (a stale socket registration) and of paho (a socket closed)."""
    return [r.getMessage() for r in records if r.levelno >= logging.ERROR
            and (r.name == "asyncio" or "socket" in r.getMessage())]


@pytest.mark.parametrize("protocol", ["3.1.1", "5"])
def test_a_message_above_the_broker_packet_limit_fails_the_sink(
        protocol: str, caplog: pytest.LogCaptureFixture) -> None:
    """Before: the job never ended (paho resent the message at each reconnect)."""
    b = start_broker(settings={"max_packet_size": "1000"})
    try:
        g = Graph("big")
        beacon = Beacon(iterations=3, output={"seq": lambda i: i, "pad": lambda i: "x" * (2000 * (i == 1))})
        s = g.source("beacon", beacon, schema=PADDED)
        sink = MQTTSink(b.host, b.port, topic="big/out", protocol=protocol,  # type: ignore[arg-type]
                        window=1, backoff=(0.02, 0.1))
        g.sink("pub", sink, [s])
        with pytest.raises(JobError) as failed:
            asyncio.run(asyncio.wait_for(Job(g).run(), TIMEOUT))
    finally:
        b.close()
    message = str(failed.value)
    if protocol == "5":  # the broker announced its limit: refused before sending
        assert "maximum packet size of 1000 bytes" in message, message
        assert "a message of 2033 bytes (PUBLISH packet, payload 2018 bytes)" in message, message
    else:  # no limit announced: given up after the connection closed three times on it
        assert re.search(r"closed the connection \d+ times in a row", message), message
        assert "the largest has 2018 bytes" in message, message
    assert sink.messages_published == 1  # the reading before it went out
    assert _noise(caplog.records) == []


def test_paho_socket_errors_are_debug_records() -> None:
    from riverbed.mqtt._client import PAHO_LOGGER  # (here: the other tests run on old code)

    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    keep = Keep(logging.DEBUG)
    PAHO_LOGGER.addHandler(keep)
    level = PAHO_LOGGER.level
    try:
        PAHO_LOGGER.setLevel(logging.INFO)
        PAHO_LOGGER.error("failed to receive on socket: %s", "[Errno 104] Connection reset by peer")
        PAHO_LOGGER.error("Caught exception in on_message: %s", "boom")
        assert [(r.levelname, r.getMessage()) for r in seen] == [
            ("ERROR", "Caught exception in on_message: boom")]  # the drop is below INFO: dropped
        PAHO_LOGGER.setLevel(logging.DEBUG)
        PAHO_LOGGER.error("failed to receive on socket: %s", "x")
        assert (seen[-1].levelname, seen[-1].getMessage()) == ("DEBUG", "failed to receive on socket: x")
    finally:
        PAHO_LOGGER.removeHandler(keep)
        PAHO_LOGGER.setLevel(level)


def test_connected_and_the_sink_counters_show_a_broker_that_is_away(broker: Broker) -> None:
    """Before: with the broker stopped, nothing in the metrics or the status line said so."""
    g = Graph("away")
    readings = g.source("beacon", Beacon(iterations=1_000_000, period=0.002, output={"seq": lambda i: i}),
                        schema=Schema(seq="int64"))
    sink = MQTTSink(broker.host, broker.port, topic="away/out", backoff=(0.02, 0.1))
    g.sink("pub", sink, [readings])
    src = MQTTSource(broker.host, broker.port, topics=["away/in"], schema=Schema(seq="int64"),
                     topic_attribute=None, backoff=(0.02, 0.1))
    g.sink("out", ListSink(), [g.source("mqtt", src, schema=Schema(seq="int64"))])
    job = Job(g)

    def value(op: str, name: str) -> int:
        counters = job.snapshot_metrics().operators[op].counters
        return counters[name].value if name in counters else -1

    async def main() -> list[str]:
        task = asyncio.create_task(job.run())
        try:
            await wait_until(lambda: value("pub", "connected") == 1 and value("mqtt", "connected") == 1
                             and value("pub", "published") > 0, "both connected, publishing")
            broker.stop()
            await wait_until(lambda: value("pub", "connected") == 0 and value("mqtt", "connected") == 0,
                             "both disconnected")
            await wait_until(lambda: value("pub", "queued") > 0, "readings queued for the broker")
            status = render_plain(job.snapshot_metrics(), None, 0)
            published = value("pub", "published")
            broker.start()
            await wait_until(lambda: value("pub", "connected") == 1 and value("mqtt", "connected") == 1
                             and value("pub", "reconnects") >= 1
                             and value("pub", "published") > published, "both back, publishing")
        finally:
            job.stop()
            await asyncio.wait_for(task, TIMEOUT)
        return status

    status = asyncio.run(main())
    (pub,) = [line for line in status if line.startswith("away/pub:")]
    (mqtt,) = [line for line in status if line.startswith("away/mqtt:")]
    assert "connected=0" in pub and "queued=" in pub and "published=" in pub, pub
    assert "connected=0" in mqtt, mqtt
