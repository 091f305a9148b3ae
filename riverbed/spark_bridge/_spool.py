"""The durable, append-only spool of the MQTT Spark source: one writer, any number of readers.

Spark replays a micro-batch by asking its source for the same offset range
again; MQTT cannot replay, so every message the reader takes from the broker
is first appended here, fsync'd, and only then acknowledged (see
`riverbed.spark_bridge.mqtt_source`). Every range Spark asks for, first read
or replay, is read back from this file, so a replay yields the same rows.

Format (one JSON value per line): records ``[seq, topic, payload, recv_ms,
qos, retain]`` or ``[seq, topic, payload, recv_ms, qos, retain, mid]``, where
``payload`` is the text when the payload is valid UTF-8 and ``{"b64": "..."}``
otherwise, ``recv_ms`` is the time the record was spooled (ms since the
epoch) and ``mid`` the MQTT packet id a QoS 1 message came with (so a
restarted reader can recognise the broker sending it again: see
`riverbed.spark_bridge._mqtt_ingest`). A compacted spool starts with a header
``{"first": n}``. `Spool.release` drops the index of committed records and,
once the committed prefix holds enough bytes, rewrites the file without it (a
copy, fsync, atomic rename). ``<spool>.lock`` next to it admits one writer.

This module knows nothing of MQTT or Spark: executors import it to read their
ranges, and it stays cheap to import there.
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
from collections.abc import Iterator, Sequence
from typing import IO, Final

__all__ = ["FORMAT", "Spool", "SpoolError", "SpoolRow", "encode_record", "read_spool"]

FORMAT: Final = "riverbed_mqtt"
"""The Spark format name of the source, the prefix of its error messages."""

SpoolRow = tuple[int, str, bytes, int, int, bool]
"""One row of the source: ``(seq, topic, payload, recv_ms, qos, retain)``."""


class SpoolError(RuntimeError):
    """The spool is unreadable, in use by another reader, or lacks records an offset needs."""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def encode_record(row: SpoolRow, mid: int = 0) -> bytes:
    """One spool line (with its newline); ``mid`` (0: none) is the packet id it came with."""
    seq, topic, payload, recv_ms, qos, retain = row
    try:
        body: str | dict[str, str] = payload.decode("utf-8")
    except UnicodeDecodeError:
        body = {"b64": base64.b64encode(payload).decode("ascii")}
    record: list[object] = [seq, topic, body, recv_ms, qos, retain]
    if mid:
        record.append(mid)
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


def _encode_header(first: int) -> bytes:
    return json.dumps({"first": first}).encode("ascii") + b"\n"


def _decode_line(raw: bytes) -> SpoolRow | int:
    """A record, or the ``first`` seq of a header line; ``ValueError`` if the line is not one."""
    item = _decode_full(raw)
    return item if isinstance(item, int) else item[0]


def _decode_full(raw: bytes) -> tuple[SpoolRow, int] | int:
    """As `_decode_line`, a record with its packet id (0 when it has none)."""
    item = json.loads(raw)
    if isinstance(item, dict) and isinstance(item.get("first"), int):
        return int(item["first"])
    if not isinstance(item, list) or len(item) not in (6, 7):
        raise ValueError("not a spool record")
    mid = item.pop() if len(item) == 7 else 0
    if not isinstance(mid, int):
        raise ValueError("bad packet id")
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
    return (seq, topic, payload, recv_ms, qos, retain), mid


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
        self._last_ms = 0  # the latest recv_ms written: a wall clock stepped back does not lower it

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
        last_ms = 0
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
                        last_ms = max(last_ms, item[3])
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
        self._last_ms = last_ms

    def append(self, topic: str, payload: bytes, qos: int, retain: bool) -> int:
        """Write one record durably (flush + fsync) and return its seq."""
        return self.append_many([(topic, payload, qos, retain)])

    def append_many(self, messages: Sequence[tuple[str, bytes, int, bool]],
                    mids: Sequence[int] | None = None) -> int:
        """Write ``(topic, payload, qos, retain)`` records durably with one fsync (a group
        commit: the fsync costs about a millisecond whatever the size) and return the seq of
        the first; all of them or none are in the file. ``mids``: the packet id of each
        (0: none), kept in the record for `packet_ids`."""
        with self._mutex:
            if self._file is None:
                raise SpoolError(f"{FORMAT}: spool {self.path} is not open")
            first = self._next
            # recv_ms stamps the messages' time on Spark (`SparkInput`): kept from going back when
            # the wall clock is stepped back, so it never decreases along seq.
            now = self._last_ms = max(_now_ms(), self._last_ms)
            lines = [encode_record((first + i, topic, payload, now, qos, retain), mids[i] if mids else 0)
                     for i, (topic, payload, qos, retain) in enumerate(messages)]
            try:
                self._file.write(b"".join(lines))
                self._file.flush()
                os.fsync(self._file.fileno())
            except OSError as exc:
                with contextlib.suppress(OSError):
                    self._file.truncate(self._size)  # no half record in front of the next one
                raise SpoolError(f"{FORMAT}: cannot write to spool {self.path}: {exc}") from exc
            for line in lines:
                self._offsets.append(self._size)
                self._size += len(line)
            self._next = first + len(lines)
            return first

    def packet_ids(self, lo: int) -> list[tuple[int, int, str, bytes]]:
        """``(seq, mid, topic, payload)`` of the records from seq ``lo`` on that carry a packet id."""
        with self._mutex:
            lo, hi = max(lo, self._first), self._next
            i = lo - self._index_base
            hint = self._offsets[i] if 0 <= i < len(self._offsets) else -1
        out: list[tuple[int, int, str, bytes]] = []
        if lo >= hi:
            return out
        with open(self.path, "rb") as f:
            if not (hint >= 0 and _row_at(f, hint, lo)):
                hint = 0
            f.seek(hint)
            for raw in f:
                if not raw.endswith(b"\n"):
                    break
                try:
                    item = _decode_full(raw)
                except ValueError as exc:
                    raise SpoolError(f"{FORMAT}: spool {self.path} has a corrupt line: {exc}") from None
                if isinstance(item, int):
                    continue
                (seq, topic, payload, *_), mid = item
                if lo <= seq < hi and mid:
                    out.append((seq, mid, topic, payload))
        return out

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
