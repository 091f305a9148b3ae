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

Each policy is a small stateless strategy (it lives in the window's frozen
configuration) that the window calls at fixed points with its `WindowState`
(the LRU order, the tuple total, the time) and a function evicting one
partition by key; the only state a policy keeps, the time of Java's last
age check, is the state's ``age_last_tick``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING

from ._policy import NS_PER_SECOND, PartitionAge, PartitionCount, TupleCount
from ._timers import TimerQueue

if TYPE_CHECKING:
    from ._state import WindowState

__all__ = ["AgeMarker", "Evict", "PartitionEvictor", "make_partition_evictor"]

Evict = Callable[[Hashable], None]  # evicts one partition, raising its PARTITION_EVICTION


class AgeMarker:
    """A time mark in the Java LRU order: partitions before it were last used before ``age``."""

    __slots__ = ("age",)

    def __init__(self, age: int) -> None:
        self.age = age

    def __repr__(self) -> str:
        return f"AgeMarker({self.age})"


class PartitionEvictor:
    """No partition eviction. Subclasses override the hooks they need."""

    needs_before_insert = False  # tupleCount (Java) decides before the insertion
    checks_before_events = False  # partitionAge (C++) checks before tuples, ticks and marks

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def start(self, state: WindowState, timers: TimerQueue, evict: Evict) -> None:
        """The window is activated or restored (at ``state.now``)."""

    def before_insert(self, state: WindowState) -> bool:
        """Called before the tuple counts; returns whether eviction is then needed."""
        return False

    def check(self, state: WindowState, evict: Evict) -> None:
        """C++ partitionAge: the check before an insertion, a tick or a punctuation."""

    def after_insert(self, state: WindowState, evict: Evict, needed: bool) -> None:
        """Called at the flavor's partition-eviction point of an insertion."""

    def needs_eviction(self, state: WindowState) -> bool:
        return False


def _evict_leading_empty(state: WindowState, evict: Evict) -> None:
    lru, parts = state.lru, state.parts
    while lru:
        key = next(iter(lru))
        part = parts.get(key)
        if part is None or part.tuples:
            return
        evict(key)


def _evict_oldest(state: WindowState, evict: Evict) -> bool:
    lru = state.lru
    if not lru:
        return False
    evict(next(iter(lru)))
    return True


class PartitionCountJava(PartitionEvictor):
    def needs_eviction(self, state: WindowState) -> bool:
        return len(state.lru) > self.limit

    def after_insert(self, state: WindowState, evict: Evict, needed: bool) -> None:
        if len(state.lru) > self.limit:
            _evict_leading_empty(state, evict)
            while len(state.lru) > self.limit and _evict_oldest(state, evict):
                pass


class PartitionCountCpp(PartitionCountJava):
    def after_insert(self, state: WindowState, evict: Evict, needed: bool) -> None:
        while len(state.lru) > self.limit and _evict_oldest(state, evict):
            pass


class TupleCountJava(PartitionEvictor):
    needs_before_insert = True

    def needs_eviction(self, state: WindowState) -> bool:
        return state.total > self.limit

    def before_insert(self, state: WindowState) -> bool:
        return state.total + 1 > self.limit

    def after_insert(self, state: WindowState, evict: Evict, needed: bool) -> None:
        if needed:
            _evict_leading_empty(state, evict)
            while state.total > self.limit and _evict_oldest(state, evict):
                pass


class TupleCountCpp(TupleCountJava):
    needs_before_insert = False

    def after_insert(self, state: WindowState, evict: Evict, needed: bool) -> None:
        for _ in range(2):
            if state.total <= self.limit:
                return
            _evict_leading_empty(state, evict)
            _evict_oldest(state, evict)


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

    def start(self, state: WindowState, timers: TimerQueue, evict: Evict) -> None:
        """From ``state.age_last_tick``: a restored window keeps the phase, skipping missed checks
        (activation sets it to the time of activation first)."""
        due = state.age_last_tick + self.period
        while due < state.now:
            due += self.period
        self._arm(state, timers, evict, due)

    def _arm(self, state: WindowState, timers: TimerQueue, evict: Evict, due: int) -> None:
        def fire() -> None:
            state.age_last_tick = state.now
            self._arm(state, timers, evict, state.now + self.period)
            self.tick(state, evict)
        state.age_timer = timers.arm(due, fire)  # (its place among the timers, for a snapshot)

    def tick(self, state: WindowState, evict: Evict) -> None:
        lru = state.lru
        while lru and isinstance(next(iter(lru)), AgeMarker):
            lru.popitem(last=False)
        marker = next((k for k in lru if isinstance(k, AgeMarker)), None)
        if marker is not None and marker.age < state.now - self.limit:
            while lru:
                oldest = next(iter(lru))
                if isinstance(oldest, AgeMarker):
                    lru.popitem(last=False)
                    break
                evict(oldest)
        if lru:
            last = next(reversed(lru))
            if isinstance(last, AgeMarker):
                del lru[last]
        if lru:
            lru[AgeMarker(state.now)] = 0


class PartitionAgeCpp(PartitionEvictor):
    """IBM C++ (spec R44): whole seconds, checked only before tuples, ticks and marks."""

    checks_before_events = True

    def check(self, state: WindowState, evict: Evict) -> None:
        lru = state.lru
        if not lru:
            return
        now_s = state.now // NS_PER_SECOND
        age_s = self.limit // NS_PER_SECOND
        if now_s - lru[next(iter(lru))] <= age_s:
            return
        for key in [k for k, t in lru.items() if now_s - t >= age_s]:
            evict(key)


def make_partition_evictor(policy: PartitionAge | PartitionCount | TupleCount | None,
                           java: bool) -> PartitionEvictor | None:
    if policy is None:
        return None
    if isinstance(policy, PartitionCount):
        return PartitionCountJava(policy.count) if java else PartitionCountCpp(policy.count)
    if isinstance(policy, TupleCount):
        return TupleCountJava(policy.count) if java else TupleCountCpp(policy.count)
    return PartitionAgeJava(policy.ns) if java else PartitionAgeCpp(policy.ns)
