"""Window state as plain data, and back.

A snapshot is made of dicts, lists, strings, numbers, booleans and None,
plus the user's own tuples and keys, so msgpack, a RocksDB value or a Spark
state store can hold it; nothing is pickled. Decoding validates the shape and
the window it belongs to and raises `SnapshotError` naming the offending
field, never a bare KeyError deep inside the engine.

What is kept follows IBM's Java window checkpoint (spec C2): per partition
the tuples in order and all policy state (count-trigger position, the
INITIAL_FULL flag, delta references, arrival times for time eviction, the
time of the last periodic tumble/trigger), plus the partition LRU order with
any age markers, the total tuple count and the window-wide state (shared
delta-trigger reference, the C++ delta order flag). Timers are not stored:
they are derived from that state when the snapshot is restored.

Restoring at the instant of the snapshot continues exactly as if nothing
happened. Restoring later follows IBM's reset rules (spec C7): a periodic
tumble or trigger that fell due in between fires at once and then every
period from then on; restored tuples already past a sliding time eviction
leave at once through an EVICTION event.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from ._errors import SnapshotError
from ._keys import decode_partition_key, encode_partition_key
from ._partition import Partition
from ._partition_eviction import AgeMarker, PartitionAgeJava

if TYPE_CHECKING:
    from ._window import StreamWindow

__all__ = ["FORMAT", "partition_state", "restore_partition_state", "restore_window", "window_state"]

FORMAT = "riverbed.window/1"


def partition_state(part: Partition) -> dict[str, Any]:
    return {
        "key": encode_partition_key(part.key),
        "tuples": list(part.tuples),
        "values": list(part.values),
        "arrivals": list(part.arrivals),
        "trigger_count": part.trigger_count,
        "seen_full": part.seen_full,
        "delta_ref": part.delta_ref,
        "has_delta_ref": part.has_delta_ref,
        "last_tick": part.last_tick,
    }


def window_state(w: StreamWindow[Any]) -> dict[str, Any]:
    evictor = w._evictor
    lru: list[Any] = []
    for k, v in w._lru.items():
        lru.append(["m", k.age] if isinstance(k, AgeMarker) else ["p", encode_partition_key(k), v])
    return {
        "format": FORMAT,
        "clause": w.spec.clause(),
        "flavor": w.rules.flavor.value,
        "now": w._now,
        "active": w._active,
        "final": w._final,
        "partitions": [partition_state(p) for p in w._parts.values()],
        "lru": lru,
        "total": sum(len(p.tuples) for p in w._parts.values()),
        "shared_delta_ref": [w._shared_has_ref, w._shared_ref],
        "in_order": w._in_order,
        "window_last_tick": w._window_last_tick,
        "age_last_tick": evictor.last_tick if isinstance(evictor, PartitionAgeJava) else None,
        "memory": [[encode_partition_key(k), *v] for k, v in w._memory.items()],
    }


def _field(data: dict[str, Any], name: str, kind: type | tuple[type, ...], where: str) -> Any:
    if name not in data:
        raise SnapshotError(f"{where}: the field {name!r} is missing")
    value = data[name]
    if (kind is int and isinstance(value, bool)) or not isinstance(value, kind):
        raise SnapshotError(f"{where}: the field {name!r} should be {getattr(kind, '__name__', kind)}, "
                            f"got {type(value).__name__}")
    return value


def _build_partition(w: StreamWindow[Any], data: Any, where: str) -> Partition:
    if not isinstance(data, dict):
        raise SnapshotError(f"{where}: a partition must be a map")
    tuples = _field(data, "tuples", list, where)
    values = _field(data, "values", list, where)
    arrivals = _field(data, "arrivals", list, where)
    if w._sliding and values and len(values) != len(tuples):
        raise SnapshotError(f"{where}: {len(values)} delta values for {len(tuples)} tuples")
    if arrivals and len(arrivals) != len(tuples):
        raise SnapshotError(f"{where}: {len(arrivals)} arrival times for {len(tuples)} tuples")
    if any(isinstance(a, bool) or not isinstance(a, int) for a in arrivals):
        raise SnapshotError(f"{where}: arrival times must be integer nanoseconds")
    key = decode_partition_key(data.get("key"))
    part = Partition(key if w.spec.partitioned else None, w._sliding)
    part.tuples = deque(tuples) if w._sliding else list(tuples)
    part.values = deque(values)
    part.arrivals = deque(arrivals)
    part.trigger_count = _field(data, "trigger_count", int, where)
    part.seen_full = _field(data, "seen_full", bool, where)
    part.delta_ref = data.get("delta_ref")
    part.has_delta_ref = _field(data, "has_delta_ref", bool, where)
    part.last_tick = _field(data, "last_tick", int, where)
    return part


def _check_header(w: StreamWindow[Any], data: Any) -> None:
    if not isinstance(data, dict):
        raise SnapshotError(f"a window snapshot must be a map, got {type(data).__name__}")
    fmt = data.get("format")
    if fmt != FORMAT:
        raise SnapshotError(f"not a riverbed window snapshot: format {fmt!r}, expected {FORMAT!r}")
    clause = data.get("clause")
    if clause != w.spec.clause():
        raise SnapshotError(f"the snapshot is of window '{clause}', this window is '{w.spec.clause()}'")
    flavor = data.get("flavor")
    if flavor != w.rules.flavor.value:
        raise SnapshotError(f"the snapshot is of the {flavor!r} flavor, this window is "
                            f"{w.rules.flavor.value!r}")


def restore_window(w: StreamWindow[Any], data: Any) -> None:
    """Replace the window's whole state by a snapshot's (see the module docstring)."""
    _check_header(w, data)
    where = "window snapshot"
    raw_parts = _field(data, "partitions", list, where)
    parts = [_build_partition(w, p, f"{where}, partition #{i}") for i, p in enumerate(raw_parts)]
    lru_raw = _field(data, "lru", list, where)
    total = _field(data, "total", int, where)
    shared = _field(data, "shared_delta_ref", list, where)
    memory = _field(data, "memory", list, where)
    snap_now = _field(data, "now", int, where)
    was_active = w._active
    now = max(w._now, snap_now) if not was_active else w._now
    if snap_now > now:
        raise SnapshotError(f"the snapshot was taken at {snap_now} ns, after this window's time {now} ns")
    w._reset_state()
    w._now = now
    w._active = True
    w._final = _field(data, "final", bool, where)
    w._parts = {}
    for part in parts:
        w._parts[part.key] = part
    if not w.spec.partitioned:
        if len(parts) != 1:
            raise SnapshotError(f"{where}: an unpartitioned window has one partition, got {len(parts)}")
        w._single = parts[0]
    for entry in lru_raw:
        if not isinstance(entry, list) or not entry or entry[0] not in ("m", "p"):
            raise SnapshotError(f"{where}: bad LRU entry {entry!r}")
        if entry[0] == "m":
            w._lru[AgeMarker(entry[1])] = 0
        else:
            w._lru[decode_partition_key(entry[1])] = entry[2]
    w._total = total
    w._shared_has_ref, w._shared_ref = bool(shared[0]), shared[1]
    w._in_order = bool(_field(data, "in_order", bool, where))
    w._window_last_tick = _field(data, "window_last_tick", int, where)
    for entry in memory:
        w._memory[decode_partition_key(entry[0])] = (bool(entry[1]), int(entry[2]), entry[3], bool(entry[4]))
    w._install_insert()
    if w._final:
        return
    evictor = w._evictor
    if evictor is not None:
        evictor.start(w, data.get("age_last_tick"))
    w._rearm_after_restore()


def restore_partition_state(w: StreamWindow[Any], data: Any) -> None:
    """Put one partition (from `partition_state`) into the window, replacing that key's."""
    where = "partition snapshot"
    part = _build_partition(w, data, where)
    old = w._parts.get(part.key)
    if old is not None:
        old.cancel_timers()
        w._total -= len(old.tuples)
    w._parts[part.key] = part
    if not w.spec.partitioned:
        w._single = part
    w._total += len(part.tuples)
    if w._evictor is not None:
        w._lru[part.key] = w._now // 1_000_000_000
    if not w._active:
        w._active = True
    w._install_insert()
    w._rearm_partition(part)
