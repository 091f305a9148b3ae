"""File sources read by Spark's tasks in parallel (`_reads`) on a local Spark: the runtime's
output, byte for byte, and the parts of a micro-batch read by different tasks of one stage."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from riverbed.graph import Graph, Schema
from riverbed.operators import Aggregate, Count, FileSink, FileSource, Filter, Sum
from riverbed.runtime import VirtualClock, run_graph
from riverbed.spark_bridge._deploy import deploy

ROW = Schema(k="rstring", v="int64", file="rstring")


def _data(path: Path, n: int = 4000) -> Path:
    lines = ["k,v"] + [f"k{i * 7 % 11},{i}" for i in range(n)]
    path.write_text("\n".join(lines) + "\n")
    return path


def _graph(data: Path, out: Path, *, chain: bool) -> Graph:
    g = Graph("file-reads")
    src = g.source("src", FileSource(str(data), format="csv", has_header=True, file_name_attribute="file"),
                   schema=ROW)
    into = g.operator("keep", Filter(lambda t: t["v"] % 3 != 0), [src]) if chain else src
    agg = g.operator("agg", Aggregate({"s": Sum("v"), "n": Count()}, copy=("k",)),
                     [into.window("tumbling, count(5), partitioned", partition_by="k")],
                     outputs=[Schema(k="rstring", s="int64", n="int64")])
    g.sink("file", FileSink(str(out), format="csv"), [agg])
    return g


def _spread(read_tasks: list[tuple[int, int, int, int]]) -> dict[int, set[int]]:
    """Stage -> the partitions (tasks) that read parts in it."""
    by_stage: dict[int, set[int]] = defaultdict(set)
    for _part, stage, partition, _pid in read_tasks:
        by_stage[stage].add(partition)
    return by_stage


@pytest.mark.parametrize(("mode", "chain"), [("keyed", False), ("keyed", True), ("driver", False)])
def test_a_file_source_is_read_in_parts_by_several_tasks_with_the_runtimes_output(
        spark: Any, tmp_path: Path, mode: str, chain: bool) -> None:
    data = _data(tmp_path / "in.csv")
    ref, out = tmp_path / "runtime.csv", tmp_path / "spark.csv"
    run_graph(_graph(data, ref, chain=chain), clock=VirtualClock())
    d = deploy(_graph(data, out, chain=chain), spark, mode=mode,  # type: ignore[arg-type]
               checkpoint=str(tmp_path / "ck"), max_records_per_batch=800)
    d.await_termination()
    assert d.plan.mode == mode and d.plan.where("src") == "parallel read"
    assert (d.plan.pre_chain == ["keep"]) == chain
    parts = sorted({part for part, *_ in d.read_tasks})
    assert len(parts) >= 6 and parts == list(range(len(parts)))  # every part read (once a batch)
    spread = _spread(d.read_tasks)
    # a micro-batch's parts went to two tasks of its stage: the file's reading is split
    assert sum(1 for partitions in spread.values() if len(partitions) >= 2) >= 2, spread
    assert d.stage.batches >= 3
    assert len(ref.read_text().splitlines()) > 500
    assert out.read_text() == ref.read_text()


def test_a_query_reading_file_parts_resumes_from_its_checkpoint_after_a_crash(
        spark: Any, tmp_path: Path) -> None:
    """The parts' descriptions are published once; a restart reads the same parts from Spark's
    offset log and the file equals an uninterrupted run's."""
    data = _data(tmp_path / "in.csv")
    flag = tmp_path / "flag"

    def graph(out: Path) -> Graph:
        g = Graph("file-crash")
        src = g.source("src", FileSource(str(data), format="csv", has_header=True),
                       schema=Schema(k="rstring", v="int64"))
        agg = g.operator("agg", Aggregate({"s": Sum("v"), "n": Count()}, copy=("k",)),
                         [src.window("tumbling, count(5), partitioned", partition_by="k")],
                         outputs=[Schema(k="rstring", s="int64", n="int64")])
        crash = g.operator("crash", Filter(_CrashOnce(flag, 3000)), [agg])
        g.sink("file", FileSink(str(out), format="csv"), [crash])
        return g

    ref, out, ck = tmp_path / "runtime.csv", tmp_path / "spark.csv", str(tmp_path / "ck")
    run_graph(graph(ref), clock=VirtualClock())
    flag.touch()
    first = deploy(graph(out), spark, checkpoint=ck, max_records_per_batch=800)
    with pytest.raises(Exception, match="crash once"):
        first.await_termination()
    assert len(out.read_text() if out.exists() else "") < len(ref.read_text())  # not all committed
    second = deploy(graph(out), spark, checkpoint=ck, max_records_per_batch=800)
    second.await_termination()
    assert out.read_text() == ref.read_text()


class _CrashOnce:
    def __init__(self, flag: Path, above: int) -> None:
        self.flag, self.above = str(flag), above

    def __call__(self, t: Any) -> bool:
        if t["s"] > self.above * 5 and Path(self.flag).exists():
            Path(self.flag).unlink()
            raise RuntimeError("crash once")
        return True
