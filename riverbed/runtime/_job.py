"""A job: one frozen graph running on asyncio, one task per operator inside one TaskGroup.

`Job.run` sets every operator up, tells them all ports are ready, then runs
them until final punctuation has drained the graph (every source ended and
every operator forwarded final) or an operator failed. `Job.stop` asks the
sources to end, which drains the graph the same way (or, with checkpoints,
suspends it at a checkpoint); `Job.abort` cancels at once.

Checkpoints are taken per consistent region (`riverbed.runtime._region`): the
regions the graph declares, each with its own store, or, when it declares
none, one region over the whole job with the ``checkpoints`` store.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Coroutine, Mapping
from typing import TYPE_CHECKING, Any

from ..core import (
    JobError,
    JobMetrics,
    OperatorCore,
    OperatorError,
    RestoreRefused,
    SchemaViolation,
    detached_state,
)
from ..graph import FrozenGraph, Graph, event_time_region
from ._clock import Clock, RealClock, VirtualClock, run_virtual
from ._gc import JOB_GC_THRESHOLD, check_threshold, collection_threshold
from ._region import CheckpointSink, Region
from ._runner import OperatorRunner

if TYPE_CHECKING:
    from ._parallel import ChannelMetrics, ParallelHost

__all__ = ["MIN_CHECKPOINT_PERIOD", "CheckpointSink", "Job", "run_graph"]

DEFAULT_BATCH = 1000
# Below this a job does little but checkpoint (each one is a synced RocksDB write), and a
# period of nanoseconds would keep the periodic task from ever waiting.
MIN_CHECKPOINT_PERIOD = 0.01
JOB_REGION = ""  # the name of the region over the whole job


class Job:
    """Runs a graph. ``clock`` defaults to the wall clock; pass a `VirtualClock` for tests.

    ``batch_size`` is how many tuples a source submits before handing them on
    (and the size of the batches between operators when sources are fast).
    ``checkpoints`` (with ``checkpoint_period``) checkpoints the whole job as one
    region; a graph that declares consistent regions gives each its store in
    ``region_checkpoints`` (``checkpoints`` serves a graph with a single region).
    ``gc_threshold``: while the job runs, the interpreter's young garbage collections come at
    most every that many container allocations (CPython's default, 700, made a stateless chain
    ~10 % slower: every young collection walks the batches in flight; docs/decisions.md);
    None leaves the interpreter's setting alone.
    """

    def __init__(self, graph: Graph | FrozenGraph, *, clock: Clock | None = None,
                 batch_size: int = DEFAULT_BATCH, name: str | None = None,
                 checkpoints: CheckpointSink | None = None, checkpoint_period: float | None = None,
                 region_checkpoints: Mapping[str, CheckpointSink] | None = None,
                 restore: bool = True, logger: Any = None,
                 gc_threshold: int | None = JOB_GC_THRESHOLD) -> None:
        self.graph = graph.freeze() if isinstance(graph, Graph) else graph
        self.clock: Clock = clock if clock is not None else RealClock()
        self.name = name or self.graph.name
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size={batch_size!r}: expected an int >= 1")
        self.batch_size = batch_size
        self.gc_threshold = check_threshold(gc_threshold)
        self.stopping = False
        event_region = event_time_region(self.graph)
        self.runners = {op.name: OperatorRunner(self, op, event_region) for op in self.graph.operators}
        self.metrics = JobMetrics(self.name, {n: r.metrics for n, r in self.runners.items()})
        self.parallel = self._make_parallel()
        self._hosted = {n for host in self.parallel for n in host.members}
        # Live tasks only: a done task is dropped at once, since a cancelled one keeps its
        # CancelledError, whose traceback keeps the frames (and a source's locals) alive.
        self._tasks: set[asyncio.Task[None]] = set()
        self._tg: asyncio.TaskGroup | None = None
        self._aborted = False
        self._failures: list[BaseException] = []
        self.checkpoints = checkpoints
        self.restore_enabled = restore
        self._log = logger
        if checkpoint_period is not None:
            if checkpoints is None:
                raise ValueError("checkpoint_period needs checkpoints=")
            if not math.isfinite(checkpoint_period) or checkpoint_period < MIN_CHECKPOINT_PERIOD:
                raise ValueError(f"checkpoint_period={checkpoint_period!r}: expected a finite number "
                                 f"of seconds >= {MIN_CHECKPOINT_PERIOD}")
        self.regions = self._make_regions(checkpoints, checkpoint_period, dict(region_checkpoints or {}))
        self.metrics.regions = {r.name: r.metrics for r in self.regions}
        self._started = False  # restored and running: a stop from now on takes a checkpoint
        # A stop with checkpoints suspends the job: every region takes a checkpoint, and once
        # all committed every task ends where it is, without final punctuation.
        self._suspending: set[str] = set()
        self.suspended = False

    def _make_parallel(self) -> list[ParallelHost]:
        """The hosts of the graph's parallel regions (their operators run in worker processes)."""
        if not self.graph.parallel:
            return []
        from ._parallel import ParallelHost

        return [ParallelHost(self, spec) for spec in self.graph.parallel]

    def _make_regions(self, checkpoints: CheckpointSink | None, period: float | None,
                      stores: dict[str, CheckpointSink]) -> list[Region]:
        declared = self.graph.regions
        if not declared:
            if stores:
                raise ValueError(f"region_checkpoints for {', '.join(map(repr, stores))}: the graph "
                                 "declares no consistent region")
            if checkpoints is None:
                return []
            region = Region(self, JOB_REGION, None, list(self.runners.values()), checkpoints)
            region.period = period
            region.heals = all(getattr(r.op, "replayable", False)
                               for r in self.runners.values() if r.odef.kind == "source")
            return [region]
        if period is not None:
            raise ValueError("checkpoint_period: the graph's consistent regions have their own period")
        if checkpoints is not None and len(declared) == 1 and declared[0].name not in stores:
            stores[declared[0].name] = checkpoints
        elif checkpoints is not None:
            raise ValueError("checkpoints=: the graph declares several consistent regions; give "
                             "each its store in region_checkpoints")
        missing = [r.name for r in declared if r.name not in stores]
        if missing:
            raise ValueError(f"consistent region(s) {', '.join(map(repr, missing))} need a "
                             "checkpoint store (riverbed run --checkpoint-dir DIR)")
        return [Region(self, spec.name, spec, [self.runners[n] for n in spec.members], stores[spec.name])
                for spec in declared]

    # ------------------------------------------------------------ aggregate views

    @property
    def last_checkpoint(self) -> int:
        """The newest committed checkpoint id (the highest over the regions), 0 if none."""
        return max((r.last_committed or 0 for r in self.regions), default=0)

    @property
    def restored_from(self) -> int | None:
        ids = [r.restored_from for r in self.regions if r.restored_from is not None]
        return max(ids) if ids else None

    @property
    def suspend_at(self) -> int | None:
        """The checkpoint a stop waits for (the first region's), None when not suspending."""
        return next((r.suspend_at for r in self.regions if r.suspend_at is not None), None)

    def channel_metrics(self) -> list[ChannelMetrics]:
        """Each channel of the graph's parallel regions (its worker process, tuples, queue)."""
        return [m for host in self.parallel for m in host.metrics()]

    def snapshot_metrics(self) -> JobMetrics:
        """The metrics, with queue sizes and region states refreshed."""
        for r in self.runners.values():
            r.metrics.queue_size = len(r.inbox)
            r.metrics.queue_high_water = r.inbox.high_water
            r.metrics.backpressure_waits = r.inbox.puts_waited
        for region in self.regions:
            region.metrics.state = region.state.value
        return self.metrics

    # ---------------------------------------------------------------------- run

    async def run(self) -> JobMetrics:
        """Run to completion; raise `JobError` naming every operator that failed."""
        with collection_threshold(self.gc_threshold):
            return await self._run()

    async def _run(self) -> JobMetrics:
        everyone = list(self.runners.values())
        runners = [r for r in everyone if r.name not in self._hosted]  # the rest run in workers
        try:
            for r in everyone:
                r.wire(self.runners)
            for host in self.parallel:
                host.wire()
            for r in runners:
                r.core.setup()
            for r in runners:
                r.core.ports_ready()
            started = time.monotonic()
            for region in self.regions:
                region.restore_latest()
            if self.regions and self._log is not None:
                self._log.info("restored", checkpoint=self.restored_from,
                               restore_ms=round((time.monotonic() - started) * 1000, 1))
        except (OperatorError, RestoreRefused) as exc:
            raise JobError(self.name, [exc]) from exc
        self._started = True
        if self.stopping and self.regions:
            # Stopped before it ran: the stored checkpoints already are where a restart goes on.
            self.suspended = True
            for r in runners:
                r.core.shut_down(report=False)
            return self.snapshot_metrics()
        try:
            async with asyncio.TaskGroup() as tg:
                self._tg = tg
                for r in runners:
                    r.start()
                for host in self.parallel:
                    host.start()
                for region in self.regions:
                    if region.period is not None or region.spec is not None:
                        self.spawn(region.periodic(), f"{self.name}/{region.name or 'job'}/checkpoints")
        except* Exception as group:  # (after failures a drain had: they come first)
            raise JobError(self.name, self._failures + _flatten(group)) from None
        finally:
            self._tg = None
            for host in self.parallel:
                host.close()  # no worker process outlives the job, whatever ended it
        if self._failures:
            raise JobError(self.name, self._failures)
        if self._aborted:
            raise JobError(self.name, [RuntimeError("aborted: tasks were cancelled, nothing drained")])
        if not self.suspended:
            self._tell_loop_drops(runners)
        return self.snapshot_metrics()

    def _tell_loop_drops(self, runners: list[OperatorRunner]) -> None:
        """Say what was dropped going round a loop: what came back after the head's other
        inputs ended is not waited for (README; SPL's control ports), and nothing else showed
        it (a review: 45 tuples of a loop gone without a line)."""
        if self._log is None:
            return
        for r in runners:
            if r.inbox.feedback:
                left = r.inbox.feedback_left()
                if left:
                    self._log.warning("loop tuples dropped", operator=r.name, tuples=left,
                                      hint="what comes back round a loop after the operator's "
                                           "other inputs ended is not waited for")

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """A task of the job (in its TaskGroup): an operator's, a region's."""
        assert self._tg is not None, "the job is not running"
        task = self._tg.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def fail_job(self, exc: BaseException) -> None:
        """Something no region can heal: the job ends with ``exc`` (`run` raises `JobError`)."""
        if not self._failures:
            self._failures.append(exc)
        for task in list(self._tasks):
            task.cancel()

    @property
    def drains_failures(self) -> bool:
        """Without checkpoints an operator's failure drains the job instead of cancelling it:
        no restart could replay what is in flight, so what was submitted before the failure
        reaches the sinks. With them, the job ends where it is, and a restart goes on from the
        last checkpoint (output after it would be repeated)."""
        return not self.regions

    @property
    def failures(self) -> list[BaseException]:
        """What failed so far (a job that drains after a failure has one at least)."""
        return list(self._failures)

    def operator_failed(self, exc: OperatorError | SchemaViolation, operator: str) -> None:
        """An operator failed and the job drains (`drains_failures`): the sources stop, final
        punctuation drains the graph around the failed operator, and `run` raises `JobError`
        naming it (and any other that fails meanwhile)."""
        first = not self._failures
        self._failures.append(exc)
        if self._log is not None:
            self._log.error("operator failed", operator=operator, error=str(exc),
                            hint="the sources stop and what was submitted before the failure "
                                 "drains to the sinks; the job then fails" if first else None)
        self.stop()

    def log_region(self, event: str, *, level: str = "warning", **fields: Any) -> None:
        if self._log is not None:
            getattr(self._log, level)(event, **fields)

    # ---------------------------------------------------------- checkpoints

    def region_of(self, runner: OperatorRunner) -> Region | None:
        return runner.region

    def trigger_checkpoint(self) -> int | None:
        """Start a checkpoint of every region now; the id of the first started, or None when
        one is still under way, the job stops, or there is no store."""
        if self.stopping:
            return None
        started = [r.start_checkpoint() for r in self.regions]
        return next((i for i in started if i is not None), None)

    def report_checkpoint(self, runner: OperatorRunner, checkpoint_id: int, state: Any) -> None:
        """An operator's state for checkpoint ``checkpoint_id`` of its region."""
        region = runner.region
        if region is not None:
            region.report(checkpoint_id, runner.name, detached_state(state))

    def operator_finished(self, runner: OperatorRunner) -> None:
        """An operator ended; a checkpoint it will never see a barrier for takes its final state."""
        dropped = runner.core.timers_dropped
        if dropped:
            self.log_region("operator_timers_dropped", operator=runner.name, timers=dropped,
                            hint="its input ended with these call_at() timers pending, and they "
                                 "never fire; an operator that still has work due takes "
                                 "self.context.defer_final() and releases it from its last timer")
        region = runner.region
        if region is None:
            return
        runner.core.final_state = runner.core.checkpoint_state()
        region.operator_finished(runner)

    def region_suspended(self, region: Region) -> None:
        """A region's stop checkpoint committed; once every region's has, the job suspends."""
        self._suspending.discard(region.name)
        if not self._suspending:
            self._suspend()

    def _suspend(self) -> None:
        """The stop's checkpoints committed: end every task where it is. Nothing after their
        barriers reaches a sink's committed output, and no final punctuation is sent, so no
        window is flushed: a restart continues from those checkpoints as if never stopped."""
        self.suspended = True
        for task in list(self._tasks):
            task.cancel()

    def host_for(self, runner: OperatorRunner) -> _RunnerHost:
        """What an operator's core asks of the job and its runner (`CoreHost`)."""
        return _RunnerHost(self, runner)

    def stop(self) -> None:
        """Ask the sources to end.

        Without checkpoints, final punctuation then drains the graph: windows
        flush, sinks write everything. With checkpoints the stop suspends the
        job instead: every region takes a checkpoint (or finishes the one in
        flight), the sources end right after their barriers, and once they all
        committed every operator ends where it is, without final punctuation,
        so no partial window is flushed. A restart continues from there with
        exactly the output of a run never stopped, and transactional sinks never
        show output that a restart would take back. No other checkpoint starts
        after a stop: one built from ended operators would restore sinks that
        never accept input again.
        """
        if self.stopping:
            return
        if self._started:
            for region in self.regions:
                if region.finished:
                    continue
                pending = region.pending
                checkpoint_id = pending.id if pending is not None else region.start_checkpoint()
                if checkpoint_id is not None:
                    region.suspend_at = checkpoint_id
                    self._suspending.add(region.name)
        self.stopping = True
        for r in self.runners.values():
            r.request_stop()
        for host in self.parallel:
            host.request_stop()  # replicated sources, in worker processes

    def abort(self) -> None:
        """Cancel every task now: nothing is drained; `run` raises `JobError`."""
        self._aborted = True
        for task in list(self._tasks):
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
        self._job.report_checkpoint(self._runner, checkpoint_id, state)

    def request_checkpoint(self) -> int | None:
        region = self._runner.region
        if region is None or self._job.stopping:
            return None
        return region.start_checkpoint()

    async def make_consistent(self, core: OperatorCore) -> bool:
        region = self._runner.region
        if region is None:
            raise RuntimeError(f"operator {core.name!r} is in no consistent region: make_consistent "
                               "needs one (Graph.consistent_region, trigger='operator_driven')")
        pending = region.pending
        while pending is not None and self._runner.name in pending.states:
            # Its part of the checkpoint under way (another operator asked for it) was taken
            # before what it submitted since: True for that one would acknowledge what no
            # checkpoint holds. It waits for that one to end, then asks for its own.
            if not await region.request_consistent() or self._job.stopping:
                return False  # the region was reset instead, or that was the stop's checkpoint
            pending = region.pending
        committed = region.request_consistent()
        await self._runner.flush()  # the source's barrier goes out now, after what it submitted
        return await committed

    def operator_finished(self, core: OperatorCore) -> None:
        self._job.operator_finished(self._runner)

    def wake(self, core: OperatorCore) -> None:
        self._runner.wake()

    async def flush(self, core: OperatorCore) -> None:
        await self._runner.flush()

    async def sleep_until(self, core: OperatorCore, when: int) -> None:
        await self._runner.sleep_until(when)


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
              checkpoint_period: float | None = None,
              region_checkpoints: Mapping[str, CheckpointSink] | None = None,
              gc_threshold: int | None = JOB_GC_THRESHOLD) -> JobMetrics:
    """Run a graph to completion from synchronous code (a `VirtualClock` runs on virtual time)."""
    job = Job(graph, clock=clock, batch_size=batch_size, checkpoints=checkpoints,
              checkpoint_period=checkpoint_period, region_checkpoints=region_checkpoints,
              gc_threshold=gc_threshold)
    if isinstance(job.clock, VirtualClock):
        return run_virtual(job.run(), job.clock)
    return asyncio.run(job.run())
