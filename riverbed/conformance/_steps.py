"""A case's steps as typed values, read and checked once.

Every host used to switch on the raw step dicts itself, and each checked a
different subset of what can be wrong. Here a step is parsed once into one
of the frozen classes below; whatever is wrong with it (an unknown kind, a
value of the wrong type, a reset to a checkpoint never taken, a tuple after
a restart) is a `CaseError` naming the case and the step, before any host
runs. A host then only says what each kind of step means to it.

Times are integer nanoseconds, as the windows count them: ``at`` steps and
``timestamp`` attributes by rounding (they are clock instants written in
decimal), event times and watermarks as SPL's ``timestamp(double)`` does
(`riverbed.windows.seconds_to_ns`), so they agree with the windows' own
conversion of clause seconds.
"""

from __future__ import annotations

import json
import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ..windows import EVENT_TIME_MAX, MAX_SECONDS, seconds_to_ns

__all__ = [
    "NS_PER_SECOND",
    "AtStep",
    "CaseError",
    "CheckpointStep",
    "EvictPartitionStep",
    "PunctStep",
    "ResetStep",
    "RestartStep",
    "Step",
    "TupleStep",
    "WatermarkStep",
    "parse_steps",
]

NS_PER_SECOND = 1_000_000_000

_KINDS = ("tuple", "at", "punct", "evict_partition", "watermark", "checkpoint", "reset", "restart")


class CaseError(ValueError):
    """A case cannot be replayed: bad JSON, an unknown or malformed step, a clause we cannot
    build. The message names the case (and the step) and says what to write instead."""


@dataclass(frozen=True, slots=True)
class TupleStep:
    """A tuple arrives at the port; ``event_time`` (ns) only for timeInterval windows."""

    attributes: Mapping[str, Any]
    event_time: int | None = None

    @property
    def id(self) -> Any:
        return self.attributes.get("id")

    def tuple(self) -> dict[str, Any]:
        """A fresh copy of the attributes: windows keep the tuples they are given."""
        return dict(self.attributes)


@dataclass(frozen=True, slots=True)
class AtStep:
    """The clock moves to ``time`` (ns); every timer due by then fires first, in time order."""

    time: int


@dataclass(frozen=True, slots=True)
class PunctStep:
    kind: Literal["window", "final"]


@dataclass(frozen=True, slots=True)
class WatermarkStep:
    """The operator's event-time watermark advances to ``value`` (ns; "max" is the maximum)."""

    value: int


@dataclass(frozen=True, slots=True)
class EvictPartitionStep:
    """The operator evicts one partition (``StreamWindow.evictPartition``)."""

    partition: Hashable


@dataclass(frozen=True, slots=True)
class CheckpointStep:
    """Drain, then checkpoint the window under ``name``; resume at the same instant."""

    name: str


@dataclass(frozen=True, slots=True)
class ResetStep:
    """Reset to checkpoint ``name``, or to the initial state (None), at the current clock."""

    name: str | None


@dataclass(frozen=True, slots=True)
class RestartStep:
    """The PE stops; only the clock moves until the next reset, which runs in a new PE."""


Step = (TupleStep | AtStep | PunctStep | WatermarkStep | EvictPartitionStep | CheckpointStep | ResetStep
        | RestartStep)


def _seconds(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CaseError(f"{where}: expected seconds as a number, got {json.dumps(value)}")
    if not math.isfinite(value):
        raise CaseError(f"{where}: expected a finite number of seconds, got {value!r}")
    if abs(value) > MAX_SECONDS:  # (its nanoseconds overflow: infinity once multiplied)
        raise CaseError(f"{where}: {value!r} seconds is beyond the clock's range (int64 "
                        f"nanoseconds: at most {MAX_SECONDS} seconds)")
    return value


def clock_ns(value: Any, where: str) -> int:
    """A clock instant (``at``, a ``timestamp`` attribute) in ns: the nearest nanosecond."""
    return round(_seconds(value, where) * NS_PER_SECOND)


def event_ns(value: Any, where: str) -> int:
    """An event time or watermark in ns, as SPL's ``timestamp(double)`` converts it."""
    return seconds_to_ns(_seconds(value, where))


def parse_steps(raw: Any, where: str, *, timed: bool, partitioned: bool,
                schema: Mapping[str, str]) -> tuple[Step, ...]:
    """The typed steps of a case; ``where`` names the case in errors. ``timed``: the window is
    a timeInterval window; ``schema`` maps attribute names to SPL types."""
    if not isinstance(raw, list):
        raise CaseError(f"{where}: 'steps' must be a list of step objects")
    steps: list[Step] = []
    clock = 0
    checkpoints: set[str] = set()
    restart_at: int | None = None  # the index of the restart step that stopped the PE
    for index, step in enumerate(raw):
        here = f"{where}, step {index}"
        parsed = _parse_step(step, here, timed=timed, partitioned=partitioned, schema=schema)
        if restart_at is not None and not isinstance(parsed, (AtStep, ResetStep)):
            raise CaseError(f"{here}: the PE is stopped by the restart step {restart_at}; only 'at' "
                            "and 'reset' steps may come before the reset that starts a new PE")
        if isinstance(parsed, AtStep):
            if parsed.time < clock:
                raise CaseError(f"{here}: time cannot go backwards: the clock is at "
                                f"{clock / NS_PER_SECOND} s, the step moves it to "
                                f"{parsed.time / NS_PER_SECOND} s")
            clock = parsed.time
        elif isinstance(parsed, CheckpointStep):
            checkpoints.add(parsed.name)
        elif isinstance(parsed, RestartStep):
            restart_at = index
        elif isinstance(parsed, ResetStep):
            if parsed.name is not None and parsed.name not in checkpoints:
                raise CaseError(f"{here}: no checkpoint named {parsed.name!r} was taken before; "
                                f"taken so far: {sorted(checkpoints) or 'none'}")
            restart_at = None
        steps.append(parsed)
    return tuple(steps)


def _parse_step(step: Any, where: str, *, timed: bool, partitioned: bool,
                schema: Mapping[str, str]) -> Step:
    if not isinstance(step, dict):
        raise CaseError(f"{where}: a step must be an object, got {json.dumps(step)}")
    kinds = [k for k in _KINDS if k in step]
    extra = set(step) - set(_KINDS) - ({"event_time"} if "tuple" in step else set())
    if len(kinds) != 1 or extra:
        raise CaseError(f"{where}: unknown step {json.dumps(step)}; expected exactly one of "
                        f"{', '.join(_KINDS)} (a tuple may add event_time)")
    kind = kinds[0]
    value = step[kind]
    if kind == "tuple":
        return _tuple_step(step, where, timed=timed, schema=schema)
    if kind == "at":
        return AtStep(clock_ns(value, f"{where}: at"))
    if kind == "punct":
        if value not in ("window", "final"):
            raise CaseError(f"{where}: punct must be 'window' or 'final', got {json.dumps(value)}")
        return PunctStep(value)
    if kind == "watermark":
        if not timed:
            raise CaseError(f"{where}: watermarks drive timeInterval windows only; this window is not one")
        return WatermarkStep(EVENT_TIME_MAX if value == "max" else event_ns(value, f"{where}: watermark"))
    if kind == "evict_partition":
        if timed:
            raise CaseError(f"{where}: timeInterval windows have no evict_partition")
        if not partitioned:
            raise CaseError(f"{where}: evict_partition needs a partitioned window; add 'partitioned' "
                            "to the clause")
        if isinstance(value, (list, dict)):
            raise CaseError(f"{where}: a partition key is a string, number, boolean or null, got "
                            f"{json.dumps(value)}")
        return EvictPartitionStep(value)
    if kind == "checkpoint":
        return CheckpointStep(_name(value, where, "checkpoint"))
    if kind == "reset":
        return ResetStep(None if value is None else _name(value, where, "reset"))
    if value is not True:
        raise CaseError(f"{where}: a restart step is {{\"restart\": true}}, got {json.dumps(step)}")
    return RestartStep()


def _name(value: Any, where: str, kind: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise CaseError(f"{where}: {kind} takes a checkpoint name (a string), got {json.dumps(value)}")
    return str(value)


def _tuple_step(step: dict[str, Any], where: str, *, timed: bool, schema: Mapping[str, str]) -> TupleStep:
    raw = step["tuple"]
    if not isinstance(raw, dict):
        raise CaseError(f"{where}: 'tuple' must be an object of attributes, got {json.dumps(raw)}")
    attributes = dict(raw)
    for name, spl_type in schema.items():
        if spl_type == "timestamp" and isinstance(attributes.get(name), (int, float)):
            attributes[name] = clock_ns(attributes[name], f"{where}: attribute {name}")
    if not timed:
        if "event_time" in step:
            raise CaseError(f"{where}: tuples with event_time need a timeInterval window")
        return TupleStep(attributes)
    if "event_time" not in step:
        raise CaseError(f"{where}: a tuple for a timeInterval window needs 'event_time'")
    return TupleStep(attributes, event_ns(step["event_time"], f"{where}: event_time"))
