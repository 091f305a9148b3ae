"""Window policies as frozen values.

SPL describes a window by independent axes: the window type (tumbling or
sliding), an eviction policy, a trigger policy (sliding only), whether the
window is partitioned, and an optional partition eviction policy. Each policy
here is an immutable, self-validating value; `WindowSpec` combines them and
checks the combinations SPL forbids. The engine (`StreamWindow`) reads a spec
and never mutates it, so one spec can be shared by many windows.

Durations are given in float seconds, as in SPL, and converted once to integer
nanoseconds by truncation, exactly as IBM's runtime converts clause floats
(``timestamp(double)``: whole seconds, then the fraction times 1e9 truncated;
``1.1`` becomes 1 s + 100 000 000 ns). All time arithmetic after that is exact
integer arithmetic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from ._errors import WatermarkError, WindowClauseError

__all__ = [
    "MAX_SECONDS",
    "Count",
    "Delta",
    "PartitionAge",
    "PartitionCount",
    "Punct",
    "Time",
    "TimeIntervalSpec",
    "TupleCount",
    "WindowSpec",
    "WindowType",
    "check_watermark",
    "seconds_to_ns",
    "seconds_to_ticks",
]

NS_PER_SECOND = 1_000_000_000


def seconds_to_ns(seconds: float) -> int:
    """Convert float seconds to integer nanoseconds the way SPL does: truncating."""
    if isinstance(seconds, int):
        return seconds * NS_PER_SECOND
    whole = math.floor(seconds)
    return whole * NS_PER_SECOND + int((seconds - whole) * NS_PER_SECOND)


MAX_SECONDS = (2**63 - 1) // NS_PER_SECOND  # the longest span the clock's int64 nanoseconds hold


def _check_in_range(seconds: float, what: str) -> None:
    """A duration must fit the clock (int64 nanoseconds: about 292 years)."""
    if seconds > MAX_SECONDS:
        raise WindowClauseError(f"{what} is beyond the clock's range (at most {MAX_SECONDS} "
                                "seconds, about 292 years)")


def _check_number(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise WindowClauseError(f"{what}: expected a number, got {value!r}")
    if math.isnan(value) or math.isinf(value):
        raise WindowClauseError(f"{what}: expected a finite number, got {value!r}")
    return value


class WindowType(Enum):
    """The window type of a windowed input port (SPL ``StreamWindow.Type``)."""

    TUMBLING = "tumbling"
    SLIDING = "sliding"


@dataclass(frozen=True, slots=True)
class Count:
    """``count(N)``: N tuples. As eviction: tumble at N / keep the last N.

    As a sliding trigger: trigger on every N-th arrival in the partition.
    ``count(0)`` is legal SPL; what it does depends on the flavor (see
    `riverbed.windows.Flavor`).
    """

    size: int

    def __post_init__(self) -> None:
        if isinstance(self.size, bool) or not isinstance(self.size, int):
            raise WindowClauseError(f"count({self.size!r}): the size must be an integer")
        if self.size < 0:
            raise WindowClauseError(f"count({self.size}): the size must be >= 0")

    def clause(self) -> str:
        return f"count({self.size})"


@dataclass(frozen=True, slots=True)
class Time:
    """``time(T)``: T seconds of system time (the host's clock).

    As tumbling eviction: tumble every T seconds from activation. As sliding
    eviction: a tuple leaves once it has been in the window strictly more than
    T seconds. As sliding trigger: trigger every T seconds.
    """

    seconds: float

    def __post_init__(self) -> None:
        value = _check_number(self.seconds, f"time({self.seconds!r})")
        if value <= 0 or seconds_to_ns(value) <= 0:
            raise WindowClauseError(f"time({self.seconds!r}): the duration must be > 0 seconds")
        _check_in_range(value, f"time({self.seconds!r}): the duration")

    @property
    def ns(self) -> int:
        return seconds_to_ns(self.seconds)

    def clause(self) -> str:
        return f"time({self.seconds!r})"


@dataclass(frozen=True, slots=True)
class Delta:
    """``delta(attribute, D)``: a bound on the growth of a numeric attribute.

    As tumbling eviction: a tuple whose value exceeds the oldest tuple's by
    more than D tumbles the window before it is inserted. As sliding eviction:
    tuples more than D below the arriving one leave. As sliding trigger: a
    value more than D above the last triggering one triggers. The comparison
    is strict ("more than D") and uses the attribute's type (int, float, or
    timestamp in integer nanoseconds with D in seconds).
    """

    attribute: str
    delta: float

    def __post_init__(self) -> None:
        if not isinstance(self.attribute, str) or not self.attribute.isidentifier():
            raise WindowClauseError(
                f"delta({self.attribute!r}, {self.delta!r}): the attribute must be an identifier")
        value = _check_number(self.delta, f"delta({self.attribute}, {self.delta!r})")
        if value < 0:
            raise WindowClauseError(
                f"delta({self.attribute}, {self.delta!r}): the delta must be >= 0")

    def clause(self) -> str:
        return f"delta({self.attribute}, {self.delta!r})"


@dataclass(frozen=True, slots=True)
class Punct:
    """``punct()``: a tumbling window closed by each window punctuation mark."""

    def clause(self) -> str:
        return "punct()"


@dataclass(frozen=True, slots=True)
class PartitionAge:
    """``partitionAge(T)``: evict partitions not inserted into for T seconds."""

    seconds: float

    def __post_init__(self) -> None:
        value = _check_number(self.seconds, f"partitionAge({self.seconds!r})")
        if value <= 0 or seconds_to_ns(value) <= 0:
            raise WindowClauseError(f"partitionAge({self.seconds!r}): the age must be > 0 seconds")
        _check_in_range(value, f"partitionAge({self.seconds!r}): the age")

    @property
    def ns(self) -> int:
        return seconds_to_ns(self.seconds)

    def clause(self) -> str:
        return f"partitionAge({self.seconds!r})"


@dataclass(frozen=True, slots=True)
class PartitionCount:
    """``partitionCount(N)``: keep at most N partitions, least recently used out first."""

    count: int

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 0:
            raise WindowClauseError(f"partitionCount({self.count!r}): expected an integer >= 0")

    def clause(self) -> str:
        return f"partitionCount({self.count})"


@dataclass(frozen=True, slots=True)
class TupleCount:
    """``tupleCount(N)``: keep at most N tuples over all partitions, evicting whole partitions."""

    count: int

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 0:
            raise WindowClauseError(f"tupleCount({self.count!r}): expected an integer >= 0")

    def clause(self) -> str:
        return f"tupleCount({self.count})"


EvictionPolicy = Count | Time | Delta | Punct
TriggerPolicy = Count | Time | Delta
PartitionEvictionPolicy = PartitionAge | PartitionCount | TupleCount


@dataclass(frozen=True, slots=True)
class WindowSpec:
    """A whole window clause: type, policies, partitioning.

    Build it from SPL text with `parse_window_clause`, or directly::

        WindowSpec(WindowType.SLIDING, Time(5.0), Count(2), partitioned=True)

    A sliding window without a trigger gets ``count(1)``, as the SPL compiler
    does. Combinations SPL rejects (a trigger on a tumbling window, punct() on
    a sliding window, partition eviction without ``partitioned``) raise
    `WindowClauseError`.
    """

    type: WindowType
    eviction: EvictionPolicy
    trigger: TriggerPolicy | None = None
    partitioned: bool = False
    partition_eviction: PartitionEvictionPolicy | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.type, WindowType):
            raise WindowClauseError(f"window type {self.type!r}: expected WindowType.TUMBLING or SLIDING")
        if not isinstance(self.eviction, (Count, Time, Delta, Punct)):
            raise WindowClauseError(
                f"eviction policy {self.eviction!r}: expected Count, Time, Delta or Punct")
        if self.type is WindowType.TUMBLING:
            if self.trigger is not None:
                raise WindowClauseError(
                    f"tumbling, {self.eviction.clause()}, {self.trigger.clause()}: a tumbling "
                    "window has no trigger policy; use a sliding window to trigger")
        else:
            if isinstance(self.eviction, Punct):
                raise WindowClauseError(
                    "sliding, punct(): a sliding window cannot be evicted by punctuation; "
                    "use tumbling, punct()")
            if self.trigger is None:
                object.__setattr__(self, "trigger", Count(1))
            elif not isinstance(self.trigger, (Count, Time, Delta)):
                raise WindowClauseError(
                    f"trigger policy {self.trigger!r}: expected Count, Time or Delta")
        if self.partition_eviction is not None:
            if not self.partitioned:
                raise WindowClauseError(
                    f"{self.partition_eviction.clause()}: partition eviction needs a "
                    "partitioned window; add 'partitioned' before it")
            if not isinstance(self.partition_eviction, (PartitionAge, PartitionCount, TupleCount)):
                raise WindowClauseError(
                    f"partition eviction {self.partition_eviction!r}: expected PartitionAge, "
                    "PartitionCount or TupleCount")

    def clause(self) -> str:
        """The SPL text of this spec (what follows ``window P :``)."""
        parts = [self.type.value, self.eviction.clause()]
        if self.trigger is not None:
            parts.append(self.trigger.clause())
        if self.partitioned:
            parts.append("partitioned")
        if self.partition_eviction is not None:
            parts.append(self.partition_eviction.clause())
        return ", ".join(parts)

    @property
    def uses_system_time(self) -> bool:
        """True when a policy follows the host's clock (time policies, partitionAge)."""
        return (isinstance(self.eviction, Time) or isinstance(self.trigger, Time)
                or isinstance(self.partition_eviction, PartitionAge))


EVENT_TIME_MAX = 2**63 - 1
"""The largest event time and watermark, in ticks: the ``"max"`` watermark.

IBM's maximum watermark is ``timestamp::max()``; we bound event times by the
int64 range of ticks instead (year 2262 in nanoseconds), which keeps every
value storable by msgpack and by Spark's long columns.
"""

EVENT_TIME_MIN = -(2**63)


def check_watermark(value: object, what: str, unit: str = "") -> int:
    """``value`` as a watermark, an int64 number of event-time ticks; otherwise a
    `WatermarkError` saying ``what.format(value)`` (``"watermark {!r}"``, ``"set_watermark({!r})"``:
    formatted only on failure) and, if given, the ticks' ``unit``."""
    if type(value) is int and EVENT_TIME_MIN <= value <= EVENT_TIME_MAX:
        return value
    what, ticks = what.format(value), f"{unit} ticks" if unit else "ticks"
    if isinstance(value, bool) or not isinstance(value, int):
        raise WatermarkError(f"{what}: expected an integer number of {ticks} (EVENT_TIME_MAX for the "
                             "final one)")
    if value < EVENT_TIME_MIN or value > EVENT_TIME_MAX:
        raise WatermarkError(f"{what}: outside the int64 range of {ticks}")
    return int(value)


_TICKS_PER_SECOND = {"ns": NS_PER_SECOND, "us": 1_000_000, "ms": 1_000}


def seconds_to_ticks(seconds: float, resolution: str = "ns") -> int:
    """Convert clause seconds to event-time ticks as SPL does (``EventTime::fromTimestamp``).

    The float becomes a timestamp by truncation (`seconds_to_ns`), then whole
    ticks of the resolution, truncated again: ``1.0005`` s is 1000 ms.
    """
    return seconds_to_ns(seconds) // (NS_PER_SECOND // _ticks_per_second(resolution))


def _ticks_per_second(resolution: str) -> int:
    per_second = _TICKS_PER_SECOND.get(resolution)
    if per_second is None:
        raise WindowClauseError(f"event-time resolution {resolution!r}: expected 'ns', 'us' or 'ms'")
    return per_second


@dataclass(frozen=True, slots=True)
class TimeIntervalSpec:
    """``timeInterval, intervalDuration(D) [, creationPeriod(P)] [, discardAge(A)] [, intervalOffset(O)]``.

    An event-time window: panes ``[N*P + O, N*P + O + D)`` for every integer
    N, filled by event time and completed, re-triggered and closed by
    watermarks (`TimeIntervalWindow`). Omitted values default as SPL's
    compiler does: ``P = D``, ``A = 0``, ``O = 0``. All in seconds, converted
    to integer ticks once; the offset is reduced modulo the period after that
    conversion, as IBM's window options do (``intervalOffset(13)`` with period
    10 is the window of ``intervalOffset(3)``).
    """

    duration: float
    period: float | None = None
    discard_age: float = 0.0
    offset: float = 0.0
    partitioned: bool = False

    def __post_init__(self) -> None:
        d = _check_number(self.duration, f"intervalDuration({self.duration!r})")
        if d <= 0 or seconds_to_ns(d) <= 0:
            raise WindowClauseError(
                f"intervalDuration({self.duration!r}): the pane duration must be > 0 seconds")
        if self.period is None:
            object.__setattr__(self, "period", self.duration)
        p = _check_number(self.period, f"creationPeriod({self.period!r})")
        if p <= 0 or seconds_to_ns(p) <= 0:
            raise WindowClauseError(
                f"creationPeriod({self.period!r}): the period between pane starts must be > 0 seconds")
        if _check_number(self.discard_age, f"discardAge({self.discard_age!r})") < 0:
            raise WindowClauseError(f"discardAge({self.discard_age!r}): must be >= 0 seconds")
        if _check_number(self.offset, f"intervalOffset({self.offset!r})") < 0:
            raise WindowClauseError(f"intervalOffset({self.offset!r}): must be >= 0 seconds")
        if not isinstance(self.partitioned, bool):
            raise WindowClauseError(f"partitioned={self.partitioned!r}: expected True or False")

    def ticks(self, resolution: str = "ns") -> tuple[int, int, int, int]:
        """``(duration, period, discard_age, offset)`` in ticks, the offset reduced mod the period.

        A positive duration or period that truncates to 0 ticks at a coarse
        resolution is an error: such a window could never hold a tuple.
        """
        factor = NS_PER_SECOND // _ticks_per_second(resolution)
        period_ns = seconds_to_ns(self.period)  # type: ignore[arg-type]
        offset_ns = seconds_to_ns(self.offset) % period_ns  # reduced as a timestamp, as IBM does
        d = seconds_to_ns(self.duration) // factor
        p = period_ns // factor
        if d <= 0 or p <= 0:
            raise WindowClauseError(
                f"{self.clause()}: duration and period must be at least one tick at "
                f"resolution {resolution!r}")
        return d, p, seconds_to_ns(self.discard_age) // factor, offset_ns // factor

    def clause(self) -> str:
        """The SPL text of this spec (what follows ``window P :``)."""
        parts = ["timeInterval", f"intervalDuration({self.duration!r})"]
        if self.period != self.duration:
            parts.append(f"creationPeriod({self.period!r})")
        if self.discard_age:
            parts.append(f"discardAge({self.discard_age!r})")
        if self.offset:
            parts.append(f"intervalOffset({self.offset!r})")
        if self.partitioned:
            parts.append("partitioned")
        return ", ".join(parts)

    @property
    def uses_system_time(self) -> bool:
        """Always False: panes follow event time and watermarks, never the host's clock."""
        return False
