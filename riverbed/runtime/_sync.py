"""Operators run synchronously, item by item, by a host that is not the asyncio runtime.

The Spark bridge hosts parts of a graph inside Spark tasks: a keyed window
stage per key group, the sinks in the driver, a source in the data-source
reader. Those hosts must behave exactly as the runtime does, so they drive
the runtime's own `OperatorRunner` (windows, punctuation rules P1/P2,
watermarks E29-E31, error ports, schema checks) without an event loop: an
item is put in an inbox, handled at once, and what the operator submitted
is routed to the hosted consumers or handed back to the host as an exit.

Time is stamped by the host (`StampClock`): it moves only when the host
says, so a replayed micro-batch sees the same times and raises the same
events.
"""

from __future__ import annotations

import copy
import heapq
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..graph import FrozenGraph, Punct, event_time_region
from ._runner import OperatorRunner, _connections

__all__ = ["StampClock", "SyncGraph"]


_HOST_SET = ("context", "submit", "submit_punct")  # what a host sets on an operator it runs


def _fresh(op: Any) -> Any:
    """A copy of ``op`` as the graph script built it, without what a host set on it."""
    try:
        new = copy.copy(op)
        state = {k: v for k, v in vars(op).items() if k not in _HOST_SET}
        for k in _HOST_SET:
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


class SyncGraph:
    """Some operators of a graph (``members``, in graph order) driven one item at a time.

    ``feed`` delivers an item (a list of tuples, a `Punct` or a `Watermark`)
    from a stream outside the members to every member it feeds; ``emit``
    submits an item from a member source. Items the members send to
    operators outside them are collected as exits ``(operator, port, item)``
    in the order sent. ``state`` and the ``state`` argument carry everything
    (operators, windows, watermarks, ended connections, the clock) as plain
    data, so a host can store it between micro-batches.
    """

    def __init__(self, graph: FrozenGraph, members: Sequence[str], *, now: int = 0,
                 state: Mapping[str, Any] | None = None, name: str | None = None,
                 guard: Callable[[str, list[Any]], None] | None = None,
                 guarded: frozenset[str] = frozenset()) -> None:
        self.graph = graph
        self.name = name or graph.name
        self.batch_size = 1024
        self.stopping = False
        self.clock = StampClock(state["now"] if state is not None else now)
        member_set = set(members)
        region = event_time_region(graph)
        # Each host gets its own operator objects: several hosts (key groups) live in one process,
        # and what one group's operator keeps must not leak into another's.
        self.runners = [OperatorRunner(self, replace(graph.operator(n),  # type: ignore[arg-type]
                                                     operator=_fresh(graph.operator(n).operator)),
                                       region)
                        for n in members]
        self._by_name = {r.name: r for r in self.runners}
        self._inside: dict[tuple[str, int], list[tuple[OperatorRunner, int]]] = {}
        for r in self.runners:
            for conn, c in enumerate(_connections(r.odef)):
                self._inside.setdefault((c.operator, c.port), []).append((r, conn))
        self._leaves: set[tuple[str, int]] = set()
        for r in self.runners:
            for port in range(len(r.outputs)):
                if any(op not in member_set for op, _ in graph.consumers(r.name, port)):
                    self._leaves.add((r.name, port))
        self.exits: list[tuple[str, int, Any]] = []
        # A host's check on the tuples routed to some members (the Spark bridge's key groups).
        self._guard = guard
        self._guarded = guarded
        for r in self.runners:
            r.setup()
        for r in self.runners:
            r._guard(r.op.on_ports_ready, None)
        if state is not None:
            ops = state["operators"]
            for r in self.runners:
                r._apply_restore(ops[r.name], reset=False)
                if ops[r.name].get("finished"):
                    r.finished = True
        else:
            for r in self.runners:
                for w in r.windows:
                    if w is not None:
                        r._guard(w.activate, None, self.clock.now())
        for r in self.runners:
            self._route(r)  # what activation raised (an INITIAL_FULL at port readiness)
            r._arm()
        self._pump()

    # -- what OperatorRunner asks of its job ------------------------------------

    def _report(self, checkpoint_id: int, operator: str, state: Any) -> None:
        raise RuntimeError("checkpoint barriers do not flow through a synchronous host")

    def _finished(self, runner: OperatorRunner) -> None:
        pass

    def trigger_checkpoint(self) -> int | None:
        return None

    # -- driving -----------------------------------------------------------------

    def feed(self, operator: str, port: int, item: Any) -> None:
        """An item of stream ``operator.out[port]`` (not a member's) reaches the members."""
        for runner, conn in self._inside.get((operator, port), ()):
            runner.inbox._items.append((conn, item))
        self._pump()

    def emit(self, source: str, items: Iterable[Any]) -> None:
        """A member source submits ``items``: tuples, and `Punct.WINDOW` marks."""
        runner = self._by_name[source]
        submit, control = runner.submit, runner.outputs[0].control
        for item in items:
            if item is Punct.WINDOW:
                control(Punct.WINDOW)
            else:
                submit(item)
        self._route(runner)
        self._pump()

    def end(self, source: str) -> None:
        """A member source ended: it sends the maximum watermark (if timed) and final."""
        runner = self._by_name[source]
        if not runner.finished:
            runner.close_outputs()
            self._route(runner)
            runner.shut_down()
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

    def call(self, operator: str, action: Callable[[OperatorRunner], Any]) -> Any:
        """Run ``action`` on a member's runner between two items (a host-level call on its
        windows); what it makes the operator submit is routed as usual."""
        runner = self._by_name[operator]
        result = runner._guard(action, None, runner)
        self._route(runner)
        self._pump()
        return result

    def take_exits(self) -> list[tuple[str, int, Any]]:
        out, self.exits = self.exits, []
        return out

    @property
    def finished(self) -> bool:
        return all(r.finished for r in self.runners)

    def runner(self, name: str) -> OperatorRunner:
        return self._by_name[name]

    def state(self, *, drain: bool = False, drain_operators: bool = False) -> dict[str, Any]:
        """Everything the members hold, as plain data (see `OperatorRunner.checkpoint_state`).

        ``drain_operators`` lets operators finish what they hold first (a
        transactional sink flushes); what they submit then is routed as usual.
        """
        ops = {}
        for r in self.runners:
            entry = r.checkpoint_state(drain=drain, drain_operator=drain or drain_operators)
            entry["finished"] = r.finished
            ops[r.name] = entry
        self._pump()  # a drain may have raised events
        return {"now": self.clock.now(), "operators": ops}

    def committed(self, checkpoint_id: int) -> None:
        """The stored state ``checkpoint_id`` is durable: transactional sinks publish."""
        for r in self.runners:
            r._guard(r.op.on_checkpoint_committed, None, checkpoint_id)
        self._pump()

    # -- inside --------------------------------------------------------------------

    def _pump(self) -> None:
        busy = True
        while busy:
            busy = False
            for r in self.runners:
                items = r.inbox._items
                while items:
                    busy = True
                    conn, payload = items.popleft()
                    if r.finished:
                        continue
                    r._handle(conn, payload)
                    self._route(r)
                    if (r.odef.inputs and r._ports_open == 0 and r._holds == 0
                            and not r.finished):
                        r.close_outputs()
                        self._route(r)
                        r.shut_down()
                    r._arm()

    def _route(self, runner: OperatorRunner) -> None:
        name = runner.name
        for port, out in enumerate(runner.outputs):
            if out.buf:
                out._seal()
            if not out.pending:
                continue
            pending, out.pending = out.pending, []
            targets = self._inside.get((name, port), ())
            leaf = (name, port) in self._leaves
            guard = self._guard
            for entry in pending:
                for r, conn in targets:
                    if guard is not None and r.name in self._guarded and type(entry) is list:
                        guard(r.name, entry)
                    r.inbox._items.append((conn, entry))
                if leaf:
                    self.exits.append((name, port, entry))
