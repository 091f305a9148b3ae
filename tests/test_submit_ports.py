"""Submitting to an output port the operator does not have fails, naming the operator and port.

A negative port is not Python's index from the end: before, ``submit(tup, -1)`` on an operator
with one output port sent the tuple twice, and on one with two ports sent it on port 1.
"""

from __future__ import annotations

from typing import Any

import pytest

from riverbed.graph import EventTime, Graph, Operator, Punct, Schema
from riverbed.runtime import JobError, run_graph
from riverbed.testing import ListSink, ListSource

ROW = Schema(v="int64", ts="int64")


class SubmitsTo(Operator):
    def __init__(self, port: Any, punct: bool = False) -> None:
        self.port, self.punct = port, punct

    def on_tuple(self, tup: Any, port: int) -> None:
        if self.punct:
            self.submit_punct(Punct.WINDOW, self.port)
        else:
            self.submit(tup, self.port)


def _run(port: Any, outputs: int, *, punct: bool = False, event_time: bool = False) -> list[ListSink]:
    g = Graph("ports")
    src = g.source("rows", ListSource([{"v": 1, "ts": 10}, {"v": 2, "ts": 20}]), schema=ROW)
    streams = g.operator("op", SubmitsTo(port, punct), [src], outputs=[ROW] * outputs,
                         event_time=EventTime.of("ts", resolution="ms") if event_time else None)
    sinks = []
    for i, s in enumerate(streams if outputs > 1 else [streams]):
        sinks.append(ListSink())
        g.sink(f"sink{i}", sinks[-1], [s])
    run_graph(g)
    return sinks


@pytest.mark.parametrize(("port", "outputs", "has"), [
    (-1, 1, "output port 0 only"), (1, 1, "output port 0 only"),
    (-1, 2, "output ports 0 to 1"), (2, 2, "output ports 0 to 1"), ("1", 2, "output ports 0 to 1"),
])
def test_a_tuple_to_a_port_that_does_not_exist_fails_the_job_by_name(port: Any, outputs: int,
                                                                      has: str) -> None:
    with pytest.raises(JobError, match=rf"'op'.*output port {port!r} does not exist \(it has {has}\)"):
        _run(port, outputs)


def test_an_event_time_operators_submit_refuses_a_negative_port_too() -> None:
    with pytest.raises(JobError, match=r"output port -1 does not exist \(it has output ports 0 to 1\)"):
        _run(-1, 2, event_time=True)


@pytest.mark.parametrize("port", [-1, 1])
def test_a_window_mark_to_a_port_that_does_not_exist_fails_the_job_by_name(port: int) -> None:
    with pytest.raises(JobError, match=rf"output port {port} does not exist"):
        _run(port, 1, punct=True)


def test_the_ports_that_exist_still_take_their_tuples() -> None:
    sinks = _run(1, 2)
    assert [s.tuples for s in sinks] == [[], [{"v": 1, "ts": 10}, {"v": 2, "ts": 20}]]
    sinks = _run(1, 2, event_time=True)
    assert [len(s.tuples) for s in sinks] == [0, 2]
