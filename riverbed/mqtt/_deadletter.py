"""Dead letters: refused payloads published to a topic, without ever holding up the source.

A dead letter is a side channel. The first version published it on the
source's own connection and retried it until it went through; a broker whose
``max_packet_size`` was below the envelope (base64 makes binary payloads a
third larger) closed that connection at every attempt, and paho resent the
packet after each reconnect, so the source stalled for good (issue 16). So:

* **Its own connection** (clean session, ``drop_unsent``; client id
  ``<client_id>-dead-letters``, or a generated one): whatever happens to
  a dead letter, the source's connection and its session never see it.
* **Bounded envelopes.** An envelope is at most ``max_bytes`` and, when the
  broker announces one (MQTT 5 CONNACK), fits its Maximum Packet Size; a
  payload that does not fit is cut (``"truncated": true`` and the original
  ``payload_size`` in the envelope). A connection closed while a large letter
  was in flight (MQTT 3.1.1 brokers do not announce their limit) lowers the
  bound below that letter's size for the letters after it.
* **One attempt each.** A letter not acknowledged within ``timeout`` seconds,
  or in flight when the connection closed, is counted in ``failed``, its
  reason kept in ``failures`` (the first of each kind logged), and dropped.
  At most ``max_pending`` letters wait for their acknowledgement; past that
  they are dropped and counted, so a dead broker costs memory for no more.

`put` never waits. A checkpointing source awaits `settle` before each flush,
so a message is acknowledged to the broker only after its dead letter was
delivered or given up on; a crash can still lose letters not yet settled.
"""

from __future__ import annotations

import asyncio
import base64
import codecs
import dataclasses
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import orjson

from ._client import ClientConfig, MQTTClient, MQTTConfigError, MQTTPublishError

if TYPE_CHECKING:
    from ._ingest import BadMessage

__all__ = ["DEFAULT_MAX_BYTES", "DeadLetters", "dead_letter_envelope", "envelope"]

DEFAULT_MAX_BYTES = 64 * 1024  # below every common broker's packet limit (AWS IoT: 128 KiB)
_MIN_BYTES = 128
_LEARN_ABOVE = 1024  # a connection lost with a smaller letter in flight proves nothing about its size
_REASON_KEEP = 200

FailureKind = Literal["backlog", "not_connected", "too_large", "connection_lost", "not_acknowledged",
                      "stopped"]


@dataclass(frozen=True, slots=True)
class _Letter:
    bad: BadMessage
    size: int  # of the original payload (bad.payload may be cut to the most an envelope can carry)


def check_max_bytes(value: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < _MIN_BYTES:
        raise MQTTConfigError(f"dead_letter_max_bytes={value!r}: expected the largest dead-letter "
                              f"envelope in bytes, an int >= {_MIN_BYTES} (default {DEFAULT_MAX_BYTES})")
    return value


def _text(payload: bytes, cut: bool) -> str | None:
    """The payload as text if it is UTF-8 (a ``cut`` payload may end inside a character)."""
    try:
        return codecs.getincrementaldecoder("utf-8")().decode(payload, final=not cut)
    except UnicodeDecodeError:
        return None


def envelope(bad: BadMessage, max_bytes: int | None = None,
             payload_size: int | None = None) -> tuple[bytes, bool]:
    """The JSON envelope of ``bad`` and whether its payload was cut to fit ``max_bytes``.

    ``payload_size`` is the original size when ``bad.payload`` is already a prefix. Raises
    `ValueError` when not even an envelope without payload fits."""
    payload = bad.payload
    size = len(payload) if payload_size is None else payload_size
    cut = size > len(payload)
    text = _text(payload, cut)

    def render(n: int, reason: str) -> bytes:
        body: dict[str, Any] = {"topic": bad.topic, "kind": bad.kind, "reason": reason, "index": bad.index}
        part = payload[:n]
        if text is not None:
            body["payload"] = part.decode("utf-8", errors="ignore")  # drops a cut last character only
        else:
            body["payload_b64"] = base64.b64encode(part).decode()
        body["payload_size"] = size
        body["truncated"] = n < size
        return orjson.dumps(body)

    whole = render(len(payload), bad.reason)
    if max_bytes is None or len(whole) <= max_bytes:
        return whole, cut
    reason = bad.reason
    if len(render(0, reason)) > max_bytes:
        reason = reason[:_REASON_KEEP] + "..." if len(reason) > _REASON_KEEP else reason
        if len(render(0, reason)) > max_bytes:
            raise ValueError(f"no dead-letter envelope fits in {max_bytes} bytes (topic of "
                             f"{len(bad.topic.encode())} bytes, reason of {len(reason)} characters)")
    lo, hi = 0, len(payload)  # the longest prefix that fits: render(lo) fits, render(hi) does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if len(render(mid, reason)) <= max_bytes:
            lo = mid
        else:
            hi = mid
    return render(lo, reason), True


def dead_letter_envelope(bad: BadMessage, max_bytes: int | None = None) -> bytes:
    """The JSON published to ``dead_letter_topic``: topic, kind, reason, index and the payload
    (text if it is UTF-8, else base64 under ``payload_b64``), its size in bytes and whether it
    was ``truncated`` to keep the envelope within ``max_bytes``."""
    return envelope(bad, max_bytes)[0]


class DeadLetters:
    """Publishes dead letters to ``topic`` on a connection of its own; an async context manager.

    Counters: ``published``, ``truncated`` (published with a cut payload), ``failed``; the
    reasons of recent failures in ``failures``.
    """

    def __init__(self, config: ClientConfig, topic: str, *, max_bytes: int = DEFAULT_MAX_BYTES,
                 max_pending: int = 256, name: str = "dead-letters",
                 log: Callable[[str, dict[str, Any]], None] | None = None) -> None:
        client_id = f"{config.client_id}-dead-letters" if config.client_id else None
        config = dataclasses.replace(config, client_id=client_id, persistent=False)
        self.client = MQTTClient(config, name=name, log=log, drop_unsent=True)
        self.topic = topic
        self.max_bytes = check_max_bytes(max_bytes)
        self.max_pending = max_pending
        self.timeout = config.timeout
        self.published = 0
        self.truncated = 0
        self.failed = 0
        self.failures: deque[str] = deque(maxlen=100)
        self._log = log or (lambda event, fields: None)
        self._logged: set[FailureKind] = set()
        self._learnt: int | None = None  # a bound learnt from a connection closed on a letter
        self._pending: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> DeadLetters:
        self.client.start()  # in the background: the source does not wait for this connection
        return self

    async def __aexit__(self, *exc: object) -> None:
        unsettled = list(self._pending)
        for task in unsettled:
            task.cancel()
        if unsettled:
            self._fail("stopped", f"stopped with {len(unsettled)} dead letter(s) not yet acknowledged",
                       len(unsettled))
        await self.client.__aexit__(*exc)

    def limit(self) -> int:
        """The largest envelope to publish now."""
        bound = self.max_bytes if self._learnt is None else min(self.max_bytes, self._learnt)
        packet = self.client.max_packet_size
        if packet is not None:
            # PUBLISH = fixed header (1) + remaining length (<= 4) + topic (2 + n) + packet id (2)
            # + properties length (1, MQTT 5) + payload
            bound = min(bound, packet - 10 - len(self.topic.encode()))
        return bound

    def put(self, bad: BadMessage) -> None:
        """Queue a letter for publishing; never waits (see the module doc for what may drop it)."""
        if len(self._pending) >= self.max_pending:
            self._fail("backlog", f"backlog full: {self.max_pending} dead letters already wait for "
                                  f"the broker: dropped the one for {bad.topic!r} ({bad.kind})")
            return
        size = len(bad.payload)
        if size > self.max_bytes:  # no envelope can carry more: do not hold on to the rest
            bad = dataclasses.replace(bad, payload=bad.payload[:self.max_bytes])
        task = asyncio.get_running_loop().create_task(self._publish(_Letter(bad, size)))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def settle(self) -> None:
        """Wait until every letter put so far was acknowledged or given up on (each one is
        bounded by ``timeout``)."""
        while self._pending:
            await asyncio.wait(set(self._pending))

    async def _publish(self, letter: _Letter) -> None:
        client = self.client
        if not client.connected:
            try:
                await asyncio.wait_for(client.wait_connected(), self.timeout)
            except Exception as exc:  # a timeout or a refused connection: both fail the letter
                self._fail("not_connected", f"dead-letter connection not up within {self.timeout} s "
                                               f"({exc or client.last_error}): dropped the letter for "
                                               f"{letter.bad.topic!r} ({letter.bad.kind})")
                return
        limit = self.limit()
        try:
            data, cut = envelope(letter.bad, limit, letter.size)
        except ValueError as exc:
            self._fail("too_large", f"{exc}: dropped the letter for {letter.bad.topic!r}")
            return
        try:
            await client.publish_once(self.topic, data, min(1, client.maximum_qos), self.timeout)
        except MQTTPublishError as exc:
            if exc.connection_lost:
                hint = ""
                if len(data) > _LEARN_ABOVE:
                    self._learnt = min(self._learnt or len(data), len(data) - 1)
                    hint = (f"; the broker may refuse packets this large: later letters are cut below "
                            f"{len(data)} bytes (set dead_letter_max_bytes to its maximum packet size)")
                self._fail("connection_lost", f"a dead letter of {len(data)} bytes for {letter.bad.topic!r}: "
                                              f"{exc}{hint}; dropped")
            else:
                self._fail("not_acknowledged", f"a dead letter for {letter.bad.topic!r}: {exc}; dropped")
            return
        self.published += 1
        if cut:
            self.truncated += 1

    def _fail(self, kind: FailureKind, reason: str, n: int = 1) -> None:
        self.failed += n
        self.failures.append(reason)
        if kind not in self._logged:  # the first of each kind; the counter has the rest
            self._logged.add(kind)
            self._log("mqtt dead letter dropped", {"failure": kind, "reason": reason,
                                                   "dead_letter_topic": self.topic})
