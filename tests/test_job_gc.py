"""A job's garbage collection threshold: raised while it runs, put back after, never lowered."""

from __future__ import annotations

import asyncio
import gc
import multiprocessing
from collections.abc import Iterator
from typing import Any

import pytest

from riverbed.graph import Graph, Operator, Schema, Source
from riverbed.runtime import JOB_GC_THRESHOLD, Job, run_graph
from riverbed.runtime._parallel import parent_fds
from riverbed.testing import ListSink, ListSource

ROW = Schema(k="int64", v="int64")
ROWS = [{"k": i % 3, "v": i} for i in range(5)]


@pytest.fixture(autouse=True)
def _default_thresholds() -> Iterator[None]:
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)  # CPython's defaults, whatever the test runner set
    yield
    gc.set_threshold(*before)


class Seen(Operator):
    """Stamps each tuple with the interpreter's thresholds where it runs (and, if given,
    sets the program's own thresholds on the first tuple)."""

    def __init__(self, set_to: tuple[int, int, int] | None = None) -> None:
        self.set_to = set_to

    def on_tuple(self, tup: Any, port: int) -> None:
        if self.set_to is not None:
            gc.set_threshold(*self.set_to)
            self.set_to = None
        self.submit({**tup, "th": list(gc.get_threshold())}, 0)


def _graph(seen: Seen | None = None, width: int | None = None) -> tuple[Graph, ListSink]:
    g = Graph("gc")
    src = g.source("rows", ListSource(ROWS), schema=ROW)
    sink = ListSink()
    if width is None:
        out = g.operator("seen", seen or Seen(), [src])
    else:
        with g.parallel(width, partition_by="k"):
            out = g.operator("seen", seen or Seen(), [src])
    g.sink("sink", sink, [out])
    return g, sink


def test_the_threshold_is_raised_while_the_job_runs_and_put_back_after() -> None:
    g, sink = _graph()
    run_graph(g)
    assert {tuple(r["th"]) for r in sink.tuples} == {(JOB_GC_THRESHOLD, 10, 10)}
    assert gc.get_threshold() == (700, 10, 10)


def test_none_leaves_the_interpreters_setting_alone() -> None:
    g, sink = _graph()
    run_graph(g, gc_threshold=None)
    assert {tuple(r["th"]) for r in sink.tuples} == {(700, 10, 10)}


def test_a_higher_threshold_or_collections_switched_off_are_kept() -> None:
    for mine in [(50_000, 5, 5), (0, 10, 10)]:
        gc.set_threshold(*mine)
        g, sink = _graph()
        run_graph(g, gc_threshold=1000)
        assert {tuple(r["th"]) for r in sink.tuples} == {mine}
        assert gc.get_threshold() == mine


def test_a_threshold_the_program_set_during_the_run_stays() -> None:
    g, sink = _graph(Seen(set_to=(1234, 9, 8)))
    run_graph(g, gc_threshold=5000)
    assert tuple(sink.tuples[0]["th"]) == (1234, 9, 8)
    assert gc.get_threshold() == (1234, 9, 8)


def test_jobs_running_together_put_it_back_when_the_last_ends() -> None:
    seen_between: list[tuple[int, int, int]] = []

    async def both() -> None:
        short, _ = _graph()
        long_g = Graph("long")
        gate = asyncio.Event()

        class Waits(Source):
            async def run(self) -> None:
                await gate.wait()
                self.submit({"k": 1, "v": 1})

        long_g.sink("sink", ListSink(), [long_g.source("rows", Waits(), schema=ROW)])
        long_job = asyncio.create_task(Job(long_g, gc_threshold=3000).run())
        await asyncio.sleep(0)  # the long job is running (waiting for its gate)
        await Job(short, gc_threshold=8000).run()
        seen_between.append(gc.get_threshold())
        gate.set()
        await long_job

    asyncio.run(both())
    assert seen_between == [(3000, 10, 10)]  # the first job's setting, until the last ended
    assert gc.get_threshold() == (700, 10, 10)


def test_a_job_that_fails_puts_it_back_too() -> None:
    class Fails(Operator):
        def on_tuple(self, tup: Any, port: int) -> None:
            raise RuntimeError("boom")

    g = Graph("fails")
    g.sink("bad", Fails(), [g.source("rows", ListSource(ROWS), schema=ROW)])
    with pytest.raises(Exception, match="boom"):
        run_graph(g)
    assert gc.get_threshold() == (700, 10, 10)


@pytest.mark.parametrize("bad", [0, -5, 2.5, True, "20000"])
def test_a_threshold_that_is_not_a_positive_int_is_refused_by_name(bad: Any) -> None:
    g, _ = _graph()
    with pytest.raises(ValueError, match=r"gc_threshold=.*expected an int >= 1"):
        Job(g, gc_threshold=bad)


def test_worker_processes_of_a_parallel_region_run_with_the_jobs_threshold() -> None:
    g, sink = _graph(width=2)
    run_graph(g)
    assert len(sink.tuples) == 5
    assert {tuple(r["th"]) for r in sink.tuples} == {(JOB_GC_THRESHOLD, 10, 10)}
    assert gc.get_threshold() == (700, 10, 10)
    assert multiprocessing.active_children() == []
    assert parent_fds() == frozenset()
