"""The window library as a host: the case's window alone, driven directly.

The window's own clock is the host's clock: the steps move it with
`advance_time`, and a timer's events are raised with the clock at the timer's
due time, so ``window.now`` is the time each event is raised at.
"""

from __future__ import annotations

import json
from collections.abc import Hashable
from typing import Any, Literal

from ..windows import (
    EventType,
    StreamWindow,
    StreamWindowEvent,
    TimeIntervalSpec,
    TimeIntervalWindow,
    WindowError,
)
from ._cases import Case
from ._events import EventLog
from ._steps import CaseError, TupleStep

__all__ = ["WindowHost"]

AnyWindow = StreamWindow[dict[str, Any]] | TimeIntervalWindow[dict[str, Any]]

# The cases list the panes' events only, not a timeInterval window's per-pane INSERTIONs.
_PANE_EVENTS = (EventType.INITIAL_FULL, EventType.TRIGGER, EventType.CLOSE)


class WindowHost:
    """Replays a case on a `StreamWindow` or `TimeIntervalWindow` of the given flavor."""

    def __init__(self, case: Case, flavor: str = "java") -> None:
        """Raises `CaseError` if the flavor cannot build the case's window (the Java one has no
        sliding count(0) window, say): other hosts build it to learn that before they start."""
        self.case = case
        self.flavor = flavor
        self.log = EventLog()
        try:
            self.window: AnyWindow = self._make()
        except WindowError as exc:
            raise CaseError(f"case {case.name}: {exc}") from None

    def _make(self) -> AnyWindow:
        case, spec = self.case, self.case.spec
        window: AnyWindow
        if isinstance(spec, TimeIntervalSpec):
            window = TimeIntervalWindow(spec, flavor=self.flavor, partition_by=case.partition_by)
            window.register_listener(self._report, _PANE_EVENTS)
        else:
            window = StreamWindow(spec, flavor=self.flavor, partition_by=case.partition_by,
                                  attribute_types=case.schema, default_partition=case.default_partition)
            window.register_listener(self._report)
        return window

    def _report(self, event: StreamWindowEvent[Any]) -> None:
        self.log.record(event, event.window.now)

    def start(self, log: EventLog) -> None:
        self.log = log
        self.window.activate(0)

    def insert(self, step: TupleStep) -> None:
        if isinstance(self.window, TimeIntervalWindow):
            self.window.insert(step.tuple(), step.event_time)
        else:
            self.window.insert(step.tuple())

    def advance(self, now: int) -> None:
        self.window.advance_time(now)

    def punctuate(self, kind: Literal["window", "final"]) -> None:
        self.window.punctuate(kind)

    def watermark(self, value: int) -> None:
        assert isinstance(self.window, TimeIntervalWindow)  # parse_case checked the step's kind
        self.window.watermark(value)

    def evict_partition(self, partition: Hashable) -> None:
        assert isinstance(self.window, StreamWindow)
        self.window.evict_partition(partition)

    def checkpoint(self) -> object:
        # A JSON round trip proves the snapshot is plain data, as a store would hold it.
        return json.loads(json.dumps(self.window.checkpoint()))

    def stop(self) -> None:
        pass  # the window just stays as it is; the interpreter no longer counts its events

    def new_instance(self) -> None:
        now = self.window.now
        self.window = self._make()
        self.window.activate(now)

    def reset(self, state: object | None) -> None:
        assert state is None or isinstance(state, dict)  # what `checkpoint` returned
        self.window.reset(state)
