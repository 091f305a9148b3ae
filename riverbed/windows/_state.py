"""A tumbling or sliding window's state: exactly what a snapshot stores, as one object.

`WindowState` holds everything of a `StreamWindow` that a checkpoint must
keep (IBM's Java window checkpoint, spec C2): per partition the tuples in
order and all policy state (count-trigger position, the INITIAL_FULL flag,
delta references, arrival times for time eviction, the time of the last
periodic tumble/trigger), the partition LRU order with any age markers, the
total tuple count and the window-wide state (the time, the shared
delta-trigger reference, the C++ delta order flag, the C++ window timer's
last tick, the state C++ keeps of dropped partitions, Java's last partition
age check). Timers are not stored: they are derived from that state when a
snapshot is restored. Only their order is: timers due at one instant fire in the order they were
armed, and that order (across partitions, between a partition's eviction and trigger timers, the
C++ window-wide timer and Java's partition age check) follows from the run's history, not from
the state. A snapshot lists the live timers in arming order (``timer_order``, `TimerStep`s) and
a restore arms them in that order, so ties fire as they would have without the restart.
Snapshots without the list (written before it) restore in partition order, as they did.

`encode` turns the state into plain data: dicts, lists, strings, numbers,
booleans and None, plus the user's own tuples and keys (keys through
`encode_partition_key`), so msgpack, a RocksDB value or a Spark state store
can hold it; nothing is pickled. `decode` validates the whole snapshot, the
window it belongs to included, before anything is built, and raises
`SnapshotError` naming the offending field, never a bare KeyError deep
inside the engine. The format is ``riverbed.window/1``, unchanged since
windows had a state object: snapshots stored before read the same.

Restoring at the instant of the snapshot continues exactly as if nothing
happened. Restoring later follows IBM's reset rules (spec C7): a periodic
tumble or trigger that fell due in between fires at once and then every
period from then on; restored tuples already past a sliding time eviction
leave at once through an EVICTION event.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ._clause import same_clause
from ._config import DELTA, TIME, WindowConfig
from ._errors import SnapshotError
from ._keys import decode_partition_key, encode_partition_key
from ._partition import Partition
from ._partition_eviction import AgeMarker, PartitionAgeJava
from ._timers import Timer

__all__ = ["FORMAT", "TimerStep", "WindowState", "decode", "decode_partition", "decode_timer_order",
           "encode", "encode_partition", "new_partition"]

FORMAT = "riverbed.window/1"

# What C++ remembers of a partition it dropped when emptied (seen_full, trigger_count,
# delta_ref, has_delta_ref), restored if the key comes back.
Remembered = tuple[bool, int, Any, bool]

# A live timer of a snapshot, in ``timer_order``: ("evict" | "tick", partition index) for a
# partition's sliding time eviction or periodic trigger/tumble, ("window", 0) for the C++
# window-wide timer, ("age", 0) for Java's periodic partition age check.
TimerStep = tuple[str, int]
_PARTITION_TIMERS = ("evict", "tick")
_WINDOW_TIMERS = ("window", "age")


@dataclass(slots=True, eq=False)
class WindowState:
    """Everything a snapshot stores of a window (see the module docstring).

    ``parts`` maps partition keys to partitions (the key None for an
    unpartitioned window's only one). ``lru`` holds the keys in least recently
    inserted order, each with the whole second of its last insertion (C++
    partitionAge), and Java's age markers; it is kept only under partition
    eviction. ``total`` is the number of tuples in the window, kept exact
    while a tupleCount policy reads it (a snapshot stores the recount).
    """

    now: int = 0
    active: bool = False
    final: bool = False
    parts: dict[Hashable, Partition] = field(default_factory=dict)
    lru: OrderedDict[Any, int] = field(default_factory=OrderedDict)
    total: int = 0
    shared_ref: Any = None  # Java: the delta trigger reference all partitions share
    shared_has_ref: bool = False
    in_order: bool = True  # C++: delta eviction arrivals still in order (window-wide)
    window_last_tick: int = 0  # C++: the window-wide timer's last tick
    age_last_tick: int = 0  # Java partitionAge: the last periodic age check
    memory: dict[Hashable, Remembered] = field(default_factory=dict)
    age_timer: Timer | None = None  # Java partitionAge: the armed check (never stored)

    @classmethod
    def initial(cls, config: WindowConfig) -> WindowState:
        """The state of a window just built: no partition (an unpartitioned window's one)."""
        state = cls()
        if not config.spec.partitioned:
            state.parts[None] = new_partition(config, None)
        return state


def new_partition(config: WindowConfig, key: Hashable | None) -> Partition:
    """An empty partition of a window with ``config``: delta values and arrival times kept only
    where its eviction uses them."""
    return Partition(key, config.sliding, deltas=config.ev == DELTA, times=config.ev == TIME)


# ------------------------------------------------------------------------ encode


def encode_partition(part: Partition, evict_after: int | None = None) -> dict[str, Any]:
    data = {
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
    timer = part.evict_timer
    if (evict_after is not None and timer is not None and timer.alive and part.arrivals
            and timer.due != part.arrivals[0] + evict_after):
        data["evict_at"] = timer.due  # (a C14 poll: a restore at this instant keeps it)
    return data


def encode(config: WindowConfig, state: WindowState,
           timer_order: list[TimerStep] | None = None, *, suspended: bool = False) -> dict[str, Any]:
    """The state as plain data, with the header that names the window it belongs to, and the
    order its live timers were armed in (``timer_order``: `TimerStep`s, partitions by their
    place in ``partitions``)."""
    lru: list[Any] = []
    for k, v in state.lru.items():
        lru.append(["m", k.age] if isinstance(k, AgeMarker) else ["p", encode_partition_key(k), v])
    parts = state.parts.values()
    data = {
        "format": FORMAT,
        "clause": config.spec.clause(),
        "flavor": config.rules.flavor.value,
        "now": state.now,
        "active": state.active,
        "final": state.final,
        "partitions": [encode_partition(p, config.evict_after) for p in parts],
        "lru": lru,
        "total": sum(len(p.tuples) for p in parts),
        "shared_delta_ref": [state.shared_has_ref, state.shared_ref],
        "in_order": state.in_order,
        "window_last_tick": state.window_last_tick,
        "age_last_tick": state.age_last_tick if isinstance(config.evictor, PartitionAgeJava) else None,
        "memory": [[encode_partition_key(k), *v] for k, v in state.memory.items()],
        "timer_order": [list(step) for step in timer_order or ()],
    }
    if suspended:  # C14: a C++ window checkpointed (only then, and older snapshots lack it)
        data["suspended"] = True
    return data


# ------------------------------------------------------------------------ decode


def _field(data: Mapping[str, Any], name: str, kind: type | tuple[type, ...], where: str) -> Any:
    if name not in data:
        raise SnapshotError(f"{where}: the field {name!r} is missing")
    value = data[name]
    if (kind is int and isinstance(value, bool)) or not isinstance(value, kind):
        raise SnapshotError(f"{where}: the field {name!r} should be {getattr(kind, '__name__', kind)}, "
                            f"got {type(value).__name__}")
    return value


def _key(data: Any, where: str) -> Hashable:
    key = decode_partition_key(data)
    try:
        hash(key)
    except TypeError:
        raise SnapshotError(f"{where}: partition key {data!r} is not hashable") from None
    return key


def decode_partition(config: WindowConfig, data: Any, where: str = "partition snapshot") -> Partition:
    """A partition from `encode_partition`'s data, validated."""
    if not isinstance(data, dict):
        raise SnapshotError(f"{where}: a partition must be a map")
    tuples = _field(data, "tuples", list, where)
    values = _field(data, "values", list, where)
    arrivals = _field(data, "arrivals", list, where)
    if config.sliding and values and len(values) != len(tuples):
        raise SnapshotError(f"{where}: {len(values)} delta values for {len(tuples)} tuples")
    timed = config.sliding and config.ev == TIME  # each tuple leaves by its arrival time
    if (arrivals or timed) and len(arrivals) != len(tuples):
        raise SnapshotError(f"{where}: {len(arrivals)} arrival times for {len(tuples)} tuples")
    if any(isinstance(a, bool) or not isinstance(a, int) for a in arrivals):
        raise SnapshotError(f"{where}: arrival times must be integer nanoseconds")
    key = _key(data.get("key"), where)
    part = new_partition(config, key if config.spec.partitioned else None)
    part.tuples = deque(tuples) if config.sliding else list(tuples)
    if values or config.ev == DELTA:
        part.values = deque(values)
    if arrivals or config.ev == TIME:
        part.arrivals = deque(arrivals)
    part.trigger_count = _field(data, "trigger_count", int, where)
    part.seen_full = _field(data, "seen_full", bool, where)
    part.delta_ref = data.get("delta_ref")
    part.has_delta_ref = _field(data, "has_delta_ref", bool, where)
    part.last_tick = _field(data, "last_tick", int, where)
    evict_at = data.get("evict_at")
    if evict_at is not None:
        if isinstance(evict_at, bool) or not isinstance(evict_at, int):
            raise SnapshotError(f"{where}: 'evict_at' must be integer nanoseconds")
        part.evict_at = evict_at
    return part


def check_header(config: WindowConfig, data: Any) -> None:
    """The snapshot is a window snapshot of this clause and flavor."""
    if not isinstance(data, Mapping):
        raise SnapshotError(f"a window snapshot must be a map, got {type(data).__name__}")
    fmt = data.get("format")
    if fmt != FORMAT:
        raise SnapshotError(f"not a riverbed window snapshot: format {fmt!r}, expected {FORMAT!r}")
    clause, ours = data.get("clause"), config.spec.clause()
    if clause != ours and not same_clause(clause, config.spec):  # (another spelling)
        raise SnapshotError(f"the snapshot is of window '{clause}', this window is '{ours}'")
    flavor = data.get("flavor")
    if flavor != config.rules.flavor.value:
        raise SnapshotError(f"the snapshot is of the {flavor!r} flavor, this window is "
                            f"{config.rules.flavor.value!r}")


def decode(config: WindowConfig, data: Any, *, now: int, active: bool) -> WindowState:
    """The state a snapshot stores, validated whole, for a window at time ``now``.

    A window that was never ``active`` takes the snapshot's time if later
    than its own; an active one keeps its time, which must not be before the
    snapshot's.
    """
    check_header(config, data)
    where = "window snapshot"
    raw_parts = _field(data, "partitions", list, where)
    parts = [decode_partition(config, p, f"{where}, partition #{i}") for i, p in enumerate(raw_parts)]
    if not config.spec.partitioned and len(parts) != 1:
        raise SnapshotError(f"{where}: an unpartitioned window has one partition, got {len(parts)}")
    lru_raw = _field(data, "lru", list, where)
    total = _field(data, "total", int, where)
    shared = _field(data, "shared_delta_ref", list, where)
    if len(shared) != 2:
        raise SnapshotError(f"{where}: the field 'shared_delta_ref' should be [has_ref, ref]")
    memory = _field(data, "memory", list, where)
    snap_now = _field(data, "now", int, where)
    now = max(now, snap_now) if not active else now
    if snap_now > now:
        raise SnapshotError(f"the snapshot was taken at {snap_now} ns, after this window's time {now} ns")
    for part in parts:  # a poll already past: the restore's evictions at once (C7) cover it
        if part.evict_at is not None and part.evict_at <= now:
            part.evict_at = None
    age_last_tick = data.get("age_last_tick")
    state = WindowState(
        now=now, active=True, final=_field(data, "final", bool, where),
        parts={part.key: part for part in parts}, total=total,
        shared_ref=shared[1], shared_has_ref=bool(shared[0]),
        in_order=bool(_field(data, "in_order", bool, where)),
        window_last_tick=_field(data, "window_last_tick", int, where),
        age_last_tick=now if age_last_tick is None else age_last_tick)
    for entry in lru_raw:
        kind = entry[0] if isinstance(entry, list) and entry else None
        if not ((kind == "m" and len(entry) == 2) or (kind == "p" and len(entry) == 3)):
            raise SnapshotError(f"{where}: bad LRU entry {entry!r} (expected ['m', age] or "
                                "['p', key, second])")
        if entry[0] == "m":
            state.lru[AgeMarker(entry[1])] = 0
        else:
            state.lru[_key(entry[1], f"{where}, LRU")] = entry[2]
    for entry in memory:
        if not isinstance(entry, list) or len(entry) != 5:
            raise SnapshotError(f"{where}: bad entry {entry!r} in 'memory'")
        state.memory[_key(entry[0], f"{where}, memory")] = (
            bool(entry[1]), int(entry[2]), entry[3], bool(entry[4]))
    return state


def decode_timer_order(data: Mapping[str, Any], partitions: int) -> list[TimerStep] | None:
    """A snapshot's ``timer_order`` (None when it has none: written before the field), validated
    against its number of ``partitions``."""
    raw = data.get("timer_order")
    if raw is None:
        return None
    where = "window snapshot, field 'timer_order'"
    if not isinstance(raw, list):
        raise SnapshotError(f"{where}: should be a list, got {type(raw).__name__}")
    steps: list[TimerStep] = []
    for entry in raw:
        ok = (isinstance(entry, list | tuple) and len(entry) == 2 and isinstance(entry[1], int)
              and not isinstance(entry[1], bool))
        if ok and entry[0] in _PARTITION_TIMERS:
            ok = 0 <= entry[1] < partitions
        elif ok:
            ok = entry[0] in _WINDOW_TIMERS and entry[1] == 0
        if not ok:
            raise SnapshotError(f"{where}: bad entry {entry!r} (expected ['evict' or 'tick', a "
                                f"partition index below {partitions}], ['window', 0] or ['age', 0])")
        steps.append((entry[0], entry[1]))
    return steps
