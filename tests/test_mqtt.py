"""MQTTSource / MQTTSink against a real mosquitto (tests/mqtt_broker.py), through real graphs.

The broker is real I/O, so these jobs run on the wall clock. None of them sleeps for a
fixed time: sources end after ``max_records`` tuples, and the tests wait on events
(subscribed, reconnected, process exit).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgpack
import orjson
import pytest

from riverbed.graph import Graph, Operator, Schema
from riverbed.mqtt import (
    TLS,
    BadMessage,
    ClientConfig,
    Codec,
    MQTTClient,
    MQTTConfigError,
    MQTTConnectError,
    MQTTSink,
    MQTTSource,
)
from riverbed.runtime import Job, JobMetrics
from riverbed.testing import ListSink, ListSource
from riverbed.windows import EventType, StreamWindowEvent

from .mqtt_broker import Broker, broker, start_broker

__all__ = ["broker"]  # the fixture, imported for pytest

ROOT = Path(__file__).resolve().parent.parent
READING = Schema(sensor="rstring", seq="int64", temp="float64", topic="rstring")


async def _publish(port: int, messages: list[tuple[str, bytes]], qos: int = 1) -> None:
    async with MQTTClient(ClientConfig("127.0.0.1", port)) as client:
        for topic, payload in messages:
            await client.publish(topic, payload, qos)


def _run(graph: Graph, source: MQTTSource, feed: Callable[[], Awaitable[None]],
         timeout: float = 30) -> JobMetrics:
    """Run ``graph`` on the wall clock; ``feed`` runs once ``source`` has subscribed."""
    async def main() -> JobMetrics:
        job = Job(graph)
        task = asyncio.create_task(job.run())
        waiter = asyncio.create_task(source.subscribed.wait())
        done, _ = await asyncio.wait({task, waiter}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            waiter.cancel()
            return task.result()  # it ended (or failed) before subscribing
        try:
            await asyncio.wait_for(feed(), timeout)
        except BaseException:
            task.cancel()
            raise
        return await asyncio.wait_for(task, timeout)

    return asyncio.run(main())


def _graph(source: MQTTSource, schema: Schema | None = READING) -> tuple[Graph, ListSink]:
    g = Graph("mqtt_test")
    stream = g.source("mqtt", source, schema=schema)
    sink = ListSink()
    g.sink("out", sink, [stream])
    return g, sink


def _reading(sensor: str, seq: int, temp: float | int) -> dict[str, Any]:
    return {"sensor": sensor, "seq": seq, "temp": temp}


# ------------------------------------------------------------------ round trips


def test_json_round_trip_with_wildcards_and_topic_levels(broker: Broker) -> None:
    src = MQTTSource(broker.host, broker.port, topics=["plant/+/temp", "lab/#"], qos=1,
                     schema=READING.as_dict() | {"site": "rstring"}, topic_levels={"site": 0},
                     max_records=4)
    g, sink = _graph(src, Schema(READING.as_dict() | {"site": "rstring"}))
    msgs = [("plant/a/temp", orjson.dumps(_reading("a", 1, 20))),
            ("other/b/temp", orjson.dumps(_reading("x", 0, 0.0))),  # not subscribed
            ("plant/b/temp", orjson.dumps(_reading("b", 2, 21.5))),
            ("lab/1/2/3", orjson.dumps(_reading("c", 3, 22.0))),
            ("plant/a/temp", orjson.dumps(_reading("a", 4, 23.0)))]
    metrics = _run(g, src, lambda: _publish(broker.port, msgs))
    assert metrics is not None
    assert sink.tuples == [
        {"sensor": "a", "seq": 1, "temp": 20.0, "topic": "plant/a/temp", "site": "plant"},
        {"sensor": "b", "seq": 2, "temp": 21.5, "topic": "plant/b/temp", "site": "plant"},
        {"sensor": "c", "seq": 3, "temp": 22.0, "topic": "lab/1/2/3", "site": "lab"},
        {"sensor": "a", "seq": 4, "temp": 23.0, "topic": "plant/a/temp", "site": "plant"},
    ]
    assert type(sink.tuples[0]["temp"]) is float  # JSON 20 became the declared float64
    assert src.messages_received == 4 and src.bad_messages == 0


class WindowSums(Operator):
    """The sum of ``seq`` over every 10 readings (a tumbling count window)."""

    window_events = frozenset({EventType.EVICTION})

    def on_window_event(self, event: StreamWindowEvent[Any], port: int) -> None:
        if event.tuples:
            self.submit({"n": len(event.tuples), "total": sum(t["seq"] for t in event.tuples)})


@pytest.mark.parametrize("fmt", ["json", "msgpack", "csv"])
def test_batches_of_records_per_message_into_a_window(broker: Broker, fmt: str) -> None:
    schema = Schema(sensor="rstring", seq="int64", temp="float64")
    src = MQTTSource(broker.host, broker.port, topics=["batch/#"], format=fmt, schema=schema,
                     topic_attribute=None, max_records=300)
    g = Graph("mqtt_batch")
    stream = g.source("mqtt", src, schema=schema)
    sums = g.operator("sums", WindowSums(), [stream.window("tumbling, count(10)")])
    sink = ListSink()
    g.sink("out", sink, [sums])
    codec = Codec(fmt, schema)  # type: ignore[arg-type]
    records = [_reading(f"s{i % 3}", i, i / 2) for i in range(300)]
    msgs = [("batch/x", codec.encode(records[i:i + 100], batch=True)) for i in range(0, 300, 100)]
    _run(g, src, lambda: _publish(broker.port, msgs))
    assert src.messages_received == 3
    assert [t["n"] for t in sink.tuples] == [10] * 30
    assert sum(t["total"] for t in sink.tuples) == sum(range(300))


def test_raw_bytes_and_a_user_function(broker: Broker) -> None:
    raw = MQTTSource(broker.host, broker.port, topics=["raw/#"], format="raw",
                     schema={"payload": "blob", "topic": "rstring"}, max_records=2)
    g, sink = _graph(raw, None)
    _run(g, raw, lambda: _publish(broker.port, [("raw/a", b"\x00\x01"), ("raw/b", b"")]))
    assert sink.tuples == [{"payload": b"\x00\x01", "topic": "raw/a"}, {"payload": b"", "topic": "raw/b"}]

    def decode(payload: bytes) -> list[dict[str, Any]]:
        sensor, *temps = payload.decode().split(";")
        return [{"sensor": sensor, "seq": i, "temp": float(t)} for i, t in enumerate(temps)]

    fn = MQTTSource(broker.host, broker.port, topics=["fn/#"], format="function", decode=decode,
                    schema=READING, max_records=3)
    g, sink = _graph(fn)
    _run(g, fn, lambda: _publish(broker.port, [("fn/1", b"k;1.5;2;3.25")]))
    assert [t["temp"] for t in sink.tuples] == [1.5, 2.0, 3.25]


# ------------------------------------------------------------------ bad payloads


def test_bad_payloads_are_counted_reported_and_dead_lettered_and_the_graph_goes_on(broker: Broker) -> None:
    seen: list[BadMessage] = []
    src = MQTTSource(broker.host, broker.port, topics=["in/#"], schema=READING, max_payload=200,
                     on_bad=seen.append, dead_letter_topic="dead/letters", max_records=3)
    g, sink = _graph(src)
    letters: list[dict[str, Any]] = []

    async def feed() -> None:
        async with MQTTClient(ClientConfig("127.0.0.1", broker.port),
                              subscriptions=[("dead/letters", 1)]) as dl:
            await _publish(broker.port, [
                ("in/a", orjson.dumps(_reading("a", 1, 1.0))),
                ("in/a", b"{not json"),                                           # undecodable
                ("in/a", orjson.dumps({"sensor": "a", "seq": 2})),                # missing temp
                ("in/a", orjson.dumps({"sensor": "a", "seq": "two", "temp": 1})), # wrong type
                ("in/a", b"\xff\xfe"),                                            # not UTF-8
                ("in/a", orjson.dumps(_reading("a" * 300, 3, 1.0))),              # oversized
                ("in/a", orjson.dumps([_reading("a", 4, 4.0), 17, _reading("a", 5, 5.0)])),
            ])
            while len(letters) < 6:
                for m in await dl.receive(5):
                    letters.append(orjson.loads(m.payload))

    _run(g, src, feed)
    assert [t["seq"] for t in sink.tuples] == [1, 4, 5]
    assert src.bad_counts == {"undecodable": 2, "invalid": 3, "oversized": 1}
    assert src.bad_messages == 6
    reasons = [b.reason for b in seen]
    assert reasons[0].startswith("undecodable json")
    assert "missing attribute(s) temp" in reasons[1]
    assert "seq" in reasons[2]
    assert "max_payload=200" in reasons[4]
    assert seen[5].index == 1 and "expected an object" in seen[5].reason
    assert [x["kind"] for x in letters] == ["undecodable", "invalid", "invalid", "undecodable",
                                            "oversized", "invalid"]
    assert letters[0]["payload"] == "{not json" and "payload_b64" in letters[3]


# ------------------------------------------------------------------ sink -> source


def test_sink_batches_feed_a_source(broker: Broker) -> None:
    consumer = MQTTSource(broker.host, broker.port, topics=["loop/+"], schema=READING, format="msgpack",
                          topic_levels=None, max_records=50)
    cg, sink = _graph(consumer)
    pg = Graph("producer")
    readings = [_reading(f"s{i % 2}", i, float(i)) for i in range(50)]
    stream = pg.source("list", ListSource(readings))
    mqtt_sink = MQTTSink(broker.host, broker.port, topic_of=lambda t: f"loop/{t['sensor']}", batch=7,
                         format="msgpack")
    pg.sink("pub", mqtt_sink, [stream])

    async def produce() -> None:
        await Job(pg).run()

    _run(cg, consumer, produce)
    assert mqtt_sink.records_published == 50
    assert mqtt_sink.messages_published == 8  # 25 per topic: 3 batches of 7 + a partial one each
    got = sorted(sink.tuples, key=lambda t: t["seq"])
    assert got == [r | {"topic": f"loop/{r['sensor']}"} for r in readings]


# ------------------------------------------------------------------ reconnect


def test_reconnects_after_a_broker_restart(broker: Broker) -> None:
    src = MQTTSource(broker.host, broker.port, topics=["r/#"], schema=READING, client_id="restart-test",
                     ack="checkpoint", max_records=20, backoff=(0.02, 0.2))
    g, sink = _graph(src)

    async def feed() -> None:
        await _publish(broker.port, [("r/a", orjson.dumps(_reading("a", i, 0.0))) for i in range(10)])
        while src.records_submitted < 10:
            await asyncio.sleep(0.01)  # polling for an event: the source took the first 10
        broker.restart()  # graceful: mosquitto saves the persistent session
        await _publish(broker.port, [("r/a", orjson.dumps(_reading("a", i, 0.0))) for i in range(10, 20)])

    _run(g, src, feed)
    assert src.reconnects >= 1
    assert sorted(t["seq"] for t in sink.tuples) == list(range(20))


# ------------------------------------------------------------------ auth and TLS


def test_wrong_credentials_are_a_clear_error_not_a_retry_loop() -> None:
    b = start_broker(users={"sensor": "s3cret"})
    try:
        async def connect(password: str) -> None:
            cfg = ClientConfig("127.0.0.1", b.port, username="sensor", password=password)
            async with MQTTClient(cfg):
                pass

        asyncio.run(connect("s3cret"))
        with pytest.raises(MQTTConnectError, match=r"refused the connection: .*[Nn]ot authori[sz]ed.*"
                                                   r"check username/password"):
            asyncio.run(asyncio.wait_for(connect("wrong"), 10))
    finally:
        b.close()  # stops it and removes its working directory


def test_tls_and_option_errors_before_connecting(tmp_path: Path) -> None:
    with pytest.raises(MQTTConfigError, match=r"tls ca_file='.*missing.pem': no such file"):
        TLS(ca_file=str(tmp_path / "missing.pem"))
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate")
    with pytest.raises(MQTTConfigError, match=r"cannot load .*expected PEM"):
        TLS(ca_file=str(bad)).context()
    with pytest.raises(MQTTConfigError, match="needs a stable client_id"):
        MQTTSource("h", topics=["a"], ack="checkpoint")
    with pytest.raises(MQTTConfigError, match="qos=0: the broker never redelivers"):
        MQTTSource("h", topics=["a"], ack="checkpoint", client_id="c", qos=0)
    with pytest.raises(MQTTConfigError, match=r"qos=2 cannot be acknowledged at checkpoints: .*"
                                              r"use qos=1"):
        MQTTSource("h", topics=["a"], ack="checkpoint", client_id="c", qos=2)
    with pytest.raises(MQTTConfigError, match="expected a non-empty list"):
        MQTTSource("h", topics="a/b")  # type: ignore[arg-type]
    with pytest.raises(MQTTConfigError, match="topic attribute 'topic' is not in the schema"):
        MQTTSource("h", topics=["a"], schema={"v": "int64"})
    with pytest.raises(MQTTConfigError, match=r"format='csv'.*list<int64>.*cannot be carried"):
        MQTTSource("h", topics=["a"], format="csv", schema={"v": "list<int64>"}, topic_attribute=None)
    # At construction, as the sink's: at setup a typo failed the job (exit 1, retried).
    with pytest.raises(MQTTConfigError, match="format='xml': expected one of json, msgpack"):
        MQTTSource("h", topics=["a"], format="xml")  # type: ignore[arg-type]
    with pytest.raises(MQTTConfigError, match="format='function' needs decode="):
        MQTTSource("h", topics=["a"], format="function")
    with pytest.raises(MQTTConfigError, match="wildcards are for subscribing"):
        MQTTSink("h", topic="a/#")
    with pytest.raises(MQTTConfigError, match="port=0"):
        MQTTSink("h", 0, topic="a")


def test_codec_csv_types_and_batches() -> None:
    codec = Codec("csv", Schema(name="rstring", n="int32", ok="boolean", x="float64"))
    payload = codec.encode([{"name": "a,b", "n": 1, "ok": True, "x": 0.5},
                            {"name": "c", "n": -2, "ok": False, "x": 2.0}], batch=True)
    assert payload == b'"a,b",1,true,0.5\nc,-2,false,2.0\n'
    good, bad = codec.decode(payload + b"d,notint,true,1\n")
    assert good == [{"name": "a,b", "n": 1, "ok": True, "x": 0.5},
                    {"name": "c", "n": -2, "ok": False, "x": 2.0}]
    assert len(bad) == 1 and bad[0].index == 2 and "invalid literal" in bad[0].reason
    mp = Codec("msgpack", None)
    assert mp.decode(msgpack.packb({"a": 1})) == ([{"a": 1}], [])


def test_exports() -> None:
    import riverbed.mqtt as m

    for name in m.__all__:
        assert getattr(m, name) is not None


# ------------------------------------------------------------------ crash: nothing lost

_CRASH_GRAPH = '''
from riverbed.graph import Graph, Schema
from riverbed.mqtt import MQTTSource
from riverbed.operators import FileSink

def build(params):
    schema = Schema(seq="int64", value="int64")
    g = Graph("mqtt_crash")
    src = MQTTSource("127.0.0.1", int(params["port"]), topics=["crash/#"], qos=1, schema=schema,
                     topic_attribute=None, client_id="crash-consumer", ack="checkpoint",
                     max_records=int(params["n"]))
    s = g.source("mqtt", src, schema=schema)
    g.sink("out", FileSink(params["out"], format="csv", transactional=True), [s])
    return g
'''


def test_qos1_redelivery_after_sigkill_with_checkpoints(broker: Broker, tmp_path: Path) -> None:
    script = tmp_path / "graph.py"
    script.write_text(_CRASH_GRAPH)
    out, ckpt = tmp_path / "out.csv", tmp_path / "ckpt"
    n = 5000

    def start() -> subprocess.Popen[bytes]:
        args = [sys.executable, "-m", "riverbed", "run", str(script), "-p", f"port={broker.port}",
                "-p", f"out={out}", "-p", f"n={n}", "--no-status", "--log-format", "json",
                "--log-level", "error", "--checkpoint-dir", str(ckpt), "--checkpoint-period", "200ms"]
        return subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    async def prepare() -> None:
        # Create the consumer's persistent session first, so the broker queues every reading.
        session = ClientConfig("127.0.0.1", broker.port, client_id="crash-consumer", persistent=True)
        async with MQTTClient(session, subscriptions=[("crash/#", 1)]):
            pass
        async with MQTTClient(ClientConfig("127.0.0.1", broker.port)) as client:
            for i in range(n):
                await client.publish("crash/s", orjson.dumps({"seq": i, "value": i * 7}), 1)

    asyncio.run(prepare())
    first = start()
    while first.poll() is None and not (out.exists() and out.stat().st_size > 0):
        time.sleep(0.005)  # polling for an event: the first checkpoint made output visible
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=30)
    visible = len(out.read_text().splitlines())
    assert first.returncode == -signal.SIGKILL and 0 < visible < n, (first.returncode, visible)
    # The restarted run resumes from its checkpoint; the broker redelivers what was not acked.
    second = start()
    _, err = second.communicate(timeout=60)
    assert second.returncode == 0, err.decode()[-2000:]
    seqs = [int(line.split(",")[0]) for line in out.read_text().splitlines()]
    assert len(set(seqs)) == n, f"{n - len(set(seqs))} readings lost"
    assert len(seqs) == n, f"{len(seqs) - n} duplicates"


def test_mqtt5_persistent_session_keeps_what_was_published_while_away(broker: Broker) -> None:
    # aiomqtt's default clean_start=FIRST_ONLY would wipe this session at the source's first connect.
    session = ClientConfig("127.0.0.1", broker.port, client_id="v5-consumer", protocol="5", persistent=True)

    async def prepare() -> None:
        async with MQTTClient(session, subscriptions=[("v5/#", 1)]):
            pass
        await _publish(broker.port, [("v5/a", orjson.dumps(_reading("a", i, 1.0))) for i in range(5)])

    asyncio.run(prepare())
    src = MQTTSource(broker.host, broker.port, topics=["v5/#"], schema=READING, protocol="5",
                     client_id="v5-consumer", ack="checkpoint", max_records=5)
    assert src.replayable and not MQTTSource.replayable
    g, sink = _graph(src)
    _run(g, src, lambda: asyncio.sleep(0))
    assert [t["seq"] for t in sink.tuples] == [0, 1, 2, 3, 4]



def test_a_message_taken_as_a_receive_is_cancelled_comes_with_the_next_receive() -> None:
    """A stop cancels the source in `receive`: when the message came in the same turn, the
    queue's getter had taken it and the cancelled receive dropped it (acknowledged, with
    ``ack="receive"``: lost). The next receive now returns it."""
    async def main() -> list[Any]:
        client = MQTTClient(ClientConfig("127.0.0.1", 1))  # never connected: only its queue
        waiting = asyncio.create_task(client.receive(10))
        await asyncio.sleep(0)  # (one turn: the receive waits on its getter)
        client._queue.put_nowait("m1")  # the message, and the stop, in one turn
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        client._queue.put_nowait("m2")
        return await client.receive(0)

    assert asyncio.run(main()) == ["m1", "m2"]
