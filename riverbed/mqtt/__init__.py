"""MQTT sources and sinks: sensor readings in and out of a graph through a broker.

`MQTTSource` subscribes (wildcards, QoS 0/1/2, MQTT 3.1.1 or 5, credentials,
TLS) and decodes payloads (json, msgpack, csv, raw bytes or a function; one
record or a batch per message) into tuples of a declared schema, with the
topic and its levels as attributes. Bad payloads are counted and reported,
never fatal, and their dead letters never hold up ingestion. With
``ack="checkpoint"`` it keeps a persistent session and acknowledges messages
only once a checkpoint holding their effects is committed, so a crash of
riverbed loses nothing, given a broker set up to keep what it queued (README,
"MQTT"; what a client can observe of that is checked at connect time).
``dedup_key`` drops the repeats a broker restart delivers. `MQTTSink`
publishes tuples, batched.

All aiomqtt use lives in one adapter module (`MQTTClient`). The Spark MQTT
source (`riverbed.spark_bridge.mqtt_source`) is built from the same public
pieces: `ClientConfig` and `TLS` (MQTT 3.1.1 and 5, credentials, TLS),
`MQTTClient`, `PayloadDecoder` (codec, topic attributes, schema check),
`BadMessages` and `DeadLetters` (bad payloads counted, logged and
dead-lettered), `connect_warnings`, `check_topic_filters` (valid filters, none
overlapping another), and one error type per condition (`MQTTConfigError`,
`MQTTConnectError`).
"""

from ._checks import QOS2_NOT_AT_CHECKPOINTS, BrokerWarning, connect_warnings
from ._client import (
    TLS,
    ClientConfig,
    ConnectInfo,
    MQTTClient,
    MQTTConfigError,
    MQTTConnectError,
    MQTTPublishError,
    Protocol,
    Received,
    SessionPlan,
    check_topic_filters,
    plan_subscriptions,
)
from ._codec import FORMATS, BadRecord, Codec, Format
from ._deadletter import DEFAULT_MAX_BYTES as DEAD_LETTER_MAX_BYTES
from ._deadletter import DeadLetters, dead_letter_envelope
from ._deadletter import check_max_bytes as check_dead_letter_max_bytes
from ._dedup import Dedup
from ._ingest import DEFAULT_MAX_PAYLOAD, BadMessage, BadMessages, PayloadDecoder
from ._operators import MQTTSink, MQTTSource

__all__ = [
    "DEAD_LETTER_MAX_BYTES",
    "DEFAULT_MAX_PAYLOAD",
    "FORMATS",
    "QOS2_NOT_AT_CHECKPOINTS",
    "TLS",
    "BadMessage",
    "BadMessages",
    "BadRecord",
    "BrokerWarning",
    "ClientConfig",
    "Codec",
    "ConnectInfo",
    "DeadLetters",
    "Dedup",
    "Format",
    "MQTTClient",
    "MQTTConfigError",
    "MQTTConnectError",
    "MQTTPublishError",
    "MQTTSink",
    "MQTTSource",
    "PayloadDecoder",
    "Protocol",
    "Received",
    "SessionPlan",
    "check_dead_letter_max_bytes",
    "check_topic_filters",
    "connect_warnings",
    "dead_letter_envelope",
    "plan_subscriptions",
]
