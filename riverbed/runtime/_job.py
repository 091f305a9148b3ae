"""A job: one frozen graph running on asyncio, one task per operator inside one TaskGroup.

`Job.run` sets every operator up, tells them all ports are ready, then runs
them until final punctuation has drained the graph (every source ended and
every operator forwarded final) or an operator failed. `Job.stop` asks the
sources to end, which drains the graph the same way; `Job.abort` cancels at
once.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping
from typing import Any, Protocol

from ..core import JobError, JobMetrics, OperatorCore, OperatorError, RestoreRefused
from ..graph import CheckpointBarrier, FrozenGraph, Graph, event_time_region
from ._clock import Clock, RealClock, VirtualClock, run_virtual
from ._runner import OperatorRunner

__all__ = ["MIN_CHECKPOINT_PERIOD", "CheckpointSink", "Job", "run_graph"]

DEFAULT_BATCH = 1000
# Below this a job does little but checkpoint (each one is a synced RocksDB write), and a
# period of nanoseconds would keep the periodic task from ever waiting.
MIN_CHECKPOINT_PERIOD = 0.01


class StoredCheckpoint(Protocol):
    @property
    def id(self) -> int: ...

    @property
    def job(self) -> str: ...

    @property
    def states(self) -> Mapping[str, Any]: ...


class CheckpointSink(Protocol):
    """Where a job's checkpoints go (`riverbed.checkpoint` stores satisfy this)."""

    def save(self, checkpoint_id: int, states: Mapping[str, Any], *, job: str, time_ns: int) -> None: ...

    def latest_good(self) -> StoredCheckpoint | None: ...


class Job:
    """Runs a graph. ``clock`` defaults to the wall clock; pass a `VirtualClock` for tests.

    ``batch_size`` is how many tuples a source submits before handing them on
    (and the size of the batches between operators when sources are fast).
    """

    def __init__(self, graph: Graph | FrozenGraph, *, clock: Clock | None = None,
                 batch_size: int = DEFAULT_BATCH, name: str | None = None,
                 checkpoints: CheckpointSink | None = None, checkpoint_period: float | None = None,
                 restore: bool = True) -> None:
        self.graph = graph.freeze() if isinstance(graph, Graph) else graph
        self.clock: Clock = clock if clock is not None else RealClock()
        self.name = name or self.graph.name
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size={batch_size!r}: expected an int >= 1")
        self.batch_size = batch_size
        self.stopping = False
        region = event_time_region(self.graph)
        self.runners = {op.name: OperatorRunner(self, op, region) for op in self.graph.operators}
        self.metrics = JobMetrics(self.name, {n: r.metrics for n, r in self.runners.items()})
        self._tasks: list[asyncio.Task[None]] = []
        self._aborted = False
        self.checkpoints = checkpoints
        if checkpoint_period is not None:
            if checkpoints is None:
                raise ValueError("checkpoint_period needs checkpoints=")
            if not math.isfinite(checkpoint_period) or checkpoint_period < MIN_CHECKPOINT_PERIOD:
                raise ValueError(f"checkpoint_period={checkpoint_period!r}: expected a finite number "
                                 f"of seconds >= {MIN_CHECKPOINT_PERIOD}")
        self._period_ns = None if checkpoint_period is None else int(checkpoint_period * 1e9)
        self._restore = restore
        self._pending: tuple[int, dict[str, Any]] | None = None
        self.last_checkpoint: int = 0
        self.restored_from: int | None = None
        self._started = False  # restored and running: a stop from now on takes a checkpoint
        # A stop with checkpoints suspends the job: the id of the checkpoint it waits for, and
        # whether that checkpoint committed (then every task ends where it is, without final).
        self.suspend_at: int | None = None
        self.suspended = False

    def snapshot_metrics(self) -> JobMetrics:
        """The metrics, with queue sizes refreshed."""
        for r in self.runners.values():
            r.metrics.queue_size = len(r.inbox)
            r.metrics.queue_high_water = r.inbox.high_water
            r.metrics.backpressure_waits = r.inbox.puts_waited
        return self.metrics

    async def run(self) -> JobMetrics:
        """Run to completion; raise `JobError` naming every operator that failed."""
        runners = list(self.runners.values())
        try:
            for r in runners:
                r.wire(self.runners)
            for r in runners:
                r.core.setup()
            for r in runners:
                r.core.ports_ready()
            self._restore_latest()
        except (OperatorError, RestoreRefused) as exc:
            raise JobError(self.name, [exc]) from exc
        self._started = True
        if self.stopping and self.checkpoints is not None:
            # Stopped before it ran: the stored checkpoint already is where a restart goes on.
            self.suspended = True
            for r in runners:
                r.core.shut_down(report=False)
            return self.snapshot_metrics()
        try:
            async with asyncio.TaskGroup() as tg:
                for r in runners:
                    kind = "out" if r.odef.kind == "source" else "in"
                    self._tasks.append(tg.create_task(r.run(), name=f"{self.name}/{r.name}/{kind}"))
                if self._period_ns is not None:
                    periodic = tg.create_task(self._periodic(), name=f"{self.name}/checkpoints")
                    self._tasks.append(periodic)
        except* Exception as group:
            raise JobError(self.name, _flatten(group)) from None
        if self._aborted:
            raise JobError(self.name, [RuntimeError("aborted: tasks were cancelled, nothing drained")])
        return self.snapshot_metrics()

    # ---------------------------------------------------------- checkpoints

    def _restore_latest(self) -> None:
        if self.checkpoints is None:
            return
        newest = getattr(self.checkpoints, "newest_id", None)
        self.last_checkpoint = (newest() if callable(newest) else None) or 0  # ids keep increasing
        if not self._restore:
            return
        latest = self.checkpoints.latest_good()
        if latest is None:
            return
        missing = [n for n in self.runners if n not in latest.states]
        if missing:
            raise OperatorError(missing[0], None, None, ValueError(
                f"checkpoint {latest.id} has no state for operator(s) {', '.join(missing)}: "
                "it was taken from a different graph"))
        if latest.job != self.name:
            raise RestoreRefused(
                f"checkpoint {latest.id} was taken by job {latest.job!r}, and this job is "
                f"{self.name!r}: restoring it would continue another job's state; give this job "
                "a checkpoint directory of its own (or the name it had)")
        for name, r in self.runners.items():
            r.restore_on_start(latest.states[name])
        self.restored_from = latest.id
        self.last_checkpoint = max(self.last_checkpoint, latest.id)

    async def _periodic(self) -> None:
        assert self._period_ns is not None
        due = self.clock.now() + self._period_ns
        while not all(r.finished for r in self.runners.values()):
            await self.clock.sleep_until(due)
            if self.stopping:
                return  # the stop took its own checkpoint; later ones would hold ended operators
            due = max(due + self._period_ns, self.clock.now())
            self.trigger_checkpoint()

    def trigger_checkpoint(self) -> int | None:
        """Start a checkpoint now: sources emit barriers that align through the graph.

        Returns its id, or None when one is still in progress or there is no store.
        """
        if self.checkpoints is None or self._pending is not None or self.stopping:
            return None
        return self._start_checkpoint()

    def _start_checkpoint(self) -> int:
        checkpoint_id = self.last_checkpoint + 1
        self._pending = (checkpoint_id, {})
        for r in self.runners.values():
            core = r.core
            if core.finished:
                self.report_checkpoint(checkpoint_id, r.name, core.final_state)
            elif r.odef.kind == "source":
                core.start_checkpoint(checkpoint_id)
            elif core.inputs_ended:
                # Its inputs ended but it still runs (it holds items, like Delay): no barrier
                # can reach it, so it starts the checkpoint itself, in order in its task.
                r.put_control(CheckpointBarrier(checkpoint_id))
        return checkpoint_id

    def report_checkpoint(self, checkpoint_id: int, operator: str, state: Any) -> None:
        """An operator's state for checkpoint ``checkpoint_id``; the last one commits it."""
        pending = self._pending
        if pending is None or pending[0] != checkpoint_id:
            return
        pending[1][operator] = state
        if len(pending[1]) == len(self.runners):
            self._commit(checkpoint_id, pending[1])

    def operator_finished(self, core: OperatorCore) -> None:
        """An operator ended; a checkpoint it will never see a barrier for takes its final state."""
        core.final_state = core.checkpoint_state()
        pending = self._pending
        if pending is not None and core.name not in pending[1]:
            self.report_checkpoint(pending[0], core.name, core.final_state)

    def _commit(self, checkpoint_id: int, states: dict[str, Any]) -> None:
        assert self.checkpoints is not None
        self.checkpoints.save(checkpoint_id, states, job=self.name, time_ns=self.clock.now())
        self._pending = None
        self.last_checkpoint = checkpoint_id
        for r in self.runners.values():
            r.core.guard(r.op.on_checkpoint_committed, None, checkpoint_id)
        if checkpoint_id == self.suspend_at:
            self._suspend()

    def _suspend(self) -> None:
        """The stop's checkpoint committed: end every task where it is. Nothing after its
        barriers reaches a sink's committed output, and no final punctuation is sent, so no
        window is flushed: a restart continues from that checkpoint as if never stopped."""
        self.suspended = True
        for task in self._tasks:
            task.cancel()

    def host_for(self, runner: OperatorRunner) -> _RunnerHost:
        """What an operator's core asks of the job and its runner (`CoreHost`)."""
        return _RunnerHost(self, runner)

    def stop(self) -> None:
        """Ask the sources to end.

        Without checkpoints, final punctuation then drains the graph: windows
        flush, sinks write everything. With checkpoints the stop suspends the
        job instead: it takes a checkpoint (or finishes the one in flight),
        the sources end right after their barriers, and once it committed
        every operator ends where it is, without final punctuation, so no
        partial window is flushed. A restart continues from that checkpoint
        with exactly the output of a run never stopped, and transactional
        sinks never show output that a restart would take back. No other
        checkpoint starts after a stop: one built from ended operators would
        restore sinks that never accept input again.
        """
        if self.stopping:
            return
        if self.checkpoints is not None and self._started \
                and not all(r.finished for r in self.runners.values()):
            self.suspend_at = self._pending[0] if self._pending is not None else self._start_checkpoint()
        self.stopping = True
        for r in self.runners.values():
            r.request_stop()

    def abort(self) -> None:
        """Cancel every task now: nothing is drained; `run` raises `JobError`."""
        self._aborted = True
        for task in self._tasks:
            task.cancel()


class _RunnerHost:
    """The job and one runner, as the `CoreHost` of that runner's core."""

    __slots__ = ("_job", "_runner")

    def __init__(self, job: Job, runner: OperatorRunner) -> None:
        self._job = job
        self._runner = runner

    @property
    def job_name(self) -> str:
        return self._job.name

    @property
    def stopping(self) -> bool:
        return self._job.stopping

    def now(self) -> int:
        return self._job.clock.now()

    def report_checkpoint(self, checkpoint_id: int, operator: str, state: Any) -> None:
        self._job.report_checkpoint(checkpoint_id, operator, state)

    def request_checkpoint(self) -> int | None:
        return self._job.trigger_checkpoint()

    def operator_finished(self, core: OperatorCore) -> None:
        self._job.operator_finished(core)

    def wake(self, core: OperatorCore) -> None:
        self._runner.wake()

    async def flush(self, core: OperatorCore) -> None:
        await self._runner.flush()

    async def sleep_until(self, core: OperatorCore, when: int) -> None:
        await self._job.clock.sleep_until(when)


def _flatten(group: BaseExceptionGroup[Exception]) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            out.extend(_flatten(exc))
        else:
            out.append(exc)
    return out


def run_graph(graph: Graph | FrozenGraph, *, clock: Clock | None = None,
              batch_size: int = DEFAULT_BATCH, checkpoints: CheckpointSink | None = None,
              checkpoint_period: float | None = None) -> JobMetrics:
    """Run a graph to completion from synchronous code (a `VirtualClock` runs on virtual time)."""
    job = Job(graph, clock=clock, batch_size=batch_size, checkpoints=checkpoints,
              checkpoint_period=checkpoint_period)
    if isinstance(job.clock, VirtualClock):
        return run_virtual(job.run(), job.clock)
    return asyncio.run(job.run())
