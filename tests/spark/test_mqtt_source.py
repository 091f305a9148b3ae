"""The MQTT Spark source (riverbed.spark_bridge.mqtt_source) against a real mosquitto.

The broker runs with ``max_queued_messages 0`` (mosquitto's default of 1000
would drop messages for the offline session of the restart test). Nothing
waits for a fixed time: the tests poll for conditions with deadlines (the
broker's port, the reader's offsets, the rows collected by the sink).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("paho.mqtt")

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from pyspark.errors import StreamingQueryException
from pyspark.sql.streaming.datasource import ReadAllAvailable

from riverbed.mqtt import TLS, ClientConfig, MQTTClient, MQTTConfigError, MQTTConnectError, PayloadDecoder
from riverbed.spark_bridge.mqtt_source import (
    MqttConnectError,
    MqttOptions,
    MqttRecords,
    MqttStreamReader,
    Spool,
    SpoolError,
    decoder_options,
    mqtt_stream,
    read_spool,
    read_status,
)
from tests.mqtt_broker import free_port, start_broker

Message = tuple[str, bytes]


def _until(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.01)  # a polling interval, not a wait for something to happen


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A mosquitto on 127.0.0.1 and a free port; yields the port."""
    exe = shutil.which("mosquitto") or shutil.which("/usr/sbin/mosquitto")
    if exe is None:
        pytest.skip("mosquitto is not installed")
    home = tmp_path_factory.mktemp("mosquitto")
    port = free_port()
    conf = home / "mosquitto.conf"
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\n"
                    "max_queued_messages 0\npersistence false\n")
    log_path = home / "mosquitto.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([exe, "-c", str(conf)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 15
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"mosquitto exited ({proc.returncode}): {log_path.read_text()}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def _publish(port: int, messages: list[Message]) -> None:
    """Publish at QoS 1 and return once the broker has acknowledged every message."""
    connected = threading.Event()
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"pub-{uuid.uuid4().hex[:8]}",
                         protocol=mqtt.MQTTv311)
    client.on_connect = lambda *args: connected.set()
    client.connect("127.0.0.1", port)
    client.loop_start()
    try:
        assert connected.wait(10), "publisher did not connect"
        infos = [client.publish(topic, payload, qos=1) for topic, payload in messages]
        for info in infos:
            info.wait_for_publish(timeout=30)
            assert info.is_published()
    finally:
        client.disconnect()
        client.loop_stop()


def _publish_with(config: ClientConfig, messages: list[Message]) -> None:
    """Publish at QoS 1 with riverbed.mqtt's client (TLS, credentials, MQTT 5 as configured)."""
    async def main() -> None:
        async with MQTTClient(config) as client:
            for topic, payload in messages:
                await client.publish(topic, payload, 1)

    asyncio.run(asyncio.wait_for(main(), 30))


@contextlib.contextmanager
def _subscribed(port: int, topic: str, on_message: Callable[[bytes], None]) -> Iterator[None]:
    """A subscriber to ``topic`` for the duration of the block (paho's network thread)."""
    ready = threading.Event()
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"sub-{uuid.uuid4().hex[:8]}",
                         protocol=mqtt.MQTTv311)
    client.on_connect = lambda c, *args: c.subscribe(topic, qos=1)
    client.on_subscribe = lambda *args: ready.set()
    client.on_message = lambda c, u, m: on_message(bytes(m.payload))
    client.connect("127.0.0.1", port)
    client.loop_start()
    try:
        assert ready.wait(10), "subscriber did not subscribe"
        yield
    finally:
        client.disconnect()
        client.loop_stop()


def _options(spool: Path, port: int, client_id: str, **extra: str) -> dict[str, str]:
    return {"topic": "unit/#", "clientId": client_id, "spool": str(spool), "port": str(port), **extra}


# ------------------------------------------------------------------------------------------ no Spark


def test_reader_is_inert_until_first_offset_and_pickles(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    spool = tmp_path / "spool.jsonl"
    reader = MqttStreamReader(_options(spool, port, "rb-inert", connectTimeout="2"))
    assert not reader.connected and not spool.exists()
    clone = pickle.loads(pickle.dumps(reader))
    assert clone.config == reader.config and not clone.connected
    with pytest.raises(MqttConnectError, match=f"127.0.0.1:{port}"):
        reader.initialOffset()
    assert not reader.connected
    pickle.dumps(reader)
    unlocked = Spool(str(spool))
    unlocked.open(lock_timeout=0)  # the failed connect released the spool
    unlocked.close()


@pytest.mark.parametrize("missing", ["topic", "clientId", "spool"])
def test_missing_required_option_is_named(tmp_path: Path, missing: str) -> None:
    options = _options(tmp_path / "s", 1883, "rb-x")
    del options[missing]
    with pytest.raises(ValueError, match=missing):
        MqttStreamReader(options)
    with pytest.raises(ValueError, match="'port' must be an integer"):
        MqttOptions.parse({**_options(tmp_path / "s", 1883, "rb-x"), "port": "mqtt"})
    with pytest.raises(ValueError, match="option 'qos' 2: qos=2 cannot be acknowledged at checkpoints"):
        MqttOptions.parse({**_options(tmp_path / "s", 1883, "rb-x"), "qos": "2"})
    # an invalid or overlapping filter is refused at once (the reader waited for connectTimeout)
    with pytest.raises(ValueError, match="option 'topic': topic filter 'a/#/b': '#' must be the last"):
        MqttOptions.parse({**_options(tmp_path / "s", 1883, "rb-x"), "topic": "a/#/b"})
    with pytest.raises(ValueError, match="topic filters 'a/#' and 'a/\\+/t' overlap"):
        MqttOptions.parse({**_options(tmp_path / "s", 1883, "rb-x"), "topic": "a/#,a/+/t"})
    # mqtt_stream checks before touching Spark
    with pytest.raises(ValueError, match="'clientId' is required"):
        mqtt_stream(cast(Any, None), topic="a", client_id="", spool=tmp_path / "s")


def test_spool_survives_torn_writes_and_compaction(tmp_path: Path) -> None:
    path = str(tmp_path / "spool.jsonl")
    spool = Spool(path)
    spool.open()
    with pytest.raises(SpoolError, match="in use"):
        Spool(path).open(lock_timeout=0.05)
    assert [spool.append("t", p, 1, False) for p in (b'{"a":1}', b"\xff\x00", b"x")] == [0, 1, 2]
    spool.close()
    with open(path, "ab") as f:
        f.write(b'[3,"t","half a rec')  # a crash in the middle of a write
    spool.open()
    assert (spool.first_seq, spool.next_seq) == (0, 3)
    assert spool.append("t", b"y", 1, True) == 3
    rows = list(read_spool(path, 0, 4))
    assert [(r[0], r[2], r[5]) for r in rows] == [(0, b'{"a":1}', False), (1, b"\xff\x00", False),
                                                   (2, b"x", False), (3, b"y", True)]
    stale_hint = spool.offset_of(2)
    assert spool.release(2, compact_bytes=1)
    assert Path(path).read_bytes().startswith(b'{"first": 2}\n')
    assert [r[2] for r in read_spool(path, 2, 4, stale_hint)] == [b"x", b"y"]
    assert [r[2] for r in read_spool(path, 3, 4, spool.offset_of(3))] == [b"y"]
    with pytest.raises(SpoolError, match="compacted"):
        list(read_spool(path, 0, 3))
    with pytest.raises(SpoolError, match="ends before seq 4"):
        list(read_spool(path, 2, 6))
    spool.close()
    spool.open()
    assert (spool.first_seq, spool.next_seq) == (2, 4)
    spool.close()


def test_reader_offsets_ranges_and_persistent_session(broker: int, tmp_path: Path) -> None:
    """The reader's calls as Spark makes them, without Spark: offsets, limits, replay, a restart."""
    options = _options(tmp_path / "spool.jsonl", broker, "rb-unit", maxRecordsPerBatch="2")
    reader = MqttStreamReader(options)
    start = reader.initialOffset()  # connects and subscribes
    assert start == {"seq": 0} and reader.connected
    first = [(f"unit/{i % 2}", f"m{i}".encode()) for i in range(5)]
    _publish(broker, first)
    _until(lambda: reader.latestOffset(start, ReadAllAvailable()) == {"seq": 5}, "5 spooled messages")
    assert reader.latestOffset(start, reader.getDefaultReadLimit()) == {"seq": 2}
    assert reader.partitions({"seq": 3}, {"seq": 3}) == []
    (part,) = reader.partitions({"seq": 1}, {"seq": 5})
    executor = pickle.loads(pickle.dumps(reader))  # as a task gets it: no client, reads the spool
    assert [(r[0], r[1], r[2]) for r in executor.read(part)] == [(i, *first[i]) for i in range(1, 5)]
    reader.commit({"seq": 5})
    reader.stop()

    later = [("unit/x", f"n{i}".encode()) for i in range(3)]
    _publish(broker, later)  # queued by the broker for the offline session
    again = MqttStreamReader(options)
    try:
        _until(lambda: again.latestOffset({"seq": 5}, ReadAllAvailable()) == {"seq": 8}, "queued messages")
        (part,) = again.partitions({"seq": 5}, {"seq": 8})
        assert [(r[0], r[1], r[2]) for r in again.read(part)] == [(5 + i, *later[i]) for i in range(3)]
    finally:
        again.stop()


# -------------------------------------------------------------------------------------------- Spark

Delivery = tuple[int, list[tuple[Any, ...]]]


def _collector(deliveries: list[Delivery]) -> Callable[[Any, int], None]:
    def sink(df: Any, batch_id: int) -> None:
        rows = [(r.seq, r.topic, bytes(r.payload), r.recv_ms, r.qos, r.retain) for r in df.collect()]
        deliveries.append((batch_id, rows))
    return sink


def _final(deliveries: list[Delivery]) -> dict[int, list[tuple[Any, ...]]]:
    """The last delivery of each batch id (a replayed batch replaces the earlier delivery)."""
    return dict(deliveries)


def _drain(query: Any, deliveries: list[Delivery], expected: int,
           timeout: float = 90.0) -> list[tuple[Any, ...]]:
    """Run the query until the sink has ``expected`` distinct rows; return them in seq order."""
    deadline = time.monotonic() + timeout
    while True:
        query.processAllAvailable()  # returns after a trigger that found no new data
        rows = sorted({r for batch in _final(deliveries).values() for r in batch})
        if len(rows) >= expected:
            return rows
        if time.monotonic() > deadline:
            raise AssertionError(f"{len(rows)} of {expected} rows after {timeout:g} s")


# Spark gives the Python worker that hosts a query's stream reader a fixed 10 s to connect back
# (PythonWorkerFactory.createSimpleWorker; no setting changes it). The worker imports pyarrow
# and numpy first, ~0.5 s of CPU: on a loaded 2-core machine that took over 10 s, and the query
# failed while initializing, before the reader was even made (seen in a stress run).
_WORKER_LAUNCH_FAILED = "Python worker failed to connect back"


def _started(start: Callable[[], Any], attempts: int = 5) -> Any:
    """``start()``'s query once it ran a first trigger (the reader connected and subscribed).

    A query that failed because Spark could not launch the reader's worker in time is started
    again from the same checkpoint (nothing of it ran: no offsets, no reader, no batch); any
    other failure, or that one ``attempts`` times, is the test's failure."""
    for attempt in range(1, attempts + 1):
        query = start()
        try:
            query.processAllAvailable()
        except StreamingQueryException as exc:
            query.stop()
            if _WORKER_LAUNCH_FAILED not in str(exc) or attempt == attempts:
                raise
            continue
        return query
    raise AssertionError("unreachable")


def _check_order(rows: list[tuple[Any, ...]], published: list[Message]) -> None:
    """Every message exactly once, each topic's messages in publication order."""
    assert [r[0] for r in rows] == list(range(len(published)))
    for topic in {t for t, _ in published}:
        assert [r[2] for r in rows if r[1] == topic] == [p for t, p in published if t == topic], topic
    assert all(r[4] == 1 and r[5] is False for r in rows)
    assert all(r[3] > 1_600_000_000_000 for r in rows)  # recv_ms: ms since the epoch, stamped at spooling


def test_end_to_end(spark: Any, broker: int, tmp_path: Path) -> None:
    df = mqtt_stream(spark, topic="e2e/+,e2e-bin", client_id="rb-e2e", spool=tmp_path / "spool.jsonl",
                     port=broker, max_records_per_batch=200)
    assert df.schema.simpleString() == ("struct<seq:bigint,topic:string,payload:binary,recv_ms:bigint,"
                                        "qos:int,retain:boolean>")
    deliveries: list[Delivery] = []
    query = _started(df.writeStream.foreachBatch(_collector(deliveries)).start)
    try:  # the reader has run initialOffset: connected and subscribed
        published = [(f"e2e/{i % 3}", json.dumps({"i": i}).encode()) if i % 50
                     else ("e2e-bin", bytes([0xFF, 0, i % 256])) for i in range(500)]
        _publish(broker, published)
        rows = _drain(query, deliveries, 500)
    finally:
        query.stop()
    _check_order(rows, published)
    assert sum(len(b) for _, b in deliveries) == 500
    assert max(len(b) for _, b in deliveries) <= 200


def test_restart_replays_from_spool_and_loses_nothing(spark: Any, broker: int, tmp_path: Path,
                                                      checkpoint_dir: Path) -> None:
    spool = tmp_path / "spool.jsonl"

    def start(sink: Callable[[Any, int], None]) -> Any:
        df = mqtt_stream(spark, topic="rs/#", client_id="rb-restart", spool=spool, port=broker,
                         max_records_per_batch=100, spoolCompactBytes=1)  # compact at every commit
        return df.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint_dir)).start()

    deliveries: list[Delivery] = []
    collect = _collector(deliveries)
    armed = threading.Event()

    def failing_sink(df: Any, batch_id: int) -> None:
        collect(df, batch_id)
        if armed.is_set() and deliveries[-1][1]:
            armed.clear()
            raise RuntimeError("injected sink failure")

    published = [(f"rs/{i % 2}", f"first-{i}".encode()) for i in range(300)]
    query = _started(lambda: start(failing_sink))
    try:
        _publish(broker, published)
        _drain(query, deliveries, 300)
        armed.set()
        more = [(f"rs/{i % 2}", f"second-{i}".encode()) for i in range(50)]
        published += more
        _publish(broker, more)
        with pytest.raises(StreamingQueryException, match="injected sink failure"):
            query.awaitTermination(90)
    finally:
        query.stop()
    failed_batch, failed_rows = deliveries[-1]

    down = [(f"rs/{i % 2}", f"down-{i}".encode()) for i in range(200)]
    published += down
    _publish(broker, down)  # the query is down: the broker queues these for its session

    query = _started(lambda: start(collect))
    try:
        rows = _drain(query, deliveries, len(published))
    finally:
        query.stop()
    _check_order(rows, published)
    replays = [b for b, _ in deliveries if b == failed_batch]
    assert len(replays) == 2 and _final(deliveries)[failed_batch] == failed_rows  # same rows again
    final = _final(deliveries)
    assert sum(len(b) for b in final.values()) == len(published)  # no duplicates across batch ids
    assert spool.read_bytes().startswith(b'{"first": ')  # commits compacted the spool under the replay


# --------------------------------------------------------------- one MQTT stack (issue 17, item 4)


def _self_signed(directory: Path) -> tuple[str, str]:
    """A certificate for 127.0.0.1 that is its own CA, and its key (openssl, ~30 ms)."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"], check=True, capture_output=True)
    return str(cert), str(key)


def test_reader_takes_mqtt_source_connection_settings_tls_credentials_and_mqtt5(tmp_path: Path) -> None:
    """The options become riverbed.mqtt's ClientConfig and TLS, and the client applies them."""
    cert, key = _self_signed(tmp_path)
    broker = start_broker(users={"spark": "s3cret"}, settings={"certfile": cert, "keyfile": key})
    try:
        tls = TLS(ca_file=cert)
        secure = {"tlsCaFile": cert, "username": "spark", "password": "s3cret", "protocol": "5",
                  "connectTimeout": "5"}
        options = _options(tmp_path / "spool.jsonl", broker.port, "rb-tls", **secure)
        config = MqttOptions.parse(options).client
        assert config == ClientConfig("127.0.0.1", broker.port, "rb-tls", "spark", "s3cret", tls, "5",
                                      persistent=True, timeout=5.0)
        reader = MqttStreamReader(options)
        try:
            start = reader.initialOffset()
            info = reader.feeder.last_connect if reader.feeder is not None else None
            assert info is not None and info.protocol == "5" and info.properties  # an MQTT 5 CONNACK
            _publish_with(ClientConfig("127.0.0.1", broker.port, username="spark", password="s3cret", tls=tls,
                                       protocol="5"), [("unit/tls", b"over TLS")])
            _until(lambda: reader.latestOffset(start, ReadAllAvailable()) == {"seq": 1}, "the message")
            (part,) = reader.partitions(start, {"seq": 1})
            assert [(r[1], r[2]) for r in reader.read(part)] == [("unit/tls", b"over TLS")]
        finally:
            reader.stop()
        # The same errors as MQTTSource's: refused credentials; and without TLS no connection.
        for wrong, match in (({**secure, "password": "wrong"}, r"refused the connection: .*[Nn]ot authori"),
                             ({"username": "spark", "password": "s3cret", "connectTimeout": "1"},
                              f"127.0.0.1:{broker.port}")):
            bad = MqttStreamReader(_options(tmp_path / "other.jsonl", broker.port, "rb-tls-bad", **wrong))
            with pytest.raises(MQTTConnectError, match=match):
                bad.initialOffset()
        with pytest.raises(MQTTConfigError, match=r"tls ca_file=.*no such file"):
            MqttOptions.parse({**options, "tlsCaFile": str(tmp_path / "missing.pem")})
        with pytest.raises(MQTTConfigError, match=r"'protocol' must be 3\.1\.1 or 5"):
            MqttOptions.parse({**options, "protocol": "4"})
    finally:
        broker.close()


def test_bad_payloads_are_reported_as_mqtt_source_reports_them(broker: int, tmp_path: Path) -> None:
    """Counted by kind, logged, dead-lettered, in the status file; spooled all the same, and the
    tasks' decoding (MqttRecords) takes the valid records only."""
    spool = tmp_path / "spool.jsonl"
    schema = {"sensor": "rstring", "v": "int64", "topic": "rstring"}
    decoder = PayloadDecoder("json", schema, max_payload=100)
    options = _options(spool, broker, "rb-bad", **decoder_options(decoder), deadLetterTopic="dead/rb")
    assert MqttOptions.parse(options).decoder == decoder
    good = json.dumps({"sensor": "a", "v": 1}).encode()
    batch = json.dumps([{"sensor": "b", "v": 2}, {"sensor": "b", "v": "two"}]).encode()
    messages = [("unit/a", good), ("unit/a", b"{not json"), ("unit/a", b'{"sensor": "a"}'),
                ("unit/a", b"x" * 101), ("unit/b", batch)]
    letters: list[dict[str, Any]] = []
    with _subscribed(broker, "dead/rb", lambda payload: letters.append(json.loads(payload))):
        reader = MqttStreamReader(options)
        try:
            start = reader.initialOffset()
            _publish(broker, messages)
            feeder = reader.feeder
            assert feeder is not None
            _until(lambda: feeder.bads.total == 4 and len(letters) == 4, "4 reports and 4 dead letters")
            assert feeder.bads.counts == {"undecodable": 1, "invalid": 2, "oversized": 1}
            assert reader.latestOffset(start, ReadAllAvailable()) == {"seq": 5}  # all spooled
            (part,) = reader.partitions(start, {"seq": 5})
            rows = [dict(zip(("seq", "topic", "payload"), r[:3], strict=True)) for r in reader.read(part)]
        finally:
            reader.stop()
    to_tuple = pickle.loads(pickle.dumps(MqttRecords(decoder)))  # as the tasks get it
    assert [rec for row in rows for rec in to_tuple(row)] == [{"sensor": "a", "v": 1, "topic": "unit/a"},
                                                             {"sensor": "b", "v": 2, "topic": "unit/b"}]
    assert [(x["kind"], x["index"]) for x in letters] == [("undecodable", None), ("invalid", None),
                                                          ("oversized", None), ("invalid", 1)]
    status = read_status(str(spool))
    assert status is not None and status["bad"] == {"undecodable": 1, "invalid": 2, "oversized": 1}
    assert status["messages"] == 5 and status["dead_letters"]["published"] == 4


def test_messages_spooled_under_other_decoding_options_are_checked_again(broker: int, tmp_path: Path) -> None:
    """The tasks decode spooled messages with the options of the query that reads them; those
    spooled under other options (here: none) are checked again where the query resumes, so what
    the new options refuse is reported, not dropped unseen, and only once."""
    spool = tmp_path / "spool.jsonl"
    raw = _options(spool, broker, "rb-recheck")
    reader = MqttStreamReader(raw)
    try:
        start = reader.initialOffset()
        _publish(broker, [("unit/a", b'{"v": 1}'), ("unit/a", b"not json")])
        _until(lambda: reader.latestOffset(start, ReadAllAvailable()) == {"seq": 2}, "2 spooled messages")
    finally:
        reader.stop()
    for expected in ({"undecodable": 1}, {}):  # the second restart: already checked with these
        again = MqttStreamReader({**raw, "format": "json"})
        try:
            assert again.latestOffset({"seq": 0}, ReadAllAvailable()) == {"seq": 2}  # nothing committed
            assert again.feeder is not None and again.feeder.bads.counts == expected
        finally:
            again.stop()


def test_a_message_the_spool_cannot_take_is_not_acknowledged_and_comes_again(
        broker: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import riverbed.spark_bridge._spool as spool_module

    options = _options(tmp_path / "spool.jsonl", broker, "rb-full")
    reader = MqttStreamReader(options)
    try:
        start = reader.initialOffset()
        real_fsync = os.fsync

        def disk_full(fd: int) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(spool_module.os, "fsync", disk_full)
        _publish(broker, [("unit/a", b"kept by the broker")])
        _until(lambda: reader.feeder is not None and reader.feeder.error is not None, "the failed write")
        with pytest.raises(SpoolError, match="No space left"):
            reader.latestOffset(start, ReadAllAvailable())
        monkeypatch.setattr(spool_module.os, "fsync", real_fsync)
    finally:
        reader.stop()
    again = MqttStreamReader(options)
    try:
        _until(lambda: again.latestOffset(start, ReadAllAvailable()) == {"seq": 1}, "the redelivery")
        (part,) = again.partitions(start, {"seq": 1})
        assert [r[2] for r in again.read(part)] == [b"kept by the broker"]
    finally:
        again.stop()


# ------------------------------------------- issue 19: killed between the fsync and the PUBACK

# The reader in a process of its own, as Spark hosts it; its spool hangs right after its first
# append (on disk, the PUBACKs not yet given), so the process can be killed exactly there.
_KILLED_READER = '''
import json, sys, threading
from riverbed.spark_bridge import _spool
from riverbed.spark_bridge.mqtt_source import MqttStreamReader

append = _spool.Spool.append_many

def append_then_hang(self, *args, **kwargs):
    first = append(self, *args, **kwargs)
    print("spooled", self.next_seq - first, flush=True)
    threading.Event().wait()

_spool.Spool.append_many = append_then_hang
reader = MqttStreamReader(json.loads(sys.argv[1]))
reader.initialOffset()
print("ready", flush=True)
threading.Event().wait()
'''


def test_a_reader_killed_after_spooling_and_before_acking_does_not_spool_the_redelivery_again(
        broker: int, tmp_path: Path) -> None:
    """Spark stops a query by SIGTERM to the process hosting its reader: ``stop`` never runs, and
    what was spooled but not yet acknowledged the broker sends again (DUP, same packet ids) to
    the next reader. That reader acknowledges it without spooling it a second time."""
    spool = tmp_path / "spool.jsonl"
    options = _options(spool, broker, "rb-killed")
    child = subprocess.Popen([sys.executable, "-c", _KILLED_READER, json.dumps(options)],
                             stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2])
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        published = [("unit/k", f"k{i}".encode()) for i in range(5)]
        _publish(broker, published)
        line = child.stdout.readline().split()
        assert line[0] == "spooled" and 1 <= int(line[1]) <= 5
        child.send_signal(signal.SIGTERM)  # as Spark's PythonWorkerFactory.stopWorker does
    finally:
        child.kill()
        child.wait(30)
    reader = MqttStreamReader(options)
    try:
        start = reader.initialOffset()
        _publish(broker, [("unit/k", b"after the restart")])  # comes after what the broker resends

        def spooled() -> list[bytes]:
            end = reader.latestOffset(start, ReadAllAvailable())["seq"]
            return [r[2] for r in read_spool(str(spool), 0, end)]

        _until(lambda: b"after the restart" in spooled(), "the message published after the restart")
        assert spooled() == [p for _, p in published] + [b"after the restart"]
        assert reader.feeder is not None and reader.feeder.redeliveries_dropped == int(line[1])
    finally:
        reader.stop()


def test_acks_written_to_a_connection_the_broker_closed_do_not_get_the_redelivery_spooled_again(
        broker: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The broker closes the reader's connection while it spools a batch (here another client
    takes the session over; a broker restart or a network cut does the same): the acks go to a
    closed socket, and the broker sends the messages again on the next connection. They are in
    the spool already: acknowledged, not spooled a second time."""
    spool = tmp_path / "spool.jsonl"
    options = _options(spool, broker, "rb-taken")
    reader = MqttStreamReader(options)
    try:
        start = reader.initialOffset()
        feeder = reader.feeder
        assert feeder is not None
        entered, release = threading.Event(), threading.Event()
        append = feeder.spool.append_many

        def held(*args: Any, **kwargs: Any) -> int:
            entered.set()
            assert release.wait(30)
            return append(*args, **kwargs)

        monkeypatch.setattr(feeder.spool, "append_many", held)
        published = [("unit/t", f"t{i}".encode()) for i in range(3)]
        _publish(broker, published)
        assert entered.wait(30)  # the reader's event loop holds the batch, its acks not yet given

        resent: list[bytes] = []
        all_resent, gone = threading.Event(), threading.Event()

        def on_message(c: mqtt.Client, userdata: Any, m: mqtt.MQTTMessage) -> None:
            resent.append(bytes(m.payload))
            if len(resent) == len(published):
                all_resent.set()

        intruder = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="rb-taken", clean_session=False,
                               protocol=mqtt.MQTTv311)
        intruder.manual_ack_set(True)  # takes the session, acknowledges nothing
        intruder.on_message = on_message
        intruder.on_disconnect = lambda *args: gone.set()
        intruder.connect("127.0.0.1", broker)
        intruder.loop_start()
        try:
            assert all_resent.wait(30), resent  # the broker closed the reader's connection first
            intruder.disconnect()
            assert gone.wait(30)
        finally:
            intruder.loop_stop()
        release.set()  # spooled, acked on the closed connection; the reader reconnects

        _publish(broker, [("unit/t", b"after the takeover")])  # after what the broker resends

        def spooled() -> list[bytes]:
            end = reader.latestOffset(start, ReadAllAvailable())["seq"]
            return [r[2] for r in read_spool(str(spool), 0, end)]

        _until(lambda: b"after the takeover" in spooled(), "the message published after the takeover")
        assert spooled() == [p for _, p in published] + [b"after the takeover"]
        assert feeder.redeliveries_dropped == len(published) and feeder.reconnects == 1
    finally:
        release.set()
        reader.stop()
