"""The one adapter over aiomqtt: a connection that outlives broker restarts, with manual acks.

Everything riverbed needs from an MQTT client goes through `MQTTClient`, so
that aiomqtt 3 (MQTT 5 only, built-in reconnect, explicit ``puback``) changes
this file and nothing else. What it adds to aiomqtt 2.5:

* **Reconnect with backoff.** aiomqtt 2 never reconnects; a named background
  task re-enters the same ``aiomqtt.Client`` (which keeps paho's session
  state) with exponential backoff, re-subscribes, and counts reconnects.
  The backoff is wall-clock time (`wall_sleep`) on any event loop: a broker
  comes back in real time, and a virtual clock, which jumps over every wait
  while nothing else runs, made the retries spin at full speed.
  Errors that a retry cannot fix (bad credentials, TLS failures, a refused
  client id) end the connection with `MQTTConnectError` instead.
* **Manual acknowledgement** (paho's ``manual_ack_set``): a QoS 1/2 message is
  acknowledged only when `ack` is called, so a checkpointing source can ack
  after the checkpoint holding its effects is committed.
* **Persistent sessions done right**: a stable client id with
  ``clean_session=False`` (3.1.1), or ``clean_start=False`` *and* a session
  expiry interval (5); aiomqtt's default ``clean_start=FIRST_ONLY`` would wipe
  the session at every process start.
* **What the broker said at connect time** (`ConnectInfo`, which aiomqtt 2
  drops): the CONNACK's session-present flag and MQTT 5 properties, and the
  QoS each subscription was granted, so a source can check them
  (`riverbed.mqtt._checks`). A session lost at the broker starts a new
  ``session`` number: packet ids of the old one must not be acknowledged.
* **Publishing once** (`publish_once`): one bounded attempt, for messages a
  failure may drop (dead letters); with ``drop_unsent`` what paho would
  resend after a reconnect is dropped instead, so a packet the broker refuses
  by closing the connection cannot close it again at every reconnect.
* **Messages the broker cannot take** (`publish`): one larger than the
  Maximum Packet Size an MQTT 5 broker announced is refused before it is
  sent, and one in flight each time the connection closed, `MAX_LOSSES_IN_FLIGHT`
  times running (an MQTT 3.1.1 broker closes the connection on a packet above
  its limit, and says nothing before), is given up on: either way an
  `MQTTPublishError`, where the sink looped on reconnects for ever.
* **Retained messages once** (MQTT 5): subscriptions ask for Retain Handling
  1, so a broker sends the retained messages of a filter only when the
  subscription is new, not when a session it kept is subscribed again.
* **No stale socket registrations.** aiomqtt registers paho's socket with the
  event loop through ``call_soon_threadsafe``, the file descriptor read when
  it schedules; a connection the broker closed at once (a packet it refuses)
  was closed before the registration ran: "Bad file descriptor" tracebacks,
  and, when the next connection reused the number, the selector dropped that
  descriptor and the client no longer read its socket (a publish waited for
  its PUBACK until aiomqtt's timeout). `_GuardedLoop` registers only the
  socket paho still has. And a connection closed between its CONNACK and
  the end of aiomqtt's ``__aenter__`` is seen as closed (aiomqtt forgets
  that disconnect, and the client waited on a dead connection for ever).
* **Each reconnect waits for its own CONNACK.** aiomqtt resolves a future at
  the CONNACK and makes it new only in a graceful ``__aexit__``: after a
  connection the broker dropped, it stayed resolved, so the next
  ``__aenter__`` returned as soon as the socket was open, before that
  connection's CONNACK. The session-present flag read then was the previous
  connection's (a session the restarted broker had lost was taken as kept,
  and nothing subscribed), and a check for a connection closed right after
  its CONNACK saw one still connecting as closed and dropped it with the
  messages it had brought (under CPU load, the redeliveries after a broker
  restart then came again flagged DUP). `_await_connack` makes the future new
  before each attempt.
* **paho's socket errors are no errors here**: paho logs ``failed to receive on
  socket`` at error on every broker drop, which the reconnect loop already
  reports (``mqtt disconnected``, a warning); it goes to ``riverbed.mqtt.paho``
  at debug instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import ssl
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import aiomqtt
import paho.mqtt.client as paho
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions

__all__ = [
    "TLS",
    "ClientConfig",
    "ConnectInfo",
    "MQTTClient",
    "MQTTConfigError",
    "MQTTConnectError",
    "MQTTPublishError",
    "Protocol",
    "Received",
    "SessionPlan",
    "check_topic_filters",
    "plan_subscriptions",
    "publish_packet_size",
]

Protocol = Literal["3.1.1", "5"]
SessionPlan = tuple[Sequence[str], Sequence[tuple[str, int]]]
"""What to unsubscribe and what to subscribe on a connection (see `MQTTClient`)."""

# CONNACK reason codes (MQTT 5 numbering; paho maps 3.1.1 codes onto them) that no retry can fix.
_FATAL_CODES = frozenset({1, 2, 4, 5, 0x84, 0x85, 0x86, 0x87, 0x8A, 0x8C})

# How many connections in a row may close with one message in flight before `MQTTClient.publish`
# gives it up: a broker closes the connection on a packet above its maximum size (MQTT 3.1.1
# brokers do not announce it); paho resends the packet on each new connection, which closes
# again within milliseconds (with the backoff's shortest wait in between). A broker restart loses
# a connection once; three in a row, each time with this message unacknowledged, is a broker
# that refuses it.
MAX_LOSSES_IN_FLIGHT = 3

# paho's messages about a socket the broker closed (logged at error on each drop), and aiomqtt's
# when it closes a connection already lost (a warning): the reconnect loop reports the drop
# itself, as a warning.
_SOCKET_NOISE = ("failed to receive on socket", "timeout on socket", "Could not gracefully disconnect")


class _PahoNoise(logging.Filter):
    """Lowers paho's socket errors to debug (see the module doc); what the logger's level
    leaves out is dropped here, since the handlers of a logger at INFO let a record through
    by the level it came with."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING and str(record.msg).startswith(_SOCKET_NOISE):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


PAHO_LOGGER = logging.getLogger("riverbed.mqtt.paho")
"""The logger of paho and aiomqtt inside riverbed (aiomqtt's default, ``mqtt``, logged every
broker drop at error)."""
PAHO_LOGGER.addFilter(_PahoNoise())


class _GuardedLoop:
    """The event loop as aiomqtt's ``Client`` sees it (its ``_loop``): the same, except that a
    reader or writer it schedules from paho's socket callbacks is added only if the descriptor
    is still paho's socket when the call runs, and the first one of a new socket first drops
    what the loop still holds for an earlier socket of the same number (a writer added after
    paho unregistered it): epoll forgot that descriptor when it was closed, so adding to the
    stale entry failed (ENOENT) and the selector dropped the descriptor, the new socket's
    reader with it (see the module doc)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, inner: paho.Client) -> None:
        self._loop = loop
        self._inner = inner
        self._owner: dict[int, Any] = {}  # fd -> the socket its registrations are for

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loop, name)

    def call_soon_threadsafe(self, callback: Callable[..., Any], *args: Any,
                             context: Any = None) -> asyncio.Handle:
        if args and callback in (self._loop.add_reader, self._loop.add_writer):
            return self._loop.call_soon_threadsafe(self._add, callback, *args, context=context)
        return self._loop.call_soon_threadsafe(callback, *args, context=context)

    def _add(self, add: Callable[..., Any], fd: int, *args: Any) -> None:
        sock = self._inner.socket()
        if sock is None or sock.fileno() != fd:
            return  # closed since it was scheduled: its descriptor is no socket, or another's
        if self._owner.get(fd) is not sock:
            self._owner[fd] = sock
            # (a failing modify unregisters the entry before it raises: gone either way)
            with contextlib.suppress(Exception):
                self._loop.remove_writer(fd)
            with contextlib.suppress(Exception):
                self._loop.remove_reader(fd)
        add(fd, *args)


def publish_packet_size(topic: str, payload: bytes, qos: int, protocol: Protocol) -> int:
    """The bytes of the PUBLISH packet carrying ``payload`` (no MQTT 5 properties), to compare
    with a broker's Maximum Packet Size: fixed header (1), remaining length (1-4), topic
    (2 + UTF-8), packet id (2, QoS 1/2), properties length (1, MQTT 5), payload."""
    remaining = 2 + len(topic.encode()) + (2 if qos else 0) + (1 if protocol == "5" else 0) + len(payload)
    length_bytes = 1 if remaining < 128 else 2 if remaining < 16_384 else 3 if remaining < 2_097_152 else 4
    return 1 + length_bytes + remaining


async def wall_sleep(delay: float) -> None:
    """Wait ``delay`` seconds of wall-clock time, whatever clock the event loop keeps.

    `asyncio.sleep` waits on the loop's clock; on riverbed's virtual-time loop that clock
    jumps to the next timer as soon as every task waits, so a retry loop sleeping with it
    would retry at once, forever. A timer thread wakes the loop instead (it waits in its
    selector meanwhile, and may run other timers due before). Cancelling the wait stops the
    timer."""
    loop = asyncio.get_running_loop()
    woken: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not woken.done():
            woken.set_result(None)

    def fire() -> None:  # (in the timer's thread: a loop closed meanwhile has no one to wake)
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(wake)

    timer = threading.Timer(delay, fire)
    timer.daemon = True
    timer.start()
    try:
        await woken
    finally:
        timer.cancel()


class MQTTConfigError(ValueError):
    """An MQTT option is wrong; the message names the option, the value and the fix."""


class MQTTConnectError(ConnectionError, RuntimeError):
    """The broker refused the connection for a reason a retry cannot fix (credentials, TLS, a
    refused subscription), or could not be reached where no retry was wanted (a first
    connect with ``retry_first_connect=False``, or not within the time a caller allowed).
    The one connect error of every MQTT client in riverbed (the Spark MQTT source's too)."""


class MQTTPublishError(RuntimeError):
    """One `MQTTClient.publish_once` attempt failed; ``connection_lost`` when the connection
    closed while the message was in flight (a broker closes it on a packet it refuses)."""

    def __init__(self, message: str, *, connection_lost: bool = False, too_large: bool = False) -> None:
        super().__init__(message)
        self.connection_lost = connection_lost
        self.too_large = too_large  # above the Maximum Packet Size the broker announced


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
    """One message as the broker delivered it (``mid`` is 0 for QoS 0). ``session`` numbers the
    broker-side session it came in: a packet id is only meaningful (ackable) in its own.
    ``dup`` is the PUBLISH's DUP flag: the broker sent this packet id before and has no ack for
    it (a QoS 1/2 message resent on a reconnect). ``connection`` numbers the connection it came
    on (`MQTTClient.connects` then), so a redelivery can be told from its first delivery."""

    topic: str
    payload: bytes
    qos: int
    mid: int
    retain: bool
    session: int = 0
    dup: bool = False
    connection: int = 0


@dataclass(frozen=True, slots=True)
class ConnectInfo:
    """What one connection learnt of the broker: all a client can observe of its settings.

    ``session_present`` is the CONNACK flag; ``session_expected`` says a persistent session
    should have been there (a reconnect, or a source restored from a checkpoint). ``properties``
    are the MQTT 5 CONNACK properties by paho name (``ReceiveMaximum``, ``MaximumPacketSize``,
    ``MaximumQoS``, ``SessionExpiryInterval``...; empty for 3.1.1). ``granted`` holds, per
    subscription, (topic filter, QoS asked, QoS granted or a failure code >= 0x80).
    """

    session_present: bool
    session_expected: bool
    reconnect: bool
    protocol: Protocol
    properties: Mapping[str, Any] = field(default_factory=dict)
    granted: tuple[tuple[str, int, int], ...] = ()


_CLOSED = object()
SETTLE_FILTER = "riverbed/settle"  # unsubscribed (never subscribed) as a round trip: round_trip


class MQTTClient:
    """A connection to one broker, kept up by a background task; an async context manager.

    ``subscriptions`` are (topic filter, QoS) pairs, subscribed again after
    each reconnect. With ``manual_ack`` QoS 1/2 messages stay unacknowledged
    until `ack`. ``on_connect`` gets a `ConnectInfo` after each (re)connect,
    before any message of that connection is handed out; set
    ``expect_session`` when a persistent session must already exist (state
    restored from a checkpoint). ``drop_unsent``: see `publish_once`.
    ``session_plan(session_present)``, if given, decides per connection what
    to unsubscribe and subscribe, as ``(topic filters, [(topic filter, QoS)])``
    (default: nothing, and all of ``subscriptions``; `plan_subscriptions`).
    ``retry_first_connect=False`` makes a failed first connection attempt
    final (`MQTTConnectError`) instead of retried with backoff.
    ``on_state(connected)`` is called when a connection comes up (after
    ``on_connect``) and when it is lost, so an operator's metrics show a broker
    that is away while nothing else moves (a publisher waiting for it).
    Counters: ``connects``, ``reconnects``, ``sessions_lost``, ``last_error``.
    """

    def __init__(self, config: ClientConfig, *, subscriptions: Sequence[tuple[str, int]] = (),
                 manual_ack: bool = False, name: str = "mqtt",
                 log: Callable[[str, dict[str, Any]], None] | None = None,
                 on_connect: Callable[[ConnectInfo], None] | None = None,
                 drop_unsent: bool = False,
                 session_plan: Callable[[bool], SessionPlan] | None = None,
                 retry_first_connect: bool = True,
                 on_state: Callable[[bool], None] | None = None) -> None:
        self.config = config
        self._on_state = on_state
        self.subscriptions = list(subscriptions)
        self.session_plan = session_plan
        self.retry_first_connect = retry_first_connect
        self.manual_ack = manual_ack
        self.name = name
        self.connects = 0
        self.reconnects = 0
        self.sessions_lost = 0
        self.session = 0  # numbers the broker-side session (see Received.session)
        self.expect_session = False
        self.last_connect: ConnectInfo | None = None
        self.last_error: str | None = None
        self.drop_unsent = drop_unsent
        self._log = log or (lambda event, fields: None)
        self._on_connect = on_connect
        self._client: aiomqtt.Client | None = None
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._taken: list[Any] = []  # taken from the queue by a receive that was cancelled
        self._up = asyncio.Event()
        self._lost: asyncio.Future[None] | None = None  # resolved when this connection drops
        self._connack: tuple[bool, dict[str, Any]] = (False, {})
        # A connection that got a fresh session (CONNACK: no session present) and closed before
        # it subscribed: the broker now holds a session of ours with nothing in it, which the
        # next CONNACK calls present. That one is taken as fresh (lost, renumbered, subscribed).
        self._fresh_unsubscribed = False
        self._connack_now = False  # the CONNACK of the current attempt came
        self._awaiting_connack = False  # a reconnect waits for its CONNACK (`_await_connack`)
        self._fatal: BaseException | None = None
        self._task: asyncio.Task[None] | None = None
        self._dups: set[int] = set()  # packet ids that came with the DUP flag, not yet handed out
        self.settled = False  # the close's round trip was answered: the broker read every ack
        self._drops = 0  # connections the broker accepted (CONNACK) and then closed

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
            max_inflight_messages=1000, logger=PAHO_LOGGER, **kwargs)
        client.pending_calls_threshold = 10_000  # publishers keep a window of calls in flight
        client._loop = _GuardedLoop(client._loop, client._client)  # type: ignore[assignment]
        if self.manual_ack:
            client._client.manual_ack_set(True)
        self._hook_connack(client)
        self._hook_disconnect(client)
        self._hook_dup(client)
        return client

    def _hook_dup(self, client: aiomqtt.Client) -> None:
        """aiomqtt's message drops paho's DUP flag: note the packet ids that had it, on the way
        to aiomqtt's handler (which queues the message in arrival order)."""
        inner = client._client
        forward: Any = inner.on_message
        assert forward is not None
        dups = self._dups

        def on_message(c: paho.Client, userdata: Any, message: paho.MQTTMessage) -> None:
            if message.qos > 0:
                if message.dup:
                    dups.add(message.mid)
                else:
                    dups.discard(message.mid)
            forward(c, userdata, message)

        inner.on_message = on_message

    def _hook_disconnect(self, client: aiomqtt.Client) -> None:
        """A reconnect whose connection closes before its CONNACK fails at once (see
        `_await_connack`); aiomqtt itself ignores a disconnect before the CONNACK, and its
        ``__aenter__`` would wait for its timeout."""
        inner = client._client
        forward: Any = inner.on_disconnect
        assert forward is not None

        def on_disconnect(c: paho.Client, *args: Any) -> None:
            connected = client._connected
            if self._awaiting_connack and not connected.done():
                self._awaiting_connack = False
                connected.set_exception(aiomqtt.MqttError("the connection closed before its CONNACK"))
            forward(c, *args)

        inner.on_disconnect = on_disconnect

    def _await_connack(self, client: aiomqtt.Client) -> None:
        """Before each connection attempt: aiomqtt's ``__aenter__`` waits for its ``_connected``
        future, which it resolves at a CONNACK and makes new only in a graceful ``__aexit__`` or
        a failed ``__aenter__``. After a connection the broker closed, it was still resolved, and
        ``__aenter__`` returned before the new CONNACK: ``_connack`` was then the previous
        connection's (a session the broker lost looked kept; the subscription plan subscribed
        nothing), and paho was still connecting when `_maintain` checked that the connection
        was up. A new future here: the reconnect waits for its CONNACK, as the first connect.
        Every attempt then fails at once when its connection closes before the CONNACK
        (`_hook_disconnect`), the first and those after a failed attempt too (aiomqtt had made
        that future new already: only the first attempt after a drop failed fast, the others
        waited aiomqtt's 10 s timeout)."""
        connected = client._connected
        if connected.done():
            if not connected.cancelled():
                connected.exception()  # (retrieved: a refusal's was raised by __aenter__)
            client._connected = asyncio.get_running_loop().create_future()
        self._awaiting_connack = True

    def _hook_connack(self, client: aiomqtt.Client) -> None:
        """aiomqtt keeps neither the session-present flag nor the CONNACK properties: read them
        on the way to its own handler (paho calls it on the event loop, from the socket reader)."""
        inner = client._client
        forward: Any = inner.on_connect  # aiomqtt's, a version 2 callback
        assert forward is not None

        def on_connect(c: paho.Client, userdata: Any, flags: paho.ConnectFlags, reason: Any,
                       properties: Properties | None) -> None:
            self._awaiting_connack = False  # (a refusal too: aiomqtt resolves the future)
            if not getattr(reason, "is_failure", False):
                props = properties.json() if properties is not None else {}  # type: ignore[no-untyped-call]
                self._connack = (bool(flags.session_present), dict(props))
                self._connack_now = True  # (this attempt's, not a stale one's)
                if self.drop_unsent:
                    # paho resends unacknowledged QoS 1/2 publishes right after this callback,
                    # whatever the session; one the broker refused by closing the connection
                    # would close it again, at every reconnect.
                    c.drop_out_messages()
            forward(c, userdata, flags, reason, properties)

        inner.on_connect = on_connect

    def start(self) -> None:
        """Start connecting in the background (`__aenter__` also waits for the connection)."""
        if self._task is None:
            self._client = self._make_client()
            self._task = asyncio.get_running_loop().create_task(self._maintain(),
                                                                name=f"{self.name}/connection")

    async def __aenter__(self) -> MQTTClient:
        self.start()
        try:
            await self.wait_connected()
        except BaseException:
            # Cancelled (a job stopping while the broker is away) or refused: `__aexit__` will
            # not run, so the connection task stops here instead of retrying for ever.
            await self.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._settle()
        task, self._task = self._task, None
        was_up = self._up.is_set() and self._fatal is None
        self._up.clear()
        if self._lost is not None and not self._lost.done():
            self._lost.set_result(None)
        if was_up:
            self._state(False)
        if task is not None:
            task.cancel()
            # The connection ends gracefully: what paho still holds (acks) goes out before the
            # DISCONNECT. asyncio.wait never cancels what it waits on, so a second cancel of
            # the caller ends this wait, not the disconnect (it is not swallowed either).
            await asyncio.wait({task})
            if not task.cancelled():
                task.exception()  # retrieved: _maintain ends on its own errors only when fatal

    async def _settle(self) -> None:
        """With manual acks, before the DISCONNECT: one round trip (`round_trip`), so the broker
        has read every ack sent before it. mosquitto reads one packet of a connection per turn;
        a new connection with this client_id (a region reset reconnects within a millisecond)
        takes the session over and closes this one with the acks still unread, and the broker
        sends those messages again."""
        if self.manual_ack:
            self.settled = await self.round_trip()

    async def round_trip(self) -> bool:
        """One request the broker answers (an UNSUBSCRIBE of a filter never subscribed), within
        ``timeout``: True once answered on the connection it was sent on. The broker reads a
        connection in order, so it has then read everything sent before (the acks above all);
        an ack written to a socket the broker had already closed never arrives."""
        client = self._client
        if client is None or not self.connected:
            return False
        connection = self.connects
        sync = asyncio.ensure_future(client.unsubscribe(SETTLE_FILTER))
        done, _ = await asyncio.wait({sync}, timeout=self.config.timeout)
        if not done:
            sync.cancel()
            return False
        if sync.cancelled() or sync.exception() is not None:
            return False  # (a connection that failed meanwhile: the acks may be lost)
        return self.connects == connection and self.connected

    async def _maintain(self) -> None:
        client = self._client
        assert client is not None
        lo, hi = self.config.backoff
        delay = lo
        loop = asyncio.get_running_loop()
        while True:
            entered = subscribed = False
            self._connack_now = False
            self._await_connack(client)
            try:
                async with client:
                    entered = True
                    if client._client.socket() is None or not client._client.is_connected():
                        # Closed between the CONNACK (this attempt's: `_await_connack`) and
                        # here (paho resent a packet the broker refuses): aiomqtt's __aenter__
                        # then forgets the disconnect (it resets its `_disconnected` future after
                        # connecting), and this client would wait on a dead connection for ever.
                        # With manual acks, what the broker sent on it is unacknowledged: it
                        # comes again, first, on the next connection, so the copies queued now
                        # go (else: each twice, if that connection is taken as a fresh session).
                        if self.manual_ack:
                            while not client._queue.empty():
                                client._queue.get_nowait()
                            self._dups.clear()
                        raise aiomqtt.MqttError("the connection closed right after the CONNACK")
                    if self._fresh_unsubscribed:  # (see __init__)
                        self._connack = (False, self._connack[1])
                        self._fresh_unsubscribed = False
                    granted = []
                    drop: Sequence[str] = ()
                    subscriptions: Sequence[tuple[str, int]] = self.subscriptions
                    if self.session_plan is not None:
                        drop, subscriptions = self.session_plan(self._connack[0])
                    if drop:
                        await client.unsubscribe(list(drop))
                    for topic, qos in subscriptions:
                        if self.config.protocol == "5":
                            # Retain Handling 1: retained messages only for a new subscription, not
                            # again for one the broker's session kept (see the module doc).
                            codes = await client.subscribe(
                                topic, options=SubscribeOptions(qos=qos, retainHandling=1))
                        else:
                            codes = await client.subscribe(topic, qos=qos)
                        granted.append((topic, qos, _code(codes[0]) if codes else 0x80))
                    subscribed = True
                    self._connected(tuple(granted))
                    delay = lo
                    self._lost = loop.create_future()
                    self._up.set()
                    self._state(True)
                    connection = self.connects
                    async for m in client.messages:
                        payload = m.payload if isinstance(m.payload, bytes) else str(m.payload).encode()
                        dup = m.qos > 0 and m.mid in self._dups
                        if dup:
                            self._dups.discard(m.mid)
                        self._queue.put_nowait(Received(m.topic.value, payload, m.qos, m.mid, m.retain,
                                                        self.session, dup, connection))
            except aiomqtt.MqttError as exc:
                if entered:
                    self._drops += 1  # (`publish` counts those with its message in flight)
                    if not subscribed and self._connack_now and not self._connack[0]:
                        self._fresh_unsubscribed = True  # a new session, left without its subscriptions
                was_up = self._up.is_set()
                self._up.clear()
                if self._lost is not None and not self._lost.done():
                    self._lost.set_result(None)
                if was_up:
                    self._state(False)
                self.last_error = str(exc)
                first = self.connects == 0 and not self.retry_first_connect
                hint = self._closed_hint(exc) if not entered and _closed_at_connect(exc) else None
                if _is_fatal(exc) or first:
                    where = f"{self.config.host}:{self.config.port}"
                    self._fatal = MQTTConnectError(
                        f"MQTT broker {where} refused the connection: {exc}; check username/password, "
                        "TLS options and client_id" if _is_fatal(exc) else
                        f"cannot connect to the MQTT broker at {where}: {exc}; "
                        + (hint or "check the host, the port and that the broker runs"))
                    self._up.set()
                    self._queue.put_nowait(_CLOSED)
                    return
                fields: dict[str, Any] = {"error": str(exc), "retry_in": delay}
                if hint is not None:
                    fields["hint"] = hint
                self._log("mqtt disconnected", fields)
                await wall_sleep(delay)  # backoff before the next attempt
                delay = min(delay * 2, hi)
            except Exception as exc:
                # Anything else is no lost connection that a retry heals (paho refused a
                # subscription's filter with ValueError): it ended this task and the client waited
                # for ever. It is the client's end, said to whoever waits on it.
                self._up.clear()
                if self._lost is not None and not self._lost.done():
                    self._lost.set_result(None)
                self.last_error = str(exc)
                self._fatal = MQTTConnectError(f"the MQTT client {self.name!r} failed: "
                                               f"{type(exc).__name__}: {exc}")
                self._fatal.__cause__ = exc
                self._up.set()
                self._queue.put_nowait(_CLOSED)
                return

    def _state(self, connected: bool) -> None:
        if self._on_state is not None:
            self._on_state(connected)

    def _closed_hint(self, exc: aiomqtt.MqttError) -> str:
        """What to check when a connect got no CONNACK: a retry cannot tell a TLS mismatch from
        a broker restarting, so it goes on, and says. A timeout may also be a host that never
        answered the TCP connect (aiomqtt says "timed out" for both)."""
        where = f"{self.config.host}:{self.config.port}"
        tls = self.config.tls is not None
        if "timed out" in str(exc).lower():
            return (f"no answer from {where} within {self.config.timeout:g} s: the host may be "
                    "unreachable or firewalled, or " + (
                        "the port a plain MQTT listener (drop tls= or use the broker's TLS port)"
                        if tls else "the port a TLS listener (give tls=TLS(...))"))
        if tls:
            return (f"{where} closed the connection during the TLS handshake: if that port is a "
                    "plain MQTT listener, drop tls= or use the broker's TLS port")
        return (f"{where} closed the connection before answering CONNECT: if that port is a TLS "
                "listener, give tls=TLS(...); a broker at its connection limit does the same")

    def _connected(self, granted: tuple[tuple[str, int, int], ...]) -> None:
        present, props = self._connack
        reconnect = self.connects > 0
        expected = self.config.persistent and (reconnect or self.expect_session)
        if expected and not present:
            self.sessions_lost += 1
        if not present and (reconnect or expected):
            self.session += 1  # packet ids of the previous session mean nothing in this one
        info = ConnectInfo(present, expected, reconnect, self.config.protocol, props, granted)
        self.last_connect = info
        if reconnect:
            self.reconnects += 1
            self._log("mqtt reconnected", {"reconnects": self.reconnects, "session_present": present})
        self.connects += 1
        if self._on_connect is not None:
            self._on_connect(info)

    @property
    def connected(self) -> bool:
        return self._up.is_set() and self._fatal is None

    @property
    def max_packet_size(self) -> int | None:
        """The largest packet the broker takes, if it said so (MQTT 5 CONNACK)."""
        info = self.last_connect
        value = info.properties.get("MaximumPacketSize") if info is not None else None
        return value if isinstance(value, int) else None

    @property
    def maximum_qos(self) -> int:
        """The highest QoS the broker takes from us (MQTT 5 CONNACK; 2 when not announced)."""
        info = self.last_connect
        value = info.properties.get("MaximumQoS") if info is not None else None
        return value if isinstance(value, int) else 2

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
        if self._taken:  # what a cancelled receive had taken: first, and in order
            out, self._taken = self._taken, []
            if _CLOSED in out:
                self._check()
        elif q.empty():
            # Neither asyncio.wait_for (on Python 3.11 it returns the item when a cancellation
            # and the item come together: the cancelled task goes on, and a region reset waits
            # for a source that never stops) nor asyncio.timeout (its expiry cancels the task:
            # coming with the reset's cancel, the second one cut short the graceful disconnect,
            # so the acks of the last checkpoint never left and the broker sent them again).
            getter = asyncio.ensure_future(q.get())
            try:
                done, _ = await asyncio.wait({getter}, timeout=timeout)
            except asyncio.CancelledError:
                if getter.done() and not getter.cancelled():
                    # The message came with the cancellation (a stop): it is out of the queue,
                    # so the next receive returns it (it was lost, acknowledged).
                    self._taken.append(getter.result())
                raise
            finally:
                if not getter.done():
                    getter.cancel()  # (a cancelled Queue.get leaves its item in the queue)
            if not done:
                return []
            first = getter.result()
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

    async def stop_receiving(self, timeout: float = 2.0) -> None:
        """Unsubscribe from every topic (best effort, ``timeout`` s): what the broker sent
        before it answered is then in `receive`'s queue, and no new message comes before the
        disconnect, for paho to acknowledge and the job to drop."""
        client = self._client
        topics = [topic for topic, _ in self.subscriptions]
        if client is None or not topics or not self._up.is_set():
            return
        with contextlib.suppress(aiomqtt.MqttError):
            await client.unsubscribe(topics, timeout=timeout)

    def ack(self, mid: int, qos: int, session: int | None = None) -> bool:
        """Acknowledge a QoS 1/2 message (manual mode); False when not connected: the broker
        then redelivers it with the same ``mid`` after the reconnect. A message of an earlier
        ``session`` (the broker lost it) is not acknowledged: its id may name another one now."""
        if self._client is None or qos == 0 or not self._up.is_set():
            return False
        if session is not None and session != self.session:
            return False
        rc = self._client._client.ack(mid, qos)
        return bool(rc == paho.MQTT_ERR_SUCCESS)

    def flush(self) -> bool:
        """Hand what paho holds for the socket (acks above all) to the kernel now, rather than
        at the event loop's next turns, so they reach the broker even if the process is
        killed next. True when nothing is left to write (False: not connected, or the socket's
        buffer is full). Left is not read: on a connection the broker had already closed the
        acks are lost, and only `round_trip` tells."""
        client = self._client
        if client is None or not self.connected:
            return False
        inner = client._client
        try:
            inner.loop_write()
        except Exception:  # a broken socket: aiomqtt's own writer callback sees it too
            return False
        return self.connected and not inner.want_write()

    async def publish(self, topic: str, payload: bytes, qos: int, retain: bool = False) -> None:
        """Publish, waiting out a disconnect (the message is sent again after the reconnect).

        Raises `MQTTPublishError` once the connection task has ended (the client was closed, or
        that task cancelled, as ``asyncio.run`` does to the tasks left at its end): no reconnect
        can come, and retrying would go on for ever. Also (``too_large``) for a message above
        the Maximum Packet Size the broker announced (MQTT 5), before sending it: the broker
        would close the connection on it, and paho resend it at each reconnect; and
        (``connection_lost``) when the connection closed `MAX_LOSSES_IN_FLIGHT` times in a row
        with this message unacknowledged, which is what a broker does with a packet above its
        limit when it did not announce it (MQTT 3.1.1)."""
        drops = self._drops  # those from now on close with this message unacknowledged
        while True:
            await self.wait_connected()
            task, client = self._task, self._client
            if task is None or task.done() or client is None:
                raise MQTTPublishError(f"MQTT client {self.name!r}: its connection to "
                                       f"{self.config.host}:{self.config.port} ended (closed or "
                                       f"cancelled): the message for {topic!r} was not sent")
            self._check_size(topic, payload, qos)
            # In a task of its own, waited for with asyncio.wait: aiomqtt waits for the PUBACK
            # with asyncio.wait_for, which on Python 3.11 drops a cancellation that comes with
            # the PUBACK, and the cancelled caller would go on publishing.
            sent = asyncio.ensure_future(client.publish(topic, payload, qos=qos, retain=retain))
            try:
                await self._await_sent(sent, drops, topic, payload)
            finally:
                if not sent.done():
                    sent.cancel()
            exc = sent.exception()
            if exc is None:
                return
            if not isinstance(exc, aiomqtt.MqttError):
                raise exc
            self.last_error = str(exc)
            self._check()
            if self._up.is_set() and not task.done():
                await wall_sleep(self.config.backoff[0])

    def _check_size(self, topic: str, payload: bytes, qos: int) -> None:
        limit = self.max_packet_size
        if limit is None:
            return
        size = publish_packet_size(topic, payload, qos, self.config.protocol)
        if size > limit:
            raise MQTTPublishError(
                f"a message of {size} bytes (PUBLISH packet, payload {len(payload)} bytes) for "
                f"{topic!r} is larger than the broker's maximum packet size of {limit} bytes "
                f"({self.config.host}:{self.config.port}, MQTT 5 CONNACK): the broker would close "
                "the connection on it; send smaller messages (a smaller batch) or raise the "
                "broker's limit (mosquitto: max_packet_size)", too_large=True)

    async def _await_sent(self, sent: asyncio.Future[None], drops: int, topic: str,
                          payload: bytes) -> None:
        """Wait for ``sent``; raises `MQTTPublishError` once `MAX_LOSSES_IN_FLIGHT` connections
        closed (counted from ``drops``, the count when the message was first sent) without its
        acknowledgement: paho sends it again on each new connection, so each of them had it in
        flight. (A count, not an observation of each connection: one that comes and goes
        within a turn of the event loop is counted too.)"""
        while not sent.done():
            losses = self._drops - drops
            if losses >= MAX_LOSSES_IN_FLIGHT:
                raise self._given_up(losses, topic, payload)
            lost = self._lost if self._up.is_set() else None
            if lost is None or lost.done():  # between connections: wake at the next one
                up: asyncio.Future[Any] = asyncio.ensure_future(self._up.wait())
                try:
                    await asyncio.wait({sent, up}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    up.cancel()
                self._check()  # refused for good: no connection will resend it
                continue
            waited: set[asyncio.Future[Any]] = {sent, lost}
            await asyncio.wait(waited, return_when=asyncio.FIRST_COMPLETED)

    def _given_up(self, losses: int, topic: str, payload: bytes) -> MQTTPublishError:
        return MQTTPublishError(
            f"the broker at {self.config.host}:{self.config.port} closed the connection {losses} "
            f"times in a row with the message for {topic!r} ({len(payload)} bytes) in flight "
            f"({self.last_error}): a broker closes it on a packet larger than its maximum packet "
            "size (mosquitto: max_packet_size; MQTT 3.1.1 brokers do not announce it), or on a "
            "topic it refuses; the message is given up", connection_lost=True)

    async def publish_once(self, topic: str, payload: bytes, qos: int, timeout: float) -> None:
        """Publish with one attempt bounded by ``timeout`` s (waiting for a connection included);
        raises `MQTTPublishError` saying why it failed. Nothing is retried here, but paho would
        resend it after a reconnect unless the client was made with ``drop_unsent``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if not self.connected:
            try:
                await asyncio.wait_for(self.wait_connected(), timeout)
            except TimeoutError:
                raise MQTTPublishError(f"not connected to {self.config.host}:{self.config.port} within "
                                       f"{timeout} s ({self.last_error or 'no answer'})") from None
            except MQTTConnectError as exc:
                raise MQTTPublishError(str(exc)) from None
        client, lost = self._client, self._lost
        assert client is not None and lost is not None
        sent = loop.create_task(client.publish(topic, payload, qos=qos, timeout=math.inf))
        try:
            done, _ = await asyncio.wait({sent, lost}, timeout=max(deadline - loop.time(), 0),
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not sent.done():
                sent.cancel()
                with contextlib.suppress(asyncio.CancelledError, aiomqtt.MqttError):
                    await sent
        if sent in done and sent.exception() is None:
            return
        if sent in done:
            raise MQTTPublishError(f"publish refused: {sent.exception()}")
        if lost in done:
            raise MQTTPublishError(f"the connection was lost with the message in flight "
                                   f"({self.last_error})", connection_lost=True)
        raise MQTTPublishError(f"not acknowledged within {timeout} s")


def plan_subscriptions(present: bool, recorded: Mapping[str, int] | None,
                       wanted: Mapping[str, int]) -> SessionPlan:
    """What to unsubscribe and subscribe on a connection to a persistent session (a
    `MQTTClient` ``session_plan``), given the filters the session is known to hold
    (``recorded``, filter -> QoS; None: unknown) and those ``wanted``.

    Every wanted filter is subscribed at every connection: what the session holds is only
    ever a belief (a broker restored from an older save holds the filters of then; a stop in
    receive mode unsubscribed after its checkpoint recorded them), and a filter believed held
    and not subscribed is a topic read no more, silently. Subscribing again makes an MQTT 3.1.1
    broker send the filter's retained messages again, as new (a duplicate in an exactly-once
    job unless ``dedup_key`` drops it); MQTT 5 subscriptions ask for Retain Handling 1, which
    sends them only for a subscription the session did not have. A session present with
    filters no longer wanted loses them (else it delivers messages of topics the job dropped,
    and, MQTT 5, a message matching an old and a new filter twice)."""
    if not present or recorded is None:
        return (), list(wanted.items())
    return sorted(set(recorded) - set(wanted)), list(wanted.items())


def check_topic_filters(topics: Sequence[str]) -> list[str]:
    """``topics`` as a list, once each filter is valid MQTT and no two overlap.

    Valid (MQTT 3.1.1 and 5, 4.7): ``#`` only as the whole last level, ``+`` only as a whole
    level, no NUL, at most 65,535 bytes of UTF-8. paho refuses an invalid filter only at
    subscribe time, in the client's task, where the source waited for ever.

    Overlapping (one topic matches both, e.g. ``a/#`` and ``a/+/temp``): an MQTT 5 broker
    delivers a message once per matching subscription (and an MQTT 3.1.1 broker may), so the
    graph would see each such message twice. ``paho.mqtt.client.topic_matches_sub`` matches a
    filter with a topic, not with another filter: `_overlap` does that."""
    if isinstance(topics, str) or not topics or not all(isinstance(t, str) and t for t in topics):
        raise MQTTConfigError(f"topics={topics!r}: expected a non-empty list of topic filters, "
                              "e.g. ['plant/+/temp', 'alarms/#']")
    for topic in topics:
        levels = topic.split("/")
        bad = next((level for level in levels if level not in ("+", "#") and ("+" in level or "#" in level)),
                   None)
        if bad is not None:
            raise MQTTConfigError(f"topic filter {topic!r}: a wildcard must be a whole level, "
                                  f"not part of {bad!r}; e.g. 'a/+/b' or 'a/#'")
        if "#" in levels[:-1]:
            raise MQTTConfigError(f"topic filter {topic!r}: '#' must be the last level (it matches "
                                  "all the levels below); e.g. 'a/b/#'")
        if "\0" in topic or len(topic.encode("utf-8", "surrogatepass")) > 65_535:
            raise MQTTConfigError(f"topic filter {topic[:80]!r}: no NUL character and at most "
                                  "65,535 bytes of UTF-8")
    for i, first in enumerate(topics):
        for second in topics[i + 1:]:
            if _overlap(first.split("/"), second.split("/")):
                raise MQTTConfigError(
                    f"topic filters {first!r} and {second!r} overlap (a topic can match both): the "
                    "broker delivers such a message once per filter (MQTT 5 always), so the graph "
                    "would get it twice; keep one filter that covers both, or use two sources")
    return list(topics)


def _overlap(a: list[str], b: list[str]) -> bool:
    """Some topic matches both filters (given as levels). A topic starting with ``$`` is matched
    by no filter whose first level is a wildcard (MQTT 4.7.2)."""
    if (a[0].startswith("$") and b[0] in ("+", "#")) or (b[0].startswith("$") and a[0] in ("+", "#")):
        return False
    for x, y in zip(a, b, strict=False):
        if "#" in (x, y):
            return True
        if x != y and "+" not in (x, y):
            return False
    longer = a if len(a) > len(b) else b
    rest = longer[min(len(a), len(b)):]
    return not rest or rest == ["#"]  # 'a/#' matches 'a' too


def _code(value: Any) -> int:
    """A SUBACK entry as an int: the granted QoS, or a failure code >= 0x80."""
    return int(getattr(value, "value", value))


def _closed_at_connect(exc: aiomqtt.MqttError) -> bool:
    """A connect that reached a listener and got no CONNACK: reset, closed, or (a plain client
    at a TLS port, whose alert paho does not read as a close) timed out. Not a refusal:
    nothing listening gives ECONNREFUSED, which needs no hint."""
    text = str(exc).lower()
    return "refused" not in text and any(
        sign in text for sign in ("connection reset", "eof", "closed", "timed out"))


def _is_fatal(exc: aiomqtt.MqttError) -> bool:
    if isinstance(exc, aiomqtt.MqttCodeError):
        rc = exc.rc
        value = rc if rc is None or isinstance(rc, int) else rc.value
        return isinstance(value, int) and value in _FATAL_CODES
    return "SSL" in str(exc) or "certificate" in str(exc)
