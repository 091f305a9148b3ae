"""The events a replay records, and the JSON lines `riverbed trace` prints for them.

Every event carries the index of the step that raised it (-1: the port
becoming ready) and ``at``, the clock time at which it was raised, whatever
raised it: a tuple, a timer, the port becoming ready, a reset. Hosts report
window events to an `EventLog` with the time of their own clock; the log
stamps the step the interpreter is on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..windows import EventType, PaneEvent, StreamWindowEvent
from ._steps import NS_PER_SECOND

if TYPE_CHECKING:
    from ._cases import Case

__all__ = ["Event", "EventLog", "trace_records"]


@dataclass(frozen=True, slots=True)
class Event:
    """One window event as the trace reports it: ids of the tuples, seconds for times.

    ``pane`` (start, end), ``pane_index`` and ``pane_timing`` only for the
    panes of timeInterval windows, the last two only on TRIGGER.
    """

    event: str
    partition: Any
    tuples: tuple[Any, ...]
    step: int
    at: float
    pane: tuple[float, float] | None = None
    pane_index: int | None = None
    pane_timing: str | None = None

    @classmethod
    def of(cls, event: StreamWindowEvent[Any], step: int, at: int) -> Event:
        """The record of a window event raised by step ``step`` at clock time ``at`` (ns)."""
        ids = tuple(t.get("id") for t in event.tuples)
        seconds = at / NS_PER_SECOND
        if not isinstance(event, PaneEvent):
            return cls(event.type.value, event.partition, ids, step, seconds)
        pane = (event.interval_start / NS_PER_SECOND, event.interval_end / NS_PER_SECOND)
        if event.type is EventType.TRIGGER:
            return cls(event.type.value, event.partition, ids, step, seconds, pane,
                       event.pane_index, event.pane_timing.value)
        return cls(event.type.value, event.partition, ids, step, seconds, pane)

    def at_step(self, step: int) -> Event:
        return replace(self, step=step)

    def as_json(self, *, step: bool = True) -> dict[str, Any]:
        """The JSON object of FORMAT.md: event, partition, tuples, step, the pane fields, at."""
        out: dict[str, Any] = {"event": self.event, "partition": self.partition,
                               "tuples": list(self.tuples)}
        if step:
            out["step"] = self.step
        if self.pane is not None:
            out["pane"] = list(self.pane)
            if self.pane_timing is not None:
                out["pane_timing"] = self.pane_timing
                out["pane_index"] = self.pane_index
        out["at"] = self.at
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Event:
        pane = data.get("pane")
        return cls(data["event"], data["partition"], tuple(data["tuples"]), data.get("step", -1),
                   data["at"], None if pane is None else (pane[0], pane[1]), data.get("pane_index"),
                   data.get("pane_timing"))


class EventLog:
    """Where a host reports window events. The interpreter sets ``step`` before each step and
    mutes the log where events are not part of the case (a stopped PE, a new PE starting, a
    host's own end after the last step)."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.step = -1
        self.muted = False

    def record(self, event: StreamWindowEvent[Any], at: int) -> None:
        """A window event raised at clock time ``at`` (ns)."""
        if not self.muted:
            self.events.append(Event.of(event, self.step, at))


def trace_records(case: Case, events: Iterable[Event]) -> list[dict[str, Any]]:
    """What `riverbed trace` prints for a case's events: every field, with one exception.

    An EVICTION of a sliding window names no ``step`` in a case whose
    expectation names none. Such a case lists the evictions of successive
    steps side by side (``A-sliding-time5-seed``: B at 7.001 s, C at
    9.501 s), and the format's checker (``run.py``) merges adjacent evictions
    of one partition unless both name different steps, so it merges the
    expected pair and, with steps printed, not the actual one.
    """
    bare = case.sliding and not case.names_steps
    return [e.as_json(step=not (bare and e.event == "EVICTION")) for e in events]
