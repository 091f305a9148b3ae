"""Which output of an operator failed, where a user reads failures: the job's message, the
error port's records, a parallel region's message and ``riverbed run``'s.

An Aggregate names the output whose user function raised as a note of the user's exception
(its own text stays the user's); notes show in a traceback but not in ``str()``, so the
messages built from it dropped the output's name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from riverbed.graph import Graph, Stream
from riverbed.operators import Aggregate, Count, CustomAggregate
from riverbed.runtime import JobError, VirtualClock, run_graph
from riverbed.testing import ListSink, ListSource

ROOT = Path(__file__).resolve().parent.parent
ROWS = [{"k": i % 2, "v": float(i)} for i in range(8)]
NAMED = "(output 'bad' = Custom(init="


def _failing() -> Aggregate:
    return Aggregate({"n": Count(), "bad": CustomAggregate(list, _append, _divide)}, group_by="k")


def _append(ctx: list[Any], tup: Any) -> list[Any]:
    ctx.append(tup)
    return ctx


def _divide(ctx: list[Any]) -> float:
    return 1 / (len(ctx) - len(ctx))


def _graph(width: int | None = None, error_port: bool = False) -> tuple[Graph, ListSink, ListSink]:
    g = Graph("notes")
    src = g.source("src", ListSource(ROWS))
    window = src.window("tumbling, count(4), partitioned", partition_by="k")
    out, errors = ListSink(), ListSink()
    if width is None:
        made: Any = g.operator("agg", _failing(), [window], error_port=error_port)
    else:
        with g.parallel(width, partition_by="k"):
            made = g.operator("agg", _failing(), [window], error_port=error_port)
    if error_port:
        data, failed = made
        g.sink("errors", errors, [failed])
    else:
        data = made
    assert isinstance(data, Stream)
    g.sink("out", out, [data])
    return g, out, errors


@pytest.mark.parametrize("width", [None, 2])
def test_the_jobs_message_names_the_failing_output(width: int | None) -> None:
    g, _, _ = _graph(width)
    with pytest.raises(JobError) as info:
        run_graph(g, clock=VirtualClock())
    text = str(info.value)
    assert "ZeroDivisionError: division by zero " + NAMED in text, text


def test_an_error_ports_record_names_the_failing_output() -> None:
    g, out, errors = _graph(error_port=True)
    run_graph(g, clock=VirtualClock())
    assert out.tuples == []  # every pane failed
    assert len(errors.tuples) == len(ROWS)  # each tuple the failed panes took out
    for record in errors.tuples:
        assert record["error"].startswith("ZeroDivisionError('division by zero') " + NAMED), record
        assert " at EVICTION of partition " in record["error"]


def test_riverbed_runs_message_names_the_failing_output(tmp_path: Path) -> None:
    script = tmp_path / "graph.py"
    script.write_text(
        "from riverbed.graph import Graph\n"
        "from riverbed.operators import Aggregate, CustomAggregate\n"
        "from riverbed.testing import ListSink, ListSource\n"
        "def build(params):\n"
        "    g = Graph('notes')\n"
        "    src = g.source('src', ListSource([{'v': 1}, {'v': 2}]))\n"
        "    bad = CustomAggregate(lambda: 0, lambda c, t: c + 1, lambda c: 1 / (c - c))\n"
        "    out = g.operator('agg', Aggregate({'bad': bad}), [src.window('tumbling, count(2)')])\n"
        "    g.sink('out', ListSink(), [out])\n"
        "    return g\n")
    done = subprocess.run([sys.executable, "-m", "riverbed", "run", str(script), "--no-status"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1, done.stderr
    assert "ZeroDivisionError: division by zero (output 'bad' = Custom(" in done.stderr, done.stderr
