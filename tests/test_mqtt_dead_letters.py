"""Dead letters never block ingestion (issue 16, item 3), against a real mosquitto whose
``max_packet_size`` is smaller than a dead-letter envelope.

Before the fix the envelope went out on the source's own connection and was retried without
end: the broker dropped the connection at every attempt and the source stalled (no output,
no checkpoints). Real I/O on the wall clock; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import orjson
import pytest

from riverbed.mqtt import (
    BadMessage,
    ClientConfig,
    DeadLetters,
    MQTTClient,
    MQTTConfigError,
    MQTTSource,
    dead_letter_envelope,
)

from .mqtt_broker import start_broker
from .test_mqtt import READING, _graph, _publish, _reading, _run

MAX_PACKET = 1024


def _good(seqs: range) -> list[tuple[str, bytes]]:
    return [("in/a", orjson.dumps(_reading("a", i, 1.0))) for i in seqs]


def _feed_with_a_large_binary_dead_letter(port: int, letters: list[dict[str, Any]], want: int) -> Any:
    # 700 bytes of non-UTF-8: base64 makes it 936, the JSON envelope ~1040 > MAX_PACKET.
    bad = ("in/a", b"\xff" * 700)

    async def feed() -> None:
        async with MQTTClient(ClientConfig("127.0.0.1", port), subscriptions=[("dead/#", 1)]) as dl:
            await _publish(port, [*_good(range(10)), bad, *_good(range(10, 20))])
            while len(letters) < want:  # bounded by _run's timeout
                letters.extend(orjson.loads(m.payload) for m in await dl.receive(5))

    return feed


def test_a_dead_letter_larger_than_the_broker_accepts_is_counted_and_dropped_not_retried() -> None:
    b = start_broker(settings={"max_packet_size": str(MAX_PACKET)})
    try:
        # MQTT 3.1.1: the broker's limit is not announced, the default cap (64 KiB) is above it.
        src = MQTTSource(b.host, b.port, topics=["in/#"], schema=READING, client_id="dl-311",
                         ack="checkpoint", dead_letter_topic="dead/letters", max_records=20,
                         backoff=(0.02, 0.2))
        g, sink = _graph(src)
        letters: list[dict[str, Any]] = []
        metrics = _run(g, src, _feed_with_a_large_binary_dead_letter(b.port, letters, 0), timeout=15)
    finally:
        b.close()
    assert [t["seq"] for t in sink.tuples] == list(range(20))
    assert src.bad_counts == {"undecodable": 1}
    assert src.dead_letters_failed == 1 and src.dead_letters_published == 0
    assert metrics.operators["mqtt"].counters["dead_letters_failed"].value == 1
    assert src.reconnects == 0  # the source's own connection never saw the dead letter
    failure = src.dead_letter_failures[0]
    assert "connection was lost" in failure and "dead_letter_max_bytes" in failure


def test_mqtt5_dead_letters_are_truncated_to_the_maximum_packet_size_the_broker_announces() -> None:
    b = start_broker(settings={"max_packet_size": str(MAX_PACKET)})
    try:
        src = MQTTSource(b.host, b.port, topics=["in/#"], schema=READING, client_id="dl-5", protocol="5",
                         ack="checkpoint", dead_letter_topic="dead/letters", max_records=20,
                         backoff=(0.02, 0.2))
        g, sink = _graph(src)
        letters: list[dict[str, Any]] = []
        _run(g, src, _feed_with_a_large_binary_dead_letter(b.port, letters, 1), timeout=15)
    finally:
        b.close()
    assert [t["seq"] for t in sink.tuples] == list(range(20))
    assert src.dead_letters_published == 1 and src.dead_letters_truncated == 1
    assert src.dead_letters_failed == 0 and src.reconnects == 0
    (letter,) = letters
    assert letter["truncated"] is True and letter["payload_size"] == 700
    assert letter["kind"] == "undecodable" and letter["topic"] == "in/a"
    kept = base64.b64decode(letter["payload_b64"])
    assert 0 < len(kept) < 700 and kept == b"\xff" * len(kept)


def test_dead_letter_max_bytes_truncates_before_publishing() -> None:
    b = start_broker(settings={"max_packet_size": str(MAX_PACKET)})
    try:
        src = MQTTSource(b.host, b.port, topics=["in/#"], schema=READING, dead_letter_topic="dead/letters",
                         dead_letter_max_bytes=600, max_records=20, backoff=(0.02, 0.2))
        g, sink = _graph(src)
        letters: list[dict[str, Any]] = []
        _run(g, src, _feed_with_a_large_binary_dead_letter(b.port, letters, 1), timeout=15)
    finally:
        b.close()
    assert [t["seq"] for t in sink.tuples] == list(range(20))
    assert src.dead_letters_published == src.dead_letters_truncated == 1
    (letter,) = letters
    assert letter["truncated"] is True and len(orjson.dumps(letter)) <= 600


# ------------------------------------------------------------------ the envelope itself


@pytest.mark.parametrize("payload", [
    "température ✓ ".encode() * 400,           # UTF-8 text: cut at a character boundary
    bytes(range(256)) * 20,                        # binary: base64
    b'"\\\n\x01' * 500,                           # text that JSON escaping makes longer
])
@pytest.mark.parametrize("limit", [200, 333, 1000, 4096])
def test_envelopes_fit_their_limit_and_keep_a_prefix_of_the_payload(payload: bytes, limit: int) -> None:
    bad = BadMessage("plant/a/temp", payload, "undecodable", "undecodable json: unexpected character")
    envelope = dead_letter_envelope(bad, max_bytes=limit)
    assert len(envelope) <= limit
    body = orjson.loads(envelope)
    assert body["truncated"] is True and body["payload_size"] == len(payload)
    kept = body["payload"].encode() if "payload" in body else base64.b64decode(body["payload_b64"])
    assert payload.startswith(kept)
    assert len(envelope) > limit * 0.6  # it keeps as much as fits, not a token prefix


def test_an_envelope_that_fits_is_whole_and_one_that_cannot_fit_is_refused() -> None:
    bad = BadMessage("t", b"{not json", "undecodable", "undecodable json")
    body = orjson.loads(dead_letter_envelope(bad))
    assert body == {"topic": "t", "kind": "undecodable", "reason": "undecodable json", "index": None,
                    "payload": "{not json", "payload_size": 9, "truncated": False}
    with pytest.raises(ValueError, match=r"no dead-letter envelope fits in 40 bytes"):
        dead_letter_envelope(bad, max_bytes=40)


def test_dead_letter_options_are_checked() -> None:
    with pytest.raises(MQTTConfigError, match=r"dead_letter_max_bytes=10: expected"):
        MQTTSource("h", topics=["a"], dead_letter_topic="d", dead_letter_max_bytes=10)
    with pytest.raises(MQTTConfigError, match=r"dead_letter_topic='d/#': wildcards"):
        MQTTSource("h", topics=["a"], dead_letter_topic="d/#")


def test_a_dead_letter_backlog_never_grows_without_bound() -> None:
    async def main() -> None:
        # A broker that is not there: nothing is ever delivered, the backlog is capped.
        cfg = ClientConfig("127.0.0.1", 9, backoff=(0.05, 0.05), timeout=0.2)
        letters = DeadLetters(cfg, "dead/letters", max_bytes=1000, max_pending=5)
        async with letters:
            for i in range(8):
                letters.put(BadMessage("t", b"x", "invalid", f"r{i}"))
            assert letters.failed == 3 and "backlog" in letters.failures[0]
            await asyncio.wait_for(letters.settle(), 5)
        assert letters.failed == 8 and letters.published == 0

    asyncio.run(main())
