"""The console's server and sampler over real HTTP on 127.0.0.1 (the page: test_console_browser.py)."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from riverbed.console import ConsoleError, Sampler, format_watermark, parse_address, serve_console, view_of
from riverbed.core import InputPortMetrics, JobMetrics, OperatorMetrics, OutputPortMetrics, RegionMetrics
from riverbed.graph import Graph, Operator, Source
from riverbed.run import load_graph, run
from riverbed.runtime import Job
from riverbed.runtime._parallel import ChannelMetrics  # the records Job.channel_metrics() returns
from riverbed.windows import EVENT_TIME_MAX

pytestmark = pytest.mark.skipif(shutil.which("dot") is None,  # the page's drawing needs the layout
                                reason="no Graphviz dot (scripts/install_console_deps.sh installs it)")
ROOT = Path(__file__).resolve().parent.parent
SENSORS = ROOT / "examples" / "sensors.py"


def _get(url: str) -> tuple[int, dict[str, str], bytes]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status, dict(response.headers), response.read()


@pytest.fixture
def sensors_job(tmp_path: Path) -> Job:
    return Job(load_graph(SENSORS, {"sensors": 3, "out": str(tmp_path / "a.jsonl")}))


def test_parse_address() -> None:
    assert parse_address("8080") == ("127.0.0.1", 8080)
    assert parse_address(":0") == ("127.0.0.1", 0)
    assert parse_address("0.0.0.0:9000") == ("0.0.0.0", 9000)
    assert parse_address("[::1]:9000") == ("::1", 9000)
    for bad, why in (("http", "expected \\[HOST:\\]PORT"), ("70000", "not a TCP port"),
                     ("::1:80", "IPv6 host in brackets")):
        with pytest.raises(ConsoleError, match=why):
            parse_address(bad)


def test_routes_serve_the_page_its_assets_the_drawing_and_the_graph(sensors_job: Job) -> None:
    with serve_console(sensors_job, sensors_job.graph, "127.0.0.1:0") as server:
        assert server.url == f"http://127.0.0.1:{server.port}/" and server.port > 0
        status, headers, page = _get(server.url)
        assert status == 200 and headers["Content-Type"].startswith("text/html")
        assert b'<script src="/assets/console.js"' in page
        assert b"http://" not in page and b"https://" not in page  # nothing fetched from elsewhere
        for name, kind in (("console.js", "text/javascript"), ("console.css", "text/css")):
            status, headers, body = _get(server.url + "assets/" + name)
            assert headers["Content-Type"].startswith(kind) and body
            assert b"https://" not in body
        _, headers, svg = _get(server.url + "graph.svg")
        assert headers["Content-Type"].startswith("image/svg+xml")
        for i in range(4):  # every operator has the lines the page fills in
            assert f'id="op-{i}-rates"'.encode() in svg and f'id="op-{i}-state"'.encode() in svg
        _, _, graph = _get(server.url + "api/graph")
        described = json.loads(graph)
        assert described["job"] == "sensors"
        assert [o["name"] for o in described["operators"]] == ["sensors", "average", "alerts", "file"]
        with pytest.raises(urllib.error.HTTPError) as missing:
            _get(server.url + "assets/index.py")
        assert missing.value.code == 404


def test_events_push_samples_while_no_page_costs_only_the_sampling(sensors_job: Job) -> None:
    with serve_console(sensors_job, sensors_job.graph, "127.0.0.1:0", interval=0.05) as server:
        assert server.pages == 0
        with urllib.request.urlopen(server.url + "events", timeout=10) as stream:
            assert stream.headers["Content-Type"] == "text/event-stream"
            events: list[dict[str, Any]] = []
            data = b""
            while len(events) < 3:
                line = stream.readline()
                if line.startswith(b"data: "):
                    data = line[6:]
                elif line == b"\n" and data:
                    events.append(json.loads(data))
                    data = b""
            assert server.pages == 1
        assert [set(e["operators"]) for e in events] == [{"sensors", "average", "alerts", "file"}] * 3
        assert events[0]["t"] < events[1]["t"] < events[2]["t"]
        _, _, history = _get(server.url + "api/history")
        assert len(json.loads(history)["samples"]) >= 3


def test_a_taken_port_is_a_console_error_and_close_frees_the_port(sensors_job: Job) -> None:
    server = serve_console(sensors_job, sensors_job.graph, "127.0.0.1:0")
    port = server.port
    with pytest.raises(ConsoleError, match=f"cannot serve on 127.0.0.1:{port}"):
        serve_console(sensors_job, sensors_job.graph, f"127.0.0.1:{port}")
    server.close()
    server.close()  # twice is a no-op
    with socket.create_server(("127.0.0.1", port)):
        pass


def test_run_with_a_bad_console_address_exits_2_at_once_before_the_graph_loads(tmp_path: Path) -> None:
    loaded = tmp_path / "loaded"
    script = tmp_path / "graph.py"
    script.write_text("from pathlib import Path\n\n\ndef build(params):\n"
                      f"    Path({str(loaded)!r}).touch()\n    raise RuntimeError('the graph was loaded')\n")
    for bad, why in (("nowhere", "'nowhere': expected [HOST:]PORT, such as 8080 or 0.0.0.0:8080"),
                     ("localhost:99999", "'localhost:99999': port 99999 is not a TCP port (0 to 65535; "
                                         "0 picks a free one)")):
        said: list[str] = []
        code = run(str(script), status=False, console=bad, echo=said.append)
        assert code == 2
        assert said == [f"riverbed run: --console {bad}: {why}"]  # one line, and nothing else
        assert not loaded.exists()
    with socket.create_server(("127.0.0.1", 0)) as taken:  # a port another server holds
        number = taken.getsockname()[1]
        said = []
        code = run(str(script), status=False, console=f"127.0.0.1:{number}", echo=said.append)
        assert code == 2 and len(said) == 1, said
        assert said[0].startswith(f"riverbed run: --console 127.0.0.1:{number}: cannot serve on "
                                  f"127.0.0.1:{number}: ")
        assert said[0].endswith("choose another port, or 0 for any free one")
        assert not loaded.exists()
    # A host this machine does not have, with port 0 (any port): refused before the script
    # loads too, and the hint is about the host, not the port.
    for host in ("192.0.2.1", "nosuchhost.invalid"):
        said = []
        code = run(str(script), status=False, console=f"{host}:0", echo=said.append)
        assert code == 2 and len(said) == 1, said
        assert said[0].endswith("give an address of this machine (127.0.0.1 by default)"), said
        assert not loaded.exists()


def test_a_bad_console_address_with_json_logs_is_a_json_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "graph.py"
    script.write_text("def build(params):\n    raise RuntimeError('the graph was loaded')\n")
    code = run(str(script), status=False, console="abc", log_format="json")
    assert code == 2
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [line["event"] for line in lines] == ["riverbed run"]
    assert "--console abc" in lines[0]["message"]


def test_run_serves_the_console_while_the_job_runs_and_stops_it_after(tmp_path: Path) -> None:
    port = socket.create_server(("127.0.0.1", 0))
    number = port.getsockname()[1]
    port.close()
    code = run(str(SENSORS), params=["sensors=2", "rate=100", "seconds=0.2", f"out={tmp_path / 'a.jsonl'}"],
               status=False, console=f"127.0.0.1:{number}", virtual_clock=True)
    assert code == 0
    with socket.create_server(("127.0.0.1", number)):  # released when the job ended
        pass


# ----------------------------------------------------------------------------- sampler


class _Source:
    name = "job"

    def __init__(self) -> None:
        source = OperatorMetrics("src", outputs=[OutputPortMetrics()], queue_capacity=16)
        sink = OperatorMetrics("sink", inputs=[InputPortMetrics()], queue_capacity=16)
        self.metrics = JobMetrics("job", {"src": source, "sink": sink}, {"": RegionMetrics("")})

    def snapshot_metrics(self) -> JobMetrics:
        return self.metrics


def test_sampler_rates_are_differences_over_the_time_between_samples(tmp_path: Path) -> None:
    source = _Source()
    view = view_of(load_graph(SENSORS, {"out": str(tmp_path / "a.jsonl")}))
    sampler = Sampler(source, view, history=3)
    first = sampler.sample(now=10.0)
    assert first["operators"]["sink"]["in_rate"] is None  # nothing to compare with yet
    source.metrics.operators["src"].outputs[0].tuples_submitted = 500
    source.metrics.operators["sink"].inputs[0].tuples_processed = 400
    source.metrics.operators["sink"].inputs[0].tuples_dropped_late = 7
    source.metrics.operators["sink"].backpressure_waits = 3
    source.metrics.operators["sink"].queue_size = 12
    second = sampler.sample(now=12.0)
    src, sink = second["operators"]["src"], second["operators"]["sink"]
    assert src["out_rate"] == 250.0 and src["in_rate"] is None  # a source has no input rate
    assert sink["in_rate"] == 200.0 and sink["out_rate"] is None
    assert second["streams"] == {"src.0": 250.0}
    assert (sink["late"], sink["waits_rate"], sink["queue"], sink["capacity"]) == (7, 1.5, 12, 16)
    for now in (13.0, 14.0):
        sampler.sample(now=now)
    samples = sampler.history()["samples"]
    assert len(samples) == 3  # the oldest dropped
    # Whole only the newest: the older ones hold what the page plots (600 whole samples of an
    # 800-operator graph took 600 MB).
    assert samples[-1] is sampler.latest and "streams" in samples[-1]
    assert [set(s) for s in samples[:-1]] == [{"t", "operators"}] * 2
    assert samples[0]["operators"]["sink"] == {"in_rate": 200.0, "out_rate": None, "queue": 12,
                                               "waits_rate": 1.5}


def test_sampler_keeps_a_checkpoint_and_reset_history(tmp_path: Path) -> None:
    source = _Source()
    sampler = Sampler(source, view_of(load_graph(SENSORS, {"out": str(tmp_path / "a.jsonl")})))
    assert sampler.sample(now=0.0)["checkpoints"] == []
    region = source.metrics.regions[""]
    region.last_committed, region.checkpoints, region.drain_ms, region.checkpoint_ms = 4, 4, 1.5, 2.25
    events = sampler.sample(now=1.0)["checkpoints"]
    assert [(e["kind"], e["region"], e["id"], e["count"], e["save_ms"]) for e in events] == \
        [("checkpoint", "job", 4, 4, 2.25)]
    assert sampler.sample(now=2.0)["checkpoints"] == []  # nothing new
    region.resets, region.last_recovery_ms = 1, 80.0
    events = sampler.sample(now=3.0)["checkpoints"]
    assert [(e["kind"], e["count"], e["recovery_ms"]) for e in events] == [("reset", 1, 80.0)]
    assert [e["kind"] for e in sampler.history()["checkpoints"]] == ["checkpoint", "reset"]


class _ParallelSource(_Source):
    """A job with one parallel region of two channels, as `Job.channel_metrics` gives them."""

    def __init__(self) -> None:
        super().__init__()
        self.channels = [ChannelMetrics("byk", 0, pid=101, alive=True, capacity=4),
                         ChannelMetrics("byk", 1, pid=102, alive=True, capacity=4)]

    def channel_metrics(self) -> list[ChannelMetrics]:
        return self.channels


def test_sampler_gives_each_channel_of_a_parallel_region_with_its_rates(tmp_path: Path) -> None:
    source = _ParallelSource()
    sampler = Sampler(source, view_of(load_graph(SENSORS, {"out": str(tmp_path / "a.jsonl")})))
    first = sampler.sample(now=0.0)["channels"]
    assert [(c["region"], c["channel"], c["pid"], c["in_rate"]) for c in first] == [
        ("byk", 0, 101, None), ("byk", 1, 102, None)]  # nothing to compare with yet
    ch0, ch1 = source.channels
    ch0.tuples_in, ch0.tuples_out, ch0.batches_in_flight, ch0.backpressure_waits = 300, 280, 3, 2
    ch1.tuples_in, ch1.tuples_out = 100, 100
    ch1.alive, ch1.finished = False, True
    second = sampler.sample(now=2.0)["channels"]
    assert [(c["in"], c["in_rate"], c["out"], c["out_rate"], c["in_flight"], c["capacity"], c["waits_rate"])
            for c in second] == [(300, 150.0, 280, 140.0, 3, 4, 1.0), (100, 50.0, 100, 50.0, 0, 4, 0.0)]
    assert (second[1]["alive"], second[1]["finished"]) == (False, True)
    ch0.kind, ch0.cpu_seconds, ch0.worker_messages, ch0.worker_writes = "process", 1.5, 40, 3
    third = sampler.sample(now=3.0)["channels"][0]  # what the status view and Prometheus show
    assert (third["kind"], third["cpu_seconds"], third["messages"], third["writes"]) == \
        ("process", 1.5, 40, 3)
    assert sampler.history()["samples"][-1]["channels"][1]["kind"] == "channel"
    assert Sampler(_Source(), sampler.view).sample(now=0.0)["channels"] == []  # a job without regions


class _Readings(Source):
    def generate(self) -> Any:
        for i in range(400):
            yield {"k": f"s{i % 7}", "v": i}


class _Pass(Operator):
    def on_tuple(self, tup: Any, port: int) -> None:
        self.submit(tup)


class _Count(Operator):
    def __init__(self) -> None:
        self.seen = 0

    def on_tuple(self, tup: Any, port: int) -> None:
        self.seen += 1


def test_the_console_of_a_parallel_job_draws_its_channels_and_serves_their_metrics() -> None:
    g = Graph("fanout")
    src = g.source("src", _Readings(), schema={"k": "rstring", "v": "int64"})
    with g.parallel(2, partition_by="k", name="byk"):
        mid = g.operator("mid", _Pass(), [src])
    sink = _Count()
    g.sink("out", sink, [mid])
    job = Job(g.freeze())
    asyncio.run(job.run())
    assert sink.seen == 400
    with serve_console(job, job.graph, "127.0.0.1:0", interval=0.05) as server:
        _, _, graph = _get(server.url + "api/graph")
        assert json.loads(graph)["parallel"] == [{"name": "byk", "width": 2, "partition_by": "k",
                                                  "members": ["mid"], "process": False}]
        assert json.loads(graph)["operators"][1]["parallel"] == "byk"
        _, _, svg = _get(server.url + "graph.svg")
        assert b'id="par-0-channels"' in svg and b"parallel region byk (2 channels, by k)" in svg
        with urllib.request.urlopen(server.url + "events", timeout=10) as stream:
            while not (line := stream.readline()).startswith(b"data: "):
                pass
        channels = json.loads(line[6:])["channels"]
    pids = [m.pid for m in job.channel_metrics()]
    assert [(c["region"], c["channel"], c["pid"], c["finished"]) for c in channels] == [
        ("byk", 0, pids[0], True), ("byk", 1, pids[1], True)]
    assert sum(c["in"] for c in channels) == sum(c["out"] for c in channels) == 400
    assert all(c["in"] > 0 for c in channels)  # seven keys over two channels


def test_watermarks_are_formatted_exactly_in_integers() -> None:
    assert format_watermark(None) == "-"
    assert format_watermark(EVENT_TIME_MAX) == "max"
    assert format_watermark(1_795_000_000_123_456_789) == "1795000000.123s"
    assert format_watermark(1_500, "ms") == "1.500s"
