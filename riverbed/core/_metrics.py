"""Per-port metrics in the spirit of SPL's (nTuplesProcessed, nTuplesSubmitted, nWindowPunctsProcessed...).

Plain integer fields updated once per batch, never per tuple, so counting
costs nothing measurable. A `JobMetrics` holds one `OperatorMetrics` per
operator; the CLI's status view and the Prometheus exporter read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Counter", "InputPortMetrics", "JobMetrics", "OperatorMetrics", "OutputPortMetrics",
           "RegionMetrics"]


@dataclass(slots=True)
class InputPortMetrics:
    tuples_processed: int = 0
    window_puncts_processed: int = 0
    final_puncts_processed: int = 0
    tuples_dropped_late: int = 0  # too late for a timeInterval window (behind its drop point)
    errors: int = 0


@dataclass(slots=True)
class OutputPortMetrics:
    tuples_submitted: int = 0
    window_puncts_submitted: int = 0
    final_puncts_submitted: int = 0
    watermarks_submitted: int = 0


class Counter:
    """A count an operator keeps of its own (reconnects, bad payloads): ``inc`` costs an add."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def inc(self, n: int = 1) -> None:
        self.value += n


@dataclass(slots=True)
class OperatorMetrics:
    name: str
    inputs: list[InputPortMetrics] = field(default_factory=list)
    outputs: list[OutputPortMetrics] = field(default_factory=list)
    queue_size: int = 0  # batches waiting in the inbox, refreshed when read
    queue_capacity: int = 0
    queue_high_water: int = 0
    backpressure_waits: int = 0  # times an upstream waited on this operator's full inbox
    watermark: int | None = None
    finished: bool = False
    counters: dict[str, Counter] = field(default_factory=dict)  # the operator's own (`context.counter`)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "inputs": [vars_of(p) for p in self.inputs],
            "outputs": [vars_of(p) for p in self.outputs],
            "queue_size": self.queue_size,
            "queue_capacity": self.queue_capacity,
            "queue_high_water": self.queue_high_water,
            "backpressure_waits": self.backpressure_waits,
            "watermark": self.watermark,
            "finished": self.finished,
            "counters": {name: c.value for name, c in self.counters.copy().items()},  # (threads)
        }


def vars_of(obj: Any) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in obj.__slots__}


@dataclass(slots=True)
class RegionMetrics:
    """One consistent region: its state, its checkpoints, its resets (SPL's region metrics)."""

    name: str
    members: int = 0
    state: str = "processing"  # processing, draining, resetting, failed
    last_committed: int | None = None
    checkpoints: int = 0
    drain_ms: float = 0.0  # the last checkpoint: barriers out to every report in
    checkpoint_ms: float = 0.0  # the last checkpoint: the store's save
    resets: int = 0
    consecutive_resets: int = 0
    last_recovery_ms: float = 0.0  # the last reset: failure to processing again

    def as_dict(self) -> dict[str, Any]:
        return vars_of(self)


@dataclass(slots=True)
class JobMetrics:
    job: str
    operators: dict[str, OperatorMetrics] = field(default_factory=dict)
    regions: dict[str, RegionMetrics] = field(default_factory=dict)
    restarts: int = 0  # job processes restarted by `riverbed run --restarts` before this one

    def as_dict(self) -> dict[str, Any]:
        return {"job": self.job, "operators": [m.as_dict() for m in self.operators.values()],
                "regions": [r.as_dict() for r in self.regions.values()], "restarts": self.restarts}
