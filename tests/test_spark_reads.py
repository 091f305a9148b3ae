"""File sources cut into parts that Spark's tasks read (`_reads`), without Spark: the parts'
items, one after another, are exactly what the runtime's source submits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from riverbed.core import JobError
from riverbed.graph import FrozenGraph, Graph, Punct, Schema
from riverbed.operators import Aggregate, Count, DirectoryScan, FileSource, Sum
from riverbed.spark_bridge import plan
from riverbed.spark_bridge._reads import ReadPlan, part_items, plan_parts, read_plan
from riverbed.spark_bridge._source import TUPLES, SourceItems
from riverbed.testing import ListSink, ListSource

ROW = Schema(k="rstring", v="int64", file="rstring")


def _csv(path: Path, n: int, *, bad_at: int | None = None) -> Path:
    lines = ["k,v"]
    for i in range(n):
        lines.append(f"k{i * 7 % 5},{i}" if i != bad_at else f"k0,not-a-number-{i}")
        if i % 97 == 0:
            lines.append("")  # blank lines between records are skipped
    path.write_text("\n".join(lines) + "\n")
    return path


def _graph(source: Any, schema: Schema = ROW) -> FrozenGraph:
    g = Graph("reads")
    src = g.source("src", source, schema=schema)
    agg = g.operator("agg", Aggregate({"s": Sum("v"), "n": Count()}, copy=("k",)),
                     [src.window("tumbling, count(4), partitioned", partition_by="k")])
    g.sink("sink", ListSink(), [agg])
    return g.freeze()


def _flat(items: list[tuple[int, int, int, Any]]) -> list[tuple[int, int, int, Any]]:
    out: list[tuple[int, int, int, Any]] = []
    for kind, at, value, x in items:
        if kind == TUPLES:
            out.extend((0, at, 0, t) for t in x)
        else:
            out.append((kind, at, value, x))
    return out


def _read_in_parts(graph: FrozenGraph, rp: ReadPlan, records: int) -> tuple[int, list[Any]]:
    parts = plan_parts(graph, rp, records=records, tasks=2)
    got: list[Any] = []
    for part in parts:
        got.extend(_flat(list(part_items(graph, rp, part))))
    return len(parts), got


def test_a_csv_file_in_line_aligned_ranges_gives_the_sources_items_in_order(tmp_path: Path) -> None:
    f = _csv(tmp_path / "in.csv", 3000)
    graph = _graph(FileSource(str(f), format="csv", has_header=True, file_name_attribute="file",
                              init_delay=2.5))
    rp = read_plan(graph, "src", only_source=True)
    assert isinstance(rp, ReadPlan) and rp.ranges
    parts, got = _read_in_parts(graph, rp, records=200)
    expected = list(SourceItems(graph, "src"))
    assert parts >= 5
    assert got == expected
    assert len(expected) == 3002 and expected[0][1] == 2_500_000_000  # every item at the start time
    assert expected[0][3] == {"k": "k0", "v": 0, "file": str(f)}


@pytest.mark.parametrize(("fmt", "marker"), [("json", "\n"), ("line", "\r\n"), ("line", "\r")])
def test_json_and_line_files_with_other_line_markers_split_exactly(tmp_path: Path, fmt: str,
                                                                  marker: str) -> None:
    f = tmp_path / "in.txt"
    if fmt == "json":
        text = "".join(json.dumps({"k": f"k{i % 3}", "v": i}) + marker for i in range(2000))
        schema = Schema(k="rstring", v="int64")
        src = FileSource(str(f), format="json")
    else:
        text = marker.join(f"line {i} " + "x" * (i % 13) for i in range(2000))  # no marker at the end
        schema = Schema(line="rstring")
        src = FileSource(str(f), format="line", eol_marker=marker)
    f.write_bytes(text.encode())
    g = Graph("lines")
    s = g.source("src", src, schema=schema)
    g.sink("sink", ListSink(), [s])
    graph = g.freeze()
    rp = read_plan(graph, "src", only_source=True)
    assert isinstance(rp, ReadPlan) and rp.ranges
    parts, got = _read_in_parts(graph, rp, records=150)
    assert parts >= 5
    assert got == list(SourceItems(graph, "src"))


def test_a_csv_file_with_quotes_is_one_part_because_a_quoted_field_may_span_lines(tmp_path: Path) -> None:
    f = tmp_path / "in.csv"
    f.write_text("".join(f'k{i % 3},"{i}\n{i}"\n' for i in range(2000)))  # every record spans two lines
    graph = _graph(FileSource(str(f), format="csv"), Schema(k="rstring", v="rstring"))
    rp = read_plan(graph, "src", only_source=True)
    assert isinstance(rp, ReadPlan) and rp.ranges  # allowed by the graph; the file decides
    parts, got = _read_in_parts(graph, rp, records=100)
    assert parts == 1
    assert got == list(SourceItems(graph, "src"))


@pytest.mark.parametrize(("params", "why"), [
    ({"has_delay_field": True}, "delay field"),
    ({"tuple_number_attribute": "n"}, "tuple_number_attribute"),
    ({"encoding": "utf-16"}, "encoding"),
])
def test_a_file_whose_records_depend_on_those_before_is_read_whole_by_one_task(
        tmp_path: Path, params: dict[str, Any], why: str) -> None:
    schema = Schema(k="rstring", v="int64", n="int64") if "tuple_number_attribute" in params else \
        Schema(k="rstring", v="int64")
    graph = _graph(FileSource(str(tmp_path / "in.csv"), format="csv", **params), schema)
    rp = read_plan(graph, "src", only_source=True)
    assert isinstance(rp, ReadPlan) and not rp.ranges and why in rp.why
    assert "[executors, parallel read]" in plan(graph).explain()


def test_a_bad_record_in_a_later_range_names_the_file_and_its_line(tmp_path: Path) -> None:
    f = _csv(tmp_path / "in.csv", 3000, bad_at=2500)
    graph = _graph(FileSource(str(f), format="csv", has_header=True), Schema(k="rstring", v="int64"))
    rp = read_plan(graph, "src", only_source=True)
    assert isinstance(rp, ReadPlan)
    with pytest.raises(JobError) as runtime:
        list(SourceItems(graph, "src"))
    with pytest.raises(JobError) as parts:
        _read_in_parts(graph, rp, records=200)
    assert f"{f}, line 2528: attribute 'v': 'not-a-number-2500'" in str(runtime.value)
    assert str(parts.value) == str(runtime.value)


def test_a_directory_scan_is_read_a_file_per_part_through_its_reader(tmp_path: Path) -> None:
    data = tmp_path / "sales"
    data.mkdir()
    for n in range(5):
        _csv(data / f"f{n}.csv", 40 * n + 3)

    def graph() -> FrozenGraph:
        g = Graph("scan")
        files = g.source("scan", DirectoryScan(str(data), pattern=r"\.csv$", sort_by="name", scans=2,
                                               init_delay=1.0), schema=Schema(path="rstring"))
        read = g.operator("read", FileSource(format="csv", has_header=True, file_name_attribute="file"),
                          [files], [ROW])
        g.sink("sink", ListSink(), [read])
        return g.freeze()

    frozen = graph()
    rp = read_plan(frozen, "scan", only_source=True)
    assert isinstance(rp, ReadPlan) and rp.stream == ("read", 0) and rp.reader == "read"
    parts = plan_parts(frozen, rp, records=100, tasks=2)
    assert len(parts) == 6  # a part per file, then the scan's final
    got = [item for part in parts for item in _flat(list(part_items(frozen, rp, part)))]
    from riverbed.runtime import Job, VirtualClock, run_virtual

    reference = graph()
    clock = VirtualClock()
    job = Job(reference, clock=clock)
    run_virtual(job.run(), clock)
    items = [x if kind == 0 else {1: Punct.WINDOW, 2: Punct.FINAL}[kind] for kind, _, _, x in got]
    assert [kind for kind, *_ in got if kind != 0] == [1] * 5 + [2]  # a mark per file, then final
    assert len(items) == sum(40 * n + 3 for n in range(5)) + 6
    assert items == job.runners["sink"].op.items  # type: ignore[attr-defined]
    assert {at for kind, at, _, _ in got if kind != 2} == {1_000_000_000}  # all read at the first scan
    assert got[-1][:2] == (2, 6_000_000_000)  # final after the second scan, 5 s later
    p = plan(frozen)
    assert p.where("scan") == p.where("read") == "parallel read"
    assert "read" not in p.driver
    from riverbed.run import load_graph

    totals = plan(load_graph(Path(__file__).resolve().parents[1] / "examples" / "per_file_totals.py",
                             {"input": str(data), "out": str(tmp_path / "t.csv")}))
    assert totals.mode == "driver" and totals.where("scan") == "parallel read"
    assert "read: reads the files a DirectoryScan reports" in str(totals.why_not_keyed)


def test_explain_says_which_sources_stay_in_the_feeder_and_why(tmp_path: Path) -> None:
    f = _csv(tmp_path / "in.csv", 10)
    simulated = _graph(ListSource([{"k": "a", "v": 1, "file": "x"}]))
    text = plan(simulated).explain()
    assert "src [feeder]" in text and "makes its items in its own code" in text
    g = Graph("two")
    a = g.source("a", FileSource(str(f), format="csv", has_header=True),
                 schema=Schema(k="rstring", v="int64"))
    b = g.source("b", ListSource([{"k": "b", "v": 2}]))
    g.sink("sink", ListSink(), [a, b])
    two = plan(g.freeze())
    assert two.where("a") == two.where("b") == "feeder"
    assert "one of several sources" in two.notes["a"]
    one = plan(_graph(FileSource(str(f), format="csv", has_header=True, file_name_attribute="file")))
    assert one.where("src") == "parallel read" and "line-aligned byte ranges" in one.notes["src"]
