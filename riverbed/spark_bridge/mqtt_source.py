"""MQTT as a Spark Structured Streaming source that a restarted query reads without loss.

Why a spool: Spark's recovery assumes a source with offsets and replay. It
writes the offset range of a micro-batch to its log *before* running it and,
after a crash, asks the source for exactly that range again. MQTT has
neither: a message is delivered once per subscription and is gone from the
broker the moment the client acknowledges it. So the reader supplies both:

* A persistent MQTT session (``clean_session=False`` over MQTT 3.1.1,
  ``clean_start=False`` with a session expiry over MQTT 5; a fixed client id
  per query, QoS 1 by default) keeps the broker queueing messages while the
  query is down.
* Every message is appended to a durable, append-only *spool* file
  (`riverbed.spark_bridge._spool`: JSON lines, fsync'd, one fsync per batch
  of messages) and numbered with a sequence number ``seq`` that continues
  across restarts. Spark's offsets are ``{"seq": n}`` (records with ``seq <
  n`` are before the offset), and every range, first read or replay, is read
  back from the spool, so a replay yields the same rows.
* The message is acknowledged (PUBACK) only *after* it is on disk (manual
  acknowledgement), so whatever the broker considers delivered is in the
  spool; anything not yet spooled is redelivered by the broker.

One MQTT stack: the connection is riverbed.mqtt's own (`ClientConfig`,
`TLS`, `MQTTClient`: MQTT 3.1.1 and 5, credentials, TLS, reconnect with
backoff, the connect-time broker checks), and with ``format`` the payloads
are decoded, and bad ones counted, logged and dead-lettered, by the code
`MQTTSource` runs (`PayloadDecoder`, `BadMessages`, `DeadLetters`); see
`riverbed.spark_bridge._mqtt_ingest`. Errors are riverbed.mqtt's:
`MQTTConfigError` for an option, `MQTTConnectError` for a broker that cannot
be reached or refuses the connection or a subscription; `SpoolError` for the
spool.

Where the code runs: Spark keeps one reader object in a long-lived Python
process on the driver for the life of the query (``initialOffset``,
``latestOffset``, ``partitions``, ``commit``, ``stop``): the MQTT client lives
there, on an event loop of its own thread, and connects lazily, on the
first offset call. The reader is also constructed in planning workers and
pickled to executors, where ``read`` reads a range from the spool file; it
must never connect there, so ``__init__`` does no I/O and pickling drops the
client. The spool must therefore be on storage the executors can read (any
path in local mode). Next to the spool live ``<spool>.lock`` (one writer at
a time), ``<spool>.session`` (the subscription of the persistent session, so
a restart does not resubscribe and have the broker resend its retained
messages), ``<spool>.acked`` (from which seq the broker may lack acks) and
``<spool>.status`` (the reader's counters: `read_status`).

Options (strings, case-insensitive): ``topic`` (required; MQTT filters,
wildcards allowed, comma-separated for several), ``clientId`` (required;
unique to the query and stable across its restarts: a second client with
the same id disconnects the first), ``spool`` (required; an absolute path),
``qos`` (1), ``maxRecordsPerBatch`` (10000), ``spoolCompactBytes`` (64 MiB; 0
never compacts). The connection, as `ClientConfig` has it: ``host``
(127.0.0.1), ``port`` (1883), ``username``/``password`` (none), ``protocol``
(``3.1.1`` or ``5``), ``keepalive`` (60 s), ``sessionExpiry`` (3600 s, MQTT
5), ``connectTimeout`` (10 s: for the connect, the CONNACK and SUBACK, and the
spool lock), and TLS: ``tls`` (true: the system's CAs), ``tlsCaFile``,
``tlsCertFile``, ``tlsKeyFile``, ``tlsInsecure``. Decoding, as `MQTTSource`
has it (none without ``format``): ``format`` (json, msgpack, csv or raw),
``schema`` (a JSON object of attribute types), ``topicAttribute`` (topic; empty
for none), ``topicLevels`` (a JSON object of attribute levels),
``maxPayload`` (1 MiB), ``separator``, ``rawAttribute``, ``deadLetterTopic``,
``deadLetterMaxBytes`` (64 KiB). Unknown options are refused, so a misspelt
one is not silently ignored. The subscription of an existing session is
changed (and the broker resends retained messages) only when ``topic`` or
``qos`` differ from what ``<spool>.session`` records.

Guarantees and limits: at QoS 1, each message once into the spool, and
exactly-once from the spool into Spark's offsets. Spark stops a query by
killing the process that hosts its reader (``stop`` does not run there), so
a message may be spooled with its PUBACK not yet sent; the broker sends it
again, with the DUP flag and the same packet id, to the next reader, which
acknowledges it without spooling it twice (`riverbed.spark_bridge._mqtt_ingest`,
``<spool>.acked``). What this cannot tell apart: a reader killed after an
ack reached the broker and before the answer to the round trip that
confirms it was recorded (about a round trip to the broker), with a broker
that meanwhile gave that packet id to a new message with the same topic and
payload and sent it; the new message is then taken for the repeat.
(mosquitto numbers packet ids in turn, so it never reuses one that soon.)
QoS 2 is accepted, but paho keeps a QoS 2 message in memory between PUBREC
and PUBREL, so only QoS 1 survives a crash at that moment. A bad payload is reported once, when it is spooled
(and spooled all the same: the spool holds what the broker delivered), and
again only if the decoding options change while it waits in the spool; a
dead letter not yet published when the reader stops is counted as failed.
One partition per micro-batch, so rows keep their arrival order.
``trigger(availableNow=True)`` is not supported (MQTT has no end of the
queued backlog to stop at). Offline queueing depends on the broker (README,
"MQTT"): mosquitto's default ``max_queued_messages 1000`` drops messages
beyond that for an offline session.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, ReadMinRows

from ..mqtt import TLS, MQTTConnectError, PayloadDecoder, Protocol
from ._inputs import MqttRecords
from ._mqtt_ingest import SpoolFeeder, read_status
from ._mqtt_options import MqttOptions, decoder_options, tls_options
from ._spool import FORMAT, Spool, SpoolError, SpoolRow, encode_record, read_spool

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = [
    "FORMAT",
    "SCHEMA_DDL",
    "MqttConnectError",
    "MqttDataSource",
    "MqttOptions",
    "MqttRecords",
    "MqttStreamReader",
    "Spool",
    "SpoolError",
    "SpoolRange",
    "SpoolRow",
    "decoder_options",
    "encode_record",
    "mqtt_stream",
    "read_spool",
    "read_status",
    "register",
]

SCHEMA_DDL: Final = "seq LONG, topic STRING, payload BINARY, recv_ms LONG, qos INT, retain BOOLEAN"

MqttConnectError = MQTTConnectError
"""The name this module gave the connect error; it is riverbed.mqtt's one `MQTTConnectError`."""


class SpoolRange(InputPartition):
    """One micro-batch's records ``[lo, hi)``, read from the spool by a task (``hint``: see `read_spool`)."""

    def __init__(self, path: str, lo: int, hi: int, hint: int) -> None:
        super().__init__((lo, hi))
        self.path, self.lo, self.hi, self.hint = path, lo, hi, hint


def _seq(offset: Mapping[str, Any]) -> int:
    try:
        return int(offset["seq"])
    except (KeyError, TypeError, ValueError):
        raise SpoolError(f"{FORMAT}: not an offset of this source: {offset!r}") from None


class MqttStreamReader(DataSourceStreamReader):
    """The stream reader: riverbed.mqtt's client feeding the spool on the driver, spool ranges on
    executors."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.config = MqttOptions.parse(options)
        self._reset()

    def _reset(self) -> None:
        self._feeder: SpoolFeeder | None = None
        self._spool: Spool | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config}  # never the client, the spool's file or its lock

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.config = state["config"]
        self._reset()

    # -- the MQTT side (driver only) -----------------------------------------------------------------

    @property
    def connected(self) -> bool:
        """Whether this reader has connected and subscribed (it does so on its first offset call)."""
        return self._feeder is not None

    @property
    def feeder(self) -> SpoolFeeder | None:
        """The MQTT side once connected: its counters (``messages``, ``bads``, ``broker_warnings``)."""
        return self._feeder

    def _ensure_connected(self) -> Spool:
        feeder = self._feeder
        if feeder is not None and self._spool is not None:
            if feeder.error is not None:
                raise feeder.error
            return self._spool
        cfg = self.config
        spool = Spool(cfg.spool)
        spool.open(lock_timeout=cfg.connect_timeout)  # before connecting: queued messages arrive at once
        feeder = SpoolFeeder(cfg, spool)
        try:
            feeder.start()
        except BaseException:
            spool.close()
            raise
        self._feeder, self._spool = feeder, spool
        return spool

    # -- Spark's calls -------------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, int]:
        return {"seq": self._ensure_connected().first_seq}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.config.max_records_per_batch)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, int]:
        spool = self._ensure_connected()
        lo, available = _seq(start), spool.next_seq
        if lo > available:
            raise SpoolError(f"{FORMAT}: the query's offset is seq {lo}, but spool {spool.path} ends at "
                             f"{available}: the spool was replaced or belongs to another query")
        if self._feeder is not None:
            self._feeder.recheck(lo)  # the first call only: where the query resumes
        if isinstance(limit, ReadMaxRows):
            end = min(available, lo + limit.max_rows)
        elif isinstance(limit, ReadMinRows):
            end = available if available - lo >= limit.min_rows else lo
        else:
            end = available
        return {"seq": end}

    def reportLatestOffset(self) -> dict[str, int] | None:
        return {"seq": self._spool.next_seq} if self._spool is not None else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        lo, hi = _seq(start), _seq(end)
        if lo >= hi:
            return []
        hint = self._spool.offset_of(lo) if self._spool is not None else -1
        return [SpoolRange(self.config.spool, lo, hi, hint)]

    def read(self, partition: InputPartition) -> Iterator[SpoolRow]:
        if not isinstance(partition, SpoolRange):
            raise TypeError(f"{FORMAT}: not a partition of this source: {partition!r}")
        return read_spool(partition.path, partition.lo, partition.hi, partition.hint)

    def commit(self, end: dict[str, Any]) -> None:
        if self._spool is not None:
            self._spool.release(_seq(end), self.config.spool_compact_bytes)

    def stop(self) -> None:
        """Disconnect cleanly (the broker keeps the session and queues for it) and unlock the spool."""
        feeder, spool = self._feeder, self._spool
        self._reset()
        try:
            if feeder is not None:
                feeder.stop()
        finally:
            if spool is not None:
                spool.close()


class MqttDataSource(DataSource):
    """``spark.readStream.format("riverbed_mqtt")``: see the module docstring for the options."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return SCHEMA_DDL

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return MqttStreamReader(self.options)


def register(spark: SparkSession) -> str:
    """Register the data source with ``spark`` (idempotent) and return its format name."""
    spark.dataSource.register(MqttDataSource)
    return FORMAT


def mqtt_stream(spark: SparkSession, *, topic: str | Sequence[str], client_id: str,
                spool: str | os.PathLike[str], host: str = "127.0.0.1", port: int = 1883, qos: int = 1,
                max_records_per_batch: int = 10000, username: str | None = None,
                password: str | None = None, tls: TLS | None = None, protocol: Protocol = "3.1.1",
                decoder: PayloadDecoder | None = None, dead_letter_topic: str | None = None,
                **options: str | int | float) -> DataFrame:
    """A streaming DataFrame of the MQTT messages on ``topic`` (schema `SCHEMA_DDL`).

    ``topic`` is one filter (wildcards allowed), several comma-separated, or
    a sequence. ``client_id`` must be unique to the query and stable across
    its restarts; ``spool`` is made absolute here, since Spark's workers may
    not share this process's working directory. ``username``, ``password``,
    ``tls`` and ``protocol`` are `MQTTSource`'s. With a ``decoder`` (the
    `PayloadDecoder` the rows will be decoded with), the reader reports the
    payloads and records it refuses as `MQTTSource` does, to
    ``dead_letter_topic`` too. Further ``options`` (e.g. ``connectTimeout``,
    ``spoolCompactBytes``, ``deadLetterMaxBytes``) are passed on as strings.
    Options are checked before anything starts.
    """
    topics = topic if isinstance(topic, str) else ",".join(topic)
    opts: dict[str, str] = {
        "topic": topics, "clientId": client_id, "spool": os.path.abspath(os.fspath(spool)),
        "host": host, "port": str(port), "qos": str(qos), "maxRecordsPerBatch": str(max_records_per_batch),
        "protocol": protocol,
    }
    if username is not None:
        opts["username"] = username
    if password is not None:
        opts["password"] = password
    if tls is not None:
        opts.update(tls_options(tls))
    if decoder is not None:
        opts.update(decoder_options(decoder))
    if dead_letter_topic is not None:
        opts["deadLetterTopic"] = dead_letter_topic
    opts.update({k: str(v) for k, v in options.items()})
    MqttOptions.parse(opts)
    reader = spark.readStream.format(register(spark))
    for key, value in opts.items():
        reader = reader.option(key, value)
    return reader.load()
