"""`riverbed trace --host runtime`: a case replayed through a real one-operator job.

The case's steps are played by a source on the virtual clock: tuples and
marks are submitted through the runtime's ports and queues, ``at`` steps
are sleeps on the clock (so the window's timers fire through the runtime's
timer path), watermarks are the source's manual watermarks. The operator is
a recorder whose windowed input port carries the case's window. After each
step the source waits until the recorder is idle, so every event is
attributed to the step that caused it, and stamped with the job's clock.

Checkpoint, reset, restart and evict_partition steps are what the operator
itself would do in SPL (``StreamWindow.evictPartition``; the runtime's
drain/checkpoint/reset of a region): the host calls them on the operator's
window while the operator is idle. This is the one place that reaches into
the operator runner (its window, its timer, its idleness).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Hashable, Iterator
from typing import Any, Literal, Protocol

from ..conformance import Case, CaseError, Event, EventLog, PunctStep, Replay, Step, TupleStep
from ..graph import Graph, Operator, Source
from ..windows import StreamWindowEvent
from ._clock import VirtualClock, run_virtual
from ._job import Job
from ._runner import OperatorRunner

__all__ = ["RuntimeHost", "replay_in_runtime"]

_EVENT_TIME = "__event_time"


class _Recorder(Operator):
    def __init__(self, host: RuntimeHost) -> None:
        self.host = host

    def on_window_event(self, event: StreamWindowEvent[Any], port: int) -> None:
        self.host.log.record(event, self.context.now())


class _Settles(Protocol):
    async def settle(self) -> None: ...


class _Steps(Source):
    """Applies the case's steps, waiting for the host to be idle after each (the runtime's and
    the parallel region's trace hosts; ``host`` None only for a graph that is built, not run)."""

    def __init__(self, host: _Settles | None) -> None:
        self.host = host
        self.steps: Iterator[Step | None] = iter(())

    async def run(self) -> None:
        assert self.host is not None
        for step in self.steps:
            await self.host.settle()
            if step == PunctStep("final"):
                return  # the runtime sends the final mark when the source ends


class _FeedsSteps:
    """The `Host` steps that go through the job's source, the same for every job-hosted replay:
    a tuple (with its event time), time advancing (at the next settle), marks, watermarks."""

    source: _Steps
    _until: int | None
    job: Job
    case: Case
    log: EventLog

    def run(self, replay: Replay) -> None:
        """Run the job; its source applies ``replay``'s steps. Errors name the case (and step)."""
        self.log = replay.log  # the port becomes ready as the job starts, before the first step
        self.source.steps = replay.run()
        try:
            run_virtual(self.job.run(), self.job.clock)  # type: ignore[arg-type]
        except Exception as exc:
            for cause in getattr(exc, "errors", [exc]):
                inner = getattr(cause, "cause", cause)
                if isinstance(inner, CaseError):
                    raise inner from None
            step = self.log.step
            raise CaseError(f"case {self.case.name}{'' if step < 0 else f', step {step}'}: {exc}") from None

    def insert(self, step: TupleStep) -> None:
        tup = step.tuple()
        if step.event_time is not None:
            tup[_EVENT_TIME] = step.event_time
        self.source.submit(tup)

    def advance(self, now: int) -> None:
        self._until = now

    def punctuate(self, kind: Literal["window", "final"]) -> None:
        if kind == "window":
            self.source.submit_punct()

    def watermark(self, value: int) -> None:
        self.source.context.set_watermark(value)


class RuntimeHost(_FeedsSteps):
    """A `Host` running the case's window in a job; `run` drives a `Replay` through it."""

    def __init__(self, case: Case, flavor: str = "java") -> None:
        self.case = case
        self.log = EventLog()
        self.source = _Steps(self)
        g = Graph("trace")
        stream = g.source("steps", self.source, event_time=_EVENT_TIME if case.time_interval else None,
                          minimum_gap=0.0, manual_watermarks=True)
        port = stream.window(case.spec, partition_by=case.partition_by, flavor=flavor,
                             attribute_types=case.schema or None)
        g.sink("window", _Recorder(self), [port])
        self.job = Job(g, clock=VirtualClock(), batch_size=1)
        self.recorder: OperatorRunner = self.job.runners["window"]
        self._until: int | None = None

    async def settle(self) -> None:
        """Let the step take effect: the clock reach its time, the recorder handle all it got."""
        ctx, runner = self.source.context, self.recorder
        if self._until is not None:
            until, self._until = self._until, None
            await ctx.sleep_until(until)
        await ctx.flush()
        while not runner.inbox.idle and not runner.finished:
            await asyncio.sleep(0)

    def _direct(self, action: Callable[[Any], Any]) -> Any:
        """Act on the recorder's window as the operator would, while it is idle."""
        runner = self.recorder
        window = runner.core.windows[0]
        assert window is not None
        window.advance_time(self.source.context.now())
        result = action(window)
        runner._arm()
        return result

    # -- Host --------------------------------------------------------------------------------

    def start(self, log: EventLog) -> None:
        pass  # the job's start made the port ready (`run`); the first settle() lets its events in

    def evict_partition(self, partition: Hashable) -> None:
        self._direct(lambda w: w.evict_partition(partition))

    def checkpoint(self) -> object:
        return json.loads(json.dumps(self._direct(lambda w: w.checkpoint())))

    def stop(self) -> None:
        pass  # the window keeps its timers; the interpreter no longer counts its events

    def new_instance(self) -> None:
        core = self.recorder.core
        fresh = core.make_window(0)
        assert fresh is not None
        fresh.activate(self.source.context.now())
        core.replace_window(0, fresh)

    def reset(self, state: object | None) -> None:
        self._direct(lambda w: w.reset(state))


def replay_in_runtime(case: Case, flavor: str = "java") -> list[Event]:
    """Replay ``case`` through a job on the virtual clock; its events."""
    host = RuntimeHost(case, flavor)
    replay = Replay(case, host)
    host.run(replay)
    return replay.events
