"""Specialised insert functions for the most common windows.

The generic `StreamWindow._insert_generic` handles every policy combination
and both flavors, and stays the reference. For the hot combinations (count,
delta, time and punct tumbling windows; count-, time- and delta-evicting
sliding windows with a count trigger; all without partition eviction) this
module builds a closure that does the same work with its configuration bound
in closure cells, which roughly halves the per-tuple cost in CPython. Events
are built and dispatched inline (`StreamWindow._emit`'s work without its
call). Anything a closure does not handle (a new partition, a bad tuple, a
configuration it was not built for) goes to the generic path, so the two can
never disagree on a rare case; a property test compares them on random inputs.

`compile_batch` builds the matching ``insert_batch``: with no listener there is
no event to raise, so the per-tuple work is inlined in one loop; with a
listener it inserts one by one. No timer fires inside a batch (the clock only
moves in `StreamWindow.advance_time`), so every tuple of a batch arrives at
the same instant.

The window installs these functions as its ``insert`` and ``insert_batch``
(instance attributes shadowing the methods: one Python call less per tuple).
A host may keep them, so each first checks that it is still the installed one
and otherwise hands over to the one that is: after a final mark, a restore or
a reset, a kept function never runs on stale state.

`_total` (the tuple count for ``tupleCount``) is not maintained here: the
fast paths exist only for windows without partition eviction.

The one-tuple events (INSERTION, and EVICTION of a sliding count window) are
built once per window and reused: an event is valid during the listener call
only (the documented contract of `StreamWindowEvent` and
``Operator.on_window_event``), so the closure sets the partition and tuple,
dispatches, and empties the event afterwards (a listener that kept it sees no
stale tuple). A listener that re-enters the window during the call finds the
spare in use and gets a fresh event. Building an event costs about as much as
the rest of a sliding insert's bookkeeping.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ._delta import MISSING, SAFE_INT_MAX, SAFE_INT_MIN, out_of_delta_cpp, out_of_delta_java
from ._events import EventType, StreamWindowEvent
from ._policy import Count, Delta, Time, WindowType

if TYPE_CHECKING:
    from ._window import StreamWindow

__all__ = ["compile_batch", "compile_hosted", "compile_insert"]

INSERTION = EventType.INSERTION
EVICTION = EventType.EVICTION
TRIGGER = EventType.TRIGGER
INITIAL_FULL = EventType.INITIAL_FULL

Event = StreamWindowEvent
Insert = Callable[[Any], None]
Batch = Callable[[Iterable[Any]], None]


def compile_insert(w: StreamWindow[Any]) -> Insert | None:
    """A fast insert for this window's configuration, or None when only the generic path fits."""
    spec = w.spec
    if w._evictor is not None:
        return None
    ev, tr = spec.eviction, spec.trigger
    if spec.type is WindowType.TUMBLING:
        if isinstance(ev, Count):
            return _tumbling_count(w, ev.size) if ev.size > 0 else None
        if isinstance(ev, Delta):
            return _tumbling_delta(w)
        return _tumbling_append(w)  # time(T) or punct(): timers and marks tumble, inserting appends
    if not isinstance(tr, Count):
        return None
    if isinstance(ev, Count) and ev.size > 0:
        return _sliding_count(w, ev.size, tr.size)
    if isinstance(ev, Time):
        return _sliding_time(w, tr.size)
    if isinstance(ev, Delta):
        return _sliding_delta(w, tr.size)
    return None


def compile_batch(w: StreamWindow[Any], insert: Insert) -> Batch | None:
    """A batch insert matching ``insert`` (from `compile_insert`), or None to insert one by one."""
    spec = w.spec
    if w._evictor is not None:
        return None
    ev, tr = spec.eviction, spec.trigger
    if spec.type is WindowType.TUMBLING:
        if isinstance(ev, Count):
            return _batch_count(w, insert, ev.size, 0) if ev.size > 0 else None
        if isinstance(ev, Delta):
            return _batch_tumbling_delta(w, insert)
        return _batch_append(w, insert)
    if not isinstance(tr, Count):
        return None
    if isinstance(ev, Count) and ev.size > 0:
        return _batch_count(w, insert, ev.size, tr.size)
    if isinstance(ev, Time):
        return _batch_sliding_time(w, insert, tr.size)
    if isinstance(ev, Delta):
        return _batch_sliding_delta(w, insert, tr.size)
    return None


def compile_hosted(w: StreamWindow[Any], insert: Insert) -> Callable[[list[Any]], None] | None:
    """A host's batch insert (see `StreamWindow.insert_tuples`) for this configuration, or None
    for the per-tuple loop. Only tumbling count windows have one: their events come at a tumble
    only, so with listeners the loop stays inline (a host always listens)."""
    spec = w.spec
    if (w._evictor is not None or spec.type is not WindowType.TUMBLING
            or not isinstance(spec.eviction, Count) or spec.eviction.size <= 0):
        return None
    size = spec.eviction.size
    single, key_of, parts = _locator(w)
    live = w._live
    inserted = w._insertion_listeners  # listeners that asked for INSERTION events
    flush = w._flush

    def insert_tuples(tuples_in: list[Any]) -> None:
        get = parts.get
        i = 0
        try:
            for t in tuples_in:
                if inserted or not live[0]:  # events per tuple, or the window was reinstalled
                    w._insert(t)
                    i += 1
                    continue
                if single is not None:
                    part = single
                else:
                    try:
                        part = get(key_of(t))
                    except Exception:
                        part = None
                    if part is None:  # a new partition or a bad key: the generic path
                        insert(t)
                        i += 1
                        continue
                tuples = part.tuples
                tuples.append(t)
                if len(tuples) == size:
                    flush(part)
                i += 1
        except BaseException:
            w.batch_failed_at = i
            raise

    return insert_tuples


# How a closure compares delta values: inlined for the two exact phrasings, else a call.
_OUT_JAVA, _OUT_CPP, _OUT_CALL = range(3)


def _delta_mode(out: Callable[[Any, Any, Any], bool]) -> int:
    if out is out_of_delta_java:
        return _OUT_JAVA
    if out is out_of_delta_cpp:
        return _OUT_CPP
    return _OUT_CALL


def _handlers(w: StreamWindow[Any], *types: EventType) -> tuple[list[Callable[..., None]], ...]:
    """The window's listener lists for these event types (the same lists for its life)."""
    return tuple(w._handlers[t] for t in types)


def _locator(w: StreamWindow[Any]) -> tuple[Any, Any, Any]:
    single = w._single
    key_of = w._partitioner.key_of
    parts = w._parts
    return single, key_of, parts


# ------------------------------------------------------------- per tuple


def _tumbling_count(w: StreamWindow[Any], size: int) -> Insert:
    single, key_of, parts = _locator(w)
    live = w._live
    generic = w._insert_generic
    inserted = w._insertion_listeners  # listeners that asked for INSERTION events
    spare_insertion = Event(w, INSERTION, None, ())  # reused: see the module docstring
    flush = w._flush

    def insert(t: Any) -> None:
        if not live[0]:  # kept by a host across a reinstall
            return w._insert(t)
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
        if inserted:
            event = spare_insertion
            if event.tuples:  # in use: a listener re-entered the window
                event = Event(w, INSERTION, part.key, (t,))
            else:
                event.partition, event.tuples = part.key, (t,)
            try:
                for handle in inserted:
                    handle(event)
            finally:
                event.tuples = ()
        if len(tuples) == size:
            flush(part)
        return None

    return insert


def _tumbling_append(w: StreamWindow[Any]) -> Insert:
    """Tumbling time(T) and punct(): an insertion only appends (the tumble is a timer's or a mark's)."""
    single, key_of, parts = _locator(w)
    live = w._live
    generic = w._insert_generic
    inserted = w._insertion_listeners  # listeners that asked for INSERTION events
    spare_insertion = Event(w, INSERTION, None, ())  # reused: see the module docstring

    if single is not None:
        def insert_single(t: Any) -> None:
            if not live[0]:  # kept by a host across a reinstall
                w._insert(t)
                return
            single.tuples.append(t)
            if inserted:
                event = spare_insertion
                if event.tuples:  # in use: a listener re-entered the window
                    event = Event(w, INSERTION, None, (t,))
                else:
                    event.partition, event.tuples = None, (t,)
                try:
                    for handle in inserted:
                        handle(event)
                finally:
                    event.tuples = ()

        return insert_single

    def insert(t: Any) -> None:
        if not live[0]:  # kept by a host across a reinstall
            return w._insert(t)
        try:
            part = parts.get(key_of(t))
        except Exception:
            return generic(t)
        if part is None:
            return generic(t)
        part.tuples.append(t)
        if inserted:
            event = spare_insertion
            if event.tuples:  # in use: a listener re-entered the window
                event = Event(w, INSERTION, part.key, (t,))
            else:
                event.partition, event.tuples = part.key, (t,)
            try:
                for handle in inserted:
                    handle(event)
            finally:
                event.tuples = ()
        return None

    return insert


def _tumbling_delta(w: StreamWindow[Any]) -> Insert:
    single, key_of, parts = _locator(w)
    live = w._live
    generic = w._insert_generic
    inserted = w._insertion_listeners  # listeners that asked for INSERTION events
    spare_insertion = Event(w, INSERTION, None, ())  # reused: see the module docstring
    flush = w._flush
    reader = w._ev_reader
    assert reader is not None
    attr_of, missing, check = reader.get, reader.missing, reader.check
    exact_int, exact_float = reader.exact_int, reader.exact_float
    out = w._ev_out
    bound = w._ev_bound
    mode = _delta_mode(out)

    def insert(t: Any) -> None:
        if not live[0]:  # kept by a host across a reinstall
            return w._insert(t)
        try:  # `DeltaReader.read`, inlined
            v = attr_of(t)
        except MISSING:
            raise missing(t) from None
        cls = v.__class__
        if cls is float:
            value = v if exact_float and v - v == 0.0 else check(t, v)
        elif cls is int and exact_int and SAFE_INT_MIN < v < SAFE_INT_MAX:
            value = v
        else:
            value = check(t, v)
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
            old = values[0]
            if mode == _OUT_JAVA:
                tumble = value >= old and not old >= value - bound
            elif mode == _OUT_CPP:
                tumble = value - old > bound
            else:
                tumble = out(value, old, bound)
            if tumble:
                flush(part)
                values.clear()
                values.append(value)
        else:
            values.append(value)
        part.tuples.append(t)
        if inserted:
            event = spare_insertion
            if event.tuples:  # in use: a listener re-entered the window
                event = Event(w, INSERTION, part.key, (t,))
            else:
                event.partition, event.tuples = part.key, (t,)
            try:
                for handle in inserted:
                    handle(event)
            finally:
                event.tuples = ()
        return None

    return insert


def _sliding_count(w: StreamWindow[Any], size: int, every: int) -> Insert:
    single, key_of, parts = _locator(w)
    live = w._live
    generic = w._insert_generic
    listeners = w._listeners
    inserted = w._insertion_listeners  # listeners that asked for INSERTION events
    evicted_to, full_to, triggered_to = _handlers(w, EVICTION, INITIAL_FULL, TRIGGER)
    # reused: see the module docstring
    spare_insertion, spare_eviction = Event(w, INSERTION, None, ()), Event(w, EVICTION, None, ())

    def insert(t: Any) -> None:
        if not live[0]:  # kept by a host across a reinstall
            return w._insert(t)
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
        if listeners or inserted:
            key = part.key
            if len(tuples) >= size:
                old = tuples.popleft()
                if evicted_to:
                    event = spare_eviction
                    if event.tuples:  # in use: a listener re-entered the window
                        event = Event(w, EVICTION, key, (old,))
                    else:
                        event.partition, event.tuples = key, (old,)
                    try:
                        for handle in evicted_to:
                            handle(event)
                    finally:
                        event.tuples = ()
            tuples.append(t)
            if inserted:
                event = spare_insertion
                if event.tuples:
                    event = Event(w, INSERTION, key, (t,))
                else:
                    event.partition, event.tuples = key, (t,)
                try:
                    for handle in inserted:
                        handle(event)
                finally:
                    event.tuples = ()
            if not part.seen_full and len(tuples) == size:
                part.seen_full = True
                if full_to:
                    event = Event(w, INITIAL_FULL, key, tuples)
                    for handle in full_to:
                        handle(event)
        else:
            if len(tuples) >= size:
                tuples.popleft()
            tuples.append(t)
            if not part.seen_full and len(tuples) == size:
                part.seen_full = True
        count = part.trigger_count + 1
        if count >= every:
            part.trigger_count = 0
            if triggered_to:
                event = part.trigger_event
                if event is None or event.tuples is not tuples:
                    event = part.trigger_event = Event(w, TRIGGER, part.key, tuples)
                for handle in triggered_to:
                    handle(event)
        else:
            part.trigger_count = count
        return None

    return insert


def _sliding_time(w: StreamWindow[Any], every: int) -> Insert:
    single, key_of, parts = _locator(w)
    live = w._live
    generic = w._insert_generic
    inserted = w._insertion_listeners  # listeners that asked for INSERTION events
    spare_insertion = Event(w, INSERTION, None, ())  # reused: see the module docstring
    (triggered_to,) = _handlers(w, TRIGGER)
    arm = w._arm_evict
    evict_expired = w._evict_expired
    java = w._java

    def insert(t: Any) -> None:
        if not live[0]:  # kept by a host across a reinstall
            return w._insert(t)
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
        if inserted:
            event = spare_insertion
            if event.tuples:  # in use: a listener re-entered the window
                event = Event(w, INSERTION, part.key, (t,))
            else:
                event.partition, event.tuples = part.key, (t,)
            try:
                for handle in inserted:
                    handle(event)
            finally:
                event.tuples = ()
        count = part.trigger_count + 1
        if count >= every:
            part.trigger_count = 0
            if java:
                evict_expired(part)
            if triggered_to:
                event = part.trigger_event
                if event is None or event.tuples is not tuples:
                    event = part.trigger_event = Event(w, TRIGGER, part.key, tuples)
                for handle in triggered_to:
                    handle(event)
        else:
            part.trigger_count = count
        return None

    return insert


def _sliding_delta(w: StreamWindow[Any], every: int) -> Insert:
    """Sliding delta(a, D) with a count trigger; listener-free Java eviction is inlined."""
    single, key_of, parts = _locator(w)
    live = w._live
    generic = w._insert_generic
    listeners = w._listeners
    inserted = w._insertion_listeners  # listeners that asked for INSERTION events
    spare_insertion = Event(w, INSERTION, None, ())  # reused: see the module docstring
    (triggered_to,) = _handlers(w, TRIGGER)
    delta_evict = w._delta_evict
    reader = w._ev_reader
    assert reader is not None
    attr_of, missing, check = reader.get, reader.missing, reader.check
    exact_int, exact_float = reader.exact_int, reader.exact_float
    out = w._ev_out
    bound = w._ev_bound
    mode = _delta_mode(out)
    tracks_order = w.rules.delta_eviction_tracks_order

    def insert(t: Any) -> None:
        if not live[0]:  # kept by a host across a reinstall
            return w._insert(t)
        try:  # `DeltaReader.read`, inlined
            v = attr_of(t)
        except MISSING:
            raise missing(t) from None
        cls = v.__class__
        if cls is float:
            value = v if exact_float and v - v == 0.0 else check(t, v)
        elif cls is int and exact_int and SAFE_INT_MIN < v < SAFE_INT_MAX:
            value = v
        else:
            value = check(t, v)
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
        tuples = part.tuples
        if values:
            if tracks_order or listeners or not part.seen_full:
                delta_evict(part, value)  # C++ order tracking, events or INITIAL_FULL: the engine's
            elif mode == _OUT_JAVA:
                while values and value >= (old := values[0]) and not old >= value - bound:
                    values.popleft()
                    tuples.popleft()
            elif mode == _OUT_CPP:
                while values and value - values[0] > bound:
                    values.popleft()
                    tuples.popleft()
            else:
                while values and out(value, values[0], bound):
                    values.popleft()
                    tuples.popleft()
        tuples.append(t)
        values.append(value)
        if inserted:
            event = spare_insertion
            if event.tuples:  # in use: a listener re-entered the window
                event = Event(w, INSERTION, part.key, (t,))
            else:
                event.partition, event.tuples = part.key, (t,)
            try:
                for handle in inserted:
                    handle(event)
            finally:
                event.tuples = ()
        count = part.trigger_count + 1
        if count >= every:
            part.trigger_count = 0
            if triggered_to:
                event = part.trigger_event
                if event is None or event.tuples is not tuples:
                    event = part.trigger_event = Event(w, TRIGGER, part.key, tuples)
                for handle in triggered_to:
                    handle(event)
        else:
            part.trigger_count = count
        return None

    return insert


# ----------------------------------------------------------------- batches
#
# Each batch function inserts one by one while a listener is registered; else
# it runs the listener-free body of the matching per-tuple function in one
# loop, and hands a tuple it does not handle (new partition, bad key) to
# ``insert``, which passes it on to the generic path.


def _batch_count(w: StreamWindow[Any], insert: Insert, size: int, every: int) -> Batch:
    """Count tumbling (``every`` 0) or count-evicting sliding windows with a count trigger."""
    single, key_of, parts = _locator(w)
    live = w._live
    listeners = w._listeners
    inserted = w._insertion_listeners  # listeners that asked for INSERTION events
    flush = w._flush
    sliding = w._sliding

    def batch(tuples_in: Iterable[Any]) -> None:
        if not live[0]:  # kept by a host across a reinstall
            w._insert_many(tuples_in)
            return
        if listeners or inserted:
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
                    insert(t)
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


def _batch_append(w: StreamWindow[Any], insert: Insert) -> Batch:
    """Tumbling time(T) and punct()."""
    single, key_of, parts = _locator(w)
    live = w._live
    listeners = w._listeners
    inserted = w._insertion_listeners  # listeners that asked for INSERTION events

    def batch(tuples_in: Iterable[Any]) -> None:
        if not live[0]:  # kept by a host across a reinstall
            w._insert_many(tuples_in)
            return
        if listeners or inserted:
            for t in tuples_in:
                insert(t)
            return
        if single is not None:
            single.tuples.extend(tuples_in)
            return
        get = parts.get
        for t in tuples_in:
            try:
                part = get(key_of(t))
            except Exception:
                insert(t)
                continue
            if part is None:
                insert(t)
                continue
            part.tuples.append(t)

    return batch


def _batch_tumbling_delta(w: StreamWindow[Any], insert: Insert) -> Batch:
    single, key_of, parts = _locator(w)
    live = w._live
    listeners = w._listeners
    inserted = w._insertion_listeners  # listeners that asked for INSERTION events
    flush = w._flush
    reader = w._ev_reader
    assert reader is not None
    attr_of, missing, check = reader.get, reader.missing, reader.check
    exact_int, exact_float = reader.exact_int, reader.exact_float
    out = w._ev_out
    bound = w._ev_bound
    mode = _delta_mode(out)

    def batch(tuples_in: Iterable[Any]) -> None:
        if not live[0]:  # kept by a host across a reinstall
            w._insert_many(tuples_in)
            return
        if listeners or inserted:
            for t in tuples_in:
                insert(t)
            return
        get = parts.get
        for t in tuples_in:
            try:  # `DeltaReader.read`, inlined
                v = attr_of(t)
            except MISSING:
                raise missing(t) from None
            cls = v.__class__
            if cls is float:
                value = v if exact_float and v - v == 0.0 else check(t, v)
            elif cls is int and exact_int and SAFE_INT_MIN < v < SAFE_INT_MAX:
                value = v
            else:
                value = check(t, v)
            if single is not None:
                part = single
            else:
                try:
                    part = get(key_of(t))
                except Exception:
                    insert(t)
                    continue
                if part is None:
                    insert(t)
                    continue
            values = part.values
            if values:
                old = values[0]
                if mode == _OUT_JAVA:
                    tumble = value >= old and not old >= value - bound
                elif mode == _OUT_CPP:
                    tumble = value - old > bound
                else:
                    tumble = out(value, old, bound)
                if tumble:
                    flush(part)
                    values.clear()
                    values.append(value)
            else:
                values.append(value)
            part.tuples.append(t)

    return batch


def _batch_sliding_time(w: StreamWindow[Any], insert: Insert, every: int) -> Batch:
    single, key_of, parts = _locator(w)
    live = w._live
    listeners = w._listeners
    inserted = w._insertion_listeners  # listeners that asked for INSERTION events
    arm = w._arm_evict
    evict_expired = w._evict_expired
    java = w._java

    def batch(tuples_in: Iterable[Any]) -> None:
        if not live[0]:  # kept by a host across a reinstall
            w._insert_many(tuples_in)
            return
        if listeners or inserted:
            for t in tuples_in:
                insert(t)
            return
        now = w._now
        get = parts.get
        for t in tuples_in:
            if single is not None:
                part = single
            else:
                try:
                    part = get(key_of(t))
                except Exception:
                    insert(t)
                    continue
                if part is None:
                    insert(t)
                    continue
            if not part.seen_full:
                insert(t)
                continue
            part.tuples.append(t)
            part.arrivals.append(now)
            if part.evict_timer is None:
                arm(part)
            count = part.trigger_count + 1
            if count >= every:
                part.trigger_count = 0
                if java:
                    evict_expired(part)
            else:
                part.trigger_count = count

    return batch


def _batch_sliding_delta(w: StreamWindow[Any], insert: Insert, every: int) -> Batch:
    single, key_of, parts = _locator(w)
    live = w._live
    listeners = w._listeners
    inserted = w._insertion_listeners  # listeners that asked for INSERTION events
    delta_evict = w._delta_evict
    reader = w._ev_reader
    assert reader is not None
    attr_of, missing, check = reader.get, reader.missing, reader.check
    exact_int, exact_float = reader.exact_int, reader.exact_float
    out = w._ev_out
    bound = w._ev_bound
    mode = _delta_mode(out)
    tracks_order = w.rules.delta_eviction_tracks_order

    def batch(tuples_in: Iterable[Any]) -> None:
        if not live[0]:  # kept by a host across a reinstall
            w._insert_many(tuples_in)
            return
        if listeners or inserted:
            for t in tuples_in:
                insert(t)
            return
        get = parts.get
        for t in tuples_in:
            try:  # `DeltaReader.read`, inlined
                v = attr_of(t)
            except MISSING:
                raise missing(t) from None
            cls = v.__class__
            if cls is float:
                value = v if exact_float and v - v == 0.0 else check(t, v)
            elif cls is int and exact_int and SAFE_INT_MIN < v < SAFE_INT_MAX:
                value = v
            else:
                value = check(t, v)
            if single is not None:
                part = single
            else:
                try:
                    part = get(key_of(t))
                except Exception:
                    insert(t)
                    continue
                if part is None:
                    insert(t)
                    continue
            values = part.values
            tuples = part.tuples
            if values:
                if tracks_order or not part.seen_full:
                    delta_evict(part, value)
                elif mode == _OUT_JAVA:
                    while values and value >= (old := values[0]) and not old >= value - bound:
                        values.popleft()
                        tuples.popleft()
                elif mode == _OUT_CPP:
                    while values and value - values[0] > bound:
                        values.popleft()
                        tuples.popleft()
                else:
                    while values and out(value, values[0], bound):
                        values.popleft()
                        tuples.popleft()
            tuples.append(t)
            values.append(value)
            count = part.trigger_count + 1
            part.trigger_count = 0 if count >= every else count

    return batch
