"""The one adapter over aiomqtt: a connection that outlives broker restarts, with manual acks.

Everything riverbed needs from an MQTT client goes through `MQTTClient`, so
that aiomqtt 3 (MQTT 5 only, built-in reconnect, explicit ``puback``) changes
this file and nothing else. What it adds to aiomqtt 2.5:

* **Reconnect with backoff.** aiomqtt 2 never reconnects; a named background
  task re-enters the same ``aiomqtt.Client`` (which keeps paho's session
  state) with exponential backoff, re-subscribes, and counts reconnects.
  Errors that a retry cannot fix (bad credentials, TLS failures, a refused
  client id) end the connection with `MQTTConnectError` instead.
* **Manual acknowledgement** (paho's ``manual_ack_set``): a QoS 1/2 message is
  acknowledged only when `ack` is called, so a checkpointing source can ack
  after the checkpoint holding its effects is committed.
* **Persistent sessions done right**: a stable client id with
  ``clean_session=False`` (3.1.1), or ``clean_start=False`` *and* a session
  expiry interval (5); aiomqtt's default ``clean_start=FIRST_ONLY`` would wipe
  the session at every process start.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import aiomqtt
import paho.mqtt.client as paho
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

__all__ = ["TLS", "ClientConfig", "MQTTClient", "MQTTConfigError", "MQTTConnectError", "Protocol", "Received"]

Protocol = Literal["3.1.1", "5"]

# CONNACK reason codes (MQTT 5 numbering; paho maps 3.1.1 codes onto them) that no retry can fix.
_FATAL_CODES = frozenset({1, 2, 4, 5, 0x84, 0x85, 0x86, 0x87, 0x8A, 0x8C})


class MQTTConfigError(ValueError):
    """An MQTT option is wrong; the message names the option, the value and the fix."""


class MQTTConnectError(RuntimeError):
    """The broker refused the connection for a reason a retry cannot fix (credentials, TLS)."""


@dataclass(frozen=True, slots=True)
class TLS:
    """TLS options. ``ca_file`` verifies the broker (None: the system's CAs); ``cert_file`` and
    ``key_file`` authenticate the client; ``insecure`` skips the host name check only."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    insecure: bool = False

    def __post_init__(self) -> None:
        for name in ("ca_file", "cert_file", "key_file"):
            path = getattr(self, name)
            if path is not None and not os.path.isfile(path):
                raise MQTTConfigError(f"tls {name}={path!r}: no such file; give the path of a "
                                      "PEM file readable by this process")
        if self.key_file is not None and self.cert_file is None:
            raise MQTTConfigError("tls key_file without cert_file: give both for a client certificate")

    def context(self) -> ssl.SSLContext:
        """The SSL context; a file that is not valid PEM raises `MQTTConfigError` here."""
        try:
            ctx = ssl.create_default_context(cafile=self.ca_file)
            if self.cert_file is not None:
                ctx.load_cert_chain(self.cert_file, self.key_file)
        except (ssl.SSLError, OSError) as exc:
            raise MQTTConfigError(f"tls: cannot load {self.ca_file or self.cert_file!r}: {exc}; "
                                  "expected PEM certificates") from None
        if self.insecure:
            ctx.check_hostname = False
        return ctx


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """How to reach the broker and which session to keep there.

    ``persistent`` keeps the broker-side session across disconnects and
    process restarts (needs ``client_id``); ``session_expiry`` (seconds) is
    how long an MQTT 5 broker keeps it after a disconnect.
    """

    host: str
    port: int = 1883
    client_id: str | None = None
    username: str | None = None
    password: str | None = None
    tls: TLS | None = None
    protocol: Protocol = "3.1.1"
    keepalive: int = 60
    persistent: bool = False
    session_expiry: int = 3600
    backoff: tuple[float, float] = (0.05, 5.0)
    timeout: float = 10.0

    def __post_init__(self) -> None:
        if not isinstance(self.host, str) or not self.host:
            raise MQTTConfigError(f"host={self.host!r}: expected a host name or address")
        if not isinstance(self.port, int) or not 0 < self.port < 65536:
            raise MQTTConfigError(f"port={self.port!r}: expected an int in 1..65535")
        if self.protocol not in ("3.1.1", "5"):
            raise MQTTConfigError(f"protocol={self.protocol!r}: expected '3.1.1' or '5'")
        if self.persistent and not self.client_id:
            raise MQTTConfigError("a persistent session needs a stable client_id (the broker finds "
                                  "the session by it); pass client_id='...'")
        if self.password is not None and self.username is None:
            raise MQTTConfigError("password without username: give both")
        lo, hi = self.backoff
        if not 0 < lo <= hi:
            raise MQTTConfigError(f"backoff={self.backoff!r}: expected (min, max) seconds, 0 < min <= max")


@dataclass(frozen=True, slots=True)
class Received:
    """One message as the broker delivered it (``mid`` is 0 for QoS 0)."""

    topic: str
    payload: bytes
    qos: int
    mid: int
    retain: bool


_CLOSED = object()


class MQTTClient:
    """A connection to one broker, kept up by a background task; an async context manager.

    ``subscriptions`` are (topic filter, QoS) pairs, subscribed again after
    each reconnect. With ``manual_ack`` QoS 1/2 messages stay unacknowledged
    until `ack`. Counters: ``connects``, ``reconnects``, ``last_error``.
    """

    def __init__(self, config: ClientConfig, *, subscriptions: Sequence[tuple[str, int]] = (),
                 manual_ack: bool = False, name: str = "mqtt",
                 log: Callable[[str, dict[str, Any]], None] | None = None) -> None:
        self.config = config
        self.subscriptions = list(subscriptions)
        self.manual_ack = manual_ack
        self.name = name
        self.connects = 0
        self.reconnects = 0
        self.last_error: str | None = None
        self._log = log or (lambda event, fields: None)
        self._client: aiomqtt.Client | None = None
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._up = asyncio.Event()
        self._fatal: BaseException | None = None
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------ lifecycle

    def _make_client(self) -> aiomqtt.Client:
        c = self.config
        protocol = aiomqtt.ProtocolVersion.V5 if c.protocol == "5" else aiomqtt.ProtocolVersion.V311
        kwargs: dict[str, Any] = {}
        if c.protocol == "5":
            kwargs["clean_start"] = not c.persistent
            if c.persistent:
                props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
                props.SessionExpiryInterval = c.session_expiry
                kwargs["properties"] = props
        else:
            kwargs["clean_session"] = not c.persistent if c.client_id else None
        client = aiomqtt.Client(
            c.host, c.port, identifier=c.client_id, username=c.username, password=c.password,
            protocol=protocol, keepalive=c.keepalive, timeout=c.timeout,
            tls_context=c.tls.context() if c.tls is not None else None,
            tls_insecure=c.tls.insecure if c.tls is not None else None,
            max_inflight_messages=1000, **kwargs)
        client.pending_calls_threshold = 10_000  # publishers keep a window of calls in flight
        if self.manual_ack:
            client._client.manual_ack_set(True)
        return client

    async def __aenter__(self) -> MQTTClient:
        self._client = self._make_client()
        self._task = asyncio.get_running_loop().create_task(self._maintain(), name=f"{self.name}/connection")
        await self.wait_connected()
        return self

    async def __aexit__(self, *exc: object) -> None:
        task, self._task = self._task, None
        self._up.clear()
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, aiomqtt.MqttError):
                await task

    async def _maintain(self) -> None:
        client = self._client
        assert client is not None
        lo, hi = self.config.backoff
        delay = lo
        while True:
            try:
                async with client:
                    for topic, qos in self.subscriptions:
                        await client.subscribe(topic, qos=qos)
                    if self.connects:
                        self.reconnects += 1
                        self._log("mqtt reconnected", {"reconnects": self.reconnects})
                    self.connects += 1
                    delay = lo
                    self._up.set()
                    async for m in client.messages:
                        payload = m.payload if isinstance(m.payload, bytes) else str(m.payload).encode()
                        self._queue.put_nowait(Received(m.topic.value, payload, m.qos, m.mid, m.retain))
            except aiomqtt.MqttError as exc:
                self._up.clear()
                self.last_error = str(exc)
                if _is_fatal(exc):
                    self._fatal = MQTTConnectError(
                        f"MQTT broker {self.config.host}:{self.config.port} refused the connection: "
                        f"{exc}; check username/password, TLS options and client_id")
                    self._up.set()
                    self._queue.put_nowait(_CLOSED)
                    return
                self._log("mqtt disconnected", {"error": str(exc), "retry_in": delay})
                await asyncio.sleep(delay)  # backoff before the next attempt
                delay = min(delay * 2, hi)

    def _check(self) -> None:
        if self._fatal is not None:
            raise self._fatal

    async def wait_connected(self) -> None:
        """Wait until connected (raises `MQTTConnectError` if the broker refused us for good)."""
        await self._up.wait()
        self._check()

    # ------------------------------------------------------------- messages

    async def receive(self, timeout: float, limit: int = 4096) -> list[Received]:
        """What arrived: waits up to ``timeout`` s for a first message, then takes what is
        already queued (at most ``limit``); an empty list after the timeout."""
        self._check()
        q = self._queue
        if q.empty():
            try:
                first = await asyncio.wait_for(q.get(), timeout)
            except TimeoutError:
                return []
            if first is _CLOSED:
                self._check()
            out = [first]
        else:
            out = []
        while len(out) < limit and not q.empty():
            item = q.get_nowait()
            if item is _CLOSED:
                self._check()
            out.append(item)
        return out

    def ack(self, mid: int, qos: int) -> bool:
        """Acknowledge a QoS 1/2 message (manual mode); False when not connected: the broker
        then redelivers it with the same ``mid`` after the reconnect."""
        if self._client is None or qos == 0 or not self._up.is_set():
            return False
        rc = self._client._client.ack(mid, qos)
        return bool(rc == paho.MQTT_ERR_SUCCESS)

    async def publish(self, topic: str, payload: bytes, qos: int, retain: bool = False) -> None:
        """Publish, waiting out a disconnect (the message is sent again after the reconnect)."""
        while True:
            await self.wait_connected()
            assert self._client is not None
            try:
                await self._client.publish(topic, payload, qos=qos, retain=retain)
                return
            except aiomqtt.MqttError as exc:
                self.last_error = str(exc)
                self._check()
                if self._up.is_set():
                    await asyncio.sleep(self.config.backoff[0])


def _is_fatal(exc: aiomqtt.MqttError) -> bool:
    if isinstance(exc, aiomqtt.MqttCodeError):
        rc = exc.rc
        value = rc if rc is None or isinstance(rc, int) else rc.value
        return isinstance(value, int) and value in _FATAL_CODES
    return "SSL" in str(exc) or "certificate" in str(exc)
