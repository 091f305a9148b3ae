"""The driver side of the MQTT Spark source: riverbed.mqtt's client feeding the spool.

Spark calls the reader synchronously, from one thread of a long-lived Python
process on the driver. The MQTT side is riverbed.mqtt's own `MQTTClient`
(the one `MQTTSource` uses: MQTT 3.1.1 and 5, TLS, credentials, reconnect
with backoff, manual acks) on an event loop of its own thread, so the
runtime and Spark share one client, its checks and its errors:

* Each batch of messages the client hands over is appended to the spool
  with one fsync, and only then acknowledged; a message the spool could not
  take is not acknowledged, and the broker redelivers it.
* A message spooled whose PUBACK the broker never read is not spooled
  twice. Between the fsync and the PUBACK leaving the process there is a
  window, and Spark stops a query by killing (SIGTERM) the process that
  hosts its reader: the reader's ``stop`` never runs. The broker then sends
  the message again to the next reader, with the DUP flag and the same
  packet id (as it does after a connection lost with acks unread). So a
  QoS 1 record keeps its packet id in the spool, the acks are pushed to the
  socket right after the spooling (`MQTTClient.flush`), a request sent
  after them confirms the broker read them (`MQTTClient.round_trip`), and
  ``<spool>.acked`` records the seq from which the broker may lack acks
  (``{"from": n}``; no fsync: a killed process leaves it written).
  `Unacked` holds the records not confirmed (at a start, read back from the
  spool from that seq on); a message arriving on a later connection with the
  DUP flag, a held record's packet id, topic and payload is that record sent
  again: acknowledged, not spooled. The broker resends what it lacks acks
  for first on a reconnect, so a message without the DUP flag ends the wait
  for records of earlier connections.
* With a `PayloadDecoder` (``format``), every message is decoded as it is
  spooled, and each refused payload or record is reported through
  `BadMessages`, as `MQTTSource` reports it: counted by kind, logged, and
  published to the dead-letter topic (`DeadLetters`, a connection of its
  own that never holds up the spool). The Spark tasks decode the spooled
  messages again with the same decoder and take the valid records only.
* The broker's session is kept across restarts (``<spool>.session`` records
  its subscription, so that topics dropped since are unsubscribed). Every
  topic is subscribed at every connection all the same: a broker restored
  from an older save holds the session's filters of then, and a topic
  believed held and not subscribed would be read no more, silently. MQTT 5
  asks for Retain Handling 1 (retained messages only for a new
  subscription); an MQTT 3.1.1 broker sends them again. What the client can observe of
  the broker is checked at each connect (`connect_warnings`): a refused or
  downgraded subscription fails the query, a lost session is logged.
* ``<spool>.status`` (JSON, rewritten when it changes) holds the counters, so
  the process that started the query can read them (`read_status`).
* ``<spool>.decoding`` records the decoding options the spooled messages
  were checked with. When they changed (or were never recorded), the
  messages spooled before and not yet committed are checked again at the
  query's first offset, as the tasks will decode them with the new options:
  what those refuse is reported then, not dropped unseen.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..mqtt import (
    BadMessage,
    BadMessages,
    BrokerWarning,
    ConnectInfo,
    DeadLetters,
    MQTTClient,
    MQTTConnectError,
    Received,
    SessionPlan,
    connect_warnings,
    plan_subscriptions,
)
from ._mqtt_options import MqttOptions, decoder_options
from ._spool import FORMAT, Spool, read_spool

__all__ = ["SpoolFeeder", "Unacked", "read_status"]

_log = logging.getLogger("riverbed.spark_bridge.mqtt_source")
_RECEIVE_S = 0.5  # how long the pump waits for messages before it looks at its counters again


def _log_event(event: str, fields: dict[str, Any]) -> None:
    _log.warning("%s %s", event, " ".join(f"{k}={v!r}" for k, v in fields.items()))


def session_key(options: MqttOptions) -> dict[str, Any]:
    return {"clientId": options.client_id, "topics": sorted(options.topics), "qos": options.qos}


def read_session(spool: str) -> dict[str, Any] | None:
    try:
        with open(spool + ".session", encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_json(path: str, data: Any, *, durable: bool) -> None:
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(data, f)
        if durable:
            f.flush()
            os.fsync(f.fileno())
    os.replace(path + ".tmp", path)


def read_status(spool: str) -> dict[str, Any] | None:
    """The counters of the reader feeding ``spool`` (None before it first connected)."""
    try:
        with open(os.fspath(spool) + ".status", encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _read_acked(spool: str) -> int | None:
    try:
        with open(spool + ".acked", encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    value = data.get("from") if isinstance(data, dict) else None
    return value if isinstance(value, int) else None


@dataclass(slots=True)
class _Record:
    seq: int
    topic: str
    payload: bytes
    connection: int  # the connection it came on, or was last sent again on (0: before this process)
    acked: int | None = None  # the round of `confirmed` its ack was given in, on that connection


class Unacked:
    """The spooled QoS 1 records whose PUBACK the broker is not known to have read, by packet
    id (see the module doc): what a DUP redelivery is checked against.

    An ack is known read once the broker answered a request sent after it on the same
    connection (`MQTTClient.round_trip`, `confirming` then `confirmed`): an ack written to a
    socket the broker had just closed never arrives, and the broker sends the message again
    on the next connection. A record is acknowledged on the connection it came on only; one
    that came on a connection since lost is left to its redelivery on the current one (the
    broker sends it again first thing), so no packet id is acknowledged twice on a connection
    (the second ack could acknowledge a new message the broker gave the id to after the first,
    before it is spooled). A message without the DUP flag on a later connection also ends the
    wait for the records of earlier ones: the broker resends what it lacks acks for first.
    """

    def __init__(self) -> None:
        self._by_mid: dict[int, _Record] = {}
        self._oldest = 0  # no record is of an earlier connection than this
        self._round = 0

    def __len__(self) -> int:
        return len(self._by_mid)

    def restore(self, records: Iterable[tuple[int, int, str, bytes]]) -> None:
        """Records ``(seq, mid, topic, payload)`` spooled before this process (later seqs win)."""
        for seq, mid, topic, payload in records:
            self._by_mid[mid] = _Record(seq, topic, payload, 0)
        self._oldest = 0

    def clear(self) -> None:
        """The broker lost the session: its packet ids name nothing any more."""
        self._by_mid.clear()

    @property
    def first_seq(self) -> int | None:
        """The lowest seq whose ack the broker may lack (None: it has them all)."""
        return min((r.seq for r in self._by_mid.values()), default=None)

    def is_repeat(self, m: Received) -> bool:
        """Whether ``m`` is a record the broker sends again (DUP flag, a later connection, the
        record's packet id, topic and payload); if so the record now waits for the ack of ``m``."""
        if m.qos != 1:
            return False
        if not m.dup:
            if m.connection > self._oldest:
                self._forget_before(m.connection)
            self._by_mid.pop(m.mid, None)  # the broker had the ack of an earlier record with this id
            return False
        r = self._by_mid.get(m.mid)
        if r is None or r.connection >= m.connection:
            return False  # sent before, never spooled (the reader stopped first)
        if r.topic != m.topic or r.payload != m.payload:
            del self._by_mid[m.mid]  # the id was given to another message: the record's ack arrived
            return False
        r.connection, r.acked = m.connection, None
        return True

    def add(self, seq: int, m: Received) -> None:
        self._by_mid[m.mid] = _Record(seq, m.topic, m.payload, m.connection)
        self._oldest = min(self._oldest, m.connection)

    def drop(self, seqs: range) -> None:
        """Records that did not make it to the spool after all."""
        for mid in [mid for mid, r in self._by_mid.items() if r.seq in seqs]:
            del self._by_mid[mid]

    def acked(self, mid: int) -> None:
        r = self._by_mid.get(mid)
        if r is not None:
            r.acked = self._round

    @property
    def waiting(self) -> bool:
        """Whether acks were given that the broker is not yet known to have read."""
        return any(r.acked is not None for r in self._by_mid.values())

    def confirming(self) -> int:
        """A round trip is about to be sent: the acks given so far are before it."""
        self._round += 1
        return self._round - 1

    def confirmed(self, connection: int, round_: int) -> None:
        """The broker answered the round trip ``round_`` on ``connection``."""
        for mid in [mid for mid, r in self._by_mid.items()
                    if r.acked is not None and r.acked <= round_ and r.connection == connection]:
            del self._by_mid[mid]

    def _forget_before(self, connection: int) -> None:
        for mid in [mid for mid, r in self._by_mid.items() if r.connection < connection]:
            del self._by_mid[mid]
        self._oldest = connection


class SpoolFeeder:
    """One query's MQTT connection into its spool (see the module doc); `start` and `stop` are
    called from Spark's thread, everything else runs on the feeder's event loop."""

    def __init__(self, options: MqttOptions, spool: Spool) -> None:
        self.options = options
        self.spool = spool
        self.error: BaseException | None = None  # raised by the reader's next call
        self.messages = 0
        self.bads = BadMessages(log=_log_event)
        self.broker_warnings: list[BrokerWarning] = []
        self._client: MQTTClient | None = None
        self._letters: DeadLetters | None = None
        self._pump: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._status: dict[str, Any] | None = None
        self._recheck_below: int | None = None  # see `recheck`
        self.redeliveries_dropped = 0  # spooled already, sent again by the broker: acked, not spooled
        self._unacked = Unacked()
        self._acked_from: int | None = None  # as ``<spool>.acked`` has it
        self._confirming: asyncio.Task[None] | None = None  # see `_confirm`

    @property
    def last_connect(self) -> ConnectInfo | None:
        """What the latest connection learnt of the broker (protocol, CONNACK properties...)."""
        return self._client.last_connect if self._client is not None else None

    @property
    def reconnects(self) -> int:
        return self._client.reconnects if self._client is not None else 0

    # -------------------------------------------------------------- Spark's thread

    def start(self) -> None:
        """Connect and subscribe, or raise `MQTTConnectError` (within ``connectTimeout``)."""
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, daemon=True,
                                  name=f"riverbed-mqtt-{self.options.client_id}")
        thread.start()
        self._loop, self._thread = loop, thread
        try:
            self._check_decoding()
            asyncio.run_coroutine_threadsafe(self._connect(), loop).result()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Disconnect cleanly (the broker keeps the session and queues for it)."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        self._loop = self._thread = None
        bound = 3 * self.options.client.timeout + 1  # dead letters settling, then the disconnect
        try:
            asyncio.run_coroutine_threadsafe(self._close(), loop).result(bound)
        except Exception as exc:  # a disconnect that hangs must not hang Spark's stop
            _log_event("mqtt source stop incomplete", {"error": str(exc) or type(exc).__name__})
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
            loop.close()

    def _check_decoding(self) -> None:
        o, spool = self.options, self.spool
        current = decoder_options(o.decoder) if o.decoder is not None else {}
        try:
            with open(o.spool + ".decoding", encoding="utf-8") as f:
                recorded = json.load(f)
        except (OSError, ValueError):
            recorded = None
        if recorded == current:
            return
        if o.decoder is not None and spool.next_seq > spool.first_seq:
            self._recheck_below = spool.next_seq  # `recheck` records the options once done
        else:
            _write_json(o.spool + ".decoding", current, durable=True)

    def recheck(self, start: int) -> None:
        """The query resumes at seq ``start``: report what the decoder refuses among the messages
        spooled, before this reader, under other decoding options (see the module doc)."""
        below, self._recheck_below = self._recheck_below, None
        decoder, loop = self.options.decoder, self._loop
        if below is None or decoder is None or loop is None:
            return
        refused: list[BadMessage] = []
        checked = 0
        for _, topic, payload, *_ in read_spool(self.spool.path, start, below):
            refused += decoder.decode(topic, payload)[1]
            checked += 1
        _log_event("mqtt decoding options changed", {
            "spool": self.spool.path, "checked_again": checked, "refused": len(refused),
            "detail": "messages spooled under other options are decoded with these; what they "
                      "refuse is reported now"})
        if refused:
            asyncio.run_coroutine_threadsafe(self._report(refused), loop).result()
        _write_json(self.options.spool + ".decoding", decoder_options(decoder), durable=True)

    async def _report(self, refused: list[BadMessage]) -> None:
        for bad in refused:
            self.bads.report(bad)  # on the loop: DeadLetters.put needs it

    # -------------------------------------------------------------- the event loop

    async def _connect(self) -> None:
        o = self.options
        recorded = read_session(o.spool)
        acked_from = _read_acked(o.spool)
        self._acked_from = acked_from
        self._unacked.restore(self.spool.packet_ids(self.spool.first_seq if acked_from is None
                                                    else acked_from))
        client = MQTTClient(o.client, subscriptions=[(t, o.qos) for t in o.topics], manual_ack=True,
                            name=f"{FORMAT}/{o.client_id}", log=_log_event, on_connect=self._on_connect,
                            session_plan=self._plan, retry_first_connect=False)
        client.expect_session = recorded is not None and recorded.get("clientId") == o.client_id
        self._client = client
        if o.dead_letter_topic is not None:
            letters = DeadLetters(o.client, o.dead_letter_topic, max_bytes=o.dead_letter_max_bytes,
                                  name=f"{FORMAT}/{o.client_id}/dead-letters", log=_log_event)
            self._letters = self.bads.dead_letters = await letters.__aenter__()
        client.start()
        try:
            await asyncio.wait_for(client.wait_connected(), o.connect_timeout)
        except TimeoutError:
            raise MQTTConnectError(
                f"{FORMAT}: the MQTT broker at {o.address} did not accept the connection and "
                f"subscription within {o.connect_timeout:g} s ({client.last_error or 'no answer'})"
            ) from None
        except MQTTConnectError as exc:
            raise MQTTConnectError(f"{FORMAT}: {exc}") from None
        if self.error is not None:
            raise self.error  # a subscription refused at this connect
        self._write_status()
        self._pump = asyncio.get_running_loop().create_task(self._run(client), name=f"{FORMAT}/pump")

    def _plan(self, present: bool) -> SessionPlan:
        """Every topic subscribed at every connection; those the session recorded (for this
        client id) and no longer wanted unsubscribed (`plan_subscriptions`, see module doc)."""
        o = self.options
        recorded = read_session(o.spool)
        held = (dict.fromkeys(recorded.get("topics", []), o.qos)
                if recorded is not None and recorded.get("clientId") == o.client_id else None)
        return plan_subscriptions(present, held, dict.fromkeys(o.topics, o.qos))

    def _on_connect(self, info: ConnectInfo) -> None:
        o = self.options
        if not info.session_present:
            self._unacked.clear()  # nothing will come again, and packet ids start over
        for w in connect_warnings(info, client_id=o.client_id, checkpointed=False,
                                  session_expiry=o.client.session_expiry):
            if w.check in ("subscription_refused", "qos_downgraded"):  # the query cannot go on
                self.error = MQTTConnectError(f"{FORMAT}: {w.message}")
                return
            self.broker_warnings.append(w)
            _log_event("mqtt broker check", {"check": w.check, "detail": w.message})
        if info.granted:
            _write_json(o.spool + ".session", session_key(o), durable=True)

    async def _run(self, client: MQTTClient) -> None:
        try:
            while self.error is None:
                messages = await client.receive(_RECEIVE_S)
                if messages and self.error is None:
                    self._take(client, messages)
                self._confirm(client)
                self._write_acked()
                self._write_status()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a refused reconnect, a full disk: the query stops on it
            self.error = MQTTConnectError(f"{FORMAT}: {exc}") if isinstance(exc, MQTTConnectError) else exc
        self._write_status()
        # Unacknowledged messages stay with the broker, for this session's next connection.
        await client.__aexit__(None, None, None)

    def _take(self, client: MQTTClient, messages: list[Received]) -> None:
        unacked, current = self._unacked, client.connects
        fresh: list[Received] = []
        seq = first = self.spool.next_seq
        for m in messages:  # in order: a redelivery may follow its first delivery in one batch
            if unacked.is_repeat(m):
                self.redeliveries_dropped += 1  # in the spool already: its ack is what the broker lacks
                if m.connection == current and client.ack(m.mid, m.qos, m.session):
                    unacked.acked(m.mid)
                continue
            if m.qos == 1:
                unacked.add(seq, m)
            fresh.append(m)
            seq += 1
        if fresh:
            try:
                self.spool.append_many([(m.topic, m.payload, m.qos, m.retain) for m in fresh],
                                       [m.mid if m.qos == 1 else 0 for m in fresh])
            except BaseException:
                unacked.drop(range(first, seq))
                raise
            for m in fresh:  # on disk: now the broker may forget them
                if m.qos != 1:
                    client.ack(m.mid, m.qos, m.session)
                elif m.connection == current and client.ack(m.mid, m.qos, m.session):
                    unacked.acked(m.mid)
        client.flush()  # the acks leave now, not at the event loop's next turns
        self.messages += len(fresh)
        decoder = self.options.decoder
        if decoder is not None:
            for m in fresh:
                for bad in decoder.decode(m.topic, m.payload)[1]:
                    self.bads.report(bad)

    def _confirm(self, client: MQTTClient) -> None:
        """Start a round trip that tells which acks the broker has read (one at a time)."""
        if (self._confirming is not None and not self._confirming.done()) or not self._unacked.waiting:
            return
        round_, connection = self._unacked.confirming(), client.connects

        async def confirm() -> None:
            if await client.round_trip():
                self._unacked.confirmed(connection, round_)
                self._write_acked()

        self._confirming = asyncio.get_running_loop().create_task(confirm(), name=f"{FORMAT}/acks")

    def _write_acked(self) -> None:
        """``<spool>.acked``: the seq from which the broker may lack acks (see the module doc)."""
        first = self._unacked.first_seq
        value = first if first is not None else self.spool.next_seq
        if value != self._acked_from:
            try:
                _write_json(self.options.spool + ".acked", {"from": value}, durable=False)
            except OSError as exc:  # a restart then takes more records for unacknowledged
                _log_event("mqtt source ack record not written", {"error": str(exc)})
            else:
                self._acked_from = value

    async def _close(self) -> None:
        pump, self._pump = self._pump, None
        if pump is not None:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump
        letters = self._letters
        if letters is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(letters.settle(), letters.timeout)
            await letters.__aexit__(None, None, None)
        client, confirming = self._client, self._confirming
        if confirming is not None:
            confirming.cancel()
            await asyncio.wait({confirming})
        self._write_status()
        if client is not None:
            round_, connection = self._unacked.confirming(), client.connects
            await client.__aexit__(None, None, None)  # a round trip first: see MQTTClient._settle
            if client.settled:  # the broker has read the acks: it sends none of these again
                self._unacked.confirmed(connection, round_)
        self._write_acked()

    def _write_status(self) -> None:
        client, letters, bads = self._client, self._letters, self.bads
        status: dict[str, Any] = {
            "client_id": self.options.client_id, "messages": self.messages, "bad": dict(bads.counts),
            "recent_bad": [{"topic": b.topic, "kind": b.kind, "reason": b.reason, "index": b.index}
                           for b in list(bads.recent)[-10:]],
            "redeliveries_dropped": self.redeliveries_dropped,
            "reconnects": client.reconnects if client is not None else 0,
            "sessions_lost": client.sessions_lost if client is not None else 0,
            "broker_warnings": [{"check": w.check, "message": w.message} for w in self.broker_warnings],
        }
        if letters is not None:
            status["dead_letters"] = {"published": letters.published, "truncated": letters.truncated,
                                      "failed": letters.failed, "failures": list(letters.failures)[-5:]}
        if status != self._status:
            try:
                _write_json(self.options.spool + ".status", status, durable=False)
            except OSError as exc:  # counters only: the spool itself fails loudly
                _log_event("mqtt source status not written", {"error": str(exc)})
            self._status = status
