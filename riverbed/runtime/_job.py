"""A job: one frozen graph running on asyncio, one task per operator inside one TaskGroup.

`Job.run` sets every operator up, tells them all ports are ready, then runs
them until final punctuation has drained the graph (every source ended and
every operator forwarded final) or an operator failed. `Job.stop` asks the
sources to end, which drains the graph the same way; `Job.abort` cancels at
once.
"""

from __future__ import annotations

import asyncio

from ..graph import FrozenGraph, Graph, event_time_region
from ._clock import Clock, RealClock, VirtualClock, run_virtual
from ._errors import JobError, OperatorError
from ._metrics import JobMetrics
from ._runner import OperatorRunner

__all__ = ["Job", "run_graph"]

DEFAULT_BATCH = 1000


class Job:
    """Runs a graph. ``clock`` defaults to the wall clock; pass a `VirtualClock` for tests.

    ``batch_size`` is how many tuples a source submits before handing them on
    (and the size of the batches between operators when sources are fast).
    """

    def __init__(self, graph: Graph | FrozenGraph, *, clock: Clock | None = None,
                 batch_size: int = DEFAULT_BATCH, name: str | None = None) -> None:
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
                r.setup()
            for r in runners:
                r._guard(r.op.on_ports_ready, None)
        except OperatorError as exc:
            raise JobError(self.name, [exc]) from exc
        try:
            async with asyncio.TaskGroup() as tg:
                for r in runners:
                    kind = "out" if r.odef.kind == "source" else "in"
                    self._tasks.append(tg.create_task(r.run(), name=f"{self.name}/{r.name}/{kind}"))
        except* Exception as group:
            raise JobError(self.name, _flatten(group)) from None
        return self.snapshot_metrics()

    def stop(self) -> None:
        """Ask the sources to end; final punctuation then drains the graph."""
        self.stopping = True
        for r in self.runners.values():
            r.request_stop()

    def abort(self) -> None:
        """Cancel every task now: nothing is drained."""
        for task in self._tasks:
            task.cancel()


def _flatten(group: BaseExceptionGroup[Exception]) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            out.extend(_flatten(exc))
        else:
            out.append(exc)
    return out


def run_graph(graph: Graph | FrozenGraph, *, clock: Clock | None = None,
              batch_size: int = DEFAULT_BATCH) -> JobMetrics:
    """Run a graph to completion from synchronous code (a `VirtualClock` runs on virtual time)."""
    job = Job(graph, clock=clock, batch_size=batch_size)
    if isinstance(job.clock, VirtualClock):
        return run_virtual(job.run(), job.clock)
    return asyncio.run(job.run())
