"""Stream schemas: attribute names with SPL-like types, checked where tuples enter a stream.

A schema is optional on every stream. Where one is declared, each tuple
submitted to the stream must be a dict holding exactly those attributes with
values of those types; the check runs once per tuple at the submitting port,
so downstream operators can rely on it. The types also decide what the
window engine does with an attribute (delta arithmetic on ``int64`` vs
``float64`` vs ``timestamp``) and, later, the Spark columns.

Python representations: integers are ``int`` (range-checked for the sized
types), floats ``float`` (an ``int`` is accepted where a float is declared,
as SPL literals would be), ``rstring`` is ``str``, ``blob`` is ``bytes``,
``boolean`` is ``bool``, ``timestamp`` is integer nanoseconds since the
epoch, ``decimal64/128`` are `decimal.Decimal`, ``list<T>`` a list,
``map<K,V>`` a dict, ``set<T>`` a set.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from ._errors import SchemaError
from ._punct import Watermark

__all__ = ["SPL_TYPES", "Schema", "split_composite"]

_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1), "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1),
    "uint8": (0, 2**8 - 1), "uint16": (0, 2**16 - 1), "uint32": (0, 2**32 - 1),
    "uint64": (0, 2**64 - 1),
}
_SCALARS = {
    **dict.fromkeys(_INT_RANGES, int),
    "float32": float, "float64": float,
    "decimal32": Decimal, "decimal64": Decimal, "decimal128": Decimal,
    "boolean": bool, "rstring": str, "ustring": str, "blob": bytes, "timestamp": int,
}
SPL_TYPES = (*_SCALARS, "list<T>", "set<T>", "map<K,V>")
_COMPOSITE = re.compile(r"^(list|set|map)<(.+)>$")


def split_composite(spl_type: str) -> tuple[str, list[str]] | None:
    """``list<T>``, ``set<T>``, ``map<K,V>`` as (kind, argument types); None for any other text.

    Arguments may nest (``map<rstring,list<int64>>``): only top-level commas split.
    """
    m = _COMPOSITE.match(spl_type)
    if m is None:
        return None
    inner = m.group(2)
    depth, start, args = 0, 0, []
    for i, ch in enumerate(inner):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "," and depth == 0:
            args.append(inner[start:i].strip())
            start = i + 1
    args.append(inner[start:].strip())
    return m.group(1), args


def _checker(spl_type: str) -> Callable[[Any], bool]:
    """A predicate telling whether a Python value is a valid value of the SPL type."""
    t = spl_type.strip()
    if t in _INT_RANGES:
        lo, hi = _INT_RANGES[t]
        return lambda v: type(v) is int and lo <= v <= hi
    if t == "timestamp":
        return lambda v: type(v) is int
    if t in ("float32", "float64"):
        return lambda v: type(v) is float or type(v) is int
    if t in _SCALARS:
        py = _SCALARS[t]
        return lambda v: type(v) is py
    composite = split_composite(t)
    if composite is None:
        raise SchemaError(f"unknown type {spl_type!r}; expected one of {', '.join(SPL_TYPES)} "
                          "(for example list<float64> or map<rstring,int64>)")
    kind, args = composite
    if kind in ("list", "set"):
        if len(args) != 1:
            raise SchemaError(f"{spl_type!r}: {kind}<T> takes one element type")
        elem = _checker(args[0])
        py_type: type[Any] = list if kind == "list" else set
        return lambda v: type(v) is py_type and all(elem(x) for x in v)
    if len(args) != 2:
        raise SchemaError(f"{spl_type!r}: map<K,V> takes a key type and a value type")
    key, value = _checker(args[0]), _checker(args[1])
    return lambda v: type(v) is dict and all(key(k) and value(x) for k, x in v.items())


def _inline_check(expr: str, spl_type: str, env: dict[str, Any], index: int) -> str:
    """A Python expression testing one attribute (names in ``env`` for composite types)."""
    if spl_type in _INT_RANGES:
        # In range as the shift of its value bits away leaves only the sign: 0 or -1 (signed),
        # 0 (unsigned). Comparing against 64-bit constants costs twice as much: CPython 3.11
        # specialises int comparisons only for values of one 30-bit digit.
        lo, hi = _INT_RANGES[spl_type]
        bits = hi.bit_length()
        in_range = f"v{index} >> {bits} in _sign" if lo < 0 else f"not v{index} >> {bits}"
        return f"(type(v{index} := {expr}) is int and {in_range})"
    if spl_type == "timestamp":
        return f"type({expr}) is int"
    if spl_type in ("float32", "float64"):
        return f"type({expr}) in _number"
    if spl_type in _SCALARS:
        return f"type({expr}) is {_SCALARS[spl_type].__name__}"
    env[f"check{index}"] = _checker(spl_type)
    return f"check{index}({expr})"


def _locals(env: dict[str, Any]) -> str:
    """Default arguments binding every name a generated check uses: locals are read by index,
    globals and builtins by a dict lookup each (a fifth of the check's time)."""
    return ", ".join(f"{name}={name}" for name in env)


@dataclass(frozen=True, slots=True)
class Schema:
    """The attributes of a stream's tuples, in order: ``Schema(sensor="rstring", temp="float64")``.

    Build it from keyword arguments or from a mapping (``Schema.of({...})``).
    """

    attributes: tuple[tuple[str, str], ...]

    def __init__(self, attributes: Mapping[str, str] | None = None, /, **types: str) -> None:
        items = dict(attributes or {})
        items.update(types)
        if not items:
            raise SchemaError("a schema needs at least one attribute")
        for name, spl_type in items.items():
            if not isinstance(name, str) or not name.isidentifier():
                raise SchemaError(f"attribute name {name!r} is not an identifier")
            if not isinstance(spl_type, str):
                raise SchemaError(f"attribute {name!r}: the type must be an SPL type name, "
                                  f"got {spl_type!r}")
            try:
                _checker(spl_type)
            except SchemaError as exc:
                raise SchemaError(f"attribute {name!r}: {exc}") from None
        object.__setattr__(self, "attributes", tuple(items.items()))

    @classmethod
    def of(cls, attributes: Mapping[str, str]) -> Schema:
        return cls(attributes)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.attributes)

    def type_of(self, name: str) -> str | None:
        for attr, spl_type in self.attributes:
            if attr == name:
                return spl_type
        return None

    def as_dict(self) -> dict[str, str]:
        return dict(self.attributes)

    def validator(self) -> Callable[[Any], str | None]:
        """A function returning None for a valid tuple, else what is wrong with it.

        It runs once per submitted tuple, so the common case is one generated
        expression over the attributes (scalar checks inlined); only a tuple
        that fails it goes through the slower check that says what is wrong.
        """
        explain = self._explainer()
        terms, env = self._terms()
        code = (f"def fast(t, {_locals(env)}):\n    try:\n        return {' and '.join(terms)}\n"
                "    except KeyError:\n        return False\n")
        exec(code, env)  # generated from validated type names only
        fast: Callable[[Any], bool] = env["fast"]

        def check(tup: Any) -> str | None:
            return None if fast(tup) else explain(tup)

        check.fast = fast  # type: ignore[attr-defined]  # hosts call it directly on the hot path
        return check

    def batch_checker(self) -> Callable[[list[Any]], int]:
        """A function returning the index of the first invalid tuple of a list, or -1.

        One generated loop over the batch: what a host runs once per batch
        instead of a check call per tuple. `validator` says what is wrong.
        """
        terms, env = self._terms()
        # No running index: a counter costs four bytecodes a tuple, and the failing tuple's
        # index is found by identity once, after the loop (an earlier occurrence of the same
        # object would have failed first).
        code = (f"def first_invalid(batch, {_locals(env)}):\n    try:\n        for t in batch:\n"
                f"            if not ({' and '.join(terms)}):\n                break\n"
                "        else:\n            return -1\n    except KeyError:\n        pass\n"
                "    for i, x in enumerate(batch):\n        if x is t:\n            break\n"
                "    return i\n")
        exec(code, env)  # generated from validated type names only
        first_invalid: Callable[[list[Any]], int] = env["first_invalid"]
        return first_invalid

    def _terms(self) -> tuple[list[str], dict[str, Any]]:
        """The generated check's terms, and the names they use (the builtins among them too)."""
        terms = ["type(t) is dict", f"len(t) == {len(self.attributes)}"]
        env: dict[str, Any] = {"Decimal": Decimal, "type": type, "len": len, "dict": dict, "int": int,
                               "float": float, "bool": bool, "str": str, "bytes": bytes,
                               "_number": (float, int), "_sign": (0, -1),
                               "enumerate": enumerate}
        for i, (name, spl_type) in enumerate(self.attributes):
            terms.append(_inline_check(f"t[{name!r}]", spl_type.strip(), env, i))
        return terms, env

    def _explainer(self) -> Callable[[Any], str | None]:
        checks = [(name, spl_type, _checker(spl_type)) for name, spl_type in self.attributes]
        names = frozenset(self.names)
        count = len(names)

        def why_invalid(tup: Any) -> str | None:
            if type(tup) is not dict:
                hint = ("; a source sets a manual watermark with context.set_watermark(value), it "
                        "does not submit one" if type(tup) is Watermark else "")
                return f"expected a dict tuple, got {type(tup).__name__}{hint}"
            for name, spl_type, ok in checks:
                if name not in tup:
                    return f"attribute {name!r} ({spl_type}) is missing"
                if not ok(tup[name]):
                    return f"attribute {name!r} = {tup[name]!r} is not a valid {spl_type}"
            if len(tup) != count:
                extra = sorted(k for k in tup if k not in names)
                return f"attribute{'s' if len(extra) > 1 else ''} {', '.join(map(repr, extra))} " \
                       "not in the schema"
            return None

        return why_invalid

    def __str__(self) -> str:
        return "tuple<" + ", ".join(f"{t} {n}" for n, t in self.attributes) + ">"
