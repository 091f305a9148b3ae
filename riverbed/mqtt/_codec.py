"""MQTT payloads <-> records: json, msgpack, csv lines, raw bytes or a user function.

One MQTT message costs the Python client ~100-300 µs whatever its size, so a
payload may carry a *batch* of records: a JSON array of objects, a msgpack
array of maps, or several CSV lines. Decoding is per record: a batch with one
bad record yields the good ones plus a `BadRecord` for that one, so one bad
reading never costs the readings next to it.

Decoding parses and converts what the payload cannot carry as the SPL type's
own Python value, as FileSource does for a JSON line (`riverbed.operators.formats`):
in JSON a decimal is text, a blob base64 text, a set an array and a map's keys
text; in msgpack a decimal is text and a set an array; and JSON has no
integer/float distinction, so an int becomes a float where the schema declares
``float32/64``. The sink writes them that way, so what an MQTTSink publishes an
MQTTSource with the same schema reads back equal. The schema check (exact
attributes, SPL types) is done by the source once the topic attributes are
added, with the schema's own validator.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Literal

import msgpack  # type: ignore[import-untyped]  # msgpack ships no type information

from ..graph import Schema
from ..jsonio import load_json
from ..operators.formats import RecordError, json_value, msgpack_value, plain_value, render_json
from ._client import MQTTConfigError

__all__ = ["FORMATS", "BadRecord", "Codec", "Format", "check_format"]

Format = Literal["json", "msgpack", "csv", "raw", "function"]
FORMATS: tuple[Format, ...] = ("json", "msgpack", "csv", "raw", "function")

Decoder = Callable[[bytes], Any]
Encoder = Callable[[list[dict[str, Any]]], bytes]

_INTS = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "timestamp"}
_FLOATS = {"float32", "float64"}
# Types whose JSON and msgpack values are their Python values already: left to the validator.
_AS_IS = _INTS - {"timestamp"} | {"rstring", "ustring", "boolean"}


def check_format(format: object) -> None:
    """Refuse a format that is none of `FORMATS`, naming them."""
    if format not in FORMATS:
        raise MQTTConfigError(f"format={format!r}: expected one of {', '.join(FORMATS)} "
                              "(a function is given with format='function', decode=... / encode=...)")


@dataclass(frozen=True, slots=True)
class BadRecord:
    """Why a payload (``index`` None) or one record of a batch (its ``index``) was refused."""

    reason: str
    index: int | None = None


def _csv_converter(name: str, spl_type: str) -> Callable[[str], Any]:
    t = spl_type.strip()
    if t in _INTS:
        return int
    if t in _FLOATS:
        return float
    if t in ("rstring", "ustring"):
        return str
    if t.startswith("decimal"):
        return Decimal
    if t == "boolean":
        def boolean(s: str) -> bool:
            v = s.strip().lower()
            if v in ("true", "1"):
                return True
            if v in ("false", "0"):
                return False
            raise ValueError(f"{s!r} is not a boolean (true/false)")
        return boolean
    raise MQTTConfigError(f"format='csv': attribute {name!r} of type {spl_type} cannot be carried by a "
                          "csv field; use format='json' or 'msgpack'")


class Codec:
    """Decodes payloads into records and encodes records into payloads for one format.

    ``fields`` are the attributes carried by the payload (the schema's, less
    the topic attributes), in order: csv uses the order; json and msgpack
    keep only these keys when given. ``raw`` carries one ``blob`` attribute.
    """

    def __init__(self, format: Format, fields: Schema | None, *, decode: Decoder | None = None,
                 encode: Encoder | None = None, raw_attribute: str = "payload",
                 separator: str = ",") -> None:
        check_format(format)
        if format == "function" and decode is None and encode is None:
            raise MQTTConfigError("format='function' needs decode=fn(bytes) -> record or list of records "
                                  "(source) or encode=fn(records) -> bytes (sink)")
        if format == "csv" and fields is None:
            raise MQTTConfigError("format='csv' needs a schema: csv fields are matched to attributes "
                                  "by position")
        if format == "raw" and fields is not None:
            raw_type = fields.type_of(raw_attribute)
            if raw_type is None or raw_type.strip() != "blob":
                # (the payload is bytes: an rstring attribute failed at the first tuple or message)
                raise MQTTConfigError(
                    f"format='raw' carries the payload as attribute {raw_attribute!r} of type blob; "
                    + (f"the schema has it as {raw_type}: declare {raw_attribute}='blob'"
                       if raw_type is not None else
                       f"the schema {fields} lacks it: add {raw_attribute}='blob' or name another "
                       "with raw_attribute="))
        self.format = format
        self.fields = fields
        self.raw_attribute = raw_attribute
        self.separator = separator
        self._decode_fn = decode
        self._encode_fn = encode
        self._names = fields.names if fields is not None else None
        attrs = fields.attributes if fields is not None else ()
        self._floats = frozenset(n for n, t in attrs if t.strip() in _FLOATS)
        # attributes whose payload value needs converting (json and msgpack): name -> converter
        convert = {"json": json_value, "msgpack": msgpack_value}.get(format)
        self._converted = ([(n, convert(t)) for n, t in attrs
                            if t.strip() not in _AS_IS and t.strip() not in _FLOATS]
                           if convert is not None else [])
        self._csv = ([_csv_converter(n, t) for n, t in fields.attributes]
                     if format == "csv" and fields is not None else [])

    # ------------------------------------------------------------- decoding

    def decode(self, payload: bytes) -> tuple[list[dict[str, Any]], list[BadRecord]]:
        """The records of ``payload`` and the reasons for the ones refused."""
        fmt = self.format
        if fmt == "raw":
            return [{self.raw_attribute: payload}], []
        if fmt == "csv":
            return self._decode_csv(payload)
        try:
            if fmt == "json":
                value = load_json(payload)
            elif fmt == "msgpack":
                value = msgpack.unpackb(payload, raw=False, strict_map_key=False)
            else:
                assert self._decode_fn is not None
                value = self._decode_fn(payload)
        except Exception as exc:
            return [], [BadRecord(f"undecodable {fmt}: {exc}")]
        items = value if isinstance(value, list) else [value]
        batch = isinstance(value, list)
        good: list[dict[str, Any]] = []
        bad: list[BadRecord] = []
        for i, item in enumerate(items):
            where = i if batch else None
            if not isinstance(item, Mapping):
                bad.append(BadRecord(f"expected an object (map) of attributes, got {type(item).__name__}",
                                     where))
                continue
            rec = self._project(item)
            if isinstance(rec, str):
                bad.append(BadRecord(rec, where))
            else:
                good.append(rec)
        return good, bad

    def _project(self, item: Mapping[Any, Any]) -> dict[str, Any] | str:
        if self._names is None:
            return dict(item)
        missing = [n for n in self._names if n not in item]
        if missing:
            return f"missing attribute(s) {', '.join(missing)}"
        rec = {n: item[n] for n in self._names}
        for n in self._floats:
            if type(rec[n]) is int:
                rec[n] = float(rec[n])
        for n, convert in self._converted:
            try:
                rec[n] = convert(rec[n])
            except RecordError as exc:
                return f"attribute {n!r}: {exc}"
        return rec

    def _decode_csv(self, payload: bytes) -> tuple[list[dict[str, Any]], list[BadRecord]]:
        try:
            text = payload.decode("utf-8")
        except UnicodeDecodeError as exc:
            return [], [BadRecord(f"undecodable csv: {exc}")]
        rows = list(csv.reader(io.StringIO(text), delimiter=self.separator))
        rows = [r for r in rows if r]
        batch = len(rows) > 1
        names = self._names
        assert names is not None
        good: list[dict[str, Any]] = []
        bad: list[BadRecord] = []
        for i, row in enumerate(rows):
            where = i if batch else None
            if len(row) != len(names):
                bad.append(BadRecord(f"csv line has {len(row)} fields, the schema {len(names)}", where))
                continue
            try:
                good.append({n: conv(v) for n, conv, v in zip(names, self._csv, row, strict=True)})
            except (ValueError, InvalidOperation) as exc:
                bad.append(BadRecord(f"csv field: {exc}", where))
        if not rows:
            bad.append(BadRecord("empty csv payload"))
        return good, bad

    # ------------------------------------------------------------- encoding

    def encode(self, records: Sequence[dict[str, Any]], batch: bool) -> bytes:
        """One payload for ``records``: a single record, or (``batch``) an array / several lines."""
        fmt = self.format
        if fmt == "raw":
            return bytes(records[0][self.raw_attribute])
        if fmt == "function":
            if self._encode_fn is None:
                raise MQTTConfigError("format='function' in a sink needs encode=fn(records) -> bytes")
            return self._encode_fn(list(records))
        rows = [{n: r[n] for n in self._names} for r in records] if self._names else list(records)
        if fmt == "csv":
            buf = io.StringIO()
            w = csv.writer(buf, delimiter=self.separator, lineterminator="\n")
            for r in rows:
                w.writerow(["true" if v is True else "false" if v is False else v for v in r.values()])
            return buf.getvalue().encode()
        value: Any = rows if batch else rows[0]
        if fmt == "json":
            return render_json(value)
        return bytes(msgpack.packb(value, use_bin_type=True, default=_msgpack_default))


def _msgpack_default(v: Any) -> Any:
    """What msgpack has no type for, as `render_json` writes it in JSON (blobs are msgpack's own)."""
    plain = plain_value(v)
    if plain is v:
        raise TypeError(f"{type(v).__name__} has no msgpack value")
    return plain
