"""The two behaviours of IBM's window runtime, as small named rules.

IBM Streams has two independent window implementations: the Java one behind
``com.ibm.streams.operator.window`` (our listener API mirrors it; the default
``java`` flavor) and the C++ one that SPL's standard-toolkit operators use
(``cpp``). They agree on most things; where they differ (section 12 of the
specification) the engine asks a `FlavorRules` value instead of carrying two
code paths. Each field names one difference.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from ._delta import out_of_delta_cpp, out_of_delta_cpp_f32, out_of_delta_java, out_of_delta_java_f32

__all__ = ["CPP", "JAVA", "Flavor", "FlavorRules", "rules_for"]


class Flavor(Enum):
    """Which IBM runtime's observable window behaviour to reproduce."""

    JAVA = "java"
    CPP = "cpp"


@dataclass(frozen=True, slots=True)
class FlavorRules:
    flavor: Flavor
    # Delta comparison: C++ `new - old > D`, Java `not old >= new - D` (float ties differ).
    out_of_delta: Callable[[Any, Any, Any], bool]
    out_of_delta_f32: Callable[[float, float, float], bool]
    # A sliding time eviction re-checks this long after a tuple's deadline (Java: 1 ms).
    time_eviction_lag_ns: int
    # Java: a timer per partition from its creation. C++: one timer per window from activation,
    # and a default-valued partition when a tick finds no partition.
    per_partition_timers: bool
    # C++ drops a partition emptied by a tumble or by time eviction; Java keeps it empty.
    keeps_emptied_partitions: bool
    # Java: one delta-trigger reference shared by all partitions; C++: one per partition.
    shared_delta_trigger: bool
    # Java raises a time-evicting window's INITIAL_FULL at activation; C++ before the first insert.
    initial_full_at_activation: bool
    # Java reports the tuples one action evicts in one EVICTION; C++ one event per tuple.
    batches_sliding_evictions: bool
    # C++ evicts partitions right after the INSERTION; Java after the whole insertion.
    partition_eviction_after_insertion: bool
    # C++ raises EMPTY_WINDOW_PUNCT for a mark on an empty punct() window; Java an empty EVICTION.
    empty_window_punct_event: bool
    # C++ drops every tuple of a count(0) window (tumbling) / keeps none (sliding).
    count_zero_keeps_nothing: bool
    # Java raises FINAL on final punctuation; C++ windows never see it.
    final_events: bool
    # C++ evicts any out-of-delta tuple once arrivals went out of order; Java only the oldest run.
    delta_eviction_tracks_order: bool
    # C++ (in a consistent region): drain and reset suspend the window's timer thread until the
    # next tuple arrives; ticks in between are skipped, the phase is kept, a time eviction due
    # meanwhile is polled again one period later (spec C14). Java re-arms at once (C7).
    suspends_time_until_insert: bool


JAVA = FlavorRules(
    flavor=Flavor.JAVA,
    out_of_delta=out_of_delta_java,
    out_of_delta_f32=out_of_delta_java_f32,
    time_eviction_lag_ns=1_000_000,
    per_partition_timers=True,
    keeps_emptied_partitions=True,
    shared_delta_trigger=True,
    initial_full_at_activation=True,
    batches_sliding_evictions=True,
    partition_eviction_after_insertion=False,
    empty_window_punct_event=False,
    count_zero_keeps_nothing=False,
    final_events=True,
    delta_eviction_tracks_order=False,
    suspends_time_until_insert=False,
)

CPP = FlavorRules(
    flavor=Flavor.CPP,
    out_of_delta=out_of_delta_cpp,
    out_of_delta_f32=out_of_delta_cpp_f32,
    time_eviction_lag_ns=1,
    per_partition_timers=False,
    keeps_emptied_partitions=False,
    shared_delta_trigger=False,
    initial_full_at_activation=False,
    batches_sliding_evictions=False,
    partition_eviction_after_insertion=True,
    empty_window_punct_event=True,
    count_zero_keeps_nothing=True,
    final_events=False,
    delta_eviction_tracks_order=True,
    suspends_time_until_insert=True,
)


def rules_for(flavor: Flavor | str) -> FlavorRules:
    """The rules of a flavor given as `Flavor` or its name ("java", "cpp")."""
    try:
        f = flavor if isinstance(flavor, Flavor) else Flavor(flavor)
    except ValueError:
        raise ValueError(f"unknown window flavor {flavor!r}; expected 'java' or 'cpp'") from None
    return JAVA if f is Flavor.JAVA else CPP
