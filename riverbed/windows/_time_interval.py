"""Event-time windows: SPL ``timeInterval`` panes driven by watermarks.

A `TimeIntervalWindow` assigns each tuple, by its event time, to every pane
``[N*P + O, N*P + O + D)`` that contains it, and lets watermarks decide when
a pane is complete (INITIAL_FULL, then TRIGGER with timing "on time"), when
late data re-triggers it (TRIGGER, timing "late") and when it closes (CLOSE,
then the pane is gone). Rules E1-E25 of ``shared/spl/eventtime-checkpoint.md``
describe IBM's C++ ``TimeIntervalWindow``; this is the same machine, in
integer ticks (nanoseconds by default), so pane bounds and lateness are exact.

Where we differ from IBM's code, on purpose:

* Pane membership is the arithmetic of the pane grid for every event time
  from 0 on. IBM's code skips a pane starting at 0 or before the offset
  (rule E9, a bug its own docs contradict); real event times are epoch-based
  and never meet it.
* Event times must be integers from 0 to 2**63 - 1 ticks; anything else is
  rejected with `WindowTupleError` (IBM silently ignores negative times).
* IBM cannot checkpoint these windows at all (E24). We can: nothing here
  depends on the wall clock, so `snapshot`/`restore` (and `checkpoint`/
  `reset`) resume exactly where the window was, and the runtime can put an
  operator with a timeInterval window into a consistent region.

The window keeps its configuration (a frozen `TimeIntervalConfig`: the
clause, the pane grid in ticks, the event-time reader) apart from its state
(a `TimeIntervalState`: the panes, the watermark, the counts), which is
exactly what `snapshot` stores (``_time_interval_state.py``); listeners and
the partitioner are wired as for `StreamWindow` (``_listeners.py``).

Tuples that arrive with an event time before the drop point (watermark minus
discardAge) are dropped as SPL drops them, and counted in `dropped`; tuples
that fall in no pane (a period longer than the duration) are counted in
`unassigned`. Neither raises an event.
"""

from __future__ import annotations

import operator
from bisect import bisect_left
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from ._errors import PunctuationError, WindowTupleError
from ._events import EventType, Listener, PaneEvent, PaneTiming, StreamWindowEvent
from ._flavor import Flavor
from ._listeners import ErrorHandler, ListenerRegistry, Partitioner
from ._policy import EVENT_TIME_MAX, EVENT_TIME_MIN, TimeIntervalSpec, check_watermark
from ._time_interval_state import (
    CLOSED,
    COMPLETE,
    FORMAT,
    INCOMPLETE,
    NO_WATERMARK,
    Pane,
    TimeIntervalConfig,
    TimeIntervalState,
    decode,
    encode,
)

__all__ = ["FORMAT", "TimeIntervalWindow"]

T = TypeVar("T")

_EARLY, _ON_COMPLETE, _LATE = PaneTiming.EARLY, PaneTiming.ON_COMPLETE, PaneTiming.LATE
# `_insert_in_one_period`: runs from this long (shorter ones cost more to check in C than
# the loop's per-tuple checks), and the types it takes as they are.
_BULK_RUN = 16
_INT_ONLY = {int}
_PLAIN_KEYS = {int, str, type(None)}
_ALL_TYPES = (EventType.INSERTION, EventType.INITIAL_FULL, EventType.TRIGGER, EventType.CLOSE)


class TimeIntervalWindow(Generic[T]):
    """An SPL ``timeInterval`` window: event-time panes completed and closed by watermarks.

    ``event_time`` names the tuple attribute holding the event time (read
    with ``getter``, `operator.itemgetter` by default, so dict tuples work) or
    is a function of the tuple; a host that carries the event time beside
    the tuple passes it to `insert` instead. Event times and watermarks are
    integer ticks of ``resolution`` (``"ns"``, ``"us"`` or ``"ms"``, SPL's
    ``@eventTime`` resolutions); clause seconds are converted to ticks by
    truncation as SPL does.

    Listeners get `PaneEvent`s: INSERTION (one per pane the tuple enters),
    INITIAL_FULL (every partition of a pane, once, when the watermark reaches
    its end), TRIGGER (each partition with new tuples since the pane last
    triggered, on the first watermark at or after the end, then on every
    later advancing watermark) and CLOSE (every partition, when the
    watermark reaches end + discardAge). `register_listener` can restrict a
    listener to some event types; INSERTION events are only built for
    listeners that want them.

    ``flavor`` is accepted for symmetry with `StreamWindow`: only IBM's C++
    runtime has timeInterval windows, and both flavors behave the same.
    """

    def __init__(
        self,
        spec: TimeIntervalSpec | str,
        *,
        event_time: str | Callable[[T], int] | None = None,
        resolution: str = "ns",
        partition_by: str | Callable[[T], Hashable] | None = None,
        getter: Callable[[str], Callable[[T], Any]] = operator.itemgetter,  # type: ignore[assignment]
        flavor: Flavor | str = Flavor.JAVA,
        listeners: Iterable[Listener[T]] = (),
    ) -> None:
        getter_: Callable[[str], Callable[[Any], Any]] = getter
        self._config = config = TimeIntervalConfig.build(spec, event_time=event_time, resolution=resolution,
                                                         getter=getter_, flavor=flavor)
        self._partitioner: Partitioner[T] = Partitioner(config.spec.clause(), config.spec.partitioned,
                                                        getter)
        self._now = 0  # the host's clock as last told; never stored, never affects the panes
        self._reset_state()
        if partition_by is not None:
            self.register_partitioner(partition_by)
        self._events = ListenerRegistry("timeInterval", _ALL_TYPES)
        self._listeners = self._events.handlers
        self._on_insert = self._listeners[EventType.INSERTION]  # read per tuple: no enum hashing
        for listener in listeners:
            self.register_listener(listener)

    def _reset_state(self) -> None:
        self._set_state(TimeIntervalState())

    def _set_state(self, state: TimeIntervalState) -> None:
        self._state = state
        self._drop = self._config.drop_point(state.watermark)  # derived from the watermark

    # ------------------------------------------------------------- configuration

    @property
    def config(self) -> TimeIntervalConfig:
        """The window's configuration: the clause and its pane grid in ticks."""
        return self._config

    @property
    def spec(self) -> TimeIntervalSpec:
        return self._config.spec

    @property
    def flavor(self) -> Flavor:
        return self._config.flavor

    @property
    def resolution(self) -> str:
        return self._config.resolution

    @property
    def is_partitioned(self) -> bool:
        return self._config.spec.partitioned

    @property
    def dropped(self) -> int:
        """How many tuples arrived with an event time before the drop point (and were dropped)."""
        return self._state.dropped

    @property
    def unassigned(self) -> int:
        """How many tuples fell in no pane (a creation period longer than the duration)."""
        return self._state.unassigned

    @property
    def watermark_value(self) -> int | None:
        """The highest watermark seen, or None before the first one."""
        wm = self._state.watermark
        return None if wm == NO_WATERMARK else wm

    @property
    def drop_point(self) -> int | None:
        """Tuples with an event time below this are dropped; None before the first watermark."""
        return None if self._drop == NO_WATERMARK else self._drop

    def register_listener(self, listener: Listener[T],
                          types: Iterable[EventType] | None = None) -> None:
        """Add a listener (a callable or an object with ``handle_event``) for some or all events.

        Misuse raises what `StreamWindow.register_listener` raises (see
        `riverbed.windows._listeners`); asking only for events a timeInterval
        window never raises (EVICTION, ...) is a `WindowStateError`.
        """
        self._events.register(listener, types)

    def on_listener_error(self, handler: ErrorHandler | None,
                          before: Callable[[], Any] | None = None) -> None:
        """As `StreamWindow.on_listener_error`: ``handler(event, exc, token)`` takes what a
        listener raises, and the insertion or watermark goes on (every pane and partition it
        reaches still gets its events); None restores the default, where the exception
        leaves."""
        self._events.set_error_handler(handler, before)

    def register_partitioner(self, partition_by: str | Callable[[T], Hashable]) -> None:
        """Set how a tuple's partition key is computed: an attribute name or a function.

        Only before the window holds tuples: `WindowStateError` afterwards.
        """
        self._partitioner.set(partition_by, has_partitions=bool(self._state.panes))

    # ------------------------------------------------------------------ tuples

    def insert(self, tup: T, event_time: int | None = None) -> bool:
        """Put a tuple into every pane its event time falls in.

        Returns False when the tuple was dropped (older than the drop point)
        or falls between panes, True when it was stored. Raises
        `WindowTupleError`, with the window unchanged, for a tuple without a
        valid event time or partition key.
        """
        t = self._time_of(tup) if event_time is None else event_time
        if type(t) is not int or t < 0 or t > EVENT_TIME_MAX:
            t = self._check_time(t)
        state = self._state
        if t < self._drop:
            state.dropped += 1
            return False
        config = self._config
        key = self._partitioner.key(tup) if config.spec.partitioned else None
        period, duration = config.period, config.duration
        start = t - (t - config.offset) % period
        low = t - duration
        if start <= low:
            state.unassigned += 1
            return False
        panes = state.panes
        on_insert = self._on_insert
        failed: BaseException | None = None
        while start > low:
            pane = panes.get(start)
            if pane is None:
                pane = panes[start] = Pane(start, start + duration)
            part = pane.parts.get(key)
            if part is None:
                pane.parts[key] = part = [tup]
            else:
                part.append(tup)
            if not pane.fresh:
                pane.updated[key] = None
            if on_insert:
                try:
                    self._emit(on_insert, pane, EventType.INSERTION, key, (tup,))
                except BaseException as exc:  # raised once the tuple is in all its panes
                    failed = failed or exc
            start -= period
        if failed is not None:
            raise failed
        return True

    def insert_batch(self, tuples: Sequence[T], event_times: Sequence[int] | None = None) -> int:
        """Insert tuples in order, as `insert` one by one would; returns how many were stored.

        If a tuple is invalid, the tuples before it stay inserted and the
        `WindowTupleError` says which failed (message, and its ``index`` attribute).
        """
        config = self._config
        read = config.event_time_of
        partitioned = config.spec.partitioned
        key_of = self._partitioner.key_of
        if (event_times is not None or read is None or (partitioned and key_of is None)
                or self._on_insert):
            return self._insert_each(tuples, event_times)
        # `insert` inlined: the same steps, with the per-call overhead paid once per batch.
        # Any tuple that is not plainly valid goes through `insert`, which says what is wrong.
        return self._insert_inline(tuples, read, key_of if partitioned else None, self._names())

    def _names(self) -> tuple[str, str | None] | None:
        """The event time's and the key's attribute names (None: no key), when the window reads
        them with the default itemgetters (a subscript is the same read); else None."""
        config = self._config
        if config.getter is operator.itemgetter and config.event_time_name is not None:
            attribute = self._partitioner.attribute
            if not config.spec.partitioned or attribute is not None:
                return (config.event_time_name, attribute)
        return None

    def read_times(self, tuples: Sequence[T]) -> tuple[list[int], bool] | None:
        """The event times of ``tuples`` as `insert_batch` reads them, all valid (ints from 0 to
        `EVENT_TIME_MAX`), and whether they never go back; None when any is not (a bad tuple:
        `insert_batch` says what is wrong) or a function reads them. `insert_read` takes them."""
        config = self._config
        read = config.event_time_of
        if read is None or config.event_time_name is None or config.getter is not operator.itemgetter:
            return None
        try:
            times = list(map(read, tuples))
        except Exception:
            return None
        if not times:
            return times, True
        if set(map(type, times)) != _INT_ONLY:
            return None
        # (in order, the usual case, the ends are the extremes: a sort of a sorted list is
        # a pass of cheap int compares, where min and max are two passes of generic ones)
        ordered = times == sorted(times)
        lo, hi = (times[0], times[-1]) if ordered else (min(times), max(times))
        if lo < 0 or hi > EVENT_TIME_MAX:
            return None
        return times, ordered

    def insert_read(self, tuples: Sequence[T], times: list[int], ordered: bool) -> int:
        """`insert_batch` for tuples whose event times `read_times` gave (``times``, ``ordered``):
        they are not read again."""
        partitioned = self._config.spec.partitioned
        key_of = self._partitioner.key_of
        if (partitioned and key_of is None) or self._on_insert:
            return self._insert_each(tuples, times)
        return self._insert_inline(tuples, self._config.event_time_of,  # type: ignore[arg-type]
                                   key_of if partitioned else None, self._names(), times=times,
                                   ordered=ordered)

    def _insert_inline(self, tuples: Sequence[T], read: Callable[[T], Any],
                       key_of: Callable[[T], Hashable] | None,
                       names: tuple[str, str | None] | None = None, *,
                       times: list[int] | None = None, ordered: bool = False) -> int:
        """`insert_batch`'s loop. A tuple goes into every pane starting after ``t - duration``,
        made in the order `insert` makes them. When the duration is a whole number of periods
        (tumbling, and the usual sliding panes) those are the same panes for every time in a
        period, so a run of tuples in one period (event time mostly moves forward) reuses them
        without a lookup. ``names``: the event time's and the key's attributes (None: no key),
        when ``read`` and ``key_of`` are the default itemgetters of them: a subscript is the
        same read without a call. ``times``: the event times, read already (`read_times`), and
        ``ordered`` when they never go back."""
        state = self._state
        period, duration, offset, drop = (self._config.period, self._config.duration,
                                          self._config.offset, self._drop)
        aligned = duration % period == 0
        stored = 0
        cached = -1
        targets: list[tuple[dict[Any, list[T]], dict[Any, None] | None]] = []
        only: dict[Any, list[T]] | None = None  # the one target, a pane never triggered
        key: Any = None
        highest = EVENT_TIME_MAX
        lowest = drop if drop > 0 else 0  # below it: late (dropped) or invalid, `insert` says
        named = names is not None
        time_name, key_name = names if names is not None else ("", None)
        if named and aligned and len(tuples) >= _BULK_RUN:
            done = self._insert_in_one_period(tuples, time_name, key_name, lowest, times=times,
                                              ordered=ordered)
            if done >= 0:
                return done
        for i, tup in enumerate(tuples):
            try:
                if named:
                    t = tup[time_name] if times is None else times[i]  # type: ignore[index]
                    if key_name is not None:
                        key = tup[key_name]  # type: ignore[index]
                else:
                    t = read(tup) if times is None else times[i]
                    if key_of is not None:
                        key = key_of(tup)
                if type(key) is not int and type(key) is not str and key is not None:
                    hash(key)
            except Exception:  # `insert` below reads it again and raises the typed error
                t = None
            if type(t) is not int or t < lowest or t > highest:
                stored += self._insert_one(tup, None, i)  # counts a late tuple as dropped
                cached = -1  # `insert` may have made or closed panes
                continue
            start = t - (t - offset) % period
            if start != cached:
                low = t - duration
                if start <= low:  # only when not aligned: the tuple falls between panes
                    state.unassigned += 1
                    continue
                targets = self._pane_targets(start, low)
                cached = start if aligned else -1
                only = targets[0][0] if len(targets) == 1 and targets[0][1] is None else None
            if only is not None:
                part = only.get(key)
                if part is None:
                    only[key] = [tup]
                else:
                    part.append(tup)
                stored += 1
                continue
            for parts, updated in targets:
                part = parts.get(key)
                if part is None:
                    parts[key] = [tup]
                else:
                    part.append(tup)
                if updated is not None:
                    updated[key] = None
            stored += 1
        return stored

    def _pane_targets(self, start: int, low: int) -> list[tuple[dict[Any, list[T]], dict[Any, None] | None]]:
        """The panes a tuple of the period starting at ``start`` goes into (made in the order
        `insert` makes them: those starting after ``low``, newest first), each as its parts and
        its updated keys (None while the pane never triggered)."""
        panes, period, duration = self._state.panes, self._config.period, self._config.duration
        targets: list[tuple[dict[Any, list[T]], dict[Any, None] | None]] = []
        s = start
        while s > low:
            pane = panes.get(s)
            if pane is None:
                pane = panes[s] = Pane(s, s + duration)
            targets.append((pane.parts, None if pane.fresh else pane.updated))
            s -= period
        return targets

    def _insert_in_one_period(self, tuples: Sequence[T], time_name: str, key_name: str | None,
                              lowest: int, *, times: list[int] | None = None,
                              ordered: bool = False) -> int:
        """`_insert_inline` for a run whose event times all fall in one period (the usual case:
        event time moves forward, a batch spans less than a period) of an aligned window, or
        move forward across periods, all valid: the times and keys read by two list
        comprehensions and checked in C, the panes found once a period, then only the
        appends. -1 (nothing done) for any other run, which the per-tuple loop takes, and
        which says what is wrong with a bad tuple. ``times``, ``ordered``: as `_insert_inline`."""
        try:
            if times is None:
                times = [t[time_name] for t in tuples]  # type: ignore[index]
                if set(map(type, times)) != _INT_ONLY:
                    return -1
                ordered = times == sorted(times)  # (see `read_times`)
            keys = None if key_name is None else [t[key_name] for t in tuples]  # type: ignore[index]
        except Exception:
            return -1
        if keys is not None and not set(map(type, keys)) <= _PLAIN_KEYS:
            return -1  # (a key that may not hash: the loop checks it)
        lo, hi = (times[0], times[-1]) if ordered else (min(times), max(times))
        config = self._config
        period, offset = config.period, config.offset
        start = lo - (lo - offset) % period
        if lo < lowest or hi > EVENT_TIME_MAX:
            return -1
        if hi < start + period:
            self._insert_period(tuples, keys, start, lo)
            return len(tuples)
        if not ordered:  # several periods, not in order: the loop keeps the order
            return -1
        # Several periods in order (a run that crosses a pane boundary): a period at a time, in
        # the order the tuples came, each period's panes made when its first tuple comes.
        i, n = 0, len(times)
        while i < n:
            t = times[i]
            start = t - (t - offset) % period
            j = bisect_left(times, start + period, i)
            self._insert_period(tuples[i:j], None if keys is None else keys[i:j], start, t)
            i = j
        return n

    def _insert_period(self, tuples: Sequence[T], keys: list[Any] | None, start: int,
                       first: int) -> None:
        """Append ``tuples`` (with their ``keys``, None: not partitioned), whose times all fall
        in the period starting at ``start`` (``first`` is one of them), to their panes."""
        # (aligned: every time of the period has the panes of its first)
        for parts, updated in self._pane_targets(start, first - self._config.duration):
            if keys is None:
                part = parts.get(None)
                if part is None:
                    parts[None] = list(tuples)
                else:
                    part.extend(tuples)
                if updated is not None:
                    updated[None] = None
                continue
            get = parts.get
            for tup, key in zip(tuples, keys, strict=True):
                part = get(key)
                if part is None:
                    parts[key] = [tup]
                else:
                    part.append(tup)
            if updated is not None:
                updated.update(dict.fromkeys(keys))

    def _insert_each(self, tuples: Sequence[T], event_times: Sequence[int] | None) -> int:
        stored = 0
        for i, tup in enumerate(tuples):
            stored += self._insert_one(tup, None if event_times is None else event_times[i], i)
        return stored

    def _insert_one(self, tup: T, event_time: int | None, index: int) -> bool:
        try:
            return self.insert(tup, event_time)
        except WindowTupleError as exc:
            error = WindowTupleError(f"tuple {index} of the batch: {exc}")
            error.index = index  # type: ignore[attr-defined]  # hosts route the failed tuple
            # What hosts report with the tuple itself: its place in the batch depends on how the
            # host batched (the runtime, a parallel channel and a Spark key group differ).
            error.tuple_error = exc  # type: ignore[attr-defined]
            raise error from None

    def _time_of(self, tup: T) -> Any:
        reader = self._config.event_time_of
        if reader is None:
            raise WindowTupleError("no event time: give the window event_time= (an attribute name "
                                   "or a function) or pass event_time to insert()")
        try:
            return reader(tup)
        except (KeyError, IndexError, AttributeError, TypeError):
            name = self._config.event_time_name or "event time"
            raise WindowTupleError(f"tuple has no event-time attribute {name!r}: {tup!r}") from None
        except Exception as exc:  # a user function failing is a bad tuple, not a broken window
            raise WindowTupleError(f"cannot compute the event time of {tup!r}: {exc!r}") from exc

    def _check_time(self, t: Any) -> int:
        if isinstance(t, bool) or not isinstance(t, int):
            if isinstance(t, float):
                raise WindowTupleError(
                    f"event time {t!r} is a float: event times are integer {self.resolution} ticks "
                    "(convert seconds with riverbed.windows.seconds_to_ticks)")
            raise WindowTupleError(f"event time {t!r}: expected an integer number of "
                                   f"{self.resolution} ticks")
        if t < 0 or t > EVENT_TIME_MAX:
            raise WindowTupleError(f"event time {t} is outside 0..2**63-1 {self.resolution} ticks")
        return int(t)

    # -------------------------------------------------------------- punctuation

    def watermark(self, value: int) -> bool:
        """Advance event time to ``value``; complete, trigger and close panes accordingly.

        A watermark that does not advance is ignored (SPL rule E11) and
        returns False. Panes are processed in ascending start order; per pane
        all INITIAL_FULL events come first, then the TRIGGERs, then CLOSEs.
        """
        if type(value) is not int or value < EVENT_TIME_MIN or value > EVENT_TIME_MAX:
            value = check_watermark(value, "watermark {!r}", self.resolution)
        state = self._state
        if value <= state.watermark:
            return False
        state.watermark = value
        self._drop = self._config.drop_point(value)
        panes = state.panes
        if not panes:
            return True
        for start in sorted(panes):
            pane = panes[start]
            if pane.end > value:
                break  # all panes have the same duration: later ones end later
            self._advance_pane(pane, value)
            if pane.state == CLOSED:
                del panes[start]
        return True

    # A host that receives tuples interleaved with watermarks (a marked run) inserts the run
    # whole and applies in place only the watermarks that would change a pane: most of them (one
    # every minimum gap of event time, a pane every hundred of them) only move the watermark and
    # the drop point. These say which do, exactly: a watermark below `quiet_limit` and
    # below `next_pane_end` of the earliest tuple inserted since changes no pane, and a tuple
    # after it keeps its fate (stored, not dropped) when its time is not below its drop point.

    def quiet_limit(self) -> int:
        """The lowest watermark that would change a pane now (complete it, trigger it, close
        it); one below it only moves the watermark and the drop point, as `advance_quietly`
        does. Above `EVENT_TIME_MAX` when no pane waits for anything."""
        limit = EVENT_TIME_MAX + 1
        age = self._config.discard_age
        for pane in self._state.panes.values():
            if (pane.state == INCOMPLETE or pane.timing is _EARLY
                    or (pane.parts if pane.fresh else pane.updated)):
                due = pane.end  # completes, becomes on time, or triggers its new tuples
            else:
                due = pane.end + age  # complete, nothing new: only its close is ahead
            limit = min(limit, due)
        return limit

    def next_pane_end(self, t: int) -> int:
        """The first pane end after event time ``t``: a tuple at ``t`` or later enters only
        panes ending there or later, so it cannot make a lower watermark change a pane."""
        config = self._config
        period = config.period
        return t + period - (t - config.offset - config.duration) % period

    def drop_point_at(self, watermark: int) -> int:
        """The drop point a watermark of ``watermark`` sets (at most ``watermark``, or 0)."""
        return self._config.drop_point(watermark)

    def advance_quietly(self, value: int) -> None:
        """`watermark` for a value below `quiet_limit`: the watermark and the drop point move,
        no pane changes, no event is raised. A caller that cannot tell calls `watermark`."""
        state = self._state
        if value > state.watermark:
            state.watermark = value
            self._drop = self._config.drop_point(value)

    @property
    def raises_insertions(self) -> bool:
        """A listener wants INSERTION events: inserting runs code that may submit output."""
        return bool(self._on_insert)

    def _advance_pane(self, pane: Pane, wm: int) -> None:
        listeners = self._listeners
        if pane.state == INCOMPLETE:
            pane.state = COMPLETE
            on_full = listeners[EventType.INITIAL_FULL]
            if on_full:
                for key, part in list(pane.parts.items()):
                    self._emit(on_full, pane, EventType.INITIAL_FULL, key, part)
        if pane.timing is _EARLY:
            pane.timing = _ON_COMPLETE
        if pane.parts if pane.fresh else pane.updated:
            # a copy of a fresh pane's keys: a listener may insert while it is told
            updated = list(pane.parts) if pane.fresh else pane.updated
            pane.updated, pane.fresh = {}, False
            on_trigger = listeners[EventType.TRIGGER]
            if on_trigger:
                parts = pane.parts
                for key in updated:
                    self._emit(on_trigger, pane, EventType.TRIGGER, key, parts[key])
            pane.timing = _LATE
            pane.index += 1
        if wm - pane.end >= self._config.discard_age:
            on_close = listeners[EventType.CLOSE]
            if on_close:
                for key, part in list(pane.parts.items()):
                    self._emit(on_close, pane, EventType.CLOSE, key, part)
            pane.state = CLOSED

    def _emit(self, handlers: list[Callable[[StreamWindowEvent[T]], None]], pane: Pane,
              type: EventType, key: Hashable, tuples: Sequence[T]) -> None:
        event = PaneEvent(self, type, key, tuples, interval_start=pane.start,
                          interval_end=pane.end, pane_index=pane.index, pane_timing=pane.timing)
        for handle in handlers:
            handle(event)

    def punctuate(self, kind: str = "window") -> None:
        """Window and final marks do not drive panes (rule E10): only watermarks do.

        The operator hosting the window submits the maximum watermark before
        forwarding a final mark (E23); that flushes every pane.
        """
        if kind not in ("window", "final"):
            raise PunctuationError(kind)

    # ---------------------------------------------- host symmetry with StreamWindow

    def activate(self, now: int = 0) -> None:
        """Nothing to start: panes follow event time, never the host's clock."""
        self._now = now

    def advance_time(self, now: int) -> None:
        """Nothing happens on system time; present so hosts can drive every window alike."""
        self._now = max(self._now, now)

    @property
    def now(self) -> int:
        """The host's clock as last told (ns); it never affects the panes."""
        return self._now

    def next_deadline(self) -> int | None:
        """Never a deadline: nothing here waits for the host's clock."""
        return None

    # -------------------------------------------------------------- inspection

    def panes(self) -> list[tuple[int, int]]:
        """The live panes as ``(start, end)`` tick intervals, ascending."""
        panes = self._state.panes
        return [(s, panes[s].end) for s in sorted(panes)]

    def partitions(self) -> list[Hashable]:
        """The partition keys present in at least one live pane."""
        seen: dict[Hashable, None] = {}
        panes = self._state.panes
        for s in sorted(panes):
            seen.update(dict.fromkeys(panes[s].parts))
        return list(seen)

    def contents(self, pane_start: int, partition: Hashable | None = None) -> list[T]:
        """A copy of one pane partition's tuples, in arrival order (empty if none)."""
        pane = self._state.panes.get(pane_start)
        if pane is None:
            return []
        return list(pane.parts.get(partition, ()))

    # ------------------------------------------------------ snapshot and reset

    def snapshot(self) -> dict[str, Any]:
        """The window's state as plain data (msgpack/JSON-able when the tuples and keys are).

        A tuple that belongs to several panes is stored once. It is the window's
        `TimeIntervalState` as data (see `riverbed.windows._time_interval_state`).
        """
        return encode(self._config, self._state)

    def restore(self, state: Mapping[str, Any]) -> None:
        """Replace the window's state with a snapshot taken from a window with the same clause.

        Raises `SnapshotError`, the window unchanged, for a corrupt or foreign snapshot.
        """
        self._set_state(decode(self._config, state))

    def drain(self) -> None:
        """Nothing is pending between calls: every event is raised before a call returns."""

    def checkpoint(self) -> dict[str, Any]:
        """Drain, then snapshot (a riverbed extension: IBM cannot checkpoint these windows)."""
        self.drain()
        return self.snapshot()

    def reset(self, state: Mapping[str, Any] | None) -> None:
        """Reset to a checkpoint, or with None to the initial state; raises no event."""
        if state is None:
            self.reset_to_initial_state()
        else:
            self.restore(state)

    def reset_to_initial_state(self) -> None:
        """Discard every pane and the watermark, without events: as if just created."""
        self._reset_state()

