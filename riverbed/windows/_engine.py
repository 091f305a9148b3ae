"""The window engine: how a tumbling or sliding window inserts, evicts, triggers and ticks.

`WindowEngine` is the logic behind every `StreamWindow`: it works on the
window's frozen `WindowConfig` and its `WindowState`, and raises events to the
window's `ListenerRegistry`. It is generic over the policy axes (spec:
eviction x trigger x partition eviction) and over the flavor: each insertion
runs the same phases (delta trigger, pre-insert eviction, insertion,
post-insert checks), each phase doing what the configured policies ask for.
Where the Java and C++ runtimes differ the engine consults `FlavorRules`.

`_insert_generic` is the reference insertion. While the window is active and
open, `_install_insert` compiles faster insert functions for the common
configurations (``_fastpath.py``) that call back into the engine for their
rare cases.

Time is integer nanoseconds from an arbitrary origin chosen by the host.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from functools import partial
from heapq import heappop
from typing import Any, Generic, TypeVar

from ._config import COUNT, DELTA, TIME, WindowConfig
from ._errors import WindowStateError
from ._events import EventType, StreamWindowEvent
from ._fastpath import EngineHooks, compile_inserters
from ._listeners import Handler, ListenerRegistry, Partitioner
from ._partition import Partition
from ._state import TimerStep, WindowState, new_partition
from ._timers import Entry, Timer, TimerQueue
from ._trigger_runs import TriggerRun, run_inserter

__all__ = ["WindowEngine"]

T = TypeVar("T")

INSERTION = EventType.INSERTION
EVICTION = EventType.EVICTION
TRIGGER = EventType.TRIGGER
INITIAL_FULL = EventType.INITIAL_FULL
PARTITION_EVICTION = EventType.PARTITION_EVICTION

NO_TUPLES: tuple[Any, ...] = ()


class WindowEngine(Generic[T]):
    """The insertion, eviction, trigger and timer logic of a `StreamWindow` (its base class).

    Fields, grouped by what survives a checkpoint:

    * configuration: ``_config`` (frozen);
    * state a snapshot stores: ``_state``, replaced whole by a restore or reset;
    * state derived from those and never stored: the timers (``_timers``; ``_heap`` and
      ``_lane`` are its containers, read by the hot loop of `advance_time`), the
      window-wide C++ timer (``_window_tick``), ``_single`` (an unpartitioned window's
      partition), ``_suspended`` (C14: a C++ window's time stands still until the next
      tuple), the insert functions in use (``_insert``, ``_insert_tuples``, with ``_live``,
      the flag that retires them), ``batch_failed_at``;
    * wiring a host sets up: the listeners (``_events``; ``_handlers`` and ``_listeners``
      are its per-type lists and its gate, read on every event) and the partitioner.
    """

    _config: WindowConfig
    _state: WindowState
    _timers: TimerQueue
    _heap: list[Entry]
    _lane: Any
    _window_tick: Timer | None
    _single: Partition | None
    _suspended: bool
    _lazy: bool
    _epoch: int
    _dropped_evicted: dict[Hashable, int]
    _tied: list[int]
    _live: list[bool]
    _insert: Callable[[T], None]
    _insert_tuples: Callable[[Sequence[T]], None]
    batch_failed_at: int
    _events: ListenerRegistry
    _handlers: dict[EventType, list[Handler]]
    _listeners: list[Handler]
    _insertion_listeners: list[Handler]
    _partitioner: Partitioner[T]
    _trigger_run: tuple[TriggerRun, Handler] | None

    def _init_engine(self, config: WindowConfig, partitioner: Partitioner[T]) -> None:
        self._config = config
        self._events = ListenerRegistry("tumbling or sliding", frozenset(EventType) - {EventType.CLOSE})
        self._handlers = self._events.handlers
        self._listeners = self._events.gate  # every listener of some type other than INSERTION
        self._insertion_listeners = self._handlers[INSERTION]
        self._insertion_failed: BaseException | None = None
        self._partitioner = partitioner
        self._timers = TimerQueue()
        # The same containers for the window's life (cancel_all clears them in place).
        self._heap = self._timers.heap
        self._lane = self._timers.lane
        self._live = [True]
        self.batch_failed_at = 0
        self._trigger_run = None  # (run, its TRIGGER handler): `StreamWindow.register_trigger_run`
        # Lazy time eviction (see `_settle`): while nothing listens for EVICTION, a C++ sliding
        # time window with a time trigger arms no eviction timer; what is due leaves at the next
        # tick or observation instead, which nothing can tell apart from eviction on time.
        self._lazy = (not config.java and config.sliding and config.ev == TIME
                      and config.tr == TIME and config.evictor is None)
        self._epoch = 0
        self._dropped_evicted = {}
        self._tied = [-1]  # the last time whose arrivals `_check_tie` found tie-free
        self._set_state(WindowState.initial(config))

    def _set_state(self, state: WindowState) -> None:
        """Make ``state`` the window's, with no timer armed (the caller arms what it needs)."""
        self._timers.cancel_all()
        self._state = state
        # A partition's `evicted_count` starts from a base no earlier partition of its key
        # had, so a listener's mirror of the old contents can never look current.
        self._dropped_evicted.clear()
        epoch = self._next_epoch()
        for part in state.parts.values():
            part.evicted = epoch
        self._suspended = False
        self._window_tick = None
        self._tied[0] = -1  # (a new tick phase: arrivals look again)
        self._single = None if self._config.spec.partitioned else state.parts[None]
        self._install_insert()

    def _next_epoch(self) -> int:
        self._epoch += 1 << 48
        return self._epoch

    # --------------------------------------------------------------- events

    def _emit(self, etype: EventType, key: Hashable | None, tuples: Sequence[T]) -> None:
        handlers = self._handlers[etype]
        if handlers:
            event = StreamWindowEvent(self, etype, key, tuples)  # type: ignore[arg-type]
            for handle in handlers:
                handle(event)

    def _emit_insertion(self, key: Hashable | None, t: T) -> None:
        """INSERTION of ``t``. A listener's error waits until the insertion's policy is done
        (`_insert_generic` raises it): a tumble or a trigger count skipped would leave the
        window past its size, never to tumble again."""
        event = StreamWindowEvent(self, INSERTION, key, (t,))  # type: ignore[arg-type]
        try:
            for handle in self._insertion_listeners:
                handle(event)
        except BaseException as exc:
            if self._insertion_failed is None:
                self._insertion_failed = exc

    # ------------------------------------------------------------ lifecycle

    def activate(self, now: int | None = None) -> None:
        """The port is ready: start the window's timers (at ``now``, default the window's time).

        Java flavor, unpartitioned: the single partition starts its periodic
        timers and a time-evicting window raises its INITIAL_FULL (empty).
        """
        state = self._state
        if state.active:
            return
        if now is not None:
            self._check_time(now)
            state.now = now
        state.active = True
        config = self._config
        if config.evictor is not None:
            state.age_last_tick = state.now
            config.evictor.start(state, self._timers, self._evict_partition)
        if config.java:
            if self._single is not None:
                self._activate_partition(self._single)
        elif config.periodic_window_tick:
            state.window_last_tick = state.now
            self._arm_window_tick(state.now + config.tick_ns)
        self._install_insert()

    def _check_time(self, now: int) -> None:
        if not isinstance(now, int) or isinstance(now, bool):
            raise WindowStateError(f"time must be integer nanoseconds, got {now!r}")
        if now < self._state.now:
            raise WindowStateError(f"time cannot go backwards: the window is at {self._state.now} ns, "
                                   f"asked to move to {now} ns")

    def advance_time(self, now: int) -> None:
        """Move the window's clock to ``now`` (ns), firing every timer due at or before it.

        Each timer fires at its own due time, in time order (ties: arming order).
        """
        state = self._state
        if now.__class__ is not int or now < state.now:
            self._check_time(now)  # raises, or accepts an int subclass
        if not state.active:
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
                self._state.now = due  # (a listener may have restored another state meanwhile)
                timer.action()
        self._state.now = now

    def next_deadline(self) -> int | None:
        """When the next timer is due (ns), so a host knows when to call `advance_time`."""
        return self._timers.next_due()

    # -------------------------------------------------------- insert paths

    def _install_insert(self) -> None:
        """Choose the insert functions: compiled ones while active and open, else the generic."""
        self._live[0] = False  # functions compiled before hand over to the new ones
        self._live = live = [True]
        state, config = self._state, self._config
        compiled = None
        if state.active and not state.final and not self._suspended and config.fast_paths:
            hooks = EngineHooks(self._insert_generic, self._flush, self._arm_evict, self._evict_expired,
                                self._delta_evict, self._check_tie, self._tied)
            compiled = compile_inserters(self, config, state, key_of=self._partitioner.key_of,
                                         listeners=self._events, live=live, hooks=hooks,
                                         lazy=self._lazy, key_attr=self._partitioner.attribute)
        if compiled is None:
            self._insert, self._insert_tuples = self._insert_generic, self._insert_each
        else:
            self._insert, self._insert_tuples = compiled
            if self._trigger_run is not None and self._runs_triggers():
                run, trigger = self._trigger_run
                self._insert_tuples = run_inserter(compiled[1], parts=state.parts,
                                                   handlers=self._handlers, run=run, trigger=trigger,
                                                   size=config.ev_n, live=live)

    def _runs_triggers(self) -> bool:
        """The window can offer its batches to a trigger run (`_trigger_runs`): sliding,
        count(N) eviction, count(1) trigger, unpartitioned, without partition eviction."""
        config = self._config
        return (config.sliding and config.ev == COUNT and config.tr == COUNT and config.tr_n == 1
                and not config.spec.partitioned and config.evictor is None)

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

    # ------------------------------------------------------------ insertion

    def _insert_generic(self, t: T) -> None:
        state, config = self._state, self._config
        if state.final:
            raise WindowStateError("the window received final punctuation; no tuple may follow")
        # Everything that can reject the tuple comes first: a refused tuple changes nothing.
        ev_val = config.ev_read(t) if config.ev_read is not None else None
        tr_val = config.tr_read(t) if config.tr_read is not None else None
        key = self._partitioner.key(t) if self._single is None else None
        if self._suspended:  # C14: the first tuple after a drain or reset resumes time
            self._suspended = False
            self._install_insert()
        if not state.active:
            self.activate()
        if self._lazy and state.now != self._tied[0]:
            self._check_tie()
        rules = config.rules
        if not config.sliding and config.ev == COUNT and config.ev_n == 0 and rules.count_zero_keeps_nothing:
            return
        evictor = config.evictor
        single = self._single
        if single is not None:
            part = single
        else:
            if evictor is not None and evictor.checks_before_events:
                evictor.check(state, self._evict_partition)
            found = state.parts.get(key)
            if (found is not None and self._lazy and found.arrivals
                    and found.arrivals[-1] < state.now - config.ev_ns
                    and not rules.keeps_emptied_partitions):
                self._settle(found)  # C++ dropped it when its last tuple left: a new partition
                found = state.parts.get(key)
            part = found if found is not None else self._new_partition(key)
        needed = False
        if evictor is not None:
            if evictor.needs_before_insert:
                needed = evictor.before_insert(state)
            lru = state.lru
            if part.key in lru:
                lru.move_to_end(part.key)
            lru[part.key] = state.now // 1_000_000_000
        if config.sliding:
            self._insert_sliding(part, t, ev_val, tr_val)
        else:
            self._insert_tumbling(part, t, ev_val)
        if evictor is not None and not rules.partition_eviction_after_insertion:
            evictor.after_insert(state, self._evict_partition, needed)
        failed = self._insertion_failed
        if failed is not None:  # an INSERTION listener raised (`_emit_insertion`): now the step is done
            self._insertion_failed = None
            raise failed

    def _insert_tumbling(self, part: Partition, t: T, ev_val: Any) -> None:
        config = self._config
        if config.ev == DELTA:
            values = part.values
            if values and config.ev_out(ev_val, values[0], config.ev_bound):
                self._flush(part)  # spec R13: EVICTION before the arriving tuple's INSERTION
                values.clear()
            if not values:
                values.append(ev_val)
        part.tuples.append(t)
        self._state.total += 1
        if self._insertion_listeners:
            self._emit_insertion(part.key, t)
        evictor = config.evictor
        if config.rules.partition_eviction_after_insertion and evictor is not None:
            evictor.after_insert(self._state, self._evict_partition, False)
            if self._state.parts.get(part.key) is not part:
                return  # C++ skips the tumble of a partition it just evicted
        if config.ev == COUNT and len(part.tuples) == config.ev_n:
            self._flush(part)

    def _flush(self, part: Partition) -> None:
        """Tumble: EVICTION of all the partition's tuples (even none), then it is empty."""
        tuples = part.tuples
        part.tuples = []
        self._state.total -= len(tuples)
        if self._listeners:
            self._emit(EVICTION, part.key, tuples)
        config = self._config
        if not config.rules.keeps_emptied_partitions and config.ev != DELTA:
            self._drop_emptied(part)

    def _insert_sliding(self, part: Partition, t: T, ev_val: Any, tr_val: Any) -> None:
        config = self._config
        state = self._state
        listeners = self._listeners
        ev, tr = config.ev, config.tr
        tuples = part.tuples
        # 1. A delta trigger fires before the arriving tuple is processed (spec R32, R34).
        if tr == DELTA:
            self._delta_trigger(part, tr_val)
        # 2. Eviction made necessary by the arrival.
        keep = True
        if ev == COUNT:
            n = config.ev_n
            if n == 0:
                keep = False  # C++ count(0): nothing is kept, the trigger still counts
            elif len(tuples) >= n:
                old = tuples.popleft()
                part.evicted += 1
                state.total -= 1
                if listeners:
                    self._emit(EVICTION, part.key, (old,))
        elif ev == DELTA:
            self._delta_evict(part, ev_val)
        elif not part.seen_full:  # time eviction, C++: INITIAL_FULL before the first insertion
            part.seen_full = True
            if listeners:
                self._emit(INITIAL_FULL, part.key, tuples)
        # 3. The insertion.
        if keep:
            tuples.append(t)
            state.total += 1
            if ev == DELTA:
                part.values.append(ev_val)
            elif ev == TIME:
                part.arrivals.append(state.now)
                if part.evict_timer is None and not self._lazy:
                    self._arm_evict(part)
            if self._insertion_listeners:
                self._emit_insertion(part.key, t)
        evictor = config.evictor
        if config.rules.partition_eviction_after_insertion and evictor is not None:
            evictor.after_insert(state, self._evict_partition, False)
        # 4. A count eviction is initially full when it first holds N tuples.
        if ev == COUNT and keep and not part.seen_full and len(tuples) == config.ev_n:
            part.seen_full = True
            if listeners:
                self._emit(INITIAL_FULL, part.key, tuples)
        # 5. Count trigger.
        if tr == COUNT:
            part.trigger_count += 1
            if part.trigger_count >= config.tr_n:
                part.trigger_count = 0
                if ev == TIME and config.java:
                    self._evict_expired(part)
                self._emit_trigger(part)

    def _emit_trigger(self, part: Partition) -> None:
        handlers = self._handlers[TRIGGER]
        if handlers:
            # A sliding partition's TRIGGER event is built once (as on the fast paths): its
            # fields are the same at every trigger; a tumbling one's tuples change.
            event = part.trigger_event
            if event is None or event.tuples is not part.tuples:
                event = StreamWindowEvent(self, TRIGGER, part.key, part.tuples)  # type: ignore[arg-type]
                part.trigger_event = event
            for handle in handlers:
                handle(event)

    def _delta_trigger(self, part: Partition, value: Any) -> None:
        config, state = self._config, self._state
        shared = config.rules.shared_delta_trigger
        has_ref = state.shared_has_ref if shared else part.has_delta_ref
        if has_ref:
            ref = state.shared_ref if shared else part.delta_ref
            if not config.tr_out(value, ref, config.tr_bound):
                return
            if config.ev == TIME and config.java:
                self._evict_expired(part)
            self._emit_trigger(part)
        if shared:
            state.shared_ref = value
            state.shared_has_ref = True
        else:
            part.delta_ref = value
            part.has_delta_ref = True

    def _delta_evict(self, part: Partition, value: Any) -> None:
        """Sliding delta eviction (spec R26, R27)."""
        values = part.values
        if not values:
            return
        config, state = self._config, self._state
        out, bound = config.ev_out, config.ev_bound
        tracks_order = config.rules.delta_eviction_tracks_order
        if tracks_order and value < values[-1]:
            state.in_order = False
        if state.in_order or not tracks_order:
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
        batch = config.rules.batches_sliding_evictions
        evicted: list[T] = []
        if not scan_all:
            while values and out(value, values[0], bound):
                values.popleft()
                state.total -= 1
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
            state.total -= len(evicted)
        if evicted and listeners and batch:
            self._emit(EVICTION, part.key, evicted)

    def _evict_expired(self, part: Partition) -> None:
        """Time eviction: tuples in the window strictly more than T leave (spec R24)."""
        arrivals = part.arrivals
        config, state = self._config, self._state
        limit = state.now - config.ev_ns
        if not arrivals or arrivals[0] >= limit:
            return
        tuples = part.tuples
        listeners = self._handlers[EVICTION]
        if not listeners:
            n = 0
            while arrivals and arrivals[0] < limit:
                arrivals.popleft()
                tuples.popleft()
                n += 1
            state.total -= n
            part.evicted += n
            if not tuples and not config.rules.keeps_emptied_partitions:
                self._drop_emptied(part)
            return
        evicted: list[T] = []
        batch = config.rules.batches_sliding_evictions
        while arrivals and arrivals[0] < limit:
            arrivals.popleft()
            state.total -= 1
            part.evicted += 1
            if not batch:
                try:  # as in `_delta_evict`: arrivals and tuples stay paired if a listener raises
                    self._emit(EVICTION, part.key, (tuples[0],))
                finally:
                    tuples.popleft()
            else:
                evicted.append(tuples.popleft())
        if evicted:
            self._emit(EVICTION, part.key, evicted)
        if not tuples and not config.rules.keeps_emptied_partitions:
            self._drop_emptied(part)

    # ----------------------------------------------------------- partitions

    def _activate_partition(self, part: Partition) -> None:
        """Java: a partition starts its own timers when created (spec R11, R31, R36)."""
        config, state = self._config, self._state
        if config.ev == TIME and config.sliding:
            part.seen_full = True
            if self._listeners:
                self._emit(INITIAL_FULL, part.key, NO_TUPLES)
        period = config.tick_ns
        if period:
            part.last_tick = state.now
            self._arm_tick(part, state.now + period)

    def _new_partition(self, key: Hashable) -> Partition:
        part = new_partition(self._config, key)
        evicted = self._dropped_evicted.pop(key, None)  # C++: the key's count goes on
        part.evicted = self._next_epoch() if evicted is None else evicted
        state = self._state
        state.parts[key] = part
        if self._config.java:
            self._activate_partition(part)
        else:
            remembered = state.memory.pop(key, None)
            if remembered is not None:
                part.seen_full, part.trigger_count, part.delta_ref, part.has_delta_ref = remembered
        return part

    def _evict_partition(self, key: Hashable) -> None:
        """Partition eviction: PARTITION_EVICTION with its tuples, then it is gone."""
        state = self._state
        part = state.parts.pop(key, None)
        state.lru.pop(key, None)
        state.memory.pop(key, None)
        self._dropped_evicted.pop(key, None)
        if part is None:
            return
        part.cancel_timers()
        state.total -= len(part.tuples)
        if self._listeners:
            self._emit(PARTITION_EVICTION, key, part.tuples)

    def _drop_emptied(self, part: Partition) -> None:
        """C++ drops a partition emptied by a tumble or time eviction, silently (spec R9, R25)."""
        key = part.key
        state = self._state
        if self._single is not None or state.parts.get(key) is not part:
            return
        del state.parts[key]
        state.lru.pop(key, None)
        part.cancel_timers()
        if self._config.sliding:
            state.memory[key] = (part.seen_full, part.trigger_count, part.delta_ref, part.has_delta_ref)
            self._dropped_evicted[key] = part.evicted

    # --------------------------------------------------------------- timers

    def _arm_tick(self, part: Partition, due: int) -> None:
        timer = part.tick_timer
        if timer is not None and not timer.alive:  # fired (or cancelled): reuse it
            self._timers.rearm(timer, due)
        else:
            part.tick_timer = self._timers.arm(due, partial(self._on_tick, part))

    def _on_tick(self, part: Partition) -> None:
        config = self._config
        now = self._state.now
        part.last_tick = now
        timer = part.tick_timer
        if timer is not None and not timer.alive:  # `_arm_tick`, inlined: reuse the timer that fired
            self._timers.rearm(timer, now + config.tick_ns)
        else:
            self._arm_tick(part, now + config.tick_ns)
        if config.sliding:
            if config.ev == TIME:
                self._evict_expired(part)
            self._emit_trigger(part)
        elif self._listeners or not config.rules.keeps_emptied_partitions:
            self._flush(part)
        else:  # `_flush` without events or partition drop, inlined
            self._state.total -= len(part.tuples)
            part.tuples = []

    def _arm_window_tick(self, due: int) -> None:
        self._window_tick = self._timers.arm(due, self._on_window_tick)

    def _on_window_tick(self) -> None:
        """C++: one timer for the whole window (spec R11, R31)."""
        config, state = self._config, self._state
        state.window_last_tick = state.now
        self._arm_window_tick(state.now + config.tick_ns)
        if self._suspended:
            return  # C14: a suspended window thread skips the tick, keeping its phase
        evictor = config.evictor
        if evictor is not None and evictor.checks_before_events:
            evictor.check(state, self._evict_partition)
        if self._lazy:
            self._settle_all()
        if self._single is not None:
            if config.sliding:
                self._emit_trigger(self._single)
            else:
                self._flush(self._single)
            return
        if config.sliding:
            parts = list(state.parts.values())
            if not parts:
                if self._listeners:
                    self._emit(TRIGGER, config.default_partition, NO_TUPLES)
                return
            for part in parts:
                self._emit_trigger(part)
        else:
            full = [p for p in state.parts.values() if p.tuples]
            if not full:
                if self._listeners:
                    self._emit(EVICTION, config.default_partition, NO_TUPLES)
                return
            for part in full:
                self._flush(part)

    def _arm_evict(self, part: Partition) -> None:
        due = part.arrivals[0] + self._config.evict_after
        if part.evict_at is not None:  # restored: the timer it had (`Partition.evict_at`)
            due, part.evict_at = part.evict_at, None
        timer = part.idle_evict_timer
        if timer is None:
            part.evict_timer = self._timers.arm(due, partial(self._on_evict_timer, part))
        else:
            part.idle_evict_timer = None
            self._timers.rearm(timer, due)
            part.evict_timer = timer

    def _on_evict_timer(self, part: Partition) -> None:
        config, state = self._config, self._state
        timer = part.evict_timer
        part.evict_timer = None
        if self._suspended:  # C14: evict nothing now; poll again one period later
            poll = state.now + config.ev_ns
            if timer is not None:
                self._timers.rearm(timer, poll)
                part.evict_timer = timer
            else:
                part.evict_timer = self._timers.arm(poll, partial(self._on_evict_timer, part))
            return
        arrivals = part.arrivals
        self._evict_expired(part)
        if part.evict_timer is None:  # (else a listener's insertion armed one)
            if not arrivals or part.key not in self._state.parts:
                part.idle_evict_timer = timer  # for `_arm_evict` to reuse
            elif timer is not None:  # `_arm_evict`, inlined: arm the timer that fired again
                self._timers.rearm(timer, arrivals[0] + config.evict_after)
                part.evict_timer = timer
            else:
                self._arm_evict(part)

    # ------------------------------------------------------ after a restore

    def _rearm_after_restore(self, order: list[TimerStep] | None = None, *,
                             same_instant: bool = False) -> None:
        """Arm the restored state's timers (firing at once what fell due in between, C7), in
        ``order``: the snapshot's arming order, so that timers due at one instant fire as they
        would have without the restart (`_timer_order`). What it does not list (a snapshot
        written before it, a timer only the restore arms) follows in partition order."""
        config, state = self._config, self._state
        tick_due = None
        if not config.java and config.periodic_window_tick:
            period = config.tick_ns
            tick_due = state.window_last_tick + period
            while tick_due <= state.now:  # C++ skips the ticks it missed and keeps its phase
                tick_due += period
            if self._lazy:  # restored arrivals were never looked at for ties (`_check_tie`)
                lag = config.evict_after - tick_due
                if any((a + lag) % period == 0 for part in state.parts.values()
                       for a in part.arrivals if a + lag >= 0):
                    self._lazy = False  # (before anything is armed: timers as on time)
                    self._install_insert()
        parts = list(state.parts.values())
        steps: list[TimerStep] = [("age", 0)] if config.evictor is not None else []
        for i in range(len(parts)):
            steps += (("evict", i), ("tick", i))
        if tick_due is not None:
            steps.append(("window", 0))
        if order:
            rank = {step: r for r, step in enumerate(order)}
            steps.sort(key=lambda step: rank.get(step, len(rank)))  # stable: the rest keep theirs
        for kind, i in steps:
            if kind == "evict":
                self._rearm_eviction(parts[i], same_instant=same_instant)
            elif kind == "tick":
                self._rearm_tick(parts[i])
            elif kind == "window":
                assert tick_due is not None
                self._arm_window_tick(tick_due)
            else:
                assert config.evictor is not None
                config.evictor.start(state, self._timers, self._evict_partition)

    def _timer_order(self) -> list[TimerStep]:
        """The live timers in the order they were armed (which breaks ties between timers due at
        one instant), for a snapshot; partitions by their place in ``parts``."""
        state = self._state
        armed: list[tuple[int, TimerStep]] = []
        for timer, step in ((state.age_timer, ("age", 0)), (self._window_tick, ("window", 0))):
            if timer is not None and timer.alive:
                armed.append((timer.seq, step))
        for i, part in enumerate(state.parts.values()):
            timer = part.evict_timer
            if timer is not None and timer.alive:
                armed.append((timer.seq, ("evict", i)))
            timer = part.tick_timer
            if timer is not None and timer.alive:
                armed.append((timer.seq, ("tick", i)))
        armed.sort()
        return [step for _, step in armed]

    def _rearm_partition(self, part: Partition) -> None:
        self._rearm_eviction(part)
        self._rearm_tick(part)

    def _rearm_eviction(self, part: Partition, *, same_instant: bool = False) -> None:
        """A restored partition's sliding time eviction: what is past due leaves (unless a
        deferred poll is kept), the rest is timed. At the snapshot's own instant nothing leaves
        at once: the timers left nothing due but what Java re-checks 1 ms after its deadline
        (R24), and that leaves when its timer fires, as it would have without the restore."""
        config, state = self._config, self._state
        if config.ev == TIME and config.sliding:
            # A poll the snapshot kept for later (C14: eviction was deferred while suspended)
            # evicts when it is due, as it would have without the restart; what is past due
            # leaves at once otherwise (C7).
            if not same_instant and part.evict_at is None:
                self._evict_expired(part)
            if part.arrivals and part.key in state.parts and not self._lazy:
                self._arm_evict(part)

    def _rearm_tick(self, part: Partition) -> None:
        """A restored Java partition's periodic trigger or tumble."""
        config, state = self._config, self._state
        if not config.java:
            return
        period = config.tick_ns
        if period and part.key in state.parts:
            due = part.last_tick + period
            if due <= state.now:
                self._on_tick(part)  # overdue: fires at once, then every period from now (C7)
            else:
                self._arm_tick(part, due)

    # ------------------------------------------------------ lazy time eviction

    def _settle(self, part: Partition) -> None:
        """Evict what the eviction timers would have evicted by now (lazy time eviction).

        A C++ window's timer fires at its front tuple's due time (T and 1 ns
        after its arrival) and evicts every tuple then more than T old, so at
        any time the window holds exactly the tuples at most T old: one
        eviction at ``now`` leaves what the timers would have left. (Java's
        1 ms re-check lag makes its timers a chain of steps that other
        evictions interleave with, so Java windows keep their timers.)
        Suspended time (C14) makes a window eager for good first.
        """
        arrivals = part.arrivals
        if arrivals and arrivals[0] < self._state.now - self._config.ev_ns:
            self._evict_expired(part)

    def _check_tie(self) -> None:
        """Evict on time from now on if a tuple arriving now would be due exactly at a tick.

        At a tick, lazy eviction first evicts everything due by then. On time, an
        eviction timer due at the very tick fires after it when it was armed after
        the tick was (ties go by arming order), which for a tuple arriving after the
        last tick it always is: the tick's TRIGGER still holds the tuple. Such a tie
        needs an arrival exactly T and 1 ns before a tick, which real timestamps
        almost never give; when it comes, timers decide it exactly (`_make_eager`)."""
        tick = self._window_tick
        if tick is None:
            return
        config = self._config
        now = self._state.now
        gap = now + config.evict_after - tick.due
        if gap >= 0 and gap % config.tick_ns == 0:
            self._make_eager()
        else:
            self._tied[0] = now

    def _settle_all(self) -> None:
        """`_settle` every partition (C++ drops those it empties)."""
        if self._lazy:
            limit = self._state.now - self._config.ev_ns
            evict = self._evict_expired
            for part in list(self._state.parts.values()):
                arrivals = part.arrivals
                if arrivals and arrivals[0] < limit:  # (`_settle`, inlined)
                    evict(part)

    def _settle_key(self, key: Hashable) -> None:
        if self._lazy:
            part = self._state.parts.get(key)
            if part is not None and part.arrivals:
                self._settle(part)

    def _make_eager(self) -> None:
        """From now on evict on time with timers (an EVICTION listener, or C++ time suspended)."""
        if not self._lazy:
            return
        self._settle_all()
        self._lazy = False
        for part in list(self._state.parts.values()):
            if part.arrivals and part.evict_timer is None:
                self._arm_evict(part)
        self._install_insert()
