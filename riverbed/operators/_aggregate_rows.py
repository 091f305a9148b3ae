"""Aggregate's output rows, compiled: one Python function per output clause.

Aggregate builds one dict per group at every flush or trigger. Walking the
clause column by column (what kind is it? call its ``compute``) costs a
dispatch and a call or two per column, per group, which at one group per
trigger is most of the operator's time. Instead, at setup the clause becomes
the source of one function, ``build(tuples, accs, scope)``, returning the
row as a single dict display::

    def build(tuples, accs, scope, pane):
        last = tuples[-1]
        a0 = accs[0]
        return {name0: last[attr0], name1: a0.result() if not a0.broken else fn1.compute(tuples, scope),
                name2: sum_of((v0 := list(map(read_v0, tuples)))), name3: average_of(v0), ...}

Only names and indices are written into the source; every attribute name,
function and constant reaches it through the factory's environment, so no
user text is ever compiled. The SPL functions whose result is a plain
expression of the group are written out (`Last`, `First`, `Count`), the
values an expression reads are read once per group and shared (``Sum(v)``
and ``Average(v)`` of one ``v``), whole-list Sum, Average, Min and Max use
the builtins or `math.fsum` where that gives the identical value, and any
other function, including subclasses of the SPL ones, is called through its
``compute``. ``Aggregate._reference`` switches back to the column loop,
which property tests compare this against.
"""

from __future__ import annotations

import linecache
import operator
from collections.abc import Callable, Sequence
from itertools import count
from typing import Any

from ._aggregate_functions import (
    AggregateFunction,
    ArgMax,
    ArgMin,
    Average,
    Collect,
    CollectArgMax,
    CollectArgMin,
    CollectDistinct,
    Count,
    CountByDistinct,
    CountDistinct,
    Custom,
    First,
    FloatAverage,
    IntervalEnd,
    IntervalStart,
    Last,
    Max,
    MaxCount,
    Min,
    MinCount,
    PaneIndex,
    PaneTimingOf,
    PopulationStdDev,
    SampleStdDev,
    Sum,
)
from ._aggregate_functions import (
    Any as AnyOf,
)
from ._aggregate_math import (
    average_values,
    extreme,
    float_average_values,
    float_total,
    float_total_mean,
    sum_values,
)

__all__ = ["Column", "RowBuilder", "compile_rows", "compiled", "expression_key", "failed_column",
           "reads_scope"]

Column = tuple[str, str, Any, int]
"""(attribute, kind, object, accumulator index): kind is "function", "incremental",
"expression" or "constant"; the index is the column's accumulator (incremental only)."""

RowBuilder = Callable[[Sequence[Any], Any, Any, Any], dict[str, Any]]

# Functions of this package whose compute() never reads the Scope: with only these (and the
# incremental ones of the same kind) an emit needs no Scope at all.
_SCOPE_FREE: frozenset[type] = frozenset({
    Last, AnyOf, First, Collect, CollectDistinct, CountByDistinct, CountDistinct, Sum, Average,
    FloatAverage, Min,
    Max, MinCount, MaxCount, SampleStdDev, PopulationStdDev, ArgMin, ArgMax, CollectArgMin,
    CollectArgMax, Count, Custom})
_ORDERED_SCALARS = (int, float, str)
# Sum and the Averages: one expression's float total is shared between them.
_SUMMED = (Sum, Average, FloatAverage)
# The whole-list functions written out as a call on the values list.
_WHOLE_LIST: dict[type, str] = {Sum: "sum_of", Average: "average_of",
                                FloatAverage: "float_average_of", Min: "min_of", Max: "max_of"}
_serial = count()


# The pane functions, written out as the pane event's attribute (the builder gets the event).
_PANE_ATTRIBUTES: dict[type, str] = {IntervalStart: "interval_start", IntervalEnd: "interval_end",
                                     PaneIndex: "pane_index", PaneTimingOf: "pane_timing"}


def reads_scope(columns: Sequence[Column]) -> bool:
    """Whether some column's function may read the Scope (then every emit builds one)."""
    return any(kind in ("function", "incremental") and type(obj) not in _SCOPE_FREE
               and not (kind == "function" and type(obj) in _PANE_ATTRIBUTES)
               for _attr, kind, obj, _index in columns)


def _min_of(values: list[Any]) -> Any:
    """`extreme` with ``<``; the builtin where it does the same comparisons (one scalar type)."""
    if type(values[0]) in _ORDERED_SCALARS and len(set(map(type, values))) == 1:
        return min(values)
    return extreme(values, operator.lt, "Min")


def _max_of(values: list[Any]) -> Any:
    if type(values[0]) in _ORDERED_SCALARS and len(set(map(type, values))) == 1:
        return max(values)
    return extreme(values, operator.gt, "Max")


def expression_key(fn: Any) -> Any:
    """What identifies an aggregate function's expression: its attribute name, else the
    function reading it (the same object read once for every column using it)."""
    return fn.value if isinstance(fn.value, str) else id(fn.value)


def _sum_of(values: list[Any]) -> Any:
    return sum_values(values, "Sum")


def compile_rows(columns: Sequence[Column]) -> RowBuilder:
    """``build(tuples, accs, scope, pane)`` for these columns: the row of one non-empty group
    (``accs`` its accumulators if it has incremental columns, ``scope`` a `Scope` if
    `reads_scope`, ``pane`` the pane event on a timeInterval window)."""
    env: dict[str, Any] = {"sum_of": _sum_of, "average_of": average_values, "min_of": _min_of,
                           "max_of": _max_of, "float_total": float_total,
                           "float_total_mean": float_total_mean,
                           "float_average_of": float_average_values}
    head: list[str] = []
    items: list[str] = []
    reads: dict[Any, str] = {}  # an expression -> the name of its values list
    totals: set[str] = set()  # values lists whose float total is already taken (``t0``...)
    # Sum and Average of one expression share its float total (`float_total`): one type check
    # and one fsum for both, where `sum_of` and `average_of` each took their own.
    summed: dict[Any, int] = {}
    for _attr, kind, obj, _index in columns:
        if kind == "function" and type(obj) in _SUMMED:
            key = expression_key(obj)
            summed[key] = summed.get(key, 0) + 1
    bound: set[str] = set()  # accumulators already taken from ``accs``
    uses_last = False

    def values_of(fn: Any) -> str:
        """The values list of ``fn``'s expression: read where first needed (the dict display
        evaluates left to right, so a failing read fails at the same column as the loop's)."""
        key = expression_key(fn)
        name = reads.get(key)
        if name is not None:
            return name
        name = reads[key] = f"v{len(reads)}"
        env[f"read_{name}"] = fn.read
        return f"({name} := list(map(read_{name}, tuples)))"

    for i, (attr, kind, obj, index) in enumerate(columns):
        env[f"name{i}"] = attr
        cls = type(obj)
        if kind == "constant":
            env[f"c{i}"] = obj
            expr = f"c{i}"
        elif kind == "expression":
            env[f"f{i}"] = obj
            uses_last = True
            expr = f"f{i}(last)"
        elif kind == "incremental":
            env[f"fn{i}"] = obj
            acc = f"a{index}"
            if acc not in bound:
                bound.add(acc)
                head.append(f"    {acc} = accs[{index}]")
            # Sum and Average of one expression share a `SumAccumulator` (see Aggregate.setup).
            result = {Sum: "total", Average: "mean", FloatAverage: "float_mean"}.get(cls, "result")
            expr = f"({acc}.{result}() if not {acc}.broken else fn{i}.compute(tuples, scope))"
        elif cls in (Last, AnyOf, First):
            where = "last" if cls is not First else "tuples[0]"
            uses_last |= cls is not First
            if isinstance(obj.value, str):
                env[f"attr{i}"] = obj.value
                expr = f"{where}[attr{i}]"
            else:
                env[f"f{i}"] = obj.read
                expr = f"f{i}({where})"
        elif cls is Count:
            expr = "len(tuples)"
        elif cls in _PANE_ATTRIBUTES:
            expr = f"pane.{_PANE_ATTRIBUTES[cls]}"
        elif cls in _SUMMED and summed[expression_key(obj)] > 1:
            values = values_of(obj)
            name = reads[expression_key(obj)]
            total = f"t{name[1:]}"
            if total in totals:
                taken = f"{total} is not None"
            else:
                totals.add(total)
                taken = f"({total} := float_total({values})) is not None"
            if cls is Sum:
                expr = f"({total} if {taken} else sum_of({name}))"
            else:  # (a float total: every value a float, so a FloatAverage's mean too)
                mean = "average_of" if cls is Average else "float_average_of"
                expr = f"(float_total_mean({name}, {total}) if {taken} else {mean}({name}))"
        elif cls in _WHOLE_LIST:
            values = values_of(obj)
            expr = _WHOLE_LIST[cls] + f"({values})"
        else:
            assert isinstance(obj, AggregateFunction), obj
            env[f"fn{i}"] = obj
            expr = f"fn{i}.compute(tuples, scope)"
        items.append(f"name{i}: {expr}")
    lines = ["def build(tuples, accs, scope, pane):"]
    if uses_last:
        lines.append("    last = tuples[-1]")
    lines += head
    lines.append("    return {" + ", ".join(items) + "}")
    build: RowBuilder = compiled("\n".join(lines) + "\n", "row builder", env)["build"]
    # Where each column's item lies on the return line (1-based line, columns), so a failure
    # can be traced to its output attribute (`failed_column`) without running anything again.
    spans, start = [], len("    return {")
    for item in items:
        spans.append((start, start + len(item)))
        start += len(item) + 2
    build.__dict__["column_spans"] = (len(lines), spans)
    return build


def failed_column(exc: BaseException, build: Any) -> int | None:
    """The index of the column whose item of the compiled ``build`` raised ``exc`` (found from
    the traceback's position in the generated return line), or None if it did not raise there.
    For error messages only: nothing is evaluated again."""
    found = getattr(build, "column_spans", None)
    code = getattr(build, "__code__", None)
    if found is None or code is None:
        return None
    line, spans = found
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code is code:
            for i, position in enumerate(code.co_positions()):
                if i == tb.tb_lasti // 2:  # (one position per 2-byte code unit)
                    at_line, _end, col, _end_col = position
                    if at_line != line or col is None:
                        return None
                    return next((c for c, (a, b) in enumerate(spans) if a <= col < b), None)
            return None
        tb = tb.tb_next
    return None


def compiled(source: str, what: str, env: dict[str, Any]) -> dict[str, Any]:
    """Run generated ``source`` in a copy of ``env`` (names and indices only: see the module's
    docstring) and register it with `linecache`, so tracebacks through it show its lines."""
    filename = f"<riverbed Aggregate {what} {next(_serial)}>"
    namespace = dict(env)
    exec(compile(source, filename, "exec"), namespace)
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    return namespace
