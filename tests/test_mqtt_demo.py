"""The MQTT sensor demo (examples/sensors_mqtt.py, riverbed.mqtt.demo), event time from sensor
readings through a real broker, and the broker helper's fallbacks (riverbed.mqtt._broker).

Real I/O on the wall clock; nothing sleeps for a fixed time: the demo ends on the publisher's
end-of-stream record, the event-time graph after ``max_records``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import runpy
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from riverbed.graph import Graph, Schema
from riverbed.mqtt import ClientConfig, MQTTClient, MQTTSource
from riverbed.mqtt import _broker as broker_mod
from riverbed.operators import Aggregate, Average, Count, Max
from riverbed.operators._aggregate_functions import IntervalEnd, IntervalStart, PaneTimingOf
from riverbed.runtime import Job, JobMetrics
from riverbed.testing import ListSink

from .mqtt_broker import Broker, broker

__all__ = ["broker"]  # the fixture, imported for pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "sensors_mqtt.py"
S = 1_000_000_000
BASE = 1_800_000_000 * S  # a multiple of the 5 s creation period


def _build(params: dict[str, Any]) -> Graph:
    build = runpy.run_path(str(EXAMPLE), run_name="__riverbed_graph__")["build"]
    graph = build(params)
    assert isinstance(graph, Graph)
    return graph


def _run_job(graph: Graph, timeout: float = 60) -> tuple[Job, JobMetrics]:
    async def main() -> tuple[Job, JobMetrics]:
        job = Job(graph)
        return job, await asyncio.wait_for(job.run(), timeout)

    return asyncio.run(main())


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# ------------------------------------------------------------------ the demo graph


def test_demo_graph_publishes_ingests_windows_and_alerts_then_ends_on_its_own(
        broker: Broker, tmp_path: Path) -> None:
    sensors, rate, seconds = 6, 10, 3
    graph = _build({"host": broker.host, "port": broker.port, "seconds": seconds, "sensors": sensors,
                    "sites": 2, "rate": rate, "late": 0.05, "threshold": 0.0,  # every pane is "hot"
                    "out": str(tmp_path / "alerts.jsonl"), "panes": str(tmp_path / "panes.jsonl")})
    _, metrics = _run_job(graph)
    ops = metrics.operators
    readings = sensors * rate * seconds
    assert ops["sensors"].outputs[0].tuples_submitted == readings + 1  # + the end-of-stream record
    assert ops["feed"].outputs[0].tuples_submitted == readings  # all arrived, the marker is not passed on
    assert ops["panes"].inputs[0].tuples_processed == readings
    panes = _lines(tmp_path / "panes.jsonl")
    alerts = _lines(tmp_path / "alerts.jsonl")
    assert panes and {p["timing"] for p in panes} <= {"ON_COMPLETE", "LATE"}
    assert {p["sensor"] for p in panes} == {f"sensor-{i:03d}" for i in range(sensors)}
    assert {p["site"] for p in panes} == {"site0", "site1"}  # from the topic level
    for p in panes:
        assert p["end"] - p["start"] == 10 * S and p["start"] % (5 * S) == 0
        assert p["readings"] >= 1 and p["max"] >= p["avg"]
    on_time = [p for p in panes if p["timing"] == "ON_COMPLETE"]
    assert len({(p["sensor"], p["start"]) for p in on_time}) == len(on_time)  # one on-time result each
    hot = [a for a in alerts if a["kind"] == "hot"]
    assert len(hot) == len(on_time)  # threshold 0: every on-time pane alerts, late ones do not
    late_dropped = ops["panes"].inputs[0].tuples_dropped_late
    assert 0 <= late_dropped < readings


def test_demo_command_starts_a_broker_runs_the_graph_and_stops_the_broker(tmp_path: Path) -> None:
    if broker_mod.mosquitto_path() is None:
        pytest.skip("mosquitto not installed (run scripts/install_broker.sh)")
    out, panes = tmp_path / "alerts.jsonl", tmp_path / "panes.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "riverbed.mqtt.demo", "--broker", "mosquitto", "--",
         "-p", "seconds=2", "-p", "sensors=4", "-p", "rate=10", "-p", f"out={out}", "-p", f"panes={panes}",
         "--no-status"], cwd=ROOT, capture_output=True, text=True, timeout=90, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "mosquitto broker on 127.0.0.1:" in proc.stderr
    assert out.exists() and _lines(panes)


@pytest.mark.parametrize(("sig", "group"), [(signal.SIGINT, False), (signal.SIGTERM, False),
                                           (signal.SIGHUP, False), (signal.SIGINT, True),
                                           (signal.SIGTERM, True)])
def test_a_stop_signal_sent_to_the_demo_stops_the_job_once_then_the_broker(
        tmp_path: Path, sig: signal.Signals, group: bool) -> None:
    """``kill -INT <pid>`` (a process manager, a script) reached only the demo's process, not
    the job it runs, and was ignored; ``kill -INT -<pgid>`` (systemd, ``timeout``) reached both,
    and the demo passing it on made it the job's second signal, which aborts. The job runs in a
    group of its own now: each signal reaches it once, a hangup as SIGTERM (a SIGHUP ended it
    without draining), and it stops as after a Ctrl-C."""
    if broker_mod.mosquitto_path() is None:
        pytest.skip("mosquitto not installed (run scripts/install_broker.sh)")
    out, panes = tmp_path / "alerts.jsonl", tmp_path / "panes.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "riverbed.mqtt.demo", "--broker", "mosquitto", "--",
         "-p", "seconds=600", "-p", "sensors=4", "-p", "rate=10", "-p", f"out={out}",
         "-p", f"panes={panes}", "--no-status", "--log-format", "json"],
        cwd=ROOT, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stderr is not None
        seen: list[str] = []
        deadline = time.monotonic() + 60
        while not any('"job started"' in line for line in seen):  # the job is running
            ready, _, _ = select.select([proc.stderr], [], [], max(0.0, deadline - time.monotonic()))
            line = proc.stderr.readline() if ready else ""
            assert line, f"the job did not start: {''.join(seen)}"
            seen.append(line)
        port = int(re.search(r"broker on 127\.0\.0\.1:(\d+)", "".join(seen)).group(1))  # type: ignore[union-attr]
        if group:
            os.killpg(proc.pid, sig)  # the demo's process group (it leads a session of its own)
        else:
            os.kill(proc.pid, sig)  # the demo's process alone
        rest = proc.communicate(timeout=60)[1]
    finally:
        if proc.poll() is None:  # it failed: the demo stops its broker on SIGTERM
            proc.send_signal(signal.SIGTERM)
            try:
                proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert proc.returncode == 0, rest
    finished = next(json.loads(line) for line in rest.splitlines() if '"job finished"' in line)
    assert finished["stopped"] is True
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=5):
        pass  # the broker was stopped after the job


# ------------------------------------------------------------------ event time from sensors

READING = Schema(sensor="rstring", temp="float64", ts="timestamp")


def test_sensor_timestamps_are_event_time_and_late_readings_follow_the_pane_rules(broker: Broker) -> None:
    """10 s panes every 5 s, discardAge(5), lag 0: readings published out of order. A reading
    behind the watermark but within discardAge re-triggers its complete pane (LATE); one behind
    the drop point (watermark - discardAge) is dropped and counted."""
    order = [(101, 1.0), (103, 3.0), (112, 12.0),  # watermark 112: [95,105) and [100,110) complete
             (108, 8.0),   # drop point 107: kept; [100,110) is complete, so it fires again, LATE
             (104, 4.0),   # 104 < 107: dropped, counted as late
             (131, 31.0)]  # watermark 131: [105,115) and [110,120) complete; the rest at final
    src = MQTTSource(broker.host, broker.port, topics=["sensors/+/temp"], schema=READING,
                     topic_attribute=None, max_records=len(order))
    g = Graph("event_time")
    feed = g.source("feed", src, schema=READING, event_time="ts", lag=0.0, minimum_gap=0.0)
    window = feed.window("timeInterval, intervalDuration(10), creationPeriod(5), discardAge(5), partitioned",
                         partition_by="sensor")
    panes = g.operator("panes", Aggregate({"avg": Average("temp"), "max": Max("temp"), "n": Count(),
                                           "start": IntervalStart(), "end": IntervalEnd(),
                                           "timing": PaneTimingOf()}, copy=("sensor",)), [window], [None])
    sink = ListSink()
    g.sink("out", sink, [panes])

    async def main() -> JobMetrics:
        task = asyncio.create_task(Job(g).run())
        await asyncio.wait_for(src.subscribed.wait(), 30)
        async with MQTTClient(ClientConfig(broker.host, broker.port)) as pub:
            for t, temp in order:  # one connection, QoS 1, each awaited: the broker keeps the order
                await pub.publish("sensors/a/temp", orjson.dumps({"sensor": "a", "temp": temp,
                                                                  "ts": BASE + t * S}), 1)
        return await asyncio.wait_for(task, 30)

    metrics = asyncio.run(main())
    got = sorted(((p["start"] - BASE) // S, (p["end"] - BASE) // S, p["timing"].name, p["n"], p["avg"],
                  p["max"]) for p in sink.tuples)
    assert got == sorted([
        (95, 105, "ON_COMPLETE", 2, 2.0, 3.0),
        (100, 110, "ON_COMPLETE", 2, 2.0, 3.0),
        (100, 110, "LATE", 3, 4.0, 8.0),          # 1, 3 and the late 8; never the dropped 4
        (105, 115, "ON_COMPLETE", 2, 10.0, 12.0),  # 112 and the late 108
        (110, 120, "ON_COMPLETE", 1, 12.0, 12.0),
        (125, 135, "ON_COMPLETE", 1, 31.0, 31.0),  # flushed by the maximum watermark before final
        (130, 140, "ON_COMPLETE", 1, 31.0, 31.0),
    ])
    port = metrics.operators["panes"].inputs[0]
    assert port.tuples_processed == len(order)
    assert port.tuples_dropped_late == 1


# ------------------------------------------------------------------ the broker helper


def test_no_broker_at_all_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(broker_mod, "mosquitto_path", lambda: None)
    monkeypatch.setattr(broker_mod, "amqtt_available", lambda: False)
    with pytest.raises(broker_mod.BrokerUnavailable, match=r"apt-get install -y mosquitto.*embedded-broker"):
        broker_mod.start_broker()


@pytest.mark.skipif(importlib.util.find_spec("amqtt") is None,
                    reason="amqtt not installed: pip install 'riverbed[embedded-broker]'")
def test_embedded_amqtt_fallback_starts_and_round_trips(monkeypatch: pytest.MonkeyPatch,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(broker_mod, "mosquitto_path", lambda: None)  # as on a machine without it
    with caplog.at_level("WARNING", logger="riverbed.mqtt.broker"), broker_mod.start_broker() as b:
        assert b.kind == "amqtt" and b.host == "127.0.0.1"
        assert "no mosquitto binary found" in caplog.text and "MQTT 3.1.1 only" in caplog.text

        async def round_trip() -> list[bytes]:
            async with MQTTClient(ClientConfig(b.host, b.port), subscriptions=[("sensors/#", 1)]) as sub:
                async with MQTTClient(ClientConfig(b.host, b.port)) as pub:
                    await pub.publish("sensors/a/temp", b'{"t": 1}', 1)
                    await pub.publish("sensors/b/temp", b'{"t": 2}', 0)
                got: list[bytes] = []
                while len(got) < 2:
                    msgs = await sub.receive(10)
                    assert msgs, "nothing received from amqtt within 10 s"
                    got += [m.payload for m in msgs]
                return got

        assert asyncio.run(round_trip()) == [b'{"t": 1}', b'{"t": 2}']
    assert b.proc is None and not b.workdir.exists()


@pytest.mark.parametrize(("param", "message"), [
    ("rate=0", "-p rate=0: expected readings a second, > 0"),
    ("sites=0", "-p sites=0: expected a number >= 1"),
    ("sensors=-1", "-p sensors=-1: expected a number >= 0"),
])
def test_the_demo_refuses_parameters_it_cannot_run_with(param: str, message: str) -> None:
    """``rate=0`` ended the job with a ZeroDivisionError in an operator (exit 1), ``sites=0``
    with a modulo by zero: the parameters are checked when the graph is built (exit 2)."""
    from riverbed.run import run

    said: list[str] = []
    assert run(str(EXAMPLE), params=[param], status=False, echo=said.append) == 2
    assert message in said[0]
