"""Timers of a window, on time pushed in by the host.

The window library never reads a clock. The host tells the window what time
it is (`StreamWindow.advance_time`), and the window fires every timer due at
or before that time, in time order, each at its own due time. Timers due at
the same instant fire in the order they were armed. A cancelled timer stays in
the queue until it surfaces (lazy deletion), which keeps cancel O(1).

Entries are ``(due, seq, timer)`` tuples: ``seq`` (the arming order) is
unique, so ordering compares two ints in C and never reaches the timer. Most
timers are armed in time order (a periodic tick re-armed one period after
now); those go to a FIFO lane instead of the heap, so arming and firing them
costs O(1); the rest go to the heap, and the earliest of the two heads fires
first. A timer that fired or was cancelled can be armed again
(`TimerQueue.rearm`), which saves building a new timer and action for
periodic work; the entry it had is then stale, recognised because its
``seq`` is no longer the timer's.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable

__all__ = ["Timer", "TimerQueue"]

_heappush = heapq.heappush
_heappop = heapq.heappop


class Timer:
    """One armed timer. ``cancel()`` makes sure it never fires."""

    __slots__ = ("action", "alive", "due", "seq")

    def __init__(self, due: int, seq: int, action: Callable[[], None]) -> None:
        self.due = due
        self.seq = seq
        self.action = action
        self.alive = True

    def cancel(self) -> None:
        self.alive = False


Entry = tuple[int, int, Timer]


class TimerQueue:
    """Timers ordered by (due time, arming order): a heap plus a FIFO lane of in-order arms.

    ``heap`` and ``lane`` are public for the window's hot path only (see
    `StreamWindow.advance_time`): when neither head is due, nothing fires.
    """

    __slots__ = ("_seq", "heap", "lane")

    def __init__(self) -> None:
        self.heap: list[Entry] = []
        self.lane: deque[Entry] = deque()
        self._seq = 0

    def _push(self, entry: Entry) -> None:
        lane = self.lane
        if not lane or lane[-1][0] <= entry[0]:
            lane.append(entry)  # (due, seq) stays sorted: seq only grows
        else:
            _heappush(self.heap, entry)

    def arm(self, due: int, action: Callable[[], None]) -> Timer:
        self._seq = seq = self._seq + 1
        timer = Timer(due, seq, action)
        self._push((due, seq, timer))
        return timer

    def rearm(self, timer: Timer, due: int) -> None:
        """Arm ``timer`` again (it must have fired or been cancelled), keeping its action."""
        self._seq = seq = self._seq + 1
        timer.due = due
        timer.seq = seq
        timer.alive = True
        lane = self.lane
        if not lane or lane[-1][0] <= due:
            lane.append((due, seq, timer))
        else:
            _heappush(self.heap, (due, seq, timer))

    def pop_entry(self, now: int) -> Entry | None:
        """Remove and return the earliest entry (live or stale) due at or before ``now``."""
        heap, lane = self.heap, self.lane
        if heap:
            if lane and lane[0] < heap[0]:
                return lane.popleft() if lane[0][0] <= now else None
            return _heappop(heap) if heap[0][0] <= now else None
        if lane and lane[0][0] <= now:
            return lane.popleft()
        return None

    def next_due(self) -> int | None:
        """Due time of the earliest live timer, or None."""
        heap, lane = self.heap, self.lane
        while heap and not _live(heap[0]):
            _heappop(heap)
        while lane and not _live(lane[0]):
            lane.popleft()
        if heap and lane:
            return min(heap[0][0], lane[0][0])
        if heap:
            return heap[0][0]
        return lane[0][0] if lane else None

    def pop_due(self, now: int) -> Timer | None:
        """Remove and return the earliest live timer due at or before ``now``."""
        while (entry := self.pop_entry(now)) is not None:
            timer = entry[2]
            if _live(entry):
                timer.alive = False
                return timer
        return None

    def cancel_all(self) -> None:
        for entries in (self.heap, self.lane):
            for _, _, timer in entries:
                timer.alive = False
            entries.clear()


def _live(entry: Entry) -> bool:
    timer = entry[2]
    return timer.alive and timer.seq == entry[1]
