"""A broker that is not there: retries wait real time, and a stop ends the job at once.

Found by running the MQTT example with no broker: on a virtual clock the reconnect backoff
was virtual too, so the retries spun at full speed (two million log lines a run) and the job
never ended; on either clock one SIGTERM or Ctrl-C did not end the job, since the source's
connection task outlived its cancelled source and the sink waited for a broker to publish
nothing to.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from riverbed.graph import Graph
from riverbed.mqtt import TLS, ClientConfig, MQTTClient, MQTTSink
from riverbed.runtime import Job, VirtualClock, run_virtual
from riverbed.testing import ListSource
from tests.mqtt_broker import free_port, start_broker  # free_port: nothing listens there

ROOT = Path(__file__).resolve().parent.parent


def test_the_reconnect_backoff_is_wall_clock_time_on_a_virtual_clock() -> None:
    backoff = (0.02, 0.04)
    attempts: list[float] = []

    async def main() -> float:
        enough = asyncio.Event()

        def log(event: str, fields: dict[str, Any]) -> None:
            if event == "mqtt disconnected":
                attempts.append(time.perf_counter())
                if len(attempts) == 4:
                    enough.set()

        client = MQTTClient(ClientConfig("127.0.0.1", free_port(), backoff=backoff), log=log)
        client.start()
        await enough.wait()
        await client.__aexit__(None, None, None)
        return attempts[-1] - attempts[0]

    took = run_virtual(main(), VirtualClock())
    # Three waits between the four attempts: 0.02, 0.04, 0.04 s of real time. Spinning on
    # virtual time, the four attempts came within a millisecond or two.
    assert took >= 0.9 * (0.02 + 0.04 + 0.04), attempts


def test_a_cancelled_connect_stops_the_connection_task() -> None:
    async def main() -> list[str]:
        refused = asyncio.Event()
        client = MQTTClient(ClientConfig("127.0.0.1", free_port(), backoff=(0.01, 0.02)),
                            name="leak-check", log=lambda event, fields: refused.set())
        entering = asyncio.ensure_future(client.__aenter__())
        await refused.wait()  # retrying; then the caller gives up (a job stopping)
        entering.cancel()
        with pytest.raises(asyncio.CancelledError):
            await entering
        return [t.get_name() for t in asyncio.all_tasks() if t is not asyncio.current_task()]

    assert asyncio.run(main()) == []


def test_a_sink_with_nothing_to_publish_does_not_wait_for_the_broker() -> None:
    g = Graph("unreachable-sink")
    src = g.source("src", ListSource([]))
    sink = MQTTSink("127.0.0.1", free_port(), topic="t/x", backoff=(0.01, 0.02))
    g.sink("out", sink, [src])

    async def main() -> None:
        await asyncio.wait_for(Job(g).run(), timeout=30)

    asyncio.run(main())  # before: final waited for a connection that never came
    assert sink.messages_published == 0


@pytest.mark.parametrize("clock", ["real", "virtual"])
def test_the_example_stops_at_the_first_signal_with_no_broker(tmp_path: Path, clock: str) -> None:
    args = [sys.executable, "-m", "riverbed", "run", "examples/sensors_mqtt.py", "--no-status",
            "--log-format", "json", "-p", f"port={free_port()}", "-p", f"out={tmp_path / 'a.jsonl'}",
            "-p", f"panes={tmp_path / 'p.jsonl'}"]
    if clock == "virtual":
        args.append("--virtual-clock")
    proc = subprocess.Popen(args, cwd=ROOT, env=dict(os.environ, PYTHONUNBUFFERED="1"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    seen, refused = [], 0
    try:
        for line in proc.stderr:  # retrying: wait for two refused attempts (read the log, no sleep)
            seen.append(line)
            refused += '"mqtt disconnected"' in line
            if refused == 2:
                break
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    logs = [json.loads(x) for x in ("".join(seen) + rest).splitlines() if x.startswith("{")]
    assert proc.returncode == 0, rest[-2000:]
    finished = [e for e in logs if e["event"] == "job finished"]
    assert finished and finished[0]["stopped"] is True
    # the backoff (0.05 s doubling) gave a handful of attempts, not a spin
    assert sum(e["event"] == "mqtt disconnected" for e in logs) < 20
    assert "Task was destroyed" not in rest


async def _two_attempts(config: ClientConfig) -> list[dict[str, Any]]:
    """The fields of the first two "mqtt disconnected" logs of a client of ``config``."""
    seen: list[dict[str, Any]] = []
    enough = asyncio.Event()

    def log(event: str, fields: dict[str, Any]) -> None:
        if event == "mqtt disconnected":
            seen.append(fields)
            if len(seen) == 2:
                enough.set()

    client = MQTTClient(config, log=log)
    client.start()
    await enough.wait()
    await client.__aexit__(None, None, None)
    return seen


def test_tls_against_a_plain_listener_says_so_at_each_retry() -> None:
    # Found by a review: a plain mosquitto port resets the TLS handshake, which looked like a
    # broker not yet up; the client retried for ever with nothing but "Connection reset".
    b = start_broker()
    try:
        seen = asyncio.run(_two_attempts(ClientConfig("127.0.0.1", b.port, tls=TLS(insecure=True),
                                                      backoff=(0.01, 0.02))))
    finally:
        b.close()
    for fields in seen:
        assert "TLS handshake" in fields["hint"] and "plain MQTT listener" in fields["hint"], fields


def test_a_listener_closing_before_connack_hints_at_a_tls_port() -> None:
    async def main() -> list[dict[str, Any]]:
        async def close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(1)  # the CONNECT's first byte: then gone, as a TLS port does
            writer.close()

        server = await asyncio.start_server(close, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            return await _two_attempts(ClientConfig("127.0.0.1", port, backoff=(0.01, 0.02),
                                                     timeout=0.5))
        finally:
            server.close()

    # (each attempt fails as the connection closes, without waiting for the timeout)
    for fields in asyncio.run(main()):
        assert fields["error"] == "the connection closed before its CONNACK", fields
        assert "if that port is a TLS listener, give tls=TLS(...)" in fields.get("hint", ""), fields


def test_nothing_listening_needs_no_hint() -> None:
    seen = asyncio.run(_two_attempts(ClientConfig("127.0.0.1", free_port(), backoff=(0.01, 0.02))))
    assert all("hint" not in fields for fields in seen), seen


def test_a_first_connect_that_is_not_retried_says_what_to_check() -> None:
    """With ``retry_first_connect=False`` (Spark's MQTT ingest) the error had no hint."""
    from riverbed.mqtt import MQTTConnectError

    async def main() -> str:
        async def close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(1)
            writer.close()

        server = await asyncio.start_server(close, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = MQTTClient(ClientConfig("127.0.0.1", port, timeout=0.5), retry_first_connect=False)
        try:
            with pytest.raises(MQTTConnectError) as info:
                await client.__aenter__()
            return str(info.value)
        finally:
            server.close()

    assert "if that port is a TLS listener, give tls=TLS(...)" in asyncio.run(main())
