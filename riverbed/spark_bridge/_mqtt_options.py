"""The options of the MQTT Spark source, parsed into riverbed.mqtt's own configuration.

Spark hands a data source its options as strings, in whatever process it
builds the reader in; this module turns them into the objects `MQTTSource`
is configured with, and back: a `ClientConfig` (host, port, client id,
credentials, `TLS`, MQTT 3.1.1 or 5, keepalive, session expiry; the session
is always persistent) and, when ``format`` is given, a `PayloadDecoder`
(format, schema, topic attributes, size bound). So the runtime and Spark
check the same options with the same code and the same errors
(`MQTTConfigError`), and a misspelt option is refused rather than ignored.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, cast

from ..mqtt import (
    DEAD_LETTER_MAX_BYTES,
    DEFAULT_MAX_PAYLOAD,
    QOS2_NOT_AT_CHECKPOINTS,
    TLS,
    ClientConfig,
    Format,
    MQTTConfigError,
    PayloadDecoder,
    Protocol,
    check_dead_letter_max_bytes,
    check_topic_filters,
)
from ._spool import FORMAT

__all__ = ["MqttOptions", "decoder_options", "tls_options"]

_REQUIRED: Final = ("topic", "clientId", "spool")
_CLIENT: Final = ("host", "port", "username", "password", "protocol", "keepalive", "sessionExpiry",
                  "connectTimeout", "tls", "tlsCaFile", "tlsCertFile", "tlsKeyFile", "tlsInsecure")
_DECODING: Final = ("format", "schema", "topicAttribute", "topicLevels", "maxPayload", "separator",
                    "rawAttribute", "deadLetterTopic", "deadLetterMaxBytes")
_KNOWN: Final = (*_REQUIRED, "qos", "maxRecordsPerBatch", "spoolCompactBytes", *_CLIENT, *_DECODING)


def _fail(message: str) -> MQTTConfigError:
    return MQTTConfigError(f"{FORMAT}: {message}")


def _int(opts: Mapping[str, str], name: str, default: int, lo: int, hi: int | None = None) -> int:
    raw = opts.get(name.lower(), str(default))
    try:
        value = int(raw.strip())
    except ValueError:
        raise _fail(f"option {name!r} must be an integer, got {raw!r}") from None
    if value < lo or (hi is not None and value > hi):
        bounds = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
        raise _fail(f"option {name!r} must be {bounds}, got {value}")
    return value


def _bool(opts: Mapping[str, str], name: str) -> bool:
    raw = opts.get(name.lower(), "false").strip().lower()
    if raw not in ("true", "false"):
        raise _fail(f"option {name!r} must be true or false, got {raw!r}")
    return raw == "true"


def _json_object(opts: Mapping[str, str], name: str, example: str) -> dict[str, Any] | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise _fail(f"option {name!r} must be a JSON object such as {example}, got {raw!r}")
    return value


def _tls(opts: Mapping[str, str]) -> TLS | None:
    files = {key: opts.get(f"tls{key}file") for key in ("ca", "cert", "key")}
    insecure = _bool(opts, "tlsInsecure")
    if not (_bool(opts, "tls") or insecure or any(files.values())):
        return None
    return TLS(ca_file=files["ca"], cert_file=files["cert"], key_file=files["key"], insecure=insecure)


def _client(opts: Mapping[str, str]) -> ClientConfig:
    raw_timeout = opts.get("connecttimeout", "10")
    try:
        timeout = float(raw_timeout)
    except ValueError:
        raise _fail(f"option 'connectTimeout' must be a number of seconds, got {raw_timeout!r}") from None
    if not timeout > 0:
        raise _fail(f"option 'connectTimeout' must be positive, got {raw_timeout!r}")
    protocol = opts.get("protocol", "3.1.1").strip()
    if protocol not in ("3.1.1", "5"):
        raise _fail(f"option 'protocol' must be 3.1.1 or 5, got {protocol!r}")
    return ClientConfig(
        host=opts.get("host", "127.0.0.1").strip() or "127.0.0.1",
        port=_int(opts, "port", 1883, 1, 65535),
        client_id=opts["clientid"].strip(),
        username=opts.get("username"),
        password=opts.get("password"),
        tls=_tls(opts),
        protocol=cast(Protocol, protocol),
        keepalive=_int(opts, "keepalive", 60, 1, 65535),
        persistent=True,  # the broker queues for the query while it is down
        session_expiry=_int(opts, "sessionExpiry", 3600, 0, 2**32 - 1),
        timeout=timeout,
    )


def _decoder(opts: Mapping[str, str]) -> PayloadDecoder | None:
    given = [name for name in _DECODING if name.lower() in opts and name != "format"]
    fmt = opts.get("format")
    if fmt is None:
        if given:
            raise _fail(f"option(s) {', '.join(given)} need option 'format' (json, msgpack, csv or raw): "
                        "without it the source hands over the payloads as they are")
        return None
    fmt = fmt.strip()
    if fmt == "function":
        raise _fail("format 'function' cannot be a Spark option (a function is not a string): decode "
                    "in mqtt_input(to_tuple=...) instead")
    levels = _json_object(opts, "topicLevels", '{"site": 0}')
    topic_attribute = opts.get("topicattribute", "topic").strip() or None
    return PayloadDecoder(cast(Format, fmt), _json_object(opts, "schema", '{"temp": "float64"}'),
                          separator=opts.get("separator", ","),
                          raw_attribute=opts.get("rawattribute", "payload"),
                          topic_attribute=topic_attribute, topic_levels=levels,
                          max_payload=_int(opts, "maxPayload", DEFAULT_MAX_PAYLOAD, 1))


@dataclass(frozen=True)
class MqttOptions:
    """The source's options, parsed and checked (Spark hands them over as strings).

    ``client`` is the connection, as `MQTTSource` has it; ``decoder`` (None:
    payloads go through as they are) decides which messages make records, and
    the reader reports the others as `MQTTSource` does, to
    ``dead_letter_topic`` too when given.
    """

    client: ClientConfig
    topics: tuple[str, ...]
    qos: int
    spool: str
    max_records_per_batch: int
    spool_compact_bytes: int
    decoder: PayloadDecoder | None = None
    dead_letter_topic: str | None = None
    dead_letter_max_bytes: int = DEAD_LETTER_MAX_BYTES

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> MqttOptions:
        """Check ``options`` (case-insensitive keys); `MQTTConfigError` (a ``ValueError``) names
        the offending option."""
        opts = {str(k).lower(): str(v) for k, v in options.items()}
        unknown = sorted(set(opts) - {k.lower() for k in _KNOWN})
        if unknown:
            raise _fail(f"unknown option(s) {', '.join(unknown)}; known: {', '.join(_KNOWN)}")
        for name in _REQUIRED:
            if not opts.get(name.lower(), "").strip():
                raise _fail(f"option {name!r} is required")
        topics = tuple(t.strip() for t in opts["topic"].split(","))
        if any(not t for t in topics):
            raise _fail(f"option 'topic' has an empty topic filter: {opts['topic']!r}")
        try:  # (an invalid filter hung the reader until connectTimeout said "no answer")
            check_topic_filters(topics)
        except MQTTConfigError as exc:
            raise _fail(f"option 'topic': {exc}") from None
        letters = opts.get("deadlettertopic")
        if letters is not None and (not letters or "+" in letters or "#" in letters):
            raise _fail(f"option 'deadLetterTopic' must be a plain topic (no wildcards), got {letters!r}")
        max_bytes = _int(opts, "deadLetterMaxBytes", DEAD_LETTER_MAX_BYTES, 0)
        qos = _int(opts, "qos", 1, 0, 2)
        if qos == 2:  # the reader acknowledges once its spool holds a message: too late for QoS 2
            raise _fail(f"option 'qos' 2: {QOS2_NOT_AT_CHECKPOINTS}")
        return cls(
            client=_client(opts),
            topics=topics,
            qos=qos,
            spool=opts["spool"].strip(),
            max_records_per_batch=_int(opts, "maxRecordsPerBatch", 10000, 1),
            spool_compact_bytes=_int(opts, "spoolCompactBytes", 64 << 20, 0),
            decoder=_decoder(opts),
            dead_letter_topic=letters,
            dead_letter_max_bytes=check_dead_letter_max_bytes(max_bytes),
        )

    @property
    def host(self) -> str:
        return self.client.host

    @property
    def port(self) -> int:
        return self.client.port

    @property
    def client_id(self) -> str:
        assert self.client.client_id is not None  # required
        return self.client.client_id

    @property
    def connect_timeout(self) -> float:
        return self.client.timeout

    @property
    def address(self) -> str:
        return f"{self.client.host}:{self.client.port}"


def tls_options(tls: TLS) -> dict[str, str]:
    """The source options that make ``tls``."""
    out = {"tls": "true", "tlsInsecure": str(tls.insecure).lower()}
    for key, path in (("tlsCaFile", tls.ca_file), ("tlsCertFile", tls.cert_file),
                      ("tlsKeyFile", tls.key_file)):
        if path is not None:
            out[key] = path
    return out


def decoder_options(decoder: PayloadDecoder) -> dict[str, str]:
    """The source options that make ``decoder``; a decoder with a function cannot be one."""
    if decoder.format == "function":
        raise MQTTConfigError(f"{FORMAT}: format 'function' cannot be a Spark option (a function is "
                              "not a string): decode in mqtt_input(to_tuple=...) instead")
    out = {"format": decoder.format, "topicAttribute": decoder.topic_attribute or "",
           "maxPayload": str(decoder.max_payload), "separator": decoder.separator,
           "rawAttribute": decoder.raw_attribute}
    if decoder.schema is not None:
        out["schema"] = json.dumps(decoder.schema.as_dict())
    if decoder.topic_levels:
        out["topicLevels"] = json.dumps(decoder.topic_levels)
    return out
