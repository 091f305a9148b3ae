"""Arithmetic behind the Aggregate output functions: exact sums, folds, accumulators.

Float sums are exact: a finite float is n / 2**k with k <= 1074, so scaled by
2**1074 every float is an integer and a sum of floats is an integer sum,
rounded to a float once at the end (Python's int / int division is
correctly rounded). An incremental sum can then add and subtract floats for
ever without drifting, and it equals a sum recomputed from scratch bit for
bit. IEEE infinities and NaN are counted aside.

Two shortcuts compute the same exact values faster, and fall back to the
above whenever they cannot vouch for exactness:

* an accumulator scales a float by 2**80 only (``_FAST_BITS``): one float
  multiplication and an ``int()``, exact whenever the product is a whole
  number (any float from about 4e-9 to 1e280 with a full mantissa, and
  many more), against a rational decomposition and a 1100-bit shift;
* a whole list of floats (a tumbling flush, a recompute) is summed by
  `math.fsum`, which is correctly rounded, so it *is* the exact sum rounded
  once; for a mean, ``fsum`` twice more checks that the exact sum is the sum
  of two floats (hi + lo), whose quotient by n is then divided as integers.

The folds (`extreme`, `count_extreme`, `arg_extreme`, `collect_arg_extreme`)
reproduce IBM's ``Aggregate.h`` loops: seeded with the first value, updated
on a strict comparison, so ties keep the oldest value.

The accumulators keep Sum, Average, Min and Max of a FIFO window: values
leave in the order they came.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Sequence
from math import fsum
from operator import countOf
from typing import Any

__all__ = [
    "AverageAccumulator",
    "FloatAverageAccumulator",
    "MaxAccumulator",
    "MinAccumulator",
    "Numbers",
    "SumAccumulator",
    "arg_extreme",
    "average_values",
    "collect_arg_extreme",
    "count_extreme",
    "distinct",
    "extreme",
    "float_average_values",
    "freeze",
    "numbers_of",
    "squared_deviations",
    "sum_values",
]

_SCALE_BITS = 1074
_SCALE = 1 << _SCALE_BITS
_FAST_BITS = 80
_FAST = float(1 << _FAST_BITS)
_FAST_DEN = 1 << _FAST_BITS
_FAST_TO_SCALE = _SCALE_BITS - _FAST_BITS


def _scaled(x: float) -> int:
    n, d = x.as_integer_ratio()
    return n << (_SCALE_BITS + 1 - d.bit_length())


def _divide(numerator: int, denominator: int) -> float:
    """``numerator / denominator`` rounded once; beyond the float range: an infinity."""
    try:
        return numerator / denominator
    except OverflowError:
        return math.inf if numerator > 0 else -math.inf


class Numbers:
    """The exact sum of ints and floats, with the IEEE special values counted aside."""

    __slots__ = ("fast", "floats", "ints", "n", "nan", "ninf", "other", "pinf", "scaled")

    def __init__(self) -> None:
        self.ints = 0  # sum of the integers
        self.fast = 0  # sum of the finite floats that are whole numbers times 2**80, times 2**80
        self.scaled = 0  # sum of the other finite floats, times 2**1074
        self.n = 0
        self.floats = 0  # how many floats (finite or not): any makes the result a float
        self.nan = self.pinf = self.ninf = 0
        self.other = False  # a value that is neither int nor float was seen

    def take(self, v: Any, sign: int) -> None:
        """Add (sign 1) or subtract (sign -1) one value."""
        tv = type(v)
        if tv is int:
            self.ints += v if sign > 0 else -v
        elif tv is float or isinstance(v, float):
            self.floats += sign
            if v - v == 0.0:
                self.scaled += _scaled(v) if sign > 0 else -_scaled(v)
            elif math.isnan(v):
                self.nan += sign
            elif v > 0:
                self.pinf += sign
            else:
                self.ninf += sign
        elif isinstance(v, int):
            self.ints += int(v) if sign > 0 else -int(v)
        else:
            self.other = True
        self.n += sign

    def special(self) -> float | None:
        if self.nan or (self.pinf and self.ninf):
            return math.nan
        if self.pinf:
            return math.inf
        if self.ninf:
            return -math.inf
        return None

    def _exact(self) -> tuple[int, int]:
        """The exact sum of the finite values as numerator and (power of two) denominator."""
        if self.scaled:
            return ((self.ints << _SCALE_BITS) + (self.fast << _FAST_TO_SCALE) + self.scaled,
                    _SCALE)
        return (self.ints << _FAST_BITS) + self.fast, _FAST_DEN

    def total(self) -> int | float:
        if not self.floats:
            return self.ints
        if self.scaled or self.nan or self.pinf or self.ninf:
            if self.nan or self.pinf or self.ninf:
                return self.special()  # type: ignore[return-value]
            numerator, denominator = self._exact()
            return _divide(numerator, denominator)
        if not self.ints:
            return self.fast / _FAST_DEN  # below 2**943 * n: no overflow
        return _divide((self.ints << _FAST_BITS) + self.fast, _FAST_DEN)

    def mean(self) -> int | float:
        if not self.floats:
            q = abs(self.ints) // self.n  # SPL integer Average: truncated toward zero
            return q if self.ints >= 0 else -q
        if self.scaled or self.nan or self.pinf or self.ninf:
            if self.nan or self.pinf or self.ninf:
                return self.special()  # type: ignore[return-value]
            numerator, denominator = self._exact()
            return _divide(numerator, denominator * self.n)
        if not self.ints:
            return self.fast / (self.n << _FAST_BITS)  # a mean of floats: no overflow
        return _divide((self.ints << _FAST_BITS) + self.fast, self.n << _FAST_BITS)

    def float_mean(self) -> int | float:
        """`mean` of values declared float (float32/float64): ints among them are whole
        floats, so ints alone give their exact mean rounded once, not SPL's integer Average
        (the schema check lets ints through as floats; SPL's ``Average(float64)`` is a float)."""
        if not self.floats:
            return _divide(self.ints, self.n)
        return self.mean()


def numbers_of(values: Iterable[Any]) -> Numbers | None:
    acc = Numbers()
    for v in values:
        acc.take(v, 1)
        if acc.other:
            return None
    return acc


def float_sum(values: list[Any]) -> float | None:
    """The exact sum of ``values`` rounded once, if they are all finite floats and ``fsum`` can
    tell (it is correctly rounded); None otherwise (call `Numbers` instead)."""
    try:
        total = fsum(values)
    except (OverflowError, ValueError):  # an intermediate overflow, inf - inf
        return None
    if total - total != 0.0:
        return None  # NaN or an infinity among the values (or an overflow): counted aside
    return total + 0.0  # an exact zero is +0.0, as `Numbers.total` gives it


_SPLIT = 134217729.0  # 2**27 + 1: Veltkamp's constant, cuts a float into two 26-bit halves
_SMALL_COUNT = 1 << 26  # a count this small times a 26-bit half is exact in a float


def float_mean(values: list[Any]) -> float | None:
    """The exact mean of finite floats ``values`` rounded once, or None when this shortcut
    cannot vouch for it (the exact sum is not hi + lo of two floats, or a value is not finite).

    Most means are ``fsum / n`` already: that quotient is kept when the exact remainder
    ``sum - q * n`` (one more fsum, with ``q * n`` split into two exact products) shows the
    exact mean lies within half a unit of it. Only a mean close to a rounding boundary takes
    the integer division (a few in a million here)."""
    try:
        hi = fsum(values)
        if hi - hi != 0.0:
            return None
    except (OverflowError, ValueError):
        return None
    if not hi:
        return 0.0  # a sum of floats is zero or at least 2**-1074 away: fsum gives 0 for 0 only
    n = len(values)
    q = hi / n
    if n < _SMALL_COUNT and 1e-250 < abs(q) < 1e290:
        r = _remainder(values, q, n)
        if r is None:
            return q
        # hi's own rounding, divided by n, is of the size of q's half unit: a quarter of the
        # quotients are a unit off. The remainder says by how much: one more try.
        q = q + r / n
        if 1e-250 < abs(q) < 1e290 and _remainder(values, q, n) is None:
            return q
    return _mean_near_a_boundary(values, hi, n)


def float_total(values: list[Any]) -> float | None:
    """`float_sum` of ``values`` if every value is a float, else None: the one pass that Sum
    and Average of the same values share (`float_total_mean` reuses it)."""
    return float_sum(values) if _only(values, float) else None


def float_total_mean(values: list[Any], hi: float) -> Any:
    """The Average of ``values`` given ``hi = float_total(values)`` (not None): the exact mean
    rounded once, as `average_values` gives it.

    One more pass finds ``lo``, the exact sum minus ``hi`` rounded once, so the exact sum is
    ``hi + lo`` within half a unit of ``lo``. Then the remainder of a quotient ``q`` is a sum
    of four floats (``hi``, ``lo`` and ``q * n`` split into two exact products): ``fsum / n``
    or the one corrected quotient is decided without another pass over the values, where
    `float_mean` takes one for each quotient it tries. A remainder within a hair (2**-40 of
    it, far above the rounding of these few steps) of the limit is left to `average_values`.
    """
    if not hi:
        return 0.0  # as `float_mean`: the exact sum is zero
    n = len(values)
    q = hi / n
    if n < _SMALL_COUNT and 1e-250 < abs(q) < 1e290:
        values.append(-hi)  # taken off below: the list may be read by the columns after this one
        lo: float | None
        try:
            lo = fsum(values)  # the exact sum minus hi, rounded once
        except (OverflowError, ValueError):
            lo = None
        finally:
            values.pop()
        if lo is None:
            return average_values(values)
        slack = math.ulp(lo) * 2.0
        r = _remainder_of_sum(hi, lo, q, n, slack)
        if r is None:
            return q
        q = q + r / n
        if 1e-250 < abs(q) < 1e290 and _remainder_of_sum(hi, lo, q, n, slack) is None:
            return q
    return average_values(values)


def _remainder_of_sum(hi: float, lo: float, q: float, n: int, slack: float) -> float | None:
    """None if ``q`` is surely the exact mean rounded once, where the exact sum is ``hi + lo``
    give or take ``slack / 4``; else ``hi + lo - q * n`` rounded (`_remainder` for a sum
    already found)."""
    c = q * _SPLIT
    q1 = c - (c - q)
    q2 = q - q1
    r = fsum((hi, lo, -q1 * n, -q2 * n))
    limit = math.ulp(q) * n * 0.5
    if abs(math.frexp(q)[0]) == 0.5 and ((r > 0) != (q > 0) or abs(r) <= slack):
        limit *= 0.5  # q a power of two: the next float toward zero is half a unit away
    if abs(r) * (1.0 + 2.0 ** -40) + slack < limit:
        return None
    return r


def _remainder(values: list[Any], q: float, n: int) -> float | None:
    """None if ``q`` is the exact mean of ``values`` rounded once, else ``sum - q * n``
    rounded (``n`` below `_SMALL_COUNT`; ``q`` normal and far from overflowing)."""
    c = q * _SPLIT
    q1 = c - (c - q)  # q == q1 + q2, each of 26 bits: q1 * n and q2 * n are exact
    q2 = q - q1
    try:
        r = fsum([*values, -q1 * n, -q2 * n])  # sum - q * n, rounded once: its sign is exact
    except OverflowError:
        return math.inf
    limit = math.ulp(q) * n * 0.5  # half a unit of q, times n: exact
    if (r > 0) != (q > 0) and abs(math.frexp(q)[0]) == 0.5:
        limit *= 0.5  # q a power of two: the next float toward zero is half a unit away
    if abs(r) < limit:  # rounding is monotonic: the exact remainder is below it too
        return None
    return r


def _mean_near_a_boundary(values: list[Any], hi: float, n: int) -> float | None:
    """`float_mean` where ``fsum / n`` may be a unit off: the exact sum as ``hi + lo`` (if two
    floats hold it), divided in integers, rounded once."""
    try:
        rest = [*values, -hi]
        lo = fsum(rest)  # the exact sum minus hi, rounded
        if lo:
            rest.append(-lo)
            if fsum(rest) != 0.0:  # zero only if the exact sum is hi + lo
                return None
    except (OverflowError, ValueError):
        return None
    if not lo:
        return hi / n  # hi and n exact: IEEE division rounds once
    a, b = hi.as_integer_ratio()
    c, d = lo.as_integer_ratio()
    return _divide(a * d + c * b, b * d * n)


def _only(values: list[Any], cls: type) -> bool:
    """Whether every value's type is exactly ``cls`` (and there is one): counting the types
    that are ``cls`` compares by identity in C, without `set`'s hashing."""
    return bool(values) and countOf(map(type, values), cls) == len(values)


def sum_values(values: list[Any], fname: str) -> Any:
    first = values[0]
    cls = type(first)
    if cls is float and _only(values, float):
        total = float_sum(values)
        if total is not None:
            return total
    elif cls is int and _only(values, int):
        return sum(values)
    if isinstance(first, str):
        return "".join(values)
    if isinstance(first, list):
        return [sum_values(list(column), fname) for column in columns(values, fname)]
    acc = numbers_of(values)
    if acc is not None:
        return acc.total()
    total = first
    for v in values[1:]:
        total = total + v
    return total


def average_values(values: list[Any]) -> Any:
    first = values[0]
    cls = type(first)
    if cls is float and _only(values, float):
        mean = float_mean(values)
        if mean is not None:
            return mean
    elif cls is int and _only(values, int):
        total = sum(values)
        q = abs(total) // len(values)  # SPL integer Average: truncated toward zero
        return q if total >= 0 else -q
    if isinstance(first, list):
        return [average_values(list(column)) for column in columns(values, "Average")]
    acc = numbers_of(values)
    if acc is not None:
        return acc.mean()
    total = first
    for v in values[1:]:
        total = total + v
    return total / len(values)


def float_average_values(values: list[Any]) -> Any:
    """`average_values` of an attribute declared float (float32/float64): a float mean even
    when every value came as an int (`Numbers.float_mean`). Floats alone take the steps of
    `average_values`, so give its results; anything that is not a number fails there."""
    first = type(values[0])
    if first is float and _only(values, float):
        mean = float_mean(values)  # (`average_values`' first step, its type check done)
        if mean is not None:
            return mean
    elif first is int and _only(values, int):  # the exact sum, divided once: rounded once
        return _divide(sum(values), len(values))
    acc = numbers_of(values)
    if acc is None:
        return average_values(values)
    return acc.float_mean()


def columns(values: list[Any], fname: str) -> Iterable[tuple[Any, ...]]:
    size = len(values[0])
    for v in values:
        if len(v) != size:
            raise ValueError(f"Aggregate {fname}: list size mismatch: {len(v)} elements where the "
                             f"first list has {size}; element-wise {fname} needs equal lengths")
    return zip(*values, strict=True)


def extreme(values: list[Any], better: Callable[[Any, Any], bool], fname: str) -> Any:
    first = values[0]
    if isinstance(first, list):
        return [extreme(list(column), better, fname) for column in columns(values, fname)]
    best = first
    for v in values:
        if better(v, best):
            best = v
    return best


def count_extreme(values: list[Any], better: Callable[[Any, Any], bool]) -> int:
    best, count = values[0], 0
    for v in values:
        if better(v, best):
            best, count = v, 1
        elif v == best:
            count += 1
    return count


def arg_extreme(tuples: Sequence[Any], read: Callable[[Any], Any], read_arg: Callable[[Any], Any],
                 better: Callable[[Any, Any], bool]) -> Any:
    best_t = tuples[0]
    best = read(best_t)
    for t in tuples:
        v = read(t)
        if better(v, best):
            best, best_t = v, t
    return read_arg(best_t)


def collect_arg_extreme(tuples: Sequence[Any], read: Callable[[Any], Any],
                         read_arg: Callable[[Any], Any],
                         better: Callable[[Any, Any], bool]) -> list[Any]:
    best = read(tuples[0])
    args: dict[Hashable, Any] = {}
    for t in tuples:
        v = read(t)
        if better(v, best):
            best = v
            args = {}
        elif v != best:
            continue
        w = read_arg(t)
        args.setdefault(freeze(w), w)
    return list(args.values())


def squared_deviations(values: list[Any]) -> float:
    acc = numbers_of(values)
    if acc is None:
        raise TypeError(f"Aggregate standard deviation: expected numbers, got {values[:3]!r}...")
    mean = float(acc.mean()) if acc.floats else acc.ints / acc.n
    return math.fsum((float(v) - mean) ** 2 for v in values)


def freeze(v: Any) -> Hashable:
    """A hashable stand-in for a value (lists and dicts by content), for distinct counting."""
    if isinstance(v, Hashable) and not isinstance(v, tuple):
        return v
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, tuple(freeze(x) for x in v))
    if isinstance(v, dict):
        return ("dict", tuple((freeze(k), freeze(x)) for k, x in v.items()))
    if isinstance(v, set | frozenset):
        return ("set", frozenset(freeze(x) for x in v))
    raise TypeError(f"Aggregate: value {v!r} of type {type(v).__name__} cannot be compared for "
                    "distinctness")


def distinct(values: Iterable[Any]) -> dict[Hashable, Any]:
    out: dict[Hashable, Any] = {}
    for v in values:
        out.setdefault(freeze(v), v)
    return out


# ============================================================ accumulators


class SumAccumulator(Numbers):
    """Sum of a FIFO window's values: exact, with a fast path for ints and most finite floats."""

    __slots__ = ("broken", "read")

    def __init__(self, read: Callable[[Any], Any]) -> None:
        super().__init__()
        self.read = read
        self.broken = False  # set for good by a value that is neither int nor float

    def add(self, tup: Any) -> None:
        v = self.read(tup)
        tv = type(v)
        if tv is float:
            y = v * _FAST
            if y.is_integer():  # exact: v * 2**80 is a whole number (not for inf, NaN, beyond 2**943)
                self.fast += int(y)
                self.floats += 1
                self.n += 1
                return
            self.take(v, 1)
        elif tv is int:
            self.ints += v
            self.n += 1
        elif not self.broken:
            self.take(v, 1)
            self.broken = self.other

    def remove(self, tup: Any) -> None:
        v = self.read(tup)
        tv = type(v)
        if tv is float:
            y = v * _FAST
            if y.is_integer():
                self.fast -= int(y)
                self.floats -= 1
                self.n -= 1
                return
            self.take(v, -1)
        elif tv is int:
            self.ints -= v
            self.n -= 1
        elif not self.broken:
            self.take(v, -1)

    def add_many(self, tuples: Sequence[Any]) -> None:
        """`add` each tuple, in one step when all the values are ints or all are floats the
        fast path holds exactly (a catch-up of a window's new tuples).

        Ints first, by one C-level ``sum``: its result is an int only when every value was
        an int (or a bool or other int subclass, which `take` adds as ints too); a float,
        None or anything else among them makes it something else, or raises."""
        try:
            s = sum(map(self.read, tuples))
        except TypeError:  # (a read's own error raises again below)
            s = None
        if type(s) is int:
            self.ints += s
            self.n += len(tuples)
        elif not self._many(tuples, 1):
            add = self.add
            for t in tuples:
                add(t)

    def remove_many(self, tuples: Sequence[Any]) -> None:
        """`remove` each tuple (the oldest first), in one step where `add_many` takes one."""
        try:
            s = sum(map(self.read, tuples))
        except TypeError:
            s = None
        if type(s) is int:
            self.ints -= s
            self.n -= len(tuples)
        elif not self._many(tuples, -1):
            remove = self.remove
            for t in tuples:
                remove(t)

    def _many(self, tuples: Sequence[Any], sign: int) -> bool:
        """Add (1) or subtract (-1) all the values at once if they are all floats times 2**80
        whole (all ints took the callers' own step); False (nothing done) otherwise."""
        values = list(map(self.read, tuples))
        kinds = set(map(type, values))
        if len(kinds) != 1:
            return not values
        if float in kinds:
            scaled = [v * _FAST for v in values]
            try:
                whole = list(map(int, scaled))
            except (OverflowError, ValueError):  # an infinity or NaN (or beyond 2**943)
                return False
            if whole != scaled:  # (an int equals a float only when exactly equal)
                return False
            self.fast += sum(whole) if sign > 0 else -sum(whole)
            self.floats += len(values) * sign
        else:
            return False
        self.n += len(values) * sign
        return True

    def replace(self, old: Any, new: Any) -> None:
        """`remove` ``old`` then `add` ``new`` (a full sliding window's step), in one call when
        both are floats the fast path holds exactly."""
        v = self.read(new)
        w = self.read(old)
        if type(v) is int and type(w) is int:
            self.ints += v - w
            return
        if type(v) is float and type(w) is float:
            y = v * _FAST
            z = w * _FAST
            # `is_integer` is False for an infinity or NaN (the general steps take those);
            # comparing `int(y) == y` instead cost a third of the step (an int-float compare).
            if y.is_integer() and z.is_integer():
                self.fast += int(y) - int(z)
                return
        self.remove(old)
        self.add(new)

    def result(self) -> Any:
        return self.total()


class AverageAccumulator(SumAccumulator):
    __slots__ = ()

    def result(self) -> Any:
        return self.mean()


class FloatAverageAccumulator(SumAccumulator):
    """`AverageAccumulator` of an attribute declared float: `Numbers.float_mean`."""

    __slots__ = ()

    def result(self) -> Any:
        return self.float_mean()


class MinAccumulator:
    """Min over a FIFO: a monotonic queue of (arrival number, value), values non-decreasing.

    Each new value drops the newer-end values greater than it: those can
    never be the minimum again. Equal values stay, so the oldest of tied
    minima is at the front, as IBM's fold returns. Amortised O(1) per
    insertion and eviction.

    A NaN (unordered) or a list (column-wise) cannot go in the queue: its arrival number
    goes in ``unordered`` instead, and while one is in the window the accumulator is
    ``broken`` (the group is recomputed). Once the last of them leaves, the queue, which
    kept every other value, gives the minimum again: one NaN early in a stream made every
    later trigger rescan the window for the rest of the run (77x slower, a review).
    """

    __slots__ = ("added", "broken", "read", "removed", "seqs", "unordered", "vals")

    def __init__(self, read: Callable[[Any], Any]) -> None:
        self.read = read
        self.seqs: deque[int] = deque()
        self.vals: deque[Any] = deque()
        self.unordered: deque[int] = deque()  # arrival numbers of the NaNs and lists kept
        self.added = 0  # arrivals (every value)
        self.removed = 0  # evictions (every value)
        self.broken = False  # an unordered value is in the window

    def _unordered(self, added: int) -> None:
        self.unordered.append(added)
        self.broken = True

    def _left(self, removed: int) -> None:
        """The evictions reached ``removed``: the unordered values among them are gone."""
        unordered = self.unordered
        while unordered and unordered[0] <= removed:
            unordered.popleft()
        self.broken = bool(unordered)

    def add(self, tup: Any) -> None:
        v = self.read(tup)
        added = self.added = self.added + 1
        if type(v) is not int and (v != v or isinstance(v, list)):  # noqa: PLR0124 (NaN)
            self._unordered(added)
            return
        vals = self.vals
        if vals and vals[-1] > v:
            seqs = self.seqs
            while vals and vals[-1] > v:
                vals.pop()
                seqs.pop()
        vals.append(v)
        self.seqs.append(added)

    def remove(self, tup: Any) -> None:
        removed = self.removed = self.removed + 1
        seqs = self.seqs
        if seqs and seqs[0] == removed:
            seqs.popleft()
            self.vals.popleft()
        elif self.broken:
            self._left(removed)

    def remove_many(self, tuples: Sequence[Any]) -> None:
        """`remove` each of the oldest ``len(tuples)`` tuples: the queue drops what they held."""
        removed = self.removed = self.removed + len(tuples)
        seqs = self.seqs
        if seqs and seqs[0] <= removed:
            vals = self.vals
            while seqs and seqs[0] <= removed:
                seqs.popleft()
                vals.popleft()
        if self.broken:
            self._left(removed)

    def add_many(self, tuples: Sequence[Any]) -> None:
        """`add` each tuple, the loop inlined."""
        read, vals, seqs = self.read, self.vals, self.seqs
        added = self.added
        try:
            for t in tuples:
                v = read(t)
                added += 1
                if type(v) is not int and (v != v or isinstance(v, list)):  # noqa: PLR0124
                    self._unordered(added)
                    continue
                if vals and vals[-1] > v:
                    while vals and vals[-1] > v:
                        vals.pop()
                        seqs.pop()
                vals.append(v)
                seqs.append(added)
        finally:
            self.added = added

    def result(self) -> Any:
        return self.vals[0]


class MaxAccumulator(MinAccumulator):
    """Max over a FIFO: `MinAccumulator` mirrored (values non-increasing)."""

    __slots__ = ()

    def add(self, tup: Any) -> None:
        v = self.read(tup)
        added = self.added = self.added + 1
        if type(v) is not int and (v != v or isinstance(v, list)):  # noqa: PLR0124 (NaN)
            self._unordered(added)
            return
        vals = self.vals
        if vals and vals[-1] < v:
            seqs = self.seqs
            while vals and vals[-1] < v:
                vals.pop()
                seqs.pop()
        vals.append(v)
        self.seqs.append(added)

    def add_many(self, tuples: Sequence[Any]) -> None:
        """`add` each tuple, the loop inlined."""
        read, vals, seqs = self.read, self.vals, self.seqs
        added = self.added
        try:
            for t in tuples:
                v = read(t)
                added += 1
                if type(v) is not int and (v != v or isinstance(v, list)):  # noqa: PLR0124
                    self._unordered(added)
                    continue
                if vals and vals[-1] < v:
                    while vals and vals[-1] < v:
                        vals.pop()
                        seqs.pop()
                vals.append(v)
                seqs.append(added)
        finally:
            self.added = added
