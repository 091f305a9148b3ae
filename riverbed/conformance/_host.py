"""What a host must do to replay a case: one method per kind of step.

A host is a place a windowed port can live: the window library alone
(`WindowHost`), a one-operator job in the asyncio runtime, the Spark
bridge's keyed stage. The interpreter (`Replay`) calls `start` once, then one
method per step, in order; what the steps mean for checkpoints, restarts
and resets is the interpreter's business, not the host's. The host reports
every window event to the `EventLog` it was given, with the time of its own
clock when the event was raised.

Times are integer nanoseconds. A host that cannot act as the steps come (the
Spark stage turns them into rows of one query) may record what to do and
report the events later, if it keeps their steps and the log's muting.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Literal, Protocol

from ._events import EventLog
from ._steps import TupleStep

__all__ = ["Host"]


class Host(Protocol):
    def start(self, log: EventLog) -> None:
        """The port becomes ready at clock time 0; report every window event to ``log``."""

    def insert(self, step: TupleStep) -> None:
        """A tuple arrives (with its event time for a timeInterval window)."""

    def advance(self, now: int) -> None:
        """The clock moves to ``now``; timers due by then fire first, each at its own time."""

    def punctuate(self, kind: Literal["window", "final"]) -> None:
        """A window or final punctuation mark arrives."""

    def watermark(self, value: int) -> None:
        """The operator's event-time watermark advances to ``value``."""

    def evict_partition(self, partition: Hashable) -> None:
        """The operator evicts one partition of its window."""

    def checkpoint(self) -> object:
        """Drain and checkpoint the window; what `reset` gets back to restore it."""

    def stop(self) -> None:
        """The PE stops (a restart step): the clock still moves, nothing else happens."""

    def new_instance(self) -> None:
        """A new PE starts at the current clock: a fresh window whose port becomes ready now."""

    def reset(self, state: object | None) -> None:
        """Reset the window to a `checkpoint` result, or to its initial state (None)."""
