"""The driver stage a batch behind Spark (`PipelinedStage`), without Spark.

Batches are what the key groups of a keyed deployment send to the driver
stage (built as in `test_spark_batches`); ``foreachBatch`` is called as Spark
calls it. The stage fails once in the middle of the stream; a restarted
stage, with the batches Spark delivers again, must leave the same file as an
uninterrupted run: batches logged before the failure run again, none twice.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from riverbed.graph import FrozenGraph, Graph
from riverbed.operators import Aggregate, Count, FileSink, Sum
from riverbed.runtime import OperatorError, VirtualClock, run_graph
from riverbed.spark_bridge._deploy import keyed_stages
from riverbed.spark_bridge._driver import DriverStage, log_dir, stage_dir
from riverbed.spark_bridge._keyed import KEYED_OUT_DDL, bundle_rows, host_group
from riverbed.spark_bridge._pipeline import PipelinedStage
from riverbed.spark_bridge._plan import plan
from riverbed.spark_bridge._source import arrow_batch, route_of, source_rows
from riverbed.testing import ListSource
from tests.spark_fakes import FakeBatch


class _FailingFileSink(FileSink):
    """A FileSink that fails once, at one value, while ``flag`` exists."""

    def __init__(self, path: str, flag: Path, at: int) -> None:
        super().__init__(path, format="csv")
        self.flag, self.at = flag, at

    def on_tuple(self, tup: Any, port: int) -> None:
        if tup["s"] == self.at and self.flag.exists():
            self.flag.unlink()
            raise RuntimeError("the sink failed")
        super().on_tuple(tup, port)


def _graph(out: Path, flag: Path, at: int) -> FrozenGraph:
    g = Graph("pipelined")
    src = g.source("src", ListSource([{"k": i % 3, "v": i} for i in range(300)]))
    agg = g.operator("agg", Aggregate({"s": Sum("v"), "n": Count()}, copy=("k",)),
                     [src.window("tumbling, count(4), partitioned", partition_by="k")])
    g.sink("file", _FailingFileSink(str(out), flag, at), [agg])
    return g.freeze()


def _batches(graph: FrozenGraph, groups: int = 2, rounds: int = 2) -> list[Any]:
    """The tables Spark would hand to ``foreachBatch``, batch by batch."""
    p = plan(graph, "keyed", groups=groups)
    labels = list(range(p.groups))
    rows = list(source_rows(graph, p.sources[0], 0, route=route_of(graph, p.keyed, p.groups, 16, labels)))
    hosted, _ = keyed_stages(graph, p, labels, None)
    states: dict[int, bytes] = {}
    tables = []
    per_batch = rounds * p.groups
    for start in range(0, len(rows), per_batch):
        out: list[tuple[Any, ...]] = []
        for label in labels:
            group_rows = [row[:5] for row in rows[start:start + per_batch] if row[5] == label]
            produced, states[label] = host_group(hosted, None, (label,), group_rows, states.get(label))
            out += bundle_rows(produced, label)
        tables.append(arrow_batch(out, KEYED_OUT_DDL))
    return tables


def _stage(graph: FrozenGraph, checkpoint: Path) -> DriverStage:
    p = plan(graph, "keyed", groups=2)
    return keyed_stages(graph, p, list(range(p.groups)), stage_dir(str(checkpoint)))[1]


def test_a_stage_failing_mid_stream_resumes_from_its_log_and_writes_each_tuple_once(tmp_path: Path) -> None:
    ref, out, flag, ck = tmp_path / "ref.csv", tmp_path / "out.csv", tmp_path / "flag", tmp_path / "ck"
    run_graph(_graph(ref, tmp_path / "no-flag", 0), clock=VirtualClock())
    lines = ref.read_text().splitlines()
    at = int(lines[len(lines) // 2].split(",")[1])  # a tumble in the middle of the stream
    flag.touch()
    graph = _graph(out, flag, at)
    tables = _batches(graph)
    first = PipelinedStage(_stage(graph, ck), log_dir(str(ck)))
    committed = 0  # batches Spark committed: foreachBatch returned
    with pytest.raises(RuntimeError, match="the driver stage failed"):
        for batch_id, table in enumerate(tables):
            first.process(FakeBatch(table), batch_id)
            committed = batch_id + 1
    with pytest.raises(RuntimeError, match="the driver stage failed"):
        first.close()
    assert 0 < committed < len(tables) - 1
    assert len(list(Path(log_dir(str(ck))).iterdir())) >= 1  # the failed batch stays logged
    # A restart whose replay fails again says so at deployment; the next one goes on
    flag.touch()
    with pytest.raises(OperatorError, match=r"operator 'file'.*the sink failed"):
        PipelinedStage(_stage(graph, ck), log_dir(str(ck)))
    # Restart: the stage replays its log, Spark delivers again from its first uncommitted batch.
    second = PipelinedStage(_stage(graph, ck), log_dir(str(ck)))
    for batch_id in range(committed, len(tables)):
        second.process(FakeBatch(tables[batch_id]), batch_id)
    second.close()
    assert out.read_text() == ref.read_text()
    assert not list(Path(log_dir(str(ck))).iterdir())


def test_a_torn_log_write_is_dropped_and_the_batch_comes_again(tmp_path: Path) -> None:
    ref, out, ck = tmp_path / "ref.csv", tmp_path / "out.csv", tmp_path / "ck"
    run_graph(_graph(ref, tmp_path / "no-flag", 0), clock=VirtualClock())
    graph = _graph(out, tmp_path / "no-flag", 0)
    tables = _batches(graph)
    Path(log_dir(str(ck))).mkdir(parents=True)
    (Path(log_dir(str(ck))) / f"{0:020d}.arrow.tmp").write_bytes(b"cut short")
    stage = PipelinedStage(_stage(graph, ck), log_dir(str(ck)))
    for batch_id, table in enumerate(tables):
        stage.process(FakeBatch(table), batch_id)
    stage.close()
    assert out.read_text() == ref.read_text()


def test_at_most_depth_batches_wait_for_a_slow_stage(tmp_path: Path) -> None:
    graph = _graph(tmp_path / "out.csv", tmp_path / "no-flag", 0)
    tables = _batches(graph)
    stage = _stage(graph, tmp_path / "ck")
    release, started = threading.Event(), threading.Event()
    run = stage.process_rows

    def slow(rows: list[tuple[Any, ...]], batch_id: int) -> None:
        started.set()
        release.wait()
        run(rows, batch_id)

    stage.process_rows = slow  # type: ignore[method-assign]
    pipelined = PipelinedStage(stage, None, depth=2)
    pipelined.process(FakeBatch(tables[0]), 0)
    assert started.wait(timeout=60)  # the thread holds batch 0
    pipelined.process(FakeBatch(tables[1]), 1)
    pipelined.process(FakeBatch(tables[2]), 2)
    assert pipelined._queue.full()  # the next foreachBatch call would wait
    release.set()
    for batch_id in range(3, len(tables)):
        pipelined.process(FakeBatch(tables[batch_id]), batch_id)
    pipelined.close()
    assert stage.batches == len(tables)
