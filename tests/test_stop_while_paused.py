"""A stop with checkpoints while an operator holds its input back (full, and staying full: an
MQTTSink whose broker is gone) ends with the stop's checkpoint: the barrier was behind the held
input, and the stop waited until a second signal aborted it. The operator takes that input into
its state, and a restart delivers every reading exactly once."""

from __future__ import annotations

from typing import Any

from riverbed.checkpoint import MemoryStore
from riverbed.graph import Graph, Operator
from riverbed.runtime import Job, VirtualClock
from riverbed.testing import run_until_crash
from tests.test_parallel_checkpoints import SCHEMA, Readings

S = 1_000_000_000
N = 400


class Outbox(Operator):
    """A sink that cannot get rid of what it takes (``stuck``): past 20 it holds its input back
    for good. What it holds is its state; unstuck, it delivers everything to ``delivered``."""

    delivered: list[int]

    def __init__(self, delivered: list[int], stuck: bool) -> None:
        self.delivered = delivered
        self.stuck = stuck
        self.held: list[int] = []

    def on_tuple(self, tup: Any, port: int) -> None:
        self.held.append(tup["seq"])
        if self.stuck:
            if len(self.held) >= 20:
                self.context.pause_input(True)
        else:
            self.delivered.extend(self.held)
            self.held = []

    def snapshot(self) -> Any:
        return list(self.held)

    def restore(self, state: Any) -> None:
        self.held = list(state)
        if not self.stuck:
            self.delivered.extend(self.held)
            self.held = []


def _graph(out: Outbox) -> Graph:
    g = Graph("paused")
    g.sink("out", out, [g.source("readings", Readings(N), schema=SCHEMA)])
    return g


def test_a_stop_ends_with_its_checkpoint_and_a_restart_delivers_everything_once() -> None:
    store = MemoryStore(keep_last=100)
    first = Job(_graph(Outbox([], stuck=True)), clock=VirtualClock(), checkpoints=store,
                checkpoint_period=0.35)
    # Stopped at 1 s; the "crash" at 60 s only ends a job still waiting (it used to, for ever).
    assert run_until_crash(first, 60 * S, [(1.0, Job.stop)]), "the stop did not end the job"
    assert first.suspended
    delivered: list[int] = []
    second = Job(_graph(Outbox(delivered, stuck=False)), clock=VirtualClock(), checkpoints=store,
                 checkpoint_period=0.35)
    assert run_until_crash(second, None)
    assert second.restored_from is not None
    assert delivered == list(range(N))
