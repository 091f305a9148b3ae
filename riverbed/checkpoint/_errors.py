"""Typed errors of the checkpoint store.

Two families, both under `CheckpointError` so one ``except`` catches every
failure of a checkpoint:

* what is wrong with one checkpoint's *bytes* (`CheckpointCorrupt`,
  `CheckpointForeign`, `CheckpointVersionError`): `CheckpointStore.latest_good`
  skips such a checkpoint and falls back to an older one;
* what is wrong with the *store* (`StoreError`: locked, I/O failure, closed):
  no checkpoint can be trusted to be read or written, so these always
  propagate.

Every message names the checkpoint id (when there is one), the record, what
was found and the likely fix. RocksDB reports every failure as a bare
``Exception``; `riverbed.checkpoint._rocksdb` maps each of them to one of these.
"""

from __future__ import annotations

__all__ = [
    "CheckpointCorrupt",
    "CheckpointEncodeError",
    "CheckpointError",
    "CheckpointForeign",
    "CheckpointIdError",
    "CheckpointNotFound",
    "CheckpointVersionError",
    "StoreClosed",
    "StoreError",
    "StoreFull",
    "StoreIOError",
    "StoreLocked",
]


class CheckpointError(Exception):
    """Base class of every error raised by ``riverbed.checkpoint``.

    ``checkpoint_id`` is the checkpoint concerned, or None when the error is
    about the store as a whole.
    """

    def __init__(self, message: str, *, checkpoint_id: int | None = None) -> None:
        super().__init__(message)
        self.checkpoint_id = checkpoint_id


class CheckpointCorrupt(CheckpointError):
    """A checkpoint's stored bytes fail validation: truncated, altered, or a record is missing.

    Also raised for a damaged store (a RocksDB block checksum mismatch), with
    ``checkpoint_id`` None when the damage is not inside one checkpoint's records.
    """


class CheckpointForeign(CheckpointError):
    """A record was not written by riverbed's checkpoint store (no ``riverbed.checkpoint`` magic)."""


class CheckpointVersionError(CheckpointError):
    """A record is intact but in a format version this riverbed cannot read."""


class CheckpointNotFound(CheckpointError, LookupError):
    """No record of the requested checkpoint id exists in the store."""


class CheckpointEncodeError(CheckpointError, ValueError):
    """A state is not plain data that msgpack can hold; nothing was written."""


class CheckpointIdError(CheckpointError, ValueError):
    """A checkpoint id is not an int in 0 .. 2**64-1 or does not increase; nothing was written."""


class StoreError(CheckpointError):
    """The store itself failed; base of `StoreLocked`, `StoreIOError` and `StoreClosed`."""


class StoreLocked(StoreError):
    """The store's directory is already opened by another process (or another store in this one)."""


class StoreIOError(StoreError):
    """The storage engine failed to read or write (disk full, I/O error, bad path)."""


class StoreFull(StoreIOError):
    """The disk is full, or the process's file-size limit was reached: once there is room, the
    same open or save works (`riverbed run --restarts` tries again)."""


class StoreClosed(StoreError):
    """The store was used after `CheckpointStore.close`."""
