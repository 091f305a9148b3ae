"""`OperatorContext.consistent_region`: whether a checkpoint holds the operator's state, known from
``setup()`` on, in the job's process and in a parallel region's worker alike (an operator that
acknowledges input only at commits, as MQTTSource with ack="checkpoint", asks it at setup)."""

from __future__ import annotations

from typing import Any

import pytest

from riverbed.checkpoint import MemoryStore
from riverbed.graph import Graph, Operator, Schema, Source
from riverbed.runtime import Job, VirtualClock, run_virtual
from riverbed.testing import ListSink

SCHEMA = Schema(channel="int64", region="rstring")


def _text(region: str | None) -> str:
    return "-" if region is None else region


class Tell(Source):
    """Emits, once, its channel and the region its context named at setup ("-" for None; the
    job's own region, taken when the job checkpoints with no region declared, is named "")."""

    replayable = True

    def setup(self) -> None:
        self.seen = self.context.consistent_region

    def snapshot(self) -> Any:
        return None

    def restore(self, state: Any) -> None:
        pass

    def generate(self) -> Any:
        yield {"channel": self.context.channel, "region": _text(self.seen)}


class Pass(Operator):
    def setup(self) -> None:
        self.seen = self.context.consistent_region

    def on_tuple(self, tup: Any, port: int) -> None:
        self.submit(dict(tup, region=f"{tup['region']}|{_text(self.seen)}"))


def _run(width: int | None, checkpoints: bool) -> list[dict[str, Any]]:
    g = Graph("ctx")
    sink = ListSink()
    if width is None:
        out = g.operator("pass", Pass(), [g.source("tell", Tell(), schema=SCHEMA)], [SCHEMA])
    else:
        with g.parallel(width):
            out = g.operator("pass", Pass(), [g.source("tell", Tell(), schema=SCHEMA)], [SCHEMA])
    g.sink("out", sink, [out])
    job = Job(g, clock=VirtualClock(), checkpoints=MemoryStore() if checkpoints else None,
              checkpoint_period=60.0 if checkpoints else None)
    run_virtual(job.run(), job.clock)  # type: ignore[arg-type]
    return sorted(sink.tuples, key=lambda t: t["channel"])


@pytest.mark.parametrize("width", [None, 2])
def test_known_at_setup_in_the_job_and_in_its_workers(width: int | None) -> None:
    channels = [0] if width is None else [0, 1]
    assert _run(width, True) == [{"channel": c, "region": "|"} for c in channels]
    assert _run(width, False) == [{"channel": c, "region": "-|-"} for c in channels]


def test_a_declared_region_by_its_name_in_a_worker() -> None:
    g = Graph("ctx")
    sink = ListSink()
    with g.parallel(2):
        tell = g.source("tell", Tell(), schema=SCHEMA)
        out = g.operator("pass", Pass(), [tell], [SCHEMA])
    g.consistent_region(tell, name="readings", period=60.0)
    g.sink("out", sink, [out])
    job = Job(g, clock=VirtualClock(), checkpoints=MemoryStore())
    run_virtual(job.run(), job.clock)  # type: ignore[arg-type]
    assert sorted(t["region"] for t in sink.tuples) == ["readings|readings"] * 2
