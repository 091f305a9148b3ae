"""Checkpoint stores: every operator's state of a job, saved atomically, restored from the newest good one.

A checkpoint is a mapping ``operator key -> plain data`` under an increasing
id, with the job's name and the time it was taken. `CheckpointStore.save`
writes it in one atomic, synced batch; `CheckpointStore.latest_good` returns
the newest checkpoint whose every record validates, skipping (and reporting)
damaged ones, so a restart never restores half a checkpoint or someone
else's bytes. States are encoded as tagged, versioned msgpack with a checksum
per record, never pickled: decoding what is on disk cannot run code.

`RocksDBStore` is the durable store (one directory per job, exclusively
locked, owner-only); `MemoryStore` has the same semantics in a dict, for
tests. What a store notices and survives (committed checkpoints that are
gone, a damaged table file) it reports as `StoreWarning`s, to an
``on_warning`` hook or the ``riverbed.checkpoint`` logger;
`RocksDBStore.repair` rebuilds a damaged store (``riverbed checkpoints
repair DIR``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._codec import FORMAT, FORMAT_VERSION, SET_EXT, decode_value, encode_value, set_ext, set_from
from ._errors import (
    CheckpointCorrupt,
    CheckpointEncodeError,
    CheckpointError,
    CheckpointForeign,
    CheckpointIdError,
    CheckpointNotFound,
    CheckpointVersionError,
    StoreClosed,
    StoreError,
    StoreFull,
    StoreIOError,
    StoreLocked,
)
from ._store import (
    Checkpoint,
    CheckpointInfo,
    CheckpointStore,
    MemoryStore,
    SkipHook,
    StoreWarning,
    WarningHook,
)

if TYPE_CHECKING:
    from ._rocksdb import RepairReport, RocksDBStore


def __getattr__(name: str) -> Any:
    # rocksdict loads on first use: the codec is imported by processes that never open a store
    # (the Spark bridge's key-group workers and source reader).
    if name in ("RocksDBStore", "RepairReport"):
        from . import _rocksdb

        value = getattr(_rocksdb, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "SET_EXT",
    "Checkpoint",
    "CheckpointCorrupt",
    "CheckpointEncodeError",
    "CheckpointError",
    "CheckpointForeign",
    "CheckpointIdError",
    "CheckpointInfo",
    "CheckpointNotFound",
    "CheckpointStore",
    "CheckpointVersionError",
    "MemoryStore",
    "RepairReport",
    "RocksDBStore",
    "SkipHook",
    "StoreClosed",
    "StoreError",
    "StoreFull",
    "StoreIOError",
    "StoreLocked",
    "StoreWarning",
    "WarningHook",
    "decode_value",
    "encode_value",
    "set_ext",
    "set_from",
]
