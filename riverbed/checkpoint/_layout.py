"""Where a checkpoint's records live in a sorted key space.

All records of checkpoint ``n`` share the prefix ``b"ckpt/" + n as 8 bytes
big-endian + b"/"``, so they are contiguous, ids sort numerically, and one
range deletion drops a checkpoint (or every checkpoint below an id) at once::

    ckpt/<id>/m            the manifest: job, time, and each state record's size and digest
    ckpt/<id>/s/<key>      one operator state, ``key`` as UTF-8 (e.g. "op/window/0")

The manifest sorts before the states, and a checkpoint is complete only when
its manifest is there: the store writes both in one atomic batch.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "ID_MAX",
    "NAMESPACE",
    "NAMESPACE_END",
    "checkpoint_range",
    "id_of",
    "id_prefix",
    "manifest_key",
    "parse_suffix",
    "state_key",
]

NAMESPACE: Final = b"ckpt/"
NAMESPACE_END: Final = b"ckpt0"  # b"0" follows b"/": the first key after every b"ckpt/..." key
ID_MAX: Final = 2**64 - 1
_ID_BYTES: Final = 8
_ID_END: Final = len(NAMESPACE) + _ID_BYTES
_MANIFEST: Final = b"m"
_STATE: Final = b"s/"


def id_prefix(checkpoint_id: int) -> bytes:
    """``b"ckpt/" + id``: every key of this id (and only those) starts with it plus b"/"."""
    return NAMESPACE + checkpoint_id.to_bytes(_ID_BYTES, "big")


def checkpoint_range(checkpoint_id: int) -> tuple[bytes, bytes]:
    """[lo, hi): the keys of one checkpoint."""
    prefix = id_prefix(checkpoint_id)
    return prefix + b"/", prefix + b"0"


def manifest_key(checkpoint_id: int) -> bytes:
    return id_prefix(checkpoint_id) + b"/" + _MANIFEST


def state_key(checkpoint_id: int, key: str) -> bytes:
    return id_prefix(checkpoint_id) + b"/" + _STATE + key.encode("utf-8")


def id_of(key: bytes) -> int | None:
    """The checkpoint id of a key in the namespace, or None if it does not have the layout."""
    if len(key) <= _ID_END or not key.startswith(NAMESPACE) or key[_ID_END:_ID_END + 1] != b"/":
        return None
    return int.from_bytes(key[len(NAMESPACE):_ID_END], "big")


def parse_suffix(key: bytes) -> tuple[bool, bytes] | None:
    """(is_manifest, state key bytes) for a key of the layout, or None for a key that is neither."""
    suffix = key[_ID_END + 1:]
    if suffix == _MANIFEST:
        return True, b""
    if suffix.startswith(_STATE):
        return False, suffix[len(_STATE):]
    return None
