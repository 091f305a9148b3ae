"""A live status view of a running job: one row per operator, refreshed every interval.

It reads `Job.snapshot_metrics()` on the job's own event loop, so it never
races the operators and costs them nothing between renders. Rates are
differences between two renders divided by the time between them; because
the metrics objects are updated in place, each render keeps a *copy* of what
it read (`copy_metrics`) to subtract next time.

The interval is presentation only: it is measured with the event loop's
clock, which is the monotonic wall clock in production and the virtual clock
under `run_virtual`, so the rates agree with the time the job itself sees.

On a terminal the view is a rich ``Live`` table redrawn in place. Anywhere
else (CI logs, a pipe, a file) it prints one plain line per operator per
interval, with no ANSI codes, so the output stays greppable. `render_plain`
makes those lines from two snapshots and is what tests call.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol, TextIO

from rich.console import Console
from rich.live import Live
from rich.table import Table

from ..core import JobMetrics, OperatorMetrics, RegionMetrics
from ..windows import EVENT_TIME_MAX

__all__ = ["MetricsSource", "StatusView", "channel_lines", "copy_metrics", "format_watermark",
           "render_plain"]

_TICKS_PER_SECOND = {"ns": 1_000_000_000, "us": 1_000_000, "ms": 1_000}
_COLUMNS = ("operator", "in", "in/s", "out", "out/s", "queue", "watermark", "late", "errors")


class MetricsSource(Protocol):
    """What the status view and the Prometheus exporter need from a job (a `Job` is one)."""

    def snapshot_metrics(self) -> JobMetrics: ...


def copy_metrics(metrics: JobMetrics) -> JobMetrics:
    """A deep copy of ``metrics`` that later updates of the job no longer change."""
    return JobMetrics(metrics.job, {
        name: replace(op, inputs=[replace(p) for p in op.inputs], outputs=[replace(p) for p in op.outputs])
        for name, op in metrics.operators.items()
    }, {name: replace(rm) for name, rm in metrics.regions.items()}, metrics.restarts)


def format_watermark(value: int | None, resolution: str = "ns") -> str:
    """A watermark in ticks of ``resolution`` as seconds with millisecond precision.

    ``-`` means no watermark yet; ``max`` is the final watermark sent just
    before final punctuation. The conversion is exact integer arithmetic,
    truncated towards zero (so epoch nanoseconds lose no digits to floats).
    """
    if value is None:
        return "-"
    if value == EVENT_TIME_MAX:
        return "max"
    per_second = _ticks_per_second(resolution)
    seconds, rest = divmod(abs(value), per_second)
    sign = "-" if value < 0 else ""
    return f"{sign}{seconds}.{rest * 1000 // per_second:03d}s"


@dataclass(frozen=True, slots=True)
class _Row:
    """One operator's cells, already formatted; shared by the plain lines and the rich table."""

    operator: str
    tuples_in: str
    rate_in: str
    tuples_out: str
    rate_out: str
    queue: str
    watermark: str
    late: str
    errors: str


def _rows(metrics: JobMetrics, previous: JobMetrics | None, elapsed: float, resolution: str) -> list[_Row]:
    rows = []
    for name, op in metrics.operators.items():
        before = previous.operators.get(name) if previous is not None else None
        tuples_in, tuples_out = _tuples_in(op), _tuples_out(op)
        in_before = _tuples_in(before) if before is not None else None
        out_before = _tuples_out(before) if before is not None else None
        has_in, has_out = bool(op.inputs), bool(op.outputs)
        rows.append(_Row(
            operator=name,
            tuples_in=str(tuples_in) if has_in else "-",
            rate_in=_rate(tuples_in, in_before, elapsed) if has_in else "-",
            tuples_out=str(tuples_out) if has_out else "-",
            rate_out=_rate(tuples_out, out_before, elapsed) if has_out else "-",
            queue=f"{op.queue_size}/{op.queue_capacity}",
            watermark=format_watermark(op.watermark, resolution),
            late=str(sum(p.tuples_dropped_late for p in op.inputs)),
            errors=str(sum(p.errors for p in op.inputs)),
        ))
    return rows


def render_plain(metrics: JobMetrics, previous: JobMetrics | None, elapsed: float, *,
                 resolution: str = "ns") -> list[str]:
    """One line per operator, in graph order, with no ANSI codes.

    ``previous`` is the snapshot of the last render (a `copy_metrics` copy)
    and ``elapsed`` the seconds since it; rates are ``-`` without a previous
    snapshot, when ``elapsed <= 0``, and for an operator that has no input
    (or output) ports at all, where "in" (or "out") means nothing. "in" sums
    ``tuples_processed`` over the input ports, "out" ``tuples_submitted`` over
    the output ports; "late" and "errors" sum the input ports. ``resolution``
    is the tick unit of the watermark.
    """
    lines = []
    for r in _rows(metrics, previous, elapsed, resolution):
        line = (f"{metrics.job}/{r.operator}: in={r.tuples_in} ({r.rate_in}/s) out={r.tuples_out} "
                f"({r.rate_out}/s) queue={r.queue} watermark={r.watermark} late={r.late} "
                f"errors={r.errors}")
        own = metrics.operators[r.operator].counters if r.operator in metrics.operators else {}
        if own:
            line += " " + " ".join(f"{name}={c.value}" for name, c in sorted(own.items()))
        lines.append(line)
    lines.extend(f"{metrics.job}/region {name or 'job'}: {_region_cells(rm)}"
                 for name, rm in metrics.regions.items())
    if metrics.restarts:
        lines.append(f"{metrics.job}: process restarts={metrics.restarts}")
    return lines


def _region_cells(rm: RegionMetrics) -> str:
    """A consistent region in one line: state, last checkpoint, durations, resets."""
    last = "-" if rm.last_committed is None else str(rm.last_committed)
    return (f"{rm.state} checkpoint={last} checkpoints={rm.checkpoints} "
            f"drain={rm.drain_ms:.0f}ms save={rm.checkpoint_ms:.0f}ms resets={rm.resets} "
            f"recovery={rm.last_recovery_ms:.0f}ms")


def render_table(metrics: JobMetrics, previous: JobMetrics | None, elapsed: float, *,
                 resolution: str = "ns") -> Table:
    """The same cells as `render_plain`, as a rich table for a terminal."""
    table = Table(title=f"job {metrics.job}", title_justify="left")
    for column in _COLUMNS:
        table.add_column(column, justify="left" if column == "operator" else "right")
    for r in _rows(metrics, previous, elapsed, resolution):
        table.add_row(r.operator, r.tuples_in, r.rate_in, r.tuples_out, r.rate_out, r.queue,
                      r.watermark, r.late, r.errors)
    notes = [f"region {name or 'job'}: {_region_cells(rm)}" for name, rm in metrics.regions.items()]
    if metrics.restarts:
        notes.append(f"process restarts: {metrics.restarts}")
    if notes:
        table.caption = "\n".join(notes)
        table.caption_justify = "left"
    return table


class StatusView:
    """Shows a job's metrics on ``stream`` (default: stderr) every ``interval`` seconds.

    Run `run` as a task beside the job and cancel it when the job ends; it
    renders once more on cancellation, so even a job shorter than one
    interval leaves its final counts behind. ``resolution`` is the tick unit
    of the watermarks shown. ``events``: off a terminal, each report goes there
    (its lines) instead of to ``stream``, so that logs written as JSON lines on the
    same stream stay JSON lines (``riverbed run`` logs it as a ``status`` event).
    """

    def __init__(self, job: MetricsSource, interval: float = 1.0, stream: TextIO | None = None, *,
                 resolution: str = "ns", events: Callable[[list[str]], None] | None = None) -> None:
        if not interval > 0:
            raise ValueError(f"status interval {interval!r}: expected a number of seconds > 0")
        _ticks_per_second(resolution)
        self.job = job
        self.interval = interval
        self.stream = stream if stream is not None else sys.stderr
        self.resolution = resolution
        self.events = events
        self._previous: JobMetrics | None = None
        self._previous_at = 0.0

    @property
    def is_terminal(self) -> bool:
        """Whether `run` draws a live table (a terminal) or prints plain lines (anything else)."""
        isatty = getattr(self.stream, "isatty", None)
        return bool(isatty is not None and isatty())

    def render(self, now: float) -> list[str]:
        """Plain lines for the job's metrics at ``now`` (seconds on any monotonic clock).

        Rates are since the previous `render`/`render_rich` call; the first
        call has none. A job with parallel regions adds a line per channel.
        """
        metrics, previous, elapsed = self._sample(now)
        return [*render_plain(metrics, previous, elapsed, resolution=self.resolution),
                *(f"{metrics.job}/{line}" for line in channel_lines(self.job))]

    def render_rich(self, now: float) -> Table:
        """Like `render`, as a rich table."""
        metrics, previous, elapsed = self._sample(now)
        table = render_table(metrics, previous, elapsed, resolution=self.resolution)
        channels = channel_lines(self.job)
        if channels:
            table.caption = "\n".join([*([str(table.caption)] if table.caption else []), *channels])
            table.caption_justify = "left"
        return table

    async def run(self) -> None:
        """Render every ``interval`` until cancelled (then render a last time and re-raise)."""
        loop = asyncio.get_running_loop()
        self._sample(loop.time())  # the baseline, so the first render already has rates
        if self.is_terminal:
            console = Console(file=self.stream)
            with Live(self.render_rich(loop.time()), console=console, auto_refresh=False) as live:
                try:
                    while True:
                        await asyncio.sleep(self.interval)
                        live.update(self.render_rich(loop.time()), refresh=True)
                except asyncio.CancelledError:
                    live.update(self.render_rich(loop.time()), refresh=True)
                    raise
        else:
            try:
                while True:
                    await asyncio.sleep(self.interval)
                    self._print(self.render(loop.time()))
            except asyncio.CancelledError:
                self._print(self.render(loop.time()))
                raise

    def _sample(self, now: float) -> tuple[JobMetrics, JobMetrics | None, float]:
        current = copy_metrics(self.job.snapshot_metrics())
        previous, elapsed = self._previous, now - self._previous_at
        self._previous, self._previous_at = current, now
        return current, previous, elapsed

    def _print(self, lines: list[str]) -> None:
        if self.events is not None:
            self.events(lines)
            return
        self.stream.write("".join(line + "\n" for line in lines))
        self.stream.flush()


def channel_lines(job: Any) -> list[str]:
    """A line per channel of the job's parallel regions and per process group (none for a job
    without): its worker process, what went in and out, its bounded queue, the messages its
    worker sent and the writes that carried them, its CPU time."""
    lines = []
    for m in getattr(job, "channel_metrics", list)():
        state = "finished" if m.finished else "running" if m.alive else "ended"
        kind = "process" if m.kind == "process" else "channel"
        lines.append(f"{kind} {m.region}[{m.channel}]: pid={m.pid} {state} in={m.tuples_in} "
                     f"out={m.tuples_out} in_flight={m.batches_in_flight}/{m.capacity} "
                     f"waits={m.backpressure_waits} messages={m.worker_messages} writes={m.worker_writes} "
                     f"cpu={m.cpu_seconds:.1f}s")
    return lines


def _tuples_in(op: OperatorMetrics) -> int:
    return sum(p.tuples_processed for p in op.inputs)


def _tuples_out(op: OperatorMetrics) -> int:
    return sum(p.tuples_submitted for p in op.outputs)


def _rate(current: int, before: int | None, elapsed: float) -> str:
    if before is None or elapsed <= 0:
        return "-"
    return f"{(current - before) / elapsed:.1f}"


def _ticks_per_second(resolution: str) -> int:
    try:
        return _TICKS_PER_SECOND[resolution]
    except KeyError:
        raise ValueError(f"watermark resolution {resolution!r}: expected 'ns', 'us' or 'ms'") from None
