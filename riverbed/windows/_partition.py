"""Per-partition state of a tumbling or sliding window.

One object per partition holds the tuples and every piece of policy state a
partition can need; the engine uses the fields its policies call for. Keeping
it in one slotted object (rather than one object per policy) keeps the insert
path to a few attribute reads.

Its fields are of two kinds. The checkpointed ones (`STORED`) are part of
the window's `WindowState` and are exactly what a snapshot stores of the
partition; the others (its timers and a cached TRIGGER event) are derived
from them and rebuilt when a snapshot is restored.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from typing import Any

from ._timers import Timer

__all__ = ["NOTHING", "STORED", "Partition"]

NOTHING: tuple[()] = ()  # a partition's values or arrivals that its window's eviction never keeps

STORED = ("key", "tuples", "values", "arrivals", "trigger_count", "seen_full", "delta_ref",
          "has_delta_ref", "last_tick")


class Partition:
    __slots__ = (
        "arrivals",
        "delta_ref",
        "evict_at",
        "evict_timer",
        "evicted",
        "has_delta_ref",
        "idle_evict_timer",
        "key",
        "last_tick",
        "seen_full",
        "tick_timer",
        "trigger_count",
        "trigger_event",
        "tuples",
        "values",
    )

    def __init__(self, key: Hashable | None, sliding: bool, *, deltas: bool = True,
                 times: bool = True) -> None:
        # Stored in snapshots.
        self.key = key
        # Sliding windows pop from the front; tumbling windows only append and flush.
        self.tuples: Any = deque() if sliding else []
        # Delta-eviction attribute values and time-eviction arrival times (ns), parallel to the
        # tuples: a window whose eviction keeps neither shares one empty tuple, never written
        # (two empty deques were 1.5 KB of the 1.7 KB each partition of a Java window keeps).
        self.values: deque[Any] = deque() if deltas else NOTHING  # type: ignore[assignment]
        self.arrivals: deque[int] = deque() if times else NOTHING  # type: ignore[assignment]
        self.trigger_count = 0  # count trigger: arrivals since the last trigger
        self.seen_full = False  # sliding: INITIAL_FULL already raised
        self.delta_ref: Any = None  # delta trigger reference (per-partition flavors)
        self.has_delta_ref = False
        self.last_tick = 0  # periodic policy: time of the last tumble/trigger (or of the start)
        # Derived, never stored. The sliding fast paths' TRIGGER event, built once: its fields
        # (the window, the type, the key, the live tuples) are the same at every trigger.
        self.trigger_event: Any = None
        # Tuples count or time eviction has taken from the key (`StreamWindow.evicted_count`),
        # from a base the window sets.
        self.evicted = 0
        self.tick_timer: Timer | None = None
        self.evict_timer: Timer | None = None
        self.idle_evict_timer: Timer | None = None  # a fired eviction timer, kept to be armed again
        # Restored at its snapshot's instant: when the eviction timer was armed for, if not its
        # oldest tuple's deadline (a C++ window's C14 poll, a period after a suspended check).
        self.evict_at: int | None = None

    def cancel_timers(self) -> None:
        if self.tick_timer is not None:
            self.tick_timer.cancel()
            self.tick_timer = None
        if self.evict_timer is not None:
            self.evict_timer.cancel()
            self.evict_timer = None
        self.idle_evict_timer = None
