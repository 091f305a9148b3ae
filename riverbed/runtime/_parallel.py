"""A parallel region in the job's process: its channels (in worker processes), the split, the merge.

Processes: a region of width W runs in min(W, ``processes``) worker processes (the region's
``processes``, default the CPU count), channel i in process i % processes. Why not a process
per channel: on 2 cores, width 4 in 4 processes cost 12-16 % more worker CPU a tuple than width
2 (forks, exits, context switches, caches refilled), against 6 % more instructions; grouped,
2-4 % (docs/decisions.md). Each channel keeps its own socket, operators, replicas, keys,
metrics and bounded queue, so everything below is per channel as with a process each; a
process that dies takes all its channels, and the region resets as for one.

The region's operators keep their `OperatorRunner`s in the job, but those never run: upstream
operators deliver into the members' inboxes as usual (so backpressure reaches them as usual),
a feeder task of this host takes the entries out, splits each batch by channel (a stable hash
of the partition key, or round-robin) and sends every channel its part; marks, watermarks and
final punctuation go to every channel, in place. Each channel answers with what its operators
sent out of the region; the merge puts it in the members' output ports, and the members'
runners deliver it downstream (`OperatorRunner.flush`), in order, waiting while it is full.

SPL's rules at the merge (`_parallel_merge`): tuples pass as they come (a key's tuples come from
one channel, in order); a window mark leaves once every channel has sent its next one; the
watermark leaving is the minimum over the channels; final leaves once every channel has sent it.

Bounded queues: at most ``queue_batches`` (the first member's; `REGION_FEEDS` if None) FEED
messages with tuples are unanswered per channel; a feeder waits for room, its inbox fills, and
the upstream waits.

Time: messages carry the job's clock; the channels' deadlines come back with each answer and a
timer of the job's clock sends a TICK when one is due. On a `VirtualClock`, time must not jump
while a worker is still computing: while answers are outstanding a keep-alive task stays
runnable (blocking at most 1 ms at a time on the sockets), so the loop never looks idle.

Checkpoints (the region inside a consistent region, or the job's ``--checkpoint-dir`` region):
a barrier entering goes to every channel, in place; each channel's operators align it and
report their states; the host reports an operator's state to the region once every channel
sent it, as ``{"parallel": {...width...}, "channels": [state of channel 0, 1, ...]}``, and the
merge lets the barrier out once every channel (that has not ended) sent it. A restore gives
each channel its own state, so it needs the width the checkpoint was taken with. A reset (an
operator failed, a worker died) stops the channels and starts new workers from the last
committed checkpoint; a commit is passed on to every channel (transactional sinks inside).

Replicated sources (a source inside the region, `_replica`): each channel's worker runs its own
replica and sends what leaves the region unasked (``EMIT``); the channel counts as busy (not
idle, the keep-alive runs) until its replicas ended, and a stop of the job is passed on to it.
In a consistent region, a checkpoint starts at the replicas: the region asks the host, which
asks every running channel (``CHECKPOINT``; a channel still starting is asked once it runs, or
at its fork), and each replica serves the barrier before its next batch; a channel that already
finished reports its operators' final states. The barrier then aligns at the merge like any
other, and a reset restores each replica to its checkpointed position in the new workers.

Process groups (`Graph.process`) are hosted here too, as regions of width 1 without a key.

Failures: without checkpoints (`Job.drains_failures`) a member that fails ends in its worker
as in the job's process (what it submitted first, then final; `SyncGraph.drains_failures`), the
worker tells the job (``FAILING``), which stops its sources and drains; the channel goes on. A
replicated source's failure, or a worker that dies, still ends the job at once. A tuple whose
partition key the split cannot take (missing, unhashable; at width 1 too) is the first member's
failure on that tuple: sent to channel 0 in its place in the stream (`riverbed.core.TupleFailed`),
where each member taking the stream routes it to its error port or fails as above; the batch's
other tuples go on.

Worker processes end on every path: after final (the socket closes, the worker sees EOF),
and on a failure, an abort or a stop (the sockets are shut down, the job waits for the workers
without blocking its loop, then `close` kills what is still alive and reaps it).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import operator
import os
import select
import signal
import socket
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Any

from ..core import (
    InputPortMetrics,
    MarkedBatch,
    OperatorError,
    RestoreRefused,
    TupleFailed,
    control_positions,
    describe_key,
    same_key,
    with_notes,
)
from ..graph import CheckpointBarrier, ParallelRegion, Punct, Watermark
from ._clock import RealClock, TimerHandle, VirtualClock
from ._parallel_merge import Merge
from ._parallel_metrics import fold_member_metrics, retire_reports
from ._parallel_split import SplitFailed, Splitter
from ._parallel_wire import (
    CHECKPOINT,
    COMMIT,
    EMIT,
    FAILED,
    FAILING,
    FEED,
    METRICS_OUT,
    OUT,
    STOP,
    TICK,
    dumps,
    frame,
    loads,
)
from ._worker import STOP_SIGNALS as _STOP_SIGNALS
from ._worker import serve

if TYPE_CHECKING:
    from ._job import Job
    from ._region import Region, StoredCheckpoint
    from ._runner import OperatorRunner

__all__ = ["ChannelError", "ChannelMetrics", "ParallelHost", "close_in_workers", "forget_in_workers",
           "parent_fds"]

_HEADER = struct.Struct("!i")
_LONG = struct.Struct("!Q")
# FEED messages in flight to a channel unless its first member's ``queue_batches`` says otherwise:
# a batch's credit comes back only after a round trip through the worker, so the window must be
# deeper than an inbox in one process (8 cost the split shape 15 % of its throughput).
REGION_FEEDS = 16
FOLD_SECONDS = 0.25  # the members' metrics are folded at most this often (`_read`)
_PARENT_FDS: set[int] = set()  # the job's ends of every open channel, closed in each new worker
_JOB_ONLY_FDS: set[int] = set()  # the job's listening sockets (`close_in_workers`)


def close_in_workers(fd: int) -> None:
    """A socket of the job's process that no worker it forks may hold: the console's or the
    metrics endpoint's listening socket. A worker that outlived a killed job (busy in a
    process group) held the port, so the job restarted under ``--restarts`` could not bind
    it and gave up."""
    _JOB_ONLY_FDS.add(fd)


def forget_in_workers(fd: int) -> None:
    """``fd`` was closed (`close_in_workers`): its number may be reused by anything."""
    _JOB_ONLY_FDS.discard(fd)


class ChannelError(RuntimeError):
    """A worker process of a parallel region failed, or died, naming the region and channel."""


@dataclass(slots=True)
class ChannelMetrics:
    """One channel of a parallel region, as the status view and the metrics show it."""

    region: str
    channel: int
    kind: str = "channel"  # "process": the one worker of a process group (`Graph.process`)
    pid: int | None = None
    alive: bool = False
    tuples_in: int = 0  # sent into the channel
    tuples_out: int = 0  # merged out of it
    batches_in_flight: int = 0  # FEED messages not yet answered
    capacity: int = 0
    backpressure_waits: int = 0
    finished: bool = False
    # The worker process's CPU time (user + system), as it last said: channels sharing a
    # process (a region wider than its ``processes``) each show the process's.
    cpu_seconds: float = 0.0
    # Messages read from the worker: its answers, and a message per batch its replicas
    # produced; and the writes that carried them, as the worker last said (a write carries up
    # to 16 replica batches' messages, `_worker._Hold`).
    worker_messages: int = 0
    worker_writes: int = 0
    # What the workers a reset replaced said last: the two counts above go on from there, as
    # counters do (they fell back to the new worker's, 45 -> 1 writes in a review).
    cpu_before: float = 0.0
    writes_before: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}


class _Channel:
    __slots__ = (
        "asked",
        "deadline",
        "ended",
        "fd",
        "finished",
        "index",
        "inflight",
        "metrics",
        "outstanding",
        "placed",
        "process",
        "producing",
        "reader",
        "room",
        "sock",
        "writer",
    )

    def __init__(self, metrics: ChannelMetrics) -> None:
        self.index = metrics.channel
        self.metrics = metrics
        self.process: BaseProcess | None = None
        self.sock: socket.socket | None = None
        self.fd = -1
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.inflight = 0  # FEED messages with tuples not yet answered: the bounded queue
        # Each of those FEEDs' tuples and the input port that counts them as processed once the
        # channel answered it: what a reset drops from the queue was never processed, and a
        # count taken back would make a Prometheus counter go down.
        self.placed: deque[tuple[InputPortMetrics, int]] = deque()
        self.outstanding = 0  # messages of any kind not yet answered
        self.deadline: int | None = None
        self.finished = False
        self.producing = False  # its replicated sources still run
        self.asked = 0  # the newest checkpoint its replicas were asked to start
        self.ended: dict[str, Any] = {}  # member -> its final state in this channel
        self.room = asyncio.Event()
        self.room.set()


class ParallelHost:
    """Runs one parallel region of a job: ``width`` channels in ``processes`` worker processes."""

    def __init__(self, job: Job, spec: ParallelRegion) -> None:
        self.job = job
        self.spec = spec
        self.name = spec.name
        self.width = spec.width
        self.processes = spec.worker_processes()
        members = set(spec.members)
        self.runners = {n: job.runners[n] for n in spec.members}
        # Each channel's latest report of its operators' metrics (`fold_member_metrics`).
        self._member_metrics: dict[int, dict[str, dict[str, Any]]] = {}
        # What workers a reset replaced counted (their last reports, as one: `retire_reports`),
        # and errors told only by a worker's failure (by operator and port): both add to what
        # the new workers count.
        self._retired_metrics: list[dict[str, dict[str, Any]]] = []
        self._failures: dict[tuple[str, int], int] = {}
        self._folded_at = 0.0  # when the reports were last folded (`_read`), on the wall clock
        self._folded_job_at = 0  # and on the job's (ns)
        self.capacity = self.runners[spec.members[0]].odef.queue_batches or REGION_FEEDS
        kind = "process" if spec.process else "channel"
        self._metrics = [ChannelMetrics(spec.name, i, kind, capacity=self.capacity)
                         for i in range(spec.width)]
        self.sources = [n for n in spec.members if job.runners[n].odef.kind == "source"]
        self.where = f"{spec.kind} {spec.name!r}"
        self.channels = [_Channel(m) for m in self._metrics]
        # Each stream into the region is read once, from the first member it feeds (the worker
        # hands it to every member it feeds); a member's other connections are None.
        self._feeds: list[tuple[OperatorRunner, list[tuple[str, int] | None]]] = []
        seen: set[tuple[str, int]] = set()
        for runner in self.runners.values():
            conns: list[tuple[str, int] | None] = []
            for c in runner.core.connections:
                stream = (c.operator, c.port)
                if c.operator in members or stream in seen:
                    conns.append(None)
                else:
                    seen.add(stream)
                    conns.append(stream)
            if any(s is not None for s in conns):
                self._feeds.append((runner, conns))
        self._leaves: list[tuple[OperatorRunner, int]] = []
        for runner in self.runners.values():
            for port, out in enumerate(runner.core.outputs):
                if any(op not in members for op, _ in job.graph.consumers(runner.name, port)):
                    out.first_invalid = None  # the worker checked the schema already
                    self._leaves.append((runner, port))
        self._merges: dict[tuple[str, int], Merge] = {}
        self._new_merges()
        # Checkpoints: what each channel restores from, and the states reported so far.
        self._restore: list[dict[str, Any]] | None = None
        self._reports: dict[tuple[int, str], list[Any]] = {}
        self._ended: dict[str, list[Any]] = {}  # member -> the final state of each channel
        self._asked: int | None = None  # the checkpoint the replicas were asked to start
        self.restarts = 0
        key = spec.partition_by
        self._key_text = describe_key(key)  # as checkpoints record it (a restart compares)
        self._splitter = Splitter(spec.width, operator.itemgetter(key) if isinstance(key, str) else key)
        self._timer: TimerHandle | None = None
        self._timer_at: int | None = None
        self._virtual = isinstance(job.clock, VirtualClock)
        self._busy = asyncio.Event() if self._virtual else None
        self._task: asyncio.Task[None] | None = None
        self._keepalive_task: asyncio.Task[None] | None = None
        self._exiting: list[int] | None = None  # the sentinels of workers exiting (`_await_exits`)
        self._merging = 0  # answers being merged and delivered
        self._dead: set[int] = set()  # the processes (ids) whose death a channel reported
        self.done = False

    def _new_merges(self) -> None:
        self._merges = {(r.name, port): Merge(r, r.core.outputs[port], list(self._metrics))
                        for r, port in self._leaves}

    @property
    def region(self) -> Region | None:
        """The consistent region the region's operators are in (one or none: `freeze` checks)."""
        return self.runners[self.spec.members[0]].region

    @property
    def idle(self) -> bool:
        """Nothing in flight: every channel answered, the answers are merged and delivered, and
        the feeders wait on empty inboxes (a trace replay settles on it)."""
        return (not self._merging and not any(ch.outstanding or ch.producing for ch in self.channels)
                and all(r.inbox.idle for r, _ in self._feeds))

    @property
    def members(self) -> tuple[str, ...]:
        return self.spec.members

    def metrics(self) -> list[ChannelMetrics]:
        """Each channel's metrics, refreshed. ``alive`` is kept by the job's loop (set when a
        worker starts, cleared when its death is seen or it is reaped), not asked of the
        process here: the status view, the console and Prometheus call this from their own
        threads, and `Process.is_alive` reaps a dead child there (``waitpid``), so the loop's
        own look at it found no exit code and reported a killed worker as "still running"."""
        for ch in self.channels:
            m = ch.metrics
            m.batches_in_flight = ch.inflight
            m.finished = ch.finished
        return list(self._metrics)

    # ------------------------------------------------------------------ wiring

    def wire(self) -> None:
        """After the job wired its runners: the members' outputs lead only out of the region
        (inside it, the workers deliver between members themselves), and a stream into the
        region reaches only the inbox it is read from (`_feeds`: the first member it feeds;
        the worker hands it to the others). Delivered to another member's inbox as well, it
        filled that inbox, which nothing reads, and held its producer back for good."""
        inboxes = {id(r.inbox) for r in self.runners.values()}
        for runner in self.runners.values():
            for delivery in runner._deliveries:
                delivery.targets = [t for t in delivery.targets if id(t[0]) not in inboxes]
        read = {(id(runner.inbox), conn) for runner, conns in self._feeds
                for conn, stream in enumerate(conns) if stream is not None}
        for runner in self.job.runners.values():
            if runner.name in self.runners:
                continue
            for delivery in runner._deliveries:
                delivery.targets = [t for t in delivery.targets
                                    if id(t[0]) not in inboxes or (id(t[0]), t[1]) in read]

    @property
    def _suspending(self) -> bool:
        """The job's stop suspends it at a checkpoint of the region (replicas end without
        final, right after that checkpoint's barrier)."""
        region = self.region
        return region is not None and region.suspend_at is not None

    def request_stop(self) -> None:
        """The job was asked to stop: replicated sources end at their next batch."""
        message = frame(dumps((STOP, self._suspending)))
        for ch in self.channels:
            if ch.producing and ch.writer is not None:
                ch.writer.write(message)

    def start(self) -> None:
        """Run the region in a task of the job (again after its consistent region reset)."""
        self._task = self.job.spawn(self.run(), f"{self.job.name}/{self.name}/parallel")

    # ------------------------------------------------------------ checkpoints

    def restore_on_start(self, checkpoint: StoredCheckpoint) -> None:
        """The job starts from ``checkpoint``: each channel gets its own state (refused, naming
        both widths, when it was taken with another width: the state is split by channel)."""
        self._restore = self._split_states(checkpoint)

    def start_checkpoint(self, checkpoint_id: int) -> None:
        """The region starts checkpoint ``checkpoint_id`` and the region's replicated sources
        are among its sources: every running channel is asked to take it at its replicas (one
        still starting is asked once it runs); a channel that finished reports the final states
        of its operators, which see no barrier any more."""
        self._asked = checkpoint_id
        for ch in self.channels:
            if ch.finished:
                self._report(ch.index, [(checkpoint_id, name, ch.ended[name])
                                        for name in self.members if name in ch.ended])
            elif ch.writer is not None:
                self._ask(ch, checkpoint_id)

    def _asking(self) -> int | None:
        """The checkpoint under way that the replicas were asked to start, if it still is."""
        region = self.region
        pending = region.pending if region is not None else None
        asked = self._asked
        return asked if pending is not None and pending.id == asked else None

    def _ask(self, ch: _Channel, checkpoint_id: int) -> None:
        region = self.region
        assert region is not None and ch.writer is not None
        ch.asked = checkpoint_id
        ch.outstanding += 1
        ch.writer.write(frame(dumps((CHECKPOINT, self.job.clock.now(), checkpoint_id, region.name))))
        self._kick()

    def reset(self, checkpoint: StoredCheckpoint | None) -> None:
        """Its consistent region resets (after `cancel` and `stopped`): drop what was merged and
        not yet delivered and every report under way; the next `start` forks new workers, which
        restore ``checkpoint`` (None: the initial state)."""
        self._restore = None if checkpoint is None else self._split_states(checkpoint)
        # The new workers count anew: what the replaced ones counted stays, as one report.
        self._retired_metrics = [retire_reports([*self._retired_metrics,
                                                 *self._member_metrics.values()])]
        self._member_metrics.clear()
        self._reports.clear()
        for ch in self.channels:  # dropped from the channels' queues: never processed
            ch.placed.clear()
        for m in self._metrics:  # new workers count from zero: their counts add to these
            m.cpu_before, m.writes_before = m.cpu_seconds, m.worker_writes
        self._ended.clear()
        self._asked = None
        for runner in self.runners.values():
            core = runner.core
            for out in core.outputs:
                out.take()
            core.finished = core.metrics.finished = False
            core.final_state = None
        self.restarts += 1

    def _split_states(self, checkpoint: StoredCheckpoint) -> list[dict[str, Any]]:
        per_channel: list[dict[str, Any]] = [{} for _ in range(self.width)]
        for name in self.members:
            state = checkpoint.states[name]
            channels = channel_states(state)
            outside = channels is None
            if channels is None:  # taken without the region: one process, as width 1
                channels = [state]
            if len(channels) != self.width:
                taken = "outside any parallel region" if outside else f"in {len(channels)} channel(s)"
                raise RestoreRefused(
                    f"checkpoint {checkpoint.id}: operator {name!r} was checkpointed {taken} and "
                    f"parallel region {self.name!r} now has width {self.width}; each channel's "
                    "state holds the partitions its keys hashed to, and a different width sends "
                    f"keys to other channels. Restart with width {len(channels)} (e.g. -p "
                    f"width={len(channels)}), or give the job a new checkpoint directory")
            header = None if outside else state.get("parallel")
            key = self._key_text
            if isinstance(header, dict) and "key" in header and not same_key(header["key"], key):
                raise RestoreRefused(
                    f"checkpoint {checkpoint.id}: operator {name!r} was checkpointed in parallel "
                    f"region {self.name!r} split by {header['key']!r}, and the region is now split "
                    f"by {key!r}: keys would reach other channels than the ones holding their "
                    "state. Run the graph as it was, or give the job a new checkpoint directory")
            for i, st in enumerate(channels):
                per_channel[i][name] = st
        return per_channel

    def _combined(self, states: list[Any]) -> dict[str, Any]:
        return {"parallel": {"region": self.name, "width": self.width, "key": self._key_text},
                "channels": states}

    def committed(self, checkpoint_id: int) -> None:
        """The region committed ``checkpoint_id``: every running channel hears of it
        (transactional sinks inside publish)."""
        now = self.job.clock.now()
        for ch in self.channels:
            if ch.writer is not None and not ch.finished:
                ch.outstanding += 1
                ch.writer.write(frame(dumps((COMMIT, now, checkpoint_id))))
        self._kick()

    def cancel(self) -> None:
        """Stop the region where it is (its consistent region resets)."""
        if self._task is not None:
            self._task.cancel()

    async def stopped(self) -> None:
        """Wait until the region's task ended (after `cancel`); its workers are gone."""
        task = self._task
        if task is not None and not task.done():
            await asyncio.wait({task})
        self.close()

    def _report(self, index: int, reports: list[tuple[int, str, Any]]) -> None:
        region = self.region
        for checkpoint_id, name, state in reports:
            got = self._reports.setdefault((checkpoint_id, name), [_MISSING] * self.width)
            got[index] = state
            if _MISSING not in got:
                del self._reports[(checkpoint_id, name)]
                if region is not None:
                    region.report(checkpoint_id, name, self._combined(got))

    def _finals(self, index: int, finals: list[tuple[str, Any]]) -> None:
        """Operators that ended in a channel; one has ended once it ended in every channel."""
        for name, state in finals:
            got = self._ended.setdefault(name, [_MISSING] * self.width)
            got[index] = state
            if _MISSING in got:
                continue
            runner = self.runners[name]
            runner.core.final_state = self._combined(got)
            runner.core.finished = runner.core.metrics.finished = True
            region = self.region
            if region is not None:
                region.operator_finished(runner)

    # --------------------------------------------------------------------- run

    async def run(self) -> None:
        """Start the channels, split and merge until every channel finished, then reap them.
        Inside a consistent region that heals, a failure (an operator's, a worker that died)
        resets the region instead of ending the job."""
        self.done = False
        self.channels = [_Channel(m) for m in self._metrics]
        self._new_merges()
        self._splitter.reset()
        self._merging = 0
        self._dead.clear()
        try:
            await self._run()
        except Exception as exc:
            region = self.region
            if region is None or not region.heals:
                raise
            failure = _first(exc)
            self.close()
            region.fail(None, failure)
        finally:
            self.done = True
            self.close()

    async def _run(self) -> None:
        try:
            await self._start_channels()
            if self._virtual:
                self._keepalive_task = asyncio.get_running_loop().create_task(
                    self._keepalive(), name=f"{self.job.name}/{self.name}/time")
            async with asyncio.TaskGroup() as tg:
                for ch in self.channels:
                    tg.create_task(self._read(ch), name=f"{self.job.name}/{self.name}/{ch.index}/out")
                for runner, conns in self._feeds:
                    tg.create_task(self._feed(runner, conns),
                                   name=f"{self.job.name}/{self.name}/{runner.name}/in")
            for runner in self.runners.values():
                runner.core.finished = runner.core.metrics.finished = True
            await self._hang_up()
        finally:
            await self._end_workers()  # (after a failure, an abort or a reset; none left after _hang_up)
            self.close()

    def _groups(self) -> list[list[_Channel]]:
        """The channels each worker process hosts: channel i in process i % processes, so a
        region of width 4 on 2 processes runs channels 0 and 2 in one, 1 and 3 in the other."""
        n = self.processes
        return [self.channels[p::n] for p in range(n)]

    async def _start_channels(self) -> None:
        ctx = multiprocessing.get_context("fork")  # the graph (functions, operators) is inherited
        now = self.job.clock.now()
        region = self.region
        restore = self._restore
        clock = self.job.clock
        wall_clock = clock.ahead if isinstance(clock, RealClock) else None  # replicas stamp by it
        for group in self._groups():
            asking = self._asking() if self.sources else None
            children: list[socket.socket] = []
            for ch in group:
                parent, child = socket.socketpair()
                _PARENT_FDS.add(parent.fileno())
                ch.sock, ch.fd = parent, parent.fileno()
                children.append(child)
            indices = [ch.index for ch in group]
            proc = ctx.Process(target=serve, name=f"riverbed-{self.job.name}-{self.name}-"
                                                  f"{'.'.join(map(str, indices))}",
                               args=(children, sorted(_PARENT_FDS | _JOB_ONLY_FDS), self.job.graph,
                                     self.spec.members),
                               kwargs={"name": f"{self.job.name}/{self.name}", "now": now,
                                       "region": None if region is None else region.name,
                                       "region_members": frozenset() if region is None
                                       else region.member_names,
                                       "restore": None if restore is None
                                       else [restore[i] for i in indices],
                                       "channels": indices, "width": self.width,
                                       "key": self._splitter.key, "wall_clock": wall_clock,
                                       "batch": self.job.batch_size,
                                       "stopping": self.job.stopping, "suspend": self._suspending,
                                       "checkpoint": asking,
                                       "drains": self.job.drains_failures,
                                       "job_pid": os.getpid()},
                               daemon=True)
            # Blocked across the fork: a stop signalled to the whole process group in the
            # moment the child still has the job's handlers would be written, by the child,
            # into the job's loop's wakeup socket it shares, and read there as a second signal
            # (an abort). The child unblocks them once it ignores them (`serve`).
            held = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
            try:
                proc.start()
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, held)
            for child in children:
                child.close()
            for ch in group:
                ch.process = proc
                ch.metrics.pid = proc.pid
                ch.metrics.alive = True
                ch.outstanding = 1  # the worker's first answer: what activation raised, its deadline
                ch.producing = bool(self.sources)
                ch.asked = asking or 0
                self.job.log_region("channel_started", level="info", region=self.name,
                                    channel=ch.index, kind=ch.metrics.kind,
                                    pid=proc.pid, operators=list(self.spec.members),
                                    restored=restore is not None, restarts=self.restarts)
            for ch in group:
                assert ch.sock is not None
                ch.reader, ch.writer = await asyncio.open_unix_connection(sock=ch.sock)
                asking = self._asking() if self.sources else None
                if asking is not None and ch.asked < asking:  # asked while it was connecting
                    self._ask(ch, asking)
        if self.job.stopping:
            self.request_stop()  # asked while they were starting
        self._kick()

    # -------------------------------------------------------------------- split

    async def _feed(self, runner: OperatorRunner, conns: list[tuple[str, int] | None]) -> None:
        inbox = runner.inbox
        open_streams = {s for s in conns if s is not None}
        port_of = runner.core.conn_port
        while open_streams:
            conn, payload = await inbox.get()
            if conn < 0:
                if type(payload) is CheckpointBarrier:  # the region asks the operator itself
                    for ch in self.channels:
                        await self._send(ch, [(runner.name, -1, payload)], 0)
                continue
            stream = conns[conn]
            if stream is None:
                continue
            if isinstance(payload, list):
                # (counted as processed once the channel answered each part: `_read`)
                await self._split(runner, port_of[conn], stream, payload,
                                  runner.metrics.inputs[port_of[conn]])
                continue
            if payload is Punct.FINAL:
                open_streams.discard(stream)
            elif (payload is not Punct.WINDOW and type(payload) is not Watermark
                  and type(payload) is not CheckpointBarrier):
                continue
            item = payload.value if type(payload) is Watermark else payload  # see _parallel_wire
            for ch in self.channels:
                await self._send(ch, [(stream[0], stream[1], item)], 0)

    async def _split(self, runner: OperatorRunner, port: int, stream: tuple[str, int],
                     batch: list[Any], counted: InputPortMetrics) -> None:
        """Each channel its part of ``batch`` (marks and watermarks to every channel, in place)."""
        try:
            parts = self._splitter.split(batch)
        except SplitFailed as exc:
            await self._split_failed(runner, port, stream, batch, counted, failure=exc)
            return
        await self._send_parts(stream, parts, counted)

    async def _send_parts(self, stream: tuple[str, int], parts: list[tuple[list[Any], int]],
                          counted: InputPortMetrics) -> None:
        """Each channel its part (`Splitter.split`) of a batch of ``stream``."""
        op, out_port = stream
        for ch, (items, n) in zip(self.channels, parts, strict=True):
            if items:
                await self._send(ch, [(op, out_port, item) for item in items], n, counted)

    async def _split_failed(self, runner: OperatorRunner, port: int, stream: tuple[str, int],
                            batch: list[Any], counted: InputPortMetrics, *,
                            failure: SplitFailed) -> None:
        """A tuple of ``batch`` has no key the split can take (``failure``): the tuples before it go
        to their channels, it goes to channel 0 as a `TupleFailed` in the stream, which every
        member taking the stream there fails on as on a tuple of its own (its error port, else
        its failure, which drains the job when the job drains failures), in its place among the
        stream's items (a checkpoint aligning holds it as it would hold the tuple), then the
        rest of the batch is split in turn. Only this path pays."""
        rest, exc = batch, failure
        op, out_port = stream
        while True:
            head, bad, rest = _cut(rest, exc.tuple)
            if head:
                await self._split(runner, port, stream, head, counted)  # its keys all computed
            error = exc.error
            key = self.spec.partition_by  # (a function by its name: its repr holds an address)
            shown = repr(key) if isinstance(key, (str, tuple, list)) else getattr(
                key, "__qualname__", type(key).__qualname__)
            error.add_note(f"parallel region {self.name!r} splits by {shown}: every tuple "
                           "entering it needs a hashable key")
            failed = TupleFailed(bad, error)
            try:
                loads(dumps(failed))
            except Exception:  # an error that does not pickle, or not back: its text goes instead
                failed = TupleFailed(bad, RuntimeError(with_notes(repr(error), error)))
            await self._send(self.channels[0], [(op, out_port, failed)], 1, counted)
            if not rest:
                return
            try:
                parts = self._splitter.split(rest)
            except SplitFailed as again:
                exc = again
                continue
            await self._send_parts(stream, parts, counted)
            return

    async def _send(self, ch: _Channel, entries: list[tuple[str, int, Any]], tuples: int,
                    counted: InputPortMetrics | None = None) -> None:
        """One FEED message; with tuples it takes a place in the channel's bounded queue."""
        if tuples:
            if ch.inflight >= self.capacity:
                ch.metrics.backpressure_waits += 1
                while ch.inflight >= self.capacity:
                    ch.room.clear()
                    await ch.room.wait()
            ch.inflight += 1
            ch.metrics.tuples_in += tuples
            if counted is not None:
                ch.placed.append((counted, tuples))
        writer = ch.writer
        assert writer is not None
        ch.outstanding += 1
        self._kick()
        try:
            # (whether it took a place: the worker's answer gives that place back, and only that)
            writer.write(frame(dumps((FEED, self.job.clock.now(), entries, 1 if tuples else 0))))
            await writer.drain()
        except ConnectionError:
            # The worker is gone: its reader tells why (it read what the worker sent last).
            await asyncio.get_running_loop().create_future()

    # -------------------------------------------------------------------- merge

    async def _read(self, ch: _Channel) -> None:
        reader = ch.reader
        assert reader is not None
        while not ch.finished or ch.outstanding:
            try:
                (n,) = _HEADER.unpack(await reader.readexactly(4))
                if n == -1:
                    (n,) = _LONG.unpack(await reader.readexactly(8))
                msg = loads(await reader.readexactly(n))
            except (asyncio.IncompleteReadError, ConnectionError) as exc:
                if ch.process is not None and id(ch.process) in self._dead:
                    # Its process died, and the channel that saw it first says so: one error.
                    await asyncio.get_running_loop().create_future()
                raise self._died(ch) from exc
            kind = msg[0]
            if kind == FAILED:
                raise self._failed(ch, msg)
            if kind == FAILING:  # an operator failed and ended; the channel goes on (a drain)
                failure = self._failed(ch, msg)
                assert isinstance(failure, OperatorError)
                self.job.operator_failed(failure, failure.operator)
                continue
            if kind == METRICS_OUT:
                continue
            assert kind in (OUT, EMIT), msg
            _, fed, exits, deadline, finished, member_metrics, reports, finals, cpu, writes = msg
            ch.metrics.cpu_seconds = round(ch.metrics.cpu_before + cpu, 3)
            ch.metrics.worker_messages += 1
            ch.metrics.worker_writes = ch.metrics.writes_before + writes
            if member_metrics:
                # Folded into the job's metrics at most every FOLD_SECONDS (and when a channel
                # finishes, fails or the job ends): a fold per report cost the job's process
                # 20-60 us each, 2-10 % of its CPU in a busy region, and nothing reads faster.
                # On a virtual clock the job's time runs ahead of the wall's: folded every
                # FOLD_SECONDS of either, a status view every few virtual seconds showed a
                # member's watermark 12 virtual seconds old.
                self._member_metrics[ch.index] = member_metrics
                now, job_now = time.monotonic(), self.job.clock.now()
                if finished or now - self._folded_at >= FOLD_SECONDS \
                        or job_now - self._folded_job_at >= FOLD_SECONDS * 1e9:
                    self._folded_at, self._folded_job_at = now, job_now
                    self._fold()
            if reports:
                self._report(ch.index, reports)
            if finals:  # known at once: a checkpoint starting now takes them for this channel
                ch.ended.update(finals)
            self._merging += 1
            if kind == EMIT:  # unasked: what the replicas produced (``fed``: they still run)
                ch.producing, fed = bool(fed), 0
            else:
                ch.outstanding -= 1
            if fed:
                ch.inflight -= fed
                placed = ch.placed
                for _ in range(min(fed, len(placed))):
                    counted, tuples = placed.popleft()
                    counted.tuples_processed += tuples
                ch.room.set()
            ch.deadline = deadline
            if finished:
                ch.finished = True
                ch.deadline = None
            try:
                if exits:
                    await self._merge(ch, exits)
            finally:
                self._merging -= 1
            if finals:
                self._finals(ch.index, finals)
            self._arm()

    async def _merge(self, ch: _Channel, exits: list[tuple[str, int, Any]]) -> None:
        index = ch.index
        touched: dict[str, OperatorRunner] = {}
        for name, port, item in exits:
            merge = self._merges.get((name, port))
            if merge is None:
                continue
            touched[name] = merge.runner
            merge.take(index, item)
        for runner in touched.values():
            await runner.flush()

    # --------------------------------------------------------------------- time

    def _arm(self) -> None:
        """Keep one timer of the job's clock at the channels' earliest deadline."""
        due = min((ch.deadline for ch in self.channels if ch.deadline is not None), default=None)
        if due is None or (self._timer_at is not None and self._timer_at <= due):
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = due
        self._timer = self.job.clock.call_at(due, self._tick)

    def _tick(self) -> None:
        self._timer = self._timer_at = None
        if self.done:
            return
        now = self.job.clock.now()
        for ch in self.channels:
            if ch.deadline is not None and ch.deadline <= now and ch.writer is not None:
                ch.deadline = None  # until its answer says when next
                ch.outstanding += 1
                ch.writer.write(frame(dumps((TICK, now))))
        self._kick()
        self._arm()

    def _kick(self) -> None:
        if self._busy is not None:
            self._busy.set()

    async def _keepalive(self) -> None:
        """On a virtual clock: stay runnable while a worker computes, so time does not jump;
        and while workers exit (`_await_exits`), so the end of a region takes no virtual time
        (the loop, idle while they did, jumped to every timer of the job: the status view's,
        periodic checkpoints, tens of seconds in all)."""
        busy = self._busy
        assert busy is not None
        fds = [ch.fd for ch in self.channels]
        while True:
            exiting = self._exiting
            if exiting is not None:
                # (a worker that exited leaves its sentinel readable: off the list, or this
                # loop would spin until the others exit)
                for fd in select.select(exiting, [], [], 0.001)[0]:
                    exiting.remove(fd)
            elif not any(ch.outstanding or ch.producing for ch in self.channels):
                busy.clear()
                await busy.wait()
                continue
            else:
                select.select(fds, [], [], 0.001)
            await asyncio.sleep(0)

    # ------------------------------------------------------------------ ending

    async def _hang_up(self) -> None:
        """Every channel finished: close the sockets (the workers see EOF and exit) and wait
        until they exited (`_end_workers`)."""
        await self._end_workers()

    async def _end_workers(self) -> None:
        """Close every channel's socket and wait, without blocking the loop, until the workers
        exited: 5 s of wall-clock time at most for a process whose channels all finished (a
        loaded machine can take seconds), 0.2 s for one that did not (it sees EOF at its next
        message, or is busy and `close` kills it).

        The sockets are shut down at once (`_close_socket`): asyncio closes a transport's
        socket only at the loop's next turn, and a `close` that then joined the processes
        (blocking the loop) waited its full 5 s for a finished worker that could not see EOF,
        and killed it."""
        for ch in self.channels:
            self._close_socket(ch)
        procs = self._processes()
        unfinished = [p for p in procs if not all(ch.finished for ch in self.channels
                                                  if ch.process is p)]
        await self._await_exits(unfinished, 0.2)
        await self._await_exits([p for p in procs if p not in unfinished], 5.0)

    async def _await_exits(self, procs: list[BaseProcess], seconds: float) -> None:
        """Wait until ``procs`` exited, ``seconds`` of wall-clock time at most.

        The wait is on each worker's sentinel, bounded by a timer thread rather than by the
        loop's time: on a `VirtualClock` a timeout of the loop moves the job's clock, and the
        50 ms polls this was made of moved it by seconds (hundreds on a loaded machine) while a
        worker took a moment to exit. On a virtual clock the keep-alive runs meanwhile, so the
        loop never looks idle (it would jump to the job's next timer)."""
        procs = [p for p in procs if p.is_alive()]
        if not procs:
            return
        loop = asyncio.get_running_loop()
        gave_up: asyncio.Future[None] = loop.create_future()
        timer = threading.Timer(seconds, _resolve_from_thread, (loop, gave_up))
        timer.daemon = True
        timer.start()
        if self._busy is not None:
            self._exiting = [p.sentinel for p in procs]
            if self._keepalive_task is None or self._keepalive_task.done():
                self._keepalive_task = loop.create_task(
                    self._keepalive(), name=f"{self.job.name}/{self.name}/time")
            self._kick()
        try:
            for proc in procs:
                exited: asyncio.Future[None] = loop.create_future()
                loop.add_reader(proc.sentinel, _resolve, exited)
                try:
                    await asyncio.wait({exited, gave_up}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    loop.remove_reader(proc.sentinel)
                if gave_up.done():
                    break
        finally:
            timer.cancel()
            self._exiting = None

    def _close_socket(self, ch: _Channel) -> None:
        """Close the job's end of ``ch``'s socket, shut down first: the worker sees EOF now,
        not once the loop turns (asyncio closes a transport's socket at its next turn)."""
        _PARENT_FDS.discard(ch.fd)
        sock = ch.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        if ch.writer is not None:
            ch.writer.close()
            ch.writer = None
        elif sock is not None:
            sock.close()
        ch.sock = None

    def close(self) -> None:
        """End every worker still alive (a failure, an abort, a stop) and reap it: no process
        of the region outlives the job. `_end_workers` gave them time to exit, without
        blocking the loop; what is still alive now is killed."""
        if self._member_metrics:
            self._fold()  # the reports since the last fold
        if self._timer is not None:
            self._timer.cancel()
            self._timer = self._timer_at = None
        if self._keepalive_task is not None:
            self._keepalive_task.cancel()
            self._keepalive_task = None
        self._exiting = None
        for ch in self.channels:
            self._close_socket(ch)
        for proc in self._processes():
            group = [ch for ch in self.channels if ch.process is proc]
            killed = proc.is_alive()  # by the job (a reset, an abort): not a kill from outside
            if killed:
                proc.kill()
            proc.join(2.0)  # (killed: reaped at once)
            alive = proc.is_alive()
            for ch in group:
                ch.metrics.alive = alive
                # A warning for an end the job did not make: a signal from outside, a failure.
                quiet = ch.finished or killed or proc.exitcode == 0
                self.job.log_region("channel_ended", level="info" if quiet else "warning",
                                    region=self.name, channel=ch.index,
                                    pid=ch.metrics.pid, exitcode=proc.exitcode,
                                    finished=ch.finished, killed_by_job=killed)
                if not alive:
                    ch.process = None
            if not alive:
                proc.close()

    def _processes(self) -> list[BaseProcess]:
        """The region's worker processes (a process hosts one channel or several)."""
        procs: dict[int, BaseProcess] = {}
        for ch in self.channels:
            if ch.process is not None:
                procs.setdefault(id(ch.process), ch.process)
        return list(procs.values())

    # ------------------------------------------------------------------ errors

    def _died(self, ch: _Channel) -> ChannelError:
        proc = ch.process
        code = None
        if proc is not None:
            self._dead.add(id(proc))
            proc.join(1.0)
            code = proc.exitcode
            for c in self.channels:
                if c.process is proc:
                    c.metrics.alive = code is None
        how = ("still running" if code is None else f"killed by signal {-code}" if code < 0
               else f"exit code {code}")
        shared = [c.index for c in self.channels
                  if proc is not None and c.process is proc and c is not ch]
        also = f", with channel(s) {', '.join(map(str, shared))} in that process" if shared else ""
        return ChannelError(f"{self.where}: channel {ch.index} (pid "
                            f"{ch.metrics.pid}{also}, operators {', '.join(self.members)}) ended without "
                            f"finishing ({how}); " + self._after_death())

    def _after_death(self) -> str:
        """What a channel's death leads to, for its error: a reset, or the job's end."""
        region = self.region
        if region is None or not region.heals:
            return ("the job stops (put the region in a consistent region, or run with "
                    "--checkpoint-dir and replayable sources, to restart it instead)")
        if self.job.stopping or self.job.suspended:
            last = region.last_committed
            return ("the job was stopping, so it ends here without draining; run again with "
                    "the same checkpoint directory to resume from "
                    + (f"checkpoint {last}" if last is not None else "the start"))
        return "its consistent region resets from its last checkpoint"

    def _fold(self) -> None:
        fold_member_metrics(self.runners, self._member_metrics.values(),
                            first=self.spec.members[0], merged=self._merges,
                            retired=self._retired_metrics, failures=self._failures)

    def _failed(self, ch: _Channel, msg: tuple[Any, ...]) -> BaseException:
        kind, op, port, text, error_type, message = msg
        # Its worker ends before it could count it (FAILING: the channel goes on, and its
        # metrics count it).
        if kind == FAILED and op is not None and op in self.runners:
            key = (op, port or 0)  # (no port: a timer's or a mark's failure, the first port's)
            self._failures[key] = self._failures.get(key, 0) + 1
            self._fold()
        cause = ChannelError(f"{error_type}: {message}"
                             f"{'' if text is None else f' on tuple {text}'} ({self.where}, "
                             f"channel {ch.index}, pid {ch.metrics.pid})")
        if op is None:
            return cause
        return OperatorError(op, port, None, cause)


_MISSING: Any = object()  # a channel's state not reported yet


def channel_states(state: Any) -> list[Any] | None:
    """Each channel's state in an operator's stored state (None: taken without a region)."""
    if isinstance(state, dict) and isinstance(state.get("parallel"), dict):
        channels = state.get("channels")
        if isinstance(channels, list):
            return channels
    return None


def _cut(batch: list[Any], bad: Any) -> tuple[list[Any], Any, list[Any]]:
    """``batch`` around its item ``bad`` (the first that is it): what comes before it, it, and
    what comes after it; a `MarkedBatch`'s parts are marked batches (with their marks)."""
    at = next(i for i, item in enumerate(batch) if item is bad)
    head, tail = batch[:at], batch[at + 1:]
    if type(batch) is not MarkedBatch:
        return head, bad, tail
    return _marked(head), bad, _marked(tail)


def _marked(items: list[Any]) -> MarkedBatch:
    marks = control_positions(items)
    return MarkedBatch(items, len(items) - len(marks), None, marks)


def _first(exc: BaseException) -> BaseException:
    """The first failure in a (nested) exception group."""
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _resolve_from_thread(loop: asyncio.AbstractEventLoop, fut: asyncio.Future[None]) -> None:
    with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits any more
        loop.call_soon_threadsafe(_resolve, fut)


def parent_fds() -> frozenset[int]:
    """The job's ends of every open channel (for tests: none stays open after a job)."""
    return frozenset(_PARENT_FDS)

