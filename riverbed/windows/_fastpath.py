"""Specialised insert functions for the most common windows.

The generic `StreamWindow._insert_generic` handles every policy combination
and both flavors, and stays the reference. For the hot combinations (count
tumbling, delta tumbling, count-evicting and time-evicting sliding windows
with a count trigger, without partition eviction) this module builds a closure
that does the same work with its configuration bound in closure cells, which
roughly halves the per-tuple cost in CPython. Anything a closure does not
handle (a new partition, a bad tuple, a configuration it was not built for)
goes to the generic path, so the two can never disagree on a rare case; a
property test compares them on random inputs.

`_total` (the tuple count for ``tupleCount``) is not maintained here: the
fast paths exist only for windows without partition eviction.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._events import EventType
from ._policy import Count, Delta, Time, WindowType

if TYPE_CHECKING:
    from ._window import StreamWindow

__all__ = ["compile_insert"]

INSERTION = EventType.INSERTION
EVICTION = EventType.EVICTION
TRIGGER = EventType.TRIGGER
INITIAL_FULL = EventType.INITIAL_FULL

Insert = Callable[[Any], None]


def compile_insert(w: StreamWindow[Any]) -> Insert | None:
    """A fast insert for this window's configuration, or None when only the generic path fits."""
    spec = w.spec
    if w._evictor is not None:
        return None
    ev, tr = spec.eviction, spec.trigger
    if spec.type is WindowType.TUMBLING:
        if isinstance(ev, Count) and ev.size > 0:
            return _tumbling_count(w, ev.size)
        if isinstance(ev, Delta):
            return _tumbling_delta(w)
        return None
    if not isinstance(tr, Count):
        return None
    if isinstance(ev, Count) and ev.size > 0:
        return _sliding_count(w, ev.size, tr.size)
    if isinstance(ev, Time):
        return _sliding_time(w, tr.size)
    return None


def _locator(w: StreamWindow[Any]) -> tuple[Any, Any, Any]:
    single = w._single
    key_of = w._key_of
    parts = w._parts
    return single, key_of, parts


def _tumbling_count(w: StreamWindow[Any], size: int) -> Insert:
    single, key_of, parts = _locator(w)
    generic = w._insert_generic
    listeners = w._listeners
    emit = w._emit
    flush = w._flush

    def insert(t: Any) -> None:
        if single is not None:
            part = single
        else:
            try:
                part = parts.get(key_of(t))
            except Exception:  # a bad key: the generic path raises the right error
                return generic(t)
            if part is None:
                return generic(t)
        tuples = part.tuples
        tuples.append(t)
        if listeners:
            emit(INSERTION, part.key, (t,))
        if len(tuples) == size:
            flush(part)
        return None

    return insert


def _tumbling_delta(w: StreamWindow[Any]) -> Insert:
    single, key_of, parts = _locator(w)
    generic = w._insert_generic
    listeners = w._listeners
    emit = w._emit
    flush = w._flush
    read = w._ev_read
    out = w._ev_out
    bound = w._ev_bound
    assert read is not None

    def insert(t: Any) -> None:
        value = read(t)
        if single is not None:
            part = single
        else:
            try:
                part = parts.get(key_of(t))
            except Exception:
                return generic(t)
            if part is None:
                return generic(t)
        values = part.values
        if values:
            if out(value, values[0], bound):
                flush(part)
                values.clear()
                values.append(value)
        else:
            values.append(value)
        part.tuples.append(t)
        if listeners:
            emit(INSERTION, part.key, (t,))
        return None

    return insert


def _sliding_count(w: StreamWindow[Any], size: int, every: int) -> Insert:
    single, key_of, parts = _locator(w)
    generic = w._insert_generic
    listeners = w._listeners
    emit = w._emit

    def insert(t: Any) -> None:
        if single is not None:
            part = single
        else:
            try:
                part = parts.get(key_of(t))
            except Exception:
                return generic(t)
            if part is None:
                return generic(t)
        tuples = part.tuples
        if len(tuples) >= size:
            old = tuples.popleft()
            if listeners:
                emit(EVICTION, part.key, (old,))
        tuples.append(t)
        if listeners:
            emit(INSERTION, part.key, (t,))
            if not part.seen_full and len(tuples) == size:
                part.seen_full = True
                emit(INITIAL_FULL, part.key, tuples)
        elif not part.seen_full and len(tuples) == size:
            part.seen_full = True
        count = part.trigger_count + 1
        if count >= every:
            part.trigger_count = 0
            if listeners:
                emit(TRIGGER, part.key, tuples)
        else:
            part.trigger_count = count
        return None

    return insert


def _sliding_time(w: StreamWindow[Any], every: int) -> Insert:
    single, key_of, parts = _locator(w)
    generic = w._insert_generic
    listeners = w._listeners
    emit = w._emit
    arm = w._arm_evict
    evict_expired = w._evict_expired
    java = w._java

    def insert(t: Any) -> None:
        if single is not None:
            part = single
        else:
            try:
                part = parts.get(key_of(t))
            except Exception:
                return generic(t)
            if part is None:
                return generic(t)
        if not part.seen_full:  # C++ raises INITIAL_FULL before the first insertion
            return generic(t)
        tuples = part.tuples
        tuples.append(t)
        part.arrivals.append(w._now)
        if part.evict_timer is None:
            arm(part)
        if listeners:
            emit(INSERTION, part.key, (t,))
        count = part.trigger_count + 1
        if count >= every:
            part.trigger_count = 0
            if java:
                evict_expired(part)
            if listeners:
                emit(TRIGGER, part.key, tuples)
        else:
            part.trigger_count = count
        return None

    return insert


def compile_batch(w: StreamWindow[Any], insert: Insert) -> Callable[[Any], None] | None:
    """A batch insert for count windows: with no listener, the per-tuple work is inlined.

    With a listener registered the batch falls back to ``insert`` per tuple,
    so events stay exactly those of one-by-one insertion.
    """
    spec = w.spec
    ev, tr = spec.eviction, spec.trigger
    if w._evictor is not None or not isinstance(ev, Count) or ev.size == 0:
        return None
    if spec.type is WindowType.SLIDING and not isinstance(tr, Count):
        return None
    single, key_of, parts = _locator(w)
    listeners = w._listeners
    flush = w._flush
    size = ev.size
    sliding = spec.type is WindowType.SLIDING
    every = tr.size if isinstance(tr, Count) else 0

    def batch(tuples_in: Any) -> None:
        if listeners:
            for t in tuples_in:
                insert(t)
            return
        get = parts.get
        for t in tuples_in:
            if single is not None:
                part = single
            else:
                try:
                    part = get(key_of(t))
                except Exception:
                    insert(t)  # the generic path raises the right error
                    continue
                if part is None:
                    insert(t)
                    continue
            tuples = part.tuples
            if sliding:
                if len(tuples) >= size:
                    tuples.popleft()
                tuples.append(t)
                if not part.seen_full and len(tuples) == size:
                    part.seen_full = True
                count = part.trigger_count + 1
                part.trigger_count = 0 if count >= every else count
            else:
                tuples.append(t)
                if len(tuples) == size:
                    flush(part)

    return batch
