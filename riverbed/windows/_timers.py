"""Timers of a window, on time pushed in by the host.

The window library never reads a clock. The host tells the window what time
it is (`StreamWindow.advance_time`), and the window fires every timer due at
or before that time, in time order, each at its own due time. Timers due at
the same instant fire in the order they were armed. A cancelled timer stays in
the heap until it surfaces (lazy deletion), which keeps cancel O(1).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

__all__ = ["Timer", "TimerQueue"]


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

    def __lt__(self, other: Timer) -> bool:
        return (self.due, self.seq) < (other.due, other.seq)


class TimerQueue:
    """A heap of timers ordered by (due time, arming order)."""

    __slots__ = ("_heap", "_seq")

    def __init__(self) -> None:
        self._heap: list[Timer] = []
        self._seq = 0

    def arm(self, due: int, action: Callable[[], None]) -> Timer:
        self._seq += 1
        timer = Timer(due, self._seq, action)
        heapq.heappush(self._heap, timer)
        return timer

    def next_due(self) -> int | None:
        """Due time of the earliest live timer, or None."""
        heap = self._heap
        while heap and not heap[0].alive:
            heapq.heappop(heap)
        return heap[0].due if heap else None

    def pop_due(self, now: int) -> Timer | None:
        """Remove and return the earliest live timer due at or before ``now``."""
        heap = self._heap
        while heap:
            timer = heap[0]
            if not timer.alive:
                heapq.heappop(heap)
                continue
            if timer.due > now:
                return None
            heapq.heappop(heap)
            timer.alive = False
            return timer
        return None

    def cancel_all(self) -> None:
        for timer in self._heap:
            timer.alive = False
        self._heap.clear()
