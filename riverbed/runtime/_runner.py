"""The asyncio host of one operator: an inbox, one clock timer, and the loop that drives its core.

The operator's semantics (windows, punctuation, watermarks, checkpoint alignment, error ports)
live in its `OperatorCore`; this runner only moves items. It takes entries from the inbox one at
a time and hands each to the core, so the operator sees SPL's per-tuple semantics; then what the
core's output ports hold is sent downstream as batches (a batch in means, at most, one batch out
per port, and latency stays one entry deep). One clock timer stands at the core's next deadline;
when it fires, a tick in the inbox makes the core's timers fire in order with the input.

Sources are driven here too: a synchronous source's ``generate`` is pulled in chunks, an async
source's ``run`` runs in a task of its own, cancelled by a stop.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..core import USER_FAILURES, OperatorCore, OperatorError, OutputPort, RestoreRefused, SchemaViolation
from ..graph import EventTime, OperatorDef, Source
from ._channel import Inbox
from ._clock import Clock, RealClock, TimerHandle

if TYPE_CHECKING:
    from ._job import Job
    from ._region import Region

__all__ = ["Delivery", "OperatorRunner", "deliver"]

_TICK = object()  # a control item: the core's next deadline is due
_WAKE = object()  # a control item: look at the core again (a deferred final was released)
_HOST = -1  # the connection number of the runner's own control items
TURN_SECONDS = 0.05  # the longest an operator keeps the event loop on the wall clock (_turn)


async def _end_turn() -> None:
    """Let the loop run what waits. A signal that came during the turn reaches its handler
    loop iterations later (the wakeup socket's reader, then the handler's callback, each
    queued behind this task and the others ready), so a single yield made Ctrl-C wait two
    more turns, batches of a slow operator (6 s at 2 ms a tuple; two yields, 3.6 s; three,
    within the batch, 1.5 s). A loop iteration costs a few microseconds."""
    for _ in range(3):
        await asyncio.sleep(0)


class _Partial(tuple[list[Any], list[tuple[Inbox, int]]]):
    """A batch a cancelled flush delivered to some targets only: (batch, targets still owed)."""

    __slots__ = ()

    def __new__(cls, batch: list[Any], targets: list[tuple[Inbox, int]]) -> _Partial:
        return super().__new__(cls, (batch, targets))


class Delivery:
    """Where one output port's entries go, and what a cancelled flush still owes them."""

    __slots__ = ("owed", "targets")

    def __init__(self) -> None:
        self.targets: list[tuple[Inbox, int]] = []
        self.owed: list[Any] = []  # entries (or `_Partial`s) a cancelled flush did not deliver


class OperatorRunner:
    """Runs one operator of a job on asyncio (the core's host is the job)."""

    def __init__(self, job: Job, odef: OperatorDef, region: dict[str, EventTime]) -> None:
        self._job = job
        self.odef = odef
        self.clock: Clock = job.clock
        self.core = OperatorCore(odef, job.graph, region, job.host_for(self))
        self.op = self.core.op
        self.metrics = self.core.metrics
        self.inbox = Inbox(odef.inbox_batches, frozenset(
            i for i, c in enumerate(self.core.connections) if c.feedback))
        self._deliveries = [Delivery() for _ in self.core.outputs]
        self._timer: TimerHandle | None = None
        self._timer_at: int | None = None
        self._source_task: asyncio.Task[None] | None = None
        self._barrier_waiter: asyncio.Future[None] | None = None  # a source waiting for the clock
        self._task: asyncio.Task[None] | None = None
        self._restore: Any = None
        self._restore_id = 0  # the checkpoint ``_restore`` is of
        self._takes_all = False  # a stop's checkpoint is coming: input is taken even if paused
        self._closing = False  # its inputs ended: final is on its way out
        self.region: Region | None = None  # its consistent region, if it is in one
        # How long the operator may keep the event loop while its inbox holds entries (or a
        # source while downstream has room): an entry taken and its output delivered do not
        # suspend when nothing waits, so a slow operator with a full inbox kept the loop for
        # its whole inbox (8 batches: 16 s at 2 ms a tuple), and Ctrl-C, SIGTERM, the status
        # view and the timers waited that long. On the wall clock it yields every TURN_SECONDS
        # (a look at the loop's clock an entry); on a virtual clock, never: the tasks'
        # interleaving, and so a fan-in's order, stays the same from run to run.
        self._turn = TURN_SECONDS if isinstance(job.clock, RealClock) else math.inf

    @property
    def name(self) -> str:
        return self.odef.name

    @property
    def finished(self) -> bool:
        return self.core.finished

    def wire(self, runners: dict[str, OperatorRunner]) -> None:
        """Point each output port at the inboxes it feeds."""
        for port, delivery in enumerate(self._deliveries):
            for consumer, _in_port in self._job.graph.consumers(self.name, port):
                r = runners[consumer]
                for conn, c in enumerate(r.core.connections):
                    target = (r.inbox, conn)
                    if c.operator == self.name and c.port == port and target not in delivery.targets:
                        delivery.targets.append(target)

    def restore_on_start(self, state: Any, checkpoint_id: int) -> None:
        """Restore ``state`` (from `OperatorCore.checkpoint_state`) when the job starts."""
        self._restore = state
        self._restore_id = checkpoint_id

    def start_checkpoint(self, checkpoint_id: int) -> None:
        """A source's region asks for a checkpoint: its barrier goes out at its next batch
        boundary or flush, or at once if it is waiting for the clock (`sleep_until`)."""
        self.core.start_checkpoint(checkpoint_id)
        waiter = self._barrier_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def sleep_until(self, when: int) -> None:
        """A source waits for the clock (``context.sleep_until``). In a consistent region a
        barrier asked for meanwhile goes out at once: waiting for the source's next item held
        the barrier, and every operator aligning it (a Union, a Join, a windowed port fed by
        this source and a busy one) held the busy source's tuples for the whole wait, so a
        time window counted them in a later pane (a fuzz review: 25 of 31 tuples moved)."""
        clock = self.clock
        if self.region is None:
            await clock.sleep_until(when)
            return
        loop = asyncio.get_running_loop()
        while True:
            if self.core.barrier_requested:
                await self.flush()  # (the barrier, after what was submitted)
            waiter = self._barrier_waiter = loop.create_future()
            sleep = loop.create_task(clock.sleep_until(when))
            try:
                await asyncio.wait((sleep, waiter), return_when=asyncio.FIRST_COMPLETED)
            finally:
                self._barrier_waiter = None
                if not sleep.done():
                    sleep.cancel()
            if sleep.done():
                sleep.result()
                return

    def request_stop(self) -> None:
        """A stop was requested: an async source is cancelled (a sync one stops between batches).
        In a region taking the stop's checkpoint, an operator holding its input back (full:
        an MQTTSink whose broker is gone, a Throttle) takes it again: the barrier is behind that
        input, and the stop waited for a second signal. What it takes goes into its state."""
        if self._source_task is not None:
            self._source_task.cancel()
        region = self.region
        if region is not None and region.suspend_at is not None:
            self._takes_all = True
            if self.core.input_paused:
                self.wake()

    def wake(self) -> None:
        """The core changed outside an item (perhaps from another task): loop once more."""
        self.inbox.put_control(_HOST, _WAKE)

    def start(self, *, resume: bool = False) -> None:
        """Run in a task of the job (``resume``: again, after its region was reset)."""
        kind = "out" if self.odef.kind == "source" else "in"
        self._task = self._job.spawn(self.run(resume=resume), f"{self._job.name}/{self.name}/{kind}")

    def cancel(self) -> None:
        """End the operator's task where it is (its region resets)."""
        if self._task is not None:
            self._task.cancel()

    async def stopped(self) -> None:
        """Wait until the operator's task ended (after `cancel`)."""
        task = self._task
        if task is not None and not task.done():
            await asyncio.wait({task})

    def purge(self) -> None:
        """Drop what is in flight towards and out of this operator (its region resets): the
        inbox's entries (waking producers it held back) and what a cancelled flush still owed."""
        self.inbox.clear()
        for delivery in self._deliveries:
            delivery.owed = []

    def put_control(self, item: Any) -> None:
        """Queue a control item of the host's own (a barrier for an operator whose inputs ended)."""
        self.inbox.put_control(_HOST, item)

    # ------------------------------------------------------------------ run

    async def run(self, *, resume: bool = False) -> None:
        """Activate (unless it resumes after a reset), restore, then drive the core until its
        inputs (or, for a source, its items) end. A failure inside a consistent region that
        heals is handed to the region instead of ending the job."""
        core = self.core
        self._closing = False
        if not resume:
            core.activate(self.clock.now())
            if self._restore is not None:
                try:
                    core.restore(self._restore)
                except (OperatorError, SchemaViolation) as exc:
                    if isinstance(exc, OperatorError) and isinstance(exc.cause, OSError):
                        raise  # (I/O: an unmounted disk, a connection; a restart may pass)
                    # The stored state does not fit the graph or what it reads any more (a
                    # replaced input file, another operator under the name): a reset or a
                    # restart would fail the same way, so the job does not start (`riverbed
                    # run` exits 2, and --restarts does not try again).
                    raise RestoreRefused(
                        f"checkpoint {self._restore_id}: {exc}; the stored state does not fit "
                        "the graph (or what it reads) any more: run it as it was, or give the "
                        "job a new checkpoint directory") from exc
                self._restore = None
        try:
            await self._drive()
        except (OperatorError, SchemaViolation) as exc:
            region = self.region
            if region is not None and region.heals:
                region.fail(self, exc)
            elif self._job.drains_failures:
                await self._end_failed(exc)
            else:
                raise
        finally:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = self._timer_at = None
            core.cancel_timers()

    async def _end_failed(self, exc: OperatorError | SchemaViolation) -> None:
        """The operator failed in a job without checkpoints (nothing could replay what is in
        flight): what it submitted before the failing tuple goes on downstream, then final
        punctuation, as after a stop; what still comes in is dropped; the job stops its sources
        and drains, then ends with the failure (`Job.operator_failed`)."""
        self.inbox.discard()
        self._job.operator_failed(exc, self.name)
        core = self.core
        closed = self._closing  # (final went out already, and its on_shutdown failed)
        if not closed:
            for again in core.end_failed():  # another tuple's violation
                self._job.operator_failed(again, self.name)
            self._closing = True
        await self.flush()
        if not closed:
            try:
                core.shut_down()  # its on_shutdown too: a sink's buffered lines reach its file
            except (OperatorError, SchemaViolation) as again:
                self._job.operator_failed(again, self.name)

    async def _drive(self) -> None:
        core = self.core
        try:
            if isinstance(self.op, Source):
                await self._run_source()
                region = self.region
                if region is not None and region.suspend_at is not None:
                    await self._end_suspended_source()
                    return
            else:
                self._arm()
                await self.flush()
                inbox = self.inbox
                turn, loop_time = self._turn, asyncio.get_running_loop().time
                turn_ends = loop_time() + turn
                while core.running:
                    if core.input_paused and not self._takes_all:  # full: only its own timers run
                        conn, payload = await inbox.get_host(_HOST)
                    else:
                        conn, payload = await inbox.get()
                    if payload is _TICK:
                        self._timer = self._timer_at = None
                        core.on_time(self.clock.now())
                    elif payload is _WAKE:
                        pass  # the loop's condition is looked at again
                    else:
                        core.handle(conn, payload)
                    await self.flush()
                    self._arm()
                    if loop_time() >= turn_ends:  # its turn is over: the loop's (see _turn)
                        await _end_turn()
                        turn_ends = loop_time() + turn
            # The inputs (or the source) ended: a barrier still asked of a source goes out first
            # (the checkpoint holds it still open), then the maximum watermark and final, and
            # only once they are delivered does the operator report that it finished.
            core.serve_barrier()
            core.close_outputs()
            self._closing = True  # (after: a seal that fails in it leaves final to send)
            await self.flush()
            core.shut_down()
        except asyncio.CancelledError:
            if not self._job.suspended:
                raise
            core.shut_down(report=False)  # the stop's checkpoint committed: end here, no final

    async def _end_suspended_source(self) -> None:
        """A stop suspends the job (it has checkpoints): the barrier goes out, then the source
        ends without final punctuation; the job ends every task once the checkpoint commits."""
        self.core.serve_barrier()
        await self.flush()
        self.core.shut_down(report=False)

    async def _run_source(self) -> None:
        core, src = self.core, self.op
        assert isinstance(src, Source)
        if type(src).run is not Source.run:
            self._source_task = asyncio.get_running_loop().create_task(
                self._guarded_run(src), name=f"{self._job.name}/{self.name}/run")
            try:
                await self._source_task
            except asyncio.CancelledError:
                if not self._job.stopping:
                    raise  # cancelled from outside (abort), not a stop request
            return
        items = core.guard(src.generate)
        it: Iterator[Any] = core.guard(iter, None, items)
        size = self._job.batch_size
        turn, loop_time = self._turn, asyncio.get_running_loop().time
        turn_ends = loop_time() + turn
        while not self._job.stopping:
            core.serve_barrier()
            # What generate() raises names the source (and may heal its region), as an async
            # source's failure does: it is the source's own code running here. The items it
            # yielded before it raised go on first (`list.extend` keeps them).
            chunk: list[Any] = []
            try:
                core.pull_items(it, size, chunk)  # (set_watermark() in generate(): in its place)
            except USER_FAILURES as exc:
                if chunk:
                    core.emit_items(chunk)
                core.guard(_reraise, None, exc)
            if not chunk or core.emit_items(chunk):
                return
            await self.flush()
            if loop_time() >= turn_ends:  # its turn is over: the loop's (see _turn)
                await _end_turn()
                turn_ends = loop_time() + turn

    async def _guarded_run(self, src: Source) -> None:
        try:
            await src.run()
        except (asyncio.CancelledError, OperatorError, SchemaViolation):
            raise  # (the last two name the operator already: a flush's schema check)
        except USER_FAILURES as exc:
            self.core.guard(_reraise, None, exc)

    # -------------------------------------------------------------- delivery

    async def flush(self) -> None:
        """Send what the core's output ports hold downstream, in order (waits while a downstream
        inbox is full: backpressure). A source's pending barrier goes out first.

        Cancellation-safe: a task cancelled while a full inbox holds it back (a stop cancels a
        source waiting on backpressure) keeps what it has not delivered, for the next flush:
        tuples a source already counts as submitted (and a checkpoint as emitted) are never
        dropped on the way."""
        core = self.core
        if core.barrier_requested:
            core.serve_barrier()
        for out, delivery in zip(core.outputs, self._deliveries, strict=True):
            if delivery.owed or out.has_output:
                await deliver(out, delivery)

    # -------------------------------------------------------------- timers

    def _arm(self) -> None:
        """Keep one clock timer at the core's earliest deadline."""
        due = self.core.next_deadline()
        if due is None or (self._timer_at is not None and self._timer_at <= due):
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = due
        inbox = self.inbox
        self._timer = self.clock.call_at(due, lambda: inbox.put_control(_HOST, _TICK))


async def deliver(out: OutputPort, delivery: Delivery) -> None:
    """Send ``out``'s entries (and what ``delivery`` is owed) to its targets; see `flush`."""
    pending = delivery.owed + out.take() if delivery.owed else out.take()
    delivery.owed = []
    i = sent = 0
    try:
        for i, entry in enumerate(pending):  # noqa: B007 - read by the handler below
            owed = type(entry) is _Partial
            if owed or isinstance(entry, list):  # a batch (marked or not), or what one still owes
                batch, targets = entry if owed else (entry, delivery.targets)
                for sent in range(len(targets)):
                    inbox, conn = targets[sent]
                    await inbox.put(conn, batch)
                sent = 0
                if not owed:
                    out.count_delivered(batch)
                continue
            for inbox, conn in delivery.targets:
                inbox.put_control(conn, entry)
            out.count_delivered(entry)
    except BaseException:
        # `Inbox.put` appends nothing when cancelled while waiting: entry i reached the
        # targets before `sent`, and goes again only to the others (a partial entry).
        rest = pending[i:]
        if sent:
            head = rest[0]
            owed = type(head) is _Partial
            batch, targets = head if owed else (head, delivery.targets)
            if not owed:
                out.count_delivered(batch)
            rest[0] = _Partial(batch, targets[sent:])
        delivery.owed = rest
        raise


def _reraise(exc: Exception) -> None:
    raise exc
