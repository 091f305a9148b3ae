"""The RocksDB checkpoint store, on rocksdict 0.3.29 (RocksDB 9.8.4) in raw mode.

rocksdict is a thin binding, and its traps decide most of this module (see
also shared/notes/dependencies.md, section 3):

* By default it pickles values and type-tags keys. ``Options(raw_mode=True)``
  makes it store our bytes as they are.
* Every RocksDB failure is a bare ``Exception`` whose message starts with the
  status ("IO error: ...", "Corruption: ..."); `_map_error` turns each into a
  `StoreLocked`, `StoreIOError`, `StoreClosed` or `CheckpointCorrupt`.
* An iterator over a damaged block **stops early without raising**; only its
  ``status()`` raises afterwards. Every scan here ends with ``status()``.
* An iterator that is still referenced keeps the database open, and its LOCK
  held, after ``close()``. So iterators never outlive the call that made them
  (``del`` in ``finally``, also so that a raised error's traceback holds none).
* ``ReadOptions.set_iterate_lower_bound`` sets an *upper* bound in 0.3.29; only
  ``set_iterate_upper_bound`` is used. The bound keeps a scan of one
  checkpoint from reading the next one's blocks (which may be the damaged ones).

Each save is one ``WriteBatch`` written with ``sync=True``: all of a
checkpoint's records, its manifest and the retention deletions become durable
together, or not at all.
"""

from __future__ import annotations

import builtins
import os
from typing import Final

from rocksdict import (
    AccessType,
    DbClosedError,
    Options,
    Rdict,
    RdictIter,
    ReadOptions,
    WriteBatch,
    WriteOptions,
)

from ._errors import CheckpointCorrupt, CheckpointError, StoreClosed, StoreError, StoreIOError, StoreLocked
from ._store import CheckpointStore, Ranges, Records

__all__ = ["RocksDBStore"]

_INFO_LOGS_KEPT: Final = 2  # RocksDB keeps 1000 by default, and each open rotates one


def _map_error(exc: Exception, where: str, action: str) -> CheckpointError:
    """Our error for a rocksdict exception raised while ``action`` on the store ``where``."""
    text = str(exc)
    if isinstance(exc, DbClosedError):
        return StoreClosed(f"{where} was closed while {action}; open a new store")
    if text.startswith("IO error") and ("/LOCK:" in text or "lock file" in text or "lock hold" in text):
        return StoreLocked(
            f"{where} is already opened by another process (or by another store in this process): "
            f"RocksDB could not take its LOCK file ({text}); stop the other job or close the other "
            "store first, or give this job a directory of its own")
    if text.startswith("Corruption"):
        return CheckpointCorrupt(
            f"{where} is damaged: RocksDB reported {text!r} while {action}; restore the directory from a "
            "backup or start without checkpoints (rocksdict.Rdict.repair drops the damaged files, and with "
            "them every checkpoint they hold)")
    if "No space left on device" in text:
        return StoreIOError(
            f"{where}: the disk is full ({text}) while {action}; free space and reopen the store: the "
            "checkpoints saved before are intact")
    return StoreIOError(f"{where}: RocksDB failed while {action}: {text}")


class RocksDBStore(CheckpointStore):
    """Checkpoints in a RocksDB directory that this store opens exclusively.

    ``path`` is created if missing. A second read-write store on the same
    directory, from this process or another, raises `StoreLocked`.
    ``read_only=True`` opens it without the lock, next to a running writer
    (for inspection: `list`, `load`, `latest_good`); it sees what was saved
    up to the open, and `save`/`delete` raise `StoreError`. `close` flushes
    the memtable into a table file and releases the directory.
    """

    def __init__(self, path: str | os.PathLike[str], *, keep_last: int = 3, read_only: bool = False) -> None:
        super().__init__(keep_last=keep_last)
        self._path = os.fspath(path)
        self._read_only = read_only
        options = Options(raw_mode=True)
        options.create_if_missing(not read_only)
        options.set_keep_log_file_num(_INFO_LOGS_KEPT)
        access = AccessType.read_only(error_if_log_file_exist=False) if read_only else AccessType.read_write()
        try:
            self._db = Rdict(self._path, options=options, access_type=access)
        except Exception as exc:  # rocksdict raises bare Exceptions
            self._closed = True
            raise _map_error(exc, self._describe(), "opening it") from exc
        self._sync = WriteOptions()
        self._sync.sync = True

    @property
    def path(self) -> str:
        return self._path

    def _scan(self, lo: bytes, hi: bytes) -> builtins.list[tuple[bytes, bytes]]:
        out: builtins.list[tuple[bytes, bytes]] = []
        try:
            bounded = ReadOptions()
            bounded.set_iterate_upper_bound(hi)
            it: RdictIter = self._db.iter(bounded)
            try:
                it.seek(lo)
                while it.valid():
                    out.append((it.key(), it.value()))
                    it.next()
                it.status()  # the loop also ends, silently, at a damaged block
            finally:
                del it
        except Exception as exc:
            raise _map_error(exc, self._describe(), "reading records") from exc
        return out

    def _last_key_below(self, bound: bytes, floor: bytes) -> bytes | None:
        key: bytes | None = None
        try:
            it: RdictIter = self._db.iter()
            try:
                it.seek_for_prev(bound)
                if it.valid() and it.key() == bound:
                    it.prev()
                if it.valid():
                    key = it.key()
                it.status()
            finally:
                del it
        except Exception as exc:
            raise _map_error(exc, self._describe(), "looking up checkpoint ids") from exc
        return key if key is not None and key >= floor else None

    def _write(self, puts: Records, delete_ranges: Ranges) -> None:
        if self._read_only:
            raise StoreError(f"{self._describe()} was opened read_only=True: it cannot save or delete; "
                             "open it without read_only (only one process can)")
        batch = WriteBatch(raw_mode=True)
        for lo, hi in delete_ranges:
            batch.delete_range(lo, hi)
        for key, value in puts:
            batch.put(key, value)
        try:
            self._db.write(batch, self._sync)
        except Exception as exc:
            raise _map_error(exc, self._describe(), f"writing {len(puts)} record(s)") from exc

    def _close(self) -> None:
        error: Exception | None = None
        if not self._read_only:
            try:
                self._db.flush()
            except Exception as exc:
                error = exc
        try:
            self._db.close()  # RocksDB closes even when this raises (e.g. on a full disk)
        except Exception as exc:
            error = error or exc
        if error is not None:
            raise _map_error(error, self._describe(), "closing it") from error

    def _describe(self) -> str:
        return f"the RocksDB checkpoint store at {self._path}"
