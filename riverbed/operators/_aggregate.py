"""SPL ``Aggregate``: one result tuple per group each time a window flushes or triggers.

The window on input port 0 decides *when* (it is declared on the graph port,
as SPL declares it on the operator invocation); Aggregate decides *what*:
for each group of the window's tuples (all of them, without ``group_by``) it
builds one output tuple from the output functions of
`riverbed.operators._aggregate_functions`, submits the batch, then a window
mark::

    g.operator("avg", Aggregate(output={"avg": Average("price"), "n": Count()},
                                group_by="sym", copy=("exchange",)),
               [quotes.window("sliding, time(60), time(1), partitioned", partition_by="exchange")])

Tumbling windows are aggregated from the EVICTION (flush) event's tuples.
Sliding windows keep, per partition and group, the tuples in arrival order
and incremental accumulators (Sum, Average, Min, Max) updated on each
INSERTION and EVICTION event, so a trigger costs O(groups), not O(window).
Whenever that state and the window disagree (after a restore, or when IBM's
C++ delta eviction removes tuples out of arrival order) it is rebuilt from
the window's contents, which a trigger event carries anyway.
timeInterval windows are aggregated from each pane partition's TRIGGER.

Output attributes: each ``output`` entry is an output function
(``Average("price")``), a plain function of a tuple (an SPL expression,
evaluated on the group's **last** tuple, as IBM's generated code does), or a
constant. ``copy`` names input attributes to carry over with ``Last(attr)``,
which is what SPL does for every output-schema attribute left unassigned
(pass the output `Schema` itself to get exactly that); ``group_by``
attribute names are carried over too. Nothing else is: a dict tuple has no
schema to complete.
"""

from __future__ import annotations

import functools
import operator
import re
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from itertools import islice
from typing import Any

from ..graph import Operator, PortLayout, Punct, Schema
from ..windows import (
    Count as CountPolicy,
)
from ..windows import (
    EventType,
    PaneEvent,
    PaneTiming,
    StreamWindow,
    StreamWindowEvent,
    TimeIntervalSpec,
    TimeIntervalWindow,
    WindowSpec,
    WindowType,
    decode_partition_key,
    encode_partition_key,
)
from ..windows import (
    Time as TimePolicy,
)
from ._aggregate_functions import (
    Accumulator,
    AggregateFunction,
    Average,
    CountAll,
    FloatAverage,
    Last,
    NoArgument,
    PopulationStdDev,
    SampleStdDev,
    Scope,
    Sum,
)
from ._aggregate_math import MinAccumulator, SumAccumulator, freeze
from ._aggregate_rows import (
    Column,
    RowBuilder,
    compile_rows,
    expression_key,
    failed_column,
    reads_scope,
)
from ._aggregate_runs import RunRows, SumRuns, compile_run_rows
from ._params import OperatorParameterError, spl_aliases
from ._utility_support import (
    attribute_problems,
    declared_output,
    name_failure,
    result_submit,
    results_submit,
)

__all__ = ["Aggregate"]

INSERTION = EventType.INSERTION
EVICTION = EventType.EVICTION
TRIGGER = EventType.TRIGGER
INITIAL_FULL = EventType.INITIAL_FULL
PARTITION_EVICTION = EventType.PARTITION_EVICTION
EMPTY_WINDOW_PUNCT = EventType.EMPTY_WINDOW_PUNCT
ON_COMPLETE = PaneTiming.ON_COMPLETE

GroupBy = str | Sequence[str] | Callable[[Any], Hashable]
OutputValue = AggregateFunction | Callable[[Any], Any] | object

# Column kinds: how one output attribute is computed for one group.
_INTEGRAL = re.compile(r"u?int(8|16|32|64)")  # SPL's integral types
_FLOATS = ("float32", "float64")
_FUNCTION_AT = re.compile(r"<function (\S+) at 0x[0-9a-f]+>")
_FUNCTION, _INCREMENTAL, _EXPRESSION, _CONSTANT = range(4)
_KIND_NAMES = {_FUNCTION: "function", _INCREMENTAL: "incremental", _EXPRESSION: "expression",
               _CONSTANT: "constant"}
WINDOW_MARK = Punct.WINDOW
_DEFAULTS: dict[str, Any] = {"output": None, "group_by": None, "copy": (),
                             "aggregate_incomplete_windows": False,
                             "aggregate_evicted_partitions": False, "incremental": True}
_KNOWN = frozenset(_DEFAULTS)
_FORMAT = "riverbed.aggregate/1"
_WINDOWS_ALLOWED = (
    "tumbling with count, delta, time or punct() eviction; sliding with count, delta or time "
    "eviction and a count, delta or time trigger; either optionally partitioned (with a "
    "partition eviction policy); or timeInterval")


class _Group:
    """One group's tuples, oldest first, and (sliding, incremental) its accumulators."""

    __slots__ = ("accs", "adds", "adds_many", "removes", "removes_many", "replaces", "seqs", "tuples")

    def __init__(self, tuples: Any, accs: list[Accumulator] | None) -> None:
        self.tuples = tuples
        self.accs = accs
        # Bound methods, looked up once per group rather than once per tuple.
        self.adds = [acc.add for acc in accs] if accs else []
        self.removes = [acc.remove for acc in accs] if accs else []
        # remove(old) then add(new), one call where the accumulator has it.
        self.replaces = [getattr(acc, "replace", None) or _replacer(acc) for acc in accs] if accs else []
        # The same for many tuples at once, where the accumulator has it (a trigger's catch-up).
        self.adds_many = [getattr(acc, "add_many", None) or _each(acc.add) for acc in accs] if accs else []
        self.removes_many = ([getattr(acc, "remove_many", None) or _each(acc.remove) for acc in accs]
                             if accs else [])
        self.seqs: deque[int] = deque()  # arrival numbers, parallel to tuples (grouped state only)


def _replacer(acc: Accumulator) -> Callable[[Any, Any], None]:
    remove, add = acc.remove, acc.add

    def replace(old: Any, new: Any) -> None:
        remove(old)
        add(new)
    return replace


def _each(step: Callable[[Any], None]) -> Callable[[Sequence[Any]], None]:
    def each(tuples: Sequence[Any]) -> None:
        for t in tuples:
            step(t)
    return each


class _Partition:
    """Incremental state of one sliding-window partition: its tuples in window order, by group."""

    __slots__ = ("evicted", "gkeys", "groups", "key_of", "make_accs", "order", "seq", "single")

    def __init__(self, key_of: Callable[[Any], Hashable] | None,
                 make_accs: Callable[[], list[Accumulator]]) -> None:
        self.key_of = key_of
        self.make_accs = make_accs
        self.seq = 0
        self.groups: dict[Hashable, _Group] = {}
        if key_of is None:
            self.single: _Group | None = _Group(deque(), make_accs())
            self.order: deque[Any] = self.single.tuples
        else:
            self.single = None
            self.order = deque()
        self.gkeys: deque[Hashable] = deque()  # group key of each tuple in `order`
        self.evicted = -1  # the window's `evicted_count` count this state mirrors (-1: none)

    def insert(self, t: Any) -> None:
        single = self.single
        if single is not None:
            single.tuples.append(t)
            for add in single.adds:
                add(t)
            return
        assert self.key_of is not None
        k = _group_key(self.key_of, t)
        group = self.groups.get(k)
        if group is None:
            group = self.groups[k] = _Group(deque(), self.make_accs())
        self.seq += 1
        self.order.append(t)
        self.gkeys.append(k)
        group.tuples.append(t)
        group.seqs.append(self.seq)
        for add in group.adds:
            add(t)

    def evict(self, tuples: Sequence[Any]) -> bool:
        """Remove evicted tuples; False if they are not the oldest ones (the state is then stale)."""
        order = self.order
        single = self.single
        for t in tuples:
            if not order or order[0] is not t:
                return False
            order.popleft()
            if single is not None:
                for remove in single.removes:
                    remove(t)
                continue
            k = self.gkeys.popleft()
            group = self.groups[k]
            group.tuples.popleft()
            group.seqs.popleft()
            for remove in group.removes:
                remove(t)
            if not group.tuples:
                del self.groups[k]
        return True

    def catch_up(self, out: int, new: Sequence[Any]) -> None:
        """The ``out`` oldest tuples left, ``new`` arrived: all at once where one group."""
        order = self.order
        single = self.single
        if single is None:
            self.evict(list(islice(order, out)))
            for t in new:
                self.insert(t)
            return
        k = len(new)
        if out == 1:
            old = order.popleft()
            for remove in single.removes:
                remove(old)
        elif out:
            popleft = order.popleft
            gone = [popleft() for _ in range(out)]
            for remove_many in single.removes_many:
                remove_many(gone)
        if k == 1:
            t = new[0]
            order.append(t)
            for add in single.adds:
                add(t)
        elif k:
            order.extend(new)
            for add_many in single.adds_many:
                add_many(new)

    def matches(self, tuples: Sequence[Any]) -> bool:
        """A cheap check that this state mirrors the window's contents ``tuples``."""
        order = self.order
        return len(order) == len(tuples) and (not tuples or (order[0] is tuples[0]
                                                             and order[-1] is tuples[-1]))

    def output_groups(self) -> list[_Group]:
        if self.single is not None:
            return [self.single]
        groups = list(self.groups.values())
        if len(groups) > 1:
            groups.sort(key=_oldest)
        return groups


def _oldest(group: _Group) -> int:
    return group.seqs[0]


def _group_key(key_of: Callable[[Any], Hashable], t: Any) -> Hashable:
    k = key_of(t)
    try:
        hash(k)
    except TypeError:
        return freeze(k)
    return k


def _grouped(key_of: Callable[[Any], Hashable], tuples: Iterable[Any]) -> list[Sequence[Any]]:
    """The tuples by group key, in first-occurrence order; unhashable keys by content."""
    by_key: dict[Hashable, list[Any]] = {}
    get = by_key.get
    try:
        for t in tuples:
            k = key_of(t)
            members = get(k)  # a TypeError for an unhashable key
            if members is None:
                by_key[k] = [t]
            else:
                members.append(t)
    except TypeError:  # a list-valued key (or key_of failing): again, each key frozen
        by_key = {}
        for t in tuples:
            k = _group_key(key_of, t)
            members = by_key.get(k)
            if members is None:
                by_key[k] = [t]
            else:
                members.append(t)
    return list(by_key.values())


class Aggregate(Operator):
    """SPL ``Aggregate``: per group, one tuple of aggregations at each flush/trigger, then a mark.

    ``output`` maps output attribute names to an output function
    (``Average("price")``, see ``riverbed.operators``), a function of a
    tuple (evaluated on the group's last tuple) or a constant. ``copy``
    names input attributes carried over as ``Last(attr)`` (or give a
    `Schema`: its attributes not in ``output``); with a declared output
    schema, its attributes the clause leaves out are carried over so too,
    as SPL assigns them. ``group_by`` is an
    attribute name, a sequence of names (also copied to the output) or a
    function of the tuple. SPL spellings (``groupBy=``,
    ``aggregateIncompleteWindows=``, ``aggregateEvictedPartitions=``) are
    accepted.

    Windows (input port 0): tumbling with count, delta, time or punct()
    eviction; sliding with count, delta or time eviction and count, delta or
    time trigger; both optionally partitioned with partitionAge,
    partitionCount or tupleCount eviction; and timeInterval (event time).
    Declare the window with ``flavor="cpp"`` to follow IBM's C++ window, the
    one IBM's Aggregate uses (one window timer, emptied partitions dropped).

    When it outputs:

    * tumbling: at each flush of a partition, one tuple per group then a
      window mark; a time or punct() flush of an empty window: only a mark.
      ``aggregate_evicted_partitions=True`` (tumbling with a partition
      eviction policy only) aggregates an evicted partition like a flush.
    * sliding: at each trigger of a partition, one tuple per group then a
      mark, but only once the partition has been full (INITIAL_FULL), unless
      ``aggregate_incomplete_windows=True`` (not allowed on tumbling
      windows). Triggers before that output nothing, not even a mark;
      time-evicting windows are full from the start. A trigger of an empty
      window outputs only a mark. (IBM's documentation says windows with a
      *time trigger* are full from the start; its code gates on
      INITIAL_FULL, which we follow.)
    * timeInterval: at each TRIGGER of a pane partition (on completion and
      for late data), with the same "full" gate: a partition must have had
      INITIAL_FULL in some pane; CLOSE outputs nothing. ``IntervalStart()``
      etc. give the pane.

    Punctuation: generating. Incoming window marks are dropped (a punct()
    window consumes them); the operator submits one mark after each batch.
    Final punctuation does not flush pending windows: what they hold is not
    output; the runtime forwards final.

    Group order within a batch: by each group's oldest tuple in the window
    (IBM: hash order, unspecified).

    ``incremental=False`` recomputes every trigger from the window contents
    instead of keeping accumulators: same results, for checking and
    debugging.

    State: which partitions have been full, and the window's tuple count
    (for ``CountAll``); accumulators are rebuilt from the restored window.

    Speed: Aggregate asks the host for no window events
    (``window_events`` is empty) and, at setup, registers with the window
    one handler per event type it needs: a tumbling or timeInterval window
    raises it no INSERTION at all (so the window takes its eventless insert
    path), a sliding window calls a handler made for insertions only. Each
    output row comes from a function compiled from the output clause
    (`riverbed.operators._aggregate_rows`). `on_window_event` still takes
    any event, for a host that calls it directly.
    """

    window_punctuation = "generating"
    window_events: frozenset[EventType] = frozenset()  # type: ignore[misc]

    def __init__(self, output: Mapping[str, OutputValue] | None = None, *,
                 group_by: GroupBy | None = None, copy: Iterable[str] | Schema = (),
                 aggregate_incomplete_windows: bool = False,
                 aggregate_evicted_partitions: bool = False, incremental: bool = True,
                 **spl: Any) -> None:
        explicit: dict[str, Any] = {
            "output": output, "group_by": group_by, "copy": copy,
            "aggregate_incomplete_windows": aggregate_incomplete_windows,
            "aggregate_evicted_partitions": aggregate_evicted_partitions, "incremental": incremental}
        for name in spl:
            if name in ("partitionBy", "partition_by"):
                raise OperatorParameterError(
                    "Aggregate: partitionBy is declared on the input port in riverbed: "
                    "stream.window('tumbling, count(10), partitioned', partition_by=...); "
                    "group_by= groups within a window")
        for name, value in spl_aliases("Aggregate", spl, _KNOWN).items():
            if explicit[name] is not _DEFAULTS[name]:
                raise OperatorParameterError(f"Aggregate: parameter {name!r} given twice")
            explicit[name] = value
        output = explicit["output"]
        group_by = explicit["group_by"]
        copy = explicit["copy"]
        for name in ("aggregate_incomplete_windows", "aggregate_evicted_partitions", "incremental"):
            if not isinstance(explicit[name], bool):
                raise OperatorParameterError(f"Aggregate: {name}={explicit[name]!r}: expected True or False")
        self.aggregate_incomplete_windows: bool = explicit["aggregate_incomplete_windows"]
        self.aggregate_evicted_partitions: bool = explicit["aggregate_evicted_partitions"]
        self.incremental: bool = explicit["incremental"]
        self._key_of, group_names = _group_by(group_by)
        self.group_by = group_by
        self._columns = self._clause = _columns(output, copy, group_names)
        self._functions = [obj for _n, kind, obj in self._columns if kind == _FUNCTION]
        self._needs_sizes = any(f.needs_group_sizes for f in self._functions)
        self._handlers: dict[EventType, Callable[[StreamWindowEvent[Any]], None]] = {}
        self._incremental = False
        self._counts_total = False  # sliding windows: INSERTION and EVICTION events count tuples
        self._plan: list[tuple[str, int, Any, int]] = []
        self._build: RowBuilder = self._build_reference
        self._needs_scope = True
        self._reference = False  # True: the generic column loop (property tests compare both)
        self._run_rows: tuple[RunRows, RunRows] | None = None
        self._runs: SumRuns | None = None  # a full sliding count window's batches of triggers
        self._window: Any = None
        self._counts_across = False  # set by `check_ports`: see `check_parallel`
        self._reset()

    def _reset(self) -> None:
        self._full: set[Hashable] = set()
        self._total = 0  # tuples in the whole window (sliding), for CountAll
        self._states: dict[Hashable, _Partition] = {}
        self._resyncs = 0  # times the incremental state had to be rebuilt from the window

    # ------------------------------------------------------------------ setup

    def check_ports(self, ports: PortLayout) -> list[str]:
        """The window port 0 needs for this Aggregate's parameters, and the attributes it reads
        against a declared input schema (`Operator.check_ports`: at `Graph.freeze`)."""
        spec = ports.windows[0] if ports.windows else None
        problems = self._window_problems(spec)
        self._columns = self._with_declared(ports.output_schema())
        # `check_parallel` comes after (a region is resolved on the frozen graph): what it
        # needs to know of the window, kept from here.
        self._counts_across = (isinstance(spec, WindowSpec) and spec.partitioned
                               and spec.type is WindowType.SLIDING
                               and any(type(obj) is CountAll or not type(obj).__module__
                                       .startswith("riverbed.")  # (a function of the user's)
                                       for _attr, kind, obj in self._columns if kind == _FUNCTION))
        reads: dict[str, str] = {}  # each attribute once, where it is named first
        for what, attr in self._attributes_read():
            reads.setdefault(attr, what)
        return (problems + attribute_problems([(what, attr) for attr, what in reads.items()],
                                              ports.input_schema())
                + self._undeclared(ports.output_schema())
                + self._truncated_averages(ports.input_schema(), ports.output_schema())
                + self._deviations_into_non_floats(ports.output_schema()))

    def _undeclared(self, output: Schema | None) -> list[str]:
        """An output attribute (assigned or copied) that the declared output schema lacks: every
        result would fail its check, first when a window fires (minutes in, for long panes)."""
        if output is None:
            return []
        missing = [attr for attr, _kind, _obj in self._clause if output.type_of(attr) is None]
        if not missing:
            return []
        them = "them" if len(missing) > 1 else "it"
        return [f"output {', '.join(map(repr, missing))}: not in the output port's schema "
                f"{output}; declare {them} there or leave {them} out of output, copy and group_by"]

    def _truncated_averages(self, inputs: Schema | None, outputs: Schema | None) -> list[str]:
        """SPL's ``Average(T)`` is a T: of integers, an integer (truncated). Into a declared
        float attribute SPL's compiler refuses it; here the int would pass the float check, and
        1 and 2 would average to 1 where the user, declaring float64, expects 1.5."""
        if inputs is None or outputs is None:
            return []
        problems = []
        for attr, kind, obj in self._columns:
            if kind != _FUNCTION or type(obj) is not Average or not isinstance(obj.value, str):
                continue
            source, target = inputs.type_of(obj.value), outputs.type_of(attr)
            if source is not None and target is not None and _INTEGRAL.match(source) \
                    and target.startswith(("float", "decimal")):
                problems.append(
                    f"output {attr!r} = {obj!r}: the average of {obj.value!r} ({source}) is an "
                    f"integer, truncated (SPL's Average(T) is a T), but {attr!r} is {target}: "
                    f"average a float (Average(lambda t: float(t[{obj.value!r}]))) or declare "
                    f"{attr!r} an integer")
            elif source is not None and target is not None and source.strip() in _FLOATS \
                    and _INTEGRAL.match(target.strip()):
                # (the other way: SPL's Average(float64) is a float64, which an integer output
                # refuses when the window fires; whole-number values once passed as ints)
                problems.append(
                    f"output {attr!r} = {obj!r}: the average of {obj.value!r} ({source}) is a "
                    f"{source}, but {attr!r} is {target}: declare {attr!r} {source} (a Functor "
                    f"after the Aggregate can round it)")
        return problems

    def _deviations_into_non_floats(self, outputs: Schema | None) -> list[str]:
        """A standard deviation is a float64 here (of ints too: 1, 2 and 4 give 1.53): into a
        declared integral (or other non-float: a decimal takes a Decimal) attribute every
        result failed the output's check when the window fired, minutes into a run for long
        windows. Refused as `_truncated_averages` refuses its case."""
        if outputs is None:
            return []
        problems = []
        for attr, kind, obj in self._columns:
            if kind != _FUNCTION or type(obj) not in (SampleStdDev, PopulationStdDev):
                continue
            target = outputs.type_of(attr)
            if target is not None and target.strip() not in _FLOATS:
                problems.append(
                    f"output {attr!r} = {obj!r}: a standard deviation is a float64 (of integers "
                    f"too), but {attr!r} is {target}: declare {attr!r} float64")
        return problems

    def check_parallel(self, width: int) -> list[str]:
        """CountAll (and a function class of the user's, which the Scope's ``count_all`` is
        given to) counts every partition's tuples in a sliding window: split over channels,
        each counts only its own partitions (a fuzz review: 3 against 2 at width 2)."""
        if width > 1 and self._counts_across:
            return ["on a partitioned sliding window, CountAll() (or an output function of your "
                    "own, given the Scope's count_all) counts the tuples of every partition, "
                    "and the region's channels each hold only theirs: run it with width 1 or "
                    "out of the region"]
        return []

    def _with_declared(self, output: Schema | None) -> list[tuple[str, int, Any]]:
        """The output clause, and for each attribute of the declared ``output`` it does not
        assign, ``Last(attribute)``: SPL assigns an output attribute left out of the clause
        from the input attribute of its name (in the group's last tuple)."""
        if output is None:
            return self._clause
        assigned = {attr for attr, _kind, _obj in self._clause}
        return self._clause + [(name, _FUNCTION, Last(name)) for name in output.names
                               if name not in assigned]

    def _float_averages(self, columns: list[tuple[str, int, Any]]) -> list[tuple[str, int, Any]]:
        """Each ``Average`` of an attribute the input schema declares float32/float64 as a
        `FloatAverage`: the schema check lets ints through as floats, and SPL's
        ``Average(float64)`` is a float64, where `Average` of ints alone is SPL's truncated
        integer Average (1 and 2 gave 1, not 1.5). Chosen once here, so an undeclared or
        integral attribute's Average keeps its path. (The standard deviations already work
        in float.)"""
        schema_of = getattr(self.context, "input_schema", None)
        inputs = schema_of(0) if schema_of is not None else None
        if not isinstance(inputs, Schema):
            return columns
        return [(attr, kind, FloatAverage(obj.value)
                 if kind == _FUNCTION and type(obj) is Average and isinstance(obj.value, str)
                 and (inputs.type_of(obj.value) or "").replace(" ", "") in _FLOATS else obj)
                for attr, kind, obj in columns]

    def _attributes_read(self) -> list[tuple[str, str]]:
        """(what, attribute) for every attribute named in group_by, copy and the output."""
        read: list[tuple[str, str]] = []
        if isinstance(self.group_by, str):
            read.append(("group_by", self.group_by))
        elif isinstance(self.group_by, Sequence):
            read += [("group_by", n) for n in self.group_by]
        for attr, kind, obj in self._columns:
            if kind == _FUNCTION:
                read += [(f"output {attr!r} = {obj!r}", n) for n in obj.attributes()]
        return read

    def _window_problems(self, spec: WindowSpec | TimeIntervalSpec | None) -> list[str]:
        if spec is None:
            return [f"input port 0 must be windowed: {_WINDOWS_ALLOWED}"]
        where = spec.clause()
        tumbling = isinstance(spec, WindowSpec) and spec.type is WindowType.TUMBLING
        problems: list[str] = []
        if self.aggregate_incomplete_windows and tumbling:
            problems.append(
                f"aggregate_incomplete_windows=True needs a sliding (or timeInterval) window; "
                f"'{where}' is tumbling and only aggregates whole windows")
        if self.aggregate_evicted_partitions and not (
                tumbling and isinstance(spec, WindowSpec) and spec.partition_eviction is not None):
            problems.append(
                f"aggregate_evicted_partitions=True needs a tumbling, partitioned window with a "
                f"partition eviction policy (partitionAge, partitionCount or tupleCount); got "
                f"'{where}'")
        if not isinstance(spec, TimeIntervalSpec):
            problems += [f"output {attr!r} = {obj!r} describes a timeInterval pane; the window "
                         f"is '{where}'" for attr, kind, obj in self._columns
                         if kind == _FUNCTION and obj.needs_pane]
        return problems

    def setup(self) -> None:
        name = self.context.name
        try:
            window = self.context.window(0)
        except (ValueError, IndexError):
            window = None
        if window is not None and not isinstance(window, (StreamWindow, TimeIntervalWindow)):
            raise OperatorParameterError(f"Aggregate {name!r}: unsupported window {window!r}: "
                                         f"{_WINDOWS_ALLOWED}")
        problems = self._window_problems(None if window is None else window.spec)
        if problems:  # (a frozen graph has none: `check_ports`; a host without one may)
            raise OperatorParameterError(f"Aggregate {name!r}: {problems[0]}")
        assert window is not None
        self._columns = self._float_averages(self._with_declared(declared_output(self.context)))
        tumbling = isinstance(window, StreamWindow) and window.spec.type is WindowType.TUMBLING
        incremental = self.incremental and isinstance(window, StreamWindow) and not tumbling
        self._incremental = incremental
        plan: list[tuple[str, int, Any, int]] = []
        # One accumulator per incremental column, except that Sum and Average of one expression
        # share one exact sum (`SumAccumulator` has both total() and mean()).
        self._acc_makers: list[Callable[[], Accumulator]] = []
        shared: dict[Hashable, int] = {}
        for attr, kind, obj in self._columns:
            if incremental and kind == _FUNCTION and obj.accumulator() is not None:
                key: Hashable = None
                if type(obj) in (Sum, Average, FloatAverage) and not self._reference:
                    key = expression_key(obj)
                    if key in shared:
                        plan.append((attr, _INCREMENTAL, obj, shared[key]))
                        continue
                    shared[key] = len(self._acc_makers)
                    self._acc_makers.append(functools.partial(SumAccumulator, obj.read))
                else:
                    self._acc_makers.append(obj.accumulator)
                plan.append((attr, _INCREMENTAL, obj, len(self._acc_makers) - 1))
            else:
                plan.append((attr, kind, obj, -1))
        self._plan = plan
        columns: list[Column] = [(attr, _KIND_NAMES[kind], obj, index) for attr, kind, obj, index in plan]
        self._needs_scope = self._reference or reads_scope(columns)
        self._build = self._build_reference if self._reference else compile_rows(columns)
        self._run_rows = None if self._reference or not incremental else compile_run_rows(columns)
        self._window = window
        self._result = result_submit(self, 0)  # a one-group trigger's row and its mark
        self._listen(window, tumbling)

    def _listen(self, window: Any, tumbling: bool) -> None:
        """Register with the window, per event type, the handler this window mode needs."""
        handlers: dict[EventType, Callable[[StreamWindowEvent[Any]], None]]
        runs: SumRuns | None = None
        if isinstance(window, TimeIntervalWindow):
            if self._reference or self._key_of is not None or self._needs_scope:
                handlers = {TRIGGER: self._pane_trigger, INITIAL_FULL: self._initial_full}
            else:  # one group a pane partition: no INITIAL_FULL events (`_pane_trigger_single`)
                handlers = {TRIGGER: self._pane_trigger_single}
        elif tumbling:
            one = self._key_of is None and not self._needs_scope and not self._reference
            handlers = {EVICTION: self._flush_one if one else self._flush,
                        EMPTY_WINDOW_PUNCT: self._empty_flush}
            if self.aggregate_evicted_partitions:
                handlers[PARTITION_EVICTION] = self._flush
        else:
            # CountAll (or a function that may read it) needs the window's tuple count; the
            # incremental state needs every insertion anyway.
            self._counts_total = self._incremental or self._needs_scope
            handlers = {EVICTION: self._sliding_evict, TRIGGER: self._sliding_trigger,
                        INITIAL_FULL: self._initial_full, PARTITION_EVICTION: self._partition_evicted}
            spec = window.spec
            if (self._incremental and not self._needs_scope
                    and isinstance(spec.trigger, (TimePolicy, CountPolicy))
                    and isinstance(spec.eviction, (TimePolicy, CountPolicy))):
                # Count or time eviction (FIFO), a count or time trigger: no INSERTION or
                # EVICTION events at all; each trigger catches up with the window's eviction
                # count (`_trigger_caught_up`), and a C++ time-evicting window with a time
                # trigger, with no EVICTION listener, evicts lazily.
                self._counts_total = False
                self._evicted_count = window.evicted_count
                trigger = self._trigger_step if self._key_of is None else self._trigger_caught_up
                handlers = {TRIGGER: trigger, INITIAL_FULL: self._initial_full,
                            PARTITION_EVICTION: self._partition_evicted}
                if self._key_of is None and self._run_rows is not None:
                    runs = SumRuns(self._run_rows, results_submit(self, 0))
            elif self._incremental and self._key_of is None:  # one group: handlers of its own
                handlers.update({INSERTION: self._insert_single, EVICTION: self._evict_single,
                                 TRIGGER: self._trigger_single})
            elif self._incremental:
                handlers[INSERTION] = self._insert
            elif self._counts_total:
                handlers[INSERTION] = self._count_insertion
        self._handlers = handlers
        by_handler: dict[Any, set[EventType]] = {}
        for etype, handler in handlers.items():
            by_handler.setdefault(handler, set()).add(etype)
        for handler, types in by_handler.items():
            window.register_listener(handler, types)
        if runs is not None and window.register_trigger_run(self._trigger_run, handlers[TRIGGER]):
            self._runs = runs

    def _make_accs(self) -> list[Accumulator]:
        return [make() for make in self._acc_makers]

    # ----------------------------------------------------------------- events

    def on_window_event(self, event: StreamWindowEvent[Any], port: int) -> None:
        """Any window event, for a host that calls it: the handler `setup` registered for its
        type (the window calls those directly)."""
        if not self._handlers:
            raise RuntimeError("Aggregate: a window event arrived before setup()")
        handler = self._handlers.get(event.type)
        if handler is not None:
            handler(event)

    def on_punct(self, punct: Punct, port: int) -> None:
        """Window marks: consumed by a punct() window (the runtime gives them to it first),
        ignored otherwise; final: pending windows are not flushed."""

    # tumbling

    def _flush(self, event: StreamWindowEvent[Any]) -> None:
        """A tumble (EVICTION) or, with aggregate_evicted_partitions, a PARTITION_EVICTION."""
        tuples = event.tuples
        self._aggregate(tuples, len(tuples), None)

    def _flush_one(self, event: StreamWindowEvent[Any]) -> None:
        """A tumble (EVICTION) without group_by or a Scope: `_aggregate`'s one group, its row
        and mark in one call (`result_submit`)."""
        tuples = event.tuples
        if tuples:
            try:
                row = self._build(tuples, None, None, None)
            except Exception as exc:
                self._name_failed_output(exc)
                raise
            self._result(row)
        else:
            self.submit_punct(WINDOW_MARK)

    def _empty_flush(self, event: StreamWindowEvent[Any]) -> None:
        self.submit_punct(WINDOW_MARK)

    # sliding

    def _insert_single(self, event: StreamWindowEvent[Any]) -> None:
        """INSERTION without group_by: the tuple joins its partition's one group."""
        self._total += 1
        key = event.partition
        state = self._states.get(key)
        try:
            if state is None:  # a new partition, or one whose state was dropped: from the window
                self._rebuild(key, self._window.contents(key))
                return
            t = event.tuples[0]
            single = state.single
            assert single is not None
            single.tuples.append(t)
            for add in single.adds:
                add(t)
        except Exception:
            self._forget(key)

    def _evict_single(self, event: StreamWindowEvent[Any]) -> None:
        """EVICTION without group_by (incremental): the oldest tuples leave the group."""
        tuples = event.tuples
        self._total -= len(tuples)
        key = event.partition
        state = self._states.get(key)
        if state is None:
            return
        single = state.single
        assert single is not None
        order = single.tuples
        removes = single.removes
        try:
            for t in tuples:
                if not order or order[0] is not t:  # not the oldest: the state is stale
                    self._resyncs += 1
                    del self._states[key]
                    return
                order.popleft()
                for remove in removes:
                    remove(t)
        except Exception:
            self._forget(key)
            return
        if not order:
            del self._states[key]

    def _trigger_single(self, event: StreamWindowEvent[Any]) -> None:
        """TRIGGER without group_by (incremental): the group's row from its accumulators."""
        key = event.partition
        if key not in self._full and not self.aggregate_incomplete_windows:
            return
        tuples = event.tuples
        if not tuples:
            self.submit_punct(WINDOW_MARK)
            return
        try:
            state = self._states.get(key)
            if state is None:
                state = self._rebuild(key, tuples)
            else:
                order = state.order
                if len(order) != len(tuples) or order[0] is not tuples[0] or order[-1] is not tuples[-1]:
                    self._resyncs += 1
                    state = self._rebuild(key, tuples)
            single = state.single
            assert single is not None
            order = single.tuples
            scope = (Scope(self._total, 1, [len(order)] if self._needs_sizes else [], False, None)
                     if self._needs_scope else None)
            self._result(self._build(order, single.accs, scope, None))
        except Exception as exc:
            self._name_failed_output(exc)
            self._forget(key)  # (it may be half updated)
            raise

    def _insert(self, event: StreamWindowEvent[Any]) -> None:
        self._total += 1
        key = event.partition
        state = self._states.get(key)
        try:
            if state is None:
                self._rebuild(key, self._window.contents(key))
            else:
                state.insert(event.tuples[0])
        except Exception:
            self._forget(key)

    def _forget(self, key: Hashable) -> None:
        """The mirror of partition ``key`` failed half-way (a function raised on a value): it
        is dropped and the error not raised here. The next trigger recomputes from the window
        and meets the same value there, so results and failures are those of
        ``incremental=False``; a mirror half updated would give a row counting a tuple that
        its sums left out."""
        self._states.pop(key, None)

    def _count_insertion(self, event: StreamWindowEvent[Any]) -> None:
        self._total += 1

    def _sliding_evict(self, event: StreamWindowEvent[Any]) -> None:
        tuples = event.tuples
        if self._counts_total:
            self._total -= len(tuples)
        if not self._incremental:
            return
        key = event.partition
        state = self._states.get(key)
        if state is not None:
            try:
                evicted = state.evict(tuples)
            except Exception:
                self._forget(key)
                return
            if not evicted:
                self._resyncs += 1
                del self._states[key]
            elif not state.order:
                del self._states[key]

    def _sliding_trigger(self, event: StreamWindowEvent[Any]) -> None:
        key = event.partition
        if key not in self._full and not self.aggregate_incomplete_windows:
            return
        tuples = event.tuples
        if not tuples:
            self.submit_punct(WINDOW_MARK)
            return
        if not self._incremental:
            self._aggregate(tuples, self._total, None)
            return
        try:
            state = self._states.get(key)
            if state is None or not state.matches(tuples):
                self._resyncs += state is not None
                state = self._rebuild(key, tuples)
            self._emit(state.output_groups(), self._total, None)
        except Exception as exc:
            self._name_failed_output(exc)
            self._forget(key)  # (it may be half updated)
            raise

    def _trigger_step(self, event: StreamWindowEvent[Any]) -> None:
        """`_trigger_caught_up` without group_by, its most common case first: a full window's
        step (one tuple out, one in, as counted by the window) of a partition already mirrored
        and allowed to output. Anything else takes `_trigger_caught_up`."""
        key = event.partition
        state = self._states.get(key)
        if state is not None and (self.aggregate_incomplete_windows or key in self._full):
            tuples = event.tuples
            order = state.order
            n = len(tuples)
            # After the step the mirror must start as the window does (`_trigger_caught_up`'s
            # check, made before anything changes: a mismatch is left to it, which rebuilds).
            if len(order) == n and (n == 1 or order[1] is tuples[0]):
                evicted = self._evicted_count(key)
                if evicted - state.evicted == 1:
                    old = order.popleft()
                    t = tuples[-1]
                    order.append(t)
                    single = state.single
                    assert single is not None  # no group_by
                    try:
                        for replace in single.replaces:
                            replace(old, t)
                        state.evicted = evicted
                        self._result(self._build(order, single.accs, None, None))
                    except Exception as exc:
                        self._name_failed_output(exc)
                        self._forget(key)  # (half updated)
                        raise
                    return
        self._trigger_caught_up(event)

    def _trigger_run(self, key: Hashable, batch: Sequence[Any], tuples: Any, size: int) -> bool:
        """A full window's batch of triggers at once (`SumRuns`), when the partition is
        mirrored up to the window's last eviction and allowed to output."""
        state = self._states.get(key)
        runs = self._runs
        if runs is None or state is None or not (self.aggregate_incomplete_windows
                                                 or key in self._full):
            return False
        order = state.order
        single = state.single
        if (single is None or len(order) != size or order[0] is not tuples[0]
                or order[-1] is not tuples[-1] or state.evicted != self._evicted_count(key)):
            return False
        return runs.take(state, order, single.accs or [], batch, size)

    def _trigger_caught_up(self, event: StreamWindowEvent[Any]) -> None:
        """TRIGGER of a count- or time-evicting window with a count or time trigger, the only
        event it needs.

        Since the last trigger of the partition its ``out`` oldest tuples left by
        eviction (the difference of the window's `evicted_count` counts) and the rest of
        the change is new tuples at the end, so the mirror drops ``out`` tuples from its
        front and takes the window's newest ``n - m + out`` (all of the window when more
        arrived and left than it holds). Counting, not comparing tuple objects, keeps it
        exact when one tuple object arrives many times. Any doubt (a first trigger, a count
        that does not fit, ends that do not match) rebuilds it from the window."""
        key = event.partition
        states = self._states
        if key not in self._full and not self.aggregate_incomplete_windows:
            states.pop(key, None)
            return
        tuples = event.tuples
        n = len(tuples)
        if not n:
            states.pop(key, None)
            self.submit_punct(WINDOW_MARK)
            return
        try:
            evicted = self._evicted_count(key)
            state = states.get(key)
            if state is None:
                state = self._rebuild(key, tuples)
            else:
                order = state.order
                m = len(order)
                out = evicted - state.evicted
                k = n - m + out
                single = state.single
                if out == 1 and k == 1 and single is not None:  # a full window's step: one in, one out
                    old = order.popleft()
                    t = tuples[-1]
                    order.append(t)
                    for replace in single.replaces:
                        replace(old, t)
                elif out >= m >= 0 and k >= n:  # all it mirrored left (and maybe tuples that came later)
                    state.catch_up(m, tuples)
                elif out >= 0 and k >= 0:  # (then out < m and k < n: k - n == out - m)
                    new: Sequence[Any]
                    if k <= 1:
                        new = (tuples[-1],) if k else ()
                    else:
                        new = list(islice(reversed(tuples), k))
                        new.reverse()
                    state.catch_up(out, new)
                if len(order) != n or order[0] is not tuples[0] or order[-1] is not tuples[-1]:
                    self._resyncs += 1
                    state = self._rebuild(key, tuples)
            state.evicted = evicted
            single = state.single
            if single is None:
                self._emit(state.output_groups(), 0, None)
            else:  # (`_emit` of the one group, inlined)
                self._result(self._build(single.tuples, single.accs, None, None))
        except Exception as exc:
            self._name_failed_output(exc)
            self._forget(key)  # (it may be half updated)
            raise

    def _initial_full(self, event: StreamWindowEvent[Any]) -> None:
        self._full.add(event.partition)

    def _partition_evicted(self, event: StreamWindowEvent[Any]) -> None:
        if self._counts_total:
            self._total -= len(event.tuples)
        self._states.pop(event.partition, None)
        self._full.discard(event.partition)

    # timeInterval

    def _pane_trigger_single(self, event: StreamWindowEvent[Any]) -> None:
        """A pane partition's TRIGGER without group_by: its row, then a mark.

        A pane raises INITIAL_FULL for each of its partitions when it completes, and at once
        its ON_COMPLETE TRIGGER for the same partitions (nothing triggers a pane before it
        completes, so every partition it holds is updated): the trigger records the partition
        as full itself, an event a result fewer."""
        key = event.partition
        full = self._full
        if event.pane_timing is ON_COMPLETE:  # type: ignore[attr-defined]  # a PaneEvent
            full.add(key)
        elif key not in full and not self.aggregate_incomplete_windows:
            return
        tuples = event.tuples
        if not tuples:
            self.submit_punct(WINDOW_MARK)
            return
        try:
            row = self._build(tuples, None, None, event)
        except Exception as exc:
            self._name_failed_output(exc)
            raise
        self._result(row)

    def _pane_trigger(self, event: StreamWindowEvent[Any]) -> None:
        if event.partition in self._full or self.aggregate_incomplete_windows:
            pane = event if isinstance(event, PaneEvent) else None
            self._aggregate(event.tuples, len(event.tuples), pane)

    # ------------------------------------------------------------ aggregation

    def _rebuild(self, key: Hashable, tuples: Iterable[Any]) -> _Partition:
        state = _Partition(self._key_of, self._make_accs)
        state.catch_up(0, tuples if isinstance(tuples, Sequence) else list(tuples))
        self._states[key] = state
        return state

    def _aggregate(self, tuples: Sequence[Any], count_all: int, pane: PaneEvent[Any] | None) -> None:
        """Recompute: group ``tuples`` (first-occurrence order) and output them, then a mark."""
        if not tuples:
            self.submit_punct(WINDOW_MARK)
            return
        key_of = self._key_of
        groups: list[Sequence[Any]]
        if key_of is None:
            groups = [tuples]
        else:
            groups = _grouped(key_of, tuples)
        build = self._build
        submit = self.submit
        scope = self._scope(groups, count_all, pane) if self._needs_scope else None
        try:
            for members in groups:
                submit(build(members, None, scope, pane))
        except Exception as exc:
            self._name_failed_output(exc)
            raise
        self.submit_punct(WINDOW_MARK)

    def _emit(self, groups: list[_Group], count_all: int, pane: PaneEvent[Any] | None) -> None:
        """Output incrementally kept groups, then a mark."""
        build = self._build
        submit = self.submit
        scope = (self._scope([g.tuples for g in groups], count_all, pane) if self._needs_scope
                 else None)
        try:
            for g in groups:
                submit(build(g.tuples, g.accs, scope, pane))
        except Exception as exc:
            self._name_failed_output(exc)
            raise
        self.submit_punct(WINDOW_MARK)

    def _scope(self, groups: Sequence[Sequence[Any]], count_all: int,
               pane: PaneEvent[Any] | None) -> Scope:
        sizes = [len(g) for g in groups] if self._needs_sizes else []
        return Scope(count_all, len(groups), sizes, self._key_of is not None, pane)

    def _build_reference(self, tuples: Sequence[Any], accs: list[Accumulator] | None,
                         scope: Scope | None, pane: Any) -> dict[str, Any]:
        """One group's row, column by column: the reference the compiled builders follow."""
        assert scope is not None  # the reference always gets one
        row: dict[str, Any] = {}
        for attr, kind, obj, index in self._plan:
            if kind == _INCREMENTAL:
                acc = accs[index] if accs is not None else None
                row[attr] = obj.compute(tuples, scope) if acc is None or acc.broken else acc.result()
            elif kind == _FUNCTION:
                row[attr] = obj.compute(tuples, scope)
            elif kind == _EXPRESSION:
                row[attr] = obj(tuples[-1])
            else:
                row[attr] = obj
        return row

    def _name_failed_output(self, exc: BaseException) -> None:
        """Name the output attribute whose function raised ``exc`` in its message ("'<' not
        supported ..." alone did not say which of the clause's functions compared). Found from
        the traceback, on this error path only: nothing is run again, the rows' and the
        accumulators' paths keep their speed. Once per exception (handlers nest)."""
        if exc.__dict__.get("_riverbed_output_named"):
            return
        what = self._failed_output(exc)
        if what is not None:
            exc.__dict__["_riverbed_output_named"] = True
            name_failure(exc, what)

    def _failed_output(self, exc: BaseException) -> str | None:
        plan = self._plan
        index = failed_column(exc, self._build)
        if index is not None and index < len(plan):
            attr, kind, obj, _acc = plan[index]
            return _describe(attr, kind, obj)
        reference = Aggregate._build_reference.__code__
        tb = exc.__traceback__
        while tb is not None:
            frame = tb.tb_frame
            if frame.f_code is reference:  # the column loop: its current column
                names = frame.f_locals
                return (None if "attr" not in names
                        else _describe(names["attr"], names.get("kind"), names.get("obj")))
            owner = frame.f_locals.get("self")
            if isinstance(owner, (SumAccumulator, MinAccumulator)):  # a mirror's update
                shared = [acc for _attr, kind, obj, acc in plan
                          if kind == _INCREMENTAL and obj.read is owner.read]
                if shared:  # (Sum and Average of one expression share one accumulator)
                    return " and ".join(_describe(attr, kind, obj) for attr, kind, obj, acc in plan
                                        if kind == _INCREMENTAL and acc == shared[0])
            tb = tb.tb_next
        return None

    # ------------------------------------------------------------------ state

    def snapshot(self) -> Any:
        """Which partitions have been full, and the window's tuple count, as plain data."""
        total = self._total
        if self._handlers.get(TRIGGER) in (self._trigger_caught_up, self._trigger_step):
            # no events count the tuples
            window = self._window
            total = (sum(len(window.contents(k)) for k in window.partitions())
                     if window.spec.partitioned else len(window.contents()))
        return {"format": _FORMAT, "full": [encode_partition_key(k) for k in self._full],
                "total": total}

    def restore(self, state: Any) -> None:
        """Take back a `snapshot`. Accumulators are rebuilt from the window as it is restored."""
        try:
            if state["format"] != _FORMAT:
                raise ValueError(f"format {state['format']!r}, expected {_FORMAT!r}")
            full = {decode_partition_key(k) for k in state["full"]}
            total = state["total"]
            if isinstance(total, bool) or not isinstance(total, int) or total < 0:
                raise ValueError(f"total {total!r} is not a tuple count")
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"Aggregate: cannot restore from {type(state).__name__} state: {exc}") from None
        self._reset()
        self._full = full
        self._total = total

    def reset_to_initial_state(self) -> None:
        self._reset()


def _describe(attr: str, kind: Any, obj: Any) -> str:
    """An output column as the clause gave it, for a message."""
    if kind == _EXPRESSION:
        return f"output {attr!r} = {getattr(obj, '__qualname__', repr(obj))} (of the last tuple)"
    return f"output {attr!r} = " + _FUNCTION_AT.sub(r"\1", repr(obj))  # (no address: stable)


def _group_by(group_by: object) -> tuple[Callable[[Any], Hashable] | None, list[str]]:
    if group_by is None:
        return None, []
    if isinstance(group_by, str):
        return operator.itemgetter(group_by), [group_by]
    if callable(group_by):
        return group_by, []
    if isinstance(group_by, Sequence) and group_by and all(isinstance(n, str) for n in group_by):
        names = list(group_by)
        return operator.itemgetter(*names), names
    raise OperatorParameterError(
        f"Aggregate: group_by={group_by!r}: expected an attribute name, a non-empty sequence of "
        "names, or a function of the tuple")


def _columns(output: object, copy: object, group_names: list[str]) -> list[tuple[str, int, Any]]:
    if output is None:
        output = {}
    if not isinstance(output, Mapping) or not all(isinstance(k, str) for k in output):
        raise OperatorParameterError(
            f"Aggregate: output={output!r}: expected a mapping of attribute names to output "
            "functions, functions of the tuple, or constants")
    if isinstance(copy, Schema):
        copy_names = list(copy.names)
    elif isinstance(copy, str) or not isinstance(copy, Iterable):
        raise OperatorParameterError(
            f"Aggregate: copy={copy!r}: expected a sequence of attribute names or a Schema")
    else:
        copy_names = list(copy)
        if not all(isinstance(n, str) for n in copy_names):
            raise OperatorParameterError(f"Aggregate: copy={copy!r}: attribute names must be strings")
    columns: list[tuple[str, int, Any]] = []
    seen: set[str] = set()
    for attr in [*copy_names, *group_names, *output]:
        if attr in seen:
            continue
        seen.add(attr)
        value = output.get(attr, Last(attr))
        if isinstance(value, type) and issubclass(value, AggregateFunction):
            raise OperatorParameterError(
                f"Aggregate: output {attr!r} = {value.__name__}: the function, not a call of it; "
                f"did you mean {value.__name__}({'' if issubclass(value, NoArgument) else '...'})?")
        if isinstance(value, Operator) or (isinstance(value, type) and issubclass(value, Operator)):
            raise OperatorParameterError(
                f"Aggregate: output {attr!r} = {value!r}: an operator, not an output function "
                "(a function of the group's tuples is CustomAggregate(...))")
        if isinstance(value, AggregateFunction):
            columns.append((attr, _FUNCTION, value))
        elif callable(value):
            columns.append((attr, _EXPRESSION, value))
        else:
            columns.append((attr, _CONSTANT, value))
    if not columns:
        raise OperatorParameterError(
            "Aggregate: nothing to output; give output= assignments, copy= attribute names or "
            "group_by= attribute names")
    return columns
