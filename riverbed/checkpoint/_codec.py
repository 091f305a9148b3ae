"""How one checkpoint record is turned into bytes and back, validating everything on the way in.

A checkpoint is stored as records (one per operator state plus a manifest),
and every record is self-describing::

    b"riverbed.checkpoint\\0"   20 bytes, the magic: tells our records from anyone else's
    digest                     16 bytes, blake2b-128 of the body
    body                       msgpack [version, kind, checkpoint id, job, time_ns, key, payload]

The magic and the digest are the *framing*; they never change between format
versions, so a reader checks them before it looks at the version. That order
decides which error a reader raises: bytes without the magic are
`CheckpointForeign`; bytes with the magic whose digest does not match are
`CheckpointCorrupt` (a flipped version byte is damage, not a newer format);
only an intact body with another version number is `CheckpointVersionError`.

The payload is the state itself, msgpack-encoded **plain data**: dict, list,
tuple, str, int, float, bool, None, bytes, `decimal.Decimal` (an
extension type holding its exact text, so ``Decimal("1.20")`` keeps its
exponent) and set (an extension type holding its items: a frozenset comes
back a set; schemas have ``set<T>``, and windows hold such tuples). A tuple
is an extension type too, holding its items, and comes back a tuple (a
namedtuple comes back a plain tuple): a window of a schema-less stream holds
whatever its tuples' attributes hold, and an operator hashing such a value
failed after a restart when it came back a list. Records written before
(tuples stored as msgpack arrays) still decode, their tuples as lists, except
dict keys and set items, which come back tuples because a list cannot be
hashed; a riverbed from before cannot read a record holding a tuple (an
unknown extension type: it skips the checkpoint as corrupt). A subclass of
dict, list, str, int, float or bytes is stored as its base type (a
``Counter`` comes back a dict). Every str and every int
round-trips, the ones msgpack has no type for included, because operators
hold them for reasons of their own: a file name read from a directory can
hold bytes that are not UTF-8 (Python keeps them as lone surrogates, so the
str is stored with them, "surrogatepass"), and a running total can outgrow
64 bits (such an int is stored as an extension type holding its two's
complement bytes). Anything else (datetime, objects), and tuples nested more
than 100 levels deep (each level is a Python call when reading), is refused
when *saving*, with the path to the offending value, so that a checkpoint
that was written can always be read.

Never pickle: decoding arbitrary bytes from disk must not be able to run code.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Final

import msgpack  # type: ignore[import-untyped]  # msgpack ships no type information

from ._errors import CheckpointCorrupt, CheckpointEncodeError, CheckpointForeign, CheckpointVersionError

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "HEADER_SIZE",
    "KIND_MANIFEST",
    "KIND_STATE",
    "SET_EXT",
    "TUPLE_EXT",
    "RecordHeader",
    "decode_record",
    "decode_value",
    "encode_record",
    "encode_value",
    "record_digest",
    "set_ext",
    "set_from",
    "short_repr",
]

FORMAT: Final = "riverbed.checkpoint"
FORMAT_VERSION: Final = 1
MAGIC: Final = FORMAT.encode("ascii") + b"\0"
DIGEST_SIZE: Final = 16
HEADER_SIZE: Final = len(MAGIC) + DIGEST_SIZE

KIND_MANIFEST: Final = "manifest"
KIND_STATE: Final = "state"
_KINDS: Final = (KIND_MANIFEST, KIND_STATE)

DECIMAL_EXT: Final = 1
BIGINT_EXT: Final = 2  # an int beyond msgpack's 64 bits: signed big-endian two's complement
SET_EXT: Final = 3  # a set or frozenset: its items, packed as a list (a set comes back)
TUPLE_EXT: Final = 4  # a tuple (or namedtuple): its items, packed as a list (a tuple comes back)
INT_MIN: Final = -(2**63)
INT_MAX: Final = 2**64 - 1
_STR_ERRORS: Final = "surrogatepass"  # a str with lone surrogates (undecodable bytes) round-trips
_MAX_DEPTH: Final = 511  # msgpack's own nesting limit when packing
# Tuples inside tuples: each level is one Python call when encoding and one when decoding (the
# extension's items are packed apart), so a record that could be written can be read back even
# from a deep stack.
_MAX_TUPLE_DEPTH: Final = 100
_KEEP_PACKER: Final = 64 * 1024  # a tuple's packer is reused after packing less than this
_BODY_FIELDS: Final = 7

_FALLBACK = "this checkpoint cannot be used: restore an older one (CheckpointStore.latest_good does)"


@dataclass(frozen=True, slots=True)
class RecordHeader:
    """What a record says about itself; the store checks it against the key it was read from."""

    kind: str
    checkpoint_id: int
    job: str
    time_ns: int
    key: str


# ------------------------------------------------------------------- values


def _default(obj: Any) -> Any:
    """What the packer does not pack itself. It packs with ``strict_types`` (only exact dicts,
    lists, str, ... natively) so that tuples come here, and so do subclasses of the native
    types, stored as their base type as before (tuples were packed as arrays then)."""
    if type(obj) is tuple:  # (inline: a window may hold a tuple in each of its tuples)
        packers = _PACKERS
        free = packers.free
        packer = free.pop() if free else _deeper_packer()
        try:
            data = packer.pack(list(obj))
        except BaseException:
            packers.made -= 1  # (dropped, not reused)
            raise
        if len(data) < _KEEP_PACKER:
            free.append(packer)
        else:  # its buffer grew to the tuple's size and would stay so: dropped
            packers.made -= 1
        return _new_ext(msgpack.ExtType, (TUPLE_EXT, data))
    if isinstance(obj, Decimal):
        return msgpack.ExtType(DECIMAL_EXT, str(obj).encode("ascii"))
    if isinstance(obj, tuple):  # a namedtuple: it comes back a plain tuple
        return _default(tuple(obj))
    if isinstance(obj, dict):  # Counter, defaultdict, OrderedDict
        return dict(obj)
    if isinstance(obj, list):
        return list(obj)
    if isinstance(obj, str):
        return str(obj)
    if isinstance(obj, int):  # an int subclass (IntEnum), or an int beyond msgpack's 64 bits
        value = int(obj)
        if INT_MIN <= value <= INT_MAX:
            return value
        return msgpack.ExtType(BIGINT_EXT, value.to_bytes(value.bit_length() // 8 + 1, "big", signed=True))
    if isinstance(obj, float):
        return float(obj)
    if isinstance(obj, bytes | bytearray):
        return bytes(obj)
    if isinstance(obj, set | frozenset):  # schemas have set<T>: windows hold such tuples
        return set_ext(obj, _default)
    raise TypeError(f"cannot serialize {type(obj).__qualname__}")


class _Packers(threading.local):
    """Per thread, the packers of tuples' items (`TUPLE_EXT`), reused: one made per tuple
    (``msgpack.packb``) made a window of tuples each holding one 40 % slower to encode. A packer
    is not reentrant, so a tuple inside a tuple takes another: ``made`` packers (all of them
    ``free`` between two records) is the deepest nesting of tuples met so far. A packer keeps
    its buffer at the largest size it packed, so one that packed a large tuple is not kept."""

    def __init__(self) -> None:
        self.free: list[Any] = []
        self.made = 0


_PACKERS: Final = _Packers()
_new_ext: Final = tuple.__new__  # an ExtType without ExtType.__new__'s checks (ours hold)


def _deeper_packer() -> Any:
    """A packer for tuples nested one level deeper than any so far (on this thread)."""
    packers = _PACKERS
    if packers.made >= _MAX_TUPLE_DEPTH:
        raise ValueError(f"tuples nested deeper than {_MAX_TUPLE_DEPTH} levels")
    packers.made += 1
    return msgpack.Packer(default=_default, strict_types=True, unicode_errors=_STR_ERRORS, buf_size=256)


def set_ext(items: set[Any] | frozenset[Any], default: Callable[[Any], Any]) -> msgpack.ExtType:
    """A set as msgpack extension `SET_EXT`: its items, packed as a list (``default`` takes what
    msgpack has no type for). The checkpoints and the Spark bridge's rows both carry sets so."""
    return msgpack.ExtType(SET_EXT, msgpack.packb(list(items), use_bin_type=True, default=default,
                                                  unicode_errors=_STR_ERRORS))


def set_from(items: Any) -> set[Any]:
    """The set a `SET_EXT` extension's decoded items were (each hashable again: a tuple item
    came back as a list, a frozenset as a set); ValueError if they are not a list."""
    if not isinstance(items, list):
        raise ValueError("a set extension holds no list")
    return {_freeze(item) for item in items}


def encode_value(value: Any, *, checkpoint_id: int, key: str) -> bytes:
    """``value`` as msgpack bytes; `CheckpointEncodeError` naming the path to what cannot be stored."""
    try:
        return msgpack.packb(value, default=_default,  # type: ignore[no-any-return]
                             strict_types=True, unicode_errors=_STR_ERRORS)
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:  # UnicodeEncodeError: ValueError
        found = _locate(value, "", 0, set())
        where = f"checkpoint {checkpoint_id}: state {key!r}"
        if found is None:
            message = f"{where}: msgpack cannot encode it ({exc}); keep states to plain data"
        else:
            path, problem = found
            message = f"{where}: cannot encode the value at {path or 'the top level'}: {problem}"
        raise CheckpointEncodeError(message, checkpoint_id=checkpoint_id) from exc


def short_repr(value: Any) -> str:
    """``repr(value)`` cut to 60 characters, for messages."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_PLAIN = ("dict, list, tuple, set, str, int, float, bool, None, bytes or Decimal; convert it in "
          "the operator's snapshot(), e.g. a datetime to int nanoseconds")


def _locate(value: Any, path: str, depth: int, active: set[int],
            tuples: int = 0) -> tuple[str, str] | None:
    """The first place in ``value`` msgpack refuses, and why; None if there is none.
    ``tuples``: how many tuples ``value`` is inside."""
    if depth > _MAX_DEPTH:
        return path, (f"the data is nested deeper than {_MAX_DEPTH} levels; "
                      "flatten it (msgpack limits the nesting)")
    if isinstance(value, tuple):
        tuples += 1
        if tuples > _MAX_TUPLE_DEPTH:
            return path, (f"tuples are nested deeper than {_MAX_TUPLE_DEPTH} levels; flatten "
                          "them, or make the inner ones lists")
    if value is None or isinstance(value, bool | float | bytes | bytearray | memoryview | Decimal):
        return None
    if isinstance(value, int | str):
        return None
    if isinstance(value, list | tuple | dict | set | frozenset):
        if id(value) in active:
            return path, "the data contains itself (a reference cycle); snapshot() must return a tree"
        active.add(id(value))
        try:
            if isinstance(value, dict):
                for k, v in value.items():
                    found = _locate(k, f"{path}<key {short_repr(k)}>", depth + 1, active, tuples)
                    if found is None:
                        found = _locate(v, f"{path}[{short_repr(k)}]", depth + 1, active, tuples)
                    if found is not None:
                        return found
            else:
                for i, item in enumerate(value):
                    found = _locate(item, f"{path}[{i}]", depth + 1, active, tuples)
                    if found is not None:
                        return found
        finally:
            active.discard(id(value))
        return None
    return path, f"a {type(value).__qualname__} is not plain data: use {_PLAIN}"


class _BadExt(ValueError):
    pass


def _ext_hook(code: int, data: bytes) -> Any:
    if code == TUPLE_EXT:
        items = _unpack(data)
        if type(items) is not list:
            raise _BadExt("a tuple extension holds no list")
        return tuple(items)
    if code == DECIMAL_EXT:
        try:
            return Decimal(data.decode("ascii"))
        except (UnicodeDecodeError, InvalidOperation) as exc:
            raise _BadExt(f"a Decimal extension holds {data[:40]!r}, which is not a number") from exc
    if code == BIGINT_EXT:
        if not data:
            raise _BadExt("a big-int extension holds no bytes")
        return int.from_bytes(data, "big", signed=True)
    if code == SET_EXT:
        try:
            return set_from(_unpack(data))
        except ValueError as exc:
            raise _BadExt(str(exc)) from exc
    raise _BadExt(f"unknown msgpack extension type {code} (this format uses {DECIMAL_EXT}, Decimal, "
                  f"{BIGINT_EXT}, an int beyond 64 bits, {SET_EXT}, a set, and {TUPLE_EXT}, a tuple)")


def _freeze(key: Any) -> Any:
    """A decoded dict key or set item made hashable again: a list was a tuple (in records written
    before tuples had an extension type), a set a frozenset, at any depth."""
    cls = type(key)  # (decoded: exact types)
    if cls is list or cls is tuple:
        return tuple([_freeze(k) for k in key])
    if cls is set:
        return frozenset(key)
    return key


def _pairs_to_dict(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    return {_freeze(k): v for k, v in pairs}


def _unpack(data: bytes) -> Any:
    """msgpack ``data`` of this format as plain data (`decode_value`'s errors are its own)."""
    try:
        return msgpack.unpackb(data, ext_hook=_ext_hook, strict_map_key=False,
                               unicode_errors=_STR_ERRORS)
    except TypeError:
        # A dict key that was a tuple (written before tuples had an extension type) comes back
        # as an (unhashable) list, and one holding a frozenset holds a set: decode again,
        # slower, making keys hashable again.
        return msgpack.unpackb(data, ext_hook=_ext_hook, strict_map_key=False,
                               unicode_errors=_STR_ERRORS, object_pairs_hook=_pairs_to_dict)


def decode_value(payload: bytes, *, checkpoint_id: int, key: str) -> Any:
    """The plain data in ``payload``; `CheckpointCorrupt` if it is not valid msgpack of this format."""
    try:
        return _unpack(payload)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CheckpointCorrupt(
            f"checkpoint {checkpoint_id}: state {key!r}: the payload passed its checksum but is not "
            f"valid msgpack of this format ({type(exc).__name__}: {exc}); it was written by a buggy or "
            f"foreign writer; {_FALLBACK}", checkpoint_id=checkpoint_id) from exc


# ------------------------------------------------------------------ records


def record_digest(record: bytes) -> bytes:
    """The digest stored in a record's framing (not verified here)."""
    return record[len(MAGIC):HEADER_SIZE]


def encode_record(header: RecordHeader, payload: bytes) -> bytes:
    """One stored record: magic, digest, and the msgpack body holding ``header`` and ``payload``."""
    body: bytes = msgpack.packb([FORMAT_VERSION, header.kind, header.checkpoint_id, header.job,
                                 header.time_ns, header.key, payload])
    return b"".join((MAGIC, hashlib.blake2b(body, digest_size=DIGEST_SIZE).digest(), body))


def decode_record(data: bytes, *, checkpoint_id: int, where: str) -> tuple[RecordHeader, bytes]:
    """Validate a stored record's framing, version and header fields; return them and the payload.

    ``where`` names the record in messages (e.g. ``"checkpoint 7, record 'op/window/0'"``).
    Checks, in this order: magic (`CheckpointForeign`), length and digest
    (`CheckpointCorrupt`), version (`CheckpointVersionError`), then the header
    fields' shape (`CheckpointCorrupt`). The payload is not decoded here.
    """
    if not data.startswith(MAGIC):
        if MAGIC.startswith(data):
            raise CheckpointCorrupt(f"{where}: the record is {len(data)} bytes, only part of the "
                                    f"{HEADER_SIZE}-byte header: it was truncated; {_FALLBACK}",
                                    checkpoint_id=checkpoint_id)
        raise CheckpointForeign(
            f"{where}: the record does not start with the {FORMAT!r} magic (it starts with "
            f"{bytes(data[:24])!r}): it was not written by riverbed's checkpoint store; give the "
            "checkpoints a directory of their own, not shared with another program or format",
            checkpoint_id=checkpoint_id)
    if len(data) <= HEADER_SIZE:
        raise CheckpointCorrupt(f"{where}: the record is {len(data)} bytes, no longer than its "
                                f"{HEADER_SIZE}-byte header: it was truncated; {_FALLBACK}",
                                checkpoint_id=checkpoint_id)
    stored = data[len(MAGIC):HEADER_SIZE]
    body = data[HEADER_SIZE:]
    computed = hashlib.blake2b(body, digest_size=DIGEST_SIZE).digest()
    if computed != stored:
        raise CheckpointCorrupt(
            f"{where}: checksum mismatch (stored {stored.hex()}, computed {computed.hex()} over "
            f"{len(body)} bytes): the record was truncated or altered after it was written; {_FALLBACK}",
            checkpoint_id=checkpoint_id)
    try:
        fields = msgpack.unpackb(body)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CheckpointCorrupt(f"{where}: the record passed its checksum but its body is not msgpack "
                                f"({exc}); it was written by a buggy writer; {_FALLBACK}",
                                checkpoint_id=checkpoint_id) from exc
    if not isinstance(fields, list) or not fields or type(fields[0]) is not int:
        raise CheckpointCorrupt(f"{where}: the record's body is not [version, ...] but "
                                f"{short_repr(fields)}; {_FALLBACK}", checkpoint_id=checkpoint_id)
    version = fields[0]
    if version != FORMAT_VERSION:
        raise CheckpointVersionError(
            f"{where}: format version {version} is not supported (this riverbed reads version "
            f"{FORMAT_VERSION}): it was written by {'a newer' if version > FORMAT_VERSION else 'an older'} "
            "riverbed; open the store with that version, or start without this checkpoint",
            checkpoint_id=checkpoint_id)
    expected = (int, str, int, str, int, str, bytes)
    if len(fields) != _BODY_FIELDS or any(type(f) is not t for f, t in zip(fields, expected, strict=False)):
        shape = ", ".join(type(f).__name__ for f in fields)
        raise CheckpointCorrupt(
            f"{where}: the record's header should be [int version, str kind, int id, str job, int time_ns, "
            f"str key, bytes payload], got [{shape}]; {_FALLBACK}", checkpoint_id=checkpoint_id)
    _, kind, ckpt_id, job, time_ns, key, payload = fields
    if kind not in _KINDS:
        raise CheckpointCorrupt(f"{where}: unknown record kind {kind!r} (expected one of {_KINDS}); "
                                f"{_FALLBACK}", checkpoint_id=checkpoint_id)
    return RecordHeader(kind, ckpt_id, job, time_ns, key), payload
