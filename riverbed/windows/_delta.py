"""Delta arithmetic: reading a delta attribute and comparing two values.

SPL compares in the attribute's own type, and IBM's two runtimes phrase the
comparison differently: C++ asks ``new - old > D``, Java asks whether
``old >= new - D`` fails. For integers, timestamps (integer nanoseconds) and
decimals both are exact and agree; for floats a decimal tie can round either
way (``0.8`` then ``1.1`` with ``D = 0.3``), so the phrasing is a flavor
strategy. ``float32`` values are rounded to single precision at each step, as
the reference does for SPL ``float32``.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from decimal import Decimal
from typing import Any, NamedTuple

from ._errors import WindowTupleError
from ._policy import Delta, seconds_to_ns

__all__ = [
    "MISSING", "SAFE_INT_MAX", "SAFE_INT_MIN", "DeltaKind", "DeltaReader", "delta_kind_for_type",
    "make_delta_reader", "make_reader", "out_of_delta_cpp", "out_of_delta_java",
]

# Delta attribute kinds: how values are read and the delta bound converted.
DeltaKind = str  # "number" | "int" | "float" | "float32" | "timestamp" | "decimal"

_SPL_KINDS = {
    **dict.fromkeys(("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"), "int"),
    "float64": "float",
    "float32": "float32",
    "timestamp": "timestamp",
    **dict.fromkeys(("decimal32", "decimal64", "decimal128"), "decimal"),
}


def delta_kind_for_type(spl_type: str | None) -> DeltaKind:
    """Map an SPL attribute type to a delta kind; None means "as given" (int or float)."""
    if spl_type is None:
        return "number"
    try:
        return _SPL_KINDS[spl_type]
    except KeyError:
        raise WindowTupleError(
            f"a delta policy needs a numeric or timestamp attribute; type {spl_type!r} is not one "
            f"(valid: {', '.join(sorted(_SPL_KINDS))})") from None


def _f32(x: float) -> float:
    return float(struct.unpack("f", struct.pack("f", x))[0])


def bound_for(policy: Delta, kind: DeltaKind) -> Any:
    """The delta bound D in the attribute's arithmetic."""
    if kind == "timestamp":
        return seconds_to_ns(policy.delta)
    if kind == "float32":
        return _f32(float(policy.delta))
    if kind == "float":
        return float(policy.delta)
    if kind == "decimal":
        return Decimal(repr(policy.delta))
    return policy.delta


# Ints strictly between these surely convert to float: the NaN check cannot overflow on them.
SAFE_INT_MIN = -(2**1023)
SAFE_INT_MAX = 2**1023

# The exceptions of an attribute getter that mean "the tuple has no such attribute".
MISSING = (KeyError, AttributeError, IndexError, TypeError)


class DeltaReader(NamedTuple):
    """A validated delta attribute reader, also in parts for callers that inline its fast lane.

    ``read(t)`` is the whole read. It is equivalent to: ``v = get(t)`` (an
    exception in `MISSING` means ``raise missing(t)``); then ``v`` itself when
    it is an exact ``float`` with ``v - v == 0.0`` (finite) and
    ``exact_float``, or an exact ``int`` with ``SAFE_INT_MIN < v < SAFE_INT_MAX``
    and ``exact_int``; else ``check(t, v)``, the complete validation and
    conversion, which raises `WindowTupleError` for a bad value.
    """

    read: Callable[[Any], Any]
    get: Callable[[Any], Any]
    missing: Callable[[Any], WindowTupleError]
    check: Callable[[Any, Any], Any]
    exact_int: bool
    exact_float: bool


def make_delta_reader(policy: Delta, kind: DeltaKind, role: str,
                      getter: Callable[[Any], Any]) -> DeltaReader:
    """The reader of a delta policy's attribute (see `make_reader`), with its parts."""
    attr = policy.attribute
    where = f"{role} policy delta({attr}, {policy.delta!r})"
    # Which values the kind takes as they are (the rest go through `_check_value`).
    exact_int = kind in ("number", "int", "timestamp", "decimal")
    exact_float = kind in ("number", "float")

    def missing(t: Any) -> WindowTupleError:
        return WindowTupleError(f"{where}: the tuple has no attribute {attr!r}; tuple: {t!r}")

    def check(t: Any, v: Any) -> Any:
        return _check_value(kind, where, t, v)

    def read(t: Any) -> Any:
        try:
            v = getter(t)
        except MISSING:
            raise missing(t) from None
        cls = v.__class__
        if cls is float:
            if exact_float and v - v == 0.0:  # finite: NaN and inf give NaN
                return v
        elif cls is int and exact_int and SAFE_INT_MIN < v < SAFE_INT_MAX:
            return v
        return check(t, v)

    return DeltaReader(read, getter, missing, check, exact_int, exact_float)


def make_reader(policy: Delta, kind: DeltaKind, role: str,
                getter: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A function reading the delta attribute of a tuple, validated.

    It raises `WindowTupleError` (and changes nothing) for a missing
    attribute, a value of the wrong type, or NaN.

    The common values (an exact ``int``, a finite exact ``float``, whichever
    the kind takes as is) are accepted by a type identity test and one
    arithmetic check; anything else goes through the complete validation,
    so the errors and conversions are those of `_check_value`.
    """
    return make_delta_reader(policy, kind, role, getter).read


def _check_value(kind: DeltaKind, where: str, t: Any, v: Any) -> Any:
    """Validate a delta attribute's value ``v`` of tuple ``t`` and convert it to the kind."""

    def fail(why: str) -> WindowTupleError:
        return WindowTupleError(f"{where}: {why}; tuple: {t!r}")

    if kind == "timestamp":
        if isinstance(v, bool) or not isinstance(v, int):
            raise fail(f"a timestamp attribute must be integer nanoseconds, got {v!r}")
        return v
    if kind == "decimal":
        if isinstance(v, bool) or not isinstance(v, (Decimal, int)):
            raise fail(f"a decimal attribute must be a Decimal, got {v!r}")
        if isinstance(v, Decimal) and not v.is_finite():
            raise fail(f"the value must be finite, got {v!r}")
        return v
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise fail(f"the value must be a number, got {type(v).__name__} {v!r}")
    if kind == "int":
        if not isinstance(v, int):
            raise fail(f"an integer attribute must hold an int, got {v!r}")
        return v
    if math.isnan(v):
        raise fail("the value is NaN, which has no order")
    if isinstance(v, float) and math.isinf(v):
        raise fail(f"the value must be finite, got {v!r}")
    if kind == "float32":
        return _f32(float(v))
    if kind == "float":
        return float(v)
    return v


def out_of_delta_cpp(new: Any, old: Any, bound: Any) -> bool:
    """C++ phrasing: the new value exceeds the old one by more than the bound."""
    return bool(new - old > bound)


def out_of_delta_java(new: Any, old: Any, bound: Any) -> bool:
    """Java phrasing: ``old >= new - bound`` does not hold (and new is not smaller)."""
    return bool(new >= old and not old >= new - bound)


def out_of_delta_cpp_f32(new: float, old: float, bound: float) -> bool:
    return _f32(new - old) > bound


def out_of_delta_java_f32(new: float, old: float, bound: float) -> bool:
    return new >= old and not old >= _f32(new - bound)
