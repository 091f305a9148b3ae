"""SPL ``Join``: correlate two streams through two sliding windows (standard-operators.md section 2).

Each input port keeps a sliding window of recent tuples: the left (LHS, port
0) and the right (RHS, port 1). When a tuple arrives on one side, three things
happen, in this order (IBM's ``Join_cpp.cgt`` ``process``):

1. it is matched against the *current* contents of the other side's window
   (it never sees itself); one output tuple per match, in the other window's
   storage order: oldest tuple first within a partition, partitions in the
   order the operator first saw them (IBM iterates a hash map there, so any
   order is SPL's; this one is deterministic and survives a restore);
2. it is inserted into its own window, which may first evict that window's
   oldest tuple(s);
3. if at least one tuple went out on output port 0 during these two steps, a
   window mark follows on port 0: one batch per arriving tuple.

With ``equality_lhs``/``equality_rhs`` each side also keeps a hash index of
its window on the equality key, so an arriving tuple is compared only with the
tuples that share its key (then ``match`` filters those); without them every
tuple of the other window is tried.

Outer joins remember, per stored tuple, whether it ever matched. A tuple that
leaves its window without a match is output then: joined with the other side's
default tuple on port 0, or unchanged on its own port (1 for the left side,
2 for the right side of a 3-output ``outer``, 1 for a 2-output
``rightOuter``). Evictions caused by an arrival (count and delta windows)
belong to that arrival's batch; time evictions happen on their own, between
arrivals, and get no window mark (also when the ``java`` flavor's window
carries one out while it handles an arrival: it does so after that arrival's
INSERTION, so after its mark).

How this maps onto riverbed: the runtime owns the windows and inserts each
arriving tuple itself; the operator follows through the window events. It
keeps a mirror of each window (plus the match flags) in arrival order, updated
on INSERTION and EVICTION. The window raises the EVICTION that an arrival
causes *before* that arrival's INSERTION, and nothing happens to the other
side's window in between, so matching on the INSERTION event against the other
side's mirror is exactly "match, then insert"; the unmatched tuples that the
eviction released are held back and submitted after the matches, as in SPL.

A ``count(0)`` side keeps nothing: it is a pure lookup side. The runtime's
windows cannot express that (the ``java`` flavor rejects ``count(0)``, the
``cpp`` flavor never shows the operator the tuple), so a lookup side is an
input port connected *without* a window; its tuples arrive through
``on_tuple``, are matched, and (outer joins) go out unmatched at once.

Checkpoints: the runtime persists the windows; the operator's own state is the
match flags, stored per partition by position (oldest tuple = 0), since a
window holds the tuples themselves, with nothing beside them. The runtime calls
`Join.restore` *before* it restores the windows, so the mirrors are rebuilt
from the restored windows at the first event that needs them; a time window
restored late evicts its overdue tuples while it is being restored, before
that, and those evictions consume the flags from the front (the evicted are
always the oldest).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

from ..graph import Operator, PortLayout, Punct, Schema, WindowPunctuationMode
from ..windows import (
    EventType,
    StreamWindow,
    StreamWindowEvent,
    Time,
    TimeIntervalSpec,
    WindowSpec,
)
from ._join_fast import arrival_handler, counts_own_evictions, eviction_handler
from ._join_parts import (
    Entry,
    _equality,
    _key_attribute,
    _key_in,
    _key_out,
    _output_function,
    _port_counts,
    _Side,
    window_problem,
)
from ._params import OperatorParameterError, spl_aliases
from ._utility_support import (
    attribute_problems,
    declared_output,
    every_event,
    freeze_key,
    fresh,
    spl_default,
)

__all__ = ["Join", "JoinStateError"]

INSERTION = EventType.INSERTION
EVICTION = EventType.EVICTION
PARTITION_EVICTION = EventType.PARTITION_EVICTION

FORMAT = "riverbed.join/1"

_ALGORITHMS = {
    "inner": "inner",
    "leftOuter": "leftOuter", "left_outer": "leftOuter",
    "rightOuter": "rightOuter", "right_outer": "rightOuter",
    "outer": "outer",
}
# SPL spellings that the generic camelCase -> snake_case rule would mangle (LHS -> l_h_s).
_SPL_SPELLINGS = {
    "equalityLHS": "equality_lhs", "equalityRHS": "equality_rhs",
    "defaultTupleLHS": "default_tuple_lhs", "defaultTupleRHS": "default_tuple_rhs",
}
_ON_THE_PORT = {"partitionByLHS": "left", "partitionByRHS": "right",
                "partition_by_lhs": "left", "partition_by_rhs": "right"}
_KNOWN = frozenset({"match", "equality_lhs", "equality_rhs", "algorithm", "default_tuple_lhs",
                    "default_tuple_rhs", "output"})
_SIDE_NAMES = ("left (port 0)", "right (port 1)")

Expression = str | Callable[[Any], Any]


class JoinStateError(ValueError):
    """A Join checkpoint does not fit the operator or the windows it is restored with."""


class Join(Operator):
    """SPL ``Join`` of the tuples on input port 0 (left) with those on input port 1 (right).

    Windows: each port ``sliding`` with ``count(N)`` (N >= 1), ``delta(attr, D)``
    or ``time(T)`` eviction and a ``count(1)`` trigger (the default), optionally
    ``partitioned`` (with ``partition_by`` on the port, which is SPL's
    ``partitionByLHS``/``partitionByRHS``) and with a partition eviction policy.
    A port connected without a window is SPL's ``count(0)``: a lookup side
    that keeps nothing. Anything else is refused at set-up.

    Parameters (SPL spellings ``equalityLHS``, ``defaultTupleRHS``... work too):

    - ``match``: ``(lhs, rhs) -> bool``; default: every pair matches.
    - ``equality_lhs`` / ``equality_rhs``: the equality keys, each an attribute
      name, a function of the tuple, or a sequence of those (same length on
      both sides); pairs match only if the keys are equal *and* ``match`` holds.
      Key values must be hashable.
    - ``algorithm``: ``"inner"`` (default), ``"leftOuter"``, ``"rightOuter"``,
      ``"outer"`` (or ``"left_outer"``, ``"right_outer"``).
    - ``default_tuple_lhs`` / ``default_tuple_rhs``: the other side's stand-in
      when an unmatched tuple is joined on port 0 (single-output outer joins
      only; default ``{}``, since without a schema there are no typed defaults).
    - ``output``: how a pair becomes an output tuple. ``None`` (default): the
      attributes of both, the left one winning a name clash (SPL auto-assignment
      looks for an attribute on port 0 first, then port 1), the left's first. A mapping: those
      attributes assigned (each a ``(lhs, rhs) -> value`` function or a
      constant) on top of that merge. A function ``(lhs, rhs) -> dict``: the
      whole output tuple.

    Output ports: 1 for ``inner``; 1 or 2 for ``leftOuter``/``rightOuter`` (port
    1 takes the unmatched tuples of the outer side, unchanged); 1 or 3 for
    ``outer`` (port 1 unmatched left tuples, port 2 unmatched right ones).

    Punctuation ("generating"): a window mark on port 0 after each arrival that
    produced output on port 0 (matches, and unmatched tuples evicted by that
    arrival from a count or delta window); unmatched tuples leaving a time window
    go out between arrivals, without a mark; ports 1 and 2 never get marks.
    Incoming window marks are ignored. Final punctuation does not flush the
    unmatched tuples still in the windows; the runtime forwards it. A partition
    removed by a partition eviction policy is dropped silently, as in SPL.

    Checkpoints: the windows persist themselves; `snapshot` holds the match flags
    of each partition by position (oldest first), which `restore` re-attaches
    to the restored windows' tuples.
    """

    window_punctuation: ClassVar[WindowPunctuationMode] = "generating"
    windows_hear_final: ClassVar[bool] = False  # time evicts until the Join ends (C++ windows)
    # INSERTION and EVICTION come straight from the windows (`setup` registers the listeners).
    window_events: ClassVar[frozenset[EventType] | None] = frozenset({PARTITION_EVICTION})

    def __init__(self, *, match: Callable[[Any, Any], bool] | None = None,
                 equality_lhs: Expression | Sequence[Expression] | None = None,
                 equality_rhs: Expression | Sequence[Expression] | None = None,
                 algorithm: str = "inner", default_tuple_lhs: Mapping[str, Any] | None = None,
                 default_tuple_rhs: Mapping[str, Any] | None = None,
                 output: Callable[[Any, Any], Any] | Mapping[str, Any] | None = None,
                 **spl: Any) -> None:
        params: dict[str, Any] = {
            "match": match, "equality_lhs": equality_lhs, "equality_rhs": equality_rhs,
            "default_tuple_lhs": default_tuple_lhs, "default_tuple_rhs": default_tuple_rhs,
            "output": output,
        }
        rest: dict[str, Any] = {}
        for name, value in spl.items():
            if name in _ON_THE_PORT:
                side = _ON_THE_PORT[name]
                raise OperatorParameterError(
                    f"Join: {name} is declared on the input port in riverbed: "
                    f"{side}.window('sliding, count(100), partitioned', partition_by=...)")
            py = _SPL_SPELLINGS.get(name)
            if py is None:
                rest[name] = value
            elif params[py] is not None:
                raise OperatorParameterError(f"Join: parameter {py!r} given twice (as {name!r} too)")
            else:
                params[py] = value
        for py, value in spl_aliases("Join", rest, _KNOWN).items():
            if py == "algorithm":
                if algorithm != "inner":
                    raise OperatorParameterError("Join: parameter 'algorithm' given twice")
                algorithm = value
            elif params[py] is not None:
                raise OperatorParameterError(f"Join: parameter {py!r} given twice")
            else:
                params[py] = value

        if not isinstance(algorithm, str) or algorithm not in _ALGORITHMS:
            raise OperatorParameterError(
                f"Join: algorithm={algorithm!r}; expected 'inner', 'leftOuter', 'rightOuter' or "
                "'outer' (or 'left_outer', 'right_outer')")
        self.algorithm = _ALGORITHMS[algorithm]
        match = params["match"]
        if match is not None and not callable(match):
            raise OperatorParameterError(f"Join: match={match!r} must be a function (lhs, rhs) -> bool")
        self._match: Callable[[Any, Any], bool] | None = match
        self._keys = _equality(params["equality_lhs"], params["equality_rhs"])
        self._equality_exprs = (params["equality_lhs"], params["equality_rhs"])
        self._key_attrs_given = (_key_attribute(params["equality_lhs"]),
                                 _key_attribute(params["equality_rhs"]))
        self._key_attrs = self._key_attrs_given
        self._assigned = params["output"]  # the output clause as given (`setup` builds on it)
        self._output = _output_function(self._assigned)
        left_outer = self.algorithm in ("leftOuter", "outer")
        right_outer = self.algorithm in ("rightOuter", "outer")
        for name, allowed in (("default_tuple_lhs", right_outer), ("default_tuple_rhs", left_outer)):
            value = params[name]
            if value is None:
                continue
            if not allowed:
                needs = "'rightOuter' or 'outer'" if name.endswith("lhs") else "'leftOuter' or 'outer'"
                raise OperatorParameterError(
                    f"Join: {name} is used only by a {needs} join; algorithm is {self.algorithm!r}")
            if not isinstance(value, Mapping):
                raise OperatorParameterError(f"Join: {name}={value!r} must be a tuple (a mapping)")
        self._defaults: tuple[dict[str, Any], dict[str, Any]] = (
            dict(params["default_tuple_lhs"] or {}), dict(params["default_tuple_rhs"] or {}))
        self._defaults_given = any(params[n] is not None for n in ("default_tuple_lhs", "default_tuple_rhs"))
        self._outer = (left_outer, right_outer)
        self._sides = (_Side(0), _Side(1))
        self._held: list[tuple[int, Any]] = []  # unmatched outputs released by an arrival's eviction
        self._pending = False  # restored, mirrors not rebuilt yet
        self._fast = True  # compile the fast handlers where they apply (tests turn it off)
        self._arrive: list[Callable[[StreamWindowEvent[Any]], None]] = []
        self._evict: list[Callable[[StreamWindowEvent[Any]], None]] = []
        self._listening: list[StreamWindow[Any]] = []  # windows our listeners are registered on
        self._compiled: list[Callable[[StreamWindowEvent[Any]], None]] = []  # check _pending

    @property
    def equality_keys(self) -> tuple[Callable[[Any], Hashable], Callable[[Any], Hashable]] | None:
        """The equality key of each side as a function of a tuple (left, right), or None without
        ``equality_lhs``/``equality_rhs``: a host that splits the join's input by key (the Spark
        bridge's keyed stage) routes each side's tuples by these, so pairs meet in one place."""
        return self._keys

    # ------------------------------------------------------------------ set-up

    def check_ports(self, ports: PortLayout) -> list[str]:
        """Two input ports with windows a join can keep, the outputs its algorithm has
        (`Operator.check_ports`: at `Graph.freeze`)."""
        problems = (self._port_problems((len(ports.windows), ports.outputs), ports.windows)
                    + self._schema_problems(ports))
        for port, side in enumerate(("equality_lhs", "equality_rhs")):
            problems += attribute_problems([(side, e) for e in self._equality_items(port)],
                                           ports.input_schema(port))
        return problems

    def _equality_items(self, port: int) -> list[Any]:
        """Port ``port``'s equality key as given: its attribute names and functions."""
        exprs = self._equality_exprs[port]
        if exprs is None:
            return []
        return list(exprs) if isinstance(exprs, (list, tuple)) else [exprs]

    def _collection_key(self, port: int) -> bool:
        """A declared input schema types one of the port's equality attributes as a collection
        (list, set, map, tuple): its values cannot be dict keys as they are."""
        schema_of = getattr(self.context, "input_schema", None)
        schema = schema_of(port) if callable(schema_of) else None
        if schema is None:
            return False
        return any((schema.type_of(e) or "").startswith(_COLLECTIONS)
                   for e in self._equality_items(port) if isinstance(e, str))

    def _schema_problems(self, ports: PortLayout) -> list[str]:
        """An attribute of the declared output that nothing gives: not assigned, and in
        neither input's declared schema (an outer join fills a missing side's attributes with
        their types' defaults, but an attribute neither side has is always missing)."""
        schema = ports.output_schema()
        inputs = ports.input_schemas[:2]
        if schema is None or len(inputs) < 2 or None in inputs or callable(self._assigned):
            return []
        assigned = set(self._assigned or ())
        return [f"output attribute {name!r} is not assigned (output=...) and neither input "
                f"schema has it" for name in schema.names
                if name not in assigned and all(s.type_of(name) is None for s in inputs if s)]

    def _port_problems(self, counts: tuple[int, int] | None,
                       specs: Sequence[WindowSpec | TimeIntervalSpec | None]) -> list[str]:
        problems: list[str] = []
        n_out = 1
        if counts is not None:
            n_in, n_out = counts
            if n_in != 2:
                problems.append(f"needs exactly 2 input ports (left, right), the graph gives it {n_in}")
            allowed = {"inner": (1,), "leftOuter": (1, 2), "rightOuter": (1, 2), "outer": (1, 3)}
            if n_out not in allowed[self.algorithm]:
                want = " or ".join(map(str, allowed[self.algorithm]))
                problems.append(f"a {self.algorithm!r} join has {want} output port(s), the graph "
                                f"gives it {n_out}")
        if n_out > 1 and self._defaults_given:
            problems.append(f"default tuples are for single-output outer joins; with {n_out} "
                            "output ports the unmatched tuples go out unchanged on ports 1..")
        problems += [p for port, spec in enumerate(specs[:2])
                     if (p := window_problem(port, spec)) is not None]
        if len(specs) >= 2 and specs[0] is None and specs[1] is None:
            problems.append("both input ports are connected without a window (SPL count(0)), so "
                            "nothing is ever kept to match; give at least one a sliding window")
        return problems

    def setup(self) -> None:
        counts = _port_counts(self.context)
        windows: list[Any] = []
        for side in self._sides:
            try:
                windows.append(self.context.window(side.port))
            except ValueError:
                windows.append(None)  # a plain port: SPL count(0), the lookup side
        problems = self._port_problems(counts, [None if w is None else w.spec for w in windows])
        if problems:  # (a frozen graph has none: `check_ports`; a host without one may)
            raise OperatorParameterError(f"Join {self.context.name!r}: {problems[0]}")
        n_out = 1 if counts is None else counts[1]
        self._output = _output_function(self._assigned)
        schema = declared_output(self.context)
        if schema is not None and not callable(self._assigned):
            self._output = _projected(self._output, schema)
        # SPL compares list, set, map and tuple keys by value: when either side declares one,
        # both sides key by the frozen form (a dict cannot hold the values as they are), and
        # the key is never read inline
        frozen = self._keys is not None and (self._collection_key(0) or self._collection_key(1))
        self._key_attrs = (None, None) if frozen else self._key_attrs_given
        for side in self._sides:
            side.clear()
            side.outer = self._outer[side.port]
            side.key_of = self._keys[side.port] if self._keys is not None else None
            if frozen and side.key_of is not None:
                side.key_of = _frozen(side.key_of)
            if n_out > 1 and side.outer:
                side.unmatched_port = 1 if side.port == 0 or self.algorithm == "rightOuter" else 2
            side.window = windows[side.port]
            if side.window is None:
                continue
            spec = side.window.spec
            side.partitioned = spec.partitioned
            side.evicts_on_arrival = not isinstance(spec.eviction, Time)
            side.drop_empty = (spec.partitioned and not side.evicts_on_arrival
                               and not side.window.rules.keeps_emptied_partitions)
        self._held.clear()
        self._compiled.clear()
        forwarding = type(self).on_window_event is not Join.on_window_event
        for side in self._sides:
            side.fifo = deque() if counts_own_evictions(self, side, forwarding=forwarding) else None
        self._arrive = [arrival_handler(self, side) for side in self._sides]
        self._evict = [eviction_handler(self, side) for side in self._sides]
        for side in self._sides:  # insertions and evictions straight from the windows
            own = side.window
            if own is None or any(own is w for w in self._listening):
                continue
            self._listening.append(own)
            if forwarding:
                # A subclass's on_window_event sees every event, as from the host (which
                # delivers PARTITION_EVICTION itself).
                types = [t for t in every_event(own) if t is not PARTITION_EVICTION]
                own.register_listener(self._forward(side.port), types)
                continue
            own.register_listener(self._listener(side, self._arrive[side.port]), (INSERTION,))
            if side.fifo is None:  # else the arrivals evict (`counts_own_evictions`)
                own.register_listener(self._listener(side, self._evict[side.port]), (EVICTION,))

    def _forward(self, port: int) -> Callable[[StreamWindowEvent[Any]], None]:
        on_event = self.on_window_event
        return lambda event: on_event(event, port)

    def _listener(self, side: _Side, handle: Callable[[StreamWindowEvent[Any]], None]
                  ) -> Callable[[StreamWindowEvent[Any]], None]:
        """A window listener calling ``handle`` with the event, or `on_window_event` (which
        rebuilds the mirrors first) while a restore is pending: one call per event instead of
        the host's listener, `on_window_event`'s dispatch and then the handler. A compiled
        handler looks at the restore itself, and is the listener."""
        port, on_event = side.port, self.on_window_event
        if handle in self._compiled:
            return handle

        def listen(event: StreamWindowEvent[Any]) -> None:
            if self._pending:
                on_event(event, port)
            else:
                handle(event)

        return listen

    # -------------------------------------------------------------- arrivals

    def on_window_event(self, event: StreamWindowEvent[Any], port: int) -> None:
        etype = event.type
        if etype is INSERTION:
            if self._pending:
                self._resolve(port, event)
            self._arrive[port](event)
        elif etype is EVICTION:
            if self._pending:
                side = self._sides[port]
                if not side.evicts_on_arrival:
                    self._consume_pending(side, event)
                    return
                popped = self._resolve(port, event)
                if popped is not None:
                    self._evicted(side, event.partition, event.tuples, popped)
                    return
            self._evict[port](event)
        elif etype is PARTITION_EVICTION:
            side = self._sides[port]
            if self._pending and side.pending is not None:
                side.pending.pop(event.partition, None)
            else:
                self._drop_partition(side, event.partition, event.tuples)
        # TRIGGER (count(1): every arrival), INITIAL_FULL and FINAL need nothing.

    def on_tuple(self, tup: Any, port: int) -> None:
        """A tuple on an unwindowed port (SPL count(0)): match it, keep nothing."""
        if self._pending:
            self._resolve(None, None)
        side = self._sides[port]
        n = self._probe(side, tup, side.key_of(tup) if side.key_of is not None else None)
        if n == 0 and side.outer:
            n += self._unmatched(side, tup, hold=False)
        if n:
            self.submit_punct(Punct.WINDOW, 0)

    def on_punct(self, punct: Punct, port: int) -> None:
        """Window marks are ignored (SPL: oblivious); final does not flush unmatched tuples."""

    # --------------------------------------------------------------- the core

    def _arrived(self, side: _Side, part: Hashable, t: Any) -> None:
        """A tuple was inserted into ``side``'s window: match it, keep it, then the held
        unmatched tuples its insertion evicted, then the mark (the reference path)."""
        key, entry = self._store(side, part, t)
        n = self._probe(side, t, key)
        if n:
            entry[1] = True
        if self._held:
            n += self._flush_held()
        if n:
            self.submit_punct(Punct.WINDOW, 0)

    def _store(self, side: _Side, part: Hashable, t: Any) -> tuple[Hashable, Entry]:
        """Put an arriving tuple into its side's mirror, unmatched so far: (its key, its entry)."""
        entry: Entry = [t, False]
        key_of = side.key_of
        if key_of is None:
            dq = side.parts.get(part)
            if dq is None:
                side.parts[part] = deque((entry,))
            else:
                dq.append(entry)
            return None, entry
        key = key_of(t)
        if side.fifo is not None:
            entry.append(key)
            side.fifo.append(entry)
        index = side.index
        if side.partitioned:
            rank = side.order.get(part)
            if rank is None:
                side.order[part] = [side.next_rank, 1]
                side.next_rank += 1
            else:
                rank[1] += 1
            bucket = index.get(key)
            if bucket is None:
                index[key] = {part: deque((entry,))}
            else:
                dq = bucket.get(part)
                if dq is None:
                    bucket[part] = deque((entry,))
                else:
                    dq.append(entry)
        else:
            dq = index.get(key)
            if dq is None:
                index[key] = deque((entry,))
            else:
                dq.append(entry)
        return key, entry

    def _probe(self, side: _Side, t: Any, key: Hashable) -> int:
        """Match ``t`` against the other side's window: one output per match, the matched
        tuples of the other side flagged. Returns the number of matches."""
        other = self._sides[1 - side.port]
        groups: Iterable[deque[Entry]]
        if self._keys is not None:
            found = other.index.get(key)
            if found is None:
                return 0
            if not other.partitioned:
                groups = (found,)
            elif len(found) == 1:
                groups = found.values()
            else:
                order = other.order
                groups = [found[p] for p in sorted(found, key=lambda p: order[p][0])]
        else:
            groups = other.parts.values()
        match, out, submit = self._match, self._output, self.submit
        n = 0
        if side.port == 0:
            for dq in groups:
                for e in dq:
                    r = e[0]
                    if match is None or match(t, r):
                        submit(out(t, r))
                        e[1] = True
                        n += 1
        else:
            for dq in groups:
                for e in dq:
                    lhs = e[0]
                    if match is None or match(lhs, t):
                        submit(out(lhs, t))
                        e[1] = True
                        n += 1
        return n

    def _evicted(self, side: _Side, part: Hashable, tuples: Iterable[Any],
                 popped: list[bool] | None) -> None:
        """Tuples left ``side``'s window: drop them from the mirror, output the unmatched."""
        flags = iter(popped) if popped is not None else None
        hold = side.evicts_on_arrival
        for t in tuples:
            if flags is not None:
                matched = next(flags)
            else:
                e = self._remove(side, part, t)
                matched = e is None or e[1]
            if side.outer and not matched:
                # A time eviction happens on its own, between arrivals: no window mark.
                self._unmatched(side, t, hold=hold)

    def _remove(self, side: _Side, part: Hashable, t: Any) -> Entry | None:
        """Take an evicted tuple out of the mirror; its entry, or None if it was not there."""
        key_of = side.key_of
        found: Any = None
        if key_of is None:
            dq = side.parts.get(part)
        else:
            try:
                key = key_of(t)
            except Exception:  # its arrival failed on this: it was never stored
                return None
            found = side.index.get(key)
            dq = found.get(part) if found is not None and side.partitioned else found
        if not dq:
            return None
        e: Entry = dq[0]
        if e[0] is t:
            dq.popleft()
        else:  # not the oldest: the cpp flavor's out-of-order delta eviction
            for i, cand in enumerate(dq):
                if cand[0] is t:
                    e = cand
                    del dq[i]
                    break
            else:
                return None
        if key_of is None:
            if not dq and side.drop_empty:
                del side.parts[part]
            return e
        if side.partitioned:
            rank = side.order[part]
            rank[1] -= 1
            if rank[1] == 0 and side.drop_empty:
                del side.order[part]
            if not dq:
                del found[part]
                if not found:
                    del side.index[key]
        elif not dq:
            del side.index[key]
        return e

    def _drop_partition(self, side: _Side, part: Hashable, tuples: Iterable[Any]) -> None:
        if side.key_of is None:
            side.parts.pop(part, None)
            return
        for t in tuples:
            self._remove(side, part, t)
        side.order.pop(part, None)

    def _unmatched(self, side: _Side, t: Any, *, hold: bool) -> int:
        """Output a tuple that never matched; returns 1 if that was on port 0 (unheld)."""
        if side.unmatched_port:
            item = (side.unmatched_port, t)
        elif side.port == 0:
            item = (0, self._output(t, self._defaults[1]))
        else:
            item = (0, self._output(self._defaults[0], t))
        if hold:
            self._held.append(item)
            return 0
        self.submit(item[1], item[0])
        return 1 if item[0] == 0 else 0

    def _flush_held(self) -> int:
        held = self._held[:]
        self._held.clear()  # in place: compiled handlers hold this list
        n = 0
        for port, tup in held:
            self.submit(tup, port)
            if port == 0:
                n += 1
        return n

    # ----------------------------------------------------------- checkpoints

    def snapshot(self) -> dict[str, Any]:
        """Per side, its partitions in the operator's order, each as [key, number of tuples,
        positions (oldest = 0) of the tuples that matched]. The tuples themselves are in the
        windows' own checkpoints; a lookup side (no window) is None."""
        sides: list[Any] = []
        for side in self._sides:
            window = side.window
            if window is None:
                sides.append(None)
                continue
            parts: list[Any] = []
            if side.pending is not None:
                for part, flags in side.pending.items():
                    parts.append([_key_out(part), len(flags), [i for i, f in enumerate(flags) if f]])
            else:
                for part in side.partition_order():
                    kept = self._flags_in_order(side, part, window.contents(part))
                    parts.append([_key_out(part), len(kept), [i for i, f in enumerate(kept) if f]])
            sides.append(parts)
        return {"format": FORMAT, "algorithm": self.algorithm, "sides": sides}

    def restore(self, state: Any) -> None:
        """Take back a `snapshot`. The windows are restored after this call, so the mirrors are
        rebuilt from them lazily, at the first event that needs them."""
        if not isinstance(state, Mapping) or state.get("format") != FORMAT:
            raise JoinStateError(f"Join: not a Join checkpoint (format {FORMAT!r} expected): "
                                 f"{str(state)[:80]}")
        if state.get("algorithm") != self.algorithm:
            raise JoinStateError(f"Join: the checkpoint is of a {state.get('algorithm')!r} join, this "
                                 f"one is {self.algorithm!r}")
        sides = state.get("sides")
        if not isinstance(sides, list) or len(sides) != 2:
            raise JoinStateError("Join: the checkpoint must hold two sides")
        self._held.clear()
        for side, data in zip(self._sides, sides, strict=True):
            side.clear()
            if (data is None) != (side.window is None):
                raise JoinStateError(
                    f"Join: the {_SIDE_NAMES[side.port]} side was "
                    f"{'unwindowed' if data is None else 'windowed'} when checkpointed and is not now")
            if data is None:
                continue
            pending: dict[Hashable, deque[bool]] = {}
            for item in data:
                try:
                    raw_key, n, positions = item
                    flags = [False] * int(n)
                    for i in positions:
                        flags[int(i)] = True
                except (TypeError, ValueError, IndexError):
                    raise JoinStateError(
                        f"Join: bad partition entry {item!r} in the checkpoint of the "
                        f"{_SIDE_NAMES[side.port]} side") from None
                pending[_key_in(raw_key)] = deque(flags)
            side.pending = pending
        self._pending = True

    def reset_to_initial_state(self) -> None:
        for side in self._sides:
            side.clear()
        self._held.clear()
        self._pending = False

    def _flags_in_order(self, side: _Side, part: Hashable, contents: list[Any]) -> list[bool]:
        """The match flags of a partition's tuples in window order (= arrival order)."""
        if side.key_of is None:
            dq = side.parts.get(part, deque())
            flags = [e[1] for e in dq]
        else:
            iters: dict[Hashable, Any] = {}
            flags = []
            for t in contents:
                key = side.key_of(t)
                it = iters.get(key)
                if it is None:
                    found = side.index.get(key)
                    if found is not None and side.partitioned:
                        found = found.get(part)
                    it = iters[key] = iter(found if found is not None else ())
                e = next(it, None)
                flags.append(bool(e is not None and e[1]))
        if len(flags) != len(contents):
            raise JoinStateError(f"Join: the {_SIDE_NAMES[side.port]} mirror holds {len(flags)} tuples "
                                 f"of partition {part!r}, the window {len(contents)}")
        return flags

    def _consume_pending(self, side: _Side, event: StreamWindowEvent[Any]) -> None:
        """A time eviction before the mirrors were rebuilt (typically the restore itself evicting
        overdue tuples): the evicted are the oldest, so their flags are the first ones."""
        assert side.pending is not None
        flags = side.pending.get(event.partition)
        for t in event.tuples:
            if not flags:
                raise JoinStateError(
                    f"Join: the {_SIDE_NAMES[side.port]} window evicted a tuple of partition "
                    f"{event.partition!r} that the checkpoint does not know")
            if not flags.popleft() and side.outer:
                self._unmatched(side, t, hold=False)
        if flags is not None and not flags and side.drop_empty:
            del side.pending[event.partition]

    def _resolve(self, port: int | None, event: StreamWindowEvent[Any] | None) -> list[bool] | None:
        """Rebuild both mirrors from the restored windows and the checkpointed flags.

        Runs inside the first event that needs the mirrors, so the window may be in
        the middle of that event: an INSERTION's tuple is already stored (it is the
        partition's last and is left to the handler), and an EVICTION's tuples may
        already be gone (then their flags, the partition's first ones, are returned).
        """
        self._pending = False
        popped: list[bool] | None = None
        for side in self._sides:
            window, pending = side.window, side.pending
            side.pending = None
            if window is None or pending is None:
                continue
            for part in window.partitions() if side.partitioned else [None]:
                if part not in pending:  # only the partition an arrival is creating
                    pending[part] = deque()
            for part, flags in pending.items():
                contents = window.contents(part)
                n, m = len(contents), len(flags)
                here = event is not None and port == side.port and event.partition == part
                if here and event is not None and event.type is INSERTION and side.fifo is not None \
                        and n == m and m > 0:  # the arrival evicted the oldest tuple, with no event
                    contents.pop()
                    flags.popleft()  # an inner side's: nothing goes out
                elif n == m:
                    pass
                elif here and event is not None and event.type is INSERTION and n == m + 1:
                    contents.pop()
                elif here and event is not None and event.type is EVICTION and m - n == len(event.tuples):
                    popped = [flags.popleft() for _ in range(m - n)]
                else:
                    raise JoinStateError(
                        f"Join: the restored {_SIDE_NAMES[side.port]} window holds {n} tuples in "
                        f"partition {part!r}, the checkpoint {m}: they are not from the same checkpoint")
                if side.partitioned:  # keep the partition's place in the order, even when empty
                    if side.key_of is None:
                        side.parts.setdefault(part, deque())
                    else:
                        side.order[part] = [side.next_rank, 0]
                        side.next_rank += 1
                for t, matched in zip(contents, flags, strict=True):
                    self._store(side, part, t)[1][1] = matched
        return popped


# ------------------------------------------------------------------ helpers


def _projected(output: Callable[[Any, Any], Any], schema: Schema) -> Callable[[Any, Any], Any]:
    """``output`` cut to the declared output schema, as SPL's Join output is: an attribute
    the pair does not give (a missing side of an outer join, default-initialised in SPL)
    takes its type's default value; attributes the schema does not have are left out."""
    names = schema.names
    defaults = [(name, spl_default(t)) for name, t in schema.attributes]

    def project(lhs: Any, rhs: Any) -> dict[str, Any]:
        out: dict[str, Any] = output(lhs, rhs)
        if len(out) == len(names) and all(n in out for n in names):
            return out  # (exactly the schema: nothing to cut or fill)
        return {name: out[name] if name in out else fresh(value) for name, value in defaults}

    return project


_COLLECTIONS = ("list", "set", "map", "blist", "bset", "bmap", "tuple")


def _frozen(key_of: Callable[[Any], Any]) -> Callable[[Any], Hashable]:
    """``key_of`` whose value is frozen (`freeze_key`: lists as tuples...), so it can key a dict."""
    return lambda t: freeze_key(key_of(t))
