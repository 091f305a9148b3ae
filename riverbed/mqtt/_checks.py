"""What a source can see, at connect time, of broker settings its guarantees depend on.

``ack="checkpoint"`` loses nothing only if the broker keeps the session and
everything queued in it, across the job's crashes and its own restarts. With
mosquitto's defaults, 10 kills of the job lost 14,102 of 20,000 messages,
silently (issue 16). The settings it needs (README, "MQTT") are
``persistence true``, ``autosave_interval 1``, ``max_queued_messages 0`` and
``max_inflight_messages 0``. Most of that is invisible to a client, so these
checks warn about what *can* be observed, and nothing else:

* **A lost session** (both protocols): a persistent session that should
  exist (a reconnect, or a source restored from a checkpoint) but the CONNACK
  says ``session present = 0``. The broker restarted without persistence or
  before saving it, or the session expired (MQTT 5 session expiry,
  mosquitto's ``persistent_client_expiration``): whatever was queued for the
  job, or in flight to it, is gone.
* **A refused or downgraded subscription** (both protocols, from the SUBACK):
  a refused one delivers nothing; one granted QoS 0 is never redelivered.
* **Receive Maximum** (MQTT 5 CONNACK, with ``ack="checkpoint"``): mosquitto
  announces ``max_inflight_messages`` here (none when it is 0), and the same
  window caps the unacknowledged messages it sends us. Acks come only with
  checkpoints, so at most that many messages arrive per checkpoint and the
  rest wait in the broker's queue, where ``max_queued_messages`` drops them.
  Other brokers announce their own window; it is reported the same way.
* **Session Expiry Interval** (MQTT 5 CONNACK): a broker granting less than
  the ``session_expiry`` asked forgets the session after an outage that long.

What no client can check, and the README must be followed for: whether the
broker persists at all and how often it saves (``persistence``,
``autosave_interval``: a broker killed between saves comes back with an old
session, losing what arrived since and redelivering what was acknowledged
since; see `riverbed.mqtt._dedup`), its queue limits (``max_queued_messages``,
``max_queued_bytes``: overflow is dropped without a word to anyone), its
outgoing window over MQTT 3.1.1 (``max_inflight_messages``), and
``persistent_client_expiration`` over MQTT 3.1.1. A session reported present
may also be stale in this way: the protocol has no means to tell.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ._client import ConnectInfo

__all__ = ["QOS2_NOT_AT_CHECKPOINTS", "BrokerWarning", "Check", "connect_warnings"]

Check = Literal["session_lost", "subscription_refused", "qos_downgraded", "receive_maximum", "session_expiry"]


@dataclass(frozen=True, slots=True)
class BrokerWarning:
    """A broker setting, observed at connect time, that defeats a delivery guarantee."""

    check: Check
    message: str


def connect_warnings(info: ConnectInfo, *, client_id: str | None, checkpointed: bool,
                     session_expiry: int) -> list[BrokerWarning]:
    """The warnings one connection's `ConnectInfo` calls for (see the module doc)."""
    out: list[BrokerWarning] = []
    if info.session_expected and not info.session_present:
        why = "it reconnected" if info.reconnect else "it was restored from a checkpoint"
        out.append(BrokerWarning("session_lost", (
            f"the broker has no session for client_id {client_id!r} (CONNACK session present = 0) "
            f"although {why}: messages queued for this source or in flight to it while it was away "
            "are LOST. The broker restarted without saving the session (mosquitto: persistence "
            "true, autosave_interval 1) or let it expire (session_expiry; mosquitto: "
            "persistent_client_expiration)")))
    for topic, asked, granted in info.granted:
        if granted >= 0x80:
            out.append(BrokerWarning("subscription_refused", (
                f"the broker refused the subscription to {topic!r} (SUBACK code 0x{granted:02x}): "
                "nothing published there reaches this source; check the broker's ACL for this "
                "client")))
        elif granted < asked:
            cost = ("QoS 0 messages are never redelivered, so what is in flight at a crash is lost"
                    if granted == 0 else "QoS 1 may deliver a message twice")
            out.append(BrokerWarning("qos_downgraded", (
                f"the broker granted QoS {granted} for {topic!r}, {asked} was asked: {cost} "
                "(mosquitto: max_qos on the listener)")))
    props = info.properties
    receive_max = props.get("ReceiveMaximum")
    if checkpointed and isinstance(receive_max, int) and receive_max < 65535:  # 65535: no limit
        out.append(BrokerWarning("receive_maximum", (
            f"the broker announces Receive Maximum {receive_max}: mosquitto announces its "
            "max_inflight_messages there, the number of messages it sends a client "
            "unacknowledged. With ack='checkpoint' acks come only with checkpoints, so at most "
            f"{receive_max} messages arrive per checkpoint and the rest queue at the broker, which "
            "drops them past max_queued_messages: set max_inflight_messages 0 and "
            "max_queued_messages 0")))
    granted_expiry = props.get("SessionExpiryInterval")
    if (info.protocol == "5" and checkpointed and isinstance(granted_expiry, int)
            and granted_expiry < session_expiry):
        out.append(BrokerWarning("session_expiry", (
            f"the broker keeps this source's session {granted_expiry} s after a disconnect, "
            f"{session_expiry} s were asked: an outage longer than that loses what was queued "
            "for it")))
    return out


# QoS 2 cannot be acknowledged late. Its first step (PUBREC) is the client's answer on receipt
# (paho sends it whatever its manual-ack setting; only PUBCOMP waits), and from then on the
# broker keeps no copy: on a reconnect it resends only the release (PUBREL), which a new client
# does not know. A review lost 68 of 200 messages on a region reset and 1,959 of 3,000 on a
# kill -9 this way. QoS 1 is redelivered until acknowledged, which is what a checkpoint's
# acknowledgement needs.
QOS2_NOT_AT_CHECKPOINTS = (
    "qos=2 cannot be acknowledged at checkpoints: the client confirms a QoS 2 message's receipt "
    "(PUBREC) as it arrives, and the broker then keeps no copy to send again, so what a crash or "
    "a region reset caught before its checkpoint would be lost without a word; use qos=1, which "
    "the broker sends again until the checkpoint acknowledges it")
