"""Window events and listeners, mirroring IBM's Java window API.

A window raises `StreamWindowEvent`s to its registered listeners, in the
order and with the contents IBM's runtime does (see the specification in
``shared/spl/windows-tumbling-sliding.md``). An event's ``tuples`` is a
read-only view that is valid only during the listener call: copy it (``list``)
to keep it. This lets the window hand over its own storage instead of
copying on every event.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from enum import Enum
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

if TYPE_CHECKING:
    from ._time_interval import TimeIntervalWindow
    from ._window import StreamWindow

__all__ = ["EventType", "PaneEvent", "PaneTiming", "StreamWindowEvent", "StreamWindowListener"]

T = TypeVar("T")


class EventType(Enum):
    """The kind of a window event (Java ``StreamWindowEvent.Type``).

    ``EMPTY_WINDOW_PUNCT`` exists only in the ``cpp`` flavor: IBM's C++ window
    raises it instead of a flush when a window mark reaches a ``punct()``
    window in which no partition holds a tuple. ``CLOSE`` exists only for
    timeInterval windows (C++ ``beforeWindowCloseEvent``): a pane partition is
    about to be discarded.
    """

    INSERTION = "INSERTION"
    EVICTION = "EVICTION"
    TRIGGER = "TRIGGER"
    INITIAL_FULL = "INITIAL_FULL"
    FINAL = "FINAL"
    PARTITION_EVICTION = "PARTITION_EVICTION"
    EMPTY_WINDOW_PUNCT = "EMPTY_WINDOW_PUNCT"
    CLOSE = "CLOSE"

    # Members are singletons compared by identity, so identity hashing agrees with equality;
    # Enum's own __hash__ (of the name, in Python) cost a call each time a window looked up
    # the listeners of an event type, twice a tuple on a sliding time window.
    __hash__ = object.__hash__


class PaneTiming(Enum):
    """When a timeInterval pane fires relative to its completion (SPL ``Sys.PaneTiming``).

    With SPL's default trigger a pane first fires when the watermark passes
    its end (``ON_COMPLETE``), then again for late data (``LATE``). ``EARLY``
    is what the pane reports before it completes, e.g. during its
    INITIAL_FULL event, exactly as IBM's runtime does.
    """

    EARLY = "early"
    ON_COMPLETE = "on_time"
    LATE = "late"


class StreamWindowEvent(Generic[T]):
    """One window event: its type, the partition it concerns and its tuples.

    ``partition`` is the partition key, or ``None`` for an unpartitioned
    window. ``tuples`` holds, oldest first: the inserted tuple (INSERTION),
    the evicted tuples (EVICTION, PARTITION_EVICTION), or the partition's
    contents (TRIGGER, INITIAL_FULL, FINAL). It is valid during the listener
    call only.
    """

    __slots__ = ("partition", "tuples", "type", "window")

    Type = EventType

    def __init__(self, window: StreamWindow[T] | TimeIntervalWindow[T], type: EventType,
                 partition: Hashable | None, tuples: Sequence[T]) -> None:
        self.window = window
        self.type = type
        self.partition = partition
        self.tuples = tuples

    def __repr__(self) -> str:
        return (f"StreamWindowEvent({self.type.name}, partition={self.partition!r}, "
                f"tuples={list(self.tuples)!r})")


class StreamWindowListener(Protocol):
    """Receives window events (Java ``StreamWindowListener``).

    Any object with ``handle_event`` works; so does a plain callable taking
    the event, passed to `StreamWindow.register_listener`.
    """

    def handle_event(self, event: StreamWindowEvent[Any]) -> None: ...


Listener = StreamWindowListener | Callable[[StreamWindowEvent[T]], None]


class PaneEvent(StreamWindowEvent[T]):
    """An event of one partition of one timeInterval pane.

    Besides the partition's tuples in the pane (arrival order), it carries
    what SPL's ``intervalStart()``, ``intervalEnd()``, ``paneIndex()`` and
    ``paneTiming()`` report during the event: the pane bounds in event-time
    ticks (``[interval_start, interval_end)``), the 0-based count of the
    pane's trigger rounds so far (shared by its partitions) and its timing.
    """

    __slots__ = ("interval_end", "interval_start", "pane_index", "pane_timing")

    def __init__(self, window: TimeIntervalWindow[T], type: EventType, partition: Hashable | None,
                 tuples: Sequence[T], *, interval_start: int, interval_end: int,
                 pane_index: int, pane_timing: PaneTiming) -> None:
        super().__init__(window, type, partition, tuples)
        self.interval_start = interval_start
        self.interval_end = interval_end
        self.pane_index = pane_index
        self.pane_timing = pane_timing

    @property
    def pane(self) -> tuple[int, int]:
        """The pane interval ``(start, end)`` in ticks, start included, end excluded."""
        return self.interval_start, self.interval_end

    def __repr__(self) -> str:
        return (f"PaneEvent({self.type.name}, pane=[{self.interval_start}, {self.interval_end}), "
                f"partition={self.partition!r}, index={self.pane_index}, "
                f"timing={self.pane_timing.name}, tuples={list(self.tuples)!r})")
