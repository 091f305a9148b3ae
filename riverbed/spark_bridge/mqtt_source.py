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

Spool format (one JSON value per line): records
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

import base64
import contextlib
import fcntl
import json
import os
import shutil
import threading
import time
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, Final

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.reasoncodes import ReasonCode
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, ReadMinRows

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

FORMAT: Final = "riverbed_mqtt"
SCHEMA_DDL: Final = "seq LONG, topic STRING, payload BINARY, recv_ms LONG, qos INT, retain BOOLEAN"

SpoolRow = tuple[int, str, bytes, int, int, bool]
"""One row of the source: ``(seq, topic, payload, recv_ms, qos, retain)``."""

_REQUIRED: Final = ("topic", "clientId", "spool")
_KNOWN: Final = (*_REQUIRED, "host", "port", "qos", "maxRecordsPerBatch", "username", "password",
                 "connectTimeout", "spoolCompactBytes")
_KEEPALIVE_S: Final = 60


class MqttConnectError(ConnectionError):
    """The broker could not be reached, refused the connection, or refused a subscription."""


class SpoolError(RuntimeError):
    """The spool is unreadable, in use by another reader, or lacks records an offset needs."""


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


# ------------------------------------------------------------------------------------------------ spool


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def encode_record(row: SpoolRow) -> bytes:
    """One spool line (with its newline)."""
    seq, topic, payload, recv_ms, qos, retain = row
    try:
        body: str | dict[str, str] = payload.decode("utf-8")
    except UnicodeDecodeError:
        body = {"b64": base64.b64encode(payload).decode("ascii")}
    record = [seq, topic, body, recv_ms, qos, retain]
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


def _encode_header(first: int) -> bytes:
    return json.dumps({"first": first}).encode("ascii") + b"\n"


def _decode_line(raw: bytes) -> SpoolRow | int:
    """A record, or the ``first`` seq of a header line; ``ValueError`` if the line is not one."""
    item = json.loads(raw)
    if isinstance(item, dict) and isinstance(item.get("first"), int):
        return int(item["first"])
    if not isinstance(item, list) or len(item) != 6:
        raise ValueError("not a spool record")
    seq, topic, body, recv_ms, qos, retain = item
    if isinstance(body, str):
        payload = body.encode("utf-8")
    elif isinstance(body, dict) and isinstance(body.get("b64"), str):
        payload = base64.b64decode(body["b64"], validate=True)
    else:
        raise ValueError("bad payload field")
    if not (isinstance(seq, int) and isinstance(topic, str) and isinstance(recv_ms, int)
            and isinstance(qos, int) and isinstance(retain, bool)):
        raise ValueError("bad field types")
    return seq, topic, payload, recv_ms, qos, retain


def _fsync_dir(path: str) -> None:
    fd = os.open(os.path.dirname(os.path.abspath(path)) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _row_at(f: IO[bytes], hint: int, lo: int) -> bool:
    """Whether the line starting at byte ``hint`` is record ``lo`` (``f`` is left just after it)."""
    if hint > 0:
        f.seek(hint - 1)
        if f.read(1) != b"\n":
            return False
    else:
        f.seek(0)
    raw = f.readline()
    if not raw.endswith(b"\n"):
        return False
    try:
        item = _decode_line(raw)
    except ValueError:
        return False
    return not isinstance(item, int) and item[0] == lo


def read_spool(path: str, lo: int, hi: int, hint: int = -1) -> Iterator[SpoolRow]:
    """Records ``lo <= seq < hi`` of the spool at ``path``, in seq order.

    ``hint`` is the byte offset where record ``lo`` was written (``-1``: not
    known); it is checked against the file, so a stale hint (the spool was
    compacted meanwhile) only costs a scan. Raises `SpoolError` if any record
    of the range is missing, rather than returning fewer rows.
    """
    if lo >= hi:
        return
    try:
        f = open(path, "rb")  # noqa: SIM115 -- closed in the finally below (this is a generator)
    except FileNotFoundError:
        raise SpoolError(f"{FORMAT}: spool {path} does not exist; "
                         f"records [{lo}, {hi}) cannot be read") from None
    try:
        expected = lo
        if hint >= 0 and _row_at(f, hint, lo):
            f.seek(hint)
        else:
            f.seek(0)
        pos = f.tell()
        for raw in f:
            if not raw.endswith(b"\n"):
                break  # a record being written now: beyond every range Spark may ask for
            try:
                item = _decode_line(raw)
            except ValueError as exc:
                raise SpoolError(f"{FORMAT}: spool {path} has a corrupt line at byte {pos}: {exc}") from None
            pos += len(raw)
            if isinstance(item, int):
                if item > expected:
                    raise SpoolError(f"{FORMAT}: spool {path} was compacted up to seq {item}; "
                                     f"records [{expected}, {min(item, hi)}) are gone")
                continue
            seq = item[0]
            if seq < expected:
                continue
            if seq > expected:
                raise SpoolError(f"{FORMAT}: spool {path} has seq {seq} where {expected} was expected")
            yield item
            expected += 1
            if expected >= hi:
                return
        raise SpoolError(f"{FORMAT}: spool {path} ends before seq {expected}; records [{expected}, {hi}) "
                         "are missing (was the spool replaced?)")
    finally:
        f.close()


class Spool:
    """The durable append-only record file: one writer (the driver's reader), any number of readers.

    ``open`` takes an exclusive lock (``<path>.lock``), scans the file,
    cuts a torn last line (a crash in the middle of a write: that message
    was never acknowledged, so the broker redelivers it) and continues the
    seq numbering. Byte offsets of uncommitted records are kept so tasks can
    seek straight to the start of their range.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._mutex = threading.Lock()
        self._file: IO[bytes] | None = None
        self._lock_fd: int | None = None
        self._first = 0
        self._next = 0
        self._size = 0
        self._index_base = 0
        self._offsets = array("q")

    @property
    def is_open(self) -> bool:
        return self._file is not None

    @property
    def first_seq(self) -> int:
        """The seq of the first record still in the file."""
        with self._mutex:
            return self._first

    @property
    def next_seq(self) -> int:
        """The seq the next record gets: every record below it is on disk."""
        with self._mutex:
            return self._next

    def open(self, *, lock_timeout: float = 10.0) -> None:
        if self._file is not None:
            return
        parent = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(parent, exist_ok=True)
        self._lock(lock_timeout)
        try:
            with contextlib.suppress(FileNotFoundError):
                os.remove(self.path + ".compact")  # left by a crash in the middle of a compaction
            created = not os.path.exists(self.path)
            self._scan()
            self._file = open(self.path, "ab")  # noqa: SIM115 -- held until close()
            if created:
                _fsync_dir(self.path)
        except BaseException:
            self._unlock()
            raise

    def close(self) -> None:
        with self._mutex:
            if self._file is not None:
                self._file.close()
                self._file = None
            self._unlock()

    def _lock(self, timeout: float) -> None:
        fd = os.open(self.path + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise SpoolError(f"{FORMAT}: spool {self.path} is in use by another reader (still "
                                     f"locked after {timeout:g} s): one spool per query") from None
                time.sleep(0.05)  # the previous reader of a restarted query may still be exiting
            else:
                self._lock_fd = fd
                return

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def _scan(self) -> None:
        first: int | None = None
        expected: int | None = None
        offsets = array("q")
        good = 0
        size = 0
        if os.path.exists(self.path):
            with open(self.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                for lineno, raw in enumerate(f, 1):
                    if not raw.endswith(b"\n"):
                        break  # torn last line
                    try:
                        item = _decode_line(raw)
                    except ValueError as exc:
                        if good + len(raw) == size:
                            break  # a garbled last line: treated as torn
                        raise SpoolError(f"{FORMAT}: spool {self.path} line {lineno} is corrupt: "
                                         f"{exc}") from None
                    if isinstance(item, int):
                        if lineno != 1:
                            raise SpoolError(f"{FORMAT}: spool {self.path} line {lineno}: a header "
                                             "after the first line")
                        first = expected = item
                    else:
                        seq = item[0]
                        if expected is None:
                            first = expected = seq
                        elif seq != expected:
                            raise SpoolError(f"{FORMAT}: spool {self.path} line {lineno} has seq {seq} "
                                             f"where {expected} was expected")
                        offsets.append(good)
                        expected += 1
                    good += len(raw)
        if good < size:
            with open(self.path, "r+b") as f:
                f.truncate(good)
                f.flush()
                os.fsync(f.fileno())
        self._first = first if first is not None else 0
        self._next = expected if expected is not None else self._first
        self._index_base = self._first
        self._offsets = offsets
        self._size = good

    def append(self, topic: str, payload: bytes, qos: int, retain: bool) -> int:
        """Write one record durably (flush + fsync) and return its seq."""
        with self._mutex:
            if self._file is None:
                raise SpoolError(f"{FORMAT}: spool {self.path} is not open")
            seq = self._next
            line = encode_record((seq, topic, payload, _now_ms(), qos, retain))
            try:
                self._file.write(line)
                self._file.flush()
                os.fsync(self._file.fileno())
            except OSError as exc:
                with contextlib.suppress(OSError):
                    self._file.truncate(self._size)  # no half record in front of the next one
                raise SpoolError(f"{FORMAT}: cannot write to spool {self.path}: {exc}") from exc
            self._offsets.append(self._size)
            self._size += len(line)
            self._next = seq + 1
            return seq

    def offset_of(self, seq: int) -> int:
        """The byte offset of record ``seq`` in the current file, or -1 if not known here."""
        with self._mutex:
            i = seq - self._index_base
            return self._offsets[i] if 0 <= i < len(self._offsets) else -1

    def release(self, end: int, compact_bytes: int) -> bool:
        """Records below ``end`` are no longer needed; compact if that frees ``compact_bytes`` or more.

        Returns whether the file was rewritten. ``compact_bytes <= 0`` never compacts.
        """
        with self._mutex:
            if self._file is None:
                return False
            end = min(end, self._next)
            if end <= self._index_base:
                return False
            cut = self._offsets[end - self._index_base] if end < self._next else self._size
            del self._offsets[: end - self._index_base]
            self._index_base = end
            if compact_bytes <= 0 or cut < compact_bytes:
                return False
            header = _encode_header(end)
            tmp = self.path + ".compact"
            with open(tmp, "wb") as out, open(self.path, "rb") as src:
                out.write(header)
                src.seek(cut)
                shutil.copyfileobj(src, out)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path)
            _fsync_dir(self.path)
            self._file.close()
            self._file = open(self.path, "ab")  # noqa: SIM115 -- held until close()
            shift = len(header) - cut
            self._offsets = array("q", (o + shift for o in self._offsets))
            self._size += shift
            self._first = end
            return True


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
