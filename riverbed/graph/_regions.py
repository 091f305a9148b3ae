"""Consistent regions (SPL ``@consistent``): sets of operators checkpointed and reset together.

A region starts at one or more sources and holds every operator reachable downstream of them,
as SPL computes it, except operators declared autonomous (``@autonomous``) and what only they
reach. Operators outside every region run autonomously: not checkpointed, never reset.

SPL's parameters, under Pythonic and SPL names: ``trigger`` (``"periodic"``: a checkpoint
every ``period`` seconds; ``"operator_driven"``: when a source calls ``make_consistent``),
``drain_timeout`` / ``drainTimeout`` (seconds a checkpoint may take before the region is
reset, default 180), ``reset_timeout`` / ``resetTimeout`` (seconds a reset may take, default
180), ``max_consecutive_reset_attempts`` / ``maxConsecutiveResetAttempts`` (resets without a
checkpoint in between before the job fails, default 5).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ._errors import GraphError
from ._names import is_name

__all__ = ["ConsistentRegion", "RegionTrigger", "region_spec", "resolve_regions"]

RegionTrigger = Literal["periodic", "operator_driven"]

_SPL_NAMES = {"drainTimeout": "drain_timeout", "resetTimeout": "reset_timeout",
              "maxConsecutiveResetAttempts": "max_consecutive_reset_attempts"}
_TRIGGERS = {"periodic": "periodic", "operator_driven": "operator_driven",
             "operatorDriven": "operator_driven"}
MIN_PERIOD = 0.01  # as for --checkpoint-period: below it a region does little but checkpoint


@dataclass(frozen=True, slots=True)
class ConsistentRegion:
    """One consistent region of a frozen graph; ``members`` in graph order (its sources first)."""

    name: str
    start: tuple[str, ...]
    trigger: RegionTrigger = "periodic"
    period: float | None = None
    drain_timeout: float = 180.0
    reset_timeout: float = 180.0
    max_consecutive_reset_attempts: int = 5
    members: tuple[str, ...] = ()

    def __contains__(self, operator: object) -> bool:
        return operator in self.members


def _seconds(region: str, what: str, value: Any, *, minimum: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or value < minimum or (minimum == 0.0 and value <= 0):
        bound = f">= {minimum:g}" if minimum else "> 0"
        raise GraphError(None, "consistent-region", f"region {region!r}: {what}={value!r}: expected "
                                                    f"a finite number of seconds {bound}")
    return float(value)


def region_spec(name: str, start: tuple[str, ...], params: Mapping[str, Any]) -> ConsistentRegion:
    """A region from `Graph.consistent_region`'s arguments (SPL spellings accepted), checked."""
    if not is_name(name):
        raise GraphError(None, "consistent-region", f"region name {name!r}: use letters, digits, "
                                                    "_ . -")
    if not start:
        raise GraphError(None, "consistent-region", f"region {name!r}: give at least one start "
                                                    "operator (a source)")
    values: dict[str, Any] = {}
    for key, value in params.items():
        pythonic = _SPL_NAMES.get(key, key)
        if pythonic not in ("trigger", "period", "drain_timeout", "reset_timeout",
                            "max_consecutive_reset_attempts"):
            raise GraphError(None, "consistent-region", f"region {name!r}: unknown parameter {key!r}")
        if pythonic in values:
            raise GraphError(None, "consistent-region", f"region {name!r}: {key!r} given twice")
        values[pythonic] = value
    trigger = _TRIGGERS.get(values.get("trigger", "periodic"))
    if trigger is None:
        raise GraphError(None, "consistent-region", f"region {name!r}: trigger="
                                                    f"{values['trigger']!r}: expected 'periodic' or "
                                                    "'operator_driven'")
    period = values.get("period")
    if trigger == "periodic":
        if period is None:
            raise GraphError(None, "consistent-region", f"region {name!r}: a periodic region needs "
                                                        "period=SECONDS")
        period = _seconds(name, "period", period, minimum=MIN_PERIOD)
    elif period is not None:
        raise GraphError(None, "consistent-region", f"region {name!r}: an operator-driven region "
                                                    "takes no period")
    attempts = values.get("max_consecutive_reset_attempts", 5)
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
        raise GraphError(None, "consistent-region", f"region {name!r}: max_consecutive_reset_attempts="
                                                    f"{attempts!r}: expected an int >= 1")
    return ConsistentRegion(
        name, start, trigger, period,  # type: ignore[arg-type]
        _seconds(name, "drain_timeout", values.get("drain_timeout", 180.0)),
        _seconds(name, "reset_timeout", values.get("reset_timeout", 180.0)), attempts)


def resolve_regions(regions: Iterable[ConsistentRegion], kinds: Mapping[str, str],
                    consumers: Mapping[str, list[str]], autonomous: set[str],
                    order: list[str]) -> tuple[list[ConsistentRegion], list[GraphError]]:
    """Each region's members: reachable from its start operators, autonomous ones excluded."""
    resolved: list[ConsistentRegion] = []
    errors: list[GraphError] = []
    owner: dict[str, str] = {}
    for region in regions:
        bad = [s for s in region.start if kinds.get(s) != "source"]
        for s in bad:
            what = "no operator" if s not in kinds else f"a {kinds[s]}, not a source"
            errors.append(GraphError(s, "consistent-region", f"region {region.name!r} starts at "
                                                            f"{s!r}: {what} (SPL: only sources may "
                                                            "start a consistent region)"))
        if bad:
            continue
        members: set[str] = set()
        todo = list(region.start)
        while todo:
            name = todo.pop()
            if name in members or name in autonomous:
                continue
            members.add(name)
            todo.extend(consumers.get(name, ()))
        for name in sorted(members):
            other = owner.get(name)
            if other is not None:
                errors.append(GraphError(name, "consistent-region", f"operator {name!r} is reachable "
                                                                   f"from regions {other!r} and "
                                                                   f"{region.name!r}: give them one "
                                                                   "region, or make it autonomous"))
            owner[name] = region.name
        resolved.append(ConsistentRegion(
            region.name, region.start, region.trigger, region.period, region.drain_timeout,
            region.reset_timeout, region.max_consecutive_reset_attempts,
            tuple(n for n in order if n in members)))
    names = [r.name for r in resolved]
    for name in {n for n in names if names.count(n) > 1}:
        errors.append(GraphError(None, "consistent-region", f"two regions are named {name!r}"))
    return resolved, errors
