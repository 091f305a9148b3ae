"""MQTT sources and sinks: sensor readings in and out of a graph through a broker.

`MQTTSource` subscribes (wildcards, QoS 0/1/2, MQTT 3.1.1 or 5, credentials,
TLS) and decodes payloads (json, msgpack, csv, raw bytes or a function; one
record or a batch per message) into tuples of a declared schema, with the
topic and its levels as attributes. Bad payloads are counted and reported,
never fatal. With ``ack="checkpoint"`` it keeps a persistent session and
acknowledges messages only once a checkpoint holding their effects is
committed, so a crash loses nothing. `MQTTSink` publishes tuples, batched.

All aiomqtt use lives in one adapter module (`MQTTClient`).
"""

from ._client import TLS, ClientConfig, MQTTClient, MQTTConfigError, MQTTConnectError, Received
from ._codec import FORMATS, BadRecord, Codec
from ._operators import BadMessage, MQTTSink, MQTTSource, dead_letter_envelope

__all__ = [
    "FORMATS",
    "TLS",
    "BadMessage",
    "BadRecord",
    "ClientConfig",
    "Codec",
    "MQTTClient",
    "MQTTConfigError",
    "MQTTConnectError",
    "MQTTSink",
    "MQTTSource",
    "Received",
    "dead_letter_envelope",
]
