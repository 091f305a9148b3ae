"""The feeder that publishes a graph source's rows for Spark's file source, without Spark.

Spark reads the spool directory's visible Parquet files in modification-time
order and deletes each once the batch after it is planned. What must hold:
every row published exactly once and in order, across a crash at any point
of a publication; never more than ``ahead`` files waiting beyond the one
Spark reads; a source's error reaches the driver.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from riverbed.graph import FrozenGraph, Graph, Operator, Source
from riverbed.spark_bridge._feeder import SourceFeeder, _Publisher, publish_rows
from riverbed.spark_bridge._rows import ROW_DDL
from riverbed.spark_bridge._source import dump_payload, source_rows
from riverbed.testing import ListSource


class _Nothing(Operator):
    def on_tuple(self, tup: Any, port: int) -> None:
        pass


class _Broken(Source):
    replayable = True

    def generate(self) -> Any:
        for i in range(5000):
            yield {"v": i}
        raise RuntimeError("the disk went away at item 5000")


def _graph(source: Source) -> FrozenGraph:
    g = Graph("src")
    s = g.source("src", source)
    g.sink("sink", _Nothing(), [s])
    return g.freeze()


def _readings() -> FrozenGraph:
    return _graph(ListSource([{"k": i % 4, "v": i} for i in range(500)]))


def _visible(spool: Path) -> list[Path]:
    return sorted(p for p in spool.iterdir() if p.suffix == ".parquet" and not p.name.startswith("."))


def _published(spool: Path) -> list[tuple[Any, ...]]:
    rows = []
    for path in _visible(spool):
        rows.extend(tuple(r.values()) for r in pq.read_table(path).to_pylist())
    return rows


class _Spark:
    """Stands in for the query on the feeder's connection: each time the feeder waits for room,
    Spark "runs a batch" (deletes the oldest visible file, as ``cleanSource=delete`` does) and
    says so. ``crash_at``: the feeder's process dies at that call instead (the feeder polls
    once before each file it publishes)."""

    def __init__(self, spool: Path, *, keep: bool = False, crash_at: int | None = None) -> None:
        self.spool, self.keep, self.crash_at = spool, keep, crash_at
        self.read: list[tuple[Any, ...]] = []
        self.most_waiting = 0
        self.calls = 0

    def poll(self, timeout: float | None = None) -> bool:
        self.calls += 1
        if self.calls == self.crash_at:
            raise _Crash
        if timeout is None:
            return False  # no message pending
        files = _visible(self.spool)
        self.most_waiting = max(self.most_waiting, len(files))
        if not self.keep:
            self.read.extend(tuple(r.values()) for r in pq.read_table(files[0]).to_pylist())
            files[0].unlink()
        return True

    def recv(self) -> str:
        return "batch"


class _Crash(Exception):
    pass


def _publish(spool: Path, graph: FrozenGraph, spark: _Spark, *, ahead: int) -> None:
    os.makedirs(spool, exist_ok=True)
    _Publisher(str(spool), ROW_DDL, ahead, spark).run(  # type: ignore[arg-type]
        [dump_payload((graph, "src", 0, None))], None, 20, 100)


def test_rows_are_published_once_in_order_a_file_each_batch_never_more_than_ahead(tmp_path: Path) -> None:
    graph = _readings()
    expected = list(source_rows(_readings(), "src", 0))
    spark = _Spark(tmp_path)
    _publish(tmp_path, graph, spark, ahead=2)
    spark.read.extend(_published(tmp_path))  # what was left when the source ended
    assert spark.read == expected
    assert spark.most_waiting == 3  # the one being read and two ahead, then it waited
    assert not (tmp_path / "000000000000.parquet").exists()  # read: Spark deleted it


def test_files_are_numbered_sized_and_timed_in_order(tmp_path: Path) -> None:
    graph = _readings()
    expected = list(source_rows(_readings(), "src", 0))
    _publish(tmp_path, graph, _Spark(tmp_path, keep=True), ahead=1000)
    files = _visible(tmp_path)
    sizes = [pq.read_metadata(str(p)).num_rows for p in files]
    assert sizes[0] == 20 and set(sizes[1:-1]) == {100} and sum(sizes) == len(expected)
    mtimes = [p.stat().st_mtime_ns // 1_000_000 for p in files]  # Spark orders by milliseconds
    assert mtimes == sorted(set(mtimes))
    assert _published(tmp_path) == expected


@pytest.mark.parametrize("left", ["between files", "hidden after its progress", "hidden before its progress"])
def test_a_restart_after_a_crash_publishes_the_rest_exactly_once(tmp_path: Path, left: str) -> None:
    graph = _readings()
    expected = list(source_rows(_readings(), "src", 0))
    with pytest.raises(_Crash):
        _publish(tmp_path, graph, _Spark(tmp_path, keep=True, crash_at=4), ahead=1000)
    files = _visible(tmp_path)
    assert len(files) == 3
    before = {p.name: p.stat().st_mtime_ns for p in files}
    if left == "hidden after its progress":  # crashed before the last rename: renamed on restart
        files[-1].rename(tmp_path / f".{files[-1].name}")
    elif left == "hidden before its progress":  # written, not recorded: written again
        (tmp_path / ".000000000003.parquet").write_bytes(b"half a file")
        (tmp_path / ".000000000004.parquet.tmp").write_bytes(b"scratch")
    _publish(tmp_path, graph, _Spark(tmp_path, keep=True), ahead=1000)
    assert _published(tmp_path) == expected
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    after = _visible(tmp_path)
    assert {p.name: p.stat().st_mtime_ns for p in after[:3]} == before
    mtimes = [p.stat().st_mtime_ns // 1_000_000 for p in after]
    assert mtimes == sorted(set(mtimes))  # the restart's files come after the old ones


def test_a_spool_written_for_other_sources_is_refused(tmp_path: Path) -> None:
    publish_rows(str(tmp_path), ROW_DDL, [], 10)
    (tmp_path / "_progress").write_text('{"rows": [5, 5], "files": 1, "last_ms": 1}')
    with pytest.raises(ValueError, match="written for 2 sources, the graph has 1"):
        _publish(tmp_path, _readings(), _Spark(tmp_path), ahead=2)


def test_several_sources_share_each_file_with_their_stream_numbers(tmp_path: Path) -> None:
    graph = _readings()
    expected = list(source_rows(_readings(), "src", 0))
    payload = dump_payload((graph, "src", 0, None))
    _Publisher(str(tmp_path), f"{ROW_DDL}, stream INT", 1000, _Spark(tmp_path, keep=True)).run(  # type: ignore[arg-type]
        [payload, payload], [0, 3], 20, 100)
    files = _visible(tmp_path)
    first = [tuple(r.values()) for r in pq.read_table(files[0]).to_pylist()]
    assert first == [(*r, s) for r in expected[:10] for s in (0, 3)]  # merged by order key
    assert sorted(_published(tmp_path)) == sorted([(*r, 0) for r in expected] + [(*r, 3) for r in expected])
    assert [pq.read_metadata(str(p)).num_rows for p in files][:3] == [20, 100, 100]


def test_sources_of_different_rates_are_cut_at_one_point_of_time_and_join_as_in_the_runtime(
        tmp_path: Path) -> None:
    """Each file holds every source's rows up to one point of the stamped time. Files of N rows
    of each source held 3 s of the denser source beside 2 s of the other, whose rows of the
    third second then came a batch late: the driver stage joined them after later readings (the
    join example lost 4 of its 90 pairs)."""
    from riverbed.run import load_graph
    from riverbed.runtime import VirtualClock, run_graph
    from riverbed.spark_bridge._driver import DriverStage
    from tests.spark_fakes import FakeBatch

    example = Path(__file__).resolve().parents[1] / "examples" / "sensor_join.py"
    params = {"seconds": 6, "rooms": 3}
    run_graph(load_graph(example, {**params, "out": str(tmp_path / "ref.csv")}), clock=VirtualClock())
    graph = load_graph(example, {**params, "out": str(tmp_path / "out.csv")})
    spool = tmp_path / "spool"
    spool.mkdir()
    payloads = [dump_payload((graph, name, i, None)) for i, name in enumerate(("temperature", "humidity"))]
    _Publisher(str(spool), f"{ROW_DDL}, stream INT", 1000, _Spark(spool, keep=True)).run(  # type: ignore[arg-type]
        payloads, [0, 1], 10, 20)
    files = _visible(spool)
    assert len(files) > 3
    ords = [r[0] for r in _published(spool)]
    assert ords == sorted(ords)  # the files, one after the other, are one stream in order
    stage = DriverStage(graph, ["join", "comfort", "file"], [("temperature", 0), ("humidity", 0)],
                        [1, 1], state_dir=None)
    for batch_id, path in enumerate(files):
        stage.process(FakeBatch(pq.read_table(path)), batch_id)
    stage.close()
    assert (tmp_path / "out.csv").read_text() == (tmp_path / "ref.csv").read_text()


def test_the_feeder_process_publishes_everything_and_ends(tmp_path: Path) -> None:
    graph = _readings()
    feeder = SourceFeeder([dump_payload((graph, "src", 0, None))], str(tmp_path), ROW_DDL,
                          first=20, size=100, ahead=1000)
    feeder.start()
    try:
        assert feeder.finished.wait(120)
    finally:
        feeder.stop()
    assert feeder.error is None
    assert _published(tmp_path) == list(source_rows(_readings(), "src", 0))


def test_a_source_error_in_the_feeder_process_reaches_the_driver(tmp_path: Path) -> None:
    feeder = SourceFeeder([dump_payload((_graph(_Broken()), "src", 0, None))], str(tmp_path),
                          ROW_DDL, first=2000, size=2000, ahead=1000)
    feeder.start()
    try:
        assert feeder.finished.wait(120)
    finally:
        feeder.stop()
    assert isinstance(feeder.error, RuntimeError)
    assert "the disk went away at item 5000" in str(feeder.error)
    assert len(_published(tmp_path)) < 5000  # the rows after the last whole file were not published


def test_stop_ends_a_feeder_waiting_for_room(tmp_path: Path) -> None:
    graph = _graph(ListSource([{"v": i} for i in range(100_000)]))
    feeder = SourceFeeder([dump_payload((graph, "src", 0, None))], str(tmp_path), ROW_DDL,
                          first=10, size=10, ahead=1)
    feeder.start()
    feeder.stop()
    assert feeder.finished.is_set() and feeder.error is None
    assert len(_visible(tmp_path)) <= 2


def test_the_feeder_process_imports_only_what_it_needs() -> None:
    # The feeder is a fresh interpreter at every query start: logging, the status view, the
    # metrics exporter, the checkpoint store and the deployment code are not needed there.
    import subprocess
    import sys

    code = ("import sys, riverbed.spark_bridge._feeder, riverbed.spark_bridge._source\n"
            "print(' '.join(sorted(m for m in ('structlog', 'rich', 'prometheus_client', 'rocksdict',"
            " 'riverbed.spark_bridge._deploy', 'riverbed.runtime._logging') if m in sys.modules)))\n")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == ""


@pytest.mark.parametrize("held", ["delay", "throttle", "time-panes"])
def test_the_driver_stage_ends_as_the_runtime_does(tmp_path: Path, held: str) -> None:
    """The driver stage's host starts at the first row's stamped time (it started at its row
    kind: time panes 4 ns off), and once the input is over, time runs on to the timers still
    armed: a Delay or Throttle releases what it held (they were lost, the run exiting 0)."""
    from riverbed.graph import Schema
    from riverbed.operators import Aggregate, Beacon, Count, Delay, FileSink, Max, Min, Throttle
    from riverbed.runtime import VirtualClock, run_graph
    from riverbed.spark_bridge._driver import DriverStage
    from tests.spark_fakes import FakeBatch

    def graph(out: Path) -> FrozenGraph:
        g = Graph("held")
        src = g.source("beacon", Beacon(iterations=300, period=0.01, output={"i": lambda n: n}),
                       schema=Schema(i="int64"))
        if held == "time-panes":
            op = g.operator("op", Aggregate({"n": Count(), "lo": Min("i"), "hi": Max("i")}),
                            [src.window("tumbling, time(1)")])
        else:
            op = g.operator("op", Delay(0.25) if held == "delay" else Throttle(70.0), [src])
        g.sink("file", FileSink(str(out), format="csv"), [op])
        return g.freeze()

    run_graph(graph(tmp_path / "ref.csv"), clock=VirtualClock())
    frozen = graph(tmp_path / "out.csv")
    spool = tmp_path / "spool"
    spool.mkdir()
    _Publisher(str(spool), f"{ROW_DDL}, stream INT", 1000, _Spark(spool, keep=True)).run(  # type: ignore[arg-type]
        [dump_payload((frozen, "beacon", 0, None))], [0], 10, 20)
    stage = DriverStage(frozen, ["op", "file"], [("beacon", 0)], [1], state_dir=None)
    for batch_id, path in enumerate(_visible(spool)):
        stage.process(FakeBatch(pq.read_table(path)), batch_id)
    stage.close()
    expected = (tmp_path / "ref.csv").read_text()
    assert expected.count("\n") == (2 if held == "time-panes" else 300)  # (final flushes no pane)
    assert (tmp_path / "out.csv").read_text() == expected
