"""The metrics of operators in a parallel region are their channels' (summed): errors, late
tuples, their own counters and their watermark read as at width 1 (they read 0 and None)."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import threading
from typing import Any

import pytest

from riverbed.graph import Graph, Operator, Schema, Source
from riverbed.runtime import Job, JobError, VirtualClock, run_virtual
from riverbed.testing import ListSink, ListSource

S = 1_000_000_000
READING = Schema(sensor="int64", v="int64", ts="int64")


pytestmark = pytest.mark.usefixtures("no_worker_leftovers")


class Panes(Operator):
    """Counts its triggers with its own counter; a reading of v == 7 raises (error port)."""

    def setup(self) -> None:
        self.triggers = self.context.counter("triggers")

    def on_window_event(self, event: Any, port: int) -> None:
        if event.type.name == "TRIGGER":
            if any(t["v"] == 7 for t in event.tuples):
                raise ValueError("seven")
            self.triggers.inc()
            self.submit({"sensor": event.partition, "n": len(event.tuples)})


def readings() -> list[Any]:
    out: list[Any] = []
    for i in range(400):
        ts = i * S // 4
        if i % 50 == 49:
            ts -= 30 * S  # late: behind the drop point
        out.append({"sensor": i % 5, "v": i % 13, "ts": ts})
    return out


def member_metrics(width: int | None) -> Any:
    g = Graph("metrics")
    s = g.source("s", ListSource(readings()), schema=READING, event_time="ts")
    window = s.window("timeInterval, intervalDuration(5), partitioned", partition_by="sensor")
    if width is None:
        out, errors = g.operator("panes", Panes(), [window], [None], error_port=True)
    else:
        with g.parallel(width, partition_by="sensor"):
            out, errors = g.operator("panes", Panes(), [window], [None], error_port=True)
    g.sink("out", ListSink(), [out])
    g.sink("errors", ListSink(), [errors])
    clock = VirtualClock()
    job = Job(g, clock=clock)
    metrics = run_virtual(job.run(), clock)
    if width is not None:  # watermark-only messages take no place in a channel's queue
        assert [m.batches_in_flight for m in job.channel_metrics()] == [0] * width
    return metrics.operators["panes"]


def test_a_region_reports_its_operators_metrics_as_width_one_does() -> None:
    alone, wide = member_metrics(None), member_metrics(2)
    port, wide_port = alone.inputs[0], wide.inputs[0]
    assert port.tuples_dropped_late > 0 and port.errors > 0 and alone.counters["triggers"].value > 0
    assert (wide_port.tuples_processed, wide_port.tuples_dropped_late, wide_port.errors) == (
        port.tuples_processed, port.tuples_dropped_late, port.errors)
    assert wide_port.final_puncts_processed == port.final_puncts_processed == 1  # (not per channel)
    assert wide.counters["triggers"].value == alone.counters["triggers"].value
    assert wide.watermark == alone.watermark
    assert wide.outputs[0].tuples_submitted == alone.outputs[0].tuples_submitted


def test_counts_of_replaced_workers_add_to_the_new_ones_and_their_watermarks_are_past() -> None:
    """A reset replaces a region's workers, which count from zero; their counts fell back in
    every view (negative rates in the status view, Prometheus totals reset) while the counts
    the job keeps itself went on. An error a worker's failure tells counts too (it read 0)."""
    from riverbed.core import Counter, InputPortMetrics, OperatorMetrics, OutputPortMetrics
    from riverbed.runtime._parallel_metrics import fold_member_metrics, retire_reports

    g = Graph("fold")
    s = g.source("s", ListSource([]), schema=READING)
    a = g.operator("a", Panes(), [s])
    g.operator("b", Panes(), [a])
    job = Job(g, clock=VirtualClock())

    def report(errors: int, processed: int, watermark: int, triggers: int) -> dict[str, Any]:
        m = OperatorMetrics("b", inputs=[InputPortMetrics(tuples_processed=processed,
                                                          errors=errors)],
                            outputs=[OutputPortMetrics()], watermark=watermark)
        m.counters["triggers"] = Counter()
        m.counters["triggers"].value = triggers
        return {"b": m.as_dict()}

    old = [report(3, 100, 50, 7), report(1, 80, 40, 5)]  # the workers a reset replaced
    new = [report(0, 10, 90, 1), report(2, 20, 95, 2)]
    b = job.metrics.operators["b"]
    # The replaced reports as they are, and as the one report a reset keeps of them.
    for retired in (old, [retire_reports(old)], [retire_reports([old[0]]), old[1]]):
        fold_member_metrics(job.runners, new, first="a", merged=(), retired=retired,
                            failures={("b", 0): 1})
        assert b.inputs[0].errors == 3 + 1 + 0 + 2 + 1
        assert b.inputs[0].tuples_processed == 100 + 80 + 10 + 20
        assert b.counters["triggers"].value == 7 + 5 + 1 + 2
        assert b.watermark == 90  # the new workers' lowest, not the replaced ones'


def test_an_error_that_ends_a_workers_operator_is_counted() -> None:
    g = Graph("fails")
    s = g.source("s", ListSource([{"sensor": i % 5, "v": i, "ts": i} for i in range(50)]),
                 schema=READING)

    class Breaks(Operator):
        def on_tuple(self, tup: Any, port: int) -> None:
            if tup["v"] == 20:
                raise ValueError("twenty")

    with g.parallel(2, partition_by="sensor"):
        out = g.operator("breaks", Breaks(), [s])
    g.sink("out", ListSink(), [out])
    job = Job(g, clock=VirtualClock())
    with pytest.raises(JobError, match="twenty"):
        run_virtual(job.run(), job.clock)  # type: ignore[arg-type]
    assert job.metrics.operators["breaks"].inputs[0].errors == 1  # as in the job's process


class Numbered(Source):
    """``n`` readings from a generator (batches of 1000 into the region), replayable."""

    replayable = True

    def __init__(self, n: int) -> None:
        self.n, self.at = n, 0

    def generate(self) -> Any:
        while self.at < self.n:
            self.at += 1
            yield {"sensor": self.at % 7, "v": self.at, "ts": self.at}

    def snapshot(self) -> Any:
        return self.at

    def restore(self, state: Any) -> None:
        self.at = state


class StuckOnce(Operator):
    """Passes tuples on; its first tuple blocks the worker for good while ``marker`` exists
    (removed first, so the restarted worker goes through): a stuck operator, killed with -9."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def on_tuple(self, tup: Any, port: int) -> None:
        if os.path.exists(self.marker):
            os.remove(self.marker)
            threading.Event().wait()
        self.submit(tup)


def test_what_a_reset_drops_from_a_channels_queue_was_not_processed(tmp_path: Any) -> None:
    """The job counts the tuples it hands a region as its first member's processed ones. A reset
    drops what waits in the channels' queues, and those stayed counted: after a worker was
    killed, the first member read 77,408 processed against 56,928 submitted (a review). Here
    the worker is stuck on its first tuple, so nothing was processed when it is killed: the
    count at the end is the input's, once."""
    from riverbed.checkpoint import MemoryStore

    n = 30_000
    marker = tmp_path / "stuck"
    marker.touch()
    g = Graph("dropped")
    s = g.source("s", Numbered(n), schema=READING)
    with g.parallel(1):
        out = g.operator("stuck", StuckOnce(str(marker)), [s])
    sink = ListSink()
    g.sink("out", sink, [out])
    job = Job(g, checkpoints=MemoryStore(), checkpoint_period=3600)

    async def main() -> None:
        run = asyncio.ensure_future(job.run())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        # Until the worker is stuck and batches wait for it (in its queue, or in the socket's
        # buffer once that is full: which comes first depends on the machine).
        while marker.exists() or not job.channel_metrics() \
                or job.channel_metrics()[0].tuples_in < 5_000:
            assert loop.time() < deadline and not run.done(), (marker.exists(), job.channel_metrics())
            await asyncio.sleep(0.005)
        pid = job.channel_metrics()[0].pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        await run

    asyncio.run(main())
    assert job.parallel[0].restarts == 1
    assert [t["v"] for t in sink.items if isinstance(t, dict)] == list(range(1, n + 1))
    stuck = job.metrics.operators["stuck"]
    assert stuck.inputs[0].tuples_processed == stuck.outputs[0].tuples_submitted == n


class FailsOnce(Operator):
    """Passes tuples on; fails once, at ``at``, while ``marker`` exists (removed first)."""

    def __init__(self, marker: str, at: int) -> None:
        self.marker, self.at = marker, at

    def on_tuple(self, tup: Any, port: int) -> None:
        if tup["v"] == self.at and os.path.exists(self.marker):
            os.remove(self.marker)
            raise RuntimeError("once")
        self.submit(tup)


def test_counts_never_go_down_across_a_reset_of_the_regions_workers(tmp_path: Any) -> None:
    """Prometheus reads a counter that goes down as a restart of the job: the channels' writes
    and CPU seconds fell back to the new workers' own (45 -> 1 writes), and the first member's
    processed count fell when a reset took back what it dropped (38,500 -> 33,500)."""
    from riverbed.checkpoint import MemoryStore

    n = 60_000
    marker = tmp_path / "fail"
    marker.touch()
    g = Graph("monotonic")
    s = g.source("s", Numbered(n), schema=READING)
    with g.parallel(2, partition_by="sensor"):
        out = g.operator("pass", FailsOnce(str(marker), 40_000), [s])
    sink = ListSink()
    g.sink("out", sink, [out])
    job = Job(g, checkpoints=MemoryStore(), checkpoint_period=0.05)
    samples: list[tuple[Any, ...]] = []

    def sample() -> None:
        channels = job.channel_metrics()
        if channels:
            samples.append((job.metrics.operators["pass"].inputs[0].tuples_processed,
                            *(m.worker_writes for m in channels), *(m.cpu_seconds for m in channels)))

    async def main() -> None:
        run = asyncio.ensure_future(job.run())
        while not run.done():
            sample()
            await asyncio.sleep(0.001)
        await run
        sample()

    asyncio.run(main())
    assert job.parallel[0].restarts == 1 and not marker.exists()
    assert {t["v"] for t in sink.items if isinstance(t, dict)} == set(range(1, n + 1))
    for before, after in itertools.pairwise(samples):
        assert all(a >= b for a, b in zip(after, before, strict=True)), (before, after)


class Paced(Source):
    """A reading every 100 ms of the job's clock for ``seconds``, its event time the clock's."""

    def __init__(self, seconds: int) -> None:
        self.seconds = seconds

    async def run(self) -> None:
        ctx = self.context
        for i in range(self.seconds * 10):
            at = i * S // 10
            await ctx.sleep_until(at)
            self.submit({"sensor": i % 5, "v": 0, "ts": at})


def test_on_a_virtual_clock_a_members_metrics_keep_up_with_the_jobs_time() -> None:
    """Workers' reports were folded every 0.25 s of the wall clock: a virtual-clock job covers
    many status intervals in that, and its status view showed a member's watermark 12 virtual
    seconds behind the sink after it (a review)."""
    g = Graph("virtual")
    s = g.source("s", Paced(40), schema=READING, event_time="ts")
    with g.parallel(2, partition_by="sensor"):
        out = g.operator("panes", Panes(), [s.window("timeInterval, intervalDuration(1), partitioned",
                                                     partition_by="sensor")], [None])
    g.sink("out", ListSink(), [out])
    clock = VirtualClock()
    job = Job(g, clock=clock)
    seen: list[tuple[int, int | None]] = []

    async def main() -> None:
        run = asyncio.ensure_future(job.run())
        for second in range(5, 40, 5):
            await clock.sleep_until(second * S)
            seen.append((second, job.snapshot_metrics().operators["panes"].watermark))
        await run

    run_virtual(main(), clock)
    assert len(seen) == 7
    for second, watermark in seen:  # within a second or two of the source's time
        assert watermark is not None and watermark >= (second - 2) * S, seen
