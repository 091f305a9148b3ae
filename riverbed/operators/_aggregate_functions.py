"""The output functions of SPL's ``Aggregate``: Count, Sum, Average, Min, ArgMax, Custom...

In SPL an Aggregate output clause assigns each output attribute an
aggregation: ``avg = Average(price)``. Here each such function is a small
frozen value naming what to compute, over the tuples of one *group* (one
group of one partition at a flush or trigger; the whole partition without
``group_by``)::

    Aggregate(output={"avg": Average("price"), "n": Count(), "top": ArgMax("price", "sym")})

Arguments are an attribute name or a function of the tuple (an SPL
expression): ``Sum("qty")``, ``Sum(lambda t: t["qty"] * t["price"])``.

Every function can *recompute* its result from the group's tuples
(`AggregateFunction.compute`). Sum, Average, Min and Max can also be kept
*incrementally* (`AggregateFunction.accumulator`): a sliding Aggregate
updates them on each insertion and eviction instead of rescanning the window
on every trigger. An accumulator that meets a value it cannot handle
incrementally (a string to concatenate, a list to add element-wise, a NaN
among ordered values) marks itself ``broken`` and the group is recomputed
instead, so both ways always give the same result.

Behaviour follows IBM's ``Aggregate.h``/``TumblingAggregate.h``, with these
deliberate choices, written out on each function:

* float sums and averages are exact sums rounded once (``math.fsum``
  quality) instead of IBM's left-to-right float additions and running
  mean: an incremental sum that adds and subtracts floats would otherwise
  drift without bound, and rounding once lets the incremental and the
  recomputed result agree bit for bit. Integer sums are exact integers.
* "unspecified order" results (CollectDistinct, CountByDistinct,
  CollectArgMin/Max, CountByGroup) come in first-occurrence order, which
  also keeps CountByDistinct aligned with CollectDistinct.
* MinCount and MaxCount are swapped, exactly as IBM's code is.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any as _Any
from typing import ClassVar, NamedTuple, Protocol

from ..windows import PaneEvent, PaneTiming
from ._aggregate_math import (
    AverageAccumulator,
    FloatAverageAccumulator,
    MaxAccumulator,
    MinAccumulator,
    SumAccumulator,
    arg_extreme,
    average_values,
    collect_arg_extreme,
    count_extreme,
    distinct,
    extreme,
    float_average_values,
    freeze,
    squared_deviations,
    sum_values,
)
from ._params import OperatorParameterError

__all__ = [
    "Accumulator",
    "AggregateFunction",
    "Any",
    "ArgMax",
    "ArgMin",
    "Average",
    "Collect",
    "CollectArgMax",
    "CollectArgMin",
    "CollectDistinct",
    "Count",
    "CountAll",
    "CountByDistinct",
    "CountByGroup",
    "CountDistinct",
    "CountGroups",
    "Custom",
    "First",
    "FloatAverage",
    "IntervalEnd",
    "IntervalStart",
    "Last",
    "Max",
    "MaxCount",
    "Min",
    "MinCount",
    "NoArgument",
    "PaneIndex",
    "PaneTimingOf",
    "PopulationStdDev",
    "SampleStdDev",
    "Scope",
    "Sum",
]

Expr = str | Callable[[_Any], _Any]
"""An SPL expression over an input tuple: an attribute name, or a function of the tuple."""


class Scope(NamedTuple):
    """What a function sees at output time besides its own group's tuples.

    ``count_all`` is SPL's ``CountAll()``: the tuples of the whole window on
    a sliding window (all partitions), of the flushed partition on a
    tumbling window, of the pane partition on a timeInterval window.
    ``group_sizes`` lists each group's size in output order (filled only
    when a ``CountByGroup`` needs it); ``grouped`` says whether ``group_by``
    is set; ``pane`` is the pane event being aggregated (timeInterval only).
    """

    count_all: int
    n_groups: int
    group_sizes: Sequence[int]
    grouped: bool
    pane: PaneEvent[_Any] | None = None


class Accumulator(Protocol):
    """Incremental state of one function over one group, updated in arrival (FIFO) order.

    ``remove`` is always called for the oldest tuple still added. Once
    ``broken`` is true the result comes from `AggregateFunction.compute`.
    """

    broken: bool

    def add(self, tup: _Any) -> None: ...

    def remove(self, tup: _Any) -> None: ...

    def result(self) -> _Any: ...


class AggregateFunction:
    """Base class of output functions: ``compute`` over a group's tuples (oldest first)."""

    __slots__ = ()

    needs_pane: ClassVar[bool] = False  # only meaningful on a timeInterval window
    needs_group_sizes: ClassVar[bool] = False

    def compute(self, tuples: Sequence[_Any], scope: Scope) -> _Any:
        """The result for one non-empty group."""
        raise NotImplementedError

    def accumulator(self) -> Accumulator | None:
        """A fresh incremental accumulator, or None when only recomputing is possible."""
        return None

    def attributes(self) -> tuple[str, ...]:
        """The attributes it reads by name (checked against a declared input schema)."""
        return ()


def _reader(expr: object, fname: str) -> Callable[[_Any], _Any]:
    if isinstance(expr, str):
        return operator.itemgetter(expr)
    if callable(expr):
        return expr
    raise OperatorParameterError(
        f"{fname}({expr!r}): the argument must be an attribute name or a function of the tuple")


# --------------------------------------------------------------- no argument


@dataclass(frozen=True, slots=True)
class NoArgument(AggregateFunction):
    pass


class Count(NoArgument):
    """``Count()``: the number of tuples in the group (in the partition without group_by)."""

    __slots__ = ()

    def compute(self, tuples: Sequence[_Any], scope: Scope) -> int:
        return len(tuples)


class CountAll(NoArgument):
    """``CountAll()``: the number of tuples in the window, whatever the groups.

    Sliding windows: every partition's tuples (IBM's general path counts the
    whole window storage). Tumbling windows: the flushed partition's tuples
    (IBM's optimised tumbling path; its general path, used only when
    ``Custom`` meets grouping or partitioning, would count every partition).
    timeInterval: the pane partition's tuples.
    """

    __slots__ = ()

    def compute(self, tuples: Sequence[_Any], scope: Scope) -> int:
        return scope.count_all


class CountGroups(NoArgument):
    """``CountGroups()``: the number of groups in this output batch (1 without group_by)."""

    __slots__ = ()

    def compute(self, tuples: Sequence[_Any], scope: Scope) -> int:
        return scope.n_groups


class CountByGroup(NoArgument):
    """``CountByGroup()``: each group's size, in output order (IBM: hash order).

    Without group_by IBM returns ``[CountAll()]``, and so do we.
    """

    __slots__ = ()
    needs_group_sizes = True

    def compute(self, tuples: Sequence[_Any], scope: Scope) -> list[int]:
        return list(scope.group_sizes) if scope.grouped else [scope.count_all]


class IntervalStart(NoArgument):
    """SPL ``intervalStart()`` in a timeInterval Aggregate: the pane's start, in ticks."""

    __slots__ = ()
    needs_pane = True

    def compute(self, tuples: Sequence[_Any], scope: Scope) -> int:
        assert scope.pane is not None  # checked when the operator is set up
        return scope.pane.interval_start


class IntervalEnd(NoArgument):
    """SPL ``intervalEnd()`` in a timeInterval Aggregate: the pane's end (excluded), in ticks."""

    __slots__ = ()
    needs_pane = True

    def compute(self, tuples: Sequence[_Any], scope: Scope) -> int:
        assert scope.pane is not None
        return scope.pane.interval_end


class PaneIndex(NoArgument):
    """SPL ``paneIndex()``: 0 for a pane's first trigger, then 1, 2, ... for late re-triggers."""

    __slots__ = ()
    needs_pane = True

    def compute(self, tuples: Sequence[_Any], scope: Scope) -> int:
        assert scope.pane is not None
        return scope.pane.pane_index


class PaneTimingOf(NoArgument):
    """SPL ``paneTiming()``: `PaneTiming.ON_COMPLETE` for the first trigger, then ``LATE``."""

    __slots__ = ()
    needs_pane = True

    def compute(self, tuples: Sequence[_Any], scope: Scope) -> PaneTiming:
        assert scope.pane is not None
        return scope.pane.pane_timing


# --------------------------------------------------------------- one argument


@dataclass(frozen=True, slots=True)
class _OfValue(AggregateFunction):
    value: Expr
    read: Callable[[_Any], _Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "read", _reader(self.value, type(self).__name__))

    def attributes(self) -> tuple[str, ...]:
        return (self.value,) if isinstance(self.value, str) else ()

    def values(self, tuples: Iterable[_Any]) -> list[_Any]:
        return list(map(self.read, tuples))


class Last(_OfValue):
    """``Last(v)``: ``v`` of the group's newest tuple. Unassigned output attributes use it."""

    __slots__ = ()

    def compute(self, tuples: Sequence[_Any], scope: Scope) -> _Any:
        return self.read(tuples[-1])


class Any(Last):
    """``Any(v)``: IBM returns the newest tuple's ``v``, i.e. ``Last(v)``."""

    __slots__ = ()


class First(_OfValue):
    """``First(v)``: ``v`` of the group's oldest tuple."""

    __slots__ = ()

    def compute(self, tuples: Sequence[_Any], scope: Scope) -> _Any:
        return self.read(tuples[0])


class Collect(_OfValue):
    """``Collect(v)``: the list of every ``v``, oldest first."""

    __slots__ = ()

    def compute(self, tuples: Sequence[_Any], scope: Scope) -> list[_Any]:
        return self.values(tuples)


class CollectDistinct(_OfValue):
    """``CollectDistinct(v)``: the distinct values of ``v``, in first-occurrence order.

    IBM's order is a hash set's, i.e. unspecified. Values are compared by
    equality; lists and dicts are accepted (compared by content).
    """

    __slots__ = ()

    def compute(self, tuples: Sequence[_Any], scope: Scope) -> list[_Any]:
        return list(distinct(self.values(tuples)).values())


class CountByDistinct(_OfValue):
    """``CountByDistinct(v)``: how many times each distinct ``v`` occurs.

    In first-occurrence order, so aligned element by element with a
    ``CollectDistinct`` of the same expression (IBM aligns the two explicitly
    when they share an output clause; otherwise its order is unspecified).
    """

    __slots__ = ()

    def compute(self, tuples: Sequence[_Any], scope: Scope) -> list[int]:
        counts: dict[Hashable, int] = {}
        for v in self.values(tuples):
            k = freeze(v)
            counts[k] = counts.get(k, 0) + 1
        return list(counts.values())


class CountDistinct(_OfValue):
    """``CountDistinct(v)``: the number of distinct values of ``v``."""

    __slots__ = ()

    def compute(self, tuples: Sequence[_Any], scope: Scope) -> int:
        return len(distinct(self.values(tuples)))


class Sum(_OfValue):
    """``Sum(v)``: numbers are added, strings concatenated, lists added element-wise.

    Integers give an exact integer. Floats (and floats mixed with integers)
    give the exact sum rounded once to the nearest float, like `math.fsum`;
    IBM adds left to right, which can differ in the last bits. Lists must
    all have the same length. Kept incrementally for ints and floats.
    """

    __slots__ = ()

    def compute(self, tuples: Sequence[_Any], scope: Scope) -> _Any:
        return sum_values(self.values(tuples), "Sum")

    def accumulator(self) -> Accumulator:
        return SumAccumulator(self.read)


class Average(_OfValue):
    """``Average(v)``: the mean; lists are averaged element-wise.

    Integers: the exact mean truncated toward zero (IBM's
    ``IncrementalAverage``: ``Average`` of -1 and -2 is -1). Floats: the
    exact mean rounded once (IBM keeps a running mean, which can differ in
    the last bits). Kept incrementally for ints and floats.
    """

    __slots__ = ()

    def compute(self, tuples: Sequence[_Any], scope: Scope) -> _Any:
        return average_values(self.values(tuples))

    def accumulator(self) -> Accumulator:
        return AverageAccumulator(self.read)


class FloatAverage(Average):
    """``Average(v)`` of an attribute the input schema declares float32 or float64.

    The schema check accepts an int for a float attribute, so whole-number prices may arrive
    as ints; SPL's ``Average(float64)`` is a float64, so ints here are averaged as floats
    (1 and 2 give 1.5, not `Average`'s truncated integer 1). `Aggregate.setup` puts it in
    place of an ``Average`` of such an attribute; without a declared schema the values' own
    types decide, as `Average` says. Its repr is the ``Average`` the user wrote.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Average(value={self.value!r})"

    def compute(self, tuples: Sequence[_Any], scope: Scope) -> _Any:
        return float_average_values(self.values(tuples))

    def accumulator(self) -> Accumulator:
        return FloatAverageAccumulator(self.read)


class Min(_OfValue):
    """``Min(v)``: the smallest value (any ordered type); lists column-wise.

    Among equal values the oldest is returned (IBM's ``std::min`` fold).
    Kept incrementally (a monotonic queue) unless values are lists or NaN.
    """

    __slots__ = ()

    def compute(self, tuples: Sequence[_Any], scope: Scope) -> _Any:
        return extreme(self.values(tuples), operator.lt, "Min")

    def accumulator(self) -> Accumulator:
        return MinAccumulator(self.read)


class Max(_OfValue):
    """``Max(v)``: the largest value (any ordered type); lists column-wise.

    Among equal values the oldest is returned (IBM's ``std::max`` fold).
    Kept incrementally (a monotonic queue) unless values are lists or NaN.
    """

    __slots__ = ()

    def compute(self, tuples: Sequence[_Any], scope: Scope) -> _Any:
        return extreme(self.values(tuples), operator.gt, "Max")

    def accumulator(self) -> Accumulator:
        return MaxAccumulator(self.read)


class MinCount(_OfValue):
    """``MinCount(v)``: IBM's code counts the values equal to the **maximum**.

    IBM documents "number of values equal to the minimum", but both of its
    implementations (``Aggregate.h``, ``TumblingAggregate.h``) count the
    maximum; this port reproduces the code, so ``MinCount`` and `MaxCount`
    are swapped with respect to the documentation.
    """

    __slots__ = ()

    def compute(self, tuples: Sequence[_Any], scope: Scope) -> int:
        return count_extreme(self.values(tuples), operator.gt)


class MaxCount(_OfValue):
    """``MaxCount(v)``: IBM's code counts the values equal to the **minimum** (see `MinCount`)."""

    __slots__ = ()

    def compute(self, tuples: Sequence[_Any], scope: Scope) -> int:
        return count_extreme(self.values(tuples), operator.lt)


class SampleStdDev(_OfValue):
    """``SampleStdDev(v)``: the sample standard deviation (n - 1); 0.0 with fewer than 2 values.

    Computed in float64 from the exact mean (IBM works in the attribute's
    type, with integer arithmetic for integer attributes).
    """

    __slots__ = ()

    def compute(self, tuples: Sequence[_Any], scope: Scope) -> float:
        values = self.values(tuples)
        if len(values) < 2:
            return 0.0
        return math.sqrt(squared_deviations(values) / (len(values) - 1))


class PopulationStdDev(_OfValue):
    """``PopulationStdDev(v)``: the population standard deviation (n), in float64."""

    __slots__ = ()

    def compute(self, tuples: Sequence[_Any], scope: Scope) -> float:
        values = self.values(tuples)
        return math.sqrt(squared_deviations(values) / len(values))


# ------------------------------------------------------------ two arguments


@dataclass(frozen=True, slots=True)
class _OfPair(AggregateFunction):
    value: Expr
    arg: Expr
    read: Callable[[_Any], _Any] = field(init=False, repr=False, compare=False)
    read_arg: Callable[[_Any], _Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "read", _reader(self.value, type(self).__name__))
        object.__setattr__(self, "read_arg", _reader(self.arg, type(self).__name__))

    def attributes(self) -> tuple[str, ...]:
        return tuple(v for v in (self.value, self.arg) if isinstance(v, str))


class ArgMin(_OfPair):
    """``ArgMin(v, w)``: ``w`` of the tuple with the smallest ``v``; ties: the oldest such tuple."""

    __slots__ = ()

    def compute(self, tuples: Sequence[_Any], scope: Scope) -> _Any:
        return arg_extreme(tuples, self.read, self.read_arg, operator.lt)


class ArgMax(_OfPair):
    """``ArgMax(v, w)``: ``w`` of the tuple with the largest ``v``; ties: the oldest such tuple."""

    __slots__ = ()

    def compute(self, tuples: Sequence[_Any], scope: Scope) -> _Any:
        return arg_extreme(tuples, self.read, self.read_arg, operator.gt)


class CollectArgMin(_OfPair):
    """``CollectArgMin(v, w)``: the distinct ``w`` of every tuple tied at the smallest ``v``.

    First-occurrence order (IBM: a hash set's order).
    """

    __slots__ = ()

    def compute(self, tuples: Sequence[_Any], scope: Scope) -> list[_Any]:
        return collect_arg_extreme(tuples, self.read, self.read_arg, operator.lt)


class CollectArgMax(_OfPair):
    """``CollectArgMax(v, w)``: the distinct ``w`` of every tuple tied at the largest ``v``."""

    __slots__ = ()

    def compute(self, tuples: Sequence[_Any], scope: Scope) -> list[_Any]:
        return collect_arg_extreme(tuples, self.read, self.read_arg, operator.gt)


# ------------------------------------------------------------------ Custom


@dataclass(frozen=True, slots=True)
class Custom(AggregateFunction):
    """``Custom(init, process, result)``: a user aggregation.

    For each group at each flush or trigger: ``ctx = init()``, then
    ``ctx = process(ctx, tup)`` for each tuple, oldest first (return the
    context, usually the same mutated object), then the attribute is
    ``result(ctx)``. SPL's init and result functions may not read the tuple;
    here they cannot. Always recomputed.
    """

    init: Callable[[], _Any]
    process: Callable[[_Any, _Any], _Any]
    result: Callable[[_Any], _Any]

    def __post_init__(self) -> None:
        for name in ("init", "process", "result"):
            if not callable(getattr(self, name)):
                raise OperatorParameterError(
                    f"Custom({name}={getattr(self, name)!r}): {name} must be a function")

    def compute(self, tuples: Sequence[_Any], scope: Scope) -> _Any:
        ctx = self.init()
        process = self.process
        for t in tuples:
            ctx = process(ctx, t)
        return self.result(ctx)
