"""Operators run synchronously, item by item, by a host that is not the asyncio runtime.

The Spark bridge hosts parts of a graph inside Spark tasks: a keyed window
stage per key group, the sinks in the driver, a source in its feeder
process; `riverbed trace` replays cases the same way. Those hosts must behave
exactly as the runtime does, so they drive the same `OperatorCore` (windows,
punctuation rules P1/P2, watermarks E29-E31, error ports, schema checks)
without an event loop: an item is queued, handled at once, and what the
operator submitted is routed to the hosted consumers or handed back to the
host as an exit.

Time is stamped by the host (`StampClock`): it moves only when the host
says, so a replayed micro-batch sees the same times and raises the same
events.
"""

from __future__ import annotations

import copy
import heapq
import itertools
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..graph import FrozenGraph, Punct, Watermark, event_time_region
from ._core import HOST_ATTRIBUTES, OperatorCore
from ._errors import OperatorError, SchemaViolation
from ._output import MarkedBatch, split_marked

__all__ = ["StampClock", "SyncGraph"]


Exit = tuple[str, int, Any]  # (member, output port, item): what left the members


def _fresh(op: Any) -> Any:
    """A copy of ``op`` as the graph script built it, without what a host set on it."""
    try:
        new = copy.copy(op)
        state = {k: v for k, v in vars(op).items() if k not in HOST_ATTRIBUTES}
        for k in HOST_ATTRIBUTES:
            vars(new).pop(k, None)
        vars(new).update(copy.deepcopy(state))
        return new
    except (TypeError, copy.Error):
        return op  # holds something that cannot be copied (a lock, a handle): shared, as before


class _Timer:
    __slots__ = ("callback", "cancelled", "when")

    def __init__(self, when: int, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class StampClock:
    """A clock set by its host: `now` is the stamped time, timers fire in `advance`."""

    def __init__(self, now: int = 0) -> None:
        self._now = now
        self._heap: list[tuple[int, int, _Timer]] = []
        self._seq = itertools.count()

    def now(self) -> int:
        return self._now

    def call_at(self, when: int, callback: Callable[[], None]) -> _Timer:
        timer = _Timer(when, callback)
        heapq.heappush(self._heap, (when, next(self._seq), timer))
        return timer

    async def sleep_until(self, when: int) -> None:
        raise RuntimeError("a synchronously hosted operator cannot wait on the clock")

    def next_due(self, until: int) -> _Timer | None:
        """Pop the earliest live timer due at or before ``until``, moving the clock to it."""
        heap = self._heap
        while heap and heap[0][0] <= until:
            timer = heapq.heappop(heap)[2]
            if not timer.cancelled:
                self._now = max(self._now, timer.when)
                return timer
        return None

    def set(self, now: int) -> None:
        self._now = max(self._now, now)

    def next_when(self) -> int | None:
        """When the earliest live timer is due (None: no timer)."""
        heap = self._heap
        while heap and heap[0][2].cancelled:
            heapq.heappop(heap)
        return heap[0][0] if heap else None


class SyncGraph:
    """Some operators of a graph (``members``, in graph order) driven one item at a time.

    ``feed`` delivers an item (a list of tuples, a `Punct` or a `Watermark`)
    from a stream outside the members to every member it feeds; ``emit``
    submits an item from a member source. Items the members send to
    operators outside them are collected as exits ``(operator, port, item)``
    in the order sent. ``state`` and the ``state`` argument carry everything
    (operators, windows, watermarks, ended connections, the clock) as plain
    data, so a host can store it between micro-batches.

    An exit is a plain entry (a list of tuples, a mark, a watermark) unless the host sets
    ``split_marked_exits`` False: then a `MarkedBatch` leaves whole, for a host that packs it
    for another process anyway (a parallel region's worker) and would only join the parts.
    """

    split_marked_exits = True
    # A host whose job drains after a failure (no checkpoints: nothing could replay what is in
    # flight) sets this: an operator that raises then ends as the runtime's does
    # (`OperatorCore.end_failed`), its failures kept in ``failures`` for the host to report,
    # and the others go on. Otherwise the failure is raised to the host.
    drains_failures = False

    def __init__(self, graph: FrozenGraph, members: Sequence[str], *, now: int = 0,
                 state: Mapping[str, Any] | None = None, name: str | None = None,
                 guard: Callable[[str, list[Any]], None] | None = None,
                 guarded: frozenset[str] = frozenset(),
                 consistent_region: tuple[str, frozenset[str]] | None = None) -> None:
        self.graph = graph
        self.name = name or graph.name
        self.stopping = False
        self.failures: list[OperatorError | SchemaViolation] = []
        self.clock = StampClock(state["now"] if state is not None else now)
        member_set = set(members)
        region = event_time_region(graph)
        # Each host gets its own operator objects: several hosts (key groups) live in one process,
        # and what one group's operator keeps must not leak into another's.
        self.cores = [OperatorCore(replace(graph.operator(n), operator=_fresh(graph.operator(n).operator)),
                                   graph, region, self)
                      for n in members]
        self._by_name = {c.name: c for c in self.cores}
        self._queues: dict[str, deque[tuple[int, Any]]] = {c.name: deque() for c in self.cores}
        self._inside: dict[tuple[str, int], list[tuple[OperatorCore, int]]] = {}
        for core in self.cores:
            for conn, c in enumerate(core.connections):
                self._inside.setdefault((c.operator, c.port), []).append((core, conn))
        self._leaves: set[tuple[str, int]] = set()
        for core in self.cores:
            for port in range(len(core.outputs)):
                if any(op not in member_set for op, _ in graph.consumers(core.name, port)):
                    self._leaves.add((core.name, port))
        self.exits: list[Exit] = []
        # A host's check on the tuples routed to some members (the Spark bridge's key groups).
        self._guard = guard
        self._guarded = guarded
        self._timers: dict[str, _Timer] = {}  # per core: the stamp-clock timer at its deadline
        if consistent_region is not None:  # (name, its operators): joined before setup, which
            name_of, region_members = consistent_region  # may ask for it (`consistent_region`)
            for core in self.cores:
                core.join_region(name_of, [i for i, c in enumerate(core.connections)
                                           if c.operator in region_members])
        for core in self.cores:
            core.setup()
        for core in self.cores:
            core.ports_ready()
        if state is not None:
            ops = state["operators"]
            for core in self.cores:
                core.restore(ops[core.name], reset=False)
                if ops[core.name].get("finished"):
                    core.finished = True
        else:
            for core in self.cores:
                core.activate(self.clock.now())
        for core in self.cores:
            self._route(core)  # what activation raised (an INITIAL_FULL at port readiness)
            self._arm(core)
        self._pump()

    # -- the core's host -----------------------------------------------------------

    @property
    def job_name(self) -> str:
        return self.name

    def now(self) -> int:
        return self.clock.now()

    def report_checkpoint(self, checkpoint_id: int, operator: str, state: Any) -> None:
        raise RuntimeError("checkpoint barriers do not flow through a synchronous host")

    def operator_finished(self, core: OperatorCore) -> None:
        pass

    def request_checkpoint(self) -> int | None:
        return None

    def wake(self, core: OperatorCore) -> None:
        pass  # the pump looks at every core after each item

    async def flush(self, core: OperatorCore) -> None:
        self._route(core)

    async def sleep_until(self, core: OperatorCore, when: int) -> None:
        raise RuntimeError("a synchronously hosted operator cannot wait on the clock")

    async def make_consistent(self, core: OperatorCore) -> bool:
        raise RuntimeError("a synchronously hosted operator is in no consistent region")

    # -- driving -----------------------------------------------------------------

    def feed(self, operator: str, port: int, item: Any) -> None:
        """An item of stream ``operator.out[port]`` (not a member's) reaches the members."""
        for core, conn in self._inside.get((operator, port), ()):
            self._queues[core.name].append((conn, item))
        self._pump()

    def feed_marked(self, operator: str, port: int, batch: Sequence[Any],
                    controls: Sequence[int] | None = None, *, one_by_one: bool = False,
                    on_timer: Callable[[int], None] | None = None,
                    at: int | None = None) -> list[tuple[int, list[Exit]]]:
        """Many items of stream ``operator.out[port]`` in one call: the tuples of ``batch`` with
        control items (window marks, watermarks, final) among them at ``controls`` (a
        `MarkedBatch`'s own by default, else found by walking ``batch``), stamped ``at`` (by
        default the clock's time; `advance` to it first).

        Each run of tuples between two control items is fed as one batch (with
        ``one_by_one``, each tuple alone: a window whose every output must be ordered after
        the tuple that raised it), each control item alone, exactly as `feed` of each in turn
        with ``advance(at, on_timer)`` before each. Returns what each of them sent out,
        apart: ``(index, exits)`` for each that sent something, in order, where ``index`` is
        the control item's position in ``batch`` or the position of the run's last tuple.
        What a timer due between two of them raises goes to ``on_timer`` as in `advance`
        (without it, it counts with the next item's exits, as in `advance` then `feed`).

        A key group's host feeds a bundle of its rows so: through `feed`, each item cost
        tens of thousands of instructions of queueing and pumping, a tenth of the stage.
        """
        if controls is None:
            controls = getattr(batch, "controls", None)
            if controls is None:
                controls = [i for i, x in enumerate(batch)
                            if x is Punct.WINDOW or x is Punct.FINAL or type(x) is Watermark]
        done: list[tuple[int, list[Exit]]] = []
        targets: Sequence[tuple[OperatorCore, int]] = self._inside.get((operator, port), ())
        heap = self.clock._heap
        now = self.clock.now() if at is None else at
        # One consumer, the first member (a key group's window): handled here directly, what
        # it sends routed and pumped, as `_pump` does; any other shape goes through `feed`.
        direct = len(targets) == 1 and targets[0][0] is self.cores[0]
        core, conn = targets[0] if direct else (self.cores[0], 0)
        alone = len(self.cores) == 1
        step = self._step
        for last, item in _pieces(batch, controls, one_by_one):
            if heap and heap[0][0] <= now:  # a timer due at this time: `advance` would fire it
                self.advance(now, on_timer)
            if not direct:
                self.feed(operator, port, item)
            elif not core.finished:
                step(core, conn, item)
                if not alone:
                    self._pump()
            if self.exits:
                done.append((last, self.exits))
                self.exits = []
        return done

    def emit(self, source: str, items: list[Any]) -> bool:
        """A member source submits ``items``: tuples, and `Punct.WINDOW` marks; True when a
        `Punct.FINAL` among them ends it (call `end`)."""
        core = self._by_name[source]
        ended = core.emit_items(items)
        self._route(core)
        self._pump()
        return ended

    def end(self, source: str) -> None:
        """A member source ended: it sends the maximum watermark (if timed) and final."""
        core = self._by_name[source]
        if not core.finished:
            core.close_outputs()
            self._route(core)
            core.shut_down()
        self._pump()

    def advance(self, now: int, on_timer: Callable[[int], None] | None = None) -> None:
        """Time moves to ``now``: window and operator timers due by then fire, in order;
        ``on_timer(when)`` runs after each (a host collecting what each timer raised)."""
        clock = self.clock
        while (timer := clock.next_due(now)) is not None:
            timer.callback()
            self._pump()
            if on_timer is not None:
                on_timer(timer.when)
        clock.set(now)

    def run_out(self) -> None:
        """Every input ended: time moves on to each timer still armed, in order, until every
        member has ended (a Delay or Throttle releases what it holds, then final) or no timer
        is left. A host whose input is over calls it; without it, what they held was lost."""
        while not self.finished and (due := self.clock.next_when()) is not None:
            self.advance(due)

    def call(self, operator: str, action: Callable[[OperatorCore], Any]) -> Any:
        """Run ``action`` on a member's core between two items (a host-level call on its
        windows); what it makes the operator submit is routed as usual."""
        core = self._by_name[operator]
        try:
            result = core.guard(action, None, core)
            self._route(core)
        except (OperatorError, SchemaViolation) as exc:
            self._end_failed(core, exc)
            self._pump()
            return None
        self._end_if_done(core)
        self._arm(core)
        self._pump()
        return result

    def take_exits(self) -> list[tuple[str, int, Any]]:
        out, self.exits = self.exits, []
        return out

    @property
    def finished(self) -> bool:
        return all(c.finished for c in self.cores)

    def core(self, name: str) -> OperatorCore:
        return self._by_name[name]

    def state(self, *, drain: bool = False, drain_operators: bool = False) -> dict[str, Any]:
        """Everything the members hold, as plain data (see `OperatorCore.checkpoint_state`).

        ``drain_operators`` lets operators finish what they hold first (a
        transactional sink flushes); what they submit then is routed as usual.
        """
        ops = {}
        for core in self.cores:
            entry = core.checkpoint_state(drain=drain, drain_operator=drain or drain_operators)
            entry["finished"] = core.finished
            ops[core.name] = entry
            self._route(core)
        self._pump()  # a drain may have raised events
        return {"now": self.clock.now(), "operators": ops}

    def committed(self, checkpoint_id: int) -> None:
        """The stored state ``checkpoint_id`` is durable: transactional sinks publish."""
        for core in self.cores:
            core.guard(core.op.on_checkpoint_committed, None, checkpoint_id)
            self._route(core)
        self._pump()

    # -- inside --------------------------------------------------------------------

    def _arm(self, core: OperatorCore) -> None:
        """Keep one stamp-clock timer at the core's earliest deadline."""
        if core.finished:
            return
        due = core.next_deadline()
        timer = self._timers.get(core.name)
        if timer is not None and not timer.cancelled:
            if due is not None and timer.when <= due:
                return
            timer.cancel()
        if due is None:
            self._timers.pop(core.name, None)
            return

        def fire(core: OperatorCore = core) -> None:
            self._timers.pop(core.name, None)
            if not core.finished:
                try:
                    core.on_time(self.clock.now())
                    self._route(core)
                except (OperatorError, SchemaViolation) as exc:
                    self._end_failed(core, exc)
                    return
                self._end_if_done(core)  # a timer may release the last held tuple (Delay)
                self._arm(core)

        self._timers[core.name] = self.clock.call_at(due, fire)

    def _pump(self) -> None:
        busy = True
        while busy:
            busy = False
            for core in self.cores:
                queue = self._queues[core.name]
                while queue:
                    busy = True
                    conn, payload = queue.popleft()
                    if not core.finished:
                        self._step(core, conn, payload)

    def _step(self, core: OperatorCore, conn: int, payload: Any) -> None:
        """``core`` handles one entry; what it sends is routed, and it ends once its inputs
        have."""
        try:
            core.handle(conn, payload)
            self._route(core)
        except (OperatorError, SchemaViolation) as exc:
            self._end_failed(core, exc)
            return
        self._end_if_done(core)
        self._arm(core)

    def _end_if_done(self, core: OperatorCore) -> None:
        """Every input ended and nothing is held back: the core closes its outputs and ends.
        Asked after an item and after a timer: a Delay or Throttle holding final releases it
        from a timer, when no item comes any more."""
        if core.inputs_done and not core.finished:
            try:
                core.close_outputs()
                self._route(core)
            except (OperatorError, SchemaViolation) as exc:
                self._end_failed(core, exc)
                return
            self._shut_down(core)

    def _end_failed(self, core: OperatorCore, exc: OperatorError | SchemaViolation) -> None:
        """``core`` failed: raised to the host, or (`drains_failures`) it ends as the runtime's
        failed operator does: what it submitted before goes on, then final; what still comes
        to it is dropped; the failure is kept for the host."""
        if not self.drains_failures:
            raise exc
        self.failures.append(exc)
        self._queues[core.name].clear()
        self.failures.extend(core.end_failed())
        self._route(core)
        timer = self._timers.pop(core.name, None)
        if timer is not None:
            timer.cancel()
        self._shut_down(core)

    def _shut_down(self, core: OperatorCore) -> None:
        """``core`` ends (its ``on_shutdown``); a failure there ends it all the same when the
        host drains failures."""
        try:
            core.shut_down()
        except (OperatorError, SchemaViolation) as exc:
            if not self.drains_failures:
                raise
            self.failures.append(exc)
            core.finished = core.metrics.finished = True

    def _route(self, core: OperatorCore) -> None:
        name = core.name
        for port, out in enumerate(core.outputs):
            if not out.has_output:
                continue
            pending = out.take()
            targets = self._inside.get((name, port), ())
            leaf = (name, port) in self._leaves
            guard = self._guard
            split = guard is not None or (leaf and self.split_marked_exits)
            for entry in pending:
                out.count_delivered(entry)
                if type(entry) is MarkedBatch and split:
                    # Hosts outside (Spark rows, guards) see plain entries, as the runtime's
                    # marks were before they travelled inside batches.
                    for part in split_marked(entry):
                        self._deliver(name, port, part, targets, leaf)
                else:
                    self._deliver(name, port, entry, targets, leaf)

    def _deliver(self, name: str, port: int, entry: Any,
                 targets: Sequence[tuple[OperatorCore, int]], leaf: bool) -> None:
        guard = self._guard
        for target, conn in targets:
            if guard is not None and target.name in self._guarded and type(entry) is list:
                guard(target.name, entry)
            self._queues[target.name].append((conn, entry))
        if leaf:
            self.exits.append((name, port, entry))


def _pieces(batch: Sequence[Any], controls: Sequence[int],
            one_by_one: bool) -> Iterator[tuple[int, Any]]:
    """``batch`` cut at ``controls`` into what a host feeds apart: (index of its last item, the
    item: a control item, or a run of tuples as a plain list, or with ``one_by_one`` each tuple
    as a list of one)."""
    start = 0
    for i in (*controls, len(batch)):
        if i > start:
            if one_by_one:
                for j in range(start, i):
                    yield j, [batch[j]]
            elif start == 0 and i == len(batch) and type(batch) is list:
                yield i - 1, batch
            else:
                run = batch[start:i]
                yield i - 1, run if type(run) is list else list(run)
        if i < len(batch):
            yield i, batch[i]
        start = i + 1
