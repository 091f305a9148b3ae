"""What travels between a job and its worker processes, and how a key picks its channel.

Messages are pickled tuples (protocol 5) framed as `multiprocessing.connection` frames (a 4-byte
big-endian length, or -1 and an 8-byte one), so the worker reads them with a blocking
``Connection.recv_bytes`` and the job with asyncio streams. Pickle, not msgpack: tuples are
arbitrary Python values (dicts, tuples as keys, `Punct`, `Watermark`, Decimals), and for the
dicts riverbed's operators pass it is as fast (`bench/parallel.py` measures both; see
docs/decisions.md, "Parallel regions").

Job -> worker: ``(FEED, now, entries)`` with entries ``(operator, port, item)`` (items of
streams into the region: batches, marks, watermarks as ints, final), one credit of the channel's bounded
queue; ``(TICK, now)``, the clock reached the channel's deadline (no credit); ``(COMMIT, now,
checkpoint_id)``, the job's region committed it (no credit); ``(CHECKPOINT, now, checkpoint_id,
region)``, the job's region starts a checkpoint and the channel's replicated sources take it at
their next batch (no credit); ``(METRICS,)``; ``(STOP, suspend)``, the job was asked to stop:
replicated sources end, with final punctuation, or (``suspend``: the stop suspends the job at
a checkpoint) without it, once they served the stop's barrier (no answer of its own). A barrier entry
``(operator, -1, barrier)`` goes to the member itself (its inputs ended: no barrier reaches it).
An entry's item may be a `riverbed.core.TupleFailed` (a tuple whose partition key the split could
not compute): fed as the stream's items are, each member taking the stream fails on it there as
on a tuple of its own (its error port, or its failure), in its place among the channel's items.
Worker -> job, one reply per FEED, TICK, COMMIT or CHECKPOINT: ``(OUT, fed, exits, deadline, finished,
metrics, reports, finals, cpu, writes)``, ``reports`` the states ``(checkpoint_id, operator,
state)`` its operators took at barriers, ``finals`` ``(operator, state)`` of those that ended,
``cpu`` the worker's CPU seconds so far, ``writes`` the writes to the socket so far; or
``(METRICS_OUT, metrics)``; or ``(FAILED, operator, port, tuple_text, error_type, message)``.
In a job that drains after a failure (no checkpoints), an operator of the channel that failed
ends and the channel goes on: ``(FAILING, operator, port, tuple_text, error_type, message)``
goes before the answer that carries what the operator sent before it failed, and final.
A worker whose channel has replicated sources (`_replica`) also sends, unasked, ``(EMIT,
producing, exits, deadline, finished, metrics, reports, finals, cpu, writes)`` for each batch
they produced (``producing``: a replica still runs), answering nothing; up to 16 such
messages go in one write, within 10 ms of the first (`_worker._Hold`).

A watermark travels as a bare int (an item is otherwise a list, a `Punct` or a barrier):
unpickling a frozen dataclass costs 50 us, and an event-time stream carries many.

Keys: Python's ``hash`` of a str differs between processes (PYTHONHASHSEED), so a channel is
``crc32(canonical bytes of the key) % width``: the same key reaches the same channel in every
run, on every machine, after every restart.
"""

from __future__ import annotations

import pickle
import struct
import zlib
from collections.abc import Hashable
from decimal import Decimal
from typing import Any

__all__ = ["CHECKPOINT", "COMMIT", "EMIT", "FAILED", "FAILING", "FEED", "METRICS", "METRICS_OUT", "OUT",
           "STOP", "TICK",
           "channel_of", "dumps", "frame", "key_bytes", "loads"]

FEED, TICK, METRICS, OUT, METRICS_OUT, FAILED, COMMIT, EMIT, STOP, CHECKPOINT, FAILING = range(11)

_HEADER = struct.Struct("!i")
_LONG = struct.Struct("!Q")


def dumps(message: Any) -> bytes:
    return pickle.dumps(message, protocol=5)


loads = pickle.loads


def frame(data: bytes) -> bytes:
    """A message framed as `multiprocessing.connection.Connection.recv_bytes` reads it."""
    n = len(data)
    if n > 0x7FFFFFFF:
        return _HEADER.pack(-1) + _LONG.pack(n) + data
    return _HEADER.pack(n) + data


def key_bytes(key: Hashable) -> bytes:
    """The key's canonical bytes: equal keys (``1``, ``1.0``, ``True``) give equal bytes, and the
    bytes do not depend on the process."""
    if isinstance(key, str):
        return b"s" + key.encode("utf-8", "surrogatepass")
    if isinstance(key, bool | int):
        return b"i" + str(int(key)).encode()
    if isinstance(key, float):
        if key.is_integer():
            return b"i" + str(int(key)).encode()
        return b"f" + repr(key).encode()
    if isinstance(key, Decimal) and key == key.to_integral_value():
        return b"i" + str(int(key)).encode()
    if isinstance(key, bytes):
        return b"b" + key
    if isinstance(key, tuple):
        return b"t" + b"".join(len(p).to_bytes(4, "big") + p for p in map(key_bytes, key))
    if key is None:
        return b"n"
    return b"r" + repr(key).encode("utf-8", "surrogatepass")  # a value whose repr is stable


def channel_of(key: Hashable, width: int) -> int:
    """The channel of a partition key: stable across processes and runs."""
    return zlib.crc32(key_bytes(key)) % width
