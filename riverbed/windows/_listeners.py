"""Who hears a window's events, and how a tuple finds its partition: one mechanism, two engines.

`StreamWindow` (tumbling and sliding) and `TimeIntervalWindow` (event-time
panes) register listeners and partitioners the same way, so a host wires
either alike and the same mistake raises the same error from both:

* a listener that is neither callable nor has a callable ``handle_event``,
  or an event type that is not an `EventType` member: `TypeError`;
* a listener that asks only for event types this kind of window never raises
  (EVICTION from a timeInterval window, CLOSE from a sliding one): a
  `WindowStateError` naming them. Asking for several types of which some are
  never raised is fine: an operator written for both kinds of window may ask
  for the union;
* a partitioner for a window without ``partitioned``, or a new partitioner
  once the window has partitions (they are keyed by the old one):
  `WindowStateError`; a partitioner that is neither an attribute name nor a
  function: `TypeError`;
* a tuple reaching a partitioned window that has no partitioner:
  `WindowStateError`; a tuple whose key cannot be computed or is not
  hashable: `WindowTupleError`, the window unchanged.

Each event type has its own handler list, kept for the window's life
(registering appends in place), so an engine's compiled insert paths can hold
the lists, an event that no listener asked for is never built, and a listener
restricted to some types is called directly, not through a filter.

A host that lets a graph go on past a failing listener (an operator with an
error port) sets an error handler: from then on each handler is called through
a guard that hands what it raises to the error handler, so the event's other
listeners and the rest of the window's step run as if it had returned. The
host may also give a ``before`` function, called before each handler: what it
returns reaches the error handler, so the host can take back what the failed
call had begun (the output it submitted). Without an error handler, nothing
is wrapped and a listener's exception leaves the window (no cost on the paths
that never fail).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Generic, TypeVar

from ._errors import WindowStateError, WindowTupleError
from ._events import EventType, Listener, StreamWindowEvent

__all__ = ["ErrorHandler", "Handler", "ListenerRegistry", "Partitioner"]

T = TypeVar("T")

Handler = Callable[[StreamWindowEvent[Any]], None]
ErrorHandler = Callable[[StreamWindowEvent[Any], Exception, Any], None]


class ListenerRegistry:
    """A window's listeners, per event type, in registration order.

    ``handlers[type]`` is the list of handlers of one event type (a list for
    every `EventType`, empty when nobody asked). ``gate`` lists every handler
    registered for some type other than INSERTION: while it is empty, the only
    events worth building are INSERTIONs. With an error handler (`set_error_handler`) the
    lists hold each handler's guard; ``listened`` keeps the handlers as registered.
    """

    __slots__ = ("before", "gate", "handlers", "listened", "on_error", "raised", "window_kind")

    def __init__(self, window_kind: str, raised: Iterable[EventType]) -> None:
        self.window_kind = window_kind
        self.raised = frozenset(raised)
        self.handlers: dict[EventType, list[Handler]] = {t: [] for t in EventType}
        self.listened: dict[EventType, list[Handler]] = {t: [] for t in EventType}
        self.gate: list[Handler] = []
        self.on_error: ErrorHandler | None = None
        self.before: Callable[[], Any] | None = None

    def set_error_handler(self, on_error: ErrorHandler | None,
                          before: Callable[[], Any] | None = None) -> None:
        """Hand what a listener raises to ``on_error(event, exc, before())`` (None: let it
        leave the window again). The handler lists change in place: compiled insert paths
        hold them."""
        self.on_error, self.before = on_error, before
        for etype, handles in self.listened.items():
            self.handlers[etype][:] = [self._guarded(h) for h in handles]

    def _guarded(self, handle: Handler) -> Handler:
        on_error, before = self.on_error, self.before
        if on_error is None:
            return handle

        def guarded(event: StreamWindowEvent[Any]) -> None:
            token = before() if before is not None else None
            try:
                handle(event)
            except Exception as exc:  # a listener's failure: the host decides (see the module)
                on_error(event, exc, token)

        guarded.__wrapped__ = handle  # type: ignore[attr-defined]
        return guarded

    def register(self, listener: Listener[Any], types: Iterable[EventType] | None = None) -> None:
        """Add a listener (a callable, or an object with ``handle_event(event)``) for ``types``
        (default: every type)."""
        handle = getattr(listener, "handle_event", listener)
        if not callable(handle):
            raise TypeError(f"a window listener needs handle_event(event) or must be callable, "
                            f"got {listener!r}")
        wanted = tuple(EventType) if types is None else tuple(dict.fromkeys(types))
        for etype in wanted:
            if not isinstance(etype, EventType):
                raise TypeError(f"listener event types must be EventType members, got {etype!r}")
        if wanted and self.raised.isdisjoint(wanted):
            raise WindowStateError(
                f"a {self.window_kind} window raises no {', '.join(t.name for t in wanted)} events, "
                f"so this listener would never be called; it raises "
                f"{', '.join(t.name for t in EventType if t in self.raised)}")
        for etype in wanted:
            self.listened[etype].append(handle)
            self.handlers[etype].append(self._guarded(handle))
        if any(etype is not EventType.INSERTION for etype in wanted):
            self.gate.append(handle)


class Partitioner(Generic[T]):
    """How a tuple's partition key is computed: an attribute name or a function (Java's
    ``Partitioner``).

    ``key_of`` is the raw key function (None until one is set), for insert
    paths that read keys inline and hand any tuple that fails to `key`, which
    raises the typed error.
    """

    __slots__ = ("attribute", "clause", "getter", "key_of", "name", "partitioned")

    def __init__(self, clause: str, partitioned: bool, getter: Callable[[str], Callable[[T], Any]]) -> None:
        self.clause = clause
        self.partitioned = partitioned
        self.getter = getter
        self.key_of: Callable[[T], Hashable] | None = None
        self.name: str | None = None
        # The key's attribute when ``key_of`` is the default `operator.itemgetter` of it: an
        # inline insert path may read ``tup[attribute]`` itself, which is the same read.
        self.attribute: str | None = None

    def set(self, partition_by: str | Callable[[T], Hashable], *, has_partitions: bool) -> None:
        """Use ``partition_by`` from now on; ``has_partitions`` says whether the window holds any."""
        if not self.partitioned:
            raise WindowStateError(
                f"window '{self.clause}' is not partitioned; add 'partitioned' to the clause to give "
                "it a partitioner")
        if isinstance(partition_by, str):
            key_of, name = self.getter(partition_by), partition_by
        elif callable(partition_by):
            key_of, name = partition_by, getattr(partition_by, "__name__", "partitioner")
        else:
            raise TypeError(f"partition_by must be an attribute name or a function, got {partition_by!r}")
        if has_partitions:
            raise WindowStateError(
                f"window '{self.clause}' already has partitions, keyed by its partitioner; a new "
                "partitioner can only be set before the first tuple (or after a reset)")
        self.key_of, self.name = key_of, name
        self.attribute = (partition_by if isinstance(partition_by, str)
                          and self.getter is operator.itemgetter else None)

    def key(self, t: T) -> Hashable:
        """The partition key of ``t``; typed errors for a missing partitioner or a bad key."""
        key_of = self.key_of
        if key_of is None:
            raise WindowStateError(
                f"window '{self.clause}' is partitioned but has no partitioner; pass "
                "partition_by= or call register_partitioner()")
        try:
            key = key_of(t)
        except (KeyError, AttributeError, IndexError, TypeError) as exc:
            raise WindowTupleError(
                f"cannot compute the partition key ({self.name}) of tuple {t!r}: "
                f"{type(exc).__name__}: {exc}") from None
        try:
            hash(key)
        except TypeError:
            raise WindowTupleError(f"partition key {key!r} of tuple {t!r} is not hashable") from None
        return key
