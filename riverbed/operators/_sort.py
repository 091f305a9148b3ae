"""SPL ``Sort``: order the tuples of a window (standard-operators.md section 3).

Two ways of sorting, chosen by the input port's window:

- **Tumbling** (``count``, ``delta``, ``time`` or ``punct`` eviction, optionally
  partitioned) and **timeInterval** windows sort *batches*: when a window
  partition flushes (a timeInterval pane partition triggers), its tuples go out
  in sorted order, followed by a window mark. A flush of an empty window (a
  mark reaching an empty ``punct()`` window, an empty time tumble) gives just
  the mark.
- **Sliding** ``count(N)`` windows with a ``count(1)`` trigger sort
  *progressively*: the operator keeps each partition's tuples in sorted order,
  and once a partition holds N tuples every arrival first pushes out the
  smallest one (the first in sort order), which is output, and then takes its
  place. A new tuple smaller than everything kept is therefore not output at
  once. No window marks: the output is one ordered stream.

How this maps onto riverbed: the port's window is the SPL window and drives
*when* things happen. For a progressive sort it also decides *how many* tuples
a partition holds, but IBM's C++ window keeps its contents sorted and evicts
the smallest, while riverbed's window evicts the oldest arrival; so the
operator keeps its own sorted copy of each partition beside the window and, on
each EVICTION, outputs the smallest tuple of that copy (whatever tuple the
window itself evicted). That copy is the operator's checkpointed state.

Ordering is lexicographic over the ``sort_by`` keys, each ascending or
descending. IBM sorts batches with ``std::sort``, which leaves equal keys in an
unspecified order; riverbed's sort is stable (equal keys keep their arrival
order), one of the allowed outcomes.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Hashable, Iterable, Sequence
from operator import itemgetter
from typing import Any, ClassVar

from ..graph import Operator, PortLayout, Punct, WindowPunctuationMode
from ..windows import (
    Count,
    EventType,
    PaneEvent,
    StreamWindowEvent,
    TimeIntervalSpec,
    TimeIntervalWindow,
    WindowSpec,
    WindowType,
)
from ._join_parts import _key_in, _key_out, _port_counts
from ._params import OperatorParameterError, spl_aliases
from ._utility_support import attribute_problems, batch_submit, every_event, passthrough_problems

__all__ = ["Sort", "SortStateError"]

INSERTION = EventType.INSERTION
EVICTION = EventType.EVICTION
TRIGGER = EventType.TRIGGER
PARTITION_EVICTION = EventType.PARTITION_EVICTION
EMPTY_WINDOW_PUNCT = EventType.EMPTY_WINDOW_PUNCT

FORMAT = "riverbed.sort/1"
_ORDERS = ("ascending", "descending")

Expression = str | Callable[[Any], Any]


class SortStateError(ValueError):
    """A Sort checkpoint does not fit the operator it is restored into."""


class _Descending:
    """A key that sorts in reverse: lets a descending sort keep an ascending list for bisect."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __lt__(self, other: _Descending) -> bool:
        return bool(other.value < self.value)


class _Mixed:
    """A lexicographic key with a direction per position (``order`` given per ``sort_by`` key)."""

    __slots__ = ("descending", "values")

    def __init__(self, values: tuple[Any, ...], descending: tuple[bool, ...]) -> None:
        self.values = values
        self.descending = descending

    def __lt__(self, other: _Mixed) -> bool:
        for mine, theirs, desc in zip(self.values, other.values, self.descending, strict=True):
            lo, hi = (theirs, mine) if desc else (mine, theirs)
            if lo < hi:
                return True
            if hi < lo:
                return False
        return False


class _Sorted:
    """One partition of a progressive sort: its tuples in sort order, with their keys."""

    __slots__ = ("holes", "keys", "tuples")

    def __init__(self) -> None:
        self.keys: list[Any] = []
        self.tuples: list[Any] = []
        # Tuples the window holds that the copy does not: their key could not be computed or
        # compared (the error went to the error port). Their eviction outputs nothing, so the
        # copy and the window stay the same size. (By identity: the window keeps them alive.)
        self.holes: set[int] | None = None


class Sort(Operator):
    """SPL ``Sort`` of the tuples on its one windowed input port.

    Windows: ``tumbling`` with ``count(N)`` (N >= 1), ``delta``, ``time`` or
    ``punct`` eviction; ``sliding`` with ``count(N)`` eviction and a ``count(1)``
    trigger (progressive sort); either optionally ``partitioned`` (with
    ``partition_by`` on the port: SPL's ``partitionBy``) and with a partition
    eviction policy; and ``timeInterval`` windows (each pane partition
    trigger). Anything else is refused at set-up.

    Parameters (``sortBy`` works too): ``sort_by``, an attribute name, a
    function of the tuple, or a sequence of those (compared lexicographically);
    ``order``: ``"ascending"`` (default) or ``"descending"``, one value for all
    keys or a sequence with one per key. Output tuples are the input tuples.

    Punctuation ("generating"): tumbling and timeInterval windows give one
    window mark after each flushed (triggered) partition's sorted batch, a lone
    mark for an empty flush (one per flush event the window raises: with the
    ``java`` flavor an empty partition the window keeps also tumbles to a lone
    mark; the ``cpp`` flavor raises exactly IBM's C++ events). A progressive
    sort emits no marks. Incoming marks are consumed by a ``punct()`` window
    and otherwise dropped. Final punctuation does not flush tumbling windows;
    a progressive sort outputs everything it still holds, partition by
    partition in sorted order, without a mark, before the runtime forwards
    final. A partition removed by a partition eviction policy is dropped
    without output, as in SPL.
    """

    window_punctuation: ClassVar[WindowPunctuationMode] = "generating"
    # The events it needs depend on the window: `setup` registers its own listeners for exactly
    # those (a tumbling window then builds no INSERTION event per tuple, a progressive sort no
    # TRIGGER), so the host registers none.
    window_events: ClassVar[frozenset[EventType] | None] = frozenset()

    def __init__(self, *, sort_by: Expression | Sequence[Expression] | None = None,
                 order: str | Sequence[str] = "ascending", **spl: Any) -> None:
        for name in spl:
            if name in ("partitionBy", "partition_by"):
                raise OperatorParameterError(
                    "Sort: partitionBy is declared on the input port in riverbed: "
                    "stream.window('tumbling, count(10), partitioned', partition_by=...)")
        for py, value in spl_aliases("Sort", spl, frozenset({"sort_by", "order"})).items():
            if py == "sort_by":
                if sort_by is not None:
                    raise OperatorParameterError("Sort: parameter 'sort_by' given twice")
                sort_by = value
            else:
                order = value
        if sort_by is None:
            raise OperatorParameterError("Sort: sort_by is required: an attribute name, a function "
                                         "of the tuple, or a sequence of those")
        items = list(sort_by) if isinstance(sort_by, (list, tuple)) else [sort_by]
        if not items:
            raise OperatorParameterError("Sort: sort_by needs at least one key")
        getters = [_getter(i) for i in items]
        self._sort_names = [i for i in items if isinstance(i, str)]
        orders = list(order) if isinstance(order, (list, tuple)) else [order]
        if any(o not in _ORDERS for o in orders):
            raise OperatorParameterError(f"Sort: order={order!r}; expected 'ascending' or "
                                         "'descending', or a sequence of them (one per sort_by key)")
        if len(orders) != 1 and len(orders) != len(items):
            raise OperatorParameterError(
                f"Sort: order has {len(orders)} values for {len(items)} sort_by keys; give one "
                "value for all keys or one per key")
        descending = tuple(o == "descending" for o in (orders * len(items) if len(orders) == 1 else orders))
        # `_key` + `_reverse` sort a batch with `sorted`; `_ascending_key` gives keys that sort
        # ascending under `<`, for the progressive sort's bisect.
        self._key: Callable[[Any], Any]
        if len(getters) == 1:
            self._key = getters[0]
        elif all(isinstance(i, str) for i in items):
            self._key = itemgetter(*items)
        else:
            self._key = lambda t: tuple(g(t) for g in getters)
        if all(descending) or not any(descending):
            self._reverse = descending[0]
            plain = self._key
            self._ascending_key: Callable[[Any], Any] = (
                (lambda t: _Descending(plain(t))) if self._reverse else plain)
        else:
            self._reverse = False
            plain, flags = self._key, descending
            self._key = self._ascending_key = lambda t: _Mixed(plain(t), flags)
        self._progressive = False
        self._parts: dict[Hashable, _Sorted] = {}
        self._put: Callable[[Iterable[Any]], None] = self._submit_each
        self._listening: list[Any] = []  # the windows our listeners are registered on

    # ------------------------------------------------------------------ set-up

    def check_ports(self, ports: PortLayout) -> list[str]:
        """One input and one output port, and a window this sort can keep
        (`Operator.check_ports`: at `Graph.freeze`)."""
        problems = _port_problems((len(ports.windows), ports.outputs),
                                  ports.windows[0] if ports.windows else None)
        return (problems + attribute_problems([("sort_by", n) for n in self._sort_names],
                                              ports.input_schema())
                + passthrough_problems(ports))

    def setup(self) -> None:
        try:
            window = self.context.window(0)
        except ValueError:
            window = None
        spec = None if window is None else window.spec
        problems = _port_problems(_port_counts(self.context), spec)
        if problems:  # (a frozen graph has none: `check_ports`; a host without one may)
            raise OperatorParameterError(f"Sort {self.context.name!r}: {problems[0]}")
        self._parts.clear()  # in place: the INSERTION listener holds it
        self._put = batch_submit(self, 0)
        self._progressive = isinstance(spec, WindowSpec) and spec.type is WindowType.SLIDING
        self._listen(window)

    def _listen(self, window: Any) -> None:
        """Register the handlers this window's sort needs, for only the events it needs (once:
        a second set-up of the same window registers nothing). A subclass overriding
        `on_window_event` gets every event the window raises there instead, as from a host."""
        if any(window is w for w in self._listening):
            return
        self._listening.append(window)
        if type(self).on_window_event is not Sort.on_window_event:
            on_event = self.on_window_event
            window.register_listener(lambda event: on_event(event, 0), every_event(window))
        elif isinstance(window, TimeIntervalWindow):
            window.register_listener(self._on_pane, (TRIGGER,))
        elif not self._progressive:
            window.register_listener(self._on_flush, (EVICTION, EMPTY_WINDOW_PUNCT))
        else:
            window.register_listener(self._insertion_listener(), (INSERTION,))
            window.register_listener(self._on_progressive_eviction, (EVICTION, PARTITION_EVICTION))

    def _submit_each(self, tuples: Iterable[Any]) -> None:
        for t in tuples:
            self.submit(t)

    # ---------------------------------------------------------------- events

    def on_window_event(self, event: StreamWindowEvent[Any], port: int) -> None:
        """Every event of the window, for a subclass that overrides this (`Sort` itself
        listens to the window with the handlers below, for only the events it needs)."""
        etype = event.type
        if self._progressive:
            if etype is INSERTION:
                self._insert(event.partition, event.tuples[0])
            elif etype is EVICTION or etype is PARTITION_EVICTION:
                self._on_progressive_eviction(event)
            return
        if isinstance(event, PaneEvent):
            self._on_pane(event)
        else:
            self._on_flush(event)

    def _on_pane(self, event: StreamWindowEvent[Any]) -> None:
        if event.type is TRIGGER:
            self._batch(event.tuples)

    def _on_flush(self, event: StreamWindowEvent[Any]) -> None:
        etype = event.type
        if etype is EVICTION:
            self._batch(event.tuples)
        elif etype is EMPTY_WINDOW_PUNCT:
            self.submit_punct(Punct.WINDOW, 0)

    def _on_progressive_eviction(self, event: StreamWindowEvent[Any]) -> None:
        """One tuple out of the sorted copy per tuple the window evicted: the smallest."""
        if event.type is PARTITION_EVICTION:
            self._parts.pop(event.partition, None)
            return
        part = self._parts.get(event.partition)
        if part is None:
            return
        keys, tuples, submit, holes = part.keys, part.tuples, self.submit, part.holes
        for t in event.tuples:
            if holes and id(t) in holes:
                holes.discard(id(t))
                continue
            if not tuples:
                break
            del keys[0]
            submit(tuples.pop(0))

    def _insertion_listener(self) -> Callable[[StreamWindowEvent[Any]], None]:
        """`_insert` as the INSERTION listener: one call per arrival."""
        parts, ascending_key = self._parts, self._ascending_key

        def on_insertion(event: StreamWindowEvent[Any]) -> None:
            key = event.partition
            part = parts.get(key)
            if part is None:
                part = parts[key] = _Sorted()
            t = event.tuples[0]
            try:
                k = ascending_key(t)
                i = bisect_right(part.keys, k)  # after equal keys: arrival order among equals
            except Exception:
                if part.holes is None:
                    part.holes = set()
                part.holes.add(id(t))  # (see `_Sorted`), and the tuple goes to the error port
                raise
            part.keys.insert(i, k)
            part.tuples.insert(i, t)

        return on_insertion

    def on_punct(self, punct: Punct, port: int) -> None:
        """Final: a progressive sort outputs what it holds, in sorted order, without a mark."""
        if punct is Punct.FINAL and self._progressive:
            parts = dict(self._parts)
            self._parts.clear()  # in place: the INSERTION listener holds it
            submit = self.submit
            for part in parts.values():
                for t in part.tuples:
                    submit(t)

    def _batch(self, tuples: Sequence[Any]) -> None:
        self._put(sorted(tuples, key=self._key, reverse=self._reverse))
        self.submit_punct(Punct.WINDOW, 0)

    def _insert(self, key: Hashable, t: Any) -> None:
        part = self._parts.get(key)
        if part is None:
            part = self._parts[key] = _Sorted()
        k = self._ascending_key(t)
        i = bisect_right(part.keys, k)  # after equal keys: arrival order among equals
        part.keys.insert(i, k)
        part.tuples.insert(i, t)

    # ----------------------------------------------------------- checkpoints

    def snapshot(self) -> dict[str, Any]:
        """A progressive sort's kept tuples per partition, in sort order (the window's own
        checkpoint holds the same number of tuples, not the same ones). Batch sorts keep
        nothing beyond their window."""
        return {"format": FORMAT,
                "partitions": [[_key_out(k), list(p.tuples)] for k, p in self._parts.items()]}

    def restore(self, state: Any) -> None:
        if not isinstance(state, dict) or state.get("format") != FORMAT:
            raise SortStateError(f"Sort: not a Sort checkpoint (format {FORMAT!r} expected): "
                                 f"{str(state)[:80]}")
        parts = state.get("partitions")
        if not isinstance(parts, list):
            raise SortStateError("Sort: the checkpoint's 'partitions' must be a list")
        self._parts.clear()
        for item in parts:
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[1], list)):
                raise SortStateError(f"Sort: bad partition entry {str(item)[:80]} in the checkpoint")
            key = _key_in(item[0])
            for t in item[1]:
                self._insert(key, t)

    def reset_to_initial_state(self) -> None:
        self._parts.clear()


def _getter(expr: Any) -> Callable[[Any], Any]:
    if isinstance(expr, str):
        return itemgetter(expr)
    if callable(expr):
        return expr  # type: ignore[no-any-return]
    raise OperatorParameterError(f"Sort: sort_by item {expr!r} must be an attribute name or a function "
                                 "of the tuple")


_ALLOWED = ("tumbling with count(N >= 1), delta, time or punct eviction; sliding with count(N >= 1) "
            "eviction and a count(1) trigger; timeInterval; each optionally partitioned")


def _port_problems(counts: tuple[int, int] | None,
                   spec: WindowSpec | TimeIntervalSpec | None) -> list[str]:
    """What keeps a Sort from running on these ports (``counts``: inputs and data outputs,
    when known): the rules of `Sort.check_ports` and `Sort.setup`."""
    problems: list[str] = []
    if counts is not None and counts != (1, 1):
        problems.append(f"has one input and one output port, the graph gives it {counts[0]} and "
                        f"{counts[1]}")
    if spec is None:
        return [*problems, f"the input port needs a window; allowed: {_ALLOWED}"]
    if isinstance(spec, TimeIntervalSpec):
        return problems
    clause = spec.clause()
    ev, tr = spec.eviction, spec.trigger
    if isinstance(ev, Count) and ev.size < 1:
        problems.append(f"window '{clause}' keeps no tuple to sort; allowed: {_ALLOWED}")
    elif spec.type is WindowType.TUMBLING:
        pass  # every tumbling eviction sorts
    elif not isinstance(ev, Count) or not (isinstance(tr, Count) and tr.size == 1):
        problems.append(f"sliding window '{clause}': a progressive sort needs count(N) eviction "
                        f"and a count(1) trigger; allowed: {_ALLOWED}")
    return problems
