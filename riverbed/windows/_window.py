"""`StreamWindow`: one window for every tumbling and sliding clause, as IBM's Java API has it.

A host (the asyncio runtime, the Spark bridge, the trace command, a test)
drives the window with a few calls: insert tuples (`inserter` gives the
function for a batch), `punctuate` a window or final mark, `advance_time` to
a new instant, `evict_partition`. The window answers by raising
`StreamWindowEvent`s to its listeners, synchronously, in IBM's order. It
never reads a clock and never blocks.

A window is its frozen configuration (`WindowConfig`, ``_config.py``), its
state (`WindowState`, ``_state.py``: exactly what `snapshot` stores and
`restore` reads back) and what is derived from them (timers, the compiled
insert functions); the logic that works on them is `WindowEngine`
(``_engine.py``), this class's base. This module is the host's side: the
public API, punctuation, checkpoints.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from ._config import PUNCT, TIME, Getter, WindowConfig
from ._engine import NO_TUPLES, WindowEngine
from ._errors import PunctuationError, WindowStateError
from ._events import EventType, Listener
from ._flavor import Flavor, FlavorRules
from ._listeners import ErrorHandler, Handler, Partitioner
from ._partition_eviction import PartitionAgeJava
from ._policy import Count, Delta, Punct, Time, WindowSpec, WindowType
from ._state import WindowState, decode, decode_partition, decode_timer_order, encode, encode_partition
from ._trigger_runs import TriggerRun

__all__ = ["StreamWindow"]

T = TypeVar("T")

EVICTION = EventType.EVICTION
FINAL = EventType.FINAL
EMPTY_WINDOW_PUNCT = EventType.EMPTY_WINDOW_PUNCT


class StreamWindow(WindowEngine[T]):
    """A windowed input port's window (IBM Java ``StreamWindow``), pure and synchronous.

    ``spec`` is a `WindowSpec` or SPL clause text. ``partition_by`` is the
    partition attribute's name or a function of the tuple (Java's
    ``Partitioner``); a partitioned spec needs one (or a
    `register_partitioner` before the first tuple). ``attribute_types`` maps
    attribute names to SPL types (``int32``, ``float64``, ``timestamp``, ...)
    for the delta policies; without it, delta values are compared as the
    Python numbers they are. ``getter`` builds attribute readers (default:
    ``tuple[name]``). ``default_partition`` is the key the ``cpp`` flavor's
    window-wide timers use when a tick finds no partition (SPL's default value
    of the key type). ``fast_paths=False`` keeps the window on its generic
    insert path, the reference its compiled paths are tested against.

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
        fast_paths: bool = True,
    ) -> None:
        getter_: Getter = getter
        config = WindowConfig.build(spec, flavor=flavor, attribute_types=attribute_types, getter=getter_,
                                    default_partition=default_partition, fast_paths=fast_paths)
        self._init_engine(config, Partitioner(config.spec.clause(), config.spec.partitioned, getter))
        if partition_by is not None:
            self.register_partitioner(partition_by)
        for listener in listeners:
            self.register_listener(listener)

    # ------------------------------------------------------------- Java API

    @property
    def config(self) -> WindowConfig:
        """The window's configuration: the clause, the flavor's rules and what derives from them."""
        return self._config

    @property
    def spec(self) -> WindowSpec:
        return self._config.spec

    @property
    def rules(self) -> FlavorRules:
        return self._config.rules

    @property
    def type(self) -> WindowType:
        return self._config.spec.type

    @property
    def eviction_policy(self) -> Count | Time | Delta | Punct:
        return self._config.spec.eviction

    @property
    def trigger_policy(self) -> Count | Time | Delta | None:
        return self._config.spec.trigger

    @property
    def flavor(self) -> Flavor:
        return self._config.rules.flavor

    @property
    def is_partitioned(self) -> bool:
        return self._config.spec.partitioned

    @property
    def now(self) -> int:
        """The window's current time in nanoseconds (the last `advance_time`)."""
        return self._state.now

    def register_listener(self, listener: Listener[T], types: Iterable[EventType] | None = None) -> None:
        """Add a listener: an object with ``handle_event(event)`` or a callable.

        ``types`` restricts it to some event types. A window raises one
        INSERTION per tuple; a listener that does not ask for them costs
        nothing per insertion, which is most of a window's event traffic.
        Misuse raises what `TimeIntervalWindow.register_listener` raises (see
        `riverbed.windows._listeners`).
        """
        self._events.register(listener, types)
        if self._handlers[EventType.EVICTION]:
            self._make_eager()  # evictions are seen: they happen on time

    def on_listener_error(self, handler: ErrorHandler | None,
                          before: Callable[[], Any] | None = None) -> None:
        """Let the window go on past a listener that raises: ``handler(event, exc, token)``
        is called instead (while the event is valid), ``token`` being what ``before()``
        returned just before that listener's call (None without ``before``), and the window
        carries on with the event's other listeners and the rest of its step, as if the
        listener had returned. A host whose operator routes failures (an error port) sets
        this, so a failure at EVICTION does not leave a tumble half done, and takes back the
        output the failed call had begun; None restores the default, where the exception
        leaves `insert` (or the mark, or the timer). Batched triggers (`register_trigger_run`)
        are not offered while a handler is set: a failure is per trigger."""
        self._events.set_error_handler(handler, before)

    def register_trigger_run(self, run: TriggerRun, trigger: Listener[T]) -> bool:
        """Offer batches to ``run``, a way to take many triggers at once, beside ``trigger``,
        the same listener's TRIGGER handler (registered with `register_listener`).

        A sliding ``count(N)``, ``count(1)`` window hands ``run`` each batch that arrives
        while it is full, unpartitioned, and listened to by ``trigger`` alone (INITIAL_FULL
        aside); ``run`` does the batch's triggers or refuses it, and a refused batch raises its
        events as always. The contract is in `riverbed.windows._trigger_runs`. Returns whether
        this window's policies can ever offer a run (False: ``run`` is never called).
        """
        handle: Handler = getattr(trigger, "handle_event", None) or trigger  # type: ignore[assignment]
        self._trigger_run = (run, handle)
        self._install_insert()
        return self._runs_triggers()

    def register_partitioner(self, partition_by: str | Callable[[T], Hashable]) -> None:
        """Set how a tuple's partition key is computed: an attribute name or a function.

        Only before the window has partitions (at construction, before the
        first tuple, or after a reset): `WindowStateError` afterwards.
        """
        has_partitions = self._config.spec.partitioned and bool(self._state.parts)
        self._partitioner.set(partition_by, has_partitions=has_partitions)
        self._install_insert()

    def partitions(self) -> list[Hashable]:
        """Partition keys; least recently inserted first when partition eviction is configured."""
        self._check_partitioned("partitions()")
        self._settle_all()
        state = self._state
        if self._config.evictor is not None:
            return [k for k in state.lru if k in state.parts]
        return list(state.parts)

    def contents(self, partition: Hashable | None = None) -> list[T]:
        """A copy of a partition's tuples, oldest first (empty for an unknown key)."""
        self._settle_key(partition)
        part = self._state.parts.get(partition)
        return list(part.tuples) if part is not None else []

    def evicted_count(self, partition: Hashable | None = None) -> int:
        """A count of the tuples count or time eviction has taken from a partition.

        Between two calls for the same key of a sliding window evicting by
        count or time, the difference is how many of its oldest tuples left,
        so a listener that mirrors the window's contents at its triggers can
        catch up without an EVICTION event per tuple (Aggregate does). Delta
        eviction is not counted (C++ evicts out of arrival order). The count has no
        meaning of its own: it starts from a large base that changes whenever
        the key's partition is replaced (a restore, a reset, a partition
        eviction, a first tuple), so a mirror of older contents always finds a
        difference that cannot be right; a C++ partition dropped when emptied
        and made again keeps its key's count. 0 for an unknown key.
        """
        part = self._state.parts.get(partition)
        if part is None:
            return 0
        arrivals = part.arrivals
        if self._lazy and arrivals and arrivals[0] < self._state.now - self._config.ev_ns:
            self._settle(part)  # (`_settle_key` inlined: Aggregate asks at every trigger)
            part = self._state.parts.get(partition)
            if part is None:
                return 0
        return part.evicted

    def evict_partition(self, partition: Hashable) -> None:
        """Evict one partition now: PARTITION_EVICTION with its tuples; unknown keys are ignored."""
        self._check_partitioned("evict_partition()")
        self._settle_key(partition)
        if partition in self._state.parts:
            self._evict_partition(partition)

    def needs_partition_eviction(self) -> bool:
        """True while a partitionCount/tupleCount limit is exceeded (False for partitionAge)."""
        self._check_partitioned("needs_partition_eviction()")
        evictor = self._config.evictor
        return evictor is not None and evictor.needs_eviction(self._state)

    def _check_partitioned(self, what: str) -> None:
        if not self._config.spec.partitioned:
            raise WindowStateError(f"{what} needs a partitioned window; '{self.spec.clause()}' is not")

    # ------------------------------------------------------------ insertion

    def inserter(self) -> Callable[[Sequence[T]], None]:
        """The function a host calls to insert a batch: the fastest this window has now.

        ``inserter()(batch)`` inserts the tuples of ``batch`` (a list or a
        tuple) in order, with the events and the state of `insert` on each
        one, all at the window's current time. If a tuple fails (it is
        invalid, or a listener raised), the error propagates and
        `batch_failed_at` is that tuple's index in ``batch``: the tuples before
        it are in, those after it were not looked at, so a host names the
        tuple, routes it or stops, and goes on with ``batch[i + 1:]``.

        The function is specialised for the window's configuration and
        current state; the window replaces it when its insert path changes:
        on `activate`, `final_mark`, `restore`, `restore_partition`, `reset`,
        `reset_to_initial_state`, `register_partitioner`, on `drain` and
        `checkpoint` (``cpp``: time is suspended until the next tuple), and by
        itself when the tuple after such a suspension resumes time. A function
        obtained before never runs on the old state: it hands its batch to
        the current one, so a host may keep it for the window's life. To keep
        the fastest path a host asks again after those calls (or before each
        batch: asking returns the same function until the path changes, and
        costs a method call).
        """
        return self._insert_tuples

    def tuple_inserter(self) -> Callable[[T], None]:
        """The function inserting one tuple: `insert` without the method call (about 40 ns).

        The same contract as `inserter` (ask again after the calls it lists;
        an old one hands its tuple to the current one), for hosts that insert
        one tuple at a time on a hot path.
        """
        return self._insert

    def insert(self, t: T) -> None:
        """A tuple arrives at the port: raise its events in IBM's order.

        Raises `WindowTupleError` without changing anything when the tuple lacks
        the partition or delta attribute or holds an invalid delta value.
        """
        self._insert(t)

    def insert_batch(self, tuples: Iterable[T]) -> None:
        """Insert many tuples; same events as inserting them one by one (an iterator is consumed
        one tuple at a time)."""
        if tuples.__class__ is list or tuples.__class__ is tuple:
            self._insert_tuples(tuples)
        else:
            self._insert_each(tuples)

    def insert_tuples(self, tuples: Sequence[T]) -> None:
        """Insert a host's batch: ``inserter()(tuples)`` (see `inserter` for ``batch_failed_at``)."""
        if tuples.__class__ is list or tuples.__class__ is tuple:
            self._insert_tuples(tuples)
        else:
            self._insert_each(tuples)

    # ---------------------------------------------------------- punctuation

    def punctuate(self, kind: str) -> None:
        """A punctuation mark reaches the window: ``"window"`` or ``"final"``."""
        if kind == "window":
            self.window_mark()
        elif kind == "final":
            self.final_mark()
        else:
            raise PunctuationError(kind)

    def window_mark(self) -> None:
        """A window mark: tumbles a ``punct()`` window; ignored by every other window (R37)."""
        config, state = self._config, self._state
        if state.final or config.ev != PUNCT:
            return
        if not state.active:
            self.activate()
        evictor = config.evictor
        if evictor is not None and evictor.checks_before_events:
            evictor.check(state, self._evict_partition)
        if config.java:
            for part in list(state.parts.values()):
                self._flush(part)
            return
        full = [p for p in state.parts.values() if p.tuples]
        if not full:
            if self._listeners:
                self._emit(EMPTY_WINDOW_PUNCT, None, NO_TUPLES)
            return
        for part in full:
            self._flush(part)

    def final_mark(self) -> None:
        """Final punctuation (Java, spec R38): drain, stop every timer, FINAL per partition.

        The ``cpp`` flavor ignores it: C++ windows never see final marks.
        """
        if self._state.final or not self._config.rules.final_events:
            return
        if not self._state.active:
            self.activate()
        self.drain()
        self._timers.cancel_all()
        state = self._state
        state.final = True
        self._install_insert()
        if self._listeners:
            for part in list(state.parts.values()):
                self._emit(FINAL, part.key, part.tuples)

    def drain(self) -> None:
        """Report evictions that are due but pending (Java's 1 ms re-check lag).

        ``cpp``: also suspend time-based activity until the next tuple (spec C14), as
        IBM's C++ window does in a consistent region.
        """
        config = self._config
        if config.ev == TIME and config.sliding:
            for part in list(self._state.parts.values()):
                self._evict_expired(part)
        self._suspend()

    def _suspend(self) -> None:
        config = self._config
        if config.rules.suspends_time_until_insert and config.spec.uses_system_time:
            self._make_eager()  # C14's polls of due evictions are timers' behaviour
            self._suspended = True
            self._install_insert()  # the generic insert resumes the window

    # ---------------------------------------------- checkpoint and restore

    def snapshot(self) -> dict[str, Any]:
        """The whole window state as plain data (msgpack-able if the tuples are).

        It is the window's `WindowState` as data (see `riverbed.windows._state`).
        """
        self._settle_all()
        return encode(self._config, self._state, self._timer_order(), suspended=self._suspended)

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        """Replace the state by a snapshot's, at this window's time (see `riverbed.windows._state`).

        Into a window that was never activated, the window takes the
        snapshot's time and continues exactly where the snapshot was taken.
        Raises `SnapshotError` for a corrupt or foreign snapshot, leaving the
        window unchanged.
        """
        current = self._state
        state = decode(self._config, snapshot, now=current.now, active=current.active)
        order = decode_timer_order(snapshot, len(state.parts))
        self._set_state(state)
        if state.final:
            return
        self._rearm_after_restore(order, same_instant=state.now == snapshot["now"])
        if snapshot.get("suspended") is True:  # (after: its timers are armed once, as they were)
            self._suspend()  # C14: a C++ window checkpointed stays still until its next tuple
        for part in state.parts.values():  # (a poll no timer took: a lazy window has none)
            part.evict_at = None

    def snapshot_partition(self, partition: Hashable | None = None) -> dict[str, Any] | None:
        """One partition's state as plain data, or None for an unknown key."""
        self._settle_key(partition)
        part = self._state.parts.get(partition)
        return encode_partition(part) if part is not None else None

    def restore_partition(self, state: Mapping[str, Any]) -> None:
        """Put one partition's state (from `snapshot_partition`) back, replacing its key's."""
        part = decode_partition(self._config, state)
        current = self._state
        old = current.parts.get(part.key)
        if old is not None:
            old.cancel_timers()
            current.total -= len(old.tuples)
        current.parts[part.key] = part
        if not self._config.spec.partitioned:
            self._single = part
        current.total += len(part.tuples)
        if self._config.evictor is not None:
            current.lru[part.key] = current.now // 1_000_000_000
        current.active = True
        self._install_insert()
        self._rearm_partition(part)

    def checkpoint(self) -> dict[str, Any]:
        """Drain (report pending evictions), then snapshot (spec C3, C4). Raises no other event."""
        self.drain()
        self._resume_age_check()
        return self.snapshot()

    def _resume_age_check(self) -> None:
        """Java partitionAge: IBM's drain cancels the age check, and the resume after a
        checkpoint or a reset starts it again, a period from then (`PartitionAgeEvictionHandler`:
        ``activatePartitions`` schedules it at a fixed period after the resume). The spec is
        silent; IBM's code decides. A restore alone keeps the snapshot's phase (a host's own
        snapshots, as a Spark key group's per batch, go on as if never taken)."""
        state = self._state
        if not isinstance(self._config.evictor, PartitionAgeJava) or not state.active or state.final:
            return
        if state.age_timer is not None:
            state.age_timer.cancel()
        state.age_last_tick = state.now
        self._config.evictor.start(state, self._timers, self._evict_partition)

    def reset(self, checkpoint: Mapping[str, Any] | None) -> None:
        """Reset to a checkpoint, or to the initial state with None; no event for the discarded
        contents (spec C5, C6)."""
        if checkpoint is None:
            self.reset_to_initial_state()
        else:
            self.restore(checkpoint)
            self._resume_age_check()
        self._suspend()

    def reset_to_initial_state(self) -> None:
        """Discard everything without events; the window is as if just built and activated now.

        ``cpp``: the window-wide timer keeps its phase (IBM's C++ reset leaves the
        window thread's schedule alone) and stays suspended until the next tuple (C14).
        """
        old = self._state
        now, last_tick, was_active = old.now, old.window_last_tick, old.active
        self._set_state(WindowState.initial(self._config))
        self._state.now = now
        self.activate()
        config = self._config
        tick = self._window_tick
        if not config.java and was_active and tick is not None:
            tick.cancel()
            due = last_tick + config.tick_ns
            while due <= now:
                due += config.tick_ns
            self._state.window_last_tick = due - config.tick_ns
            self._arm_window_tick(due)

