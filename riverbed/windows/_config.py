"""A tumbling or sliding window's configuration: everything fixed when the window is built.

A `StreamWindow` keeps three kinds of fields apart, as Flink's WindowOperator
groups its own:

* configuration, this frozen `WindowConfig`: the clause, the flavor's rules
  and what the engine derives from them once (policy kinds and sizes, delta
  readers and bounds, the partition-eviction strategy). Nothing in it
  changes while the window lives, so insert paths compiled for a window may
  bind any of it for good;
* state that a snapshot stores, a `WindowState` (``_state.py``): the
  partitions and their tuples, the time, the LRU order... A snapshot is that
  object as plain data; a restore builds a new one;
* state that is derived and never stored: timers, the suspended flag, the
  insert functions in use, plus the listeners and the partitioner (which a
  host wires again when it builds a window to restore into).

The policy kinds are small ints (`NONE`, `COUNT`, ...) so the insert path
compares ints, not classes.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from ._delta import DeltaReader, bound_for, delta_kind_for_type, make_delta_reader
from ._errors import WindowClauseError, WindowStateError
from ._flavor import Flavor, FlavorRules, rules_for
from ._partition_eviction import PartitionEvictor, make_partition_evictor
from ._policy import Count, Delta, Time, TimeIntervalSpec, WindowSpec, WindowType

__all__ = ["COUNT", "DELTA", "NONE", "PUNCT", "TIME", "Getter", "WindowConfig", "policy_kind"]

NONE, COUNT, TIME, DELTA, PUNCT = range(5)

Getter = Callable[[str], Callable[[Any], Any]]


def policy_kind(policy: object) -> int:
    """The kind of an eviction or trigger policy (None: no trigger)."""
    if policy is None:
        return NONE
    if isinstance(policy, Count):
        return COUNT
    if isinstance(policy, Time):
        return TIME
    if isinstance(policy, Delta):
        return DELTA
    return PUNCT


@dataclass(frozen=True, slots=True, eq=False)
class WindowConfig:
    """What a `StreamWindow` was built with, resolved once.

    ``ev``/``tr`` are the eviction and trigger kinds; ``ev_n``/``tr_n`` their
    counts and ``ev_ns``/``tr_ns`` their periods (0 when not of that kind).
    A delta policy has a reader (``ev_reader``, ``ev_read`` its whole read),
    its bound D in the attribute's arithmetic and the flavor's comparison
    (``ev_out(new, old, D)``: true when ``new`` is out of delta of ``old``).
    ``evict_after`` is when an arrival's time eviction is due (T plus the
    flavor's re-check lag); ``tick_ns`` the period of a periodic policy (a
    Java partition's own timer, C++'s window-wide one; 0: none);
    ``periodic_window_tick`` whether a C++ window has its window-wide timer
    (it tumbles a time eviction or fires a time trigger).
    ``fast_paths`` False makes the window use its generic insert path only,
    the reference the compiled ones are tested against.
    """

    spec: WindowSpec
    rules: FlavorRules
    java: bool
    sliding: bool
    ev: int
    tr: int
    ev_n: int
    ev_ns: int
    tr_n: int
    tr_ns: int
    ev_reader: DeltaReader | None
    ev_read: Callable[[Any], Any] | None
    ev_bound: Any
    ev_out: Callable[[Any, Any, Any], bool]
    tr_reader: DeltaReader | None
    tr_read: Callable[[Any], Any] | None
    tr_bound: Any
    tr_out: Callable[[Any, Any, Any], bool]
    evict_after: int
    tick_ns: int
    periodic_window_tick: bool
    default_partition: Hashable
    getter: Getter
    evictor: PartitionEvictor | None
    fast_paths: bool

    @classmethod
    def build(cls, spec: WindowSpec | str, *, flavor: Flavor | str = Flavor.JAVA,
              attribute_types: Mapping[str, str] | None = None,
              getter: Getter = operator.itemgetter, default_partition: Hashable = "",
              fast_paths: bool = True) -> WindowConfig:
        """Validate and resolve a window's arguments (see `StreamWindow` for their meaning)."""
        spec = _window_spec(spec)
        rules = rules_for(flavor)
        java = rules.flavor is Flavor.JAVA
        sliding = spec.type is WindowType.SLIDING
        ev, tr = spec.eviction, spec.trigger
        if sliding and isinstance(ev, Count) and ev.size == 0 and java:
            raise WindowStateError(
                "sliding, count(0): IBM's Java window fails on the first tuple of such a window; "
                "use flavor='cpp' (trigger-only, keeps no tuple) or a size >= 1")
        types = dict(attribute_types or {})
        ev_reader, ev_bound, ev_out = _delta_parts(ev, rules, types, getter, "eviction")
        tr_reader, tr_bound, tr_out = _delta_parts(tr, rules, types, getter, "trigger")
        ev_ns = ev.ns if isinstance(ev, Time) else 0
        tr_ns = tr.ns if isinstance(tr, Time) else 0
        return cls(
            spec=spec, rules=rules, java=java, sliding=sliding,
            ev=policy_kind(ev), tr=policy_kind(tr),
            ev_n=ev.size if isinstance(ev, Count) else 0, ev_ns=ev_ns,
            tr_n=tr.size if isinstance(tr, Count) else 0, tr_ns=tr_ns,
            ev_reader=ev_reader, ev_read=ev_reader.read if ev_reader is not None else None,
            ev_bound=ev_bound, ev_out=ev_out,
            tr_reader=tr_reader, tr_read=tr_reader.read if tr_reader is not None else None,
            tr_bound=tr_bound, tr_out=tr_out,
            evict_after=ev_ns + rules.time_eviction_lag_ns,
            tick_ns=tr_ns if sliding else ev_ns,
            periodic_window_tick=(isinstance(ev, Time) and not sliding) or isinstance(tr, Time),
            default_partition=default_partition, getter=getter,
            evictor=make_partition_evictor(spec.partition_eviction, java),
            fast_paths=fast_paths)


def _window_spec(spec: object) -> WindowSpec:
    if isinstance(spec, str):
        from ._clause import parse_window_clause

        parsed = parse_window_clause(spec)
        if not isinstance(parsed, WindowSpec):
            raise WindowClauseError(
                f"{spec}: a timeInterval window is an event-time window; build it "
                "with TimeIntervalWindow (or riverbed.windows.make_window)")
        return parsed
    if isinstance(spec, TimeIntervalSpec):
        raise WindowClauseError(
            f"{spec!r}: a timeInterval window is an event-time window; build it "
            "with TimeIntervalWindow (or riverbed.windows.make_window)")
    if not isinstance(spec, WindowSpec):
        raise WindowClauseError(f"a window is an SPL clause (a string such as 'sliding, "
                                f"count(10)') or a WindowSpec, got {spec!r}")
    return spec


def _delta_parts(policy: object, rules: FlavorRules, types: dict[str, str], getter: Getter, role: str
                 ) -> tuple[DeltaReader | None, Any, Callable[[Any, Any, Any], bool]]:
    if not isinstance(policy, Delta):
        return None, None, rules.out_of_delta
    kind = delta_kind_for_type(types.get(policy.attribute))
    reader = make_delta_reader(policy, kind, role, getter(policy.attribute))
    out = rules.out_of_delta_f32 if kind == "float32" else rules.out_of_delta
    return reader, bound_for(policy, kind), out
