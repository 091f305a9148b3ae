"""Clocks: the only place the runtime learns what time it is.

`RealClock` reads the wall clock (``time.time_ns``: epoch-based, so window
time policies keep following wall-clock time across a restart, SPL rule
C7). `VirtualClock` is for tests and for replaying traces: time stands still
while any task can run and jumps straight to the next timer when every task
waits, like Trio's autojump clock. A graph with time windows then runs
deterministically and as fast as the CPU allows, and no test ever sleeps.

Times are integer nanoseconds.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import itertools
import math
import operator
import selectors
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol, TypeVar, TypeVarTuple, Unpack

__all__ = ["Clock", "RealClock", "TimerHandle", "VirtualClock", "run_virtual"]

R = TypeVar("R")
_Ts = TypeVarTuple("_Ts")
_ROUNDING_NS = 2


def _deadline_ns(when: object) -> int:
    """A deadline as integer ns: an int as is, a finite float rounded to the nearest ns (``start
    + i * 0.01e9``); anything else is refused, naming it. Both clocks take deadlines through
    here, so a float one behaves alike on each, and the clock's time stays an int (checkpoints
    store it). (An int first: every timer comes through here, and the Protocol check below
    costs 3.5 us a call.)"""
    if type(when) is int:
        return when
    if isinstance(when, float):
        if not math.isfinite(when):
            raise ValueError(f"a deadline is a finite time in ns, got {when!r}")
        return round(when)
    if hasattr(type(when), "__index__") and not isinstance(when, bool):
        return operator.index(when)  # type: ignore[arg-type]  # an int (numpy's too)
    raise TypeError(f"a deadline is a time in ns (int), got {when!r} ({type(when).__name__})")


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    """What the runtime needs from time: read it, and be woken at an instant."""

    def now(self) -> int:
        """The current time in ns."""
        ...

    def call_at(self, when: int, callback: Callable[[], None]) -> TimerHandle:
        """Run ``callback`` in the event loop once the clock reaches ``when`` (ns)."""
        ...

    async def sleep_until(self, when: int) -> None:
        """Return once the clock has reached ``when`` (ns)."""
        ...

    def resume_at(self, when: int) -> None:
        """A job restored from a checkpoint taken at ``when`` (ns) goes on from there: its
        windows refuse a snapshot from their future, and its timers and pacing continue the
        checkpointed run's. Called before any operator is activated."""
        ...


class RealClock:
    """Wall-clock time, for production.

    A job restored from a checkpoint taken at a later time than the wall clock's now (the
    clock stepped back, or the checkpoint directory came from a machine whose clock is ahead)
    runs ``ahead`` of the wall clock by the difference: its windows' state is of that time, and
    time must not go back for them (they refused the snapshot, and the restart failed until the
    wall clock caught up)."""

    def __init__(self) -> None:
        self.ahead = 0  # ns added to the wall clock's time (`resume_at`)

    def now(self) -> int:
        return time.time_ns() + self.ahead

    def resume_at(self, when: int) -> None:
        """Run at least at ``when`` (a restored checkpoint's time) from now on."""
        self.ahead = max(self.ahead, when - time.time_ns())

    def call_at(self, when: int, callback: Callable[[], None]) -> TimerHandle:
        when = _deadline_ns(when)
        delay = max(0.0, (when - self.now()) / 1e9)
        return asyncio.get_running_loop().call_later(delay, callback)

    async def sleep_until(self, when: int) -> None:
        when = _deadline_ns(when)
        # Always yield once, even past the deadline: a caller looping on a deadline that is
        # already behind (a tiny period) must still let the other tasks and signals run.
        await asyncio.sleep(0)
        while (delay := when - self.now()) > 0:
            await asyncio.sleep(delay / 1e9)


class VirtualClock:
    """Simulated time that jumps to the next timer whenever the event loop is idle.

    Use it with `run_virtual`, which runs a coroutine on an event loop whose
    own notion of time is this clock, so ``asyncio.sleep`` and timeouts in
    user code follow it too. ``start`` is the initial time in ns.
    """

    def __init__(self, start: int = 0) -> None:
        self._now = start

    def now(self) -> int:
        return self._now

    def resume_at(self, when: int) -> None:
        """Jump forward to ``when`` (never back): started at 0 again, a restored job's windows
        refused their snapshots, taken later (SnapshotError), and the restart failed."""
        self._now = max(self._now, when)

    def call_at(self, when: int, callback: Callable[[], None]) -> TimerHandle:
        when = _deadline_ns(when)  # (a float one made the clock's time a float)
        loop = asyncio.get_running_loop()
        if not isinstance(loop, VirtualTimeLoop) or loop.clock is not self:
            raise RuntimeError("a VirtualClock needs its own event loop: run the job with run_virtual()")

        def fire() -> None:
            # The loop woke for this timer: time is exactly its deadline. Past the float horizon
            # (see `VirtualTimeLoop.time`) a jump may miss it by a nanosecond or two; nothing ran
            # in between.
            if self._now < when or self._now - when <= _ROUNDING_NS:
                self._now = when
            callback()

        return loop.call_at(loop.seconds(when), fire)

    async def sleep_until(self, when: int) -> None:
        when = _deadline_ns(when)
        if when <= self._now:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not fut.done():
                fut.set_result(None)

        handle = self.call_at(when, wake)
        try:
            await fut
        finally:
            handle.cancel()

    def _jump(self, timeout: float) -> None:
        """Advance to the loop's next timer (float seconds, rounded up to whole ns).

        The loop reports time half a nanosecond late (`VirtualTimeLoop.time`), so a timer
        ``k`` ns ahead is ``k - 0.5`` ns of timeout, and rounding up lands on it exactly even
        with the float error of the subtraction.
        """
        self._now += max(1, math.ceil(timeout * 1e9))

class _JumpingSelector(selectors.BaseSelector):
    """A selector that, instead of blocking until a timer is due, moves the virtual clock there."""

    def __init__(self, clock: VirtualClock) -> None:
        self._inner = selectors.DefaultSelector()
        self._clock = clock
        self.idle: Callable[[], bool] = lambda: False

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._inner.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._inner.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._inner.modify(fileobj, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            return self._inner.select(None)  # no timer at all: only I/O can wake us
        ready = self._inner.select(0)
        if ready:
            return ready
        if timeout > 0:
            self._clock._jump(timeout)
        elif self.idle():
            # Past the float horizon a timer's deadline and the loop's time can round to the
            # same float: it is neither ahead nor due. Step until the float moves.
            self._clock._now += 1
        return []

    def close(self) -> None:
        self._inner.close()

    def get_key(self, fileobj: Any) -> selectors.SelectorKey:
        return self._inner.get_key(fileobj)

    def get_map(self) -> Any:
        return self._inner.get_map()


class _SequencedTimer(asyncio.TimerHandle):
    """A timer ordered by its time, then by when it was set."""

    __slots__ = ("_sequence",)

    def __init__(self, when: float, callback: Callable[..., object], args: Sequence[Any],
                 loop: asyncio.AbstractEventLoop, context: contextvars.Context | None, *,
                 sequence: int) -> None:
        super().__init__(when, callback, args, loop, context=context)
        self._sequence = sequence

    def __lt__(self, other: object) -> bool:
        if isinstance(other, _SequencedTimer) and self.when() == other.when():
            return self._sequence < other._sequence
        return super().__lt__(other)  # type: ignore[operator]


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop whose time is a `VirtualClock`.

    asyncio's loop counts time in float seconds and runs every timer due before
    ``time() + clock resolution``. With virtual time that would run a timer one
    nanosecond ahead in the same loop turn as the work ready now, before that work
    and what it schedules: the time would move on while there is still work at the
    present instant (an eviction due at 8.300000001 s overtaking a tuple that arrived
    at 8.3 s). So the resolution is zero and the loop's time is half a nanosecond
    past the clock's: timers due now run, timers due a nanosecond later wait until
    every task waits, as virtual time promises. Seconds count from the clock's time
    when the loop was made, so a float resolves well under half a nanosecond for
    2**20 s (12 days) of virtual time; beyond that, timers still run in order but
    may land a few nanoseconds off their deadline.
    """

    def __init__(self, clock: VirtualClock) -> None:
        selector = _JumpingSelector(clock)
        super().__init__(selector=selector)
        self.clock = clock
        self._origin = clock._now
        self._clock_resolution = 0.0
        self._sequence = itertools.count()
        # asyncio asks the selector not to wait (timeout 0) when callbacks are ready, when it is
        # stopping, and when a timer is due: only the last, with nothing else to run, is stuck.
        selector.idle = lambda: not self._ready and not self._stopping  # type: ignore[attr-defined]

    def time(self) -> float:
        return (self.clock._now - self._origin + 0.5) / 1e9

    def call_at(self, when: float, callback: Callable[[Unpack[_Ts]], object], *args: *_Ts,
                context: contextvars.Context | None = None) -> asyncio.TimerHandle:
        """asyncio's `call_at`, with timers due at one instant run in the order they were set:
        the heap left their order to its shape, so a timer set for another instant (a crash
        test's, a checkpoint's) changed which of two sources paced alike ran first, and a
        restarted job's output differed from the uninterrupted one's at such ties (a review)."""
        self._check_closed()  # type: ignore[attr-defined]
        timer = _SequencedTimer(when, callback, args, self, context, sequence=next(self._sequence))
        heapq.heappush(self._scheduled, timer)  # type: ignore[attr-defined]
        timer._scheduled = True  # type: ignore[attr-defined]
        return timer

    def call_later(self, delay: float, callback: Callable[[Unpack[_Ts]], object], *args: *_Ts,
                   context: contextvars.Context | None = None) -> asyncio.TimerHandle:
        # From the clock's own instant, not the half-nanosecond-late `time()`: ``sleep(0.001)``
        # lands exactly 1 ms on.
        return self.call_at(self.seconds(self.clock._now) + delay, callback, *args, context=context)

    def seconds(self, when: int) -> float:
        """The loop time of clock time ``when`` (ns)."""
        return (when - self._origin) / 1e9


def run_virtual(main: Coroutine[Any, Any, R], clock: VirtualClock | None = None) -> R:
    """Run a coroutine to completion on virtual time (a fresh `VirtualClock` unless given)."""
    loop = VirtualTimeLoop(clock or VirtualClock())
    try:
        return loop.run_until_complete(main)
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()
