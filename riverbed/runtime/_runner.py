"""One operator at run time: its inbox, windows, output buffers, watermark and punctuation rules.

The runner is the operator's `OperatorContext`. It takes entries from the
inbox one at a time and calls the operator's handlers, so the operator sees
SPL's per-tuple semantics; output goes into per-port buffers that are sent
downstream as batches after each inbox entry (so a batch in means, at most,
one batch out per port, and latency stays one entry deep).

Punctuation (standard-operators.md P1, P2): a window mark goes to the port's
window, then to ``on_punct``, then is forwarded by a "preserving" operator.
A final mark counts per connection; when every connection of a port has
sent one, the port's window gets it (Java flavor: FINAL events) and
``on_punct`` runs; when every port has, an event-time operator submits the
maximum watermark (E23) and final is forwarded once on every output port.

Watermarks (eventtime-checkpoint.md E29-E31): a source with ``event_time``
derives one from each submitted tuple (minus the lag, throttled by the
minimum gap); any other operator in the event-time region keeps one value
per input connection and moves when their minimum does, first feeding its
timeInterval windows, then forwarding the new value on every output port.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ..graph import CheckpointBarrier, EventTime, Operator, OperatorDef, Punct, Schema, Source, Watermark
from ..windows import (
    EVENT_TIME_MAX,
    EventType,
    StreamWindow,
    StreamWindowEvent,
    TimeIntervalSpec,
    TimeIntervalWindow,
    WindowTupleError,
)
from ._channel import Inbox
from ._clock import Clock, TimerHandle
from ._errors import OperatorError, SchemaViolation
from ._metrics import Counter, InputPortMetrics, OperatorMetrics, OutputPortMetrics

if TYPE_CHECKING:
    from ._job import Job

__all__ = ["OperatorRunner"]

_TICK = object()  # a control item: one of this operator's window timers is due
_RELEASE = object()  # a control item: a deferred final was released
_TICK_CONNECTION = -1


class _Wake:
    """A control item: an operator timer (`OperatorRunner.call_at`) is due."""

    __slots__ = ("callback", "cancelled")

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback
        self.cancelled = False


class _WakeHandle:
    __slots__ = ("_handle", "_wake")

    def __init__(self, handle: TimerHandle, wake: _Wake) -> None:
        self._handle = handle
        self._wake = wake

    def cancel(self) -> None:
        self._wake.cancelled = True  # also if it already fired and waits in the inbox
        self._handle.cancel()


class _Output:
    """One output port: a buffer of tuples and the entries waiting to go downstream.

    A declared schema is checked once per batch, when the buffer is sealed
    (before a control item or a flush): one generated loop instead of a call
    per submitted tuple. An invalid tuple is taken out and handed to
    ``on_invalid``, which raises or routes it to the error port.
    """

    __slots__ = ("buf", "first_invalid", "metrics", "on_invalid", "pending", "targets", "validate")

    def __init__(self, schema: Schema | None, metrics: OutputPortMetrics,
                 on_invalid: Callable[[Any, str], None]) -> None:
        self.buf: list[Any] = []
        self.pending: list[Any] = []  # batches (lists) and control items, in order
        self.targets: list[tuple[Inbox, int]] = []
        self.validate = schema.validator() if schema is not None else None
        self.first_invalid = schema.batch_checker() if schema is not None else None
        self.on_invalid = on_invalid
        self.metrics = metrics

    def _seal(self) -> None:
        buf = self.buf
        check = self.first_invalid
        if check is not None:
            i = check(buf)
            if i >= 0:
                self._drop_invalid(i)
        self.pending.append(buf.copy())
        buf.clear()

    def _drop_invalid(self, first: int) -> None:
        buf, check, validate = self.buf, self.first_invalid, self.validate
        assert check is not None and validate is not None
        good: list[Any] = buf[:first]
        rest = buf[first:]
        while rest:
            i = check(rest)
            if i < 0:
                good.extend(rest)
                break
            good.extend(rest[:i])
            self.on_invalid(rest[i], validate(rest[i]) or "invalid")
            rest = rest[i + 1:]
        buf[:] = good

    def control(self, item: Any) -> None:
        if self.buf:
            self._seal()
        self.pending.append(item)

    async def flush(self) -> None:
        """Send everything pending, in order. Cancellation-safe: a task cancelled while a full
        inbox holds it back (a stop cancels a source waiting on backpressure) keeps what it has
        not delivered, at the front of ``pending``, for the next flush: tuples a source already
        counts as submitted (and a checkpoint as emitted) are never dropped on the way."""
        if self.buf:
            self._seal()
        if not self.pending:
            return
        pending, self.pending = self.pending, []
        m = self.metrics
        i = sent = 0
        try:
            for i, entry in enumerate(pending):  # noqa: B007 - read by the handler below
                if type(entry) is list or type(entry) is _Partial:
                    batch, targets = (entry, self.targets) if type(entry) is list else entry
                    for sent in range(len(targets)):
                        inbox, conn = targets[sent]
                        await inbox.put(conn, batch)
                    sent = 0
                    if type(entry) is list:
                        m.tuples_submitted += len(batch)
                    continue
                if entry is Punct.WINDOW:
                    m.window_puncts_submitted += 1
                elif entry is Punct.FINAL:
                    m.final_puncts_submitted += 1
                else:
                    m.watermarks_submitted += 1
                for inbox, conn in self.targets:
                    inbox.put_control(conn, entry)
        except BaseException:
            # `Inbox.put` appends nothing when cancelled while waiting: entry i reached the
            # targets before `sent`, and goes again only to the others (a partial entry).
            rest = pending[i:]
            if sent:
                head = rest[0]
                batch, targets = (head, self.targets) if type(head) is list else head
                if type(head) is list:
                    m.tuples_submitted += len(batch)
                rest[0] = _Partial(batch, targets[sent:])
            self.pending[:0] = rest
            raise


class _Partial(tuple[list[Any], list[tuple[Inbox, int]]]):
    """A batch a cancelled flush delivered to some targets only: (batch, targets still owed)."""

    __slots__ = ()

    def __new__(cls, batch: list[Any], targets: list[tuple[Inbox, int]]) -> _Partial:
        return super().__new__(cls, (batch, targets))


class OperatorRunner:
    """Runs one operator of a job (and is the operator's context)."""

    def __init__(self, job: Job, odef: OperatorDef, region: dict[str, EventTime]) -> None:
        self._job = job
        self.odef = odef
        self.op: Operator = odef.operator
        self.clock: Clock = job.clock
        self.inbox = Inbox(odef.queue_batches)
        self.metrics = OperatorMetrics(odef.name, queue_capacity=odef.queue_batches)
        self.metrics.inputs = [InputPortMetrics() for _ in odef.inputs]
        self.metrics.outputs = [OutputPortMetrics() for _ in odef.outputs]
        self.outputs = [_Output(s, m, functools.partial(self._invalid_output, port))
                        for port, (s, m) in enumerate(zip(odef.outputs, self.metrics.outputs,
                                                          strict=True))]
        self._data_ports = [p for p in range(len(self.outputs)) if p != odef.error_port]
        # Connections, numbered in port order: which port each feeds.
        self.conn_port: list[int] = []
        self.conn_feedback: list[bool] = []
        for port, inp in enumerate(odef.inputs):
            for c in inp.connections:
                self.conn_port.append(port)
                self.conn_feedback.append(c.feedback)
        self._finals_needed = [sum(1 for c in inp.connections if not c.feedback) for inp in odef.inputs]
        self._ports_open = sum(1 for n in self._finals_needed if n > 0)
        self._final_from = [False] * len(self.conn_port)
        # Event time: own definition (outputEventTime) or inherited (inputWatermark).
        self.event_time = region.get(odef.name)
        self._generates_watermarks = odef.event_time is not None and not odef.event_time.manual
        own = odef.event_time
        self._et_attribute = own.attribute if own is not None else ""
        self._lag_ticks = own.ticks(own.lag_ns) if own is not None else 0
        self._gap_ticks = own.ticks(own.minimum_gap_ns) if own is not None else 0
        self._wm_in: list[int | None] = []
        for inp in odef.inputs:
            for c in inp.connections:
                self._wm_in.append(0 if c.operator in region and not c.feedback else None)
        self._watermark: int | None = None
        self._last_sent: int | None = None
        self.windows: list[StreamWindow[Any] | TimeIntervalWindow[Any] | None] = []
        self._timed: list[StreamWindow[Any]] = []
        self._ti: list[TimeIntervalWindow[Any]] = []
        self._timer: TimerHandle | None = None
        self._timer_at: int | None = None
        self._current: tuple[int, Any] | None = None  # (port, tuple) being handled, for errors
        self.finished = False
        self._source_task: asyncio.Task[None] | None = None
        # Aligned checkpoints: connections that delivered the barrier hold their entries.
        self._aligning: int | None = None
        self._aligned: set[int] = set()
        self._held: deque[tuple[int, Any]] = deque()
        self._replay: deque[tuple[int, Any]] = deque()
        self._barrier_request: int | None = None  # sources: start this checkpoint next
        self._restore: Any = None
        self._holds = 0  # deferred finals not yet released
        self._op_timers: list[_WakeHandle] = []
        self.final_state: Any = None  # the state it ended with, for checkpoints taken after

    # ------------------------------------------------------------ context API

    @property
    def name(self) -> str:
        return self.odef.name

    @property
    def job(self) -> str:
        return self._job.name

    @property
    def params(self) -> dict[str, Any]:
        return dict(self._job.graph.params)

    def now(self) -> int:
        return self.clock.now()

    @property
    def watermark(self) -> int | None:
        return self._watermark

    def window(self, port: int = 0) -> StreamWindow[Any] | TimeIntervalWindow[Any]:
        w = self.windows[port] if 0 <= port < len(self.windows) else None
        if w is None:
            raise ValueError(f"operator {self.name!r}: input port {port} is not windowed")
        return w

    def submit(self, tup: Any, port: int = 0) -> None:
        out = self.outputs[port]  # the schema is checked per batch (`_Output._seal`)
        if self._generates_watermarks and port == 0:
            candidate = self._event_time_of(tup)  # refuses a bad event time before taking the tuple
            out.buf.append(tup)
            self._watermark_after(candidate)  # E29: the watermark follows the tuple
            return
        out.buf.append(tup)

    def _fast_submit(self) -> Callable[..., None]:
        appends = [o.buf.append for o in self.outputs]  # the buffers live as long as the job
        if self._generates_watermarks:
            return self._event_time_submit(appends)
        if len(appends) == 1:
            append = appends[0]

            def submit_one(tup: Any, port: int = 0) -> None:
                if port:
                    appends[port](tup)  # raises IndexError: there is no such port
                append(tup)

            return submit_one

        def submit(tup: Any, port: int = 0) -> None:
            appends[port](tup)

        return submit

    def _event_time_submit(self, appends: list[Callable[[Any], None]]) -> Callable[..., None]:
        """A source's submit with E29 inlined: the watermark follows each tuple's event time."""
        append, slow, attr, lag, gap = appends[0], self.submit, self._et_attribute, \
            self._lag_ticks, self._gap_ticks
        metrics = self.metrics

        def submit_et(tup: Any, port: int = 0) -> None:
            if port:
                slow(tup, port)
                return
            try:
                t = tup[attr]
            except (KeyError, TypeError, IndexError):
                t = None
            if type(t) is not int:
                slow(tup, port)  # raises the error that says what is wrong
                return
            append(tup)
            candidate = t - lag  # E29: the watermark follows the tuple
            watermark = self._watermark
            if watermark is None or candidate > watermark:
                self._watermark = metrics.watermark = candidate
                last = self._last_sent
                if last is None or candidate >= last + gap:
                    self._send_watermark(candidate)

        return submit_et

    def submit_punct(self, punct: Punct = Punct.WINDOW, port: int = 0) -> None:
        if punct is not Punct.WINDOW:
            raise ValueError(f"operator {self.name!r}: only window marks can be submitted; final "
                             "punctuation is sent by the runtime when the inputs end")
        self.outputs[port].control(Punct.WINDOW)

    async def flush(self) -> None:
        """Send what the operator submitted downstream (waits while downstream is full)."""
        if self._barrier_request is not None:
            self._source_checkpoint()
        for out in self.outputs:
            await out.flush()

    async def sleep_until(self, when: int) -> None:
        """Flush, then wait for the clock (for ``async run`` sources)."""
        await self.flush()
        await self.clock.sleep_until(when)

    def set_watermark(self, value: int) -> None:
        """Manual watermark mode (E28): advance this operator's watermark and send it on."""
        if self.odef.event_time is None or not self.odef.event_time.manual:
            raise ValueError(f"operator {self.name!r}: set_watermark needs event_time with "
                             "manual_watermarks=True")
        if self._watermark is not None and value <= self._watermark:
            return
        self._watermark = self.metrics.watermark = value
        self._send_watermark(value)

    def call_at(self, when: int, callback: Callable[[], None]) -> _WakeHandle:
        """Run ``callback`` in this operator's task once the clock reaches ``when`` (ns).

        It comes as a control entry after what the inbox already holds, so it
        runs between two items, never inside a handler; what it submits is
        flushed right after, as for any entry. Pending timers die with the
        operator.
        """
        wake = _Wake(callback)
        inbox = self.inbox
        handle = self.clock.call_at(when, lambda: inbox.put_control(_TICK_CONNECTION, wake))
        timer = _WakeHandle(handle, wake)
        self._op_timers.append(timer)
        if len(self._op_timers) > 64:
            self._op_timers = [t for t in self._op_timers if not t._wake.cancelled]
        return timer

    def counter(self, name: str) -> Counter:
        """A named count of the operator's own, shown by the status view and exported to
        Prometheus (``riverbed_operator_events_total{name=...}``); the same name, the same one."""
        counters = self.metrics.counters
        found = counters.get(name)
        if found is None:
            found = counters[name] = Counter()
        return found

    def defer_final(self) -> Callable[[], None]:
        """Keep running after every input ended, until the returned function is called;
        final punctuation is forwarded only then (operators that still hold items: Delay)."""
        self._holds += 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self._holds -= 1
                self.inbox.put_control(_TICK_CONNECTION, _RELEASE)

        return release

    @property
    def input_ports(self) -> int:
        return len(self.odef.inputs)

    @property
    def output_ports(self) -> int:
        """Data output ports (an error port, if the graph asked for one, is not counted)."""
        return len(self.outputs) - (1 if self.odef.error_port is not None else 0)

    def output_schema(self, port: int = 0) -> Schema | None:
        return self.odef.outputs[port]

    def request_checkpoint(self) -> int | None:
        """Ask the job for a checkpoint now (SPL operator-driven regions); its id, or None."""
        return self._job.trigger_checkpoint()

    def request_stop(self) -> None:
        """A stop was requested: an async source is cancelled (a sync one stops between batches)."""
        if self._source_task is not None:
            self._source_task.cancel()

    @property
    def stopping(self) -> bool:
        """True once the job was asked to stop: a source should return soon."""
        return self._job.stopping

    # ---------------------------------------------------------------- set-up

    def setup(self) -> None:
        for port in range(len(self.odef.inputs)):
            w = self.make_window(port)
            self.windows.append(w)
            if w is not None:
                self._track(w)
        self.op.context = self
        # Instance attributes shadow the methods: the operator's own submit calls go
        # straight to the cheapest function that does what this operator's ports need.
        self.submit = self._fast_submit()  # type: ignore[method-assign]
        self.op.submit = self.submit  # type: ignore[method-assign]
        self.op.submit_punct = self.submit_punct  # type: ignore[method-assign]
        self._guard(self.op.setup, None)

    def make_window(self, port: int) -> StreamWindow[Any] | TimeIntervalWindow[Any] | None:
        """A fresh window for an input port, wired to the operator (None for a plain port)."""
        inp = self.odef.inputs[port]
        if inp.window is None:
            return None
        listener = self._listener_for(port)
        w: StreamWindow[Any] | TimeIntervalWindow[Any]
        if isinstance(inp.window, TimeIntervalSpec):
            et = self.event_time
            assert et is not None  # validation: a timeInterval window is in the region
            w = TimeIntervalWindow(inp.window, event_time=et.attribute, resolution=et.resolution,
                                   partition_by=inp.partition_by, flavor=inp.flavor)
            pane_events = {EventType.INITIAL_FULL, EventType.TRIGGER, EventType.CLOSE}
            wanted = self.op.window_events
            w.register_listener(listener, pane_events if wanted is None else pane_events & wanted)
        else:
            schema = self._input_schema(port)
            types = schema.as_dict() if schema is not None else dict(inp.attribute_types or {})
            w = StreamWindow(inp.window, flavor=inp.flavor, partition_by=inp.partition_by,
                             attribute_types=types,
                             default_partition=_default_key(types, inp.partition_by))
            w.register_listener(listener, self.op.window_events)
        return w

    def replace_window(self, port: int, window: StreamWindow[Any] | TimeIntervalWindow[Any]) -> None:
        """Install another window on a port (a restarted instance's fresh window)."""
        old = self.windows[port]
        self.windows[port] = window
        if isinstance(old, StreamWindow) and old in self._timed:
            self._timed.remove(old)
        if isinstance(old, TimeIntervalWindow) and old in self._ti:
            self._ti.remove(old)
        self._track(window)

    def _track(self, w: StreamWindow[Any] | TimeIntervalWindow[Any]) -> None:
        if isinstance(w, TimeIntervalWindow):
            self._ti.append(w)
        elif w.spec.uses_system_time:
            self._timed.append(w)

    def _input_schema(self, port: int) -> Any:
        c = self.odef.inputs[port].connections[0]
        return self._job.graph.stream_schema(c.operator, c.port)

    def _listener_for(self, port: int) -> Callable[[StreamWindowEvent[Any]], None]:
        # A closure with the port bound as a default: one call per event costs about 45 ns
        # where functools.partial with a keyword costs 115 ns (it builds a kwargs dict).
        handle = self.op.on_window_event

        def listener(event: StreamWindowEvent[Any], handle: Any = handle, port: int = port) -> None:
            handle(event, port)

        return listener

    def wire(self, runners: dict[str, OperatorRunner]) -> None:
        """Point each output port at the inboxes it feeds."""
        for port, out in enumerate(self.outputs):
            for consumer, _in_port in self._job.graph.consumers(self.name, port):
                r = runners[consumer]
                for conn, c in enumerate(_connections(r.odef)):
                    if c.operator == self.name and c.port == port and (r.inbox, conn) not in out.targets:
                        out.targets.append((r.inbox, conn))

    # ------------------------------------------------------------------ run

    async def run(self) -> None:
        now = self.clock.now()
        for w in self.windows:
            if w is not None:
                self._guard(w.activate, None, now)
        if self._restore is not None:
            self._apply_restore(self._restore)
            self._restore = None
        try:
            if isinstance(self.op, Source):
                await self._run_source()
                if self._job.suspend_at is not None:
                    await self._end_suspended_source()
                    return
            else:
                self._arm()
                await self._flush_all()
                while self._ports_open > 0 or self._holds > 0:
                    if self._replay:
                        conn, payload = self._replay.popleft()
                    else:
                        conn, payload = await self.inbox.get()
                    if self._aligning is not None and conn in self._aligned:
                        self._held.append((conn, payload))  # after this connection's barrier
                        continue
                    if isinstance(payload, CheckpointBarrier):
                        self._on_barrier(conn, payload.id)
                    else:
                        self._handle(conn, payload)
                        if payload is Punct.FINAL and self._aligning is not None:
                            self._check_aligned()
                    await self._flush_all()
                    self._arm()
            await self._finish()
        except asyncio.CancelledError:
            if not self._job.suspended:
                raise
            self.shut_down(report=False)  # the stop's checkpoint committed: end here, no final
        finally:
            if self._timer is not None:
                self._timer.cancel()
            for timer in self._op_timers:
                timer.cancel()

    async def _end_suspended_source(self) -> None:
        """A stop suspends the job (it has checkpoints): the barrier goes out, then the source
        ends without final punctuation; the job ends every task once the checkpoint commits."""
        if self._barrier_request is not None:
            self._source_checkpoint()
        await self._flush_all()
        self.shut_down(report=False)

    async def _run_source(self) -> None:
        src = self.op
        assert isinstance(src, Source)
        if type(src).run is not Source.run:
            self._source_task = asyncio.get_running_loop().create_task(
                self._guard_async(src.run), name=f"{self._job.name}/{self.name}/run")
            try:
                await self._source_task
            except asyncio.CancelledError:
                if not self._job.stopping:
                    raise  # cancelled from outside (abort), not a stop request
            return
        items = self._guard(src.generate, None)
        it: Iterator[Any] = iter(items)
        submit, control, size = self.submit, self.outputs[0].control, self._job.batch_size
        extend = self.outputs[0].buf.extend
        plain = not self._generates_watermarks  # then a tuple's submit is a bare append
        while not self._job.stopping:
            if self._barrier_request is not None:
                self._source_checkpoint()
            chunk = list(itertools.islice(it, size))
            if not chunk:
                break
            # One pass over the types (12 ns a tuple); `Punct.X in chunk` compares each dict to
            # each mark through two rich comparisons (20 ns a tuple for both marks).
            if plain and Punct not in set(map(type, chunk)):
                extend(chunk)  # the schema, if any, is checked when the batch is sealed
                await self._flush_all()
                continue
            for item in chunk:
                if item is Punct.WINDOW:
                    control(Punct.WINDOW)
                elif item is Punct.FINAL:
                    return
                else:
                    try:
                        submit(item)
                    except SchemaViolation as exc:
                        self._fail_or_route(exc, 0, item)
            await self._flush_all()

    # ---------------------------------------------------------- checkpoints

    @property
    def inputs_ended(self) -> bool:
        """Every input port has seen final (the operator may still run: deferred final)."""
        return self._ports_open == 0 and bool(self.odef.inputs)

    def start_checkpoint(self, checkpoint_id: int) -> None:
        """Sources: take checkpoint ``checkpoint_id`` at the next batch boundary or flush."""
        self._barrier_request = checkpoint_id

    def _source_checkpoint(self) -> None:
        checkpoint_id = self._barrier_request
        assert checkpoint_id is not None
        self._barrier_request = None
        self._job._report(checkpoint_id, self.name, self.checkpoint_state())
        for out in self.outputs:
            out.control(CheckpointBarrier(checkpoint_id))

    def _on_barrier(self, conn: int, checkpoint_id: int) -> None:
        if self._aligning is None:
            self._aligning, self._aligned = checkpoint_id, set()
        elif checkpoint_id != self._aligning:
            raise OperatorError(self.name, self.conn_port[conn], None, RuntimeError(
                f"barrier of checkpoint {checkpoint_id} while aligning checkpoint {self._aligning}"))
        self._aligned.add(conn)
        self._check_aligned()

    def _check_aligned(self) -> None:
        """Every live connection delivered the barrier: snapshot, forward it, release the held."""
        live = {c for c in range(len(self.conn_port))
                if not self.conn_feedback[c] and not self._final_from[c]}
        if not live <= self._aligned:
            return
        checkpoint_id = self._aligning
        assert checkpoint_id is not None
        self._job._report(checkpoint_id, self.name, self.checkpoint_state())
        for out in self.outputs:
            out.control(CheckpointBarrier(checkpoint_id))
        self._aligning = None
        self._aligned = set()
        self._replay.extend(self._held)
        self._held.clear()

    def checkpoint_state(self, *, drain: bool = True, drain_operator: bool | None = None) -> dict[str, Any]:
        """Drain, then this operator's whole state as plain data: its own, its windows', its
        watermarks and which connections have ended.

        ``drain=False`` snapshots the windows between two items instead of
        checkpointing them: no pending evictions are reported and a cpp window
        does not suspend its time (the Spark bridge stores state after every
        micro-batch this way, which SPL would not call a checkpoint). The
        operator's own ``drain`` runs when ``drain_operator`` (default: ``drain``).
        """
        if drain if drain_operator is None else drain_operator:
            self._guard(self.op.drain, None)
        take = (lambda w: w.checkpoint()) if drain else (lambda w: w.snapshot())
        windows = [None if w is None else self._guard(take, None, w) for w in self.windows]
        return {
            "operator": self._guard(self.op.snapshot, None),
            "windows": windows,
            "watermark": {"in": list(self._wm_in), "value": self._watermark, "sent": self._last_sent},
            "finals": list(self._final_from),
        }

    def restore_on_start(self, state: Any) -> None:
        """Restore ``state`` (from `checkpoint_state`) when the job starts, after activation."""
        self._restore = state

    def _apply_restore(self, state: Any, *, reset: bool = True) -> None:
        try:
            windows = state["windows"]
            marks = state["watermark"]
            finals = state["finals"]
            if len(windows) != len(self.windows) or len(finals) != len(self._final_from):
                raise ValueError("the checkpoint has a different number of ports or connections")
        except (KeyError, TypeError, ValueError) as exc:
            raise OperatorError(self.name, None, None, ValueError(
                f"cannot restore from this checkpoint: {exc}")) from None
        # The runner's own state first: an operator's restore may already submit (tuples it held
        # and that are due), and what that sends must follow the restored watermark state.
        self._wm_in = list(marks["in"])
        self._watermark = self.metrics.watermark = marks["value"]
        self._last_sent = marks["sent"]
        # Connections that had ended stay ended: their ports' finals were already handled
        # (and are reflected in the operator's restored state).
        self._final_from = [bool(f) for f in finals]
        needed = [0] * len(self.odef.inputs)
        for conn, port in enumerate(self.conn_port):
            if not self.conn_feedback[conn] and not self._final_from[conn]:
                needed[port] += 1
        self._finals_needed = needed
        self._ports_open = sum(1 for n in needed if n > 0)
        self._guard(self.op.restore, None, state["operator"])
        for w, snap in zip(self.windows, windows, strict=True):
            if w is not None:
                self._guard(w.reset if reset else w.restore, None, snap)

    async def _finish(self) -> None:
        if self._barrier_request is not None:
            # A source asked for a checkpoint that ends (or is stopped) before its next batch:
            # the barrier goes out before final, so the checkpoint holds the source still open.
            self._source_checkpoint()
        self.close_outputs()
        await self._flush_all()
        self.shut_down()

    def close_outputs(self) -> None:
        """Every input ended: the maximum watermark, then final, on every output port."""
        if self.event_time is not None or self._generates_watermarks:
            self._send_watermark(EVENT_TIME_MAX)  # E23: max watermark right before final
        for port in range(len(self.outputs)):
            self.outputs[port].control(Punct.FINAL)

    def shut_down(self, *, report: bool = True) -> None:
        """The operator ends: ``on_shutdown``; with ``report``, its final state goes to the job
        for checkpoints taken after (not when a stop suspends the job: none come after)."""
        self._guard(self.op.on_shutdown, None)
        self.finished = self.metrics.finished = True
        if report:
            self._job._finished(self)

    async def _flush_all(self) -> None:
        for out in self.outputs:
            if out.buf or out.pending:
                await out.flush()

    # ------------------------------------------------------------- handling

    def _handle(self, conn: int, payload: Any) -> None:
        if type(payload) is list:
            self._handle_batch(self.conn_port[conn], payload)
        elif type(payload) is _Wake:
            if not payload.cancelled:
                payload.cancelled = True
                self._guard(payload.callback, None)
        elif payload is _RELEASE:
            pass  # wakes the loop so that it can end
        elif payload is _TICK:
            self._timer = self._timer_at = None
            now = self.clock.now()
            for w in self._timed:
                self._guard(w.advance_time, None, now)
        elif isinstance(payload, Watermark):
            self._handle_watermark(conn, payload.value)
        elif payload is Punct.WINDOW:
            self._handle_window_mark(self.conn_port[conn])
        elif payload is Punct.FINAL:
            self._handle_final(conn)

    def _handle_batch(self, port: int, batch: list[Any]) -> None:
        pm = self.metrics.inputs[port]
        pm.tuples_processed += len(batch)
        window = self.windows[port]
        if window is not None and self._timed:
            now = self.clock.now()
            for w in self._timed:
                self._guard(w.advance_time, None, now)
        if isinstance(window, TimeIntervalWindow):  # its inlined batch path: errors name their index
            self._insert_routed(port, batch, window.insert_batch, WindowTupleError,
                                lambda exc: getattr(exc, "index", 0))
            pm.tuples_dropped_late = window.dropped
            return
        if window is not None:  # the window's host batch path (`StreamWindow.insert_tuples`)
            self._insert_routed(port, batch, window.insert_tuples, Exception,
                                lambda exc: window.batch_failed_at)
            return
        on_tuple = self.op.on_tuple
        start, n = 0, len(batch)
        while start < n:
            i = start
            try:
                for i in range(start, n):
                    on_tuple(batch[i], port)
                break
            except Exception as exc:  # user code: stop the job naming the tuple, or route it
                pm.errors += 1
                self._fail_or_route(exc, port, batch[i])
                start = i + 1

    def _insert_routed(self, port: int, batch: list[Any], insert: Callable[[list[Any]], Any],
                       errors: type[Exception], failed_at: Callable[[Exception], int]) -> None:
        """Insert ``batch`` into a window; a tuple that fails (``failed_at`` its index) stops the
        job naming it or goes to the error port, and the rest of the batch goes on after it."""
        start, n = 0, len(batch)
        while start < n:
            try:
                insert(batch if start == 0 else batch[start:])
                return
            except errors as exc:  # user code or a bad tuple
                i = start + failed_at(exc)
                self.metrics.inputs[port].errors += 1
                self._fail_or_route(exc, port, batch[i])
                start = i + 1

    def _handle_window_mark(self, port: int) -> None:
        self.metrics.inputs[port].window_puncts_processed += 1
        window = self.windows[port]
        if isinstance(window, StreamWindow):
            self._guard(window.window_mark, port)
        self._guard(self.op.on_punct, port, Punct.WINDOW, port)
        if self.op.window_punctuation == "preserving":
            for p in self._data_ports:
                self.outputs[p].control(Punct.WINDOW)

    def _handle_final(self, conn: int) -> None:
        if self._final_from[conn] or self.conn_feedback[conn]:
            return
        self._final_from[conn] = True
        port = self.conn_port[conn]
        self._finals_needed[port] -= 1
        if self._finals_needed[port] > 0:
            return
        self.metrics.inputs[port].final_puncts_processed += 1
        window = self.windows[port]
        if isinstance(window, StreamWindow):
            self._guard(window.final_mark, port)
        self._guard(self.op.on_punct, port, Punct.FINAL, port)
        self._ports_open -= 1

    def _handle_watermark(self, conn: int, value: int) -> None:
        entries = self._wm_in
        current = entries[conn]
        if current is None or value <= current:
            return  # not an event-time connection, or not an advance (E30: lower ones ignored)
        entries[conn] = value
        low = min(v for v in entries if v is not None)
        if self._watermark is not None and low <= self._watermark:
            return
        self._advance_watermark(low)

    def _advance_watermark(self, value: int) -> None:
        self._watermark = self.metrics.watermark = value
        for w in self._ti:  # E31: the operator's own windows first
            self._guard(w.watermark, None, value)
        self._guard(self.op.on_watermark, None, value)
        if not self.op.holds_watermarks:
            self._send_watermark(value)  # else the operator sends it after the tuples it holds

    def submit_watermark(self, value: int) -> None:
        """Send a watermark on (operators that hold tuples and so hold watermarks with them)."""
        if not self.op.holds_watermarks:
            raise ValueError(f"operator {self.name!r}: submit_watermark is for operators that set "
                             "holds_watermarks = True; the runtime forwards the others' watermarks")
        self._send_watermark(value)

    def _event_time_of(self, tup: Any) -> int:
        """E29: the watermark candidate of a tuple: its event time minus the lag."""
        try:
            t = tup[self._et_attribute]
        except (KeyError, TypeError, IndexError):
            raise SchemaViolation(self.name, 0, tup, f"the event-time attribute "
                                                     f"{self._et_attribute!r} is missing") from None
        if type(t) is not int:
            raise SchemaViolation(self.name, 0, tup, f"event time {self._et_attribute!r} = {t!r} "
                                                     "is not an integer number of ticks")
        return t - self._lag_ticks

    def _watermark_after(self, candidate: int) -> None:
        watermark = self._watermark
        if watermark is not None and candidate <= watermark:
            return
        self._watermark = self.metrics.watermark = candidate
        last = self._last_sent
        if last is None or candidate >= last + self._gap_ticks:
            self._send_watermark(candidate)

    def _send_watermark(self, value: int) -> None:
        if self._last_sent is not None and value <= self._last_sent:
            return
        self._last_sent = value
        mark = Watermark(value)
        for p in self._data_ports:
            self.outputs[p].control(mark)

    # -------------------------------------------------------------- timers

    def _arm(self) -> None:
        """Keep one clock timer at the earliest deadline of this operator's time windows."""
        if not self._timed:
            return
        due = min((d for w in self._timed if (d := w.next_deadline()) is not None), default=None)
        if due is None or (self._timer_at is not None and self._timer_at <= due):
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = due
        self._timer = self.clock.call_at(due, lambda: self.inbox.put_control(_TICK_CONNECTION, _TICK))

    # --------------------------------------------------------------- errors

    def _guard(self, fn: Callable[..., Any], port: int | None, *args: Any) -> Any:
        try:
            return fn(*args)
        except OperatorError:
            raise
        except Exception as exc:
            raise OperatorError(self.name, port, None, exc) from exc

    async def _guard_async(self, fn: Callable[[], Any]) -> None:
        try:
            await fn()
        except OperatorError:
            raise
        except Exception as exc:
            raise OperatorError(self.name, None, None, exc) from exc

    def _invalid_output(self, port: int, tup: Any, why: str) -> None:
        """A submitted tuple does not match its output port's schema: stop, or route it."""
        exc = SchemaViolation(self.name, port, tup, why)
        if self.odef.error_port is None or port == self.odef.error_port:
            raise exc
        self._fail_or_route(exc, None, tup)

    def _fail_or_route(self, exc: Exception, port: int | None, tup: Any) -> None:
        if isinstance(exc, OperatorError):
            raise exc
        error_port = self.odef.error_port
        if error_port is None:
            raise OperatorError(self.name, port, tup, exc) from exc
        reason = str(exc) if isinstance(exc, (WindowTupleError, SchemaViolation)) else repr(exc)
        self.outputs[error_port].buf.append(
            {"operator": self.name, "port": port, "tuple": tup, "error": reason})


def _connections(odef: OperatorDef) -> list[Any]:
    return [c for inp in odef.inputs for c in inp.connections]



_INT_TYPES = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "timestamp"}


def _default_key(types: dict[str, str], partition_by: Any) -> Any:
    """The partition key IBM's C++ timers use when no partition exists: the type's default."""
    spl_type = types.get(partition_by) if isinstance(partition_by, str) else None
    if spl_type in _INT_TYPES:
        return 0
    if spl_type in ("float32", "float64"):
        return 0.0
    if spl_type == "boolean":
        return False
    return ""
