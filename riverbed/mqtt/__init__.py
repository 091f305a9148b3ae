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

All aiomqtt use lives in one adapter module (`MQTTClient`).
"""

from ._checks import BrokerWarning, connect_warnings
from ._client import (
    TLS,
    ClientConfig,
    ConnectInfo,
    MQTTClient,
    MQTTConfigError,
    MQTTConnectError,
    MQTTPublishError,
    Received,
)
from ._codec import FORMATS, BadRecord, Codec
from ._deadletter import DeadLetters, dead_letter_envelope
from ._dedup import Dedup
from ._operators import BadMessage, MQTTSink, MQTTSource

__all__ = [
    "FORMATS",
    "TLS",
    "BadMessage",
    "BadRecord",
    "BrokerWarning",
    "ClientConfig",
    "Codec",
    "ConnectInfo",
    "DeadLetters",
    "Dedup",
    "MQTTClient",
    "MQTTConfigError",
    "MQTTConnectError",
    "MQTTPublishError",
    "MQTTSink",
    "MQTTSource",
    "Received",
    "connect_warnings",
    "dead_letter_envelope",
]
