"""Join's parts that are not the join itself: one port's share of the join state (`_Side`) and
the checks and compilers its parameters go through."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Mapping
from operator import itemgetter
from typing import Any

from ..windows import (
    Count,
    Delta,
    StreamWindow,
    Time,
    TimeIntervalSpec,
    WindowSpec,
    WindowType,
    decode_partition_key,
    encode_partition_key,
)
from ._params import OperatorParameterError

Entry = list[Any]  # [tuple, matched]: a two-slot list, the cheapest mutable pair in CPython


class _Side:
    """One input port's share of the join: its window (None: lookup side) and its mirror.

    Partitions are visited in one order per side: the order in which the operator
    first saw them (a partition leaves it when the window drops it). The snapshot
    keeps that order, so a restored join matches in the same order as before.
    """

    __slots__ = ("drop_empty", "evicts_on_arrival", "fifo", "index", "key_of", "next_rank", "order",
                 "outer", "partitioned", "parts", "pending", "port", "unmatched_port", "window")

    def __init__(self, port: int) -> None:
        self.port = port
        self.window: StreamWindow[Any] | None = None
        self.partitioned = False
        self.outer = False  # unmatched tuples of this side are output on eviction
        self.evicts_on_arrival = True  # count/delta eviction (False: time eviction)
        self.drop_empty = False  # the window drops a partition that time eviction emptied (cpp)
        self.key_of: Callable[[Any], Hashable] | None = None
        self.unmatched_port = 0  # port of unmatched tuples sent unchanged (0: joined with a default)
        # Without equality keys: partition -> entries in arrival order (dict order = partition order).
        self.parts: dict[Hashable, deque[Entry]] = {}
        # With equality keys: key -> entries (unpartitioned) or key -> {partition -> entries};
        # partitioned, ``order`` gives each partition its [rank, number of tuples].
        self.index: dict[Hashable, Any] = {}
        self.order: dict[Hashable, list[int]] = {}
        self.next_rank = 0
        # A side whose arrivals evict from the mirror themselves (`_join_fast`): its entries in
        # arrival order, each [tuple, matched, key]; None for the others.
        self.fifo: deque[Entry] | None = None
        # After a restore, until the mirror is rebuilt: partition -> match flags, oldest first.
        self.pending: dict[Hashable, deque[bool]] | None = None

    def clear(self) -> None:
        """Forget every tuple (in place: compiled handlers hold these containers)."""
        self.parts.clear()
        self.index.clear()
        self.order.clear()
        self.next_rank = 0
        self.pending = None
        if self.fifo is not None:
            self.fifo.clear()

    def partition_order(self) -> list[Hashable]:
        if not self.partitioned:
            return [None]
        return list(self.parts if self.key_of is None else self.order)


def window_problem(port: int, spec: WindowSpec | TimeIntervalSpec | None) -> str | None:
    """What keeps input port ``port``'s window from being joined (None: nothing; a plain port
    is SPL's count(0) lookup side)."""
    if spec is None:
        return None
    where = f"input port {port} ({'left' if port == 0 else 'right'})"
    allowed = ("sliding windows with count(N >= 1), delta(attr, D) or time(T) eviction and a "
               "count(1) trigger, optionally partitioned; or no window for SPL's count(0) lookup side")
    if isinstance(spec, TimeIntervalSpec):
        return f"{where}: a timeInterval window cannot be joined; allowed: {allowed}"
    clause = spec.clause()
    if spec.type is not WindowType.SLIDING:
        return f"{where}: window '{clause}' is not sliding; allowed: {allowed}"
    ev = spec.eviction
    if isinstance(ev, Count) and ev.size == 0:
        return (f"{where}: window '{clause}' keeps no tuple and hands none to the operator; for "
                "SPL's count(0) lookup side connect the stream without a window")
    if not isinstance(ev, (Count, Delta, Time)):
        return f"{where}: window '{clause}' has an unsupported eviction; allowed: {allowed}"
    tr = spec.trigger
    if not (isinstance(tr, Count) and tr.size == 1):
        return (f"{where}: window '{clause}': Join needs a count(1) trigger (every arrival "
                "joins); drop the trigger or write count(1)")
    return None


def _port_counts(context: Any) -> tuple[int, int] | None:
    """(input ports, data output ports) when the host exposes its operator definition."""
    odef = getattr(context, "odef", None)
    inputs, outputs = getattr(odef, "inputs", None), getattr(odef, "outputs", None)
    if inputs is None or outputs is None:
        return None
    error_port = getattr(odef, "error_port", None)
    return len(inputs), len(outputs) - (0 if error_port is None else 1)


def _getter(what: str, expr: Any) -> Callable[[Any], Any]:
    if isinstance(expr, str):
        return itemgetter(expr)
    if callable(expr):
        return expr  # type: ignore[no-any-return]
    raise OperatorParameterError(
        f"Join: {what} item {expr!r} must be an attribute name or a function of the tuple")


def _equality(lhs: Any, rhs: Any) -> tuple[Callable[[Any], Hashable], Callable[[Any], Hashable]] | None:
    if lhs is None and rhs is None:
        return None
    if lhs is None or rhs is None:
        raise OperatorParameterError("Join: equality_lhs and equality_rhs go together; give both "
                                     "(the same number of keys on each side)")
    lhs_items = list(lhs) if isinstance(lhs, (list, tuple)) else [lhs]
    rhs_items = list(rhs) if isinstance(rhs, (list, tuple)) else [rhs]
    if not lhs_items or len(lhs_items) != len(rhs_items):
        raise OperatorParameterError(
            f"Join: equality_lhs has {len(lhs_items)} key(s), equality_rhs {len(rhs_items)}; "
            "they must have the same number (>= 1)")
    return (_key_function("equality_lhs", lhs_items), _key_function("equality_rhs", rhs_items))


def _key_attribute(expr: Any) -> str | None:
    """The attribute name when an equality key is one attribute (``"k"`` or ``["k"]``): a
    compiled handler reads it with a subscript instead of calling the key function."""
    if isinstance(expr, (list, tuple)) and len(expr) == 1:
        expr = expr[0]
    return expr if isinstance(expr, str) else None


def _key_function(what: str, items: list[Any]) -> Callable[[Any], Hashable]:
    if len(items) == 1:
        return _getter(what, items[0])
    if all(isinstance(i, str) for i in items):
        return itemgetter(*items)  # a tuple of the values
    getters = [_getter(what, i) for i in items]
    return lambda t: tuple(g(t) for g in getters)


def _merge(lhs: Any, rhs: Any) -> dict[str, Any]:
    # The left tuple's attributes first, then the right's it lacks; the left's values win a
    # name clash. (``{**rhs, **lhs}`` is 50 ns a pair cheaper but puts the right's first: a
    # schema-less csv FileSink wrote the right port's columns before the left's.)
    return {**lhs, **rhs, **lhs}


def _output_function(output: Any) -> Callable[[Any, Any], Any]:
    if output is None:
        return _merge
    if isinstance(output, Mapping):
        computed = [(k, v) for k, v in output.items() if callable(v)]
        constants = {k: v for k, v in output.items() if not callable(v)}

        def assign(lhs: Any, rhs: Any) -> dict[str, Any]:
            out = _merge(lhs, rhs)
            for attr, fn in computed:
                out[attr] = fn(lhs, rhs)
            if constants:
                out.update(constants)
            return out

        return assign
    if callable(output):
        return output  # type: ignore[no-any-return]
    raise OperatorParameterError(f"Join: output={output!r}: expected None, a mapping of attribute "
                                 "assignments or a function (lhs, rhs) -> tuple")


# The windows' partition-key codec (`_join` and `_sort` import these names from here).
_key_out = encode_partition_key
_key_in = decode_partition_key
