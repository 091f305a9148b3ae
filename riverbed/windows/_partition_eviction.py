"""Partition eviction policies: which whole partitions leave, and when.

Partitions are kept in least-recently-inserted order (an `OrderedDict` of
keys, oldest first); every insertion moves its partition to the newest end.
The policies differ between the flavors (spec R41-R45):

* ``partitionCount(N)``: Java first evicts the oldest *empty* partitions up to
  the first non-empty one, then oldest partitions until at most N remain; C++
  simply evicts oldest partitions until at most N remain.
* ``tupleCount(N)``: Java decides before inserting whether the total will
  exceed N, then evicts leading empty partitions and oldest partitions while
  the total exceeds N; C++ evicts leading empty partitions plus the oldest
  non-empty one, at most twice per insertion.
* ``partitionAge(T)``: Java runs a background check that appends age markers
  to the LRU order; C++ keeps whole-second insertion times and checks only
  before an insertion, a timer tick or a punctuation.

Each policy is a small object the window calls at fixed points; it reads and
changes the window's partition bookkeeping through `EvictionHost`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Any, Protocol

from ._policy import NS_PER_SECOND, PartitionAge, PartitionCount, TupleCount
from ._timers import TimerQueue

__all__ = ["AgeMarker", "EvictionHost", "PartitionEvictor", "make_partition_evictor"]


class AgeMarker:
    """A time mark in the Java LRU order: partitions before it were last used before ``age``."""

    __slots__ = ("age",)

    def __init__(self, age: int) -> None:
        self.age = age

    def __repr__(self) -> str:
        return f"AgeMarker({self.age})"


class EvictionHost(Protocol):
    """What a partition evictor needs from its window."""

    _lru: OrderedDict[Any, int]
    _total: int
    _now: int
    _parts: dict[Any, Any]

    _timers: TimerQueue

    def _evict_partition(self, key: Hashable) -> None: ...


class PartitionEvictor:
    """No partition eviction. Subclasses override the hooks they need."""

    needs_before_insert = False  # tupleCount (Java) decides before the insertion
    checks_before_events = False  # partitionAge (C++) checks before tuples, ticks and marks

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def start(self, w: EvictionHost, last_tick: int | None = None) -> None:
        """The window is activated (or restored, with the time of the last periodic check)."""

    def before_insert(self, w: EvictionHost) -> bool:
        """Called before the tuple counts; returns whether eviction is then needed."""
        return False

    def check(self, w: EvictionHost) -> None:
        """C++ partitionAge: the check before an insertion, a tick or a punctuation."""

    def after_insert(self, w: EvictionHost, needed: bool) -> None:
        """Called at the flavor's partition-eviction point of an insertion."""

    def needs_eviction(self, w: EvictionHost) -> bool:
        return False


def _evict_leading_empty(w: EvictionHost) -> None:
    lru, parts = w._lru, w._parts
    while lru:
        key = next(iter(lru))
        part = parts.get(key)
        if part is None or part.tuples:
            return
        w._evict_partition(key)


def _evict_oldest(w: EvictionHost) -> bool:
    lru = w._lru
    if not lru:
        return False
    w._evict_partition(next(iter(lru)))
    return True


class PartitionCountJava(PartitionEvictor):
    def needs_eviction(self, w: EvictionHost) -> bool:
        return len(w._lru) > self.limit

    def after_insert(self, w: EvictionHost, needed: bool) -> None:
        if len(w._lru) > self.limit:
            _evict_leading_empty(w)
            while len(w._lru) > self.limit and _evict_oldest(w):
                pass


class PartitionCountCpp(PartitionCountJava):
    def after_insert(self, w: EvictionHost, needed: bool) -> None:
        while len(w._lru) > self.limit and _evict_oldest(w):
            pass


class TupleCountJava(PartitionEvictor):
    needs_before_insert = True

    def needs_eviction(self, w: EvictionHost) -> bool:
        return w._total > self.limit

    def before_insert(self, w: EvictionHost) -> bool:
        return w._total + 1 > self.limit

    def after_insert(self, w: EvictionHost, needed: bool) -> None:
        if needed:
            _evict_leading_empty(w)
            while w._total > self.limit and _evict_oldest(w):
                pass


class TupleCountCpp(TupleCountJava):
    needs_before_insert = False

    def after_insert(self, w: EvictionHost, needed: bool) -> None:
        for _ in range(2):
            if w._total <= self.limit:
                return
            _evict_leading_empty(w)
            _evict_oldest(w)


class PartitionAgeJava(PartitionEvictor):
    """IBM Java's marker scheme (spec R45): a periodic check from activation."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        age_ms = limit // 1_000_000
        period_ms = age_ms // 10
        if period_ms <= 500:
            period_ms = 500
        elif period_ms < 10_000:
            period_ms = 1000
        else:
            period_ms = 10_000
        self.period = period_ms * 1_000_000
        self.last_tick = 0

    def start(self, w: EvictionHost, last_tick: int | None = None) -> None:
        self.last_tick = w._now if last_tick is None else last_tick
        due = self.last_tick + self.period
        while due < w._now:  # restored after a pause: keep the phase, skip missed checks
            due += self.period
        self._arm(w, due)

    def _arm(self, w: EvictionHost, due: int) -> None:
        def fire() -> None:
            self.last_tick = w._now
            self._arm(w, w._now + self.period)
            self.tick(w)
        w._timers.arm(due, fire)

    def tick(self, w: EvictionHost) -> None:
        lru = w._lru
        while lru and isinstance(next(iter(lru)), AgeMarker):
            lru.popitem(last=False)
        marker = next((k for k in lru if isinstance(k, AgeMarker)), None)
        if marker is not None and marker.age < w._now - self.limit:
            while lru:
                oldest = next(iter(lru))
                if isinstance(oldest, AgeMarker):
                    lru.popitem(last=False)
                    break
                w._evict_partition(oldest)
        if lru:
            last = next(reversed(lru))
            if isinstance(last, AgeMarker):
                del lru[last]
        if lru:
            lru[AgeMarker(w._now)] = 0


class PartitionAgeCpp(PartitionEvictor):
    """IBM C++ (spec R44): whole seconds, checked only before tuples, ticks and marks."""

    checks_before_events = True

    def check(self, w: EvictionHost) -> None:
        lru = w._lru
        if not lru:
            return
        now_s = w._now // NS_PER_SECOND
        age_s = self.limit // NS_PER_SECOND
        if now_s - lru[next(iter(lru))] <= age_s:
            return
        for key in [k for k, t in lru.items() if now_s - t >= age_s]:
            w._evict_partition(key)


def make_partition_evictor(policy: PartitionAge | PartitionCount | TupleCount | None,
                           java: bool) -> PartitionEvictor | None:
    if policy is None:
        return None
    if isinstance(policy, PartitionCount):
        return PartitionCountJava(policy.count) if java else PartitionCountCpp(policy.count)
    if isinstance(policy, TupleCount):
        return TupleCountJava(policy.count) if java else TupleCountCpp(policy.count)
    return PartitionAgeJava(policy.ns) if java else PartitionAgeCpp(policy.ns)
