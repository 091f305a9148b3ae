"""How riverbed items travel between Spark stages: one row per tuple or control item.

Spark moves rows, not Python objects, and does not keep per-key order inside
a micro-batch; so every item carries its own order and time:

- ``ord``: a binary sort key; sorting a group's rows by it restores the order
  the items had at the source (time, source, sequence), and each stage that
  derives rows appends a 4-byte index, so derived rows sort after their cause
  and among themselves in the order they were produced;
- ``kind``: a tuple, a window or final mark, a watermark, or a time mark (the
  stamped time moved on with no tuple: timers due by then fire);
- ``time``: the time stamped at the source (ns); hosts advance their clock to
  it before handling the item, so a replayed batch raises the same events;
- ``value``: a watermark's value;
- ``data``: the tuple as msgpack (a set as an extension type).

A source bundle's run of tuples whose types the core has checked against a schema of scalar
attributes travels as one marshal string (or pickle) instead (`pack_run`, `run_tuples`).
"""

from __future__ import annotations

import marshal
import operator
import pickle
import struct
import sys
from array import array
from typing import Any

import msgpack  # type: ignore[import-untyped]

from ..checkpoint import SET_EXT, set_ext, set_from
from ..graph import Punct, Watermark

__all__ = [
    "COLUMNS",
    "GROUP_COLUMN",
    "KIND_BUNDLE",
    "KIND_COMMAND",
    "KIND_FINAL",
    "KIND_TIME",
    "KIND_TUPLE",
    "KIND_WATERMARK",
    "KIND_WINDOW",
    "ROW_DDL",
    "channels_apart",
    "decode",
    "derived_ord",
    "encode",
    "item_of",
    "kind_of",
    "pack_run",
    "pack_seqs",
    "restamped",
    "run_tuples",
    "seq_at",
    "source_ord",
    "unpack_seqs",
]

KIND_TUPLE = 0
KIND_WINDOW = 1
KIND_FINAL = 2
KIND_WATERMARK = 3
KIND_TIME = 4
KIND_COMMAND = 5  # a host-level action on a hosted operator's window (the trace host's steps)
# Many items of one key group in one row. Spark's stateful Python stages cost tens of
# microseconds per row; bundles make that per bundle. From a source, ``data`` is
# ``[source index, entries]`` (see `pack_seqs`); out of a keyed stage it is a list of
# item rows ``[ord, kind, time, value, tuple, port]`` with the tuples not encoded apart.
KIND_BUNDLE = 6

COLUMNS = ("ord", "kind", "time", "value", "data")
ROW_DDL = "ord BINARY, kind INT, time LONG, value LONG, data BINARY"
GROUP_COLUMN = "grp"

_ORD = struct.Struct(">QHQ")
_SUB = struct.Struct(">I")
_TIME = struct.Struct(">Q")  # the head of `_ORD`: the stamped time
_BIAS = 1 << 63


def source_ord(time: int, source: int, seq: int) -> bytes:
    """The sort key of a source item: by stamped time, then source, then sequence."""
    return _ORD.pack(time + _BIAS, source, seq)


def restamped(ord_: bytes, time: int) -> bytes:
    """``ord_`` (a source item's, or derived from one) with its stamped time replaced by ``time``."""
    return _TIME.pack(time + _BIAS) + ord_[_TIME.size:]


def derived_ord(cause: bytes, index: int) -> bytes:
    """The sort key of the ``index``-th row a stage produced while handling ``cause``."""
    return cause + _SUB.pack(index)


def channels_apart(rows: list[tuple[Any, ...]], chan_at: int) -> None:
    """``rows`` sorted by (order key, channel): each cause's derived rows put channel by channel
    (in place, stable), as README says rows one mark or timer releases in several key groups
    come out. Sorted by (key, channel) alone, the groups alternated row by row (a, b, mark,
    mark), so a sink cutting files at marks wrote two groups' panes into one file. Only rows
    of one cause at one depth are moved, each group's rows keeping their order."""
    n, i, base = len(rows), 0, _ORD.size
    while i < n:
        o = rows[i][0]
        j = i + 1
        if len(o) > base:
            cause = o[:-_SUB.size]
            while j < n and len(p := rows[j][0]) == len(o) and p.startswith(cause):
                j += 1
            if j - i > 1:
                first = rows[i][chan_at]
                if any(r[chan_at] != first for r in rows[i + 1:j]):
                    rows[i:j] = sorted(rows[i:j], key=operator.itemgetter(chan_at))
        i = j


def _default(obj: Any) -> Any:
    """What msgpack has no type for: a set, as checkpoints store it (it failed the query with
    "can not serialize 'set' object"); anything else is refused as before."""
    if isinstance(obj, set | frozenset):
        return set_ext(obj, _default)
    raise TypeError(f"can not serialize {type(obj).__name__!r} object")


def _ext_hook(code: int, data: bytes) -> Any:
    if code == SET_EXT:
        return set_from(decode(data))
    return msgpack.ExtType(code, data)


_PACK = msgpack.Packer(use_bin_type=True, default=_default).pack  # one packer, not one per call


def encode(tup: Any) -> bytes:
    return _PACK(tup)  # type: ignore[no-any-return]


def decode(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=_ext_hook)


_DUMPS = pickle.dumps
_LOADS = pickle.loads
_MARSHAL = marshal.dumps
_UNMARSHAL = marshal.loads
_PICKLE_PROTO = 0x80  # the first byte of every pickle of protocol 2 or later; never marshal's


def pack_run(tuples: list[Any]) -> bytes:
    """A run of dict tuples, each checked by the core against a schema whose attributes are all
    ints, floats, bools, strings or blobs, as one ``marshal`` string, or a pickle (protocol 5)
    where marshal refuses an object.

    For such tuples msgpack, marshal and pickle give back the same dicts (the same keys in the
    same order, values of the same types), and the latter two decode them faster: a run's
    dicts share their key strings, which they write once and msgpack makes and interns again
    for every dict (W2's key group: 1.6k of msgpack's 4.4k instructions a reading saved).
    marshal takes exact builtin types only (the core's check lets only those through as
    values) and writes each object once where it is shared (one dict yielded twice comes back
    as one object, as with pickle); it costs 1.4k instructions a W2 reading where pickle, which
    memoizes every dict, costs 2.3k, and decodes for 2.3k where pickle takes 2.5k. What marshal
    refuses (a key that is a ``str`` subclass, which the schema check accepts) goes as a pickle,
    which gives the stage the runtime's own objects. Tuples that could come back otherwise
    (tuples or sets inside, types msgpack refuses) travel as msgpack, as everywhere else.
    """
    try:
        return _MARSHAL(tuples)
    except ValueError:  # an object of a subclass, or a type marshal does not know
        return _DUMPS(tuples, 5)


def run_tuples(data: list[Any] | bytes) -> list[Any]:
    """The tuples of a source bundle's run: a list (msgpack) or `pack_run`'s bytes."""
    if type(data) is not bytes:
        return data  # type: ignore[return-value]
    if data[0] == _PICKLE_PROTO:
        return _LOADS(data)  # type: ignore[no-any-return]
    return _UNMARSHAL(data)  # type: ignore[no-any-return]


def pack_seqs(seqs: array[int]) -> bytes:
    """A run's sequence numbers as little-endian uint64s: one bytes object, not one int per
    tuple, to encode and decode (a source bundle's tuple entry is ``[KIND_TUPLE, time, seqs,
    tuples]``: tuples in a row of one group with one stamped time; a mark is ``[kind, time,
    value, seq]``)."""
    if _BIG_ENDIAN:
        seqs = array("Q", seqs)
        seqs.byteswap()
    return seqs.tobytes()


def unpack_seqs(data: bytes) -> array[int]:
    seqs = array("Q")
    seqs.frombytes(data)
    if _BIG_ENDIAN:
        seqs.byteswap()
    return seqs


def seq_at(data: bytes, j: int) -> int:
    """Sequence number ``j`` (negative: from the end) of `pack_seqs`' bytes, without unpacking
    the rest."""
    if j < 0:
        j += len(data) // 8
    return int.from_bytes(data[8 * j:8 * j + 8], "little")


_BIG_ENDIAN = sys.byteorder == "big"


def kind_of(item: Any) -> tuple[int, int]:
    """(kind, value) of an item a host produced (a list of tuples is handled by the caller)."""
    if item is Punct.WINDOW:
        return KIND_WINDOW, 0
    if item is Punct.FINAL:
        return KIND_FINAL, 0
    if isinstance(item, Watermark):
        return KIND_WATERMARK, item.value
    raise TypeError(f"not a riverbed control item: {item!r}")


def item_of(kind: int, value: int, data: bytes | None) -> Any:
    """The host item a row carries (None for a time mark)."""
    if kind == KIND_TUPLE:
        return decode(data)  # type: ignore[arg-type]
    if kind == KIND_WINDOW:
        return Punct.WINDOW
    if kind == KIND_FINAL:
        return Punct.FINAL
    if kind == KIND_WATERMARK:
        return Watermark(int(value))
    return None
