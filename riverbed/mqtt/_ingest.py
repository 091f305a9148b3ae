"""From MQTT payloads to records, and what happens to the refused ones: one code for every input.

`MQTTSource` (the asyncio runtime) and the Spark MQTT input
(`riverbed.spark_bridge.mqtt_source`) take messages from a broker in very
different hosts, but must agree on which payloads make which records and on
what a bad one costs. So both go through these two pieces:

* `PayloadDecoder`: the size bound (``max_payload``), the codec (json,
  msgpack, csv, raw or a function; one record or a batch per message), the
  topic and its levels as attributes, and the schema's own validator. It is
  deterministic and picklable (its configuration travels; the codec and the
  generated validator are rebuilt), so the Spark tasks that turn spooled
  messages into tuples decide exactly as the reader that spooled them did.
* `BadMessages`: each refused payload or record is counted by kind
  (``undecodable``, ``invalid``, ``oversized``), kept among the latest 100,
  logged, passed to ``on_bad`` and put to the dead letters if there are any
  (`DeadLetters.put` never waits: a bad payload never holds up ingestion).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ..graph import Schema
from ._client import MQTTConfigError
from ._codec import FORMATS, BadRecord, Codec, Decoder, Format

if TYPE_CHECKING:
    from ._deadletter import DeadLetters

__all__ = ["DEFAULT_MAX_PAYLOAD", "BadMessage", "BadMessages", "PayloadDecoder"]

DEFAULT_MAX_PAYLOAD = 1 << 20
BadKind = Literal["undecodable", "invalid", "oversized"]


@dataclass(frozen=True, slots=True)
class BadMessage:
    """A refused payload (``index`` None) or record of a batch; ``kind`` is the metrics label."""

    topic: str
    payload: bytes
    kind: BadKind
    reason: str
    index: int | None = None


def _bad(topic: str, payload: bytes, b: BadRecord) -> BadMessage:
    kind: BadKind = "undecodable" if b.reason.startswith("undecodable") else "invalid"
    return BadMessage(topic, payload, kind, b.reason, b.index)


class PayloadDecoder:
    """Turns one message into the records it carries and the `BadMessage` of each refusal.

    Each record holds the payload's attributes, plus the message topic in
    ``topic_attribute`` (None: left out) and the topic levels named by
    ``topic_levels`` (attribute -> 0-based level). ``schema`` lists all of
    them and is checked with its own validator; without one, json and msgpack
    records go through as they are. A payload above ``max_payload`` bytes is
    refused whole. ``required`` names further attributes the schema must have
    (a source's dedup attributes), checked here with the rest.
    """

    def __init__(self, format: Format = "json", schema: Schema | Mapping[str, str] | None = None, *,
                 decode: Decoder | None = None, separator: str = ",", raw_attribute: str = "payload",
                 topic_attribute: str | None = "topic", topic_levels: Mapping[str, int] | None = None,
                 max_payload: int = DEFAULT_MAX_PAYLOAD, required: tuple[str, ...] = ()) -> None:
        if format not in FORMATS:
            raise MQTTConfigError(f"format={format!r}: expected one of {', '.join(FORMATS)}")
        if not isinstance(max_payload, int) or isinstance(max_payload, bool) or max_payload < 1:
            raise MQTTConfigError(f"max_payload={max_payload!r}: expected the largest payload in "
                                  "bytes, an int >= 1")
        levels = dict(topic_levels or {})
        for name, level in levels.items():
            if not isinstance(level, int) or isinstance(level, bool) or level < 0:
                raise MQTTConfigError(f"topic_levels[{name!r}]={level!r}: expected a level index >= 0")
        self.format: Format = format
        self.schema = schema if schema is None or isinstance(schema, Schema) else Schema(schema)
        self.decode_fn = decode
        self.separator = separator
        self.raw_attribute = raw_attribute
        self.topic_attribute = topic_attribute
        self.topic_levels = levels
        self.max_payload = max_payload
        self.required = tuple(required)
        self._build()

    def _build(self) -> None:
        schema = self.schema
        topic_attrs = {*self.topic_levels, *([self.topic_attribute] if self.topic_attribute else [])}
        fields: Schema | None = None
        self._validate: Callable[[Any], str | None] | None = None
        if schema is not None:
            for name in topic_attrs:
                if name not in schema.names:
                    raise MQTTConfigError(f"topic attribute {name!r} is not in the schema {schema}; add "
                                          f"{name}='rstring' or leave it out (topic_attribute=None)")
            for name in self.required:
                if name not in schema.names:
                    raise MQTTConfigError(f"dedup attribute {name!r} is not in the schema {schema}; "
                                          "dedup_key and dedup_scope name attributes of the tuples")
            payload_attrs = {n: t for n, t in schema.attributes if n not in topic_attrs}
            fields = Schema(payload_attrs) if payload_attrs else None
            self._validate = schema.validator()
        self.codec = Codec(self.format, fields, decode=self.decode_fn, separator=self.separator,
                           raw_attribute=self.raw_attribute)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(vars(self))  # the configuration; the codec and the validator are rebuilt
        for name in ("codec", "_validate"):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        vars(self).update(state)
        self._build()

    def __eq__(self, other: object) -> bool:
        """Decoders are equal when configured alike (they then decide alike)."""
        return isinstance(other, PayloadDecoder) and self.__getstate__() == other.__getstate__()

    __hash__ = None  # type: ignore[assignment]  # mutable configuration

    def decode(self, topic: str, payload: bytes) -> tuple[list[dict[str, Any]], list[BadMessage]]:
        """The valid records of a message, in order, and the refusals."""
        records, bad = self.decode_indexed(topic, payload)
        return [rec for _, rec in records], bad

    def decode_indexed(self, topic: str, payload: bytes
                       ) -> tuple[list[tuple[int | None, dict[str, Any]]], list[BadMessage]]:
        """As `decode`, each record with its index in the batch (None: the message's only one)."""
        if len(payload) > self.max_payload:
            why = f"payload of {len(payload)} bytes > max_payload={self.max_payload}"
            return [], [BadMessage(topic, payload, "oversized", why)]
        records, refused = self.codec.decode(payload)
        bad = [_bad(topic, payload, b) for b in refused]
        if not records:
            if not bad and self.format != "function":
                # An empty batch ([]): no record, and once no word of it either. (A decode
                # function returning [] skips a message on purpose: a heartbeat, say.)
                bad = [BadMessage(topic, payload, "invalid", "the message holds no record (an "
                                  "empty batch)")]
            return [], bad
        extra: dict[str, Any] = {}
        if self.topic_attribute:
            extra[self.topic_attribute] = topic
        if self.topic_levels:
            levels = topic.split("/")
            for name, i in self.topic_levels.items():
                if i >= len(levels):
                    why = f"topic {topic!r} has no level {i} for attribute {name!r}"
                    return [], [*bad, BadMessage(topic, payload, "invalid", why)]
                extra[name] = levels[i]
        validate = self._validate
        batch = len(records) > 1
        good: list[tuple[int | None, dict[str, Any]]] = []
        for i, rec in enumerate(records):
            if extra:
                rec.update(extra)
            where = i if batch else None
            problem = validate(rec) if validate is not None else None
            if problem is not None:
                bad.append(BadMessage(topic, payload, "invalid", problem, where))
            else:
                good.append((where, rec))
        return good, bad


class BadMessages:
    """What an MQTT input does with a refused payload or record (see the module doc).

    ``log(event, fields)`` writes the warning (the host's logger); ``on_bad``
    is the user's callback; ``dead_letters`` (set once its connection is made)
    publishes the envelope. Counters: ``counts`` by kind, ``total``; the
    latest refusals in ``recent``.
    """

    def __init__(self, *, on_bad: Callable[[BadMessage], None] | None = None,
                 log: Callable[[str, dict[str, Any]], None] | None = None, keep: int = 100) -> None:
        self.counts: Counter[str] = Counter()
        self.recent: deque[BadMessage] = deque(maxlen=keep)
        self.on_bad = on_bad
        self.dead_letters: DeadLetters | None = None
        self._log = log or (lambda event, fields: None)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def report(self, bad: BadMessage) -> None:
        self.counts[bad.kind] += 1
        self.recent.append(bad)
        self._log("mqtt bad payload", {"topic": bad.topic, "kind": bad.kind, "reason": bad.reason})
        if self.on_bad is not None:
            self.on_bad(bad)
        if self.dead_letters is not None:
            self.dead_letters.put(bad)  # never waits: see riverbed.mqtt._deadletter
