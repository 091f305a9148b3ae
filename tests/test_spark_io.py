"""The Spark bridge's inputs and outputs without Spark: what a review of them found.

Each test pins one finding: a `SparkInput` submitted in its ``order_by``
order, a `SparkOutput` path holding another run's commits, a file changed
under a checkpoint's planned parts, a reader that deletes its files, the
trigger an MQTT input needs, and options refused before Spark starts.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from riverbed.graph import FrozenGraph, Graph, Schema
from riverbed.operators import Aggregate, Count, Max, Min, Sum
from riverbed.runtime import Job, VirtualClock, run_virtual
from riverbed.spark_bridge._driver import DriverStage, stage_dir
from riverbed.spark_bridge._rows import KIND_TUPLE, source_ord
from riverbed.testing import ListSink, ListSource

MS = 1_000_000


def _counted(source: Any) -> FrozenGraph:
    g = Graph("io")
    src = g.source("src", source)
    agg = g.operator("agg", Aggregate({"s": Sum("v"), "n": Count(), "first": Min("seq"),
                                       "last": Max("seq")}, copy=("k",)),
                     [src.window("tumbling, count(4), partitioned", partition_by="k")])
    g.sink("sink", ListSink(), [agg])
    return g.freeze()


def _runtime_items(g: FrozenGraph) -> list[Any]:
    clock = VirtualClock()
    job = Job(g, clock=clock)
    run_virtual(job.run(), clock)
    return list(job.runners["sink"].op.items)  # type: ignore[attr-defined]


def _input_rows(records: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """A SparkInput's rows as the driver stage gets them (`sorted_rows`): made in Spark's tasks
    with order key (time, source, seq), sorted by it."""
    rows = [(source_ord(r["ts"] * MS, 0, r["seq"]), 0, KIND_TUPLE, r["ts"] * MS, 0, r, 0) for r in records]
    return sorted(rows, key=lambda r: (r[0], r[1]))


def test_a_spark_input_is_submitted_in_its_order_by_order_its_time_never_going_back(
        tmp_path: Path) -> None:
    """Finding 1: ``ts`` jitters by +-3 s against ``seq``; the rows were submitted in ``ts``
    order and every count(4) window differed. They go in ``seq`` order, each at the latest
    time so far, across batches and a restart of the stage from its store."""
    rng = random.Random(5)
    records = [{"seq": i, "ts": 1000 * i + rng.randrange(-3000, 3000) + 10_000, "k": f"k{i % 3}",
                "v": i * 7 % 11} for i in range(120)]
    want = [t for t in _runtime_items(_counted(ListSource(records))) if isinstance(t, dict)]

    graph = _counted(ListSource([]))
    state = stage_dir(str(tmp_path / "ck"))
    stage = DriverStage(graph, ["src", "agg", "sink"], [("src", 0)], [1], state_dir=state,
                        emitted={"src"})
    stage.process_rows(_input_rows(records[:60]), 0)
    got = [t for t in stage.operator("sink").items if isinstance(t, dict)]
    assert got == want[:len(got)]
    latest = max(r["ts"] for r in records[:60]) * MS
    assert stage.stamps == {0: latest}
    stage.close()
    again = DriverStage(graph, ["src", "agg", "sink"], [("src", 0)], [1], state_dir=state,
                        emitted={"src"})
    assert again.stamps == {0: latest}  # stored with the stage
    again.process_rows(_input_rows(records[60:]), 1)
    got += [t for t in again.operator("sink").items if isinstance(t, dict)]
    again.close()
    assert got == want and len(got) == 30


def test_the_mqtt_spool_never_stamps_a_message_earlier_than_the_one_before(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Finding 1, the MQTT input: ``recv_ms`` (the messages' time on Spark) was the wall clock;
    one stepped back stamped a later message earlier, also across a reopening of the spool."""
    from riverbed.spark_bridge import _spool

    clock = iter([5_000, 4_000, 6_000, 3_000])
    monkeypatch.setattr(_spool, "_now_ms", lambda: next(clock))
    path = str(tmp_path / "spool")
    spool = _spool.Spool(path)
    spool.open()
    spool.append("t", b"{}", 1, False)
    spool.append("t", b"{}", 1, False)
    spool.append("t", b"{}", 1, False)
    spool.close()
    spool.open()  # the latest time comes back from the file
    spool.append("t", b"{}", 1, False)
    spool.close()
    assert [row[3] for row in _spool.read_spool(path, 0, 4)] == [5_000, 5_000, 6_000, 6_000]


def _fixed_width(path: Path, n: int, tag: str) -> Path:
    path.write_text("".join(f"k{i % 5},{i:08d},{tag}\n" for i in range(n)))
    return path


@pytest.mark.parametrize(("change", "why"), [
    ("replaced", r"operator 'src'.*cannot resume '.*in\.csv' at byte \d+: the file is not the one "
                 r"the checkpoint read \(the bytes before that offset differ\)"),
    ("inserted", r"operator 'src'.*cannot resume '.*in\.csv': it held \d+ bytes when the checkpoint "
                 r"cut it into byte ranges, and it holds \d+ now"),
])
def test_a_restart_from_a_file_changed_since_its_parts_were_planned_is_refused_before_spark(
        tmp_path: Path, change: str, why: str) -> None:
    """Finding 3: the parts are planned once; a restart read the rest of another file as byte
    ranges of the first (records of two files mixed, exit 0), or cut a line in two. Refused
    before Spark starts (`riverbed spark run` exits 2), as `riverbed run` refuses a FileSource."""
    from riverbed.operators import FileSource
    from riverbed.spark_bridge import TranslationError, plan
    from riverbed.spark_bridge._deploy import _claim, _same_plan, refuse_checkpoint
    from riverbed.spark_bridge._reads import plan_parts, publish_parts
    from riverbed.spark_bridge._session import DEFAULT_CONF

    f = _fixed_width(tmp_path / "in.csv", 3000, "a")
    g = Graph("io")
    src = g.source("src", FileSource(str(f), format="csv"), schema=Schema(k="rstring", v="int64",
                                                                          tag="rstring"))
    agg = g.operator("agg", Aggregate({"n": Count()}, copy=("k",)),
                     [src.window("tumbling, count(4), partitioned", partition_by="k")])
    g.sink("sink", ListSink(), [agg])
    graph = g.freeze()
    ck = str(tmp_path / "ck")
    p = plan(graph, "auto", groups=int(DEFAULT_CONF["spark.sql.shuffle.partitions"]))
    assert p.reads  # read in byte ranges
    _claim(ck, graph.name)
    _same_plan(ck, p)
    parts = plan_parts(graph, p.reads["src"], records=300, tasks=2)
    assert len(parts) > 3
    publish_parts(str(Path(ck) / "riverbed-parts-0"), parts, 2)
    refuse_checkpoint(graph, ck, "auto")  # unchanged: resumed
    f.write_bytes(f.read_bytes())  # written again, the same bytes: resumed
    refuse_checkpoint(graph, ck, "auto")
    if change == "replaced":
        _fixed_width(f, 3000, "b")  # the same size, other records
    else:
        lines = f.read_text().splitlines(keepends=True)
        f.write_text("".join([*lines[:10], "k9,00000000,a\n", *lines[10:]]))
    with pytest.raises(TranslationError, match=why):
        refuse_checkpoint(graph, ck, "auto")


@pytest.mark.parametrize(("option", "what"), [
    ({"delete_file": True}, "delete_file=True deletes"),
    ({"move_file_to_directory": "done"}, "move_file_to_directory='done' moves"),
])
def test_a_reader_that_deletes_or_moves_the_scanned_files_is_refused_as_not_replayable(
        tmp_path: Path, option: dict[str, Any], what: str) -> None:
    """Finding 4: the file form with these options was refused, the reader of a scan's files
    was not: after a crash Spark ran the batch again and its files were gone, for ever."""
    from riverbed.operators import DirectoryScan, FileSource
    from riverbed.spark_bridge import TranslationError, plan

    (tmp_path / "done").mkdir()
    g = Graph("io")
    files = g.source("scan", DirectoryScan(str(tmp_path), pattern=r"\.csv$", scans=1),
                     schema=Schema(path="rstring"))
    read = g.operator("read", FileSource(format="csv", **option), [files],
                      [Schema(k="rstring", v="int64")])
    g.sink("sink", ListSink(), [read])
    with pytest.raises(TranslationError, match=rf"operator 'read'.*FileSource with {what} each file "
                                               r"once read, so it is not replayable"):
        plan(g.freeze())


def test_a_trigger_spark_parses_passes_the_clis_check() -> None:
    """Finding 8: the check let '1second' through (Spark refused it, a traceback, exit 1); what
    Spark takes still passes."""
    from riverbed.run import ScriptError
    from riverbed.spark_bridge._cli import _check_options

    for fine in ("1 second", "500 milliseconds", " interval 2 minutes ", "1 minute 30 seconds", "0.5 s"):
        _check_options("local[2]", fine, 10)
    for bad in ("1second", "1 minute30 seconds", "second"):
        with pytest.raises(ScriptError, match="expected an interval such as '1 second'"):
            _check_options("local[2]", bad, 10)


def test_an_mqtt_input_without_a_trigger_is_refused_before_the_query_is_made(tmp_path: Path) -> None:
    """Finding 5: availableNow read one micro-batch of the spool and stopped, exit 0."""
    from riverbed.spark_bridge import SparkInput, TranslationError
    from riverbed.spark_bridge._deploy import deploy

    endless = SparkInput(None, dict, "seq", "recv_ms", endless=True)
    with pytest.raises(TranslationError, match=r"operator 'src'.*an MQTT stream \(mqtt_input\) has no "
                                               r"end.*--trigger '1 second'"):
        deploy(_counted(ListSource([])), None, checkpoint=str(tmp_path / "ck"), inputs={"src": endless})
    assert not (tmp_path / "ck").exists()  # refused before anything was written


def test_a_spark_inputs_time_unit_and_columns_are_checked_before_spark_runs() -> None:
    """Finding 7: time_unit='sec' was a traceback (exit 1) from deploy; a column the stream
    lacks failed in a Spark task with a KeyError."""
    from riverbed.spark_bridge import SparkInput, TranslationError

    with pytest.raises(ValueError, match=r"SparkInput time_unit 'sec': expected one of ns, us, ms, s"):
        SparkInput(None, dict, "seq", "ts", time_unit="sec")

    class Frame:
        columns = ("seq", "ts", "k")

    SparkInput(Frame(), dict, "seq", "ts").check_columns("src")
    with pytest.raises(TranslationError, match=r"operator 'src'.*SparkInput order_by='sequence': the "
                                               r"stream has no such column; its columns are seq, ts, k"):
        SparkInput(Frame(), dict, "sequence", "ts").check_columns("src")
    with pytest.raises(TranslationError, match=r"time_column='time'"):
        SparkInput(Frame(), dict, "seq", "time").check_columns("src")
