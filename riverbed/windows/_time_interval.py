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

Tuples that arrive with an event time before the drop point (watermark minus
discardAge) are dropped as SPL drops them, and counted in `dropped`; tuples
that fall in no pane (a period longer than the duration) are counted in
`unassigned`. Neither raises an event.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from ._errors import SnapshotError, WatermarkError, WindowClauseError, WindowTupleError
from ._events import EventType, Listener, PaneEvent, PaneTiming, StreamWindowEvent
from ._flavor import Flavor, rules_for
from ._keys import decode_partition_key, encode_partition_key
from ._listeners import ListenerRegistry, Partitioner
from ._policy import EVENT_TIME_MAX, EVENT_TIME_MIN, TimeIntervalSpec

__all__ = ["FORMAT", "TimeIntervalWindow"]

T = TypeVar("T")

FORMAT = "riverbed.timeinterval/1"

_INCOMPLETE, _COMPLETE, _CLOSED = 0, 1, 2
_EARLY, _ON_COMPLETE, _LATE = PaneTiming.EARLY, PaneTiming.ON_COMPLETE, PaneTiming.LATE
_NO_WATERMARK = EVENT_TIME_MIN - 1  # below every event time: nothing is late or dropped yet
_ALL_TYPES = (EventType.INSERTION, EventType.INITIAL_FULL, EventType.TRIGGER, EventType.CLOSE)


class _Pane:
    """One pane: its partitions' tuples in arrival order and its trigger state."""

    __slots__ = ("end", "index", "parts", "start", "state", "timing", "updated")

    def __init__(self, start: int, end: int) -> None:
        self.start = start
        self.end = end
        self.state = _INCOMPLETE
        self.index = 0  # trigger rounds so far (SPL paneIndex)
        self.timing = _EARLY
        self.parts: dict[Hashable, list[Any]] = {}
        # Partitions that received tuples since the pane last triggered, in
        # order of their first such tuple (a dict used as an ordered set).
        self.updated: dict[Hashable, None] = {}


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
        if isinstance(spec, str):
            from ._clause import parse_window_clause

            parsed = parse_window_clause(spec)
            if not isinstance(parsed, TimeIntervalSpec):
                raise WindowClauseError(
                    f"{spec}: not a timeInterval clause; tumbling and sliding windows are "
                    "StreamWindow's")
            spec = parsed
        if not isinstance(spec, TimeIntervalSpec):
            raise WindowClauseError(f"{spec!r}: expected a TimeIntervalSpec or clause text")
        self.spec = spec
        self.flavor = rules_for(flavor).flavor
        self.resolution = resolution
        self._duration, self._period, self._discard_age, self._offset = spec.ticks(resolution)
        self._getter = getter
        self._event_time_name = event_time if isinstance(event_time, str) else None
        if event_time is None:
            self._event_time_of: Callable[[T], Any] | None = None
        elif isinstance(event_time, str):
            self._event_time_of = getter(event_time)
        elif callable(event_time):
            self._event_time_of = event_time
        else:
            raise WindowClauseError(
                f"event_time={event_time!r}: expected an attribute name or a function of the tuple")
        self._partitioner: Partitioner[T] = Partitioner(spec.clause(), spec.partitioned, getter)
        self._now = 0
        self._reset_state()
        if partition_by is not None:
            self.register_partitioner(partition_by)
        self._events = ListenerRegistry("timeInterval", _ALL_TYPES)
        self._listeners = self._events.handlers
        self._on_insert = self._listeners[EventType.INSERTION]  # read per tuple: no enum hashing
        for listener in listeners:
            self.register_listener(listener)

    def _reset_state(self) -> None:
        self._panes: dict[int, _Pane] = {}
        self._wm = _NO_WATERMARK
        self._drop = _NO_WATERMARK
        self.dropped = 0
        self.unassigned = 0

    # ------------------------------------------------------------- configuration

    @property
    def is_partitioned(self) -> bool:
        return self.spec.partitioned

    @property
    def watermark_value(self) -> int | None:
        """The highest watermark seen, or None before the first one."""
        return None if self._wm == _NO_WATERMARK else self._wm

    @property
    def drop_point(self) -> int | None:
        """Tuples with an event time below this are dropped; None before the first watermark."""
        return None if self._drop == _NO_WATERMARK else self._drop

    def register_listener(self, listener: Listener[T],
                          types: Iterable[EventType] | None = None) -> None:
        """Add a listener (a callable or an object with ``handle_event``) for some or all events.

        Misuse raises what `StreamWindow.register_listener` raises (see
        `riverbed.windows._listeners`); asking only for events a timeInterval
        window never raises (EVICTION, ...) is a `WindowStateError`.
        """
        self._events.register(listener, types)

    def register_partitioner(self, partition_by: str | Callable[[T], Hashable]) -> None:
        """Set how a tuple's partition key is computed: an attribute name or a function.

        Only before the window holds tuples: `WindowStateError` afterwards.
        """
        self._partitioner.set(partition_by, has_partitions=bool(self._panes))

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
        if t < self._drop:
            self.dropped += 1
            return False
        key = self._partitioner.key(tup) if self.spec.partitioned else None
        period = self._period
        start = t - (t - self._offset) % period
        low = t - self._duration
        if start <= low:
            self.unassigned += 1
            return False
        panes = self._panes
        on_insert = self._on_insert
        while start > low:
            pane = panes.get(start)
            if pane is None:
                pane = panes[start] = _Pane(start, start + self._duration)
            part = pane.parts.get(key)
            if part is None:
                pane.parts[key] = part = [tup]
            else:
                part.append(tup)
            pane.updated[key] = None
            if on_insert:
                self._emit(on_insert, pane, EventType.INSERTION, key, (tup,))
            start -= period
        return True

    def insert_batch(self, tuples: Sequence[T], event_times: Sequence[int] | None = None) -> int:
        """Insert tuples in order, as `insert` one by one would; returns how many were stored.

        If a tuple is invalid, the tuples before it stay inserted and the
        `WindowTupleError` says which failed (message, and its ``index`` attribute).
        """
        read = self._event_time_of
        partitioned = self.spec.partitioned
        key_of = self._partitioner.key_of
        if (event_times is not None or read is None or (partitioned and key_of is None)
                or self._on_insert):
            return self._insert_each(tuples, event_times)
        # `insert` inlined: the same steps, with the per-call overhead paid once per batch.
        # Any tuple that is not plainly valid goes through `insert`, which says what is wrong.
        panes = self._panes
        period, duration, offset, drop = self._period, self._duration, self._offset, self._drop
        stored = 0
        for i, tup in enumerate(tuples):
            try:
                t = read(tup)
                key = key_of(tup) if partitioned else None  # type: ignore[misc]
                hash(key)
            except Exception:  # `insert` below reads it again and raises the typed error
                t = None
            if type(t) is not int or t < 0 or t > EVENT_TIME_MAX:
                stored += self._insert_one(tup, None, i)
                continue
            if t < drop:
                self.dropped += 1
                continue
            start = t - (t - offset) % period
            low = t - duration
            if start <= low:
                self.unassigned += 1
                continue
            while start > low:
                pane = panes.get(start)
                if pane is None:
                    pane = panes[start] = _Pane(start, start + duration)
                part = pane.parts.get(key)
                if part is None:
                    pane.parts[key] = [tup]
                else:
                    part.append(tup)
                pane.updated[key] = None
                start -= period
            stored += 1
        return stored

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
            raise error from None

    def _time_of(self, tup: T) -> Any:
        reader = self._event_time_of
        if reader is None:
            raise WindowTupleError("no event time: give the window event_time= (an attribute name "
                                   "or a function) or pass event_time to insert()")
        try:
            return reader(tup)
        except (KeyError, IndexError, AttributeError, TypeError):
            name = self._event_time_name or "event time"
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
            value = self._check_watermark(value)
        if value <= self._wm:
            return False
        self._wm = value
        age = self._discard_age
        self._drop = value - age if value >= age else 0
        panes = self._panes
        if not panes:
            return True
        for start in sorted(panes):
            pane = panes[start]
            if pane.end > value:
                break  # all panes have the same duration: later ones end later
            self._advance_pane(pane, value)
            if pane.state == _CLOSED:
                del panes[start]
        return True

    def _check_watermark(self, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise WatermarkError(f"watermark {value!r}: expected an integer number of "
                                 f"{self.resolution} ticks (EVENT_TIME_MAX for the final one)")
        if value < EVENT_TIME_MIN or value > EVENT_TIME_MAX:
            raise WatermarkError(f"watermark {value} is outside the int64 range of ticks")
        return int(value)

    def _advance_pane(self, pane: _Pane, wm: int) -> None:
        listeners = self._listeners
        if pane.state == _INCOMPLETE:
            pane.state = _COMPLETE
            on_full = listeners[EventType.INITIAL_FULL]
            if on_full:
                for key, part in list(pane.parts.items()):
                    self._emit(on_full, pane, EventType.INITIAL_FULL, key, part)
        if pane.timing is _EARLY:
            pane.timing = _ON_COMPLETE
        if pane.updated:
            updated, pane.updated = pane.updated, {}
            on_trigger = listeners[EventType.TRIGGER]
            if on_trigger:
                parts = pane.parts
                for key in updated:
                    self._emit(on_trigger, pane, EventType.TRIGGER, key, parts[key])
            pane.timing = _LATE
            pane.index += 1
        if wm - pane.end >= self._discard_age:
            on_close = listeners[EventType.CLOSE]
            if on_close:
                for key, part in list(pane.parts.items()):
                    self._emit(on_close, pane, EventType.CLOSE, key, part)
            pane.state = _CLOSED

    def _emit(self, handlers: list[Callable[[StreamWindowEvent[T]], None]], pane: _Pane,
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
            raise ValueError(f"punctuation {kind!r}: expected 'window' or 'final'")

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
        return [(s, self._panes[s].end) for s in sorted(self._panes)]

    def partitions(self) -> list[Hashable]:
        """The partition keys present in at least one live pane."""
        seen: dict[Hashable, None] = {}
        for s in sorted(self._panes):
            seen.update(dict.fromkeys(self._panes[s].parts))
        return list(seen)

    def contents(self, pane_start: int, partition: Hashable | None = None) -> list[T]:
        """A copy of one pane partition's tuples, in arrival order (empty if none)."""
        pane = self._panes.get(pane_start)
        if pane is None:
            return []
        return list(pane.parts.get(partition, ()))

    # ------------------------------------------------------ snapshot and reset

    def snapshot(self) -> dict[str, Any]:
        """The window's state as plain data (msgpack/JSON-able when the tuples and keys are).

        A tuple that belongs to several panes is stored once.
        """
        table: list[Any] = []
        index_of: dict[int, int] = {}
        panes: list[Any] = []
        for s in sorted(self._panes):
            pane = self._panes[s]
            parts = []
            for key, tuples in pane.parts.items():
                refs = []
                for tup in tuples:
                    i = index_of.get(id(tup))
                    if i is None:
                        i = index_of[id(tup)] = len(table)
                        table.append(tup)
                    refs.append(i)
                parts.append([encode_partition_key(key), refs])
            panes.append({
                "start": pane.start,
                "complete": pane.state == _COMPLETE,
                "index": pane.index,
                "timing": pane.timing.value,
                "parts": parts,
                "updated": [encode_partition_key(k) for k in pane.updated],
            })
        return {
            "format": FORMAT,
            "clause": self.spec.clause(),
            "resolution": self.resolution,
            "watermark": self.watermark_value,
            "dropped": self.dropped,
            "unassigned": self.unassigned,
            "tuples": table,
            "panes": panes,
        }

    def restore(self, state: Mapping[str, Any]) -> None:
        """Replace the window's state with a snapshot taken from a window with the same clause."""
        new = _decode(self, state)
        self._panes, self._wm, self._drop, self.dropped, self.unassigned = new

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


def _decode(w: TimeIntervalWindow[Any], state: Mapping[str, Any]
            ) -> tuple[dict[int, _Pane], int, int, int, int]:
    """Validate a snapshot fully before anything of the window changes."""
    if not isinstance(state, Mapping):
        raise SnapshotError(f"a timeInterval snapshot is a mapping, got {type(state).__name__}")
    if state.get("format") != FORMAT:
        raise SnapshotError(f"not a timeInterval window snapshot: format {state.get('format')!r}, "
                            f"expected {FORMAT!r}")
    if state.get("clause") != w.spec.clause():
        raise SnapshotError(f"snapshot of window {state.get('clause')!r} cannot restore window "
                            f"{w.spec.clause()!r}")
    if state.get("resolution") != w.resolution:
        raise SnapshotError(f"snapshot at resolution {state.get('resolution')!r}, window at "
                            f"{w.resolution!r}")
    try:
        wm = state["watermark"]
        counts = int(state["dropped"]), int(state["unassigned"])
        table = list(state["tuples"])
        raw_panes = list(state["panes"])
    except (KeyError, TypeError, ValueError) as exc:
        raise SnapshotError(f"timeInterval snapshot is missing or has a bad field: {exc!r}") from None
    if wm is not None and (isinstance(wm, bool) or not isinstance(wm, int)):
        raise SnapshotError(f"snapshot field 'watermark': expected an integer or null, got {wm!r}")
    watermark = _NO_WATERMARK if wm is None else wm
    age = w._discard_age
    drop = _NO_WATERMARK if wm is None else (wm - age if wm >= age else 0)
    panes: dict[int, _Pane] = {}
    period, offset = w._period, w._offset
    for n, raw in enumerate(raw_panes):
        where = f"snapshot pane {n}"
        try:
            start = raw["start"]
            if isinstance(start, bool) or not isinstance(start, int) or (start - offset) % period:
                raise SnapshotError(f"{where}: start {start!r} is not on this window's pane grid")
            pane = _Pane(start, start + w._duration)
            pane.state = _COMPLETE if raw["complete"] else _INCOMPLETE
            pane.index = int(raw["index"])
            pane.timing = PaneTiming(raw["timing"])
            for key, refs in raw["parts"]:
                pane.parts[decode_partition_key(key)] = [table[i] for i in refs]
            for key in raw["updated"]:
                k = decode_partition_key(key)
                if k not in pane.parts:
                    raise SnapshotError(f"{where}: updated partition {key!r} holds no tuples")
                pane.updated[k] = None
        except SnapshotError:
            raise
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise SnapshotError(f"{where}: bad field: {exc!r}") from None
        if start in panes:
            raise SnapshotError(f"{where}: pane starting at {start} appears twice")
        panes[start] = pane
    return panes, watermark, drop, counts[0], counts[1]
