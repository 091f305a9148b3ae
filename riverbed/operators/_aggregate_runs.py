"""A full sliding count window's triggers as one run: Aggregate's rows for a whole batch.

With no ``group_by``, on a full ``sliding, count(N), count(1)`` window, each tuple of a batch
makes one step: the oldest value out, the new one in, one row and its window mark. A trigger
at a time, that step costs a window event, a handler call, the accumulators' ``replace``, the
row builder and the submit, about 16,000 instructions. The window offers the whole batch
instead (`riverbed.windows.TriggerRun`), and a run does the same steps in C passes: it reads
the batch's values once, keeps each step's exact sum with `itertools.accumulate` over the
values scaled to integers (the scaling of `SumAccumulator`'s fast path: the same exact sums,
divided the same way, so the same correctly rounded results), and builds the rows in one
comprehension.

A run applies only while every value in the window and in the batch is a float that the
scaling keeps exact (each accumulator on its fast path), or every one is an int (the sums
are exact as they are: no scaling, an int Sum, an Average truncated toward zero as SPL's
integer Average is), and only to rows made of Sum and Average of attributes, Last and Any of
attributes, Count and constants: no user code runs in a run. Anything else (a window mixing
ints and floats, a bool), and any read that raises, refuses the batch before anything
changes, and its triggers go one at a time as before, raising what they raise.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from itertools import accumulate, islice, repeat
from operator import mul, sub
from typing import Any

from ..windows import drop_front
from ._aggregate_functions import Any as AnyOf
from ._aggregate_functions import Average, Count, FloatAverage, Last, Sum
from ._aggregate_math import _FAST, _FAST_BITS, _FAST_DEN, SumAccumulator
from ._aggregate_rows import Column, compiled

__all__ = ["RunRows", "SumRuns", "compile_run_rows"]

RunRows = Callable[[Sequence[Any], list[list[int]], int, int], list[dict[str, Any]]]
"""``build(batch, sums, den, size)``: one row per tuple of ``batch``, where ``sums[i]`` holds
accumulator ``i``'s scaled sum after each step, ``den`` is ``size`` scaled."""

_FLOATS = {float}
_INTS = {int}  # (not bool: `SumAccumulator` takes bools apart)


def compile_run_rows(columns: Sequence[Column]) -> tuple[RunRows, RunRows] | None:
    """The run's row builders for these columns, one for floats and one for ints, or None
    when one of them needs more than a run has (a user function, the window's tuples, an
    accumulator that is not an exact sum)."""
    floats = _compile_run_rows(columns, ints=False)
    ints = _compile_run_rows(columns, ints=True)
    return None if floats is None or ints is None else (floats, ints)  # (both or neither)


def _compile_run_rows(columns: Sequence[Column], *, ints: bool) -> RunRows | None:
    env: dict[str, Any] = {"FAST_DEN": _FAST_DEN}
    items: list[str] = []
    sums: dict[int, str] = {}  # accumulator index -> its name in the comprehension
    for i, (attr, kind, obj, index) in enumerate(columns):
        env[f"name{i}"] = attr
        cls = type(obj)
        if kind == "constant":
            env[f"c{i}"] = obj
            expr = f"c{i}"
        elif kind == "incremental" and cls in (Sum, Average, FloatAverage) \
                and isinstance(obj.value, str):
            name = sums.setdefault(index, f"s{index}")
            if ints:  # exact ints: the sum itself, and SPL's integer Average (toward zero)
                if cls is Average:
                    expr = f"({name} // size if {name} >= 0 else -(-{name} // size))"
                elif cls is FloatAverage:  # declared float: the exact mean rounded once
                    expr = f"{name} / size"  # (as `Numbers.float_mean`; an overflow refuses the run)
                else:
                    expr = name
            else:
                expr = f"{name} / den" if cls is not Sum else f"{name} / FAST_DEN"
        elif kind == "function" and cls in (Last, AnyOf) and isinstance(obj.value, str):
            env[f"attr{i}"] = obj.value
            expr = f"t[attr{i}]"
        elif kind == "function" and cls is Count:
            expr = "size"
        else:
            return None
        items.append(f"name{i}: {expr}")
    names = ["t", *sums.values()]
    sources = ["batch", *(f"sums[{index}]" for index in sums)]
    row = "{" + ", ".join(items) + "}"
    source = (f"def build(batch, sums, den, size):\n"
              f"    return [{row} for {', '.join(names)} in zip({', '.join(sources)})]\n")
    build: RunRows = compiled(source, "run builder", env)["build"]
    return build


def _integers(read: Callable[[Any], Any], tuples: Sequence[Any] | deque[Any]) -> list[int] | None:
    """Each tuple's value, if every one is an int; None otherwise, or if a read raises."""
    try:
        values = list(map(read, tuples))
    except Exception:  # the trigger that reads it raises it, one at a time
        return None
    return values if set(map(type, values)) == _INTS else None


def _scaled(read: Callable[[Any], Any], tuples: Sequence[Any] | deque[Any]) -> list[int] | None:
    """Each tuple's value times 2**80 as an int, if every value is a float that this keeps
    exact (`SumAccumulator.add`'s fast path); None otherwise, or if a read raises."""
    try:
        values = list(map(read, tuples))
    except Exception:  # the trigger that reads it raises it, one at a time
        return None
    if set(map(type, values)) != _FLOATS:
        return None
    scaled = list(map(mul, values, repeat(_FAST)))
    if not all(map(float.is_integer, scaled)):  # (False for an infinity or NaN too)
        return None
    return list(map(int, scaled))


class SumRuns:
    """One Aggregate's runs: its row builders (floats, ints), its results submit, and each
    accumulator's values (scaled floats, or ints) parallel to the mirrored window (kept between
    runs while no single trigger moved the mirror; rebuilt from it otherwise)."""

    __slots__ = ("at", "build", "build_ints", "emit", "ints", "mirrors", "owner")

    def __init__(self, builds: tuple[RunRows, RunRows], emit: Callable[[list[Any]], None]) -> None:
        self.build, self.build_ints = builds
        self.emit = emit
        self.owner: Any = None  # the mirror state `mirrors` belong to
        self.at = -1  # its window eviction count when they were last right
        self.ints = False  # what `mirrors` hold: ints, or floats scaled to ints
        self.mirrors: list[deque[int]] = []

    def take(self, state: Any, order: deque[Any], accs: list[Any], batch: Sequence[Any],
             size: int) -> bool:
        """Emit the rows of ``batch``'s triggers and move the mirror (``order``, ``accs``,
        ``state.evicted``) past them; False, having changed nothing, where a run does not
        apply. ``order`` mirrors the full window (``size`` tuples) as of ``state.evicted``."""
        kinds = set()  # each accumulator: all floats on the fast path (False), or all ints (True)
        for acc in accs:
            if (type(acc) is not SumAccumulator or acc.scaled or acc.nan or acc.pinf or acc.ninf
                    or acc.broken or acc.other):
                return False
            if acc.floats == acc.n and not acc.ints:
                kinds.add(False)
            elif not acc.floats and not acc.fast:
                kinds.add(True)
            else:
                return False
        if len(kinds) > 1:
            return False
        ints = True in kinds
        values = _integers if ints else _scaled
        mirrors = self.mirrors
        if self.owner is not state or self.at != state.evicted or self.ints != ints:
            rebuilt = [values(acc.read, order) for acc in accs]
            if None in rebuilt:
                return False
            mirrors = [deque(m) for m in rebuilt if m is not None]
        k = len(batch)
        news: list[list[int]] = []
        sums: list[list[int]] = []
        for acc, mirror in zip(accs, mirrors, strict=True):
            new = values(acc.read, batch)
            if new is None:
                return False
            old = list(islice(mirror, k)) if k <= size else [*mirror, *new[:k - size]]
            steps = accumulate(map(sub, new, old), initial=acc.ints if ints else acc.fast)
            next(steps)
            news.append(new)
            sums.append(list(steps))
        try:
            if ints:
                rows = self.build_ints(batch, sums, size, size)
            else:
                rows = self.build(batch, sums, size << _FAST_BITS, size)
        except Exception:  # (a Last attribute missing: its trigger raises it)
            return False
        self.emit(rows)
        for acc, mirror, new, s in zip(accs, mirrors, news, sums, strict=True):
            if ints:
                acc.ints = s[-1]
            else:
                acc.fast = s[-1]
            mirror.extend(new)
            drop_front(mirror, k)
        order.extend(batch)
        drop_front(order, k)
        state.evicted += k
        self.owner, self.at, self.ints, self.mirrors = state, state.evicted, ints, mirrors
        return True
