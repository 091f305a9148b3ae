"""SparkOutput without Spark: the schema mapping, the refusals, and the writer's commit
protocol (what is written, under which commit number, after a crash)."""

from __future__ import annotations

from typing import Any

import pytest

from riverbed.graph import Graph, Operator, Schema
from riverbed.spark_bridge import SparkOutput, TranslationError, spark_ddl
from riverbed.spark_bridge._outputs import SparkWriter, with_outputs
from riverbed.testing import ListSink, ListSource


def test_riverbed_types_map_to_spark_types_that_hold_them_exactly() -> None:
    schema = Schema(a="int8", b="uint32", c="float32", d="float64", e="rstring", f="boolean",
                    g="blob", h="timestamp", i="list<int64>", j="map<rstring,list<float64>>",
                    k="set<rstring>")
    assert spark_ddl(schema) == (
        "`a` BYTE, `b` LONG, `c` FLOAT, `d` DOUBLE, `e` STRING, `f` BOOLEAN, `g` BINARY, "
        "`h` LONG, `i` ARRAY<LONG>, `j` MAP<STRING, ARRAY<DOUBLE>>, `k` ARRAY<STRING>")
    for inexact in ("uint64", "decimal64", "list<decimal32>"):
        with pytest.raises(ValueError, match="has no exact Spark type"):
            spark_ddl(Schema(x=inexact))


def _graph(schema: Schema | None) -> Any:
    g = Graph("out")
    s = g.source("src", ListSource([{"k": 1}]), schema=schema)
    g.operator("pass", _Pass(), [s])
    g.sink("sink", ListSink(), [s])
    return g.freeze()


class _Pass(Operator):
    def on_tuple(self, tup: Any, port: int) -> None:
        self.submit(tup)


def test_a_spark_output_replaces_the_sink_with_the_streams_schema() -> None:
    graph = with_outputs(_graph(Schema(k="int64")), {"sink": SparkOutput("/tmp/x")})
    writer = graph.operator("sink").operator
    assert isinstance(writer, SparkWriter) and writer.ddl == "`k` LONG"
    assert isinstance(graph.operator("src").operator, ListSource)


@pytest.mark.parametrize(("schema", "name", "why"), [
    (Schema(k="int64"), "pass", r"operator 'pass'.*stands in for a sink with one input port"),
    (Schema(k="int64"), "nope", r"operator 'nope'.*no such sink"),
    (None, "sink", r"operator 'sink'.*needs the schema of its stream"),
    (Schema(k="uint64"), "sink", r"operator 'sink'.*uint64 has no exact Spark type"),
])
def test_a_spark_output_that_cannot_stand_in_is_refused(schema: Schema | None, name: str, why: str) -> None:
    with pytest.raises(TranslationError, match=why):
        with_outputs(_graph(schema), {name: SparkOutput("/tmp/x")})


class _Recorded(SparkWriter):
    def __init__(self) -> None:
        super().__init__(SparkOutput("/tmp/x"), "`v` LONG")
        self.writes: list[tuple[int, list[Any]]] = []

    def _write(self, tuples: list[Any]) -> None:
        self.writes.append((self.written, list(tuples)))
        self.written += 1


def test_each_commit_is_written_once_and_a_crash_after_storing_writes_it_again_as_the_same_commit() -> None:
    w = _Recorded()
    w.on_tuple({"v": 1}, 0)
    w.snapshot()
    w.on_tuple({"v": 2}, 0)  # after the barrier: the next commit's
    w.on_checkpoint_committed(1)
    w.snapshot()
    w.on_checkpoint_committed(2)
    w.snapshot()  # nothing came: a commit without tuples writes nothing
    w.on_checkpoint_committed(3)
    w.on_tuple({"v": 3}, 0)
    stored = w.snapshot()
    assert w.writes == [(0, [{"v": 1}]), (1, [{"v": 2}])]
    # The process dies before the commit's write; the stage restores the stored state.
    again = _Recorded()
    again.restore(stored)
    assert again.writes == [(2, [{"v": 3}])]
    again.on_tuple({"v": 4}, 0)
    again.snapshot()
    again.on_checkpoint_committed(5)
    assert again.writes[-1] == (3, [{"v": 4}])


def test_without_a_snapshot_a_commit_writes_what_came() -> None:
    w = _Recorded()
    w.on_tuple({"v": 1}, 0)
    w.on_checkpoint_committed(1)
    assert w.writes == [(0, [{"v": 1}])]
