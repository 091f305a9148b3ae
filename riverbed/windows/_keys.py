"""Partition keys as plain data, and back: the one codec every snapshot of keyed state uses.

A partition key is any hashable value; a composite key is a tuple (of
attribute values, or of other tuples). msgpack and JSON have no tuple: they
store a list and hand a list back, which cannot key a dict. So a snapshot
stores a key through `encode_partition_key` (tuples, at any depth, become
lists) and a restore reads it through `decode_partition_key` (lists, at any
depth, become tuples). Scalars pass through both unchanged.

The window snapshots (tumbling, sliding and timeInterval) and the keyed
state of the Aggregate and Join operators all use this pair, so a key
written by one reads back the same in any of them.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

__all__ = ["decode_partition_key", "encode_partition_key"]


def encode_partition_key(key: Hashable) -> Any:
    """The key as plain data: every tuple in it (the key itself or nested) becomes a list."""
    if isinstance(key, tuple):
        return [encode_partition_key(k) for k in key]
    return key


def decode_partition_key(data: Any) -> Hashable:
    """The key `encode_partition_key` wrote: every list in it becomes a tuple again.

    A tuple is left as it is (a snapshot kept in memory, never encoded, may
    hold one); nothing is validated here, the caller decides what a key that
    is still unhashable means.
    """
    if isinstance(data, list):
        return tuple(decode_partition_key(k) for k in data)
    return data  # type: ignore[no-any-return]
