"""MQTT as a Spark Structured Streaming source that a restarted query reads without loss.

Why a spool: Spark's recovery assumes a source with offsets and replay. It
writes the offset range of a micro-batch to its log *before* running it and,
after a crash, asks the source for exactly that range again. MQTT has
neither: a message is delivered once per subscription and is gone from the
broker the moment the client acknowledges it. So the reader supplies both:

* A persistent MQTT session (MQTT 3.1.1, ``clean_session=False``, a fixed
  client id per query, QoS 1 by default) keeps the broker queueing messages
  while the query is down.
* Every message is appended to a durable, append-only *spool* file (JSON
  lines, flushed and fsync'd) and numbered with a sequence number ``seq`` that
  continues across restarts. Spark's offsets are ``{"seq": n}`` (records with
  ``seq < n`` are before the offset), and every range, first read or replay,
  is read back from the spool, so a replay yields the same rows.
* The message is acknowledged (PUBACK) only *after* it is on disk (paho's
  manual acknowledgement), so whatever the broker considers delivered is in
  the spool; anything not yet spooled is redelivered by the broker.

Where the code runs: Spark keeps one reader object in a long-lived Python
process on the driver for the life of the query (``initialOffset``,
``latestOffset``, ``partitions``, ``commit``, ``stop``): the MQTT client lives
there and connects lazily, on the first offset call. The reader is also
constructed in planning workers and pickled to executors, where ``read``
reads a range from the spool file; it must never connect there, so
``__init__`` does no I/O and pickling drops the client. The spool must
therefore be on storage the executors can read (any path in local mode).

Spool format (`riverbed.spark_bridge._spool`, one JSON value per line): records
``[seq, topic, payload, recv_ms, qos, retain]``, where ``payload`` is the
text when the payload is valid UTF-8 and ``{"b64": "..."}`` otherwise, and
``recv_ms`` is the ingestion time (ms since the epoch, stamped when spooled:
the time that system-time window policies should use, so replays are
deterministic). A compacted spool starts with a header ``{"first": n}``.
``commit(end)`` drops the index of committed records and, once the committed
prefix holds at least ``spoolCompactBytes`` bytes, rewrites the file without
it (a copy, fsync, atomic rename). Next to the spool live ``<spool>.lock``
(one writer at a time) and ``<spool>.session`` (the subscription of the
persistent session, so a restart does not resubscribe and have the broker
resend its retained messages).

Options (strings, case-insensitive): ``topic`` (required; MQTT filters,
wildcards allowed, comma-separated for several), ``clientId`` (required;
unique to the query and stable across its restarts: a second client with
the same id disconnects the first), ``spool`` (required; an absolute path),
``host`` (127.0.0.1), ``port`` (1883), ``qos`` (1), ``maxRecordsPerBatch``
(10000), ``username``/``password`` (none), ``connectTimeout`` (10 seconds:
for the TCP connect, the CONNACK and SUBACK, and the spool lock), and
``spoolCompactBytes`` (64 MiB; 0 never compacts). Unknown options are
refused, so a misspelt one is not silently ignored. The subscription of an
existing session is changed (and the broker resends retained messages) only
when ``topic`` or ``qos`` differ from what ``<spool>.session`` records.

Guarantees and limits: at-least-once from the broker into the spool, and
exactly-once from the spool into Spark's offsets. A crash after the fsync
but before the PUBACK left the socket makes the broker redeliver, and the
message is spooled twice (with two seqs). QoS 2 is accepted, but paho keeps
a QoS 2 message in memory between PUBREC and PUBREL, so only QoS 1 survives
a crash at that moment. One partition per micro-batch, so rows keep their
arrival order. ``trigger(availableNow=True)`` is not supported (MQTT has no
end of the queued backlog to stop at). Offline queueing depends on the broker: mosquitto's default
``max_queued_messages 1000`` drops messages beyond that for an offline
session.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.reasoncodes import ReasonCode
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, ReadMinRows

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
    "MqttStreamReader",
    "Spool",
    "SpoolError",
    "SpoolRange",
    "SpoolRow",
    "encode_record",
    "mqtt_stream",
    "read_spool",
    "register",
]

SCHEMA_DDL: Final = "seq LONG, topic STRING, payload BINARY, recv_ms LONG, qos INT, retain BOOLEAN"

_REQUIRED: Final = ("topic", "clientId", "spool")
_KNOWN: Final = (*_REQUIRED, "host", "port", "qos", "maxRecordsPerBatch", "username", "password",
                 "connectTimeout", "spoolCompactBytes")
_KEEPALIVE_S: Final = 60


class MqttConnectError(ConnectionError):
    """The broker could not be reached, refused the connection, or refused a subscription."""


# ---------------------------------------------------------------------------------------------- options


def _int_option(opts: Mapping[str, str], name: str, default: int, lo: int, hi: int | None = None) -> int:
    raw = opts.get(name.lower(), str(default))
    try:
        value = int(raw.strip())
    except ValueError:
        raise ValueError(f"{FORMAT}: option {name!r} must be an integer, got {raw!r}") from None
    if value < lo or (hi is not None and value > hi):
        bounds = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
        raise ValueError(f"{FORMAT}: option {name!r} must be {bounds}, got {value}")
    return value


@dataclass(frozen=True)
class MqttOptions:
    """The source's options, parsed and checked (Spark hands them over as strings)."""

    host: str
    port: int
    topics: tuple[str, ...]
    client_id: str
    qos: int
    spool: str
    max_records_per_batch: int
    username: str | None
    password: str | None
    connect_timeout: float
    spool_compact_bytes: int

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> MqttOptions:
        """Check ``options`` (case-insensitive keys); a ``ValueError`` names the offending option."""
        opts = {str(k).lower(): str(v) for k, v in options.items()}
        unknown = sorted(set(opts) - {k.lower() for k in _KNOWN})
        if unknown:
            raise ValueError(f"{FORMAT}: unknown option(s) {', '.join(unknown)}; known: {', '.join(_KNOWN)}")
        for name in _REQUIRED:
            if not opts.get(name.lower(), "").strip():
                raise ValueError(f"{FORMAT}: option {name!r} is required")
        topics = tuple(t.strip() for t in opts["topic"].split(","))
        if any(not t for t in topics):
            raise ValueError(f"{FORMAT}: option 'topic' has an empty topic filter: {opts['topic']!r}")
        raw_timeout = opts.get("connecttimeout", "10")
        try:
            timeout = float(raw_timeout)
        except ValueError:
            raise ValueError(f"{FORMAT}: option 'connectTimeout' must be a number of seconds, "
                             f"got {raw_timeout!r}") from None
        if not timeout > 0:
            raise ValueError(f"{FORMAT}: option 'connectTimeout' must be positive, got {raw_timeout!r}")
        return cls(
            host=opts.get("host", "127.0.0.1").strip() or "127.0.0.1",
            port=_int_option(opts, "port", 1883, 1, 65535),
            topics=topics,
            client_id=opts["clientid"].strip(),
            qos=_int_option(opts, "qos", 1, 0, 2),
            spool=opts["spool"].strip(),
            max_records_per_batch=_int_option(opts, "maxRecordsPerBatch", 10000, 1),
            username=opts.get("username"),
            password=opts.get("password"),
            connect_timeout=timeout,
            spool_compact_bytes=_int_option(opts, "spoolCompactBytes", 64 << 20, 0),
        )

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"



# ----------------------------------------------------------------------------------------------- reader


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


def _session_key(cfg: MqttOptions) -> dict[str, Any]:
    return {"clientId": cfg.client_id, "topics": sorted(cfg.topics), "qos": cfg.qos}


class MqttStreamReader(DataSourceStreamReader):
    """The stream reader: an MQTT client feeding the spool on the driver, spool ranges on executors."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.config = MqttOptions.parse(options)
        self._reset()

    def _reset(self) -> None:
        self._client: mqtt.Client | None = None
        self._spool: Spool | None = None
        self._ready = threading.Event()
        self._refusal: str | None = None
        self._error: BaseException | None = None
        self._sub_mid: int | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config}  # never the client, the spool's file or its lock

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.config = state["config"]
        self._reset()

    # -- the MQTT side (driver only) -----------------------------------------------------------------

    @property
    def connected(self) -> bool:
        """Whether this reader has connected and subscribed (it does so on its first offset call)."""
        return self._client is not None

    def _ensure_connected(self) -> Spool:
        if self._error is not None:
            raise self._error
        if self._client is not None and self._spool is not None:
            return self._spool
        cfg = self.config
        spool = Spool(cfg.spool)
        spool.open(lock_timeout=cfg.connect_timeout)  # before connecting: queued messages arrive at once
        self._spool = spool
        client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=cfg.client_id, clean_session=False,
                             protocol=mqtt.MQTTv311, manual_ack=True)
        client.connect_timeout = cfg.connect_timeout
        if cfg.username is not None:
            client.username_pw_set(cfg.username, cfg.password)
        client.on_connect = self._on_connect
        client.on_subscribe = self._on_subscribe
        client.on_message = self._on_message
        self._ready.clear()
        self._refusal = None
        try:
            client.connect(cfg.host, cfg.port, keepalive=_KEEPALIVE_S)
        except (OSError, ValueError) as exc:
            self._drop(client)
            raise MqttConnectError(f"{FORMAT}: cannot connect to the MQTT broker at {cfg.address}: "
                                   f"{exc or type(exc).__name__}") from exc
        client.loop_start()
        if not self._ready.wait(cfg.connect_timeout):
            self._drop(client)
            raise MqttConnectError(f"{FORMAT}: the MQTT broker at {cfg.address} did not accept the "
                                   f"connection and subscription within {cfg.connect_timeout:g} s")
        reason = self._refused()
        if reason is not None:
            self._drop(client)
            raise MqttConnectError(f"{FORMAT}: the MQTT broker at {cfg.address} {reason}")
        self._client = client
        return spool

    def _drop(self, client: mqtt.Client | None) -> None:
        if client is not None:
            with contextlib.suppress(Exception):
                client.disconnect()
            client.loop_stop()
        if self._spool is not None:
            self._spool.close()
        self._client = None
        self._spool = None

    def _on_connect(self, client: mqtt.Client, userdata: Any, flags: mqtt.ConnectFlags,
                    reason: ReasonCode, properties: Any) -> None:
        if reason.is_failure:
            self._fail(f"refused the connection of client {self.config.client_id!r}: {reason}")
            return
        cfg = self.config
        recorded = self._recorded_session()
        if flags.session_present and recorded == _session_key(cfg):
            self._ready.set()  # the broker kept the subscription: subscribing again resends retained messages
            return
        if flags.session_present and recorded is not None and recorded.get("clientId") == cfg.client_id:
            stale = sorted(set(recorded.get("topics", [])) - set(cfg.topics))
            if stale:
                client.unsubscribe(stale)
        _, self._sub_mid = client.subscribe([(t, cfg.qos) for t in cfg.topics])

    def _on_subscribe(self, client: mqtt.Client, userdata: Any, mid: int, reasons: list[ReasonCode],
                      properties: Any) -> None:
        if mid != self._sub_mid:
            return
        cfg = self.config
        for topic, rc in zip(cfg.topics, reasons, strict=False):
            if rc.is_failure:
                self._fail(f"refused the subscription to {topic!r}: {rc}")
                return
            if rc.value < cfg.qos:
                self._fail(f"granted QoS {rc.value} for {topic!r} where {cfg.qos} was requested")
                return
        self._record_session()
        self._ready.set()

    def _refused(self) -> str | None:
        return self._refusal  # set by paho's thread

    def _fail(self, reason: str) -> None:
        self._refusal = reason
        if self._ready.is_set():  # a later reconnect: the query fails at its next offset call
            self._error = MqttConnectError(f"{FORMAT}: the MQTT broker at {self.config.address} {reason}")
        self._ready.set()

    def _on_message(self, client: mqtt.Client, userdata: Any, message: mqtt.MQTTMessage) -> None:
        spool = self._spool
        try:
            if spool is None:
                raise SpoolError(f"{FORMAT}: a message arrived with no spool open")
            spool.append(message.topic, bytes(message.payload), message.qos, bool(message.retain))
        except Exception as exc:
            # Not acknowledged: the broker redelivers it to this session's next connection.
            self._error = exc
            client.disconnect()
            return
        client.ack(message.mid, message.qos)

    def _recorded_session(self) -> dict[str, Any] | None:
        try:
            with open(self.config.spool + ".session", encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def _record_session(self) -> None:
        path = self.config.spool + ".session"
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(_session_key(self.config), f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(path + ".tmp", path)

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
        self._drop(self._client)


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
                max_records_per_batch: int = 10000, **options: str | int | float) -> DataFrame:
    """A streaming DataFrame of the MQTT messages on ``topic`` (schema `SCHEMA_DDL`).

    ``topic`` is one filter (wildcards allowed), several comma-separated, or
    a sequence. ``client_id`` must be unique to the query and stable across
    its restarts; ``spool`` is made absolute here, since Spark's workers may
    not share this process's working directory. Further ``options`` (e.g.
    ``username``, ``password``, ``connectTimeout``, ``spoolCompactBytes``)
    are passed on as strings. Options are checked before anything starts.
    """
    topics = topic if isinstance(topic, str) else ",".join(topic)
    opts: dict[str, str] = {
        "topic": topics, "clientId": client_id, "spool": os.path.abspath(os.fspath(spool)),
        "host": host, "port": str(port), "qos": str(qos), "maxRecordsPerBatch": str(max_records_per_batch),
    }
    opts.update({k: str(v) for k, v in options.items()})
    MqttOptions.parse(opts)
    reader = spark.readStream.format(register(spark))
    for key, value in opts.items():
        reader = reader.option(key, value)
    return reader.load()
