"""Dropping the repeats a broker restart delivers, by a sequence number the payload carries.

mosquitto keeps its sessions in memory and writes them to disk only every
``autosave_interval`` seconds. Killed and restarted, it comes back with the
session as last saved: messages riverbed had received *and acknowledged*
since are delivered again, as new messages with new packet ids (796
duplicates in the issue 16 run). Nothing in the protocol tells them apart
from new readings; only the payload can.

`Dedup` keeps, per scope (the values of the ``scope`` attributes, e.g. the
topic or a sensor id; one scope when none is named), the highest value of the
``key`` attribute seen, and refuses a tuple whose value is not above it. The
semantics are a sequence, not a set of ids: the producer must number its
messages increasingly within a scope, in the order the broker delivers them
(MQTT keeps the order of one publisher's messages on one topic at one QoS), so
a tuple that arrives after a later one of its scope is dropped as a repeat.
The state is one value per scope, whatever the lag since the restart, and it
goes into the source's checkpoint, so a repeat that arrives after riverbed
itself restarted is still recognised. Values are ints, floats or strings (a
scope keeps one kind); a tuple without the attribute, or with another kind of
value, is refused as invalid rather than passed on unchecked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["Dedup"]


def _kind(value: Any) -> type | None:
    t = type(value)
    if t is int or t is float:
        return float  # ints and floats compare with each other (JSON does not tell them apart)
    if t is str:
        return str
    return None


class Dedup:
    """The last sequence value per scope; `admit` says whether a tuple is new."""

    def __init__(self, key: str, scope: Sequence[str] = ()) -> None:
        self.key = key
        self.scope = tuple(scope)
        self.last: dict[tuple[Any, ...], Any] = {}
        self.dropped = 0

    def admit(self, rec: Mapping[str, Any]) -> bool:
        """True for a tuple whose sequence is above its scope's last one (now remembered),
        False for a repeat (counted in ``dropped``); `ValueError` says why a tuple cannot be
        checked (no such attribute, a value that is no sequence)."""
        try:
            seq = rec[self.key]
            where = tuple(rec[a] for a in self.scope)
        except KeyError as exc:
            raise ValueError(f"dedup: the tuple has no attribute {exc.args[0]!r}") from None
        kind = _kind(seq)
        if kind is None:
            raise ValueError(f"dedup_key {self.key!r} is {seq!r} ({type(seq).__name__}): expected an "
                             "int, float or string that grows with each message")
        try:
            last = self.last.get(where)
        except TypeError:
            raise ValueError(f"dedup_scope {self.scope!r} is {where!r}: scope values must be "
                             "strings or numbers") from None
        if last is not None:
            if _kind(last) is not kind:
                raise ValueError(f"dedup_key {self.key!r} is {seq!r}, earlier {last!r} in the same "
                                 "scope: a scope's sequence keeps one kind (numbers or strings)")
            if seq <= last:
                self.dropped += 1
                return False
        self.last[where] = seq
        return True

    def snapshot(self) -> dict[str, Any]:
        return {"key": self.key, "scope": list(self.scope),
                "last": [[*where, seq] for where, seq in self.last.items()]}

    def restore(self, state: Any) -> bool:
        """Take the state of a checkpoint; False (and nothing restored) when it was taken with
        another key or scope, whose sequences mean nothing to this one."""
        if (not isinstance(state, Mapping) or state.get("key") != self.key
                or list(state.get("scope", ())) != list(self.scope)):
            return False
        width = len(self.scope)
        self.last = {tuple(entry[:width]): entry[width] for entry in state.get("last", ())
                     if isinstance(entry, (list, tuple)) and len(entry) == width + 1}
        return True
