"""Parallel regions in the asyncio runtime: each channel a worker process, results as with width 1.

Every test checks that the job left no worker process and no socket behind
(`no_worker_leftovers`, tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import runpy
import signal
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from riverbed.core import OperatorError
from riverbed.graph import Graph, Operator, Punct, Schema, Source
from riverbed.runtime import Job, JobError, VirtualClock, run_graph, run_virtual
from riverbed.runtime._parallel import ChannelError
from riverbed.runtime._parallel_wire import channel_of
from riverbed.windows import EventType, StreamWindowEvent

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
READING = Schema(k="rstring", v="int64", ts="int64")
WIDTHS = [1, 2, 3]


pytestmark = pytest.mark.usefixtures("no_worker_leftovers")


def _gone(pid: int | None) -> bool:
    return pid is not None and not Path(f"/proc/{pid}").exists()


class Readings(Source):
    """``n`` readings of ``keys`` keys, a window mark every ``mark_every`` (0: none)."""

    def __init__(self, n: int, keys: int = 37, mark_every: int = 0) -> None:
        self.n, self.keys, self.mark_every = n, keys, mark_every

    def generate(self) -> Any:
        for i in range(self.n):
            yield {"k": f"s{(i * 7919) % self.keys}", "v": i, "ts": 1000 + i}
            if self.mark_every and i % self.mark_every == self.mark_every - 1:
                yield Punct.WINDOW


class Sums(Operator):
    """The sum and count of each tumbling window (EVICTION) or pane (TRIGGER)."""

    window_events = frozenset({EventType.EVICTION, EventType.TRIGGER})

    def on_window_event(self, event: StreamWindowEvent[Any], port: int) -> None:
        if event.tuples:
            self.submit({"k": event.partition, "sum": sum(t["v"] for t in event.tuples),
                         "n": len(event.tuples), "last": event.tuples[-1]["ts"]})


class Pass(Operator):
    def on_tuple(self, tup: Any, port: int) -> None:
        self.submit(tup)


class Collect(Operator):
    """Everything the sink saw: tuples, window marks, finals, watermarks."""

    def __init__(self) -> None:
        self.tuples: list[Any] = []
        self.marks = 0
        self.finals = 0
        self.watermarks: list[int] = []
        self.seen: list[Any] = []  # tuples and watermarks, in the order they came

    def on_tuple(self, tup: Any, port: int) -> None:
        self.tuples.append(tup)
        self.seen.append(tup)

    def on_punct(self, punct: Punct, port: int) -> None:
        if punct is Punct.WINDOW:
            self.marks += 1
        else:
            self.finals += 1

    def on_watermark(self, value: int) -> None:
        self.watermarks.append(value)
        self.seen.append(value)


def _by_key(tuples: list[Any], key: str = "k") -> dict[Any, list[Any]]:
    """Each key's tuples in arrival order: what a region must keep (order across keys may vary)."""
    out: dict[Any, list[Any]] = defaultdict(list)
    for t in tuples:
        out[t[key]].append(t)
    return dict(out)


def _keyed_graph(width: int | None, n: int = 5000, *, mark_every: int = 0,
                 event_time: bool = False, clause: str = "tumbling, count(10), partitioned",
                 ) -> tuple[Graph, Collect]:
    g = Graph("keyed")
    src = g.source("src", Readings(n, mark_every=mark_every), schema=READING,
                   event_time="ts" if event_time else None, resolution="ms", minimum_gap=0.0)
    sink = Collect()

    def body() -> Any:
        sums = g.operator("sums", Sums(), [src.window(clause, partition_by="k")])
        return g.operator("pass", Pass(), [sums])

    if width is None:
        out = body()
    else:
        with g.parallel(width, partition_by="k"):
            out = body()
    g.sink("sink", sink, [out])
    return g, sink


@pytest.mark.parametrize("virtual", [False, True], ids=["real-clock", "virtual-clock"])
def test_a_keyed_chain_gives_each_key_the_same_results_at_every_width(virtual: bool) -> None:
    g, sink = _keyed_graph(None)
    run_graph(g, clock=VirtualClock() if virtual else None)
    expected = _by_key(sink.tuples)
    total = len(sink.tuples)
    assert total > 400
    for width in WIDTHS:
        g, sink = _keyed_graph(width)
        job = Job(g, clock=VirtualClock() if virtual else None)
        if virtual:
            run_virtual(job.run(), job.clock)  # type: ignore[arg-type]
        else:
            asyncio.run(job.run())
        assert _by_key(sink.tuples) == expected, width
        assert sink.finals == 1
        channels = [m for host in job.parallel for m in host.metrics()]
        assert [m.channel for m in channels] == list(range(width))
        assert sum(m.tuples_in for m in channels) == 5000
        assert sum(m.tuples_out for m in channels) == total
        assert all(m.finished and _gone(m.pid) for m in channels)
        if width > 1:
            assert all(m.tuples_in > 0 for m in channels), "every channel got some keys"


def test_a_key_goes_to_the_channel_its_stable_hash_names() -> None:
    g = Graph("where")
    src = g.source("src", Readings(200, keys=11), schema=READING)
    seen: list[tuple[str, int]] = []

    class Pid(Operator):
        def on_tuple(self, tup: Any, port: int) -> None:
            self.submit({"k": tup["k"], "pid": os.getpid()})

    class Record(Operator):
        def on_tuple(self, tup: Any, port: int) -> None:
            seen.append((tup["k"], tup["pid"]))

    with g.parallel(3, partition_by="k"):
        out = g.operator("pid", Pid(), [src])
    g.sink("sink", Record(), [out])
    job = Job(g)
    asyncio.run(job.run())
    pids = [m.pid for m in job.parallel[0].metrics()]
    assert dict(seen) == {k: pids[channel_of(k, 3)] for k, _ in seen}
    assert os.getpid() not in pids


def test_window_marks_leave_once_every_channel_sent_them_and_final_once() -> None:
    g, sink = _keyed_graph(None, 3000, mark_every=100, clause="tumbling, count(1000), partitioned")
    run_graph(g)
    expected_marks = sink.marks
    assert expected_marks >= 30
    for width in WIDTHS:
        g, sink = _keyed_graph(width, 3000, mark_every=100, clause="tumbling, count(1000), partitioned")
        run_graph(g)
        assert (sink.marks, sink.finals) == (expected_marks, 1), width


def test_panes_by_event_time_are_the_same_at_every_width() -> None:
    clause = "timeInterval, intervalDuration(0.05), partitioned"
    g, sink = _keyed_graph(None, 4000, event_time=True, clause=clause)
    run_graph(g)
    expected = _by_key(sink.tuples)
    assert len(sink.tuples) > 37
    for width in WIDTHS:
        g, sink = _keyed_graph(width, 4000, event_time=True, clause=clause)
        run_graph(g)
        assert _by_key(sink.tuples) == expected, width
        assert sink.watermarks[-1] == max(sink.watermarks) and sink.finals == 1


@pytest.mark.parametrize("width", [2, 3])
def test_the_watermark_leaving_is_the_minimum_over_the_channels(width: int) -> None:
    """Each channel's watermark follows its own tuples; a watermark leaving the region must not
    pass a tuple still in a slower channel, so no tuple comes after a watermark at its time."""
    g = Graph("wm")
    src = g.source("src", Readings(6000), schema=READING, event_time="ts", resolution="ms",
                   minimum_gap=0.0)
    sink = Collect()
    with g.parallel(width, partition_by="k"):
        out = g.operator("pass", Pass(), [src])
    g.sink("sink", sink, [out], queue_batches=64)
    run_graph(g, batch_size=50)
    assert len(sink.tuples) == 6000 and len(sink.watermarks) > 10
    high = -1
    for item in sink.seen:
        if isinstance(item, int):
            high = item
        else:
            assert item["ts"] > high, (item, high)


def test_a_round_robin_region_deals_tuples_to_every_channel() -> None:
    g = Graph("rr")
    src = g.source("src", Readings(1000), schema=READING)
    sink = Collect()
    with g.parallel(3) as block:
        out = g.operator("pass", Pass(), [src])
    g.sink("sink", sink, [out])
    job = Job(g)
    asyncio.run(job.run())
    assert sorted(t["v"] for t in sink.tuples) == list(range(1000))
    assert [m.tuples_in for m in job.parallel[0].metrics()] == [334, 333, 333]
    assert block.members == ["pass"]


@pytest.mark.parametrize("width", WIDTHS)
def test_every_example_with_a_partitioned_stage_gives_the_same_results(width: int,
                                                                       tmp_path: Path) -> None:
    examples = [("sensors.py", {"sensors": 40, "seconds": 3}, ["average", "alerts"], "sensor", "jsonl"),
                ("stock_moving_average.py", {"seconds": 4, "symbols": 4}, ["average"], "sym", "csv")]
    for name, params, members, key, ext in examples:
        lines = {}
        for w in (None, width):
            out = tmp_path / f"{name}-{w}.{ext}"
            g = runpy.run_path(str(EXAMPLES / name))["build"]({**params, "out": str(out)})
            if w is not None:
                g.parallel(w, partition_by=key).add(*members)  # the example, not edited
            run_graph(g.freeze(), clock=VirtualClock())
            lines[w] = out.read_text().splitlines()
        assert lines[None], name
        assert _lines_by_key(lines[width]) == _lines_by_key(lines[None]), name


def _lines_by_key(lines: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for line in lines:
        key = json.loads(line)["sensor"] if line.startswith("{") else line.split(",")[0]
        out[key].append(line)
    return dict(out)


class BoomAt777(Operator):
    def on_tuple(self, tup: Any, port: int) -> None:
        if tup["v"] == 777:
            raise ValueError("seven hundred seventy-seven")
        self.submit(tup)


def test_an_operator_failing_in_a_worker_stops_the_job_naming_it_and_the_tuple() -> None:
    g = Graph("boom")
    src = g.source("src", Readings(2000), schema=READING)
    with g.parallel(2, partition_by="k"):
        out = g.operator("boom", BoomAt777(), [src])
    g.sink("sink", Collect(), [out])
    job = Job(g)
    with pytest.raises(JobError) as info:
        asyncio.run(job.run())
    (err,) = info.value.errors
    assert isinstance(err, OperatorError) and err.operator == "boom" and err.port == 0
    assert "ValueError: seven hundred seventy-seven on tuple {'k': " in str(err)
    assert "parallel region 'parallel0', channel " in str(err)
    assert all(_gone(m.pid) for m in job.parallel[0].metrics())


@pytest.mark.parametrize(("clock", "chain"), [("real", False), ("virtual", False),
                                              ("virtual", True)])
def test_a_member_failing_without_checkpoints_drains_the_job(clock: str, chain: bool) -> None:
    # As in the job's process: what the failed operator submitted before the failure, and what
    # the other channel had, reaches the sink, then final (the job ended at once, with
    # whatever the merge had not let out yet lost).
    g = Graph("boom")
    src = g.source("src", Readings(20_000), schema=READING)
    with g.parallel(2, partition_by="k"):
        out = g.operator("boom", BoomAt777(), [src])
        if chain:
            out = g.operator("after", Pass(), [out])
    sink = Collect()
    g.sink("sink", sink, [out])
    job = Job(g, batch_size=100, clock=VirtualClock() if clock == "virtual" else None)
    with pytest.raises(JobError) as info:
        if clock == "virtual":
            run_virtual(job.run(), job.clock)  # type: ignore[arg-type]
        else:
            asyncio.run(job.run())
    (err,) = info.value.errors
    assert isinstance(err, OperatorError) and err.operator == "boom"
    assert "ValueError: seven hundred seventy-seven on tuple {'k': " in str(err)
    submitted = job.metrics.operators["src"].outputs[0].tuples_submitted
    assert submitted < 20_000  # the source stopped
    failing = channel_of(f"s{(777 * 7919) % 37}", 2)
    expected = [t for t in Readings(submitted).generate()
                if channel_of(t["k"], 2) != failing or t["v"] < 777]
    assert _by_key(sink.tuples) == _by_key(expected)
    assert sink.finals == 1
    assert job.metrics.operators["boom"].inputs[0].errors == 1


def test_a_replicas_generate_that_raises_is_the_only_failure_named() -> None:
    # Its generate() raised before giving an iterator: the drain ended the replica, and the
    # channel took its None for the items (a TypeError was named too, once a channel).
    class Lines(Source):
        def generate(self) -> Any:
            raise FileNotFoundError(f"part-{self.context.channel}.txt")

    g = Graph("rep")
    outside = g.source("outside", Readings(2000), schema=READING)
    with g.parallel(2, partition_by="k"):
        out = g.operator("both", Pass(), [g.source("src", Lines(), schema=READING), outside])
    g.sink("sink", Collect(), [out])
    job = Job(g, clock=VirtualClock())
    with pytest.raises(JobError) as info:
        run_virtual(job.run(), job.clock)  # type: ignore[arg-type]
    assert info.value.errors and all("FileNotFoundError" in str(e) for e in info.value.errors)


def test_a_worker_failing_during_a_failure_drain_is_listed_after_the_first() -> None:
    # An operator of the job's process fails and the job drains; then one in a worker fails
    # too: the JobError named only the worker's, dropping the first.
    from tests.test_runtime import BoomAt

    g = Graph("two")
    src = g.source("src", Readings(2000), schema=READING)
    g.sink("a_sink", Collect(), [g.operator("a", BoomAt(100), [src])])
    with g.parallel(1):
        p = g.operator("p", BoomAt(150), [src])
    g.sink("p_sink", Collect(), [p])
    job = Job(g, batch_size=100)
    with pytest.raises(JobError) as info:
        asyncio.run(job.run())
    named = [(e.operator, "bad 150" in str(e) or str(e.cause)) for e in info.value.errors
             if isinstance(e, OperatorError)]
    assert named == [("a", "bad 100"), ("p", True)], named


def test_a_tuple_without_the_key_stops_the_job_naming_the_region_and_tuple() -> None:
    class NoKey(Source):
        def generate(self) -> Any:
            yield {"k": "a", "v": 1, "ts": 1}
            yield {"v": 2, "ts": 2}

    g = Graph("nokey")
    src = g.source("src", NoKey())
    with g.parallel(2, partition_by="k"):
        out = g.operator("pass", Pass(), [src])
    g.sink("sink", Collect(), [out])
    # (the member fails on it in channel 0, as on a tuple of its own: review 47)
    with pytest.raises(JobError, match=r"operator 'pass', input port 0: .*KeyError: .*parallel "
                                        r"region 'parallel0' splits by 'k'.*on tuple \{'v': 2"):
        run_graph(g)


class Endless(Source):
    """Readings until the job stops; the ``pids`` of the workers are known once ``started``."""

    async def run(self) -> None:
        ctx: Any = self.context
        i = 0
        while not ctx.stopping:
            self.submit({"k": f"s{i % 13}", "v": i, "ts": i})
            i += 1
            if i % 100 == 0:
                await ctx.flush()


def _endless_job(width: int, logger: Any = None) -> tuple[Job, Collect]:
    g = Graph("endless")
    src = g.source("src", Endless(), schema=READING)
    sink = Collect()
    with g.parallel(width, partition_by="k"):
        out = g.operator("sums", Sums(), [src.window("tumbling, count(10), partitioned",
                                                     partition_by="k")])
    g.sink("sink", sink, [out])
    return Job(g, logger=logger), sink


async def _abort_after(job: Job, sink: Collect, tuples: int) -> None:
    """Run ``job`` and abort it once ``sink`` holds ``tuples``."""
    run = asyncio.ensure_future(job.run())
    while len(sink.tuples) < tuples:
        await asyncio.sleep(0.01)
    job.abort()
    await run


def test_a_stop_drains_the_region_and_its_workers_exit() -> None:
    job, sink = _endless_job(2)

    async def main() -> None:
        run = asyncio.ensure_future(job.run())
        while len(sink.tuples) < 200:
            await asyncio.sleep(0.01)
        job.stop()
        await run

    asyncio.run(main())
    assert sink.finals == 1
    assert all(_gone(m.pid) and m.finished for m in job.parallel[0].metrics())


def test_an_abort_kills_the_workers() -> None:
    job, sink = _endless_job(2)
    with pytest.raises(JobError, match="aborted"):
        asyncio.run(_abort_after(job, sink, 100))
    assert all(_gone(m.pid) for m in job.parallel[0].metrics())


def test_a_worker_killed_stops_the_job_with_an_error_naming_the_channel() -> None:
    job, sink = _endless_job(2)

    async def main() -> None:
        run = asyncio.ensure_future(job.run())
        while len(sink.tuples) < 100:
            await asyncio.sleep(0.01)
        os.kill(job.parallel[0].metrics()[1].pid or 0, signal.SIGKILL)
        await run

    with pytest.raises(JobError) as info:
        asyncio.run(main())
    (err,) = info.value.errors
    assert isinstance(err, ChannelError)
    assert "parallel region 'parallel0': channel 1 (pid " in str(err)
    assert "killed by signal 9" in str(err)
    assert all(_gone(m.pid) for m in job.parallel[0].metrics())


def test_a_slow_channel_holds_its_upstream_back_within_its_bounded_queue() -> None:
    class Slow(Operator):
        def on_tuple(self, tup: Any, port: int) -> None:
            for _ in range(2000):
                pass
            self.submit(tup)

    g = Graph("slow")
    src = g.source("src", Readings(20_000), schema=READING)
    sink = Collect()
    with g.parallel(2, partition_by="k"):
        out = g.operator("slow", Slow(), [src], queue_batches=2)
    g.sink("sink", sink, [out])
    job = Job(g, batch_size=100)
    high = 0

    async def watch() -> None:
        nonlocal high
        while True:
            high = max([high, *(m.batches_in_flight for m in job.parallel[0].metrics())])
            await asyncio.sleep(0)

    async def main() -> None:
        watcher = asyncio.ensure_future(watch())
        try:
            await job.run()
        finally:
            watcher.cancel()

    asyncio.run(main())
    assert len(sink.tuples) == 20_000
    metrics = job.parallel[0].metrics()
    assert sum(m.backpressure_waits for m in metrics) > 0
    assert high <= 2


def test_the_status_view_and_the_metrics_show_each_channel_and_its_process() -> None:
    import io

    from prometheus_client import CollectorRegistry, generate_latest

    from riverbed.runtime import StatusView
    from riverbed.runtime._prometheus import JobCollector

    job, sink = _endless_job(2)
    seen: dict[str, Any] = {}

    async def main() -> None:
        run = asyncio.ensure_future(job.run())
        while len(sink.tuples) < 100:
            await asyncio.sleep(0.01)
        seen["lines"] = StatusView(job, stream=io.StringIO()).render(0.0)
        registry = CollectorRegistry()
        registry.register(JobCollector(job))
        seen["prometheus"] = generate_latest(registry).decode()
        job.stop()
        await run

    asyncio.run(main())
    pids = [m.pid for m in job.channel_metrics()]
    channel_lines = [line for line in seen["lines"] if "/channel " in line]
    assert [line.split(":")[0] for line in channel_lines] == [
        "endless/channel parallel0[0]", "endless/channel parallel0[1]"]
    assert all(f"pid={pid} running in=" in line for pid, line in zip(pids, channel_lines, strict=True))
    text = seen["prometheus"]
    assert (f'riverbed_channel_alive{{channel="1",job="endless",pid="{pids[1]}",region="parallel0"}} 1.0'
            in text)
    assert 'riverbed_channel_tuples_in_total{channel="0",job="endless",region="parallel0"}' in text
    assert 'riverbed_channel_worker_messages_total{channel="1",job="endless",region="parallel0"}' in text
    assert 'riverbed_channel_cpu_seconds_total{channel="0",job="endless",region="parallel0"}' in text
    assert all("messages=" in line for line in channel_lines)


def test_the_log_names_each_channel_started_and_ended() -> None:
    events: list[tuple[str, dict[str, Any]]] = []

    class Log:
        def info(self, event: str, **fields: Any) -> None:
            events.append((event, fields))

        warning = info

    g, _ = _keyed_graph(2, 200)
    job = Job(g, logger=Log())
    asyncio.run(job.run())
    pids = [m.pid for m in job.channel_metrics()]
    assert [(e, f["channel"], f["pid"]) for e, f in events] == [
        ("channel_started", 0, pids[0]), ("channel_started", 1, pids[1]),
        ("channel_ended", 0, pids[0]), ("channel_ended", 1, pids[1])]
    assert all(f["finished"] and f["exitcode"] == 0 for e, f in events if e == "channel_ended")


@pytest.mark.parametrize("width", [None, 2])
def test_a_member_fed_from_outside_and_by_another_member_gets_both(width: int | None) -> None:
    """``b`` reads the stream into the region and ``a``'s output. The stream is read once, from
    ``a``'s inbox; it was delivered to ``b``'s inbox in the job's process too, which nothing
    reads: that inbox filled and held the source back for good (the job never ended)."""

    class ByPort(Operator):
        def __init__(self) -> None:
            self.seen: list[tuple[int, int]] = []

        def on_tuple(self, tup: Any, port: int) -> None:
            self.submit({"port": port, "v": tup["v"], "k": tup["k"]})

    def graph() -> tuple[Graph, Collect]:
        g = Graph("twofeeds")
        src = g.source("src", Readings(20_000), schema=READING)
        sink = Collect()
        if width is None:
            a = g.operator("a", Pass(), [src])
            b = g.operator("b", ByPort(), [src, a])
        else:
            with g.parallel(width, partition_by="k"):
                a = g.operator("a", Pass(), [src])
                b = g.operator("b", ByPort(), [src, a])
        g.sink("sink", sink, [b])
        return g, sink

    g, sink = graph()
    job = Job(g, clock=VirtualClock(), batch_size=100)

    async def main() -> None:
        # A job that hangs is aborted after 120 s of wall time: the test fails, not hangs.
        loop = asyncio.get_running_loop()
        watchdog = threading.Timer(120, lambda: loop.call_soon_threadsafe(job.abort))
        watchdog.start()
        try:
            await job.run()
        finally:
            watchdog.cancel()

    run_virtual(main(), job.clock)  # type: ignore[arg-type]
    got = sorted((t["port"], t["v"]) for t in sink.tuples)
    assert got == sorted((port, v) for port in (0, 1) for v in range(20_000))


def test_workers_do_not_hold_the_jobs_listening_sockets() -> None:
    """A worker that outlived a killed job (busy in a process group) held the metrics and
    console ports it inherited, so the job restarted under ``--restarts`` could not bind them
    and gave up. The workers close them (`close_in_workers`)."""
    from riverbed.console import serve_console
    from riverbed.runtime import serve_metrics

    job, sink = _endless_job(2)

    def sockets(pid: int) -> set[str]:
        fds = Path(f"/proc/{pid}/fd")
        links = set()
        for fd in fds.iterdir():
            with contextlib.suppress(OSError):
                links.add(os.readlink(fd))
        return {link for link in links if link.startswith("socket:")}

    seen: dict[str, Any] = {}

    async def main() -> None:
        metrics = serve_metrics(job, 0)
        console = serve_console(job, job.graph, "127.0.0.1:0")
        try:
            run = asyncio.ensure_future(job.run())
            while len(sink.tuples) < 200:
                await asyncio.sleep(0.01)
            listening = {os.readlink(f"/proc/self/fd/{fd}")
                         for fd in (metrics._server.fileno(), console._fd)}
            seen["held"] = {pid: sockets(pid) & listening
                            for pid in (m.pid for m in job.channel_metrics()) if pid}
            job.stop()
            await run
        finally:
            console.close()
            metrics.close()

    asyncio.run(main())
    assert seen["held"] and all(not held for held in seen["held"].values()), seen


def test_a_worker_the_job_ends_itself_is_logged_as_such() -> None:
    """An abort (or a reset) kills the workers still running: logged as the job's doing, at
    info level, not as a warning indistinguishable from a kill -9 from outside."""
    events: list[tuple[str, str, dict[str, Any]]] = []

    class Log:
        def info(self, event: str, **fields: Any) -> None:
            events.append(("info", event, fields))

        def warning(self, event: str, **fields: Any) -> None:
            events.append(("warning", event, fields))

    job, sink = _endless_job(2, logger=Log())
    with pytest.raises(JobError, match="aborted"):
        asyncio.run(_abort_after(job, sink, 100))
    ended = [(level, f) for level, e, f in events if e == "channel_ended"]
    assert len(ended) == 2
    # Killed by the job, or ended on its own once the job hung up on it: the job's doing.
    assert all(level == "info" and not f["finished"] and (f["killed_by_job"] or f["exitcode"] == 0)
               for level, f in ended), ended
