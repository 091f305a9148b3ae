"""Helpers for testing operators and graphs: list sources and sinks, and a one-call harness.

Everything runs on a `VirtualClock` in a real job, so time windows behave as in
production and tests never sleep::

    from riverbed.testing import run_operator, at
    out = run_operator(MyAverage(), [{"v": 1}, {"v": 2}, at(5.0), {"v": 3}],
                       window="tumbling, time(2)")
    assert out.tuples == [...]
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .graph import Graph, Operator, Punct, Schema, Source, Watermark
from .runtime import Job, JobError, JobMetrics, VirtualClock, run_graph, run_virtual
from .windows import StreamWindowEvent, TimeIntervalSpec, WindowSpec

__all__ = ["At", "ListSink", "ListSource", "Output", "at", "capture_events", "run_operator",
           "run_until_crash"]

_NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class At:
    """In a `ListSource`'s items: wait until this clock time (ns) before the next item."""

    time_ns: int


def at(seconds: float) -> At:
    """`At` from seconds."""
    return At(round(seconds * _NS))


class ListSource(Source):
    """Emits its items in order: tuples, `Punct.WINDOW`, `At(t)` pauses on the clock, and with
    ``event_time`` set on the graph source, `Watermark(v)` for manual watermarks."""

    def __init__(self, items: Iterable[Any]) -> None:
        self.items = list(items)

    async def run(self) -> None:
        ctx: Any = self.context
        for item in self.items:
            if isinstance(item, At):
                await ctx.sleep_until(item.time_ns)
            elif isinstance(item, Watermark):
                ctx.set_watermark(item.value)
            elif item is Punct.WINDOW:
                self.submit_punct()
            else:
                self.submit(item)
        await ctx.flush()


class ListSink(Operator):
    """Keeps every tuple and punctuation that reaches it, with the clock time of arrival."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self.times: list[int] = []

    def on_tuple(self, tup: Any, port: int) -> None:
        self.items.append(tup)
        self.times.append(self.context.now())

    def on_punct(self, punct: Punct, port: int) -> None:
        self.items.append(punct)
        self.times.append(self.context.now())

    @property
    def tuples(self) -> list[Any]:
        return [x for x in self.items if not isinstance(x, Punct)]


@dataclass
class Output:
    """What `run_operator` saw: items per output port, and the job's metrics."""

    ports: list[list[Any]]
    metrics: JobMetrics
    events: list[Any] = field(default_factory=list)

    @property
    def items(self) -> list[Any]:
        return self.ports[0]

    @property
    def tuples(self) -> list[Any]:
        return [x for x in self.ports[0] if not isinstance(x, Punct)]


def run_operator(operator: Operator, inputs: Iterable[Any] | Mapping[int, Iterable[Any]], *,
                 window: str | WindowSpec | TimeIntervalSpec | None = None,
                 partition_by: Any = None, flavor: str = "java", outputs: int = 1,
                 schema: Schema | None = None, event_time: str | None = None) -> Output:
    """Run one operator in a real job: each input port fed by a `ListSource`, each output
    port drained into a `ListSink`. ``inputs`` is the items of port 0, or a mapping
    port -> items. ``window`` (with ``partition_by``/``flavor``) windows port 0."""
    per_port = dict(inputs) if isinstance(inputs, Mapping) else {0: inputs}
    g = Graph("harness")
    ports: list[Any] = []
    for port in range(max(per_port) + 1):
        stream = g.source(f"in{port}", ListSource(per_port.get(port, [])), schema=schema,
                          event_time=event_time, minimum_gap=0.0,
                          manual_watermarks=event_time is not None)
        if port == 0 and window is not None:
            ports.append(stream.window(window, partition_by=partition_by, flavor=flavor))
        else:
            ports.append(stream)
    streams = g.operator("op", operator, ports, [None] * outputs)
    streams = streams if isinstance(streams, tuple) else (streams,)
    sinks = [ListSink() for _ in streams]
    for i, (stream, sink) in enumerate(zip(streams, sinks, strict=True)):
        g.sink(f"out{i}", sink, [stream])
    metrics = run_graph(g, clock=VirtualClock())
    return Output([s.items for s in sinks], metrics)


def run_until_crash(job: Job, crash_at: int | None,
                    actions: Sequence[tuple[float, Callable[[Job], None]]] = ()) -> bool:
    """Run ``job`` on its `VirtualClock`, doing ``actions`` at their times (seconds), and abort
    it at clock time ``crash_at`` (ns; None: let it end): a crash at a chosen instant, for
    checkpoint tests. True if the job ran to its end before the crash, False if the crash
    ended it; a job that failed on its own raises its `JobError` (it used to return False,
    which a test took for the crash it asked for)."""

    async def main() -> bool:
        task = asyncio.ensure_future(job.run())
        aborted = False
        for when, act in actions:
            await job.clock.sleep_until(round(when * _NS))
            act(job)
        if crash_at is not None:
            await job.clock.sleep_until(crash_at)
            if not task.done():
                job.abort()
                aborted = True
        try:
            await task
        except (JobError, asyncio.CancelledError):
            if aborted:
                return False
            raise
        return True

    return run_virtual(main(), job.clock)  # type: ignore[arg-type]


def capture_events(into: list[tuple[str, Any, list[Any]]]) -> Any:
    """A window listener appending ``(type name, partition, tuples copy)`` to ``into``."""

    def listener(event: StreamWindowEvent[Any]) -> None:
        into.append((event.type.name, event.partition, list(event.tuples)))

    return listener
