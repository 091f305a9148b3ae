"""MQTTSource and MQTTSink: sensor readings in and out of a graph through an MQTT broker.

Delivery guarantees (which one a graph has):

* ``ack="receive"`` (default): paho acknowledges each QoS 1/2 message on
  arrival, as MQTT clients usually do. What the graph had received but not
  yet processed when riverbed crashed is lost: at-most-once past the client.
  The source is not ``replayable``. With a ``client_id`` the session is
  persistent all the same, so the broker queues what is published while the
  connection is down (a broker restart: 225 of 4,000 messages were lost
  with a clean session, published before it subscribed again); a stop
  unsubscribes first (see `_take_the_rest`), so nothing queues for a job
  that is not running.
* ``ack="checkpoint"``: a persistent session (stable ``client_id``,
  ``clean_session=False`` / MQTT 5 ``clean_start=False`` with
  ``session_expiry``) and manual acks. A message is acknowledged only in
  `on_checkpoint_committed`, for messages received before that checkpoint's
  barrier (the runtime snapshots a source at its next ``flush``, and only
  one checkpoint is in flight at a time, so "snapshotted before the commit"
  is "in the committed checkpoint"). After a crash the broker redelivers the
  rest, so the source is ``replayable``. Two caveats: the broker's in-flight
  window must not stall between checkpoints (mosquitto: ``max_inflight_messages
  0``, and ``max_queued_messages 0`` so nothing queued offline is dropped), and
  a crash between the commit and the ack reaching the broker makes the
  broker redeliver messages whose effects are committed. The checkpoint
  therefore lists the (packet id, digest of topic and payload) it is about to
  ack, and those of earlier checkpoints whose acks did not reach the broker
  (given while disconnected); after a restore a redelivered message (DUP flag)
  matching one is acked and skipped, not submitted twice. (A new message comes
  without the DUP flag, even with a packet id in use: a broker that numbers
  more than 65,535 unacknowledged messages, mosquitto with
  ``max_inflight_messages 0``, wraps its 16-bit ids, and the source warns as
  it nears that many between two checkpoints. So a match is a repeat unless a
  message sent before the crash reused the id *and* has the same topic and
  payload.)

  The broker must keep the session, and all that is queued in it, across
  its own restarts too (README, "MQTT": ``persistence true``,
  ``autosave_interval 1``, ``max_queued_messages 0``, ``max_inflight_messages
  0``). What of that a client can observe is checked at each connect and
  warned about (`riverbed.mqtt._checks`: a lost session, a refused or
  downgraded subscription, an MQTT 5 Receive Maximum or shorter session
  expiry), counted in ``broker_warnings``. A session the broker lost starts
  over: packet ids of the old one are never acknowledged in the new one.
  A broker killed between two saves comes back with its last saved session
  and delivers again what riverbed had acknowledged since; ``dedup_key``
  (a sequence attribute of the payload, per ``dedup_scope``) drops those
  repeats, with its state in the checkpoint (`riverbed.mqtt._dedup`).

  Inside a consistent region (`Graph.consistent_region`) a reset rewinds the
  source in place, to the last committed checkpoint or to its initial state:
  its task is cancelled, which closes the connection gracefully (with manual
  acks a round trip first, so the broker has read every ack sent before:
  mosquitto reads a connection one packet per turn, and the next connection
  with this client_id would take the session over with acks still unread),
  and the restarted `run` reconnects to the persistent session. Nothing
  received since that checkpoint was acknowledged, so the broker sends all
  of it again, first (the in-flight messages, on reconnect, with their
  packet ids); those ids are submitted again instead of being skipped as
  repeats. The broker, not a buffer in the source, is where a replay comes
  from: it keeps these messages anyway until they are acked, a restart after
  a crash replays the same way, and a reset costs one reconnect (a few ms on
  a local broker). The checkpoint under way at the reset never commits: its
  list of acks is dropped, never sent. A reset logs ``mqtt source reset``
  (the checkpoint, how many messages the broker is to send again, how many
  records are taken back) and ``mqtt replay done`` (how many came, after how
  many ms); ``messages_replayed`` counts them.

Subscriptions of a persistent session: the broker keeps them with the session,
but what it holds is only ever a belief here (a broker restored from an older
save holds the filters of then; a stop in receive mode unsubscribes after its
checkpoint recorded them), and a filter believed held and not subscribed is a
topic read no more, silently. So every filter of ``topics`` is subscribed at
every connection (`plan_subscriptions`). MQTT 5 subscriptions ask for Retain
Handling 1, so a retained message comes only for a subscription the session
lacked; an MQTT 3.1.1 broker sends a filter's retained messages again at each
subscribe, as new (``dedup_key`` drops them in an exactly-once job). Filters
no longer in ``topics`` are unsubscribed when the session's are known: after
the first connection, and across restarts from the checkpoint (``topics``;
``mqtt subscriptions changed``).

Bad payloads never stop the graph. A source has one output stream
(`Graph.source`), so instead of an error port each refused payload or record
becomes a `BadMessage` (topic, payload, reason) that is counted by kind in
``bad_counts`` (``undecodable``, ``invalid``, ``oversized``), kept in the
bounded ``recent_bad``, passed to ``on_bad`` if given, and published to
``dead_letter_topic`` if given (a JSON envelope of at most
``dead_letter_max_bytes``), where any graph or tool can route it. Dead
letters go out on a connection of their own, once each, and never hold up
ingestion: one the broker does not take is counted in
``dead_letters_failed`` and dropped (`riverbed.mqtt._deadletter`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from ..graph import Operator, Punct, Schema, Source
from ..runtime import get_logger
from ._checks import QOS2_NOT_AT_CHECKPOINTS, BrokerWarning, connect_warnings
from ._client import (
    TLS,
    ClientConfig,
    ConnectInfo,
    MQTTClient,
    MQTTConfigError,
    MQTTPublishError,
    Protocol,
    Received,
    SessionPlan,
    check_topic_filters,
    plan_subscriptions,
)
from ._codec import Codec, Decoder, Encoder, Format, check_format
from ._deadletter import DEFAULT_MAX_BYTES, DeadLetters, check_max_bytes
from ._dedup import Dedup
from ._ingest import DEFAULT_MAX_PAYLOAD, BadMessage, BadMessages, PayloadDecoder

__all__ = ["BadMessage", "MQTTSink", "MQTTSource"]

AckMode = Literal["receive", "checkpoint"]


def _qos(qos: int) -> int:
    if qos not in (0, 1, 2):
        raise MQTTConfigError(f"qos={qos!r}: expected 0, 1 or 2")
    return qos


def _schema(schema: Schema | Mapping[str, str] | None) -> Schema | None:
    return schema if schema is None or isinstance(schema, Schema) else Schema(schema)


class MQTTSource(Source):
    """Subscribes to ``topics`` (wildcards allowed) and submits one tuple per decoded record.

    Each tuple holds the payload's attributes, plus the message topic in
    ``topic_attribute`` (None: left out) and the topic levels named by
    ``topic_levels`` (attribute -> 0-based level, e.g. ``{"sensor": 2}`` for
    ``plant/+/+/temp``). ``schema`` (or, if None, the graph's schema of the
    source's stream) lists all of them; without any, JSON/msgpack records go
    through as they are.

    It runs until the job stops, or after ``max_records`` tuples (tests,
    bounded runs); then the runtime sends final punctuation. ``idle_flush``
    (s) bounds how long a checkpoint waits on a silent broker.

    ``dedup_key`` names a sequence attribute (int, float or string growing
    with each message) and ``dedup_scope`` the attribute(s) it grows within
    (e.g. ``"topic"`` or ``"sensor"``; None: one sequence for the source); a
    tuple whose sequence is not above the last one of its scope is dropped and
    counted in ``duplicates_dropped`` (see the module doc for why).

    With ``ack="checkpoint"`` it may start a consistent region: a reset
    replays, from the broker's persistent session, every message received
    since the checkpoint it goes back to, and acknowledges nothing before the
    checkpoint holding its effects committed (module doc).
    """

    replayable = False  # True per instance with ack="checkpoint"

    def __init__(self, host: str, port: int = 1883, *, topics: Sequence[str], qos: int = 1,
                 format: Format = "json", schema: Schema | Mapping[str, str] | None = None,
                 decode: Decoder | None = None, separator: str = ",", raw_attribute: str = "payload",
                 topic_attribute: str | None = "topic", topic_levels: Mapping[str, int] | None = None,
                 client_id: str | None = None, username: str | None = None, password: str | None = None,
                 tls: TLS | None = None, protocol: Protocol = "3.1.1", ack: AckMode = "receive",
                 session_expiry: int = 3600, max_payload: int = DEFAULT_MAX_PAYLOAD,
                 on_bad: Callable[[BadMessage], None] | None = None, dead_letter_topic: str | None = None,
                 dead_letter_max_bytes: int = DEFAULT_MAX_BYTES, dedup_key: str | None = None,
                 dedup_scope: str | Sequence[str] | None = None,
                 max_records: int | None = None, idle_flush: float = 0.05,
                 backoff: tuple[float, float] = (0.05, 5.0)) -> None:
        self.topics = check_topic_filters(topics)  # (paho finds a bad one only at subscribe)
        if ack not in ("receive", "checkpoint"):
            raise MQTTConfigError(f"ack={ack!r}: expected 'receive' or 'checkpoint'")
        self.qos = _qos(qos)
        if ack == "checkpoint" and qos == 0:
            raise MQTTConfigError("ack='checkpoint' with qos=0: the broker never redelivers QoS 0; "
                                  "use qos=1")
        if ack == "checkpoint" and qos == 2:
            raise MQTTConfigError(QOS2_NOT_AT_CHECKPOINTS)
        # Persistent with any client_id: with ack="receive" too, so that the broker queues what is
        # published while the connection is down (acks still go out on arrival).
        self.config = ClientConfig(host, port, client_id, username, password, tls, protocol,
                                   persistent=ack == "checkpoint" or client_id is not None,
                                   session_expiry=session_expiry, backoff=backoff)
        self.ack = ack
        check_format(format)  # here, not at setup: a typo was a job failure (exit 1, retried)
        if format == "function" and decode is None:
            raise MQTTConfigError("format='function' needs decode=fn(bytes) -> record or list of "
                                  "records")
        self.format = format
        self.schema = _schema(schema)
        self.topic_attribute = topic_attribute
        self.topic_levels = dict(topic_levels or {})
        for name, level in self.topic_levels.items():
            if not isinstance(level, int) or level < 0:
                raise MQTTConfigError(f"topic_levels[{name!r}]={level!r}: expected a level index >= 0")
        self.max_payload = max_payload
        self._decoder_args: dict[str, Any] = {
            "decode": decode, "separator": separator, "raw_attribute": raw_attribute,
            "topic_attribute": topic_attribute, "topic_levels": self.topic_levels,
            "max_payload": max_payload}
        if dead_letter_topic is not None and ("+" in dead_letter_topic or "#" in dead_letter_topic):
            raise MQTTConfigError(f"dead_letter_topic={dead_letter_topic!r}: wildcards are for "
                                  "subscribing; publish dead letters to a plain topic")
        self.dead_letter_topic = dead_letter_topic
        self.dead_letter_max_bytes = check_max_bytes(dead_letter_max_bytes)
        scope = (dedup_scope,) if isinstance(dedup_scope, str) else tuple(dedup_scope or ())
        if dedup_key is None and scope:
            raise MQTTConfigError(f"dedup_scope={dedup_scope!r} without dedup_key: name the sequence "
                                  "attribute too, e.g. dedup_key='seq'")
        if dedup_key is not None and not (isinstance(dedup_key, str) and dedup_key
                                          and all(isinstance(a, str) and a for a in scope)):
            raise MQTTConfigError(f"dedup_key={dedup_key!r}, dedup_scope={dedup_scope!r}: expected "
                                  "attribute names, e.g. dedup_key='seq', dedup_scope='topic'")
        self.dedup = Dedup(dedup_key, scope) if dedup_key is not None else None
        self.max_records = max_records
        self.idle_flush = idle_flush
        if ack == "checkpoint":
            vars(self)["replayable"] = True  # the instance's promise (FrozenGraph.guarantee)
        # metrics-friendly counters
        self.messages_received = 0
        self.records_submitted = 0
        self.redeliveries_skipped = 0
        self.messages_acked = 0
        self.messages_replayed = 0  # received again after a region reset took them back
        self._bads = BadMessages(on_bad=on_bad, log=self._log)  # shared with the Spark input
        self.bad_counts: Counter[str] = self._bads.counts
        self.recent_bad: deque[BadMessage] = self._bads.recent
        self.broker_warnings: deque[BrokerWarning] = deque(maxlen=100)
        self._warned: set[BrokerWarning] = set()
        self._dead_letters: DeadLetters | None = None
        self._restored = False
        self._session = 0  # the client's session number the ack tracking below belongs to
        self._decoder: PayloadDecoder | None = None
        if self.schema is not None:
            self._decoder = self._make_decoder(self.schema)
        self._client: MQTTClient | None = None
        self.subscribed = asyncio.Event()  # set once connected and subscribed (tests, publishers)
        # (mid, qos, digest of topic and payload): received since the last snapshot, and in a
        # checkpoint not yet committed; acked on commit (all of the session `_session`).
        self._received: list[tuple[int, int, int]] = []
        self._snapshotted: list[tuple[int, int, int]] = []
        # (packet id, digest) of the messages in the stream but not acknowledged: a message sent
        # again after a reconnect (DUP) that matches one is skipped. The digest too, since a
        # broker numbering many unacknowledged messages (mosquitto, max_inflight_messages 0)
        # wraps its 16-bit packet ids and gives an id in use to a new message (no DUP flag).
        self._unacked: set[tuple[int, int]] = set()
        self._wrap_warned = False
        # mid -> digest of messages whose effects are committed but whose ack may not have reached
        # the broker: restored from the checkpoint, or an ack sent while disconnected.
        self._committed: dict[int, int] = {}
        # mid -> digest of acks paho took, until a round trip shows the broker read them: a
        # broker that stops (even cleanly) before reading an ack sends the message again, DUP,
        # on the same session (700 of 3,000 repeated in a review's broker restart under load).
        self._unconfirmed: dict[int, int] = {}
        self._confirming: asyncio.Task[None] | None = None
        # A region reset in place (see `_rewind`): the packet ids the broker is to send again,
        # when the reset happened (monotonic s), the last checkpoint committed while running.
        self._replaying: set[int] = set()
        self._reset_at: float | None = None
        self._replay_count = 0
        self._connected_once = False
        self._last_committed: int | None = None
        # The filters (-> QoS) the broker's persistent session holds, as far as known: after a
        # connection, or from the checkpoint restored (None: unknown, all are subscribed).
        self._filters: dict[str, int] | None = None

    @property
    def bad_messages(self) -> int:
        return self._bads.total

    @property
    def on_bad(self) -> Callable[[BadMessage], None] | None:
        return self._bads.on_bad

    @on_bad.setter
    def on_bad(self, fn: Callable[[BadMessage], None] | None) -> None:
        self._bads.on_bad = fn

    @property
    def reconnects(self) -> int:
        return self._client.reconnects if self._client is not None else 0

    @property
    def sessions_lost(self) -> int:
        """Times the broker had lost the persistent session this source expected."""
        return self._client.sessions_lost if self._client is not None else 0

    @property
    def duplicates_dropped(self) -> int:
        return self.dedup.dropped if self.dedup is not None else 0

    @property
    def dead_letters_published(self) -> int:
        return self._dead_letters.published if self._dead_letters is not None else 0

    @property
    def dead_letters_truncated(self) -> int:
        return self._dead_letters.truncated if self._dead_letters is not None else 0

    @property
    def dead_letters_failed(self) -> int:
        return self._dead_letters.failed if self._dead_letters is not None else 0

    @property
    def dead_letter_failures(self) -> list[str]:
        """Why recent dead letters were dropped (the latest 100)."""
        return list(self._dead_letters.failures) if self._dead_letters is not None else []

    def _make_decoder(self, schema: Schema | None) -> PayloadDecoder:
        required = (self.dedup.key, *self.dedup.scope) if self.dedup is not None else ()
        return PayloadDecoder(self.format, schema, required=required, **self._decoder_args)

    # ------------------------------------------------------------ lifecycle

    def setup(self) -> None:
        if self.schema is None:
            self.schema = self.context.output_schema(0)
            self._decoder = None
        if self._decoder is None:
            self._decoder = self._make_decoder(self.schema)
        self._logger = get_logger(self.context.job, self.context.name)
        if self.ack == "checkpoint" and self.context.consistent_region is None:
            self._logger.warning(
                "mqtt source without checkpoints", client_id=self.config.client_id,
                detail="ack='checkpoint' acknowledges messages only when a checkpoint holding them "
                       "commits, and this job takes none: nothing is ever acknowledged, and each "
                       "start gets the whole history again; run with checkpoints (riverbed run "
                       "--checkpoint-dir, Job(checkpoints=...)) or use ack='receive'")

    def _log(self, event: str, fields: dict[str, Any]) -> None:
        self._logger.warning(event, **fields)

    async def run(self) -> None:
        ctx: Any = self.context
        manual = self.ack == "checkpoint"
        connected = ctx.counter("connected")  # 1 or 0: shows a broker that is away

        def on_state(up: bool) -> None:
            connected.value = int(up)

        client = MQTTClient(self.config, subscriptions=[(t, self.qos) for t in self.topics],
                            manual_ack=manual, name=f"{ctx.job}/{ctx.name}", log=self._log,
                            on_connect=self._on_connect, on_state=on_state,
                            session_plan=self._plan if self.config.persistent else None)
        client.expect_session = manual and (self._restored or self._connected_once)
        self._client = client
        letters = None
        if self.dead_letter_topic is not None:
            letters = self._dead_letters = self._bads.dead_letters = DeadLetters(
                self.config, self.dead_letter_topic, max_bytes=self.dead_letter_max_bytes,
                name=f"{ctx.job}/{ctx.name}/dead-letters", log=self._log)
        async with contextlib.AsyncExitStack() as stack:
            if letters is not None:
                await stack.enter_async_context(letters)
            await self._connect(stack, client)
            stack.callback(self._stop_confirming)
            self.subscribed.set()
            # counters for the status view and Prometheus (only those that can move)
            # (``connected`` is set by the client's state changes, `on_state`: at once, also
            # while no message comes)
            counts: list[tuple[str, Callable[[], int]]] = [("reconnects", lambda: client.reconnects)]
            if manual:
                counts.append(("replayed", lambda: self.messages_replayed))
            if self.dedup is not None:
                counts.append(("duplicates", lambda: self.duplicates_dropped))
            if letters is not None:
                counts += [("dead_letters", lambda: self.dead_letters_published),
                           ("dead_letters_truncated", lambda: self.dead_letters_truncated),
                           ("dead_letters_failed", lambda: self.dead_letters_failed)]
            counters = [(ctx.counter(name), value) for name, value in counts]
            try:
                while not ctx.stopping:
                    for msg in await client.receive(self.idle_flush):
                        self._ingest(msg, manual)
                    if manual and letters is not None:
                        await letters.settle()  # no ack (at the checkpoint) before its dead letter
                    for counter, value in counters:
                        counter.value = value()
                    await ctx.flush()  # a pending checkpoint is taken here, after what was submitted
                    if self._unconfirmed and (self._confirming is None or self._confirming.done()):
                        self._confirming = asyncio.ensure_future(self._confirm(client))
                    if self.max_records is not None and self.records_submitted >= self.max_records:
                        break
            except asyncio.CancelledError:
                if manual or not ctx.stopping:
                    raise  # an abort; or acks at checkpoints: the broker sends the rest again
            if not manual and ctx.stopping:
                await self._take_the_rest(client)
            if letters is not None:
                await letters.settle()
            for counter, value in counters:
                counter.value = value()

    async def _connect(self, stack: contextlib.AsyncExitStack, client: MQTTClient) -> None:
        """Enter ``client`` (its first connection), taking part in checkpoints meanwhile: a
        broker away when the job started held a checkpoint's barrier until it came, and past
        ``drain_timeout`` the region reset, or the job failed (``ack="receive"``), as did a
        stop meant to suspend it. Nothing is submitted before the connection, so a barrier
        served here holds the state the source started with."""
        ctx: Any = self.context
        entering = asyncio.ensure_future(stack.enter_async_context(client))
        try:
            while not (await asyncio.wait({entering}, timeout=self.idle_flush))[0]:
                await ctx.flush()  # a pending checkpoint is taken here
        finally:
            if not entering.done():  # cancelled (an abort, a reset): the client gives up too
                entering.cancel()
                await asyncio.wait({entering})
        entering.result()

    async def _confirm(self, client: MQTTClient) -> None:
        """Forget the acks the broker has read: it answered a request sent after them."""
        sent = dict(self._unconfirmed)
        if await client.round_trip():
            for mid, digest in sent.items():
                if self._unconfirmed.get(mid) == digest:
                    del self._unconfirmed[mid]

    def _stop_confirming(self) -> None:
        if self._confirming is not None:
            self._confirming.cancel()
            self._confirming = None

    async def _take_the_rest(self, client: MQTTClient) -> None:
        """A stop with ``ack="receive"``: what arrived was acknowledged as it came, so what the
        client still holds is the job's alone, and a stop drains the graph: it goes out before
        the source ends (a review's stop left 364 such messages behind, acknowledged and lost).
        The subscriptions end first, so that nothing new comes; what came before is taken
        until none came for ``idle_flush`` seconds (aiomqtt hands the client one message per
        turn of the event loop, so an empty queue is no proof that all is in), and for at most
        `DRAIN_SECONDS`: if the unsubscription failed (no connection, no answer), messages may
        keep coming, and the stop must still end. (What the session holds is then unknown: the
        next start subscribes all.)"""
        self._filters = None
        await client.stop_receiving()
        loop = asyncio.get_running_loop()
        until = loop.time() + DRAIN_SECONDS
        while loop.time() < until and (batch := await client.receive(self.idle_flush)):
            for msg in batch:
                self._ingest(msg, False)
        await self.context.flush()

    def _plan(self, present: bool) -> SessionPlan:
        """What this connection subscribes (`plan_subscriptions`: see the module doc)."""
        wanted = dict.fromkeys(self.topics, self.qos)
        held = self._filters
        drop, subscribe = plan_subscriptions(present, held, wanted)
        added = [t for t, qos in subscribe if held is not None and held.get(t) != qos]
        if held is not None and present and (drop or added):
            self._logger.warning("mqtt subscriptions changed", client_id=self.config.client_id,
                                 unsubscribed=list(drop), subscribed=added,
                                 detail="the broker's session held other topic filters than "
                                        "topics= (a restart with other topics): those no longer "
                                        "wanted are unsubscribed")
        return drop, subscribe

    def _on_connect(self, info: ConnectInfo) -> None:
        """Each (re)connect: forget packet ids of a session the broker lost; warn about what
        defeats the guarantees (once per warning; a lost session every time); note the filters
        the session now holds (all of ``topics`` but those refused)."""
        client = self._client
        self._connected_once = True
        if self.config.persistent:
            refused = {topic for topic, _, code in info.granted if code >= 0x80}
            self._filters = {topic: self.qos for topic in self.topics if topic not in refused}
        if client is not None and client.session != self._session:
            self._session = client.session
            self._unacked.clear()
            self._received.clear()
            self._snapshotted.clear()
            self._committed.clear()
            self._unconfirmed.clear()
            if self._replaying:
                self._logger.warning("mqtt replay lost", lost=len(self._replaying),
                                     detail="the broker lost the session: what was received since "
                                            "the last checkpoint will not come again")
                self._replaying.clear()
        if self._reset_at is not None and not self._replaying:
            self._replay_done()
        checkpointed = self.ack == "checkpoint"
        for w in connect_warnings(info, client_id=self.config.client_id, checkpointed=checkpointed,
                                  session_expiry=self.config.session_expiry):
            if w.check != "session_lost" and w in self._warned:
                continue
            self._warned.add(w)
            self.broker_warnings.append(w)
            self.context.counter("broker_warnings").inc()
            self._logger.warning("mqtt broker check", check=w.check, detail=w.message)

    def _ingest(self, msg: Received, manual: bool) -> None:
        if manual and msg.qos > 0 and msg.session == self._session:
            if msg.mid in self._replaying:  # taken back by a region reset: submitted again
                self._replaying.discard(msg.mid)
                self.messages_replayed += 1
                if not self._replaying:
                    self._replay_done()
            digest = _digest(msg)
            if msg.dup and (msg.mid, digest) in self._unacked:
                # Redelivered after a reconnect: already in the stream. (A message without the DUP
                # flag is new, even with an id in use: the broker wrapped its packet ids.)
                self.redeliveries_skipped += 1
                return
            committed = self._committed.pop(msg.mid, None)
            unconfirmed = self._unconfirmed.pop(msg.mid, None)
            if msg.dup and digest in (committed, unconfirmed):
                # Its effects are in a committed checkpoint, but the ack never reached the
                # broker (a crash or a disconnect right after the commit): ack, do not repeat.
                # (Without the DUP flag the broker had the ack and gave the id to a new message.)
                self.redeliveries_skipped += 1
                self._ack_one(msg.mid, msg.qos, digest)
                return
            self._unacked.add((msg.mid, digest))
            if len(self._unacked) >= WRAP_WARNING and not self._wrap_warned:
                self._warn_wrap()
            self._received.append((msg.mid, msg.qos, digest))
        self.messages_received += 1
        assert self._decoder is not None
        records, bad = self._decoder.decode_indexed(msg.topic, msg.payload)
        for b in bad:
            self._bad(b)
        dedup = self.dedup
        limit = self.max_records
        for where, rec in records:
            if limit is not None and self.records_submitted >= limit:
                return
            if dedup is not None:
                try:
                    if not dedup.admit(rec):
                        continue  # a repeat (counted in duplicates_dropped)
                except ValueError as exc:
                    self._bad(BadMessage(msg.topic, msg.payload, "invalid", str(exc), where))
                    continue
            self.submit(rec)
            self.records_submitted += 1

    def _warn_wrap(self) -> None:
        self._wrap_warned = True
        self._logger.warning("mqtt packet ids wrapping", unacked=len(self._unacked), limit=65_535,
                             detail="this many messages came since the last committed checkpoint: "
                                    "the broker reuses the 16-bit packet ids of messages still "
                                    "unacknowledged; take checkpoints more often (a shorter "
                                    "checkpoint period)")

    def _bad(self, bad: BadMessage) -> None:
        self._bads.report(bad)  # counted, kept, logged, on_bad, dead letter: riverbed.mqtt._ingest
        self.context.counter(f"bad_{bad.kind}").inc()  # status view and Prometheus

    # -------------------------------------------------------------- state

    def snapshot(self) -> Any:
        self._snapshotted.extend(self._received)
        self._received.clear()
        # Committed earlier, their acks never reached the broker (given while disconnected, or
        # restored): a restart from this checkpoint must still know them when the broker sends
        # them again, though this checkpoint's commit does not ack them (the broker has them).
        state: dict[str, Any] = {"client_id": self.config.client_id, "records": self.records_submitted,
                                 "acks": [list(x) for x in self._snapshotted],
                                 "acks_pending": [[mid, digest] for mid, digest
                                                  in (*self._committed.items(), *self._unconfirmed.items())]}
        if self.dedup is not None:
            state["dedup"] = self.dedup.snapshot()
        if self._filters is not None:  # what the broker's session holds: see the module doc
            state["topics"] = [[topic, qos] for topic, qos in sorted(self._filters.items())]
        return state

    def restore(self, state: Any) -> None:
        """At a (re)start, or when the region resets in place (then see `_rewind`)."""
        if not isinstance(state, dict) or state.get("client_id") != self.config.client_id:
            raise MQTTConfigError(f"MQTTSource: the checkpoint was taken with client_id="
                                  f"{state.get('client_id') if isinstance(state, dict) else state!r}, "
                                  f"this source has {self.config.client_id!r}; the broker session "
                                  "holding the unacknowledged messages belongs to the former")
        records = int(state.get("records", 0))  # max_records counts across restarts
        if self._client is not None:
            self._rewind(records, self._last_committed, initial=False)
        else:
            # A new process: which acks of the checkpoint reached the broker is unknown.
            self._committed = {int(mid): int(digest) for mid, digest in state.get("acks_pending", [])}
            self._committed.update((int(mid), int(digest)) for mid, _, digest in state.get("acks", []))
            # (a region reset in place keeps what this process knows: it is newer)
            topics = state.get("topics")  # absent from checkpoints of older versions: unknown
            self._filters = ({str(topic): int(qos) for topic, qos in topics}
                             if isinstance(topics, list) else None)
        self.records_submitted = records
        self._restored = True  # so the broker must still hold this source's session
        if self.dedup is not None and not self.dedup.restore(state.get("dedup")):
            self.dedup.last = {}
            self._logger.warning("mqtt dedup state not restored", dedup_key=self.dedup.key,
                                 dedup_scope=list(self.dedup.scope),
                                 reason="the checkpoint has none for this dedup_key and dedup_scope: "
                                        "repeats delivered at this restart are not recognised")

    def reset_to_initial_state(self) -> None:
        """The region resets before any checkpoint committed: everything received is replayed."""
        if self._client is not None:
            self._rewind(0, None, initial=True)
        self.records_submitted = 0
        if self.dedup is not None:
            self.dedup.last = {}

    def _rewind(self, records: int, checkpoint: int | None, *, initial: bool) -> None:
        """The region resets in place: the run's task was cancelled, its connection closed
        (gracefully: the broker has read the acks sent before). Nothing received since the
        checkpoint restored was acknowledged (acks go out only at commits), so the broker sends
        all of it again when `run` reconnects to the persistent session: the packet ids are
        forgotten as "in the stream" and remembered as a replay, which is submitted as new.
        The pending checkpoint's list (``_snapshotted``) goes: it will never commit, and acking
        it at the next commit would ack ids the broker may have given to other messages. Acks
        of committed messages that did not reach the broker (``_committed``) stay: the broker
        sends those again too, to be acked and skipped. (``checkpoint`` is None for the
        initial state, or for the checkpoint the job restored at start.)"""
        replay = self._replaying | {mid for mid, _ in self._unacked}
        replay.update(mid for mid, _, _ in self._received)
        replay.update(mid for mid, _, _ in self._snapshotted)
        self._logger.warning("mqtt source reset", to_checkpoint=checkpoint,
                             initial=initial,
                             replay=len(replay), records_taken_back=self.records_submitted - records,
                             acks_pending=len(self._committed))
        self._replaying = replay
        self._replay_count = len(replay)
        self._unacked.clear()
        self._received.clear()
        self._snapshotted.clear()  # the checkpoint under way (if any) will never commit
        self._session = 0  # the next client numbers the broker's sessions from 0 again
        self._reset_at = time.monotonic()

    def _replay_done(self) -> None:
        assert self._reset_at is not None
        self._logger.info("mqtt replay done", replayed=self._replay_count,
                          replay_ms=round((time.monotonic() - self._reset_at) * 1000, 1))
        self._reset_at = None

    def on_checkpoint_committed(self, checkpoint_id: int) -> None:
        self._last_committed = checkpoint_id
        done, self._snapshotted = self._snapshotted, []
        for mid, qos, digest in done:
            self._unacked.discard((mid, digest))
            self._ack_one(mid, qos, digest)
        if len(self._unacked) < WRAP_WARNING:
            self._wrap_warned = False

    def _ack_one(self, mid: int, qos: int, digest: int) -> None:
        if self._client is not None and self._client.ack(mid, qos, self._session):
            self.messages_acked += 1
            self._unconfirmed[mid] = digest  # until a round trip (`_confirm`)
        else:
            self._committed[mid] = digest  # the broker redelivers it; then ack it, skip it


# How many unacknowledged messages (ack="checkpoint") make the source warn that packet ids, 16
# bits, are about to wrap (`MQTTSource._warn_wrap`).
WRAP_WARNING = 60_000

# The longest a stop with ack="receive" takes in what the client still holds (`_take_the_rest`).
DRAIN_SECONDS = 5.0


def _digest(msg: Received) -> int:
    h = hashlib.blake2b(msg.topic.encode(), digest_size=8)
    h.update(b"\0")
    h.update(msg.payload)
    return int.from_bytes(h.digest(), "big") >> 1  # fits an int64 in the checkpoint encoding


# How many messages an MQTTSink queues before it holds its input back (`MQTTSink.max_queued`).
DEFAULT_MAX_QUEUED = 10_000

# A message of the outbox: (topic, payload, records in it).
Message = tuple[str, bytes, int]


class MQTTSink(Operator):
    """Publishes tuples, ``batch`` records per message, to ``topic`` or ``topic_of(tuple)``.

    Publishing runs in a background task. At final punctuation the sink
    holds final back (``defer_final``) until every message is published, so
    a graph ends only after the broker has them (QoS 1/2: acknowledged). A
    partial batch is published at each window mark and at final.

    At-least-once with checkpoints: a checkpoint holds what the sink has not
    published yet (partial batches, the queued messages, those in flight),
    and a restore (a restart, a region reset in place) publishes them again,
    first. A message published after a checkpoint's barrier and before a
    crash is published again by the restart (a duplicate, never a loss); and
    a message in flight when the connection drops (a broker restart) may
    arrive twice, at QoS 2 too: the session is clean, so the broker forgets
    what it had received, and a publish that raced the drop is sent again by
    paho and by the retry (15-50 of 4,000 at 2,000 messages/s in a review).
    Downstream, `MQTTSource(dedup_key=...)` drops them.

    Backpressure: once ``max_queued`` messages wait (a slow or absent
    broker), the sink stops taking input until half of them are out, so
    memory stays bounded and the sources slow down. While the input is held,
    a checkpoint's barrier waits behind it too (barriers never overtake
    tuples): with the broker gone, checkpoints wait for it. A stop with
    checkpoints takes the held input into the stop's checkpoint (the runtime
    lets a paused operator take input while that checkpoint is coming), and
    the restart publishes it. A stop or an abort that leaves messages
    unpublished logs how many (``mqtt sink unpublished``).

    A message the broker cannot take fails the sink (it has no error port),
    with an error naming its size and the limit: refused before sending when
    the broker announced its Maximum Packet Size (MQTT 5), or once the
    connection closed `MAX_LOSSES_IN_FLIGHT` times in a row with it in
    flight (MQTT 3.1.1 brokers announce nothing, and close the connection on
    a packet above their limit). It used to loop on reconnects for ever, and
    a stop waited for it.

    Counters (status view, Prometheus): ``connected`` (1 or 0), ``reconnects``,
    ``queued`` (messages waiting for the broker) and ``published``.
    """

    def __init__(self, host: str, port: int = 1883, *, topic: str | None = None,
                 topic_of: Callable[[Any], str] | None = None, qos: int = 1, format: Format = "json",
                 schema: Schema | Mapping[str, str] | None = None, encode: Encoder | None = None,
                 separator: str = ",", raw_attribute: str = "payload", batch: int = 1, retain: bool = False,
                 client_id: str | None = None, username: str | None = None, password: str | None = None,
                 tls: TLS | None = None, protocol: Protocol = "3.1.1", window: int = 64,
                 max_queued: int = DEFAULT_MAX_QUEUED,
                 backoff: tuple[float, float] = (0.05, 5.0)) -> None:
        if (topic is None) == (topic_of is None):
            raise MQTTConfigError("give topic='a/b' or topic_of=fn(tuple) -> topic, exactly one")
        if topic is not None and ("+" in topic or "#" in topic):
            raise MQTTConfigError(f"topic={topic!r}: wildcards are for subscribing; publish to a plain topic")
        if not isinstance(batch, int) or batch < 1:
            raise MQTTConfigError(f"batch={batch!r}: expected records per message, an int >= 1")
        if batch > 1 and format == "raw":
            raise MQTTConfigError("format='raw' carries one blob per message; use batch=1")
        if isinstance(max_queued, bool) or not isinstance(max_queued, int) or max_queued < 1:
            raise MQTTConfigError(f"max_queued={max_queued!r}: expected how many messages may wait "
                                  f"for the broker, an int >= 1 (default {DEFAULT_MAX_QUEUED})")
        self.qos = _qos(qos)
        self.config = ClientConfig(host, port, client_id, username, password, tls, protocol, backoff=backoff)
        self.topic = topic
        self.topic_of = topic_of
        self.batch = batch
        self.retain = retain
        self.window = window
        self.max_queued = max_queued
        self.codec = Codec(format, _schema(schema), encode=encode, separator=separator,
                           raw_attribute=raw_attribute)
        self.messages_published = 0
        self.records_published = 0
        # What is not published yet, all of it in each checkpoint: partial batches per topic, the
        # queued messages, and the chunk being published (until the broker acknowledged it).
        self._buffers: dict[str, list[dict[str, Any]]] = {}
        self._outbox: deque[Message] = deque()
        self._sending: list[Message] = []
        self._wakeup = asyncio.Event()  # something to publish, or final
        self._final = False  # final came: publish the rest, then let final go
        self._hold: Callable[[], None] | None = None
        self._paused = False  # input held back: the outbox is full
        self._task: asyncio.Task[None] | None = None
        self._client: MQTTClient | None = None
        self._error: BaseException | None = None
        self._counters: dict[str, Any] = {}
        self._reconnects = 0  # of the clients of earlier publishers (a region reset makes a new one)

    @property
    def messages_queued(self) -> int:
        """Messages waiting for the broker: queued or in flight (partial batches not counted)."""
        return len(self._outbox) + len(self._sending)

    def setup(self) -> None:
        self._logger = get_logger(self.context.job, self.context.name)
        ctx = self.context
        self._counters = {name: ctx.counter(name) for name in ("connected", "reconnects", "queued",
                                                                "published")}
        self._start_publisher()

    def _count(self) -> None:
        """Refresh the counters: on each connection change (the publisher may wait on an absent
        broker for long, with nothing else moving), each message queued, each window out."""
        counters, client = self._counters, self._client
        if not counters:
            return  # (before setup)
        counters["connected"].value = int(client is not None and client.connected)
        counters["reconnects"].value = self._reconnects + (client.reconnects if client is not None else 0)
        counters["queued"].value = self.messages_queued
        counters["published"].value = self.messages_published

    def _start_publisher(self) -> None:
        task = self._task
        if task is None or task.done():
            self._new_publisher()

    def _new_publisher(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._publisher(), name=f"{self.context.job}/{self.context.name}/publish")

    async def _publisher(self) -> None:
        logger = self._logger
        old = self._client
        if old is not None:  # (a new publisher after a reset: its client counts from 0)
            self._reconnects += old.reconnects + (1 if old.connects else 0)
        client = self._client = MQTTClient(  # (its reconnects logged, as the source's are)
            self.config, name=f"{self.context.job}/{self.context.name}",
            log=lambda event, fields: logger.warning(event, **fields),
            on_state=lambda up: self._count())
        outbox = self._outbox
        try:
            async with client:
                while True:
                    outbox = self._outbox  # (a restore replaces it)
                    if not outbox:
                        if self._final:
                            break  # all published: the client says goodbye, then final goes
                        self._wakeup.clear()
                        await self._wakeup.wait()
                        continue
                    sends = self._sending = [outbox.popleft() for _ in range(min(self.window, len(outbox)))]
                    try:
                        await asyncio.gather(*(client.publish(t, p, self.qos, self.retain)
                                               for t, p, _ in sends))
                    except MQTTPublishError as exc:
                        raise self._refused(exc, sends) from None
                    self._sending = []
                    self.messages_published += len(sends)  # QoS 1/2: acknowledged by the broker
                    self.records_published += sum(n for _, _, n in sends)
                    self._count()
                    if self._paused and len(self._outbox) <= self.max_queued // 2:
                        self._resume_input()
        except asyncio.CancelledError:
            self._log_unpublished("cancelled")
            self._release_final()
            raise
        except Exception as exc:
            self._error = exc
            self._log_unpublished(f"failed: {exc}")
            self._release_final()
            return
        if self._outbox or not self._final:
            # A reset while the client said goodbye took final back: a publisher for what comes.
            self._new_publisher()
        else:
            self._release_final()

    def _refused(self, exc: MQTTPublishError, sends: list[Message]) -> MQTTPublishError:
        """The sink's error for a message the broker does not take. When the connection closed
        on it repeatedly, which message of the window it was is unknown: the largest is named."""
        where = f"MQTTSink {self.context.name!r}"
        if not exc.connection_lost or not sends:
            return MQTTPublishError(f"{where}: {exc}", too_large=exc.too_large,
                                    connection_lost=exc.connection_lost)
        topic, payload, records = max(sends, key=lambda m: len(m[1]))
        return MQTTPublishError(f"{where}: {exc}; of the {len(sends)} message(s) in flight the "
                                f"largest has {len(payload)} bytes ({records} records, for "
                                f"{topic!r}): if the broker's max_packet_size is below that, "
                                "lower batch= or raise the limit", connection_lost=True)

    def _unpublished(self) -> tuple[int, int]:
        """Messages (partial batches counted as one each) and records not published yet."""
        queued = (*self._sending, *self._outbox)
        return (len(queued) + len(self._buffers),
                sum(n for _, _, n in queued) + sum(len(b) for b in self._buffers.values()))

    def _log_unpublished(self, why: str) -> None:
        messages, records = self._unpublished()
        if messages:
            connected = self._client is not None and self._client.connected
            self._logger.warning("mqtt sink unpublished", messages=messages, records=records, why=why,
                                 broker_connected=connected,
                                 detail="dropped by this process; with checkpoints, a restart "
                                        "publishes those of the last committed checkpoint again")

    def _hold_final(self) -> None:
        """Keep final back until all is published (again after a reset voided an earlier hold)."""
        if self._hold is None or not getattr(self._hold, "active", True):
            self._hold = self.context.defer_final()

    def _release_final(self) -> None:
        if self._hold is not None:
            release, self._hold = self._hold, None
            release()

    def _resume_input(self) -> None:
        """Take input again (from the publisher's task; the context wakes the host)."""
        self._paused = False
        self.context.pause_input(False)

    def on_tuple(self, tup: Any, port: int) -> None:
        if self._error is not None:
            raise self._error
        topic = self.topic if self.topic is not None else self.topic_of(tup)  # type: ignore[misc]
        buf = self._buffers.get(topic)
        if buf is None:
            buf = self._buffers[topic] = []
        buf.append(tup)
        if len(buf) >= self.batch:
            self._send(topic)

    def _send(self, topic: str) -> None:
        records = self._buffers.pop(topic, [])
        if records:
            self._queue((topic, self.codec.encode(records, batch=self.batch > 1), len(records)))

    def _queue(self, message: Message) -> None:
        outbox = self._outbox
        outbox.append(message)
        self._wakeup.set()
        counter = self._counters.get("queued")
        if counter is not None:
            counter.value = self.messages_queued
        if len(outbox) >= self.max_queued and not self._paused:
            self._paused = True
            self.context.pause_input(True)

    def on_punct(self, punct: Punct, port: int) -> None:
        for topic in list(self._buffers):
            self._send(topic)
        if punct is Punct.FINAL:
            if self._error is not None:
                raise self._error  # the publisher failed: nothing more will go out
            self._final = True
            self._hold_final()
            self._wakeup.set()
            self._start_publisher()
            task, client = self._task, self._client
            if (task is not None and (client is None or not client.connected) and not self._sending
                    and not self._outbox):
                # Nothing to deliver, and no broker to say goodbye to: the graph need not wait for
                # one (a job stopped while the broker was away ended only at a second signal).
                task.cancel()
                self._release_final()

    def on_shutdown(self) -> None:
        task = self._task
        if task is not None and not task.done():
            task.cancel()  # a stop that suspends the job: what is unpublished is logged
        if self._error is not None:
            raise self._error

    # -------------------------------------------------------------- state

    def snapshot(self) -> Any:
        """What is not published yet, as plain data: a restore publishes it again."""
        return {"messages": [[t, p, n] for t, p, n in (*self._sending, *self._outbox)],
                "buffers": [[topic, list(records)] for topic, records in self._buffers.items()],
                "final": self._final}

    def restore(self, state: Any) -> None:
        """At a restart, or a region reset in place: what the checkpoint had not published goes
        out first. What was queued since its barrier goes (the source replays those tuples);
        what was published since goes out again (a duplicate). With final in the checkpoint
        (final came, some messages were waiting), final is held again until they are out."""
        try:
            messages = deque((str(t), bytes(p), int(n)) for t, p, n in state["messages"])
            buffers = {str(topic): list(records) for topic, records in state["buffers"]}
            final = bool(state["final"])
        except (KeyError, TypeError, ValueError):
            raise MQTTConfigError(f"MQTTSink: cannot restore from {state!r}: expected the dict "
                                  "snapshot() returns") from None
        self._take_back(messages, buffers, final)

    def reset_to_initial_state(self) -> None:
        """The region resets before any checkpoint: the sources replay everything."""
        self._take_back(deque(), {}, final=False)

    def _take_back(self, messages: deque[Message], buffers: dict[str, list[dict[str, Any]]],
                   final: bool) -> None:
        if final:  # (final had sent the partial batches: none is waiting for more records)
            messages.extend((topic, self.codec.encode(records, batch=self.batch > 1), len(records))
                            for topic, records in buffers.items() if records)
            buffers = {}
        self._outbox, self._buffers, self._final = messages, buffers, final
        self._hold = None  # (a reset voided it; a new process has none)
        self._paused = False  # (the host resumed the input)
        if final:
            self._hold_final()
        if len(messages) >= self.max_queued:
            self._paused = True
            self.context.pause_input(True)
        self._wakeup.set()
        self._start_publisher()
        self._count()
