"""`riverbed trace --host runtime`: replay a trace case through a real one-operator job.

The case's steps become a source on the virtual clock: tuples and marks are
submitted through the runtime's ports and queues, ``at`` steps are sleeps on
the clock (so the operator's window timers fire through the runtime's timer
path), watermarks flow as the source's manual watermarks. The operator is a
recorder whose windowed input port carries the case's window. The source
waits for the operator to go idle after each step, so every event can be
attributed to the step that caused it.

Checkpoint, reset, restart and evict_partition steps are what the operator
itself would do in SPL (``StreamWindow.evictPartition``; the runtime's
drain/checkpoint/reset of a region): the host calls them on the operator's
window while the operator is idle.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

from ..graph import Graph, Operator, Source
from ..trace import TraceError, _event_seconds_to_ns, _Replay, _seconds_to_ns, _tuple_of, case_window
from ..windows import EVENT_TIME_MAX, StreamWindowEvent, TimeIntervalSpec, WindowError
from ._clock import VirtualClock, run_virtual
from ._job import Job
from ._runner import OperatorRunner

__all__ = ["run_case_in_runtime"]

_EVENT_TIME = "__event_time"


class _Recorder(Operator):
    def __init__(self, replay: _Replay) -> None:
        self.replay = replay

    def on_window_event(self, event: StreamWindowEvent[Any], port: int) -> None:
        self.replay.on_event(event)


class _Steps(Source):
    """Plays the case's steps, waiting for the recorder to be idle after each."""

    def __init__(self, case: Mapping[str, Any], replay: _Replay) -> None:
        self.case = case
        self.replay = replay
        self.recorder: OperatorRunner | None = None
        self.checkpoints: dict[str, Any] = {}

    async def _idle(self) -> None:
        runner = self.recorder
        assert runner is not None
        await self.context.flush()
        while not runner.inbox.idle and not runner.finished:
            await asyncio.sleep(0)

    def _direct(self, action: Any) -> Any:
        """Act on the recorder's window as the operator would, while it is idle."""
        runner = self.recorder
        assert runner is not None
        window = runner.core.windows[0]
        assert window is not None
        window.advance_time(self.context.now())
        result = action(window)
        runner._arm()
        return result

    async def run(self) -> None:
        replay, name = self.replay, self.case.get("name", "?")
        schema = self.case.get("schema") or {}
        await self._idle()  # the recorder's port became ready (step -1)
        for index, step in enumerate(self.case.get("steps", [])):
            replay.step = index
            where = f"case {name}, step {index}"
            if not isinstance(step, dict):
                raise TraceError(f"{where}: a step must be an object")
            try:
                if await self._apply(step, schema, where):
                    return  # a final mark: the runtime sends it when the source ends
            except WindowError as exc:
                raise TraceError(f"{where}: {exc}") from None
            await self._idle()
        replay.recording = False  # the final mark the runtime sends at the end is not in the case

    async def _apply(self, step: Mapping[str, Any], schema: Mapping[str, str], where: str) -> bool:
        replay, ctx = self.replay, self.context
        if replay.stopped and "reset" not in step:
            if "at" in step:
                await ctx.sleep_until(_seconds_to_ns(step["at"], where))
                return False
            raise TraceError(f"{where}: the PE is stopped by a restart step; only 'at' and 'reset' "
                             "may follow")
        if "tuple" in step:
            replay.cause = "tuple"
            tup = _tuple_of(step, schema, where)
            if "event_time" in step:
                tup[_EVENT_TIME] = _event_seconds_to_ns(step["event_time"], f"{where}: event_time")
            self.submit(tup)
        elif "at" in step:
            replay.cause = "timer"
            await ctx.sleep_until(_seconds_to_ns(step["at"], where))
        elif "watermark" in step:
            replay.cause = "watermark"
            value = step["watermark"]
            ctx.set_watermark(EVENT_TIME_MAX if value == "max"
                              else _event_seconds_to_ns(value, f"{where}: watermark"))
        elif "punct" in step:
            replay.cause = "punct"
            if step["punct"] == "final":
                return True
            if step["punct"] != "window":
                raise TraceError(f"{where}: punct must be 'window' or 'final', got {step['punct']!r}")
            self.submit_punct()
        elif "evict_partition" in step:
            replay.cause = "evict_partition"
            self._direct(lambda w: w.evict_partition(step["evict_partition"]))
        elif "checkpoint" in step:
            snap = self._direct(lambda w: w.checkpoint())
            self.checkpoints[str(step["checkpoint"])] = json.loads(json.dumps(snap))
        elif "restart" in step:
            replay.stopped = True
            replay.recording = False
        elif "reset" in step:
            self._reset(step["reset"], where)
        else:
            raise TraceError(f"{where}: unknown step {json.dumps(step)}")
        return False

    def _reset(self, name: Any, where: str) -> None:
        replay, runner = self.replay, self.recorder
        assert runner is not None
        if name is not None and str(name) not in self.checkpoints:
            raise TraceError(f"{where}: no checkpoint named {name!r} was taken before")
        if replay.stopped:
            # A new PE instance: a fresh window, activated now; what it raises on its own
            # before the reset is not expected.
            replay.stopped = False
            fresh = runner.core.make_window(0)
            assert fresh is not None
            fresh.activate(self.context.now())
            runner.core.replace_window(0, fresh)
        replay.recording = True
        replay.cause = "reset"
        state = None if name is None else self.checkpoints[str(name)]
        self._direct(lambda w: w.reset(state))


def run_case_in_runtime(case: Mapping[str, Any], flavor: str = "java") -> list[dict[str, Any]]:
    """Replay one case through a job on the virtual clock; return its events as JSON-ready dicts."""
    name = case.get("name", "?")
    spec, partition_by = case_window(case)
    out: list[dict[str, Any]] = []
    replay = _Replay(None, out, "order" in case, lambda: None)  # type: ignore[arg-type,return-value]
    steps = _Steps(case, replay)
    g = Graph("trace")
    timed = isinstance(spec, TimeIntervalSpec)
    stream = g.source("steps", steps, event_time=_EVENT_TIME if timed else None, minimum_gap=0.0,
                      manual_watermarks=True)
    port = stream.window(spec, partition_by=partition_by, flavor=flavor,
                         attribute_types=case.get("schema") or None)
    g.sink("window", _Recorder(replay), [port])
    job = Job(g, clock=VirtualClock(), batch_size=1)
    steps.recorder = job.runners["window"]
    try:
        run_virtual(job.run(), job.clock)  # type: ignore[arg-type]
    except Exception as exc:
        causes = getattr(exc, "errors", [exc])
        for cause in causes:
            inner = getattr(cause, "cause", cause)
            if isinstance(inner, TraceError):
                raise inner from None
        raise TraceError(f"case {name}: {exc}") from None
    return out

