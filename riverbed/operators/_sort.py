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
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from itertools import chain, pairwise
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
from ._utility_support import (
    attribute_problems,
    batch_submit,
    every_event,
    name_failure,
    passthrough_problems,
)

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


_LOAD = 512  # keys a block holds before it splits in two: an insert or a pop moves at most this many


class _Sorted:
    """One partition of a progressive sort: its tuples in sort order, with their keys.

    In blocks, each sorted and every key of one no greater than the next block's first:
    an arrival finds its block by bisecting the blocks' last keys (``maxes``), then its place
    in the block, and moves at most `_LOAD` pointers; the smallest tuple leaves the front of
    the first block. One flat list moved the whole window at each step (``del keys[0]``,
    ``list.insert``): a count(100000) window sorted 18x slower than a count(1000) one. The
    places are those of one flat list's ``bisect_right``: after equal keys, so arrival order
    among equals.

    ``holes`` are tuples the window holds that the copy does not: their key could not be
    computed or compared (the error went to the error port). Their eviction outputs nothing,
    so the copy and the window stay the same size. The window evicts the oldest first
    (count eviction), so a hole is known by the eviction that takes it: ``out`` counts the
    evictions seen while holes are pending, and each hole is the value ``out`` has when it
    leaves (by position, not identity: that survives a checkpoint, where the restored window
    holds new objects, and one object arriving twice)."""

    __slots__ = ("holes", "keys", "maxes", "out", "tuples")

    def __init__(self) -> None:
        self.keys: list[list[Any]] = []
        self.tuples: list[list[Any]] = []
        self.maxes: list[Any] = []  # each block's last key
        self.holes: deque[int] | None = None
        self.out = 0

    def insert(self, k: Any, t: Any) -> None:
        """Put ``t`` (key ``k``) after every key not above ``k``. A key that cannot be compared
        raises before anything changes. (`Sort._insertion_listener` has it inlined.)"""
        maxes = self.maxes
        b = bisect_right(maxes, k)
        if b == len(maxes):  # no block ends above k: the end of the last one
            self.append(k, t)
            return
        keys = self.keys[b]
        i = bisect_right(keys, k)
        keys.insert(i, k)
        self.tuples[b].insert(i, t)
        if len(keys) > _LOAD:
            self.split(b)

    def append(self, k: Any, t: Any) -> None:
        """Put ``t`` last: ``k`` is not below any key kept."""
        maxes = self.maxes
        if not maxes:
            self.keys.append([k])
            self.tuples.append([t])
            maxes.append(k)
            return
        keys = self.keys[-1]
        keys.append(k)
        self.tuples[-1].append(t)
        maxes[-1] = k
        if len(keys) > _LOAD:
            self.split(len(maxes) - 1)

    def split(self, b: int) -> None:
        """Cut block ``b``, grown past `_LOAD`, in two."""
        keys, tuples = self.keys[b], self.tuples[b]
        half = len(keys) >> 1
        self.keys.insert(b + 1, keys[half:])
        self.tuples.insert(b + 1, tuples[half:])
        del keys[half:], tuples[half:]
        self.maxes.insert(b, keys[-1])

    def pop_smallest(self) -> Any:
        """The first tuple in sort order, taken out (the copy is not empty). (Inlined in
        `Sort._on_progressive_eviction`.)"""
        keys = self.keys[0]
        del keys[0]
        t = self.tuples[0].pop(0)
        if not keys:
            self.drop_first()
        return t

    def drop_first(self) -> None:
        """The first block, emptied, goes."""
        del self.keys[0], self.tuples[0], self.maxes[0]

    def __bool__(self) -> bool:
        return bool(self.maxes)

    def __iter__(self) -> Iterator[Any]:
        """The tuples in sort order."""
        return chain.from_iterable(self.tuples)

    def hole(self) -> None:
        """The tuple just inserted into the window has no place in the copy (see the class)."""
        holes = self.holes
        if holes is None:
            holes = self.holes = deque()
        # The window's tuples older than it: the copy's and the pending holes.
        holes.append(self.out + sum(map(len, self.tuples)) + len(holes) + 1)

    def hole_positions(self) -> list[int]:
        """Where the pending holes are in the window's contents, oldest first (0: the oldest)."""
        return [h - self.out - 1 for h in self.holes or ()]


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
        texts = [repr(i) if isinstance(i, str) else getattr(i, "__qualname__", repr(i))
                 for i in items]
        self._sort_by_text = texts[0] if len(texts) == 1 else f"[{', '.join(texts)}]"
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
        submit, holes, blocks = self.submit, part.holes, part.keys
        for _ in event.tuples:
            if holes:  # (counted only while a hole is pending: see `_Sorted`)
                out = part.out = part.out + 1
                if holes[0] == out:
                    holes.popleft()
                    continue
            if not blocks:
                break
            keys = blocks[0]  # (`_Sorted.pop_smallest`, inlined)
            del keys[0]
            submit(part.tuples[0].pop(0))
            if not keys:
                part.drop_first()

    def _insertion_listener(self) -> Callable[[StreamWindowEvent[Any]], None]:
        """`_insert` as the INSERTION listener: one call per arrival."""
        parts, ascending_key = self._parts, self._ascending_key

        def on_insertion(event: StreamWindowEvent[Any]) -> None:
            key = event.partition
            part = parts.get(key)
            if part is None:
                part = parts[key] = _Sorted()
            t = event.tuples[0]
            # (`_Sorted.insert`, inlined: both bisects before anything changes)
            try:
                k = ascending_key(t)
                maxes = part.maxes
                b = bisect_right(maxes, k)
                i = bisect_right(part.keys[b], k) if b < len(maxes) else -1
            except Exception as exc:
                part.hole()  # (see `_Sorted`), and the tuple goes to the error port
                self._name_the_key(exc)
                raise
            if i < 0:
                part.append(k, t)
                return
            keys = part.keys[b]
            keys.insert(i, k)
            part.tuples[b].insert(i, t)
            if len(keys) > _LOAD:
                part.split(b)

        return on_insertion

    def on_punct(self, punct: Punct, port: int) -> None:
        """Final: a progressive sort outputs what it holds, in sorted order, without a mark."""
        if punct is Punct.FINAL and self._progressive:
            parts = dict(self._parts)
            self._parts.clear()  # in place: the INSERTION listener holds it
            submit = self.submit
            for part in parts.values():
                for t in part:
                    submit(t)

    def _batch(self, tuples: Sequence[Any]) -> None:
        try:
            ordered = sorted(tuples, key=self._key, reverse=self._reverse)
        except Exception as exc:
            self._name_the_key(exc)
            raise
        self._put(ordered)
        self.submit_punct(Punct.WINDOW, 0)

    def _name_the_key(self, exc: BaseException) -> None:
        """A key that failed to compute or compare: its message says which sort it was (only on
        this error path; "'<' not supported" alone did not say what was compared)."""
        name_failure(exc, f"Sort sort_by={self._sort_by_text}")

    def _insert(self, key: Hashable, t: Any) -> None:
        """`_insertion_listener`'s step, for `on_window_event`."""
        part = self._parts.get(key)
        if part is None:
            part = self._parts[key] = _Sorted()
        try:
            part.insert(self._ascending_key(t), t)
        except Exception as exc:
            part.hole()
            self._name_the_key(exc)
            raise

    # ----------------------------------------------------------- checkpoints

    def snapshot(self) -> dict[str, Any]:
        """A progressive sort's kept tuples per partition, in sort order (the window's own
        checkpoint holds the same number of tuples, not the same ones). Batch sorts keep
        nothing beyond their window.

        A partition with holes (`_Sorted`) has a third entry: their positions in the window's
        contents, which the window's own checkpoint restores in the same order. (A riverbed
        before it refuses such an entry, where it would have output the wrong tuples.)"""
        return {"format": FORMAT,
                "partitions": [[_key_out(k), list(p), *([p.hole_positions()] if p.holes else [])]
                               for k, p in self._parts.items()]}

    def restore(self, state: Any) -> None:
        if not isinstance(state, dict) or state.get("format") != FORMAT:
            raise SortStateError(f"Sort: not a Sort checkpoint (format {FORMAT!r} expected): "
                                 f"{str(state)[:80]}")
        parts = state.get("partitions")
        if not isinstance(parts, list):
            raise SortStateError("Sort: the checkpoint's 'partitions' must be a list")
        restored: dict[Hashable, _Sorted] = {}
        ascending_key = self._ascending_key
        for item in parts:
            if not (isinstance(item, list) and len(item) in (2, 3) and isinstance(item[1], list)
                    and (len(item) == 2 or _positions(item[2]))):
                raise SortStateError(f"Sort: bad partition entry {str(item)[:80]} in the checkpoint")
            part = restored[_key_in(item[0])] = _Sorted()
            for t in item[1]:
                part.insert(ascending_key(t), t)
            if len(item) == 3 and item[2]:
                part.holes = deque(p + 1 for p in item[2])  # (`out` from 0)
        self._parts.clear()  # in place: the INSERTION listener holds it
        self._parts.update(restored)

    def reset_to_initial_state(self) -> None:
        self._parts.clear()


def _positions(value: Any) -> bool:
    """Whether a checkpoint's hole positions are positions: ints >= 0, increasing."""
    return (isinstance(value, list) and all(type(p) is int and p >= 0 for p in value)
            and all(a < b for a, b in pairwise(value)))


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
