"""A reconnect waits for its own CONNACK (the regression that reverted the stop-43 fixes).

aiomqtt 2.5 resolves a future at the CONNACK and makes it new only in a graceful exit: after a
connection the broker dropped, it stayed resolved, and the next ``__aenter__`` returned as soon
as the socket was open. `MQTTClient` then read the previous connection's session-present flag
(a session the restarted broker had lost looked kept: a subscription plan subscribed nothing,
and the client stayed deaf), and the check for a connection closed right after its CONNACK took
one still connecting for closed (it dropped the connection and what the broker had sent on it:
under CPU load, `tests/test_mqtt_dedup.py` saw the redeliveries of a restarted broker come again
flagged DUP, 1 of 10 reaching the dedup).

A broker whose answers come late makes the race certain: a TCP relay on 127.0.0.1 holds the
first bytes the broker sends on each connection (its CONNACK) for `CONNACK_DELAY` seconds.
Against a real mosquitto; every wait is for an event, bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from riverbed.mqtt import ClientConfig, ConnectInfo, MQTTClient, Received

from .mqtt_broker import Broker, start_broker
from .test_mqtt import _publish

CONNACK_DELAY = 0.3  # how long the relay holds the broker's first bytes on a connection


class _SlowBroker:
    """A relay to ``port``: what the client sends goes through at once, the broker's first
    bytes on each connection (the CONNACK) after `CONNACK_DELAY` s."""

    def __init__(self, port: int) -> None:
        self.upstream = port
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> _SlowBroker:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:  # the pumps then end (a handler cancelled logs an error)
            writer.close()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream)
        except OSError:  # the broker is down: as it would, the connection closes
            writer.close()
            return
        self._writers.add(up_writer)
        await asyncio.gather(self._pump(reader, up_writer, 0.0),
                             self._pump(up_reader, writer, CONNACK_DELAY))

    @staticmethod
    async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
        with contextlib.suppress(OSError):
            first = True
            while data := await reader.read(65536):
                if first and delay:
                    await asyncio.sleep(delay)  # the slow broker (not a wait for the test)
                first = False
                writer.write(data)
                await writer.drain()
        writer.close()  # (the other side's end, passed on)


@pytest.mark.parametrize("protocol", ["3.1.1", "5"])
def test_a_reconnect_waits_for_its_connack_and_sees_the_session_the_broker_lost(protocol: str) -> None:
    """Before: after the broker restarted without its database, the reconnect's plan was given
    ``present=True`` (the first connection's flag), subscribed nothing and received nothing;
    ``sessions_lost`` stayed 0. (With the reverted stop-43 change, the reconnect was also
    dropped as "closed right after the CONNACK".)"""
    b = start_broker()
    try:
        asyncio.run(_reconnect_to_a_broker_that_lost_the_session(b, protocol))
    finally:
        b.close()


async def _reconnect_to_a_broker_that_lost_the_session(b: Broker, protocol: str) -> None:
    wanted = [("lost/#", 1)]
    plans: list[bool] = []
    connects: list[ConnectInfo] = []
    drops: list[dict[str, Any]] = []
    reconnected = asyncio.Event()

    def plan(present: bool) -> tuple[list[str], list[tuple[str, int]]]:
        plans.append(present)  # subscribe only what the session lacks (as the Spark ingest does)
        return [], ([] if present else wanted)

    def on_connect(info: ConnectInfo) -> None:
        connects.append(info)
        if info.reconnect:
            reconnected.set()

    def log(event: str, fields: dict[str, Any]) -> None:
        if event == "mqtt disconnected":
            drops.append(fields)

    async def one(client: MQTTClient) -> Received:
        got = await client.receive(10)
        assert got, "nothing received: the session holds no subscription"
        return got[0]

    async with asyncio.timeout(60):
        # A session of this client_id with the subscription, on the broker.
        session = ClientConfig("127.0.0.1", b.port, client_id="connack47", persistent=True,
                               protocol=protocol)  # type: ignore[arg-type]
        async with MQTTClient(session, subscriptions=wanted):
            pass
        async with _SlowBroker(b.port) as relay:
            config = ClientConfig("127.0.0.1", relay.port, client_id="connack47", persistent=True,
                                  protocol=protocol, backoff=(0.02, 0.2))  # type: ignore[arg-type]
            async with MQTTClient(config, subscriptions=wanted, session_plan=plan,
                                  on_connect=on_connect, log=log) as client:
                assert plans == [True] and connects[0].session_present
                await _publish(b.port, [("lost/a", b"1")])
                assert (await one(client)).payload == b"1"
                b.stop()
                (b.workdir / "mosquitto.db").unlink(missing_ok=True)  # the session is gone
                b.start()
                await reconnected.wait()
                await _publish(b.port, [("lost/a", b"2")])
                assert (await one(client)).payload == b"2"  # before: nothing (no subscription)
                assert plans == [True, False]  # before: [True, True]
                assert client.sessions_lost == 1 and not connects[-1].session_present
                assert client.reconnects == 1
    # No connection taken for closed while it was still waiting for its CONNACK.
    assert not [d for d in drops if "CONNACK" in str(d.get("error"))], drops
