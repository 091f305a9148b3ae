"""Logs, the status view and the Prometheus endpoint of a running job.

No test sleeps on the wall clock: jobs and the status view's loop run on a
`VirtualClock`, and the view's renders are called directly with chosen times.
"""

from __future__ import annotations

import asyncio
import io
import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from riverbed.graph import Graph, Operator, Source
from riverbed.runtime import (
    InputPortMetrics,
    Job,
    JobMetrics,
    OperatorMetrics,
    OutputPortMetrics,
    VirtualClock,
    run_virtual,
)
from riverbed.runtime._logging import configure_logging, get_logger
from riverbed.runtime._prometheus import serve_metrics
from riverbed.runtime._status import StatusView, copy_metrics, format_watermark, render_plain
from riverbed.windows import EVENT_TIME_MAX

# ---------------------------------------------------------------------------- helpers


class Gen(Source):
    def generate(self) -> Iterator[dict[str, int]]:
        yield from ({"v": i} for i in range(10))


class Sink(Operator):
    def on_tuple(self, t: Any, port: int) -> None:
        pass


def tiny_job() -> tuple[Job, VirtualClock]:
    g = Graph("t")
    s = g.source("gen", Gen())
    g.sink("out", Sink(), [s])
    clock = VirtualClock()
    return Job(g, clock=clock), clock


def hand_metrics(*, scale: int = 1, watermark: int | None = None) -> JobMetrics:
    """A source -> map -> sink job whose counts all grow with ``scale``."""
    src = OperatorMetrics("src", outputs=[OutputPortMetrics(tuples_submitted=100 * scale)],
                          queue_capacity=8)
    mid = OperatorMetrics(
        "map",
        inputs=[InputPortMetrics(tuples_processed=60 * scale, tuples_dropped_late=1 * scale, errors=2),
                InputPortMetrics(tuples_processed=40 * scale, tuples_dropped_late=2 * scale)],
        outputs=[OutputPortMetrics(tuples_submitted=50 * scale)],
        queue_size=3, queue_capacity=8, watermark=watermark)
    sink = OperatorMetrics("sink", inputs=[InputPortMetrics(tuples_processed=50 * scale)], queue_capacity=4)
    return JobMetrics("j", {"src": src, "map": mid, "sink": sink})


class FakeJob:
    """A metrics source whose counts the test moves by hand."""

    def __init__(self) -> None:
        self.scale = 1
        self.calls = 0

    def snapshot_metrics(self) -> JobMetrics:
        self.calls += 1
        return hand_metrics(scale=self.scale, watermark=1_500_000_000)


@pytest.fixture
def fresh_structlog() -> Iterator[None]:
    yield
    structlog.reset_defaults()


# ---------------------------------------------------------------------------- logging


def test_json_log_lines_carry_job_operator_port(fresh_structlog: None,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("json", "info")
    log = get_logger("job1", "map", 2)
    log.info("batch done", tuples=7)
    out, err = capsys.readouterr()
    assert out == ""  # stdout belongs to the job's own output
    event = json.loads(err)
    assert event["job"] == "job1"
    assert event["operator"] == "map"
    assert event["port"] == 2
    assert event["tuples"] == 7
    assert event["event"] == "batch done"
    assert event["level"] == "info"
    assert event["timestamp"].endswith("Z")


def test_logger_binds_only_what_is_given(fresh_structlog: None, capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("json")
    get_logger("job1").warning("w")
    event = json.loads(capsys.readouterr().err)
    assert event["job"] == "job1"
    assert "operator" not in event
    assert "port" not in event


def test_filtered_out_calls_write_nothing(fresh_structlog: None, capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("json", "warning")
    log = get_logger("job1", "map", 0)
    log.debug("d", x=1)
    log.info("i")
    assert capsys.readouterr().err == ""
    log.error("e")
    assert json.loads(capsys.readouterr().err)["level"] == "error"


def test_get_logger_returns_a_concrete_logger_not_the_lazy_proxy(fresh_structlog: None) -> None:
    # The proxy costs ~1 µs per filtered call; the concrete filtering logger ~60 ns.
    configure_logging("json", "info")
    log = get_logger("job1", "map", 0)
    assert not isinstance(log, type(structlog.get_logger()))


def test_json_exceptions_have_no_local_variables(fresh_structlog: None,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("json")
    secret = "hunter2"  # noqa: F841 - a local that must not reach the log
    try:
        1 / 0  # noqa: B018
    except ZeroDivisionError:
        get_logger("job1").exception("failed")
    err = capsys.readouterr().err
    event = json.loads(err)
    assert event["exception"][0]["exc_type"] == "ZeroDivisionError"
    assert "hunter2" not in err


def test_console_format_off_a_terminal_has_no_ansi(fresh_structlog: None,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("console", "debug")
    get_logger("job1", "map", 0).debug("hello", n=3)
    err = capsys.readouterr().err
    assert "hello" in err
    assert "job=job1" in err
    assert "operator=map" in err
    assert "\x1b[" not in err


def test_auto_format_is_json_off_a_terminal(fresh_structlog: None,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("auto")
    get_logger("job1").info("x")
    assert json.loads(capsys.readouterr().err)["event"] == "x"


def test_bad_format_and_level_are_rejected() -> None:
    with pytest.raises(ValueError, match=r"log format 'xml': expected 'json', 'console' or 'auto'"):
        configure_logging("xml", "info")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"log level 'loud': expected one of debug, info, warning"):
        configure_logging("json", "loud")


# ---------------------------------------------------------------------------- status view: rendering


def test_render_plain_computes_rates_from_differences() -> None:
    previous = hand_metrics(scale=1)
    current = hand_metrics(scale=3, watermark=12_500_000_000)
    lines = render_plain(current, previous, 4.0)
    assert lines == [
        # src: out 300 - 100 over 4 s; a source has no input port, so "in" is "-".
        "j/src: in=- (-/s) out=300 (50.0/s) queue=0/8 watermark=- late=0 errors=0",
        # map: in sums both ports (180 + 120, before 60 + 40); late sums both ports (3 + 6).
        "j/map: in=300 (50.0/s) out=150 (25.0/s) queue=3/8 watermark=12.500s late=9 errors=2",
        "j/sink: in=150 (25.0/s) out=- (-/s) queue=0/4 watermark=- late=0 errors=0",
    ]


def test_render_plain_without_previous_or_elapsed_has_no_rates() -> None:
    current = hand_metrics()
    for previous, elapsed in ((None, 1.0), (hand_metrics(), 0.0)):
        lines = render_plain(current, previous, elapsed)
        assert lines[1] == "j/map: in=100 (-/s) out=50 (-/s) queue=3/8 watermark=- late=3 errors=2"


def test_render_plain_counts_an_operator_missing_from_previous_as_having_no_rate() -> None:
    previous = hand_metrics()
    del previous.operators["map"]
    assert "in=100 (-/s)" in render_plain(hand_metrics(), previous, 1.0)[1]


def test_format_watermark() -> None:
    assert format_watermark(None) == "-"
    assert format_watermark(EVENT_TIME_MAX) == "max"
    assert format_watermark(0) == "0.000s"
    assert format_watermark(1_732_233_600_123_456_789) == "1732233600.123s"
    assert format_watermark(-1_250_000_000) == "-1.250s"
    assert format_watermark(2_500, "ms") == "2.500s"
    assert format_watermark(7, "us") == "0.000s"
    with pytest.raises(ValueError, match=r"watermark resolution 's': expected 'ns', 'us' or 'ms'"):
        format_watermark(1, "s")


def test_copy_metrics_does_not_follow_later_updates() -> None:
    live = hand_metrics()
    copy = copy_metrics(live)
    live.operators["map"].inputs[0].tuples_processed += 1000
    live.operators["map"].queue_size = 7
    assert copy.operators["map"].inputs[0].tuples_processed == 60
    assert copy.operators["map"].queue_size == 3
    assert copy == hand_metrics()


# ---------------------------------------------------------------------------- status view: a real job


def test_status_view_renders_a_real_job_with_rates() -> None:
    job, clock = tiny_job()
    view = StatusView(job, stream=io.StringIO())
    assert view.render(0.0) == [
        "t/gen: in=- (-/s) out=0 (-/s) queue=0/8 watermark=- late=0 errors=0",
        "t/out: in=0 (-/s) out=- (-/s) queue=0/8 watermark=- late=0 errors=0",
    ]
    run_virtual(job.run(), clock)
    assert view.render(2.0) == [
        "t/gen: in=- (-/s) out=10 (5.0/s) queue=0/8 watermark=- late=0 errors=0",
        "t/out: in=10 (5.0/s) out=- (-/s) queue=0/8 watermark=- late=0 errors=0",
    ]


def test_status_view_beside_a_job_prints_its_final_counts_when_cancelled() -> None:
    job, clock = tiny_job()
    stream = io.StringIO()
    view = StatusView(job, interval=1.0, stream=stream)

    async def main() -> None:
        task = asyncio.create_task(view.run())
        await job.run()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run_virtual(main(), clock)
    lines = stream.getvalue().splitlines()
    assert [line.split(":")[0] for line in lines] == ["t/gen", "t/out"]
    assert "out=10" in lines[0]
    assert "in=10" in lines[1]


def test_status_view_off_a_terminal_prints_plain_lines_every_interval() -> None:
    fake = FakeJob()
    stream = io.StringIO()
    view = StatusView(fake, interval=1.0, stream=stream)
    assert not view.is_terminal

    async def main() -> None:
        task = asyncio.create_task(view.run())
        for scale in (3, 5):  # the counts grow by 2x per virtual second
            await asyncio.sleep(0.5)
            fake.scale = scale
            await asyncio.sleep(0.5)
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run_virtual(main())
    text = stream.getvalue()
    assert "\x1b" not in text
    lines = text.splitlines()
    assert len(lines) == 9  # renders at t=1, t=2 and on cancellation at t=2.5, three operators each
    assert lines[1] == "j/map: in=300 (200.0/s) out=150 (100.0/s) queue=3/8 watermark=1.500s late=9 errors=2"
    assert lines[4] == "j/map: in=500 (200.0/s) out=250 (100.0/s) queue=3/8 watermark=1.500s late=15 errors=2"
    assert lines[7] == "j/map: in=500 (0.0/s) out=250 (0.0/s) queue=3/8 watermark=1.500s late=15 errors=2"


class TerminalStream(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_status_view_on_a_terminal_draws_a_table() -> None:
    stream = TerminalStream()
    view = StatusView(FakeJob(), interval=1.0, stream=stream)
    assert view.is_terminal

    async def main() -> None:
        task = asyncio.create_task(view.run())
        await asyncio.sleep(1.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run_virtual(main())
    text = stream.getvalue()
    for word in ("job j", "operator", "watermark", "src", "map", "sink", "3/8", "1.500s"):
        assert word in text


def test_status_view_rejects_a_bad_interval() -> None:
    with pytest.raises(ValueError, match=r"status interval 0: expected a number of seconds > 0"):
        StatusView(FakeJob(), interval=0)


# ---------------------------------------------------------------------------- prometheus


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        body: bytes = response.read()
        return body.decode()


def test_prometheus_endpoint_serves_the_job_metrics_with_labels() -> None:
    job, clock = tiny_job()
    run_virtual(job.run(), clock)
    server = serve_metrics(job, 0)
    try:
        assert server.host == "127.0.0.1"
        assert server.port > 0
        text = scrape(f"http://127.0.0.1:{server.port}/metrics")
    finally:
        server.close()
    samples = [line for line in text.splitlines() if not line.startswith("#")]
    for sample in (
        'riverbed_tuples_processed_total{job="t",operator="out",port="0"} 10.0',
        'riverbed_tuples_submitted_total{job="t",operator="gen",port="0"} 10.0',
        'riverbed_window_puncts_processed_total{job="t",operator="out",port="0"} 0.0',
        'riverbed_final_puncts_processed_total{job="t",operator="out",port="0"} 1.0',
        'riverbed_late_tuples_total{job="t",operator="out",port="0"} 0.0',
        'riverbed_errors_total{job="t",operator="out",port="0"} 0.0',
        'riverbed_queue_size{job="t",operator="out"} 0.0',
        'riverbed_queue_capacity{job="t",operator="out"} 8.0',
    ):
        assert sample in samples
    assert "# TYPE riverbed_tuples_processed_total counter" in text
    assert "# TYPE riverbed_watermark gauge" in text
    assert not any(s.startswith("riverbed_watermark{") for s in samples)  # no watermark in this job


def test_prometheus_reads_the_metrics_at_each_scrape() -> None:
    fake = FakeJob()
    with serve_metrics(fake, 0) as server:
        first = scrape(server.url)
        fake.scale = 2
        second = scrape(server.url)
    assert fake.calls == 2
    assert 'riverbed_tuples_processed_total{job="j",operator="map",port="1"} 40.0' in first
    assert 'riverbed_tuples_processed_total{job="j",operator="map",port="1"} 80.0' in second
    assert 'riverbed_late_tuples_total{job="j",operator="map",port="1"} 4.0' in second
    assert 'riverbed_watermark{job="j",operator="map"} 1.5e+09' in second


def test_a_broken_scrape_prints_no_traceback_among_the_logs(capfd: pytest.CaptureFixture[str]) -> None:
    """A request with too many headers (or one reset mid-way) made socketserver print its
    traceback on stderr: plain text among JSON logs, from any local client (a review)."""
    import socket
    import struct

    with serve_metrics(FakeJob(), 0) as server:
        for _ in range(5):
            conn = socket.create_connection(("127.0.0.1", server.port))
            headers = "".join(f"X-{i}: {i}\r\n" for i in range(150))
            conn.sendall(f"GET /metrics HTTP/1.1\r\nHost: x\r\n{headers}\r\n".encode())
            conn.recv(20)  # the answer's start (refused), then a reset
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()
            assert "riverbed_tuples_processed_total" in scrape(server.url)  # it serves on
    assert "Traceback" not in capfd.readouterr().err


def test_prometheus_server_stops_on_close() -> None:
    server = serve_metrics(FakeJob(), 0)
    url = server.url
    server.close()
    server.close()  # a second close is a no-op
    with pytest.raises(urllib.error.URLError):
        scrape(url)


def test_prometheus_port_in_use_is_a_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match=rf"metrics endpoint 127.0.0.1:{port}: .*choose another port"):
            serve_metrics(FakeJob(), port)


def test_prometheus_rejects_a_bad_port() -> None:
    with pytest.raises(ValueError, match=r"metrics port 70000: expected 0..65535"):
        serve_metrics(FakeJob(), 70000)


def test_operator_counters_show_in_the_status_line_and_in_prometheus() -> None:
    import urllib.request

    from riverbed.graph import Graph, Operator, Source
    from riverbed.runtime import Job, VirtualClock, render_plain, run_virtual, serve_metrics

    class Gen(Source):
        def generate(self) -> Any:
            return iter([{"v": 1}, {"v": -1}, {"v": 2}])

    class Check(Operator):
        def on_tuple(self, tup: Any, port: int) -> None:
            if tup["v"] < 0:
                self.context.counter("negative").inc()  # type: ignore[attr-defined]

    g = Graph("own")
    g.sink("check", Check(), [g.source("gen", Gen())])
    job = Job(g, clock=VirtualClock())
    run_virtual(job.run(), job.clock)  # type: ignore[arg-type]
    lines = render_plain(job.snapshot_metrics(), None, 0.0)
    assert any(line.startswith("own/check:") and line.endswith("negative=1") for line in lines)
    with serve_metrics(job, 0) as server:
        body = urllib.request.urlopen(server.url, timeout=10).read().decode()
    assert 'riverbed_operator_events_total{job="own",name="negative",operator="check"} 1.0' in body


def test_a_scrape_while_an_operator_adds_counters_does_not_fail() -> None:
    """An operator adds counters on the job's loop (riverbed's MQTT operators do, lazily) while
    the endpoint's thread scrapes: iterating the live dict failed ("dictionary changed size
    during iteration"), an HTTP 500 and a traceback on stderr."""
    import threading

    from prometheus_client import CollectorRegistry, generate_latest

    from riverbed.core import Counter
    from riverbed.runtime._prometheus import JobCollector

    metrics = hand_metrics()
    counters = metrics.operators["map"].counters

    class Live:
        def snapshot_metrics(self) -> JobMetrics:
            return metrics

    registry = CollectorRegistry()
    registry.register(JobCollector(Live()))
    adding = threading.Event()
    done = threading.Event()

    def add() -> None:
        adding.set()
        for i in range(200_000):
            counters[f"c{i}"] = Counter()
        done.set()

    threading.Thread(target=add, daemon=True).start()
    adding.wait()
    scrapes = 0
    while not done.is_set() or scrapes == 0:
        generate_latest(registry)  # raised RuntimeError before
        scrapes += 1
    assert scrapes > 0
