"""`riverbed trace --host runtime` through a parallel region: a partitioned case, ``width`` channels.

As `replay_in_runtime`, a source plays the case's steps on the virtual clock, but the window
sits in a parallel region split by the case's partition attribute: its operator runs in worker
processes and sends each window event, as a record, out of the region to a sink in the job's
process, which logs it under the step being played. After each step the source waits until
nothing is in flight (the channels answered, the sink is idle), so events are attributed to
the step that caused them, stamped with the job's clock.

Steps that act on the window from outside (checkpoint, reset, restart, evict_partition) cannot
reach into a worker process: a case with any of them is refused (`unsupported`).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from ..conformance import (
    AtStep,
    Case,
    CaseError,
    Event,
    EventLog,
    PunctStep,
    Replay,
    TupleStep,
    WatermarkStep,
)
from ..graph import FrozenGraph, Graph, GraphValidationError, Operator
from ..windows import StreamWindowEvent
from ._clock import VirtualClock
from ._job import Job
from ._trace_host import _EVENT_TIME, _FeedsSteps, _Steps

__all__ = ["replay_in_parallel", "unsupported"]

_PLAYABLE = (TupleStep, AtStep, PunctStep, WatermarkStep)


def unsupported(case: Case, flavor: str = "java", width: int = 2) -> str | None:
    """Why ``case`` cannot be replayed through a parallel region, or None: its window is not
    partitioned, a step acts on the window from outside, or the graph refuses the window in a
    region this wide (its events depend on other partitions: `Graph.parallel`)."""
    if case.partition_by is None:
        return "its window is not partitioned (a region splits partitioned windows only)"
    for step in case.steps:
        if not isinstance(step, _PLAYABLE):
            return f"step {type(step).__name__} acts on the window from outside the worker"
    try:
        _graph(case, flavor, width, _Steps(None), _Log(None))
    except GraphValidationError as exc:
        return "; ".join(e.message for e in exc.errors)
    return None


def _graph(case: Case, flavor: str, width: int, steps: _Steps, log: _Log) -> FrozenGraph:
    g = Graph("trace")
    stream = g.source("steps", steps, event_time=_EVENT_TIME if case.time_interval else None,
                      minimum_gap=0.0, manual_watermarks=True)
    port = stream.window(case.spec, partition_by=case.partition_by, flavor=flavor,
                         attribute_types=case.schema or None)
    with g.parallel(width, partition_by=case.partition_by):
        events = g.operator("window", _Recorder(), [port])
    g.sink("log", log, [events])
    return g.freeze()


class _Recorder(Operator):
    """In the region: every window event, as the record the trace reports, sent out."""

    def on_window_event(self, event: StreamWindowEvent[Any], port: int) -> None:
        self.submit({"event": Event.of(event, -1, self.context.now())})


class _Log(Operator):
    def __init__(self, host: ParallelTraceHost | None) -> None:
        self.host = host

    def on_tuple(self, tup: Any, port: int) -> None:
        assert self.host is not None
        log = self.host.log
        if not log.muted:
            log.events.append(replace(tup["event"], step=log.step))


class ParallelTraceHost(_FeedsSteps):
    """A `Host` running the case's window in a parallel region of ``width`` channels."""

    def __init__(self, case: Case, flavor: str = "java", width: int = 2) -> None:
        why = unsupported(case, flavor, width)
        if why is not None:
            raise CaseError(f"case {case.name}: cannot replay through a parallel region of width "
                            f"{width}: {why}")
        self.case = case
        self.log = EventLog()
        self.source = _Steps(self)
        self.job = Job(_graph(case, flavor, width, self.source, _Log(self)), clock=VirtualClock(),
                       batch_size=1)
        self._until: int | None = None

    async def settle(self) -> None:
        ctx = self.source.context
        if self._until is not None:
            until, self._until = self._until, None
            await ctx.sleep_until(until)
        await ctx.flush()
        (host,) = self.job.parallel
        sink = self.job.runners["log"]
        while not (host.idle and sink.inbox.idle) and not sink.finished:
            await asyncio.sleep(0)

    # -- Host --------------------------------------------------------------------------------

    def start(self, log: EventLog) -> None:
        pass

    def stop(self) -> None:
        pass

    def _refuse(self, *_: Any) -> Any:
        raise CaseError(f"case {self.case.name}: a step acts on the window from outside the worker")

    evict_partition = checkpoint = new_instance = reset = _refuse


def replay_in_parallel(case: Case, flavor: str = "java", width: int = 2) -> list[Event]:
    """Replay a partitioned ``case`` through a parallel region of ``width`` channels; its events."""
    host = ParallelTraceHost(case, flavor, width)
    replay = Replay(case, host)
    host.run(replay)
    return replay.events
