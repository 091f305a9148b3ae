"""The utility operators that act on the clock: Beacon, Delay and Throttle.

All three read time from the runtime's clock (``context.now()``), never
the wall clock, so on a `VirtualClock` they are exact and tests never sleep.

- Beacon is a source: it submits a tuple, sleeps ``period``, and so on for
  ``iterations`` tuples (or forever), then a window mark, then it ends
  (the runtime sends final).
- Delay re-emits every tuple and window mark ``delay`` seconds after it
  arrived, so the gaps between items are kept; final follows ``delay``
  after it arrived, after everything else.
- Throttle paces tuples to ``rate`` per second with IBM's rate-adjustment
  scheme; final is not paced but follows every tuple.

Delay and Throttle are not sources: their handlers cannot sleep. They keep
the items still to be sent, in order, and an `OperatorTimer` wakes them on
the clock inside their own task; while they still hold items after the
input ended, they hold final punctuation back. Their snapshots hold those
items with absolute clock times (IBM's Delay drains before a checkpoint;
a synchronous ``drain`` cannot wait, so riverbed keeps them in the state
instead, and a restored operator sends them when due, or at once if the
restore comes later).

Watermarks are held with the tuples (``holds_watermarks``): Delay and
Throttle queue each input watermark behind the items that arrived before it
and send it on when it reaches the head, as IBM's operators queue them; a
watermark overtaking a held tuple would make a downstream timeInterval
window drop that tuple as late (E30).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Mapping
from typing import Any, ClassVar

from ..graph import PortLayout, Punct, Schema, Source, Watermark, WindowPunctuationMode
from ._params import OperatorParameterError
from ._utility_support import (
    OperatorTimer,
    PortRanges,
    ShapedOperator,
    fresh,
    output_schema,
    params,
    port_shape,
    seconds_ns,
    spl_default,
)

__all__ = ["Beacon", "Delay", "Throttle"]

_NS = 1_000_000_000
_YIELD_EVERY = 1024  # a Beacon without period hands control back this often
_CATCH_UP_NS = 100_000_000  # how late a wake Beacon and Throttle make up for


# ----------------------------------------------------------------------- Beacon


class Beacon(Source):
    """SPL ``Beacon``: a source of generated tuples, paced on the clock.

    ``iterations``: how many tuples (absent: forever); ``period`` (seconds
    between tuples, default 0: as fast as downstream takes them);
    ``init_delay`` (``initDelay``, seconds before the first tuple).
    ``output``: attribute -> callable of the 0-based iteration count (SPL's
    ``IterationCount()``) or constant; with a declared output schema,
    unassigned attributes take their type's default value (0, 0.0, "",
    False, empty collections), as in SPL; without one the tuple holds only
    the assigned attributes. The k-th tuple (from 0) is submitted at
    ``start + init_delay + k * period`` (IBM's sleeps ``period`` after each
    tuple, so its times drift by the time each takes). When the process was
    held up for over a period (and over 0.1 s), the next tuple goes at once
    and the pacing goes on from then: missed periods are not made up in a
    burst.
    ``trigger_count`` (``triggerCount``): every that many tuples, checkpoint
    the consistent region and wait until it committed (SPL's
    ``makeConsistent``; nothing happens when no checkpoint holds the Beacon).

    Punctuation: after the last iteration a window mark, then the source
    ends and the runtime sends final. A Beacon stopped early (job stop)
    sends no window mark. State: the iteration count (and whether the mark
    was sent), so a restored Beacon continues with the next iteration: it is
    replayable (a consistent region can start at it) as long as its
    ``output`` functions give the same tuple for the same iteration.
    """

    window_punctuation: ClassVar[WindowPunctuationMode] = "generating"
    replayable = True  # a reset restores the iteration count: the same tuples come again

    def __init__(self, *, iterations: int | None = None, period: float | None = None,
                 init_delay: float | None = None, trigger_count: int | None = None,
                 output: Mapping[str, Any] | None = None, **spl: Any) -> None:
        p = params("Beacon", {"iterations": iterations, "period": period, "init_delay": init_delay,
                              "trigger_count": trigger_count, "output": output}, spl)
        for name in ("iterations", "trigger_count"):
            v = p[name]
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0
                                  or (name == "trigger_count" and v == 0)):
                bound = ">= 1" if name == "trigger_count" else ">= 0"
                raise OperatorParameterError(f"Beacon: {name}={v!r}: expected an int {bound}")
        self.iterations: int | None = p["iterations"]
        self.trigger_count: int | None = p["trigger_count"]
        self.period_ns = seconds_ns("Beacon", "period", p["period"] or 0)
        self.init_delay_ns = seconds_ns("Beacon", "init_delay", p["init_delay"] or 0)
        out = p["output"]
        if out is not None and not isinstance(out, Mapping):
            raise OperatorParameterError(f"Beacon: output must be a mapping attribute -> callable of "
                                         f"the iteration count or constant, got {out!r}")
        self.output: dict[str, Any] = dict(out or {})
        self.count = 0
        self.marked = False
        # What a checkpoint keeps (times, not the deadline: a restart with another ``period``
        # or ``init_delay`` paces by those): when the run began, and the last tuple's slot.
        self.began: int | None = None
        self.last: int | None = None
        self._old_due: int | None = None  # the deadline a checkpoint before stop 42 kept instead
        self._template: dict[str, Any] = {}

    def check_ports(self, ports: PortLayout) -> list[str]:
        schema = ports.output_schema()
        return [] if schema is None else self._unknown(schema)

    def _unknown(self, schema: Schema) -> list[str]:
        unknown = sorted(set(self.output) - set(schema.names))
        return [f"output assigns {', '.join(map(repr, unknown))}, which the schema {schema} "
                "lacks"] if unknown else []

    def setup(self) -> None:
        port_shape(self, PortRanges(inputs=(0, 0), outputs=(1, 1)))
        schema: Schema | None = output_schema(self, 0)
        if schema is None:
            self._template = {}
            return
        for problem in self._unknown(schema):  # (a frozen graph has none: `check_ports`)
            raise OperatorParameterError(f"Beacon {self.context.name!r}: {problem}")
        self._template = {n: spl_default(t) for n, t in schema.attributes if n not in self.output}

    def make(self, iteration: int) -> dict[str, Any]:
        """The tuple of iteration ``iteration`` (0-based)."""
        tup = {k: fresh(v) for k, v in self._template.items()}
        for attr, value in self.output.items():
            tup[attr] = value(iteration) if callable(value) else value
        return tup

    async def run(self) -> None:
        ctx: Any = self.context
        now = ctx.now()
        if self.began is not None or self._old_due is not None:
            # Restored: the next tuple keeps its time, so the tuples fall into the same time
            # windows as without the restart (a restart's clock resumes at the checkpoint's
            # time on a virtual clock). After downtime on the wall clock it comes at once and
            # the pacing goes on from now: missed periods are not made up in a burst.
            if self.began is None:  # a checkpoint that kept only the deadline
                due = self._old_due or now
                self.began = due - self.init_delay_ns  # (what the next checkpoints keep)
            elif self.last is None:
                due = self.began + self.init_delay_ns
            else:
                due = self.last + self.period_ns
            due = max(due, now)
            if due > now:
                await ctx.sleep_until(due)
        else:
            self.began = now
            due = now + self.init_delay_ns
            if self.init_delay_ns:
                await ctx.sleep_until(due)
        limit = self.iterations
        period = self.period_ns
        while not ctx.stopping and (limit is None or self.count < limit):
            self.submit(self.make(self.count), 0)
            self.count += 1
            self.last = due
            if self.trigger_count is not None and self.count % self.trigger_count == 0:
                await _make_consistent(ctx)
            if limit is not None and self.count >= limit:
                break  # no pause after the last tuple: the mark and final follow at once
            if period:
                due += period
                await ctx.sleep_until(due)
                if ctx.now() - due > max(period, _CATCH_UP_NS):
                    # Held up (a slow operator on the loop, a paused process): this tuple's time
                    # is now, as after a restart, not every missed one at once. Timers late by
                    # a millisecond or so are made up, or a 1 ms period would give 500 a second.
                    due = ctx.now()
            elif self.count % _YIELD_EVERY == 0:
                await ctx.flush()
                await asyncio.sleep(0)
        if limit is not None and self.count >= limit and not self.marked:
            self.submit_punct(Punct.WINDOW, 0)
            self.marked = True
        await ctx.flush()

    def snapshot(self) -> Any:
        return {"count": self.count, "marked": self.marked, "began": self.began, "last": self.last}

    def restore(self, state: Any) -> None:
        self.count = int(state["count"])
        self.marked = bool(state["marked"])
        # (Older checkpoints: the next tuple's deadline as "due", or nothing, instead.)
        self.began, self.last, self._old_due = (None if state.get(k) is None else int(state[k])
                                                for k in ("began", "last", "due"))

    def reset_to_initial_state(self) -> None:
        self.count = 0
        self.marked = False
        self.began = self.last = self._old_due = None


async def _make_consistent(ctx: Any) -> None:
    """SPL Beacon's ``triggerCount``: checkpoint the region right after this tuple and wait for
    it to commit, as IBM's ``makeConsistent`` does. (Only asked, the barrier left at the next
    flush, 1,024 tuples later with no ``period``, and the requests made while one checkpoint
    was under way were dropped: a checkpoint every 1,024 tuples for ``triggerCount`` 10.)"""
    if ctx.consistent_region is None:
        return  # no checkpoint holds the Beacon: nothing to trigger
    try:
        await ctx.make_consistent()
    except RuntimeError:  # a host that checkpoints on its own terms (a synchronous one)
        ctx.request_checkpoint()
        await ctx.flush()


# ----------------------------------------------------------- items held on the clock


def _item_out(item: Any) -> list[Any]:
    if item is Punct.WINDOW:
        return ["w"]
    if type(item) is Watermark:
        return ["m", item.value]
    return ["t", item]


def _item_in(data: list[Any]) -> Any:
    kind = data[0]
    if kind == "w":
        return Punct.WINDOW
    if kind == "m":
        return Watermark(int(data[1]))
    return data[1]


class _Holding(ShapedOperator):
    """An operator holding items for later: a timer to wake it, final held while it holds items."""

    passes_through: ClassVar[bool] = True

    port_ranges = PortRanges(inputs=(1, 1), outputs=(1, 1))

    _operator: ClassVar[str] = ""
    window_punctuation: ClassVar[WindowPunctuationMode] = "generating"
    holds_watermarks: ClassVar[bool] = True

    def __init__(self) -> None:
        self._timer: OperatorTimer | None = None
        self._final_seen = False
        self._paused = False
        self.buffer_size = 1000
        self.held: deque[Any] = deque()

    def setup(self) -> None:
        port_shape(self, self.port_ranges)
        self._timer = OperatorTimer(self, self._on_wake)

    def on_ports_ready(self) -> None:
        self._pump(self.context.now())  # restored items, if any

    def on_tuple(self, tup: Any, port: int) -> None:
        self._arrive(tup)

    def on_punct(self, punct: Punct, port: int) -> None:
        if punct is Punct.WINDOW:
            self._arrive(Punct.WINDOW)
            return
        self._final_seen = True
        self._on_final(self.context.now())

    def on_watermark(self, value: int) -> None:
        self._arrive(Watermark(value))

    def _on_wake(self) -> None:
        self._pump(self.context.now())

    def _hold(self, held: bool) -> None:
        timer = self._timer
        assert timer is not None
        if held:
            timer.hold_final()
        else:
            timer.release_final()

    def _wake_at(self, when: int | None) -> None:
        if self._timer is not None:
            self._timer.set(when)

    def on_shutdown(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _arrive(self, item: Any) -> None:
        raise NotImplementedError

    def _pump(self, now: int) -> None:
        self._pump_items(now)
        self._flow()

    def _flow(self) -> None:
        """After each pump: hold the input back while the buffer is full (Throttle)."""

    def _pump_items(self, now: int) -> None:
        raise NotImplementedError

    def _on_final(self, now: int) -> None:
        raise NotImplementedError

    def _rearm_after_restore(self) -> None:
        ctx = getattr(self, "context", None)
        if ctx is not None and self._timer is not None:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                return  # not running yet: on_ports_ready pumps
            if self._final_seen:
                # The input had ended when the checkpoint was taken: the host restores that
                # without replaying final, so the hold on final is taken again here.
                self._hold(True)
            # Nothing is sent from inside restore: the host may still be restoring its own
            # state. A wake-up due now runs the pump as the first item after the restore.
            self._paused = False  # the host takes input again after a restore
            self._timer.set(None)
            self._timer.set(ctx.now())

    def _emit(self, item: Any) -> None:
        if item is Punct.WINDOW:
            self.submit_punct(Punct.WINDOW, 0)
        elif type(item) is Watermark:
            self.context.submit_watermark(item.value)
        else:
            self.submit(item, 0)


# ------------------------------------------------------------------------ Delay


class Delay(_Holding):
    """SPL ``Delay``: every tuple and window mark re-emitted ``delay`` seconds after it arrived.

    ``delay`` (seconds, required, >= 0). The gaps between items are kept
    exactly: an item that arrived at t leaves at t + delay, in arrival
    order. ``buffer_size`` (``bufferSize``, default 1000): IBM blocks the
    input while that many items wait; riverbed does not bound the buffer:
    an item's departure is computed when it arrives, and holding the input
    back would make that depend on where batches were cut.

    One input port without window, one output port. Punctuation: window
    marks are delayed like tuples (preserved, in order); final, when the
    input ends, is forwarded ``delay`` seconds after it arrived, once every
    held item has left. Watermarks are delayed like tuples, so none passes a
    tuple that arrived before it. State: the held items with their departure times;
    `reset_to_initial_state` discards them (as IBM's reset does).
    """

    _operator: ClassVar[str] = "Delay"

    def __init__(self, delay: float | None = None, *, buffer_size: int | None = None,
                 **spl: Any) -> None:
        super().__init__()
        p = params("Delay", {"delay": delay, "buffer_size": buffer_size}, spl)
        if p["delay"] is None:
            raise OperatorParameterError("Delay: delay (seconds) is required")
        self.delay_ns = seconds_ns("Delay", "delay", p["delay"])
        size = 1000 if p["buffer_size"] is None else p["buffer_size"]
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise OperatorParameterError(f"Delay: buffer_size={size!r}: expected an int >= 0")
        self.buffer_size = max(1, size)
        self.held = deque()  # (departure ns, tuple, Punct.WINDOW or a Watermark)
        self._final_at: int | None = None

    def _arrive(self, item: Any) -> None:
        now = self.context.now()
        self.held.append((now + self.delay_ns, item))
        self._pump(now)

    def _on_final(self, now: int) -> None:
        self._final_at = now + self.delay_ns
        if self.held or self._final_at > now:
            self._hold(True)
        self._pump(now)

    def _pump_items(self, now: int) -> None:
        held = self.held
        while held and held[0][0] <= now:
            self._emit(held.popleft()[1])
        final_at = self._final_at
        if held:
            self._wake_at(held[0][0])
        elif final_at is not None and final_at > now:
            self._wake_at(final_at)
        else:
            self._wake_at(None)
            if final_at is not None:
                self._hold(False)

    def snapshot(self) -> Any:
        return {"held": [[t, *_item_out(x)] for t, x in self.held], "final_at": self._final_at}

    def restore(self, state: Any) -> None:
        self.held = deque((int(x[0]), _item_in(x[1:])) for x in state["held"])
        self._final_at = state.get("final_at")
        self._final_seen = self._final_at is not None
        self._rearm_after_restore()

    def reset_to_initial_state(self) -> None:
        self.held = deque()
        self._final_at = None  # (a reset after final: the replayed input ends it again)
        self._final_seen = False
        self._wake_at(None)


# --------------------------------------------------------------------- Throttle



class Throttle(_Holding):
    """SPL ``Throttle``: tuples leave at no more than ``rate`` per second.

    ``rate`` (tuples per second, required, > 0). ``period`` (seconds,
    default 10 / rate): the span over which the rate is measured: like
    IBM's operator, Throttle keeps two sync points half a period apart and
    lets a tuple go at once while the rate projected since the older one is
    below ``rate``, else it waits just long enough to bring it down to
    ``rate``. So after an idle spell a burst may pass at once, the tuples
    after it leave 1/rate apart, and once the burst counts in the rate
    measured, a pause may follow until that rate is back at ``rate`` (IBM's
    operator gives the same times). The counts are whole tuples: where
    ``rate * period / 2`` is not a whole number (``rate=100, period=0.025``),
    the rate held over a long run is above ``rate`` (120 a second there), as
    with IBM's operator; the default period (``rate * period / 2`` = 5)
    holds it exactly.
    It starts as if half a period of tuples had already passed at the full
    rate, and so does a Throttle restored more than a period after its last
    tuple (a restart). A timer that fires late (a real clock's, by up to a millisecond)
    does not lower the rate: the next tuple is timed from when the late one
    was due, so the tuples due in up to a period since then leave at once.
    ``include_punctuations`` (``includePunctuations``, default False):
    window marks are paced and counted like tuples; when False they are
    forwarded without pacing (still in order after the tuples before them).
    Watermarks are never paced and never counted, but wait behind the
    tuples that arrived before them.
    ``precise`` (busy waiting in IBM) is accepted; the clock's own timers
    are used either way. ``buffer_size`` (riverbed's, default 1000): IBM's
    Throttle blocks its input while a tuple waits; riverbed holds up to about
    that many items, then holds its input back until half have left, so
    backpressure reaches the sources and a checkpoint stays small.

    One input port without window, one output port. Punctuation: window
    marks as above; final is not paced: it is forwarded as soon as the last
    held tuple has left. State: the held items, the item being waited for
    and the rate-measurement state (with absolute clock times).
    """

    _operator: ClassVar[str] = "Throttle"

    def __init__(self, rate: float | None = None, *, period: float | None = None,
                 include_punctuations: bool | None = None, precise: bool | None = None,
                 buffer_size: int = 1000, **spl: Any) -> None:
        super().__init__()
        p = params("Throttle", {"rate": rate, "period": period,
                                "include_punctuations": include_punctuations, "precise": precise}, spl)
        if isinstance(buffer_size, bool) or not isinstance(buffer_size, int) or buffer_size < 1:
            raise OperatorParameterError(f"Throttle: buffer_size={buffer_size!r}: expected an int >= 1")
        self.buffer_size = buffer_size
        r = p["rate"]
        if r is None:
            raise OperatorParameterError("Throttle: rate (tuples per second) is required")
        if isinstance(r, bool) or not isinstance(r, int | float) or not r > 0 or r == float("inf"):
            raise OperatorParameterError(f"Throttle: rate={r!r}: expected a number of tuples per "
                                         "second > 0")
        self.rate = float(r)
        period_s = 10.0 / self.rate if p["period"] is None else p["period"]
        self.period_ns = seconds_ns("Throttle", "period", period_s, positive=True)
        if self.period_ns < 2:
            raise OperatorParameterError(f"Throttle: period={period_s!r}: too short to measure a rate")
        self._half_ns = self.period_ns // 2
        self._catch_up_ns = min(self.period_ns, _CATCH_UP_NS)
        self._half_full = int(self.rate * (self.period_ns / _NS) / 2)
        for flag in ("include_punctuations", "precise"):
            if p[flag] is not None and not isinstance(p[flag], bool):
                raise OperatorParameterError(f"Throttle: {flag}={p[flag]!r}: expected True or False")
        self.include_punctuations: bool = p["include_punctuations"] is True
        self.precise: bool = p["precise"] is True
        self._release_at: int | None = None  # the head item is accounted and leaves then
        # IBM's sync points: (time relative to the start, count) of the two latest.
        self._started = False
        self._init = 0
        self._first = (0, 0)
        self._last = (0, 0)
        self._seen = 0
        self._restored = False  # pacing state from a checkpoint, not yet used

    def _arrive(self, item: Any) -> None:
        self.held.append(item)
        self._pump(self.context.now())

    def _flow(self) -> None:
        """Hold the input back while ``buffer_size`` items wait, until half have left (IBM's
        Throttle blocks its input): backpressure reaches the sources, a checkpoint holds a
        bounded backlog, and the output times do not change (the pacing runs on the held
        items either way)."""
        held = len(self.held)
        if self._paused:
            if held <= self.buffer_size // 2:
                self._paused = False
                self.context.pause_input(False)
        elif held >= self.buffer_size:
            self._paused = True
            self.context.pause_input(True)

    def _on_final(self, now: int) -> None:
        if self.held:
            self._hold(True)
        self._pump(now)

    def _wait_ns(self, t: int) -> int:
        """Account one paced item starting at clock time ``t``; how long it must wait."""
        half = self._half_ns
        if not self._started:
            self._started = True
            self._seen = self._half_full
            self._last = (half, self._half_full)
            self._first = (0, 0)
            self._init = t - half
            return 0
        rel = t - self._init
        new_last = half * (rel // half)
        if new_last - half != self._first[0]:
            self._first = (new_last - half, self._last[1])
            self._last = (new_last, self._seen)
        interval = (rel - self._first[0]) / _NS
        count = 1 + self._seen - self._first[1]
        self._seen += 1
        if count / interval < self.rate:
            return 0
        return max(0, round((count / self.rate - interval) * _NS))

    def _pump_items(self, now: int) -> None:
        if self._restored:
            self._restored = False
            paced = self._release_at if self._release_at is not None else self._init + self._last[0]
            if now - paced > self.period_ns:
                # Restored long after its last tuple (a restart): paced as from a fresh start,
                # as IBM's restarted operator is; the old sync points and the wait due long
                # ago let most of another period's tuples out at once.
                self._started = False
                self._release_at = None
        held = self.held
        at = now  # when the next paced item is accounted as leaving
        while held:
            release_at = self._release_at
            if release_at is not None:
                if now < release_at:
                    self._wake_at(release_at)
                    return
                # A wake later than asked (a real clock's timers are late by up to a
                # millisecond, most of a period at 10,000/s): the next item is timed from when
                # this one was due, so the items due since leave now and the rate holds (timed
                # from the wake, 10,000/s gave 3,900/s). Not from longer ago than a period (nor
                # than CATCH_UP_NS): after an operator held the loop for 80 ms, or a restore
                # after hours down, a period's tuples leave at once, not all those since (a
                # 100 ms catch-up let 92 go in 10 ms at 1,000/s). On a virtual clock wakes are
                # on time: at == now.
                at = max(release_at, now - self._catch_up_ns)
                self._release_at = None
                self._emit(held.popleft())
                continue
            head = held[0]
            if (head is Punct.WINDOW and not self.include_punctuations) or type(head) is Watermark:
                self._emit(held.popleft())  # not paced, but in order with the tuples
                continue
            wait = self._wait_ns(at)
            if wait > 0:
                self._release_at = at + wait
                continue
            self._emit(held.popleft())
        self._wake_at(None)
        if self._final_seen:
            self._hold(False)

    def snapshot(self) -> Any:
        return {
            "held": [_item_out(x) for x in self.held],
            "release_at": self._release_at,
            "pacing": None if not self._started else
            [self._init, list(self._first), list(self._last), self._seen],
            "final_seen": self._final_seen,
        }

    def restore(self, state: Any) -> None:
        self.held = deque(_item_in(x) for x in state["held"])
        self._final_seen = bool(state.get("final_seen", False))
        self._release_at = state["release_at"]
        pacing = state["pacing"]
        self._started = pacing is not None
        if pacing is not None:
            init, first, last, seen = pacing
            self._init, self._first, self._last, self._seen = (
                int(init), (int(first[0]), int(first[1])), (int(last[0]), int(last[1])), int(seen))
        self._restored = pacing is not None
        self._rearm_after_restore()

    def reset_to_initial_state(self) -> None:
        self.held = deque()
        self._release_at = None
        self._started = self._restored = False
        self._final_seen = False
        self._wake_at(None)
