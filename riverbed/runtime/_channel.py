"""An operator's inbox: a bounded queue of batches, plus control items that never wait.

Every connection into an operator puts ``(connection, payload)`` entries
into the operator's one inbox, so the operator handles items one at a time
in arrival order. A payload is a list of tuples (a batch) or one control item
(punctuation, watermark, timer tick). Only batches count against the
capacity: a full inbox makes the upstream ``put`` wait (backpressure), while
punctuation and the operator's own timer ticks go in at once, so a timer can
never deadlock behind a full queue.

Batches of a feedback connection go in at once too (they count, so the operator's other
inputs wait longer): on a loop each operator waits for room in the next one's inbox, and with
both full, as soon as a loop sends more than it takes in, neither ever moved again.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from ..core import MarkedBatch

__all__ = ["Inbox"]


class Inbox:
    __slots__ = ("_batches", "_capacity", "_getter", "_items", "_putters", "discarding", "feedback",
                 "high_water", "puts_waited")

    def __init__(self, capacity: int, feedback: frozenset[int] = frozenset()) -> None:
        if capacity < 1:
            raise ValueError(f"inbox capacity {capacity}: expected >= 1 batch")
        self._capacity = capacity
        self._items: deque[tuple[int, Any]] = deque()
        self._batches = 0
        self._getter: asyncio.Future[None] | None = None
        self._putters: deque[asyncio.Future[None]] = deque()
        self.feedback = feedback  # connections that close a loop: their puts never wait
        self.high_water = 0  # the most batches ever queued at once
        self.puts_waited = 0  # how often an upstream had to wait: backpressure at work
        self.discarding = False  # its operator failed: what still comes is dropped (`discard`)

    @property
    def capacity(self) -> int:
        return self._capacity

    def __len__(self) -> int:
        return self._batches

    @property
    def idle(self) -> bool:
        """Empty, with the operator waiting for the next entry (it finished the previous ones)."""
        return not self._items and self._getter is not None

    async def put(self, connection: int, batch: list[Any]) -> None:
        """Queue a batch; wait while the inbox already holds ``capacity`` batches (unless
        ``connection`` closes a loop)."""
        if self._batches >= self._capacity and connection not in self.feedback:
            if self.discarding:  # (up to ``capacity`` batches stay, unread: a bounded waste)
                return
            self.puts_waited += 1
            while self._batches >= self._capacity:
                fut = asyncio.get_running_loop().create_future()
                self._putters.append(fut)
                try:
                    await fut
                except BaseException:
                    fut.cancel()
                    self._wake_putter()  # pass the turn on if we were woken but are leaving
                    raise
        self._batches += 1
        self.high_water = max(self.high_water, self._batches)
        self._items.append((connection, batch))
        self._wake_getter()

    def put_control(self, connection: int, item: Any) -> None:
        """Queue a control item now, in order after everything queued before it."""
        if self.discarding:
            return
        self._items.append((connection, item))
        self._wake_getter()

    async def get_host(self, connection: int) -> tuple[int, Any]:
        """The first entry of ``connection`` (the runner's own: timer ticks), skipping the
        others, which stay queued in order (an operator holding its input back)."""
        while True:
            for i, entry in enumerate(self._items):
                if entry[0] == connection:
                    del self._items[i]
                    return entry
            fut = asyncio.get_running_loop().create_future()
            self._getter = fut
            try:
                await fut
            finally:
                self._getter = None

    def feedback_left(self) -> int:
        """The tuples queued on loop connections and never read: what came round a loop after
        the operator's other inputs ended (it is not waited for, as on SPL's control ports)."""
        left = 0
        for connection, entry in self._items:
            if connection in self.feedback:
                if type(entry) is list:
                    left += len(entry)
                elif type(entry) is MarkedBatch:
                    left += entry.tuples
        return left

    def clear(self) -> None:
        """Drop every entry (a consistent region resets); producers waiting for room go on."""
        self._items.clear()
        self._batches = 0
        while self._putters:
            fut = self._putters.popleft()
            if not fut.done():
                fut.set_result(None)

    def discard(self) -> None:
        """Its operator failed, and the job drains around it: drop what is queued, and from now
        on what producers still put (they never wait), so that none waits for room forever."""
        self.discarding = True
        self.clear()

    async def get(self) -> tuple[int, Any]:
        """The next entry, waiting for one if the inbox is empty."""
        while not self._items:
            fut = asyncio.get_running_loop().create_future()
            self._getter = fut
            try:
                await fut
            finally:
                self._getter = None
        entry = self._items.popleft()
        if isinstance(entry[1], list):  # a batch, marked or not
            self._batches -= 1
            self._wake_putter()
        return entry

    def _wake_getter(self) -> None:
        getter = self._getter
        if getter is not None and not getter.done():
            getter.set_result(None)

    def _wake_putter(self) -> None:
        while self._putters:
            fut = self._putters.popleft()
            if not fut.done():
                fut.set_result(None)
                return
