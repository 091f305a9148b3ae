"""A timeInterval window's configuration and state, apart, and the state as snapshot data.

As for tumbling and sliding windows (``_config.py``, ``_state.py``), a
`TimeIntervalWindow` keeps what it was built with in a frozen
`TimeIntervalConfig` (the clause, its pane geometry in ticks, the event-time
reader) and what a checkpoint must keep in a `TimeIntervalState`: the live
panes with their partitions' tuples and trigger state, the watermark, and the
counts of dropped and unassigned tuples. The drop point (watermark minus
discardAge) is derived from the watermark; the host's clock and the wiring
(listeners, partitioner) are not stored.

`encode` stores a tuple that belongs to several panes once (a table of
tuples, panes referring to it by index) and keys through
`encode_partition_key`; `decode` validates the whole snapshot before anything
is built. The format is ``riverbed.timeinterval/1``, unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ._clause import same_clause
from ._errors import SnapshotError, WindowClauseError
from ._events import PaneTiming
from ._flavor import Flavor, rules_for
from ._keys import decode_partition_key, encode_partition_key
from ._policy import EVENT_TIME_MIN, TimeIntervalSpec

__all__ = [
    "CLOSED", "COMPLETE", "FORMAT", "INCOMPLETE", "NO_WATERMARK", "Pane", "TimeIntervalConfig",
    "TimeIntervalState", "decode", "encode",
]

FORMAT = "riverbed.timeinterval/1"

INCOMPLETE, COMPLETE, CLOSED = 0, 1, 2
NO_WATERMARK = EVENT_TIME_MIN - 1  # below every event time: nothing is late or dropped yet


class Pane:
    """One pane: its partitions' tuples in arrival order and its trigger state."""

    __slots__ = ("end", "fresh", "index", "parts", "start", "state", "timing", "updated")

    def __init__(self, start: int, end: int) -> None:
        self.start = start
        self.end = end
        self.state = INCOMPLETE
        self.index = 0  # trigger rounds so far (SPL paneIndex)
        self.timing = PaneTiming.EARLY
        self.parts: dict[Hashable, list[Any]] = {}
        # Partitions that received tuples since the pane last triggered, in
        # order of their first such tuple (a dict used as an ordered set).
        self.updated: dict[Hashable, None] = {}
        # Never triggered: every partition in ``parts`` is updated, in its order, so inserts
        # leave ``updated`` alone (a dict store a tuple saved); see `updated_parts`.
        self.fresh = True

    def updated_parts(self) -> dict[Hashable, Any]:
        """The partitions updated since the pane last triggered, in order (keys only count)."""
        return self.parts if self.fresh else self.updated


@dataclass(frozen=True, slots=True, eq=False)
class TimeIntervalConfig:
    """What a `TimeIntervalWindow` was built with: the clause and its pane grid in ticks.

    ``event_time_of`` reads a tuple's event time (None: the host passes it to
    ``insert``); ``event_time_name`` is the attribute's name, for errors.
    """

    spec: TimeIntervalSpec
    flavor: Flavor
    resolution: str
    duration: int
    period: int
    discard_age: int
    offset: int
    event_time_of: Callable[[Any], Any] | None
    event_time_name: str | None
    getter: Callable[[str], Callable[[Any], Any]]

    @classmethod
    def build(cls, spec: TimeIntervalSpec | str, *, event_time: str | Callable[[Any], int] | None,
              resolution: str, getter: Callable[[str], Callable[[Any], Any]],
              flavor: Flavor | str) -> TimeIntervalConfig:
        """Validate and resolve a window's arguments (see `TimeIntervalWindow`)."""
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
        flavor = rules_for(flavor).flavor
        duration, period, discard_age, offset = spec.ticks(resolution)
        if event_time is None:
            event_time_of = None
        elif isinstance(event_time, str):
            event_time_of = getter(event_time)
        elif callable(event_time):
            event_time_of = event_time
        else:
            raise WindowClauseError(
                f"event_time={event_time!r}: expected an attribute name or a function of the tuple")
        return cls(spec, flavor, resolution, duration, period, discard_age, offset, event_time_of,
                   event_time if isinstance(event_time, str) else None, getter)

    def drop_point(self, watermark: int) -> int:
        """Tuples with an event time below this are dropped, once the watermark is ``watermark``."""
        if watermark == NO_WATERMARK:
            return NO_WATERMARK
        return watermark - self.discard_age if watermark >= self.discard_age else 0


@dataclass(slots=True, eq=False)
class TimeIntervalState:
    """Everything a snapshot stores of a timeInterval window: panes by start, the watermark
    (`NO_WATERMARK` before the first), and the dropped and unassigned counts."""

    panes: dict[int, Pane] = field(default_factory=dict)
    watermark: int = NO_WATERMARK
    dropped: int = 0
    unassigned: int = 0


def encode(config: TimeIntervalConfig, state: TimeIntervalState) -> dict[str, Any]:
    """The state as plain data (msgpack/JSON-able when the tuples and keys are)."""
    table: list[Any] = []
    index_of: dict[int, int] = {}
    panes: list[Any] = []
    for s in sorted(state.panes):
        pane = state.panes[s]
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
            "complete": pane.state == COMPLETE,
            "index": pane.index,
            "timing": pane.timing.value,
            "parts": parts,
            "updated": [encode_partition_key(k) for k in pane.updated_parts()],
        })
    return {
        "format": FORMAT,
        "clause": config.spec.clause(),
        "resolution": config.resolution,
        "watermark": None if state.watermark == NO_WATERMARK else state.watermark,
        "dropped": state.dropped,
        "unassigned": state.unassigned,
        "tuples": table,
        "panes": panes,
    }


def decode(config: TimeIntervalConfig, data: Mapping[str, Any]) -> TimeIntervalState:
    """The state a snapshot stores, validated whole before anything is built."""
    if not isinstance(data, Mapping):
        raise SnapshotError(f"a timeInterval snapshot is a mapping, got {type(data).__name__}")
    if data.get("format") != FORMAT:
        raise SnapshotError(f"not a timeInterval window snapshot: format {data.get('format')!r}, "
                            f"expected {FORMAT!r}")
    if not same_clause(data.get("clause"), config.spec):  # (however each was written)
        raise SnapshotError(f"snapshot of window {data.get('clause')!r} cannot restore window "
                            f"{config.spec.clause()!r}")
    if data.get("resolution") != config.resolution:
        raise SnapshotError(f"snapshot at resolution {data.get('resolution')!r}, window at "
                            f"{config.resolution!r}")
    try:
        wm = data["watermark"]
        dropped, unassigned = int(data["dropped"]), int(data["unassigned"])
        table = list(data["tuples"])
        raw_panes = list(data["panes"])
    except (KeyError, TypeError, ValueError) as exc:
        raise SnapshotError(f"timeInterval snapshot is missing or has a bad field: {exc!r}") from None
    if wm is not None and (isinstance(wm, bool) or not isinstance(wm, int)):
        raise SnapshotError(f"snapshot field 'watermark': expected an integer or null, got {wm!r}")
    panes: dict[int, Pane] = {}
    period, offset = config.period, config.offset
    for n, raw in enumerate(raw_panes):
        where = f"snapshot pane {n}"
        try:
            start = raw["start"]
            if isinstance(start, bool) or not isinstance(start, int) or (start - offset) % period:
                raise SnapshotError(f"{where}: start {start!r} is not on this window's pane grid")
            pane = Pane(start, start + config.duration)
            pane.state = COMPLETE if raw["complete"] else INCOMPLETE
            pane.index = int(raw["index"])
            pane.timing = PaneTiming(raw["timing"])
            pane.fresh = False  # ``updated`` is restored as it was written
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
    return TimeIntervalState(panes, NO_WATERMARK if wm is None else wm, dropped, unassigned)
