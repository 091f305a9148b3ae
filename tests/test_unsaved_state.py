"""A user's operator whose attributes change between checkpoints but that has no `snapshot()`:
the job warns once, naming it and the attributes (its state starts over after a restart)."""

from __future__ import annotations

from typing import Any

from riverbed.checkpoint import MemoryStore
from riverbed.graph import Graph, Operator
from riverbed.operators import Beacon
from riverbed.runtime import Job, VirtualClock, run_virtual
from riverbed.testing import ListSink


class Counts(Operator):
    """Numbers its tuples in ``self.n``, keeps them in ``self.seen``: no snapshot()."""

    def __init__(self) -> None:
        self.n = 0
        self.seen: list[Any] = []

    def on_tuple(self, tup: Any, port: int) -> None:
        self.n += 1
        self.seen.append(tup)
        self.submit({**tup, "n": self.n})


class Scales(Operator):
    """Configuration only: its attributes never change."""

    def __init__(self, factor: int) -> None:
        self.factor = factor
        self.fill = float("nan")  # (not equal to itself, and never changed)

    def on_tuple(self, tup: Any, port: int) -> None:
        self.submit({**tup, "n": tup["n"] * self.factor})


class Saves(Counts):
    def snapshot(self) -> Any:
        return self.n

    def restore(self, state: Any) -> None:
        self.n = state or 0


def test_only_an_operator_whose_attributes_change_without_a_snapshot_is_named_once() -> None:
    logged: list[dict[str, Any]] = []

    class Log:
        def info(self, event: str, **fields: Any) -> None:
            logged.append({"event": event, **fields})

        warning = error = info

    g = Graph("unsaved")
    src = g.source("src", Beacon(iterations=50, period=0.1))
    counts = g.operator("counts", Counts(), [src])
    scaled = g.operator("scaled", Scales(2), [counts])
    g.sink("out", ListSink(), [g.operator("saves", Saves(), [scaled])])
    job = Job(g, clock=VirtualClock(), checkpoints=MemoryStore(), checkpoint_period=0.5, logger=Log())
    run_virtual(job.run(), job.clock)  # type: ignore[arg-type]
    warned = [(e["operator"], e["attributes"]) for e in logged
              if e["event"] == "operator_state_not_checkpointed"]
    assert warned == [("counts", ["n", "seen"])]
