"""Which redeliveries the MQTT Spark source's reader takes for repeats of spooled records
(riverbed.spark_bridge._mqtt_ingest.Unacked, issue 19), without a broker: the cases a real
broker produces only by chance (a packet id given to another message, a resend on the same
connection, a session lost).

A message is a repeat only when it has the DUP flag, came on a later connection than the
record, and has the record's packet id, topic and payload; anything else is spooled (a
duplicate at worst, never a loss).
"""

from __future__ import annotations

from pathlib import Path

from riverbed.mqtt import Received
from riverbed.spark_bridge._mqtt_ingest import Unacked


def _msg(mid: int, payload: bytes, connection: int, *, dup: bool = False, topic: str = "t",
         qos: int = 1) -> Received:
    return Received(topic, payload, qos, mid, False, 0, dup, connection)


def test_a_record_restored_from_the_spool_matches_its_redelivery_once() -> None:
    u = Unacked()
    u.restore([(7, 1, "t", b"a"), (8, 2, "t", b"b")])
    assert u.first_seq == 7
    assert u.is_repeat(_msg(1, b"a", 1, dup=True))
    u.acked(1)
    u.confirmed(1, u.confirming())  # the broker answered a request sent after the ack
    assert not u.is_repeat(_msg(1, b"a", 1, dup=True))  # acked and gone: not a repeat again
    assert u.first_seq == 8


def test_a_redelivery_with_another_topic_or_payload_or_without_dup_is_new() -> None:
    u = Unacked()
    u.restore([(0, 1, "t", b"a"), (1, 2, "t", b"b"), (2, 3, "t", b"c")])
    assert not u.is_repeat(_msg(1, b"other", 1, dup=True))  # the id now names another message
    assert not u.is_repeat(_msg(2, b"b", 1, dup=True, topic="u"))
    assert not u.is_repeat(_msg(3, b"c", 1))  # no DUP flag: a new message reusing the id
    assert len(u) == 0


def test_a_first_delivery_ends_the_wait_for_redeliveries_of_earlier_connections() -> None:
    u = Unacked()
    u.restore([(0, 1, "t", b"a"), (1, 2, "t", b"b")])
    assert not u.is_repeat(_msg(5, b"new", 1))  # the broker resends first: it had those acks
    assert len(u) == 0
    assert not u.is_repeat(_msg(2, b"b", 1, dup=True))


def test_a_record_of_the_current_connection_is_not_matched_and_goes_once_its_ack_was_read() -> None:
    u = Unacked()
    m = _msg(4, b"x", 2)
    assert not u.is_repeat(m)
    u.add(10, m)
    assert not u.is_repeat(_msg(4, b"x", 2, dup=True))  # a resend on its own connection
    u.acked(4)
    assert u.waiting
    round_ = u.confirming()
    u.add(11, _msg(5, b"y", 2))
    u.acked(5)  # after the round trip was sent: not covered by its answer
    u.confirmed(1, round_)  # an answer on another connection proves nothing here
    assert u.first_seq == 10
    u.confirmed(2, round_)
    assert u.first_seq == 11 and u.waiting


def test_an_ack_the_broker_never_read_leaves_the_record_to_match_its_redelivery() -> None:
    u = Unacked()
    u.add(3, _msg(9, b"y", 1))
    u.acked(9)  # written to a socket the broker had closed: the round trip is never answered
    u.confirming()
    assert u.is_repeat(_msg(9, b"y", 2, dup=True))  # the next connection: the broker sends it again
    assert u.first_seq == 3 and not u.waiting  # until the ack of the redelivery is read
    u.acked(9)
    u.confirmed(2, u.confirming())
    assert u.first_seq is None


def test_a_record_of_a_lost_connection_waits_for_its_redelivery() -> None:
    u = Unacked()
    u.add(3, _msg(9, b"y", 1))  # spooled; not acked: its connection is gone
    u.confirmed(2, u.confirming())  # the acks the broker read were others'
    assert u.first_seq == 3
    assert u.is_repeat(_msg(9, b"y", 2, dup=True))
    u.acked(9)
    u.confirmed(2, u.confirming())
    assert u.first_seq is None


def test_records_that_did_not_reach_the_spool_are_dropped() -> None:
    u = Unacked()
    u.add(5, _msg(1, b"a", 1))
    u.add(6, _msg(2, b"b", 1))
    u.drop(range(6, 7))
    assert u.first_seq == 5 and len(u) == 1


def test_qos_0_and_2_are_never_taken_for_repeats_and_a_lost_session_forgets_all() -> None:
    u = Unacked()
    u.restore([(0, 1, "t", b"a")])
    assert not u.is_repeat(_msg(1, b"a", 1, dup=True, qos=2))
    assert not u.is_repeat(_msg(0, b"a", 1, qos=0))
    u.clear()
    assert not u.is_repeat(_msg(1, b"a", 1, dup=True))


def test_the_spooling_client_subscribes_every_topic_at_every_connection(tmp_path: Path) -> None:
    """A session recorded as holding the topics was not subscribed again: a broker restored
    from an older save (its session without a topic added since) left that topic unread,
    silently (review 47). Topics recorded and no longer wanted are still unsubscribed."""
    import json
    from types import SimpleNamespace

    from riverbed.spark_bridge._mqtt_ingest import SpoolFeeder, session_key

    spool = str(tmp_path / "spool")
    options = SimpleNamespace(spool=spool, topics=["a/#", "b"], qos=1, client_id="c47")
    feeder = SpoolFeeder.__new__(SpoolFeeder)
    feeder.options = options  # type: ignore[assignment]
    with open(spool + ".session", "w", encoding="utf-8") as f:
        json.dump(session_key(options), f)  # type: ignore[arg-type]
    assert feeder._plan(True) == ([], [("a/#", 1), ("b", 1)])
    assert feeder._plan(False) == ((), [("a/#", 1), ("b", 1)])
    with open(spool + ".session", "w", encoding="utf-8") as f:
        json.dump({"clientId": "c47", "topics": ["a/#", "old"], "qos": 1}, f)
    assert feeder._plan(True) == (["old"], [("a/#", 1), ("b", 1)])
