"""The operator core: one operator's semantics, with no I/O, no event loop and no clock of its own.

A host (the asyncio runtime, the synchronous host Spark stages and trace replays use, a worker
process) drives a core with a few calls and nothing else:

* `handle` (connection, item): a batch of tuples, a `Punct`, a `Watermark`, a
  `CheckpointBarrier`;
* `on_time` (now): the clock reached `next_deadline`: window and operator timers fire;
* for sources, `submit`/`submit_punct` (what the source produced) and `serve_barrier`;
* once `inputs_done` (or a source ended): `close_outputs` (the maximum watermark and final),
  then `shut_down`.

What the operator submits waits in the output ports (`outputs`, `OutputPort.take`) until the
host delivers it; what it needs of the host (the time, checkpoint reports, stop requests) it
asks through the `CoreHost` protocol. The state (`snapshot`, `restore`) is plain data.

Punctuation (standard-operators.md P1, P2): a window mark goes to the port's window, then to
``on_punct``, then is forwarded by a "preserving" operator. A final mark counts per connection;
when every connection of a port has sent one, the port's window gets it (Java flavor: FINAL
events) and ``on_punct`` runs; when every port has, an event-time operator submits the maximum
watermark (E23) and final is forwarded once on every output port (`finish`).

Watermarks (eventtime-checkpoint.md E29-E31): a source with ``event_time`` derives one from each
submitted tuple (minus the lag, throttled by the minimum gap); any other operator in the
event-time region keeps one value per input connection and moves when their minimum does, first
feeding its timeInterval windows, then forwarding the new value on every output port, unless
it holds tuples (``holds_watermarks``) and sends watermarks on itself.

Aligned checkpoints: after a connection delivered checkpoint n's barrier, its items are held
until every live connection has; then the core reports its state (`CoreHost.report_checkpoint`),
forwards the barrier, and handles the held items.
"""

from __future__ import annotations

import heapq
import itertools
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from operator import le, length_hint, lt
from typing import Any

from ..graph import (
    CheckpointBarrier,
    EventTime,
    FrozenGraph,
    Operator,
    OperatorDef,
    Punct,
    Watermark,
)
from ..windows import (
    EVENT_TIME_MAX,
    EVENT_TIME_MIN,
    StreamWindow,
    StreamWindowEvent,
    TimeIntervalWindow,
    WindowTupleError,
    check_watermark,
)
from . import _state, _submit
from ._errors import USER_FAILURES, OperatorError, SchemaViolation, TupleFailed, reason_of
from ._host import CoreHost, FinalHold, TimerHandle
from ._loops import LoopLog
from ._metrics import Counter, InputPortMetrics, OperatorMetrics, OutputPortMetrics
from ._output import MarkedBatch, OutputPort, control_positions
from ._windows import Window, build_window, failed_event, route_listener_errors

__all__ = ["HOST_ATTRIBUTES", "CoreHost", "FinalHold", "OperatorCore", "TimerHandle"]

# What `OperatorCore.setup` sets on the operator it runs: not the operator's own attributes.
HOST_ATTRIBUTES = frozenset({"context", "submit", "submit_punct"})


class OperatorCore:
    """One operator of a graph, driven by a host (and the operator's `OperatorContext`)."""

    def __init__(self, odef: OperatorDef, graph: FrozenGraph, region: Mapping[str, EventTime],
                 host: CoreHost) -> None:
        self.host = host
        self.odef = odef
        self.graph = graph
        self.op: Operator = odef.operator
        self.metrics = OperatorMetrics(odef.name, queue_capacity=odef.inbox_batches)
        self.metrics.inputs = [InputPortMetrics() for _ in odef.inputs]
        self.metrics.outputs = [OutputPortMetrics() for _ in odef.outputs]
        self.outputs = [OutputPort(s, m, self._invalid_output_of(port))
                        for port, (s, m) in enumerate(zip(odef.outputs, self.metrics.outputs,
                                                          strict=True))]
        self._data_ports = [p for p in range(len(self.outputs)) if p != odef.error_port]
        # Connections, numbered in port order: which port each feeds.
        self.connections = [c for inp in odef.inputs for c in inp.connections]
        self.conn_port = [port for port, inp in enumerate(odef.inputs) for _ in inp.connections]
        self.conn_feedback = [c.feedback for c in self.connections]
        self._finals_needed = [sum(1 for c in inp.connections if not c.feedback) for inp in odef.inputs]
        self._ports_open = sum(1 for n in self._finals_needed if n > 0)
        self._final_from = [False] * len(self.conn_port)
        # Event time: own definition (outputEventTime) or inherited (inputWatermark).
        self.event_time = region.get(odef.name)
        own = odef.event_time
        self._generates_watermarks = own is not None and not own.manual
        # An operator with its own event time (E27, SPL's outputEventTime) starts a region of
        # its own: its watermarks come from the tuples it submits (or its set_watermark); those
        # it receives only move its input windows (``_in_wm``). Forwarded too, an upstream
        # watermark ahead of its own times made its later tuples late downstream.
        self._own_time = own is not None
        self._in_wm: int | None = None
        self._et_attribute = own.attribute if own is not None else ""
        self._lag_ticks = own.ticks(own.lag_ns) if own is not None else 0
        self._gap_ticks = own.ticks(own.minimum_gap_ns) if own is not None else 0
        self._wm_in: list[int | None] = [0 if c.operator in region and not c.feedback else None
                                         for c in self.connections]
        self._watermark: int | None = None
        # A synchronous source's items being pulled from its generate(): a manual watermark set
        # meanwhile goes in among them, in its place (`pull_items`).
        self._deferred: list[Any] | None = None
        self._last_sent: int | None = None
        self.windows: list[Window | None] = []
        self._timed: list[StreamWindow[Any]] = []
        self._ti: list[TimeIntervalWindow[Any]] = []
        self._timers: list[tuple[int, int, TimerHandle]] = []  # operator timers, a heap
        self.timers_dropped = 0  # pending when final ended the operator (the host may warn)
        self._timer_seq = itertools.count()
        self.finished = False
        # Aligned checkpoints: connections that delivered the barrier hold their entries.
        self._aligning: int | None = None
        self._aligned: set[int] = set()
        self._held: deque[tuple[int, Any]] = deque()
        self._replay: deque[tuple[int, Any]] = deque()
        self._loop: LoopLog | None = None  # a checkpoint waiting for its barrier round a loop
        # Feedback connections that delivered a checkpoint's barrier before this operator took
        # its state (it came another way: a loop through an autonomous operator, or a feedback
        # connection that closes no loop): connection -> checkpoint id. Nothing is logged there.
        self._loop_early: dict[int, int] = {}
        # Its input ports' window clauses and keys, as every checkpoint records them (`_state`):
        # the graph does not change while it runs, so they are worked out once.
        self.port_shapes = _state.port_shapes(odef)
        self._barrier_request: int | None = None  # sources: start this checkpoint next
        # The consistent region this operator is in (None: autonomous, barriers are dropped) and
        # the connections that carry its barriers (from operators of the same region).
        self.region: str | None = None
        self._barrier_conns: frozenset[int] = frozenset()
        self._wm_initial = list(self._wm_in)
        self._holds = 0  # deferred finals not yet released
        self._epoch = 0  # resets so far: holds taken before the last one are void
        self.input_paused = False  # the operator asked its host to stop taking input (full)
        self.final_state: Any = None  # the state it ended with, for checkpoints taken after
        self.submit: Callable[..., None] = self._make_submit()
        # The operator's own batch handler, if it has one (else one `on_tuple` call a tuple).
        self._on_tuples: Callable[[Iterator[Any], int], None] | None = (
            self.op.on_tuples if type(self.op).on_tuples is not Operator.on_tuples else None)
        # A window mark nothing reacts to (default on_punct, and not forwarded: not preserving,
        # or no data output to forward it on, as for a sink) is only counted.
        self._inert_marks = (type(self.op).on_punct is Operator.on_punct
                             and (self.op.window_punctuation != "preserving" or not self._data_ports))
        # A sink with its own batch handler that sees neither marks nor watermarks takes every
        # tuple of a marked batch in one call: it cannot tell where the marks were, and a
        # watermark it only passes on (to no data output) may come after the tuples around it.
        self._gathers_marked = (self._inert_marks and not self._data_ports
                                and self._on_tuples is not None
                                and type(self.op).on_watermark is Operator.on_watermark)
        # An operator with a batch handler and its own on_tuple (Custom): a marked batch whose
        # marks are dense (a mark after each tuple, as Aggregate's and Join's outputs) goes
        # through the one-loop path a tuple at a time, where slicing it into runs of one tuple
        # for `on_tuples` cost ~1 µs a mark (a sink after a count(1) trigger: 9.6x a loop).
        self._tuple_at_a_time = (type(self.op).on_tuple is not Operator.on_tuple
                                 and not self._gathers_marked)

    # ------------------------------------------------------------ context API

    # SPL getChannel() / getMaxChannels(): the parallel-region channel this core runs in and the
    # region's width; 0 and 1 outside any region. A region's worker process sets them on this
    # class (every core there runs in its channel), so a source sees them from setup() on.
    channel: int = 0
    width: int = 1

    @property
    def name(self) -> str:
        return self.odef.name

    @property
    def consistent_region(self) -> str | None:
        return self.region

    @property
    def job(self) -> str:
        return self.host.job_name

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.graph.params)

    def now(self) -> int:
        return self.host.now()

    @property
    def watermark(self) -> int | None:
        return self._watermark

    @property
    def stopping(self) -> bool:
        """True once the job was asked to stop: a source should return soon."""
        return self.host.stopping

    def window(self, port: int = 0) -> Window:
        w = self.windows[port] if 0 <= port < len(self.windows) else None
        if w is None:
            raise ValueError(f"operator {self.name!r}: input port {port} is not windowed")
        return w

    def _make_submit(self) -> Callable[..., None]:
        """The cheapest submit that does what this operator's ports need (`_submit`)."""
        return _submit.make_submit(self)

    def batch_submit(self, port: int = 0) -> Callable[[Iterable[Any]], None]:
        """A function submitting every tuple of an iterable on ``port``, in order, as `submit`
        does each: an operator's ``on_tuples`` hands it a whole ``map`` or ``filter`` at once.
        What was submitted before the iterable raised stays submitted (the tuples before the
        failing one keep their output). Ask once (in ``setup``); it stays valid for the core's
        life."""
        return _submit.batch_submit(self, port)

    def result_submit(self, port: int = 0) -> Callable[[Any], None]:
        """A function submitting a tuple on ``port`` followed by a window mark, as `submit` and
        `submit_punct` would: what a windowed operator sends after each trigger, in one call.
        Ask once (in ``setup``); it stays valid for the core's life."""
        return _submit.result_submit(self, port)

    def results_submit(self, port: int = 0) -> Callable[[list[Any]], None]:
        """A function submitting each tuple of a list on ``port``, each followed by a window
        mark, as `result_submit` on each would: a run of triggers' rows in one call. Ask once
        (in ``setup``); it stays valid for the core's life."""
        return _submit.results_submit(self, port)

    def submit_punct(self, punct: Punct = Punct.WINDOW, port: int = 0) -> None:
        if punct is not Punct.WINDOW:
            raise ValueError(f"operator {self.name!r}: only window marks can be submitted; final "
                             "punctuation is sent by the runtime when the inputs end (an output "
                             "port cannot end early: SPL's submit(Sys.FinalMarker) is not "
                             "supported)")
        try:  # `OutputPort.mark` inlined: a mark after each join arrival
            out = self.outputs[port] if port >= 0 else None  # not an index from the end
        except (IndexError, TypeError):
            out = None
        if out is None:
            raise _submit.no_port(self, port)
        buf = out.buf
        out.at.append(len(buf))
        buf.append(punct)

    def submit_watermark(self, value: int) -> None:
        """Send a watermark on (operators that hold tuples and so hold watermarks with them)."""
        if not self.op.holds_watermarks:
            raise ValueError(f"operator {self.name!r}: submit_watermark is for operators that set "
                             "holds_watermarks = True; the runtime forwards the others' watermarks")
        check_watermark(value, "submit_watermark({!r})")  # refused here, naming the operator
        self._send_watermark(value)

    def set_watermark(self, value: int) -> None:
        """Manual watermark mode (E28): advance this operator's watermark and send it on."""
        if self.odef.event_time is None or not self.odef.event_time.manual:
            raise ValueError(f"operator {self.name!r}: set_watermark needs event_time with "
                             "manual_watermarks=True")
        check_watermark(value, "set_watermark({!r})")  # refused here, naming the operator
        if self._watermark is not None and value <= self._watermark:
            return
        self._watermark = self.metrics.watermark = value
        deferred = self._deferred
        if deferred is not None:
            deferred.append(_submit.ManualWatermark(value))  # after the tuples yielded before it
            return
        self._send_watermark(value)

    def pull_items(self, items: Iterator[Any], n: int, into: list[Any]) -> None:
        """Sources: up to ``n`` items of ``generate()``'s iterator ``items`` appended to
        ``into``, which the host then passes to `emit_items`; a manual watermark set meanwhile
        goes in among them, after the tuples yielded before it. Sent at once, it overtook them
        and they arrived late (a pane's ten tuples dropped behind the watermark that closed
        it). What ``items`` raises propagates, ``into`` holding what came before it."""
        self._deferred = into
        try:
            into.extend(itertools.islice(items, n))
        finally:
            self._deferred = None

    async def flush(self) -> None:
        """Sources: send what was submitted downstream (waits while downstream is full)."""
        await self.host.flush(self)

    async def sleep_until(self, when: int) -> None:
        """Sources: flush, then wait for the clock."""
        await self.host.flush(self)
        await self.host.sleep_until(self, when)

    async def make_consistent(self) -> bool:
        """Sources in a consistent region: checkpoint the region now and wait; True once it
        committed, False if the region was reset first (SPL ``makeConsistent``)."""
        return await self.host.make_consistent(self)

    def call_at(self, when: int, callback: Callable[[], None]) -> TimerHandle:
        """Run ``callback`` between two items once the clock reaches ``when`` (ns): when the
        host next looks at the clock, after the batch it is handling (and at the latest when
        the inputs end); what it submits is delivered right after, as for any item. Timers not
        yet due when the core ends die with it (`timers_dropped`)."""
        timer = TimerHandle(when, callback)
        heapq.heappush(self._timers, (when, next(self._timer_seq), timer))
        return timer

    def counter(self, name: str) -> Counter:
        """A named count of the operator's own, shown by the status view and exported to
        Prometheus (``riverbed_operator_events_total{name=...}``); the same name, the same one."""
        counters = self.metrics.counters
        found = counters.get(name)
        if found is None:
            found = counters[name] = Counter()
        return found

    def defer_final(self) -> FinalHold:
        """Keep running after every input ended, until the returned hold is called (released);
        final punctuation is forwarded only then (operators that still hold items: Delay). A
        reset of the core drops its holds: those taken before are no longer ``active``."""
        self._holds += 1
        return FinalHold(self, self._epoch)

    def _release_hold(self, hold: FinalHold) -> None:
        if hold.epoch == self._epoch:
            self._holds -= 1
            self.host.wake(self)

    def pause_input(self, paused: bool = True) -> None:
        """Stop (or resume) taking input: an operator whose buffer is full (SPL's blocked port:
        Delay's ``bufferSize``, Throttle) holds its upstream back, which backpressure then
        carries to the sources. The operator's own timers keep firing while input waits. A
        host that cannot hold input back (Spark's micro-batches) ignores it. Input taken again
        from outside an item (another task: MQTTSink's publisher once the broker took its
        backlog) wakes the host, which otherwise waits on the operator's own items only."""
        if self.input_paused and not paused:
            self.input_paused = False
            self.host.wake(self)
            return
        self.input_paused = paused

    @property
    def input_ports(self) -> int:
        return len(self.odef.inputs)

    @property
    def output_ports(self) -> int:
        """Data output ports (an error port, if the graph asked for one, is not counted)."""
        return len(self.outputs) - (1 if self.odef.error_port is not None else 0)

    def output_schema(self, port: int = 0) -> Any:
        return self.odef.outputs[port]

    def input_schema(self, port: int = 0) -> Any:
        """The declared schema of the streams input ``port`` takes (None: undeclared)."""
        return self.graph.input_schema(self.name, port)

    def request_checkpoint(self) -> int | None:
        """Ask the job for a checkpoint now (SPL operator-driven regions); its id, or None."""
        return self.host.request_checkpoint()

    # ---------------------------------------------------------------- set-up

    def setup(self) -> None:
        """Build the windows, give the operator its context, run its ``setup``."""
        for port in range(len(self.odef.inputs)):
            w = self.make_window(port)
            self.windows.append(w)
            if w is not None:
                self._track(w)
        self.op.context = self
        # The operator's own submit calls go straight to the core's fast path.
        self.op.submit = self.submit  # type: ignore[method-assign]
        self.op.submit_punct = self.submit_punct  # type: ignore[method-assign]
        self.guard(self.op.setup)

    def ports_ready(self) -> None:
        """Every operator was set up (SPL allPortsReady)."""
        self.guard(self.op.on_ports_ready)

    def activate(self, now: int) -> None:
        """The ports are ready at ``now``: the windows start their timers."""
        for w in self.windows:
            if w is not None:
                self.guard(w.activate, None, now)

    def make_window(self, port: int) -> Window | None:
        """A fresh window for an input port, wired to the operator (None for a plain port)."""
        window = build_window(self.odef, port, self.graph, event_time=self.event_time, op=self.op,
                              listener=self._listener_for(port))
        if window is not None and self.odef.error_port is not None:
            route_listener_errors(window, self._window_failure_route(port),
                                  [self.outputs[p] for p in self._data_ports])
        return window

    def _window_failure_route(self, port: int) -> Callable[[list[Any], str], None]:
        """Where a window event that failed sends its tuples: the error port, one record each."""
        error_port = self.odef.error_port
        assert error_port is not None

        def route(tuples: list[Any], reason: str) -> None:
            self.metrics.inputs[port].errors += 1
            buf = self.outputs[error_port].buf
            for tup in tuples:
                buf.append({"operator": self.name, "port": port, "tuple": tup, "error": reason})

        return route

    def replace_window(self, port: int, window: Window) -> None:
        """Install another window on a port (a restarted instance's fresh window)."""
        old = self.windows[port]
        self.windows[port] = window
        if isinstance(old, StreamWindow) and old in self._timed:
            self._timed.remove(old)
        if isinstance(old, TimeIntervalWindow) and old in self._ti:
            self._ti.remove(old)
        self._track(window)

    def _track(self, w: Window) -> None:
        if isinstance(w, TimeIntervalWindow):
            self._ti.append(w)
        elif w.spec.uses_system_time:
            self._timed.append(w)

    def _listener_for(self, port: int) -> Callable[[StreamWindowEvent[Any]], None]:
        # A closure with the port bound as a default: one call per event costs about 45 ns
        # where functools.partial with a keyword costs 115 ns (it builds a kwargs dict).
        handle = self.op.on_window_event

        def listener(event: StreamWindowEvent[Any], handle: Any = handle, port: int = port) -> None:
            handle(event, port)

        return listener

    # ------------------------------------------------------------- driving

    @property
    def inputs_done(self) -> bool:
        """Every input port ended and nothing is held back: the host closes the outputs."""
        return bool(self.odef.inputs) and self._ports_open == 0 and self._holds == 0

    @property
    def inputs_ended(self) -> bool:
        """Every input port has seen final (the operator may still run: deferred final)."""
        return self._ports_open == 0 and bool(self.odef.inputs)

    @property
    def running(self) -> bool:
        """Inputs still open, or a deferred final not released: the host keeps feeding it."""
        return self._ports_open > 0 or self._holds > 0

    def handle(self, conn: int, item: Any) -> None:
        """One item from connection ``conn`` (in port order; -1: the host's own): a batch, a
        mark, a watermark or a barrier. Items of connections that delivered the barrier of
        the checkpoint being aligned are held, then handled once it is aligned."""
        self._handle_one(conn, item)
        replay = self._replay
        while replay:  # a checkpoint was aligned: what its connections held, in order
            conn, item = replay.popleft()
            self._handle_one(conn, item)

    def _handle_one(self, conn: int, item: Any) -> None:
        if self._aligning is not None and conn in self._aligned:
            self._held.append((conn, item))  # after this connection's barrier
            return
        loop = self._loop
        if loop is not None and conn in loop.waiting:
            loop.record(conn, item)  # in flight round a loop at the checkpoint (`_loops`)
        self._dispatch(conn, item)

    def _dispatch(self, conn: int, item: Any) -> None:
        if type(item) is list:
            self._handle_batch(self.conn_port[conn], item)
        elif type(item) is MarkedBatch:
            self._handle_marked(conn, item)
        elif isinstance(item, Watermark):
            self._handle_watermark(conn, item.value)
        elif item is Punct.WINDOW:
            self._handle_window_mark(self.conn_port[conn])
        elif item is Punct.FINAL:
            self._handle_final(conn)
            if self._aligning is not None:
                self._check_aligned()  # a connection that ended owes no barrier
            if self._loop is not None and conn >= 0 and self.conn_feedback[conn]:
                self._loop_returned(conn)  # nor does a loop that ended
        elif isinstance(item, CheckpointBarrier):
            if item.region == self.region:  # another region's barrier ends at its border
                self._on_barrier(conn, item.id)
        elif type(item) is TupleFailed:  # a tuple that could not reach this operator
            port = self.conn_port[conn]
            self.metrics.inputs[port].errors += 1
            self.fail_or_route(item.error, port, item.tuple)
        else:
            raise TypeError(f"operator {self.name!r}: a host delivered {item!r}: expected a batch "
                            "(list), Punct, Watermark or CheckpointBarrier")

    def next_deadline(self) -> int | None:
        """When the core next needs `on_time` (ns): its windows' and its own timers' earliest."""
        due = None
        for w in self._timed:
            d = w.next_deadline()
            if d is not None and (due is None or d < due):
                due = d
        timers = self._timers
        while timers and timers[0][2].cancelled:
            heapq.heappop(timers)
        if timers and (due is None or timers[0][0] < due):
            due = timers[0][0]
        return due

    def on_time(self, now: int) -> None:
        """The clock is at ``now``: window timers and operator timers due by then fire in
        time order (a window's before an operator's at the same instant)."""
        self._fire_timers(now, self._timed)
        for w in self._timed:
            self.guard(w.advance_time, None, now)

    def _fire_timers(self, now: int, windows: Sequence[StreamWindow[Any]]) -> None:
        """The operator's timers due by ``now`` fire, in time order; before each, ``windows``
        move to its time (their own timers due before it fire first)."""
        timers = self._timers
        while timers:
            when, _, timer = timers[0]
            if timer.cancelled:
                heapq.heappop(timers)
                continue
            if when > now:
                break
            for w in windows:
                self.guard(w.advance_time, None, when)
            heapq.heappop(timers)
            if not timer.cancelled:  # (a window's event may have cancelled it)
                timer.cancelled = True
                self.guard(timer.callback)

    @property
    def live_timers(self) -> int:
        """How many of the operator's own timers (`call_at`) are pending."""
        return sum(1 for _, _, timer in self._timers if not timer.cancelled)

    def cancel_timers(self) -> None:
        """Forget every operator timer (the core ends)."""
        for _, _, timer in self._timers:
            timer.cancelled = True
        self._timers.clear()

    # -------------------------------------------------------------- sources

    def join_region(self, region: str, barrier_connections: Iterable[int]) -> None:
        """The operator is in consistent region ``region``; barriers of its checkpoints come on
        ``barrier_connections`` (those from operators of the same region)."""
        self.region = region
        self._barrier_conns = frozenset(barrier_connections)

    def start_checkpoint(self, checkpoint_id: int) -> None:
        """Sources: take checkpoint ``checkpoint_id`` at the next batch boundary or flush."""
        self._barrier_request = checkpoint_id

    @property
    def barrier_requested(self) -> bool:
        return self._barrier_request is not None

    def serve_barrier(self) -> None:
        """Sources: if a checkpoint was asked for, report the state and emit the barrier now,
        after everything submitted so far."""
        checkpoint_id = self._barrier_request
        if checkpoint_id is None:
            return
        self._barrier_request = None
        self.host.report_checkpoint(checkpoint_id, self.name, self.checkpoint_state())
        barrier = CheckpointBarrier(checkpoint_id, self.region or "")
        for out in self.outputs:
            out.control(barrier)

    def emit_items(self, items: list[Any]) -> bool:
        """Sources: submit tuples and `Punct.WINDOW` marks, as a synchronous source yields them;
        a tuple that breaks the event-time rules goes to the error port or stops the job. True
        when a `Punct.FINAL` was among them: the source ends there (what follows is dropped)."""
        return _submit.emit_items(self, items)

    # -------------------------------------------------------- checkpoints

    def _on_barrier(self, conn: int, checkpoint_id: int) -> None:
        if conn >= 0 and self.conn_feedback[conn]:
            # The barrier this operator forwarded, back round a loop: no new alignment.
            loop = self._loop
            if loop is not None and loop.checkpoint_id == checkpoint_id:
                self._loop_returned(conn)
            elif loop is None:
                self._loop_early[conn] = checkpoint_id
            return
        if self._aligning is None:
            self._aligning, self._aligned = checkpoint_id, set()
        elif checkpoint_id != self._aligning:
            raise OperatorError(self.name, self.conn_port[conn] if conn >= 0 else None, None,
                                RuntimeError(f"barrier of checkpoint {checkpoint_id} while "
                                             f"aligning checkpoint {self._aligning}"))
        self._aligned.add(conn)
        self._check_aligned()

    def _check_aligned(self) -> None:
        """Every live connection delivered the barrier: snapshot, forward it."""
        _state.check_aligned(self)

    def _loop_returned(self, conn: int) -> None:
        """Feedback connection ``conn`` delivered the barrier of the checkpoint whose report
        waits (or ended): once every loop did, the state goes with what was in flight."""
        loop = self._loop
        if loop is not None and loop.close(conn):
            self._finish_loop()

    def _finish_loop(self) -> None:
        loop = self._loop
        if loop is not None:
            self._loop = None
            self.host.report_checkpoint(loop.checkpoint_id, self.name, loop.finish())

    def checkpoint_state(self, *, drain: bool = True, drain_operator: bool | None = None) -> dict[str, Any]:
        """Drain, then this operator's whole state as plain data: its own, its windows', its
        watermarks and which connections have ended.

        ``drain=False`` snapshots the windows between two items instead of
        checkpointing them: no pending evictions are reported and a cpp window
        does not suspend its time (the Spark bridge stores state after every
        micro-batch this way, which SPL would not call a checkpoint). The
        operator's own ``drain`` runs when ``drain_operator`` (default: ``drain``).
        """
        return _state.checkpoint_state(self, drain=drain, drain_operator=drain_operator)

    def restore(self, state: Any, *, reset: bool = True) -> None:
        """Take back a `checkpoint_state` (after `activate`): the core's own state first (an
        operator's restore may already submit, under the restored watermark state), then the
        operator's, then its windows' (``reset``: as a checkpoint reset, else a snapshot)."""
        _state.restore(self, state, reset=reset)

    def reset(self, state: Any, *, initial_operator_state: Any = None) -> None:
        """Reset in place (a consistent region heals): everything in flight inside the core is
        dropped (held items, output not yet handed over, timers, an alignment under way), then
        the state is ``state`` (a `checkpoint_state`), or with None the initial one: the
        operator's ``reset_to_initial_state`` if it has one, else ``initial_operator_state``
        (its snapshot when the job started), windows reset to initial (spec C5, C6)."""
        _state.reset(self, state, initial_operator_state=initial_operator_state)

    # ------------------------------------------------------------ ending

    def close_outputs(self) -> None:
        """Every input ended: the operator's timers already due fire (what they submit comes
        before final: a timer set for now by the last tuples was dropped), then the maximum
        watermark, then final, on every output port."""
        if self._timers:  # (not the windows: processing time does not move at final)
            self._fire_timers(self.host.now(), ())
        if self.event_time is not None or self._generates_watermarks:
            self._send_watermark(EVENT_TIME_MAX)  # E23: max watermark right before final
            if self.odef.kind == "source":  # its own, as downstream's shows the max it heard
                self._watermark = self.metrics.watermark = EVENT_TIME_MAX
        for out in self.outputs:
            out.control(Punct.FINAL)

    def end_failed(self) -> list[OperatorError | SchemaViolation]:
        """The operator failed where nothing can replay what is in flight (a job without
        checkpoints drains instead): what it submitted before the failure stays to be sent,
        then the maximum watermark and final go out on every port not closed yet, as when its
        inputs end, so downstream drains. A submitted tuple that violates its port's schema is
        dropped with those after it in the batch, and its failure returned for the job to
        report; a port that keeps failing ends with final alone. The host then delivers, and
        shuts the operator down."""
        failures: list[OperatorError | SchemaViolation] = []
        for out in self.outputs:
            for _ in range(3):
                if not out.buf:
                    break
                try:
                    out.seal()  # (a violation leaves the tuples before it)
                except (OperatorError, SchemaViolation) as exc:
                    failures.append(exc)
            if out.buf:
                out.reset()
        # A close that failed part way (a port's seal) left final on the ports before it.
        open_ports = [out for out in self.outputs
                      if not (out.pending and out.pending[-1] is Punct.FINAL)]
        if len(open_ports) == len(self.outputs):
            self.close_outputs()
        else:
            for out in open_ports:
                out.control(Punct.FINAL)
        return failures

    def shut_down(self, *, report: bool = True) -> None:
        """The operator ends: ``on_shutdown``, then (with ``report``) the host hears of it, to
        store its final state for checkpoints taken after (not when a stop suspends the job:
        none come after)."""
        if report:  # ended by final (not a stop): its pending timers never fire (`timers_dropped`)
            self.timers_dropped = self.live_timers
        self.cancel_timers()
        self._finish_loop()  # it ends before its barrier came back: what came is all there was
        self.guard(self.op.on_shutdown)
        self.finished = self.metrics.finished = True
        if report:
            self.host.operator_finished(self)

    # ------------------------------------------------------------- handling

    def _handle_batch(self, port: int, batch: list[Any]) -> None:
        pm = self.metrics.inputs[port]
        pm.tuples_processed += len(batch)
        window = self.windows[port]
        if window is not None and self._timed:
            now = self.host.now()
            for w in self._timed:
                self.guard(w.advance_time, None, now)
        if isinstance(window, TimeIntervalWindow):  # its inlined batch path: errors name their index
            self._insert_routed(port, batch, window.insert_batch, (WindowTupleError, SystemExit),
                                lambda exc: getattr(exc, "index", 0))
            pm.tuples_dropped_late = window.dropped
            return
        if window is not None:  # the fastest insert path the window has now (asked per batch)
            self._insert_routed(port, batch, window.inserter(), USER_FAILURES,
                                lambda exc: window.batch_failed_at)
            return
        self._run_tuples(port, batch)

    def _run_tuples(self, port: int, batch: list[Any]) -> None:
        """Hand a run of tuples of a plain port to the operator: all at once through
        ``on_tuples`` when it has one of its own, else one ``on_tuple`` call each. A tuple that
        raises stops the job naming it or goes to the error port; the rest go on after it."""
        pm = self.metrics.inputs[port]
        on_tuples = self._on_tuples
        if on_tuples is not None:
            n = len(batch)
            it = iter(batch)
            while True:
                try:
                    on_tuples(it, port)
                except USER_FAILURES as exc:  # user code: the tuple it took last failed
                    i = n - length_hint(it) - 1
                    if i < 0:  # before it took any: not a tuple's failure
                        if isinstance(exc, OperatorError):
                            raise
                        raise OperatorError(self.name, port, None, exc) from exc
                    pm.errors += 1
                    self.fail_or_route(exc, port, batch[i])
                    continue
                if length_hint(it):
                    raise OperatorError(self.name, port, None, RuntimeError(
                        f"{type(self.op).__name__}.on_tuples returned before taking every tuple "
                        f"of the batch ({length_hint(it)} of {n} left); it must take them all"))
                return
        on_tuple = self.op.on_tuple
        n = len(batch)
        it = iter(batch)
        while True:
            try:
                for tup in it:
                    on_tuple(tup, port)
                return
            except USER_FAILURES as exc:  # user code: stop the job naming the tuple, or route it
                pm.errors += 1
                self.fail_or_route(exc, port, batch[n - length_hint(it) - 1])

    def _handle_marked(self, conn: int, batch: MarkedBatch) -> None:
        """Tuples interleaved with window marks and watermarks: each run of tuples as a batch,
        each mark in its place."""
        port = self.conn_port[conn]
        if self.windows[port] is None and (self._on_tuples is None or (  # one loop, no slicing
                self._tuple_at_a_time and batch.window_marks * 4 >= batch.tuples)):
            pm = self.metrics.inputs[port]
            pm.tuples_processed += batch.tuples
            on_tuple = self.op.on_tuple
            inert = self._inert_marks
            # Marks the operator hears but does not forward (a sink counting them, as after
            # each Join arrival): its `on_punct` in place, without `_handle_window_mark`'s
            # window and forwarding checks a mark.
            heard = not inert and (self.op.window_punctuation != "preserving"
                                   or not self._data_ports)
            if inert or heard:
                pm.window_puncts_processed += batch.window_marks
            on_punct = self.op.on_punct
            window = Punct.WINDOW
            for item in batch:
                if item is window:
                    if heard:
                        try:
                            on_punct(window, port)
                        except OperatorError:
                            raise
                        except USER_FAILURES as exc:
                            raise OperatorError(self.name, port, None, exc) from exc
                    elif not inert:
                        self._handle_window_mark(port)
                elif type(item) is Watermark:
                    self._handle_watermark(conn, item.value)
                else:
                    try:
                        on_tuple(item, port)
                    except USER_FAILURES as exc:  # user code: stop the job naming the tuple, or route it
                        pm.errors += 1
                        self.fail_or_route(exc, port, item)
            return
        if self._gathers_marked and self.windows[port] is None:
            self._gather_marked(conn, port, batch)
            return
        panes = self.windows[port]
        if (isinstance(panes, TimeIntervalWindow) and not self._timed and not panes.raises_insertions
                and type(self.op).on_watermark is Operator.on_watermark and not self._own_time
                and self._marked_into_panes(conn, port, batch, panes)):
            return
        start = 0
        controls = batch.controls
        if controls is not None:  # where the marks and watermarks are: no walk
            for i in controls:
                if i > start:
                    self._handle_batch(port, batch[start:i])
                item = batch[i]
                if item is Punct.WINDOW:
                    self._handle_window_mark(port)
                else:
                    self._handle_watermark(conn, item.value)
                start = i + 1
            if start < len(batch):
                self._handle_batch(port, batch[start:])
            return
        for i, item in enumerate(batch):
            if item is Punct.WINDOW:
                if i > start:
                    self._handle_batch(port, batch[start:i])
                self._handle_window_mark(port)
                start = i + 1
            elif type(item) is Watermark:
                if i > start:
                    self._handle_batch(port, batch[start:i])
                self._handle_watermark(conn, item.value)
                start = i + 1
        if start < len(batch):
            self._handle_batch(port, batch[start:])

    def _marked_into_panes(self, conn: int, port: int, batch: MarkedBatch,
                           window: TimeIntervalWindow[Any]) -> bool:
        """A marked run into a timeInterval window, as `_handle_marked` cutting it at every
        mark and watermark would, without the cuts a watermark does not need; False (nothing
        done) when a tuple's event time is not a valid int (the window says what is wrong).

        A watermark that changes no pane of the operator's windows (below their `quiet_limit`,
        and below `next_pane_end` of the earliest tuple put in since the last cut) is quiet:
        the operator's watermark moves and is forwarded in place, and the windows hear it with
        the next cut (`advance_quietly`); the tuples around it go into the window in one insert,
        their event times read once (`read_times`). A tuple after a quiet watermark whose time
        is below that watermark's drop point cuts there first, so it is dropped as it would
        have been. Any other watermark, and every window mark, is handled in place after the
        tuples before it, as `_handle_marked` does. Nothing the operator sees or submits
        differs: its windows' events run only at cuts, with every tuple before them inserted
        and the watermark they had then."""
        controls = batch.controls
        if controls is None:
            controls = control_positions(batch)
        # The tuples apart, and how many come before each control item.
        tuples: list[Any] = []
        before: list[int] = []
        start = 0
        for i in controls:
            if i > start:
                tuples += batch[start:i]
            before.append(len(tuples))
            start = i + 1
        if start < len(batch):
            tuples += batch[start:]
        read = window.read_times(tuples)
        if read is None:
            return False
        times, ordered = read
        pm = self.metrics.inputs[port]
        insert = window.insert_read

        def put(lo: int, hi: int) -> None:
            """Tuples ``lo`` to ``hi`` into the window (`_handle_batch` with their times)."""
            run, at = (tuples, times) if hi - lo == len(tuples) else (tuples[lo:hi], times[lo:hi])
            pm.tuples_processed += len(run)
            self._insert_routed(port, run, lambda part: insert(part, at[len(at) - len(part):], ordered),
                                (WindowTupleError, SystemExit), lambda exc: getattr(exc, "index", 0))
            pm.tuples_dropped_late = window.dropped

        entries = self._wm_in
        single = len(entries) == 1
        send = not self.op.holds_watermarks
        windows = self._ti
        due = limit = min(w.quiet_limit() for w in windows)
        lowest: int | None = None  # the earliest event time put in since the last cut
        quiet: int | None = None  # the last quiet watermark, not yet given to the windows
        window_mark = Punct.WINDOW
        next_end, drop_at = window.next_pane_end, window.drop_point_at

        def hear(value: int) -> None:
            """The windows hear a quiet watermark (at a cut)."""
            for w in windows:
                w.advance_quietly(value)

        cut = seg = 0  # the first tuple not inserted; the first of the current segment
        n, m = len(tuples), len(controls)
        # A source's run (one connection, event times in order, rising watermarks, no window
        # marks): a run of quiet watermarks is passed over in one step (`_quiet_run`).
        values = (self._rising_watermarks(batch, controls)
                  if single and ordered and not batch.window_marks else None)
        k = -1
        while k < m:  # each control item, then the end of the run
            k += 1
            p = before[k] if k < m else n
            if p > seg:  # the tuples since the last control item
                t = times[seg] if ordered else min(times[seg:p])
                # below the quiet watermark's drop point (at most the watermark, a valid time
                # is at least 0): cut there
                if quiet is not None and t < quiet and t < drop_at(quiet):
                    put(cut, seg)
                    cut = seg
                    hear(quiet)
                    quiet = None
                if k < m and (lowest is None or t < lowest):
                    lowest = t
                    limit = min(due, next_end(t))
                seg = p
            if k == m:
                break
            item = batch[controls[k]]
            if item is window_mark:
                mark = True
            else:
                value = item.value
                current = entries[conn]
                if current is None or value <= current:
                    continue  # as `_handle_watermark`: nothing happens
                entries[conn] = value
                low = value if single else min(v for v in entries if v is not None)
                if self._watermark is not None and low <= self._watermark:
                    continue
                # (advanced connection watermarks start at 0 or at a restored, checked value:
                # ``low`` is no lower than the lowest valid watermark)
                if type(low) is int and low < limit:
                    first = k
                    if values is not None and lowest is not None:
                        last = _quiet_run(values, k, limit, before, times)
                        if last > k:  # the next ones are quiet too: on to the last of them
                            k, seg = last, before[last]
                            low = value = values[last]
                            entries[conn] = value
                    self._watermark = self.metrics.watermark = low
                    quiet = low
                    if send:
                        if k == first:
                            self._send_watermark(low, item if low == value else None)
                        else:  # each in its place: nothing is submitted between them (E31)
                            self._send_watermarks([batch[i] for i in controls[first:k + 1]])
                    continue
                mark = False
            if p > cut:
                put(cut, p)
                cut = p
            if quiet is not None:
                hear(quiet)
                quiet = None
            if mark:
                self._handle_window_mark(port)
            else:
                self._advance_watermark(low)
            due = limit = min(w.quiet_limit() for w in windows)
            lowest = None
        if n > cut:
            put(cut, n)
        if quiet is not None:
            hear(quiet)
        return True

    @staticmethod
    def _rising_watermarks(batch: MarkedBatch, controls: list[int]) -> list[int] | None:
        """The values of a run's control items, when all are watermarks of int values each
        above the one before (else None; a window mark's value is a str)."""
        values = [batch[i].value for i in controls]
        if set(map(type, values)) != _submit._INTS or not all(map(lt, values, values[1:])):
            return None
        return values

    def _gather_marked(self, conn: int, port: int, batch: MarkedBatch) -> None:
        """A marked batch for a sink that sees no marks (`_gathers_marked`): its tuples in one
        run, its marks counted, then its watermarks."""
        pm = self.metrics.inputs[port]
        pm.window_puncts_processed += batch.window_marks
        controls = batch.controls
        window = Punct.WINDOW
        if controls is None:
            tuples = [x for x in batch if x is not window and type(x) is not Watermark]
            watermarks = [x for x in batch if type(x) is Watermark]
        elif len(controls) == batch.window_marks:  # marks only (Aggregate's after each result)
            tuples = [x for x in batch if x is not window]
            watermarks = []
        elif len(controls) * 4 >= len(batch):  # marks between most tuples: one filtering pass
            tuples = [x for x in batch if x is not window and type(x) is not Watermark]
            watermarks = [batch[i] for i in controls if batch[i] is not window]
        else:
            tuples, start = [], 0
            for i in controls:
                tuples += batch[start:i]
                start = i + 1
            tuples += batch[start:]
            watermarks = [batch[i] for i in controls if batch[i] is not window]
        if tuples:
            pm.tuples_processed += len(tuples)
            self._run_tuples(port, tuples)
        if not watermarks:
            return
        if self._ti:  # its windows on other ports hear each in turn
            for w in watermarks:
                self._handle_watermark(conn, w.value)
            return
        # Nothing hears the watermarks between: the operator's watermark only moves (and is
        # recorded as sent, to no data output), so the highest does what each in turn would.
        self._handle_watermark(conn, max([w.value for w in watermarks]))

    def _insert_routed(self, port: int, batch: list[Any], insert: Callable[[list[Any]], Any],
                       errors: type[BaseException] | tuple[type[BaseException], ...],
                       failed_at: Callable[[BaseException], int]) -> None:
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
                # (reported with the tuple: not its place in this batch, which hosts cut apart)
                self.fail_or_route(getattr(exc, "tuple_error", exc), port, batch[i])
                start = i + 1

    def _handle_window_mark(self, port: int) -> None:
        self.metrics.inputs[port].window_puncts_processed += 1
        window = self.windows[port]
        if isinstance(window, StreamWindow):
            self.guard(window.window_mark, port)
        try:  # `guard` inlined: a mark can follow every tuple (Join's after each arrival)
            self.op.on_punct(Punct.WINDOW, port)
        except OperatorError:
            raise
        except USER_FAILURES as exc:
            raise OperatorError(self.name, port, None, exc) from exc
        if self.op.window_punctuation == "preserving":
            for p in self._data_ports:
                self.outputs[p].mark(Punct.WINDOW)

    def _handle_final(self, conn: int) -> None:
        if conn < 0 or self._final_from[conn] or self.conn_feedback[conn]:
            return
        self._final_from[conn] = True
        port = self.conn_port[conn]
        self._finals_needed[port] -= 1
        if self._finals_needed[port] > 0:
            return
        self.metrics.inputs[port].final_puncts_processed += 1
        window = self.windows[port]
        if isinstance(window, StreamWindow) and self.op.windows_hear_final:
            self.guard(window.final_mark, port)
        self.guard(self.op.on_punct, port, Punct.FINAL, port)
        self._ports_open -= 1

    def _handle_watermark(self, conn: int, value: int) -> None:
        entries = self._wm_in
        current = entries[conn]
        if current is None or value <= current:
            return  # not an event-time connection, or not an advance (E30: lower ones ignored)
        entries[conn] = value
        low = value if len(entries) == 1 else min(v for v in entries if v is not None)
        if self._own_time:
            if self._in_wm is None or low > self._in_wm:
                self._in_wm = low
                self._hear_watermark(low)
            return
        if self._watermark is not None and low <= self._watermark:
            return
        self._advance_watermark(low)

    def _advance_watermark(self, value: int) -> None:
        # A watermark can come every hundred tuples: `guard` inlined, and the default (empty)
        # on_watermark not called.
        self._watermark = self.metrics.watermark = value
        self._hear_watermark(value)
        if not self.op.holds_watermarks:
            self._send_watermark(value)  # else the operator sends it after the tuples it holds

    def _hear_watermark(self, value: int) -> None:
        """The operator's windows, then the operator, hear input watermark ``value`` (E31)."""
        op = self.op
        try:
            for w in self._ti:  # E31: the operator's own windows first
                w.watermark(value)
            if type(op).on_watermark is not Operator.on_watermark:
                op.on_watermark(value)
        except OperatorError:
            raise
        except USER_FAILURES as exc:
            raise OperatorError(self.name, None, None, exc) from exc

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
        if not EVENT_TIME_MIN <= t <= EVENT_TIME_MAX:  # (the watermark it gives would be refused
            raise SchemaViolation(self.name, 0, tup, f"event time {self._et_attribute!r} = {t!r} "
                                                     "is outside the int64 range of ticks")
        return t - self._lag_ticks

    def _watermark_after(self, candidate: int) -> None:
        watermark = self._watermark
        if watermark is not None and candidate <= watermark:
            return
        self._watermark = self.metrics.watermark = candidate
        last = self._last_sent
        if last is None or candidate >= last + self._gap_ticks:
            self._send_watermark(candidate)

    def _send_watermarks(self, marks: list[Watermark]) -> None:
        """`_send_watermark` for each of ``marks`` (rising values) in turn, in one step."""
        last = self._last_sent
        if last is not None and marks[0].value <= last:
            marks = [m for m in marks if m.value > last]
            if not marks:
                return
        self._last_sent = marks[-1].value
        for p in self._data_ports:
            self.outputs[p].mark_watermarks(marks)

    def _send_watermark(self, value: int, mark: Watermark | None = None) -> None:
        """Forward watermark ``value`` on every data port; ``mark``: the `Watermark` of that
        value the core received, passed on as it is (it cannot change) instead of a new one."""
        if self._last_sent is not None and value <= self._last_sent:
            return
        self._last_sent = value
        ports = self._data_ports
        if ports:  # (a sink has none)
            if mark is None:
                mark = Watermark(value)
            for p in ports:
                self.outputs[p].mark(mark)

    # --------------------------------------------------------------- errors

    def guard(self, fn: Callable[..., Any], port: int | None = None, *args: Any) -> Any:
        """Call user code; what it raises becomes an `OperatorError` naming this operator."""
        try:
            return fn(*args)
        except OperatorError:
            raise
        except USER_FAILURES as exc:
            raise OperatorError(self.name, port, None, exc) from exc

    def _invalid_output_of(self, port: int) -> Callable[[Any, str], None]:
        def invalid(tup: Any, why: str) -> None:
            """A submitted tuple does not match its output port's schema: stop, or route it."""
            exc = SchemaViolation(self.name, port, tup, why)
            if self.odef.error_port is None or port == self.odef.error_port:
                raise exc
            self.fail_or_route(exc, None, tup)

        return invalid

    def fail_or_route(self, exc: BaseException, port: int | None, tup: Any) -> None:
        """A tuple failed: stop the job naming it, or send it to the error port (not a
        ``sys.exit()``: that asks for the end, not for the tuple to be set aside)."""
        if isinstance(exc, OperatorError):
            raise exc
        error_port = self.odef.error_port
        if error_port is None or not isinstance(exc, Exception):
            raise OperatorError(self.name, port, tup, exc, event=failed_event(exc)) from exc
        self.outputs[error_port].buf.append(
            {"operator": self.name, "port": port, "tuple": tup, "error": reason_of(exc)})


def _quiet_run(values: list[int], k: int, limit: int, before: list[int], times: list[int]) -> int:
    """The last of the watermarks ``values[k:]`` (rising) that stay quiet after quiet watermark
    ``k``: below ``limit``, with no tuple after any of them earlier than it (then none can be
    below its drop point, and no cut is needed). Event times in order, and one put in since the
    last cut: ``limit`` stays what it is. ``before[i]``: the tuples before watermark ``i``."""
    j = bisect_left(values, limit, k + 1)  # the first not quiet, or the end
    if j <= k + 1:
        return k
    # each watermark against the first tuple after it (those after the run's last tuple: none)
    e = bisect_left(before, len(times), k, j)
    if not all(map(le, values[k:e], map(times.__getitem__, before[k:e]))):
        return k
    return j - 1
