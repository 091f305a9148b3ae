"""A worker process of a parallel region: one or several channels' operators, each channel
hosted by a `SyncGraph` of its own.

Why `SyncGraph` and not an event loop of its own: it drives the very `OperatorCore` the
runtime drives (windows, punctuation, watermarks, error ports, schema checks), one item at a
time, and its time is stamped by its host. The job's clock stays the only clock: every message
carries the job's time, timers fire when the job says the channel's deadline came (a `TICK`),
so channels agree on time with each other and with the rest of the job, and a job on a
`VirtualClock` runs as deterministically with worker processes as without. The worker is
forked from the job's process (the graph, with its functions and operator objects, needs no
pickling) and never touches the event loop it inherited.

A process hosting several channels (a region wider than its ``processes``) serves each exactly
as below, on the channel's own socket, one message or one replica batch at a time in turn; what
one channel does never touches another's operators.

The worker reads one message, handles it completely, and answers once: what its operators sent
out of the region (``exits``), its next deadline, whether it finished, the states its operators
reported at a checkpoint barrier, and the final states of operators that ended. It ends when the job
closes its end of the socket (also when the job's process dies), and refuses SIGINT: the job,
which sees the Ctrl-C too, decides how the region ends.

A channel with replicated sources (`_replica`) does not wait for messages while its sources
produce: it pulls a batch from each, sends what left the region (``EMIT``), and handles the
job's messages between two batches. In a consistent region the job asks it to start each
checkpoint (``CHECKPOINT``): its replicas serve the barrier before their next batch, and an
operator that can see no barrier any more (ended, or its inputs ended) reports at once. On the
wall clock its time is the wall clock's (a source and its windows see time move while they
produce); on a virtual clock it is the job's.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable, Hashable, Sequence
from multiprocessing.connection import Connection, wait
from socket import socket
from typing import Any

from ..core import OperatorCore, OperatorError, SchemaViolation, SyncGraph, with_notes
from ..graph import CheckpointBarrier, FrozenGraph, Watermark
from ..supervise import end_with_parent
from ._parallel_split import join_marked, pack_exits
from ._parallel_wire import (
    CHECKPOINT,
    COMMIT,
    EMIT,
    FAILED,
    FAILING,
    FEED,
    METRICS,
    METRICS_OUT,
    OUT,
    STOP,
    TICK,
    dumps,
    frame,
    loads,
)
from ._replica import Replicas, place

__all__ = ["STOP_SIGNALS", "serve"]

METRICS_EVERY = 8  # answers between two reports of the operators' metrics
EMIT_BATCHES = 16  # replica batches whose messages one write carries at most (`_Hold`)
EMIT_SECONDS = 0.01  # and the longest the first of them waits for that write, in wall time

# The signals that stop a job: the job's alone to handle (`serve`).
STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM})


class _ChannelGraph(SyncGraph):
    """A `SyncGraph` whose operators can be in a consistent region: a state reported at a
    barrier, and the final state of an operator that ended, are kept for the job (which
    reports them to its region once every channel sent them)."""

    split_marked_exits = False  # `pack_exits` takes a marked batch whole

    def __init__(self, graph: FrozenGraph, members: tuple[str, ...], *, now: int, name: str,
                 consistent_region: tuple[str, frozenset[str]] | None) -> None:
        # Set before the cores exist: activation may already end an operator.
        self.reports: list[tuple[int, str, Any]] = []
        self.finals: list[tuple[str, Any]] = []
        self.final_states: dict[str, Any] = {}
        self._reported: dict[str, int] = {}  # operator -> the newest checkpoint it reported for
        super().__init__(graph, members, now=now, name=name, consistent_region=consistent_region)

    def report_checkpoint(self, checkpoint_id: int, operator: str, state: Any) -> None:
        self._reported[operator] = checkpoint_id
        self.reports.append((checkpoint_id, operator, state))

    def operator_finished(self, core: OperatorCore) -> None:
        state = core.checkpoint_state()
        self.final_states[core.name] = state
        self.finals.append((core.name, state))

    def barrier(self, barrier: CheckpointBarrier) -> None:
        """A barrier reached this channel: an operator that ended already reports its final
        state for it (it sees no barrier any more, as in the job's region), once (a barrier
        comes on each stream into the region)."""
        reported = self._reported
        for core in self.cores:
            if core.finished and reported.get(core.name) != barrier.id:
                self.report_checkpoint(barrier.id, core.name, self.final_states.get(core.name))

    def start_checkpoint(self, barrier: CheckpointBarrier) -> None:
        """The job's region starts a checkpoint (the channel has replicated sources): each live
        replica serves its barrier before its next batch (`Replicas.step`); an operator whose
        inputs ended (one still holding items, as Delay) starts it itself, as such an operator
        does in the job's region; one that ended reports its final state."""
        for core in self.cores:
            if core.finished:
                continue
            if core.odef.kind == "source":
                core.start_checkpoint(barrier.id)
            elif core.inputs_ended:
                self.call(core.name, _handle_barrier(barrier))
        self.barrier(barrier)

    def take(self) -> tuple[list[tuple[int, str, Any]], list[tuple[str, Any]]]:
        reports, finals = self.reports, self.finals
        self.reports, self.finals = [], []
        return reports, finals


def _channel_graph(graph: FrozenGraph, members: tuple[str, ...], *, name: str, now: int,
                   region: str | None, region_members: frozenset[str],
                   restore: dict[str, Any] | None) -> _ChannelGraph:
    """The channel's operators, in the job's consistent region (if any), restored from their
    channel's state in a checkpoint (if any), as a runner restores on start: activated, then
    restored."""
    sync = _ChannelGraph(graph, members, now=now, name=name,
                         consistent_region=None if region is None else (region, region_members))
    if restore is not None:
        for core in sync.cores:
            state = restore[core.name]

            def back(c: OperatorCore, state: Any = state) -> None:
                c.restore(state)
                if c.inputs_done and not c.finished:  # it had ended: final goes out again
                    c.close_outputs()
                    c.shut_down()

            sync.call(core.name, back)
    return sync


def _handle_barrier(barrier: CheckpointBarrier) -> Callable[[OperatorCore], None]:
    def handle(core: OperatorCore) -> None:
        core.handle(-1, barrier)
    return handle


def _deadline(sync: SyncGraph) -> int | None:
    due: int | None = None
    for core in sync.cores:
        if not core.finished:
            d = core.next_deadline()
            if d is not None and (due is None or d < due):
                due = d
    return due


def _exits(sync: SyncGraph) -> list[tuple[str, int, Any]]:
    """What left the region: each port's consecutive tuples, window marks and watermarks as
    one ``(tuples, marks)`` item (as the split sends them, see `_parallel_split`), so the job's
    merge takes a run of them in one step; watermarks as ints."""
    return pack_exits(sync.take_exits())


def _metrics(sync: SyncGraph) -> dict[str, Any]:
    return {core.name: core.metrics.as_dict() for core in sync.cores}


def _failure(exc: BaseException) -> tuple[Any, ...]:
    if isinstance(exc, OperatorError):
        cause = exc.cause
        return (FAILED, exc.operator, exc.port, None if exc.tuple is None else repr(exc.tuple)[:200],
                type(cause).__name__, with_notes(str(cause), cause))
    if isinstance(exc, SchemaViolation):
        return (FAILED, exc.operator, None, repr(exc.tuple)[:200], "SchemaViolation", str(exc))
    text = "".join(traceback.format_exception(exc)[-3:])
    return (FAILED, None, None, None, type(exc).__name__, f"{exc} ({text.strip()})")


class _Hold:
    """When a worker writes what its replicas produced: not after every batch.

    Each write wakes the job's process, which reads it, unpickles it and merges it, an event
    loop turn whatever it carries: one after every replica batch took half of what the job's
    process spent on a replicated region (W2: ~70 us a message), CPU taken from the workers
    on a machine with as many cores as channels. So each batch's message is made at once
    (framed bytes, `_Served.answer`) and kept; the kept messages go out in one write once
    `EMIT_BATCHES` of them wait, or `EMIT_SECONDS` after the first, whichever comes first.

    The wait is kept by a thread, because a replica may block in its ``generate()`` (a tail
    waiting for its file to grow, a socket, a queue, a child process) and what it produced
    before must not wait with it. The thread only writes bytes the process's thread made,
    under the channel's write lock: it runs no operator or user code and reads no operator
    state, so whatever a replica does meanwhile, nothing is shared but the bytes. A signal
    timer (SIGALRM) and a thread that made the message itself were tried first (see
    docs/decisions.md)."""

    __slots__ = ("armed", "deadline", "failed", "served", "wake")

    def __init__(self, served: list[_Served]) -> None:
        self.served = served
        self.armed = False
        self.deadline = 0.0
        self.failed: BaseException | None = None  # the thread's write failed: raised by `step`
        self.wake = threading.Event()
        threading.Thread(target=self._run, name="riverbed-hold", daemon=True).start()

    def arm(self) -> None:
        """Messages wait: they go out `EMIT_SECONDS` from now at the latest."""
        if not self.armed:
            self.armed = True
            self.deadline = time.monotonic() + EMIT_SECONDS
            self.wake.set()

    def _run(self) -> None:
        wake = self.wake
        while True:
            wake.wait()
            wake.clear()
            time.sleep(max(0.0, self.deadline - time.monotonic()))
            self.armed = False
            for s in self.served:
                try:
                    s.flush()
                except BaseException as exc:  # the job hung up, most likely
                    self.failed = exc
                    return


class _Served:
    """One channel this worker process hosts: its socket to the job, its operators, its
    replicas. Channels never share state: a process hosting several runs each exactly as a
    process of its own would, one message or one batch at a time."""

    __slots__ = ("answers", "channel", "conn", "fd", "held", "hold", "kept", "lock", "name",
                 "replicas", "sync", "torn", "wall_clock", "writes")

    def __init__(self, conn: Connection, sync: _ChannelGraph, replicas: Replicas, hold: _Hold, *,
                 channel: int, name: str, wall_clock: int | None) -> None:
        self.conn = conn
        self.fd = conn.fileno()
        self.sync = sync
        self.replicas = replicas
        self.channel = channel
        self.name = name
        self.wall_clock = wall_clock
        self.answers = 0
        self.hold = hold
        self.held = 0  # replica batches whose messages are kept
        self.kept: list[bytes] = []  # their messages, framed, for the next write
        self.lock = threading.Lock()  # one writer at a time: this process's thread or `_Hold`'s
        self.writes = 0
        self.torn = False  # a write broke off mid-message: nothing more can be read after it

    def answer(self, kind: int, fed: Any, *, keep: bool = False) -> None:
        """The channel's message (``keep``: kept for a later write, see `_Hold`)."""
        sync = self.sync
        finished = sync.finished
        reports, finals = sync.take()
        self.answers += 1
        # The operators' own metrics (errors, late tuples, counters, watermark) with every
        # METRICS_EVERY-th answer and the last: the job's status, console and Prometheus show
        # the channels' operators from them.
        metrics = _metrics(sync) if finished or self.answers % METRICS_EVERY == 0 else None
        message = frame(dumps((kind, fed, _exits(sync), _deadline(sync), finished, metrics,
                               reports, finals, time.process_time(), self.writes)))
        if sync.failures:  # operators that failed and ended (the job drains): told first
            told = [frame(dumps((FAILING, *_failure(exc)[1:]))) for exc in sync.failures]
            sync.failures.clear()
            message = b"".join((*told, message))
        if keep:
            with self.lock:
                self.kept.append(message)
        else:
            self.write(message)

    def write(self, message: bytes) -> None:
        """``message`` (framed), after the kept ones, in one write."""
        with self.lock:
            kept = self.kept
            if kept:
                kept.append(message)
                message = b"".join(kept)
                kept.clear()
            self._write(message)
        self.held = 0

    def flush(self) -> None:
        """Write the kept messages, if any (`_Hold`'s thread; the failure path)."""
        with self.lock:
            if self.kept:
                message = b"".join(self.kept)
                self.kept.clear()
                self._write(message)

    def _write(self, data: bytes) -> None:
        self.writes += 1
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self.fd, view):]
        except BaseException:
            self.torn = len(view) < len(data)
            raise

    def step(self) -> None:
        """One batch of each live replica, and its message (``EMIT``): kept (`_Hold`) unless
        `EMIT_BATCHES` are, or it carries a checkpoint's states, an operator's end or the
        replicas' end."""
        sync = self.sync
        if self.wall_clock is not None:  # (the job's clock runs that far ahead of the wall's)
            sync.advance(time.time_ns() + self.wall_clock)
        replicas = self.replicas
        replicas.step()
        hold = self.hold
        if hold.failed is not None:
            raise hold.failed
        self.held += 1
        keep = (self.held < EMIT_BATCHES and replicas.live and not sync.reports
                and not sync.finals)
        self.answer(EMIT, replicas.live, keep=keep)
        if keep:
            hold.arm()

    def receive(self) -> bool:
        """Handle the job's next message (it blocks until one comes); False: the job hung up."""
        try:
            data = self.conn.recv_bytes()
        except (EOFError, OSError):
            return False
        msg = loads(data)
        kind = msg[0]
        sync = self.sync
        if kind == FEED:
            sync.advance(msg[1])
            feed = sync.feed
            for operator, port, item in msg[2]:
                if type(item) is tuple:  # a marked batch's part (`_parallel_split`)
                    feed(operator, port, join_marked(*item))
                elif type(item) is int:
                    feed(operator, port, Watermark(item))
                elif type(item) is CheckpointBarrier:
                    if port < 0:  # the job's region asks the operator itself
                        sync.call(operator, _handle_barrier(item))
                    else:
                        feed(operator, port, item)
                    sync.barrier(item)
                else:
                    feed(operator, port, item)
            self.answer(OUT, msg[3])  # a place in the queue back, if the message took one
        elif kind == TICK:
            sync.advance(msg[1])
            self.answer(OUT, 0)
        elif kind == COMMIT:
            sync.advance(msg[1])
            sync.committed(msg[2])
            self.answer(OUT, 0)
        elif kind == CHECKPOINT:
            sync.advance(msg[1])
            sync.start_checkpoint(CheckpointBarrier(msg[2], msg[3]))
            self.answer(OUT, 0)
        elif kind == METRICS:
            self.write(frame(dumps((METRICS_OUT, _metrics(sync)))))
        elif kind == STOP:
            sync.stopping = True  # the replicas end at their next batch
            self.replicas.suspend = msg[1]  # without final: after the stop's barrier
        else:
            raise RuntimeError(f"worker {self.name}: unknown message kind {kind!r}")
        return True


def serve(socks: Sequence[socket], close: list[int], graph: FrozenGraph, members: tuple[str, ...], *,
          name: str, now: int, region: str | None = None,
          region_members: frozenset[str] = frozenset(),
          restore: Sequence[dict[str, Any] | None] | None = None,
          channels: Sequence[int] = (0,), width: int = 1,
          key: Callable[[Any], Hashable] | None = None, wall_clock: int | None = None,
          batch: int = 1000, stopping: bool = False, suspend: bool = False,
          checkpoint: int | None = None, drains: bool = False, job_pid: int | None = None) -> None:
    """The body of a worker process (forked): host ``channels`` of ``members`` (one socket to
    the job each, in ``socks``) until the job hangs up (``name``: the region's, a channel's is
    ``name[channel]``; ``region``: the consistent region they are in; ``restore``: each
    channel's operators' states; ``width``: the region's, for replicated sources, keyed by
    ``key``; ``stopping``, ``suspend``: the job was asked to stop already, as a ``STOP`` says;
    ``checkpoint``: a checkpoint of the region under way, which the replicas take before their
    first batch; ``drains``: the job drains after a failure, so an operator that fails ends and
    the channel goes on, `SyncGraph.drains_failures`).

    Several channels in one process (a region wider than the machine has cores): each keeps its
    own operators, replicas, keys and socket; the process takes the job's messages first, then
    a batch of each channel's live replicas in turn, and blocks on all sockets when none
    produces. It ends once the job hung up on every channel."""
    # What the job's process had is the worker's too (fork), page by page until written to: a
    # collection walking it would write to every tracked object, copying its pages.
    gc.freeze()
    signal.set_wakeup_fd(-1)  # the inherited fd is the job's event loop's: never write to it
    # A stop is the job's to make: a Ctrl-C at a terminal, systemd (KillMode=control-group),
    # `timeout` and `kill -- -PGID` signal every process of the group, workers too, and a
    # worker that died of it could not drain its channel. The job stops them through their
    # sockets (and kills them, if it must); a job that died hangs up on them.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # (blocked across the fork)
    if job_pid is not None:
        # A job killed outright (kill -9) takes its workers with it. Left running, a worker
        # finished its batch and wrote on while a restarted job rewrote the same files: a
        # FileSink opening its next file removed what the new job had committed there.
        end_with_parent(job_pid, signal.SIGKILL)
    for fd in close:  # the job's ends of every channel's socket: EOF must reach each worker
        with contextlib.suppress(OSError):
            os.close(fd)
    conns = [Connection(sock.detach()) for sock in socks]
    worker = os.getpid()
    served: list[_Served] = []
    hold = _Hold(served)
    failing = [conns[0]]  # the socket of the channel at work: a failure is told there
    try:
        for i, (conn, channel) in enumerate(zip(conns, channels, strict=True)):
            failing[0] = conn
            # What context.channel / .width read, already in setup(): the class's while this
            # channel's cores are made, then each core's own (other channels share the class).
            place(OperatorCore, channel, width)
            sync = _channel_graph(graph, members, name=f"{name}[{channel}]", now=now, region=region,
                                  region_members=region_members,
                                  restore=None if restore is None else restore[i])
            for core in sync.cores:
                place(core, channel, width)
            sync.stopping = stopping  # the job was asked to stop already: replicas end at once
            sync.drains_failures = drains
            replicas = Replicas(sync, channel=channel, width=width, key=key, batch=batch)
            replicas.suspend = suspend
            if checkpoint is not None and region is not None:
                sync.start_checkpoint(CheckpointBarrier(checkpoint, region))
            one = _Served(conn, sync, replicas, hold, channel=channel, name=f"{name}[{channel}]",
                          wall_clock=wall_clock)
            one.answer(OUT, 0)
            served.append(one)
        _serve(served, failing)
    except (EOFError, BrokenPipeError, ConnectionResetError):
        return  # the job went away
    except BaseException as exc:  # an operator failed (or a replica called sys.exit): tell the job
        if os.getpid() != worker:
            raise  # a child a replica forked, leaving through the worker's frames: not ours
        with contextlib.suppress(OSError, EOFError):
            by_conn = {id(one.conn): one for one in served}
            # What completed batches produced goes first, as it did when each was written at
            # once, and as the sink gets it without a region; after a torn write, nothing.
            if not any(one.torn for one in served):
                for one in served:
                    one.flush()
                failure = dumps(_failure(exc))
                at_work = by_conn.get(id(failing[0]))
                if at_work is not None:
                    at_work.write(frame(failure))
                else:  # it failed before the channel was set up
                    failing[0].send_bytes(failure)
            # Read on until the job hangs up on every channel: exiting now would make the job's
            # writes fail and the sockets close before it read why.
            open_conns = list(conns)
            while open_conns:
                for c in wait(open_conns):
                    assert isinstance(c, Connection)
                    try:
                        c.recv_bytes()
                    except (EOFError, OSError):
                        open_conns.remove(c)
        os._exit(1)


def _serve(served: list[_Served], failing: list[Connection]) -> None:
    """The process's channels (one or several): each channel's messages first, else a batch of
    its live replicas, in turn; with no replica live, wait until a socket has a message.
    ``failing[0]``: the socket of the channel at work."""
    live = list(served)
    by_conn = {id(s.conn): s for s in served}
    while live:
        if any(s.replicas.live for s in live):
            for one in list(live):
                failing[0] = one.conn
                if one.conn.poll():
                    if not one.receive():
                        live.remove(one)
                elif one.replicas.live:
                    one.step()
            continue
        for conn in wait([s.conn for s in live]):
            one = by_conn[id(conn)]
            failing[0] = one.conn
            if not one.receive():
                live.remove(one)
