"""The window engine: one `StreamWindow` for every tumbling and sliding clause.

A host (the asyncio runtime, the Spark bridge, the trace command, a test)
drives the window with four calls: `insert` a tuple, `punctuate` a window or
final mark, `advance_time` to a new instant, `evict_partition`. The window
answers by raising `StreamWindowEvent`s to its listeners, synchronously, in
IBM's order. It never reads a clock and never blocks.

The engine is generic over the policy axes (spec: eviction x trigger x
partition eviction) and over the flavor: each insertion runs the same phases
(delta trigger, pre-insert eviction, insertion, post-insert checks), each
phase doing what the configured policies ask for. Where the Java and C++
runtimes differ the engine consults `FlavorRules`.

Time is integer nanoseconds from an arbitrary origin chosen by the host.
"""

from __future__ import annotations

import operator
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from functools import partial
from heapq import heappop
from typing import Any, Generic, TypeVar

from ._delta import DeltaReader, bound_for, delta_kind_for_type, make_delta_reader
from ._errors import WindowClauseError, WindowStateError
from ._events import EventType, Listener, StreamWindowEvent
from ._fastpath import compile_batch, compile_hosted, compile_insert
from ._flavor import Flavor, FlavorRules, rules_for
from ._listeners import ListenerRegistry, Partitioner
from ._partition import Partition
from ._partition_eviction import PartitionEvictor, make_partition_evictor
from ._policy import Count, Delta, Punct, Time, WindowSpec, WindowType
from ._snapshot import partition_state, restore_partition_state, restore_window, window_state
from ._timers import Timer, TimerQueue

__all__ = ["StreamWindow"]

T = TypeVar("T")

INSERTION = EventType.INSERTION
EVICTION = EventType.EVICTION
TRIGGER = EventType.TRIGGER
INITIAL_FULL = EventType.INITIAL_FULL
FINAL = EventType.FINAL
PARTITION_EVICTION = EventType.PARTITION_EVICTION
EMPTY_WINDOW_PUNCT = EventType.EMPTY_WINDOW_PUNCT

_NO_TUPLES: tuple[Any, ...] = ()
_RAISED = frozenset(EventType) - {EventType.CLOSE}  # CLOSE is a timeInterval pane's

# Policy kinds, resolved once so the insert path compares small ints.
_NONE, _COUNT, _TIME, _DELTA, _PUNCT = range(5)


def _kind(policy: object) -> int:
    if policy is None:
        return _NONE
    if isinstance(policy, Count):
        return _COUNT
    if isinstance(policy, Time):
        return _TIME
    if isinstance(policy, Delta):
        return _DELTA
    return _PUNCT


class StreamWindow(Generic[T]):
    """A windowed input port's window (IBM Java ``StreamWindow``), pure and synchronous.

    ``spec`` is a `WindowSpec` or SPL clause text. ``partition_by`` is the
    partition attribute's name or a function of the tuple (Java's
    ``Partitioner``); a partitioned spec needs one (or a later
    `register_partitioner`). ``attribute_types`` maps attribute names to SPL
    types (``int32``, ``float64``, ``timestamp``, ...) for the delta policies;
    without it, delta values are compared as the Python numbers they are.
    ``getter`` builds attribute readers (default: ``tuple[name]``).
    ``default_partition`` is the key the ``cpp`` flavor's window-wide timers use
    when a tick finds no partition (SPL's default value of the key type).

    Boundaries: time eviction removes a tuple once it has been in the window
    strictly more than T; delta policies need "more than D". After a final
    mark (``java``) no timer ever fires again and inserting raises
    `WindowStateError`.
    """

    def __init__(
        self,
        spec: WindowSpec | str,
        *,
        flavor: Flavor | str = Flavor.JAVA,
        partition_by: str | Callable[[T], Hashable] | None = None,
        attribute_types: Mapping[str, str] | None = None,
        getter: Callable[[str], Callable[[T], Any]] = operator.itemgetter,  # type: ignore[assignment]
        default_partition: Hashable = "",
        listeners: Iterable[Listener[T]] = (),
    ) -> None:
        if isinstance(spec, str):
            from ._clause import parse_window_clause

            parsed = parse_window_clause(spec)
            if not isinstance(parsed, WindowSpec):
                raise WindowClauseError(
                    f"{spec}: a timeInterval window is an event-time window; build it "
                    "with TimeIntervalWindow (or riverbed.windows.make_window)")
            spec = parsed
        if not isinstance(spec, WindowSpec):
            raise WindowClauseError(
                f"{spec!r}: a timeInterval window is an event-time window; build it "
                "with TimeIntervalWindow (or riverbed.windows.make_window)")
        self.spec: WindowSpec = spec
        self.rules: FlavorRules = rules_for(flavor)
        rules = self.rules
        self._java = rules.flavor is Flavor.JAVA
        self._sliding = spec.type is WindowType.SLIDING
        self._ev = _kind(spec.eviction)
        self._tr = _kind(spec.trigger)
        ev, tr = spec.eviction, spec.trigger
        if self._sliding and self._ev == _COUNT and ev.size == 0 and self._java:  # type: ignore[union-attr]
            raise WindowStateError(
                "sliding, count(0): IBM's Java window fails on the first tuple of such a window; "
                "use flavor='cpp' (trigger-only, keeps no tuple) or a size >= 1")
        self._ev_n = ev.size if isinstance(ev, Count) else 0
        self._ev_ns = ev.ns if isinstance(ev, Time) else 0
        self._tr_n = tr.size if isinstance(tr, Count) else 0
        self._tr_ns = tr.ns if isinstance(tr, Time) else 0
        types = dict(attribute_types or {})
        self._getter = getter
        self._ev_reader, self._ev_bound, self._ev_out = self._delta_parts(ev, types, "eviction")
        self._tr_reader, self._tr_bound, self._tr_out = self._delta_parts(tr, types, "trigger")
        self._ev_read = self._ev_reader.read if self._ev_reader is not None else None
        self._tr_read = self._tr_reader.read if self._tr_reader is not None else None
        self._evict_after = self._ev_ns + rules.time_eviction_lag_ns  # arrival -> eviction timer
        self._tick_ns = self._tr_ns if self._sliding else self._ev_ns  # period of a periodic policy
        self._default_partition = default_partition
        self._partitioner: Partitioner[T] = Partitioner(spec.clause(), spec.partitioned, getter)
        # Who receives each event type (see `ListenerRegistry`); the lists live as long as the
        # window, so compiled insert paths hold them.
        self._events = ListenerRegistry("tumbling or sliding", _RAISED)
        self._handlers = self._events.handlers
        # Every listener of some type other than INSERTION: the gate for building those events.
        self._listeners = self._events.gate
        # Listeners for INSERTION events, raised by their own code paths (one per tuple).
        self._insertion_listeners = self._handlers[INSERTION]
        for listener in listeners:
            self.register_listener(listener)
        self._timers = TimerQueue()
        # The same containers for the window's life (cancel_all clears them in place).
        self._heap = self._timers.heap
        self._lane = self._timers.lane
        self._use_fast = True
        self._live = [True]  # cleared when the insert functions built with it are replaced
        self.batch_failed_at = 0  # see `insert_tuples`
        self._evictor: PartitionEvictor | None = make_partition_evictor(
            spec.partition_eviction, self._java)
        self._reset_state()
        if partition_by is not None:
            self.register_partitioner(partition_by)

    # ------------------------------------------------------------------ setup

    def _delta_parts(self, policy: object, types: dict[str, str], role: str
                     ) -> tuple[DeltaReader | None, Any, Callable[[Any, Any, Any], bool]]:
        if not isinstance(policy, Delta):
            return None, None, self.rules.out_of_delta
        kind = delta_kind_for_type(types.get(policy.attribute))
        reader = make_delta_reader(policy, kind, role, self._getter(policy.attribute))
        out = self.rules.out_of_delta_f32 if kind == "float32" else self.rules.out_of_delta
        return reader, bound_for(policy, kind), out

    def _reset_state(self) -> None:
        """The state of a window just built: no partition, nothing armed."""
        self._timers.cancel_all()
        self._now = 0
        self._active = False
        self._final = False
        self._suspended = False  # C14 (cpp): time stands still until the next tuple
        self._parts: dict[Any, Partition] = {}
        self._lru: OrderedDict[Any, int] = OrderedDict()
        self._memory: dict[Any, tuple[bool, int, Any, bool]] = {}  # C++: state of dropped partitions
        self._total = 0
        self._shared_ref: Any = None  # Java: delta trigger reference shared by all partitions
        self._shared_has_ref = False
        self._in_order = True  # C++: delta eviction arrivals still in order (window-wide flag)
        self._window_last_tick = 0
        self._window_tick: Timer | None = None
        self._single: Partition | None = None
        if not self.spec.partitioned:
            self._single = Partition(None, self._sliding)
            self._parts[None] = self._single
        self._install_insert()

    # ------------------------------------------------------------- Java API

    @property
    def type(self) -> WindowType:
        return self.spec.type

    @property
    def eviction_policy(self) -> Count | Time | Delta | Punct:
        return self.spec.eviction

    @property
    def trigger_policy(self) -> Count | Time | Delta | None:
        return self.spec.trigger

    @property
    def flavor(self) -> Flavor:
        return self.rules.flavor

    @property
    def is_partitioned(self) -> bool:
        return self.spec.partitioned

    @property
    def now(self) -> int:
        """The window's current time in nanoseconds (the last `advance_time`)."""
        return self._now

    def register_listener(self, listener: Listener[T], types: Iterable[EventType] | None = None) -> None:
        """Add a listener: an object with ``handle_event(event)`` or a callable.

        ``types`` restricts it to some event types. A window raises one
        INSERTION per tuple; a listener that does not ask for them costs
        nothing per insertion, which is most of a window's event traffic.
        Misuse raises what `TimeIntervalWindow.register_listener` raises (see
        `riverbed.windows._listeners`).
        """
        self._events.register(listener, types)

    def register_partitioner(self, partition_by: str | Callable[[T], Hashable]) -> None:
        """Set how a tuple's partition key is computed: an attribute name or a function.

        Only before the window has partitions (at construction, before the
        first tuple, or after a reset): `WindowStateError` afterwards.
        """
        self._partitioner.set(partition_by, has_partitions=self.spec.partitioned and bool(self._parts))
        self._install_insert()

    def partitions(self) -> list[Hashable]:
        """Partition keys; least recently inserted first when partition eviction is configured."""
        self._check_partitioned("partitions()")
        if self._evictor is not None:
            return [k for k in self._lru if k in self._parts]
        return list(self._parts)

    def contents(self, partition: Hashable | None = None) -> list[T]:
        """A copy of a partition's tuples, oldest first (empty for an unknown key)."""
        part = self._parts.get(partition)
        return list(part.tuples) if part is not None else []

    def evict_partition(self, partition: Hashable) -> None:
        """Evict one partition now: PARTITION_EVICTION with its tuples; unknown keys are ignored."""
        self._check_partitioned("evict_partition()")
        if partition in self._parts:
            self._evict_partition(partition)

    def needs_partition_eviction(self) -> bool:
        """True while a partitionCount/tupleCount limit is exceeded (False for partitionAge)."""
        self._check_partitioned("needs_partition_eviction()")
        return self._evictor is not None and self._evictor.needs_eviction(self)

    def _check_partitioned(self, what: str) -> None:
        if not self.spec.partitioned:
            raise WindowStateError(f"{what} needs a partitioned window; '{self.spec.clause()}' is not")

    # --------------------------------------------------------------- events

    def _emit(self, etype: EventType, key: Hashable | None, tuples: Sequence[T]) -> None:
        handlers = self._handlers[etype]
        if handlers:
            event = StreamWindowEvent(self, etype, key, tuples)
            for handle in handlers:
                handle(event)

    def _emit_insertion(self, key: Hashable | None, t: T) -> None:
        event = StreamWindowEvent(self, INSERTION, key, (t,))
        for handle in self._insertion_listeners:
            handle(event)

    # ------------------------------------------------------------ lifecycle

    def activate(self, now: int | None = None) -> None:
        """The port is ready: start the window's timers (at ``now``, default the window's time).

        Java flavor, unpartitioned: the single partition starts its periodic
        timers and a time-evicting window raises its INITIAL_FULL (empty).
        """
        if self._active:
            return
        if now is not None:
            self._check_time(now)
            self._now = now
        self._active = True
        if self._evictor is not None:
            self._evictor.start(self)
        if self._java:
            if self._single is not None:
                self._activate_partition(self._single)
        elif (self._ev == _TIME and not self._sliding) or self._tr == _TIME:
            self._window_last_tick = self._now
            self._arm_window_tick(self._now + (self._ev_ns if self._ev == _TIME and not self._sliding
                                               else self._tr_ns))
        self._install_insert()

    def _check_time(self, now: int) -> None:
        if not isinstance(now, int) or isinstance(now, bool):
            raise WindowStateError(f"time must be integer nanoseconds, got {now!r}")
        if now < self._now:
            raise WindowStateError(f"time cannot go backwards: the window is at {self._now} ns, "
                                   f"asked to move to {now} ns")

    def advance_time(self, now: int) -> None:
        """Move the window's clock to ``now`` (ns), firing every timer due at or before it.

        Each timer fires at its own due time, in time order (ties: arming order).
        """
        if now.__class__ is not int or now < self._now:
            self._check_time(now)  # raises, or accepts an int subclass
        if not self._active:
            self.activate()
        # `TimerQueue.pop_due`, unrolled: this runs once per tuple in many hosts.
        heap, lane = self._heap, self._lane
        while True:
            if heap:
                if lane and lane[0] < heap[0]:
                    if lane[0][0] > now:
                        break
                    due, seq, timer = lane.popleft()
                else:
                    if heap[0][0] > now:
                        break
                    due, seq, timer = heappop(heap)
            elif lane and lane[0][0] <= now:
                due, seq, timer = lane.popleft()
            else:
                break
            if timer.alive and timer.seq == seq:
                timer.alive = False
                self._now = due
                timer.action()
        self._now = now

    def next_deadline(self) -> int | None:
        """When the next timer is due (ns), so a host knows when to call `advance_time`."""
        return self._timers.next_due()

    # --------------------------------------------------------------- timers

    def _arm_tick(self, part: Partition, due: int) -> None:
        timer = part.tick_timer
        if timer is not None and not timer.alive:  # fired (or cancelled): reuse it
            self._timers.rearm(timer, due)
        else:
            part.tick_timer = self._timers.arm(due, partial(self._on_tick, part))

    def _on_tick(self, part: Partition) -> None:
        now = self._now
        part.last_tick = now
        timer = part.tick_timer
        if timer is not None and not timer.alive:  # `_arm_tick`, inlined: reuse the timer that fired
            self._timers.rearm(timer, now + self._tick_ns)
        else:
            self._arm_tick(part, now + self._tick_ns)
        if self._sliding:
            if self._ev == _TIME:
                self._evict_expired(part)
            self._emit_trigger(part)
        elif self._listeners or not self.rules.keeps_emptied_partitions:
            self._flush(part)
        else:  # `_flush` without events or partition drop, inlined
            self._total -= len(part.tuples)
            part.tuples = []

    def _arm_window_tick(self, due: int) -> None:
        self._window_tick = self._timers.arm(due, self._on_window_tick)

    def _on_window_tick(self) -> None:
        """C++: one timer for the whole window (spec R11, R31)."""
        self._window_last_tick = self._now
        self._arm_window_tick(self._now + self._tick_ns)
        if self._suspended:
            return  # C14: a suspended window thread skips the tick, keeping its phase
        evictor = self._evictor
        if evictor is not None and evictor.checks_before_events:
            evictor.check(self)
        if self._single is not None:
            if self._sliding:
                self._emit_trigger(self._single)
            else:
                self._flush(self._single)
            return
        if self._sliding:
            parts = list(self._parts.values())
            if not parts:
                if self._listeners:
                    self._emit(TRIGGER, self._default_partition, _NO_TUPLES)
                return
            for part in parts:
                self._emit_trigger(part)
        else:
            full = [p for p in self._parts.values() if p.tuples]
            if not full:
                if self._listeners:
                    self._emit(EVICTION, self._default_partition, _NO_TUPLES)
                return
            for part in full:
                self._flush(part)

    def _arm_evict(self, part: Partition) -> None:
        due = part.arrivals[0] + self._evict_after
        timer = part.idle_evict_timer
        if timer is None:
            part.evict_timer = self._timers.arm(due, partial(self._on_evict_timer, part))
        else:
            part.idle_evict_timer = None
            self._timers.rearm(timer, due)
            part.evict_timer = timer

    def _on_evict_timer(self, part: Partition) -> None:
        timer = part.evict_timer
        part.evict_timer = None
        if self._suspended:  # C14: evict nothing now; poll again one period later
            poll = self._now + self._ev_ns
            if timer is not None:
                self._timers.rearm(timer, poll)
                part.evict_timer = timer
            else:
                part.evict_timer = self._timers.arm(poll, partial(self._on_evict_timer, part))
            return
        arrivals = part.arrivals
        if self._listeners:
            self._evict_expired(part)
        elif arrivals:  # `_evict_expired` without events, inlined: this fires about once per tuple
            limit = self._now - self._ev_ns
            if arrivals[0] < limit:
                tuples = part.tuples
                n = 0
                while arrivals and arrivals[0] < limit:
                    arrivals.popleft()
                    tuples.popleft()
                    n += 1
                self._total -= n
                if not tuples and not self.rules.keeps_emptied_partitions:
                    self._drop_emptied(part)
        if part.evict_timer is None:  # (else a listener's insertion armed one)
            if not arrivals or part.key not in self._parts:
                part.idle_evict_timer = timer  # for `_arm_evict` to reuse
            elif timer is not None:  # `_arm_evict`, inlined: arm the timer that fired again
                self._timers.rearm(timer, arrivals[0] + self._evict_after)
                part.evict_timer = timer
            else:
                self._arm_evict(part)

    # ----------------------------------------------------------- partitions

    def _activate_partition(self, part: Partition) -> None:
        """Java: a partition starts its own timers when created (spec R11, R31, R36)."""
        if self._ev == _TIME and self._sliding:
            part.seen_full = True
            if self._listeners:
                self._emit(INITIAL_FULL, part.key, _NO_TUPLES)
        period = self._tr_ns if self._sliding else (self._ev_ns if self._ev == _TIME else 0)
        if period:
            part.last_tick = self._now
            self._arm_tick(part, self._now + period)

    def _new_partition(self, key: Hashable) -> Partition:
        part = Partition(key, self._sliding)
        self._parts[key] = part
        if self._java:
            self._activate_partition(part)
        else:
            remembered = self._memory.pop(key, None)
            if remembered is not None:
                part.seen_full, part.trigger_count, part.delta_ref, part.has_delta_ref = remembered
        return part

    def _evict_partition(self, key: Hashable) -> None:
        """Partition eviction: PARTITION_EVICTION with its tuples, then it is gone."""
        part = self._parts.pop(key, None)
        self._lru.pop(key, None)
        self._memory.pop(key, None)
        if part is None:
            return
        part.cancel_timers()
        self._total -= len(part.tuples)
        if self._listeners:
            self._emit(PARTITION_EVICTION, key, part.tuples)

    def _drop_emptied(self, part: Partition) -> None:
        """C++ drops a partition emptied by a tumble or time eviction, silently (spec R9, R25)."""
        key = part.key
        if self._single is not None or self._parts.get(key) is not part:
            return
        del self._parts[key]
        self._lru.pop(key, None)
        part.cancel_timers()
        if self._sliding:
            self._memory[key] = (part.seen_full, part.trigger_count, part.delta_ref, part.has_delta_ref)

    # ------------------------------------------------------------ insertion

    def insert(self, t: T) -> None:
        """A tuple arrives at the port: raise its events in IBM's order.

        Raises `WindowTupleError` without changing anything when the tuple lacks
        the partition or delta attribute or holds an invalid delta value.
        """
        self._insert(t)

    def _install_insert(self) -> None:
        """Pick the insert function: a specialised one while active and open, else the generic."""
        self._live[0] = False  # functions a host kept hand over to the new ones
        self._live = [True]
        fast = (compile_insert(self) if self._active and not self._final and self._use_fast
                and not self._suspended else None)
        insert: Callable[[T], None] = fast if fast is not None else self._insert_generic
        batch = compile_batch(self, insert) if fast is not None else None
        many: Callable[[Iterable[T]], None] = batch if batch is not None else self._insert_each
        hosted = compile_hosted(self, insert) if fast is not None else None
        self._insert = insert
        self._insert_many = many
        # The chosen functions shadow the `insert`, `insert_batch` and `insert_tuples` methods on
        # the instance, which saves a Python call per tuple; the methods stay for the API and docs.
        vars(self).update(insert=insert, insert_batch=many,
                          insert_tuples=hosted if hosted is not None else self._insert_each)

    def _insert_generic(self, t: T) -> None:
        if self._final:
            raise WindowStateError("the window received final punctuation; no tuple may follow")
        # Everything that can reject the tuple comes first: a refused tuple changes nothing.
        ev_val = self._ev_read(t) if self._ev_read is not None else None
        tr_val = self._tr_read(t) if self._tr_read is not None else None
        key = self._partitioner.key(t) if self._single is None else None
        if self._suspended:  # C14: the first tuple after a drain or reset resumes time
            self._suspended = False
            self._install_insert()
        if not self._active:
            self.activate()
        rules = self.rules
        if not self._sliding and self._ev == _COUNT and self._ev_n == 0 and rules.count_zero_keeps_nothing:
            return
        single = self._single
        if single is not None:
            part = single
        else:
            evictor = self._evictor
            if evictor is not None and evictor.checks_before_events:
                evictor.check(self)
            found = self._parts.get(key)
            part = found if found is not None else self._new_partition(key)
        evictor = self._evictor
        needed = False
        if evictor is not None:
            if evictor.needs_before_insert:
                needed = evictor.before_insert(self)
            lru = self._lru
            if part.key in lru:
                lru.move_to_end(part.key)
            lru[part.key] = self._now // 1_000_000_000
        if self._sliding:
            self._insert_sliding(part, t, ev_val, tr_val)
        else:
            self._insert_tumbling(part, t, ev_val)
        if evictor is not None and not rules.partition_eviction_after_insertion:
            evictor.after_insert(self, needed)

    def insert_batch(self, tuples: Iterable[T]) -> None:
        """Insert many tuples; same events as inserting them one by one."""
        self._insert_many(tuples)

    def insert_tuples(self, tuples: list[T]) -> None:
        """Insert a host's batch: as `insert_batch`, and if something fails (a listener, an
        invalid tuple), ``batch_failed_at`` is the index of the tuple it failed on, so the
        host can name that tuple and go on after it."""
        self._insert_each(tuples)

    def _insert_each(self, tuples: Iterable[T]) -> None:
        """One by one; on a failure ``batch_failed_at`` is the failing tuple's index."""
        insert = self._insert
        i = 0
        try:
            for t in tuples:
                insert(t)
                i += 1
        except BaseException:
            self.batch_failed_at = i
            raise

    def _insert_tumbling(self, part: Partition, t: T, ev_val: Any) -> None:
        ev = self._ev
        if ev == _DELTA:
            values = part.values
            if values and self._ev_out(ev_val, values[0], self._ev_bound):
                self._flush(part)  # spec R13: EVICTION before the arriving tuple's INSERTION
                values.clear()
            if not values:
                values.append(ev_val)
        part.tuples.append(t)
        self._total += 1
        if self._insertion_listeners:
            self._emit_insertion(part.key, t)
        if self.rules.partition_eviction_after_insertion and self._evictor is not None:
            self._evictor.after_insert(self, False)
            if self._parts.get(part.key) is not part:
                return  # C++ skips the tumble of a partition it just evicted
        if ev == _COUNT and len(part.tuples) == self._ev_n:
            self._flush(part)

    def _flush(self, part: Partition) -> None:
        """Tumble: EVICTION of all the partition's tuples (even none), then it is empty."""
        tuples = part.tuples
        part.tuples = []
        self._total -= len(tuples)
        if self._listeners:
            self._emit(EVICTION, part.key, tuples)
        if not self.rules.keeps_emptied_partitions and self._ev != _DELTA:
            self._drop_emptied(part)

    def _insert_sliding(self, part: Partition, t: T, ev_val: Any, tr_val: Any) -> None:
        rules = self.rules
        listeners = self._listeners
        ev, tr = self._ev, self._tr
        tuples = part.tuples
        # 1. A delta trigger fires before the arriving tuple is processed (spec R32, R34).
        if tr == _DELTA:
            self._delta_trigger(part, tr_val)
        # 2. Eviction made necessary by the arrival.
        keep = True
        if ev == _COUNT:
            n = self._ev_n
            if n == 0:
                keep = False  # C++ count(0): nothing is kept, the trigger still counts
            elif len(tuples) >= n:
                old = tuples.popleft()
                self._total -= 1
                if listeners:
                    self._emit(EVICTION, part.key, (old,))
        elif ev == _DELTA:
            self._delta_evict(part, ev_val)
        elif not part.seen_full:  # time eviction, C++: INITIAL_FULL before the first insertion
            part.seen_full = True
            if listeners:
                self._emit(INITIAL_FULL, part.key, tuples)
        # 3. The insertion.
        if keep:
            tuples.append(t)
            self._total += 1
            if ev == _DELTA:
                part.values.append(ev_val)
            elif ev == _TIME:
                part.arrivals.append(self._now)
                if part.evict_timer is None:
                    self._arm_evict(part)
            if self._insertion_listeners:
                self._emit_insertion(part.key, t)
        if rules.partition_eviction_after_insertion and self._evictor is not None:
            self._evictor.after_insert(self, False)
        # 4. A count eviction is initially full when it first holds N tuples.
        if ev == _COUNT and keep and not part.seen_full and len(tuples) == self._ev_n:
            part.seen_full = True
            if listeners:
                self._emit(INITIAL_FULL, part.key, tuples)
        # 5. Count trigger.
        if tr == _COUNT:
            part.trigger_count += 1
            if part.trigger_count >= self._tr_n:
                part.trigger_count = 0
                if ev == _TIME and self._java:
                    self._evict_expired(part)
                self._emit_trigger(part)

    def _emit_trigger(self, part: Partition) -> None:
        if self._listeners:
            self._emit(TRIGGER, part.key, part.tuples)

    def _delta_trigger(self, part: Partition, value: Any) -> None:
        shared = self.rules.shared_delta_trigger
        has_ref = self._shared_has_ref if shared else part.has_delta_ref
        if has_ref:
            ref = self._shared_ref if shared else part.delta_ref
            if not self._tr_out(value, ref, self._tr_bound):
                return
            if self._ev == _TIME and self._java:
                self._evict_expired(part)
            self._emit_trigger(part)
        if shared:
            self._shared_ref = value
            self._shared_has_ref = True
        else:
            part.delta_ref = value
            part.has_delta_ref = True

    def _delta_evict(self, part: Partition, value: Any) -> None:
        """Sliding delta eviction (spec R26, R27)."""
        values = part.values
        if not values:
            return
        out, bound = self._ev_out, self._ev_bound
        if self.rules.delta_eviction_tracks_order and value < values[-1]:
            self._in_order = False
        if self._in_order or not self.rules.delta_eviction_tracks_order:
            if not out(value, values[0], bound):
                return
            scan_all = False
        else:
            if not any(out(value, v, bound) for v in values):
                return
            scan_all = True
        tuples = part.tuples
        listeners = self._listeners
        if not part.seen_full:
            part.seen_full = True
            if listeners:
                self._emit(INITIAL_FULL, part.key, tuples)
        batch = self.rules.batches_sliding_evictions
        evicted: list[T] = []
        if not scan_all:
            while values and out(value, values[0], bound):
                values.popleft()
                self._total -= 1
                if batch or not listeners:
                    evicted.append(tuples.popleft())
                else:
                    try:  # the tuple is in the window while its event runs, gone after it
                        self._emit(EVICTION, part.key, (tuples[0],))
                    finally:  # even if a listener raises: values and tuples stay paired
                        tuples.popleft()
        else:
            kept_t: list[T] = []
            kept_v: list[Any] = []
            for tup, v in zip(tuples, values, strict=True):
                if out(value, v, bound):
                    if listeners and not batch:
                        self._emit(EVICTION, part.key, (tup,))
                    evicted.append(tup)
                else:
                    kept_t.append(tup)
                    kept_v.append(v)
            tuples.clear()
            tuples.extend(kept_t)
            values.clear()
            values.extend(kept_v)
            self._total -= len(evicted)
        if evicted and listeners and batch:
            self._emit(EVICTION, part.key, evicted)

    def _evict_expired(self, part: Partition) -> None:
        """Time eviction: tuples in the window strictly more than T leave (spec R24)."""
        arrivals = part.arrivals
        limit = self._now - self._ev_ns
        if not arrivals or arrivals[0] >= limit:
            return
        tuples = part.tuples
        listeners = self._listeners
        evicted: list[T] = []
        batch = self.rules.batches_sliding_evictions
        while arrivals and arrivals[0] < limit:
            arrivals.popleft()
            self._total -= 1
            if listeners and not batch:
                try:  # as in `_delta_evict`: arrivals and tuples stay paired if a listener raises
                    self._emit(EVICTION, part.key, (tuples[0],))
                finally:
                    tuples.popleft()
            else:
                evicted.append(tuples.popleft())
        if evicted and listeners:
            self._emit(EVICTION, part.key, evicted)
        if not tuples and not self.rules.keeps_emptied_partitions:
            self._drop_emptied(part)

    # ---------------------------------------------------------- punctuation

    def punctuate(self, kind: str) -> None:
        """A punctuation mark reaches the window: ``"window"`` or ``"final"``."""
        if kind == "window":
            self.window_mark()
        elif kind == "final":
            self.final_mark()
        else:
            raise ValueError(f"unknown punctuation {kind!r}; expected 'window' or 'final'")

    def window_mark(self) -> None:
        """A window mark: tumbles a ``punct()`` window; ignored by every other window (R37)."""
        if self._final or self._ev != _PUNCT:
            return
        if not self._active:
            self.activate()
        evictor = self._evictor
        if evictor is not None and evictor.checks_before_events:
            evictor.check(self)
        if self._java:
            for part in list(self._parts.values()):
                self._flush(part)
            return
        full = [p for p in self._parts.values() if p.tuples]
        if not full:
            if self._listeners:
                self._emit(EMPTY_WINDOW_PUNCT, None, _NO_TUPLES)
            return
        for part in full:
            self._flush(part)

    def final_mark(self) -> None:
        """Final punctuation (Java, spec R38): drain, stop every timer, FINAL per partition.

        The ``cpp`` flavor ignores it: C++ windows never see final marks.
        """
        if self._final or not self.rules.final_events:
            return
        if not self._active:
            self.activate()
        self.drain()
        self._timers.cancel_all()
        self._final = True
        self._install_insert()
        if self._listeners:
            for part in list(self._parts.values()):
                self._emit(FINAL, part.key, part.tuples)

    def drain(self) -> None:
        """Report evictions that are due but pending (Java's 1 ms re-check lag).

        ``cpp``: also suspend time-based activity until the next tuple (spec C14), as
        IBM's C++ window does in a consistent region.
        """
        if self._ev == _TIME and self._sliding:
            for part in list(self._parts.values()):
                self._evict_expired(part)
        self._suspend()

    def _suspend(self) -> None:
        if self.rules.suspends_time_until_insert and self.spec.uses_system_time:
            self._suspended = True
            self._install_insert()  # the generic insert resumes the window

    # ---------------------------------------------- checkpoint and restore

    def snapshot(self) -> dict[str, Any]:
        """The whole window state as plain data (msgpack-able if the tuples are)."""
        return window_state(self)

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        """Replace the state by a snapshot's, at this window's time (see `riverbed.windows._snapshot`).

        Into a window that was never activated, the window takes the
        snapshot's time and continues exactly where the snapshot was taken.
        Raises `SnapshotError` for a corrupt or foreign snapshot, leaving the
        window unchanged when the header is wrong.
        """
        restore_window(self, snapshot)

    def snapshot_partition(self, partition: Hashable | None = None) -> dict[str, Any] | None:
        """One partition's state as plain data, or None for an unknown key."""
        part = self._parts.get(partition)
        return partition_state(part) if part is not None else None

    def restore_partition(self, state: Mapping[str, Any]) -> None:
        """Put one partition's state (from `snapshot_partition`) back, replacing its key's."""
        restore_partition_state(self, state)

    def checkpoint(self) -> dict[str, Any]:
        """Drain (report pending evictions), then snapshot (spec C3, C4). Raises no other event."""
        self.drain()
        return self.snapshot()

    def reset(self, checkpoint: Mapping[str, Any] | None) -> None:
        """Reset to a checkpoint, or to the initial state with None; no event for the discarded
        contents (spec C5, C6)."""
        if checkpoint is None:
            self.reset_to_initial_state()
        else:
            self.restore(checkpoint)
        self._suspend()

    def reset_to_initial_state(self) -> None:
        """Discard everything without events; the window is as if just built and activated now.

        ``cpp``: the window-wide timer keeps its phase (IBM's C++ reset leaves the
        window thread's schedule alone) and stays suspended until the next tuple (C14).
        """
        now, last_tick, was_active = self._now, self._window_last_tick, self._active
        self._reset_state()
        self._now = now
        self.activate()
        tick = self._window_tick
        if not self._java and was_active and tick is not None:
            tick.cancel()
            due = last_tick + self._tick_ns
            while due <= now:
                due += self._tick_ns
            self._window_last_tick = due - self._tick_ns
            self._arm_window_tick(due)

    def _rearm_after_restore(self) -> None:
        for part in list(self._parts.values()):
            self._rearm_partition(part)
        if not self._java and ((self._ev == _TIME and not self._sliding) or self._tr == _TIME):
            period = self._tr_ns if self._sliding else self._ev_ns
            due = self._window_last_tick + period
            while due <= self._now:  # C++ skips the ticks it missed and keeps its phase
                due += period
            self._arm_window_tick(due)

    def _rearm_partition(self, part: Partition) -> None:
        if self._ev == _TIME and self._sliding:
            self._evict_expired(part)
            if part.arrivals and part.key in self._parts:
                self._arm_evict(part)
        if not self._java:
            return
        period = self._tr_ns if self._sliding else (self._ev_ns if self._ev == _TIME else 0)
        if period and part.key in self._parts:
            due = part.last_tick + period
            if due <= self._now:
                self._on_tick(part)  # overdue: fires at once, then every period from now (C7)
            else:
                self._arm_tick(part, due)
