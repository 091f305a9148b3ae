"""File formats of FileSource and FileSink: csv, JSON lines and plain lines.

A record of a file becomes a tuple (a dict) through the stream's schema, and
a tuple becomes a record the same way back, so what FileSink writes FileSource
reads again unchanged:

``csv``
    One record per line (a quoted field may span lines), fields split by
    ``separator`` and unquoted as Python's `csv` module does (a doubled
    quote inside a quoted field is one quote). Each field is read as its attribute's SPL type: integers
    (range-checked), floats (``nan``/``inf`` too), ``true``/``false``,
    decimals, strings as they are, blobs as base64, timestamps (below), and
    ``list``/``set``/``map`` values as JSON text (``[1,2]``,
    ``{"a":1}``). An empty field takes the attribute's value in
    ``default_tuple``, else the type's default (0, 0.0, "", false, empty
    collections), as SPL's csv reader does. A line starting with ``#`` and an
    empty line are skipped between records; ``has_header`` skips the first
    lines of the file.
``json``
    One JSON object per line (JSON lines). With a schema the values are
    converted to its types (a timestamp from an integer or an ISO text, a set
    from an array, map keys from their text); every attribute must be there
    unless ``default_tuple`` gives it. Without a schema the object is the
    tuple as is. Empty lines are skipped.
``line``
    Every line (the end-of-line marker removed) is one ``rstring`` attribute,
    ``line`` unless the schema names another.

Timestamps are integer nanoseconds since the epoch (riverbed's timestamp
value). A file gives one as an integer (nanoseconds: what FileSink writes) or
as an ISO-8601 date-time, ``2024-05-01T12:30:00.250Z``, with up to nine
fractional digits and an optional ``Z``/``+hh:mm`` offset; a date-time
without an offset is UTC. Decimal seconds are refused: ``12`` would be
nanoseconds while ``12.0`` were seconds.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal, InvalidOperation
from typing import Any, Literal

import orjson

from ..graph import Schema, split_composite
from ..jsonio import JSONTextError, load_json

__all__ = [
    "FORMATS",
    "FileFormatError",
    "Format",
    "RecordError",
    "csv_field",
    "csv_row_parser",
    "json_record_parser",
    "json_value",
    "msgpack_value",
    "parse_timestamp",
    "plain_value",
    "render_csv",
    "render_json",
    "type_default",
]

Format = Literal["csv", "json", "line"]
FORMATS: tuple[Format, ...] = ("csv", "json", "line")

WINDOW_MARKER_TEXT = "Punctuation received: WindowMarker"
FINAL_MARKER_TEXT = "Punctuation received: FinalMarker"

_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1), "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1),
    "uint8": (0, 2**8 - 1), "uint16": (0, 2**16 - 1), "uint32": (0, 2**32 - 1),
    "uint64": (0, 2**64 - 1),
}
_DECIMALS = ("decimal32", "decimal64", "decimal128")
_STRINGS = ("rstring", "ustring")
_INTEGER = re.compile(r"^[+-]?\d+$")
_ISO = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})"
    r"(?:[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d{1,9}))?)?)?"
    r"\s*([Zz]|[+-]\d{2}(?::?\d{2})?)?$")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NS = 1_000_000_000


class FileFormatError(ValueError):
    """A record of a file does not parse: the message names the file, the line and the rule."""

    def __init__(self, operator: str, path: str, line: int, reason: str) -> None:
        self.operator = operator
        self.path = path
        self.line = line
        self.reason = reason
        super().__init__(f"{operator}: {path}, line {line}: {reason}")


class RecordError(ValueError):
    """One record (or field) is malformed; the reader adds the file and the line."""


# --------------------------------------------------------------- timestamps


def parse_timestamp(text: str) -> int:
    """Integer nanoseconds, or an ISO-8601 date-time (UTC unless it has an offset), to ns."""
    text = text.strip()
    if _INTEGER.match(text):
        return int(text)
    m = _ISO.match(text)
    if m is None:
        raise RecordError(f"timestamp {text!r}: expected integer nanoseconds or an ISO-8601 "
                          "date-time such as 2024-05-01T12:30:00.250Z")
    year, month, day, hour, minute, second, fraction, offset = m.groups()
    tz = UTC
    if offset and offset not in ("Z", "z"):
        digits = offset[1:].replace(":", "")
        delta = timedelta(hours=int(digits[:2]), minutes=int(digits[2:4] or 0))
        tz = timezone(-delta if offset[0] == "-" else delta)
    try:
        moment = datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0),
                          int(second or 0), tzinfo=tz)
    except ValueError as exc:
        raise RecordError(f"timestamp {text!r}: {exc}") from None
    seconds = (moment - _EPOCH) // timedelta(seconds=1)
    return seconds * _NS + int((fraction or "").ljust(9, "0"))


# --------------------------------------------------------------- reading


def type_default(spl_type: str) -> Any:
    """SPL's default-constructed value of a type (what an empty csv field reads as)."""
    t = spl_type.strip()
    if t in _INT_RANGES or t == "timestamp":
        return 0
    if t in ("float32", "float64"):
        return 0.0
    if t in _DECIMALS:
        return Decimal(0)
    if t == "boolean":
        return False
    if t in _STRINGS:
        return ""
    if t == "blob":
        return b""
    composite = split_composite(t)
    if composite is None:
        raise RecordError(f"unknown type {spl_type!r}")
    return {"list": list, "set": set, "map": dict}[composite[0]]()


def _int_parser(lo: int, hi: int, spl_type: str) -> Callable[[str], Any]:
    def parse(text: str) -> int:
        if text.isdecimal():  # (the common field: digits only, what the pattern's \d takes)
            v = int(text)
        else:
            s = text.strip()
            if not _INTEGER.match(s):
                raise RecordError(f"{text!r} is not an integer ({spl_type})")
            v = int(s)
        if not lo <= v <= hi:
            raise RecordError(f"{v} is out of the range of {spl_type} [{lo}, {hi}]")
        return v

    return parse


def _float(text: str) -> float:
    try:
        if "_" in text:
            raise ValueError(text)
        return float(text)
    except ValueError:
        raise RecordError(f"{text!r} is not a number (float64)") from None


def _decimal(text: str) -> Decimal:
    try:
        return Decimal(text.strip())
    except InvalidOperation:
        raise RecordError(f"{text!r} is not a decimal") from None


def _boolean(text: str) -> bool:
    s = text.strip().lower()
    if s == "true":
        return True
    if s == "false":
        return False
    raise RecordError(f"{text!r} is not a boolean (true or false)")


def _blob(text: str) -> bytes:
    try:
        return base64.b64decode(text.strip(), validate=True)
    except ValueError:
        raise RecordError(f"{text[:40]!r} is not base64 (blob)") from None


def csv_field(spl_type: str) -> Callable[[str], Any]:
    """The parser of a non-empty csv field (or a map key) of an SPL type."""
    t = spl_type.strip()
    if t in _INT_RANGES:
        lo, hi = _INT_RANGES[t]
        return _int_parser(lo, hi, t)
    if t in ("float32", "float64"):
        return _float
    if t in _DECIMALS:
        return _decimal
    if t == "boolean":
        return _boolean
    if t in _STRINGS:
        return str
    if t == "blob":
        return _blob
    if t == "timestamp":
        return parse_timestamp
    convert = json_value(t)

    def composite(text: str) -> Any:
        try:
            value = load_json(text)
        except JSONTextError:
            raise RecordError(f"{text[:60]!r} is not JSON text ({t})") from None
        return convert(value)

    return composite


def json_value(spl_type: str) -> Callable[[Any], Any]:
    """The converter of a JSON value to a Python value of an SPL type (checking it): a blob
    from base64 text, a decimal from a number or its text, a set from an array, a map's keys
    from their text."""
    return _converter(spl_type, binary=False)


def msgpack_value(spl_type: str) -> Callable[[Any], Any]:
    """`json_value` for a decoded msgpack value: a blob is msgpack's bin (bytes) and a map's
    keys keep their own types (an int64 key is an integer, not its text)."""
    return _converter(spl_type, binary=True)


def _converter(spl_type: str, binary: bool) -> Callable[[Any], Any]:
    t = spl_type.strip()
    if t in _INT_RANGES:
        lo, hi = _INT_RANGES[t]

        def integer(v: Any) -> int:
            if type(v) is not int or not lo <= v <= hi:
                if type(v) is int:
                    raise RecordError(f"{v} is out of the range of {t} [{lo}, {hi}]")
                raise RecordError(f"{v!r} is not a {t}")
            return v

        return integer
    if t in ("float32", "float64"):
        def number(v: Any) -> float:
            if type(v) not in (int, float):
                raise RecordError(f"{v!r} is not a number ({t})")
            return float(v)

        return number
    if t in _DECIMALS:
        def decimal(v: Any) -> Decimal:
            if type(v) not in (int, float, str):
                raise RecordError(f"{v!r} is not a decimal")
            return _decimal(str(v))

        return decimal
    if t == "boolean":
        def boolean(v: Any) -> bool:
            if type(v) is not bool:
                raise RecordError(f"{v!r} is not a boolean")
            return v

        return boolean
    if t in _STRINGS:
        def string(v: Any) -> str:
            if type(v) is not str:
                raise RecordError(f"{v!r} is not a string ({t})")
            return v

        return string
    if t == "blob":
        if binary:
            def binary_blob(v: Any) -> bytes:
                if type(v) is not bytes:
                    raise RecordError(f"{_short(v)} is not binary data (blob)")
                return v

            return binary_blob

        def blob(v: Any) -> bytes:
            if type(v) is not str:
                raise RecordError(f"{v!r} is not base64 text (blob)")
            return _blob(v)

        return blob
    if t == "timestamp":
        def timestamp(v: Any) -> int:
            if type(v) is int:
                return v
            if type(v) is str:
                return parse_timestamp(v)
            raise RecordError(f"{v!r} is not a timestamp (integer ns or ISO-8601 text)")

        return timestamp
    composite = split_composite(t)
    if composite is None:
        raise RecordError(f"unknown type {spl_type!r}")
    kind, args = composite
    if kind in ("list", "set"):
        elem = _converter(args[0], binary)

        def sequence(v: Any) -> Any:
            if type(v) is not list:
                raise RecordError(f"{_short(v)} is not {'an array' if binary else 'a JSON array'} ({t})")
            items = [elem(x) for x in v]
            return items if kind == "list" else set(items)

        return sequence
    # JSON keys are text, parsed as a csv field of the key's type; msgpack keys are typed values
    key = _converter(args[0], binary) if binary else csv_field(args[0])
    value = _converter(args[1], binary)
    what = "map" if binary else "JSON object"

    def mapping(v: Any) -> dict[Any, Any]:
        if type(v) is not dict:
            raise RecordError(f"{_short(v)} is not a {what} ({t})")
        return {key(k): value(x) for k, x in v.items()}

    return mapping


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _defaults(schema: Schema, names: tuple[str, ...],
              default_tuple: Mapping[str, Any] | None) -> dict[str, Any]:
    given = dict(default_tuple or {})
    return {n: given[n] if n in given else type_default(schema.type_of(n) or "rstring") for n in names}


def csv_row_parser(schema: Schema, names: tuple[str, ...], *, default_tuple: Mapping[str, Any] | None,
                   ignore_extra: bool, has_delay: bool
                   ) -> Callable[[list[str]], tuple[float, dict[str, Any]]]:
    """A function turning the fields of a csv record into (delay seconds, tuple).

    ``names`` are the attributes read from the file, in column order (the
    schema's order without those the operator assigns itself).
    """
    fields = [(n, csv_field(schema.type_of(n) or "rstring")) for n in names]
    defaults = _defaults(schema, names, default_tuple)
    width = len(fields) + (1 if has_delay else 0)

    def parse(row: list[str]) -> tuple[float, dict[str, Any]]:
        if len(row) != width and not (ignore_extra and len(row) > width):
            extra = " (delay field first)" if has_delay else ""
            raise RecordError(f"{len(row)} fields, expected {width}{extra}: "
                              + ", ".join(n for n, _ in fields))
        delay = 0.0
        if has_delay:
            delay = _float(row[0])
            if not math.isfinite(delay) or delay < 0:
                raise RecordError(f"delay {row[0]!r}: expected seconds >= 0")
            row = row[1:]
        out: dict[str, Any] = {}
        for (name, parse_field), text in zip(fields, row, strict=False):
            if not text or (parse_field is not str and text.isspace()):
                out[name] = defaults[name]
                continue
            try:
                out[name] = parse_field(text)
            except RecordError as exc:
                raise RecordError(f"attribute {name!r}: {exc}") from None
        return delay, out

    return parse


def json_record_parser(schema: Schema | None, names: tuple[str, ...],
                       default_tuple: Mapping[str, Any] | None) -> Callable[[str], dict[str, Any]]:
    """A function turning one JSON line into a tuple (converted to the schema if there is one)."""
    if schema is None:
        def plain(text: str) -> dict[str, Any]:
            value = _load(text)
            if type(value) is not dict:
                raise RecordError(f"expected a JSON object, got {_short(value)}")
            return value

        return plain
    converters = [(n, json_value(schema.type_of(n) or "rstring")) for n in names]
    known = frozenset(names)
    given = dict(default_tuple or {})

    def typed(text: str) -> dict[str, Any]:
        value = _load(text)
        if type(value) is not dict:
            raise RecordError(f"expected a JSON object, got {_short(value)}")
        out: dict[str, Any] = {}
        for name, convert in converters:
            if name in value:
                try:
                    out[name] = convert(value[name])
                except RecordError as exc:
                    raise RecordError(f"attribute {name!r}: {exc}") from None
            elif name in given:
                out[name] = given[name]
            else:
                raise RecordError(f"attribute {name!r} is missing")
        extra = [k for k in value if k not in known]
        if extra:
            raise RecordError(f"attribute(s) {', '.join(map(repr, extra))} not in the schema")
        return out

    return typed


def _load(text: str) -> Any:
    try:
        return load_json(text)
    except JSONTextError as exc:
        raise RecordError(str(exc)) from None


# --------------------------------------------------------------- writing


def plain_value(value: Any) -> Any:
    """What neither JSON nor msgpack has a type for, as riverbed writes it for its readers to
    take back (`json_value`, `msgpack_value`): a set as a sorted array (unsorted where its items
    do not sort), a decimal as its text; anything else as it is."""
    if isinstance(value, (set, frozenset)):
        try:
            return sorted(value)
        except TypeError:
            return list(value)
    if isinstance(value, Decimal):
        return str(value)
    return value


def _json_default(value: Any) -> Any:
    plain = plain_value(value)
    if plain is not value:
        return plain
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not writable as JSON")


def render_json(value: Any) -> bytes:
    """A value as compact JSON (sets sorted, decimals as text, blobs as base64)."""
    return orjson.dumps(value, default=_json_default, option=orjson.OPT_NON_STR_KEYS)


def render_csv(values: list[Any], separator: str, quote_strings: bool) -> str:
    """One csv record (without the end-of-line marker).

    Strings are quoted when ``quote_strings`` (SPL's default), other values
    only when their text holds the separator, a quote or a line break.
    """
    out: list[str] = []
    for v in values:
        quote = False
        if isinstance(v, str):
            text, quote = v, quote_strings
        elif v is True or v is False:
            text = "true" if v else "false"
        elif isinstance(v, int):
            text = str(v)
        elif isinstance(v, float):
            text = repr(v)
        elif isinstance(v, Decimal):
            text = str(v)
        elif isinstance(v, (bytes, bytearray)):
            text = base64.b64encode(v).decode("ascii")
        elif v is None:
            text = ""
        else:
            text = render_json(v).decode("utf-8")
        if quote or separator in text or '"' in text or "\n" in text or "\r" in text:
            text = '"' + text.replace('"', '""') + '"'
        out.append(text)
    return separator.join(out)
