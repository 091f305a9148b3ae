"""An event-time ParquetSource read by each key group in its own task (`_group_reads`), on a
local Spark: the feeder's output byte for byte, the runtime's up to the documented order of
groups at one watermark, and a restart after a crash that ends as an uninterrupted run."""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from riverbed.graph import Graph, Schema, Source
from riverbed.operators import Aggregate, Average, Count, FileSink, Filter, IntervalStart, Max, ParquetSource
from riverbed.runtime import VirtualClock, run_graph
from riverbed.spark_bridge import TranslationError
from riverbed.spark_bridge._deploy import deploy


def _data(d: Path, *, strings: bool, seed: int) -> Path:
    d.mkdir()
    rnd = random.Random(seed)
    t = 5_000
    for f in range(4):
        n = 0 if f == 2 else 900  # an empty file: its window mark alone
        keys, values, times = [], [], []
        for _ in range(n):
            t += rnd.randint(0, 9)
            k = rnd.randint(0, 12)
            keys.append(f"s{k}" if strings else k - 4)
            values.append(rnd.random())
            times.append(t - (rnd.randint(0, 2500) if rnd.random() < 0.04 else 0))  # some late
        pq.write_table(pa.table({"sensor": pa.array(keys, pa.string() if strings else pa.int64()),
                                 "value": pa.array(values, pa.float64()),
                                 "ts": pa.array(times, pa.int64())}),
                       d / f"part-{f}.parquet", row_group_size=250)
    (d / "skip-me.parquet").write_bytes(b"not read: the pattern leaves it out")
    return d


class _InFeeder(Source):
    """The same rows from a generate() source: the bridge runs it in its feeder process."""

    replayable = True

    def __init__(self, data: str) -> None:
        self.data = data

    def generate(self) -> Any:
        yield from ParquetSource(self.data, pattern=r"^part-").generate()


def _graph(data: Path, out: Path, *, strings: bool, feeder: bool = False, lag: float = 0.0,
           gap: float = 0.1, crash: Any = None) -> Graph:
    g = Graph("group-reads")
    schema = Schema(sensor="rstring" if strings else "int64", value="float64", ts="int64")
    source = _InFeeder(str(data)) if feeder else ParquetSource(data, pattern=r"^part-")
    src = g.source("src", source, schema=schema, event_time="ts", resolution="ms", lag=lag,
                   minimum_gap=gap)
    agg = g.operator("agg", Aggregate({"n": Count(), "avg": Average("value"), "start": IntervalStart(),
                                       "top": Max("ts")}, copy=("sensor",)),
                     [src.window("timeInterval, intervalDuration(0.5), creationPeriod(0.25), partitioned",
                                 partition_by="sensor")])
    last = g.operator("crash", Filter(crash), [agg]) if crash is not None else agg
    g.sink("file", FileSink(str(out), format="csv"), [last])
    return g


def _by_key(text: str) -> dict[str, list[str]]:
    rows: dict[str, list[str]] = defaultdict(list)
    for line in text.splitlines():
        rows[line.split(",")[0]].append(line)
    return dict(rows)


@pytest.mark.parametrize(("strings", "groups", "lag", "gap"), [(False, 2, 0.2, 0.01), (True, 3, 0.0, 0.1)])
def test_the_groups_reading_the_files_give_the_feeders_output_byte_for_byte(
        spark: Any, tmp_path: Path, strings: bool, groups: int, lag: float, gap: float) -> None:
    data = _data(tmp_path / "data", strings=strings, seed=groups)
    ref, fed, out = tmp_path / "runtime.csv", tmp_path / "feeder.csv", tmp_path / "groups.csv"
    run_graph(_graph(data, ref, strings=strings, lag=lag, gap=gap), clock=VirtualClock())
    fed_run = deploy(_graph(data, fed, strings=strings, feeder=True, lag=lag, gap=gap), spark,
                     mode="keyed", groups=groups, checkpoint=str(tmp_path / "ck-feeder"),
                     max_records_per_batch=700)
    fed_run.await_termination()
    assert fed_run.plan.where("src") == "feeder"
    d = deploy(_graph(data, out, strings=strings, lag=lag, gap=gap), spark, mode="keyed", groups=groups,
               checkpoint=str(tmp_path / "ck-groups"), max_records_per_batch=700)
    d.await_termination()
    assert d.plan.where("src") == "parallel read" and not d.feeders
    assert d.stage.batches >= 4  # a micro-batch per part of about 700 rows
    assert len(ref.read_text().splitlines()) > 400
    assert out.read_text() == fed.read_text()
    # the runtime's rows, each key's in its order (groups released by one watermark interleave
    # by group: README, "Spark")
    assert _by_key(out.read_text()) == _by_key(ref.read_text())
    assert d.stage_spread()[1]["partitions"] == 2  # both cores took key groups


def test_a_crashed_query_resumes_from_its_checkpoint_and_refuses_a_file_changed_since(
        spark: Any, tmp_path: Path) -> None:
    data = _data(tmp_path / "data", strings=False, seed=7)
    flag = tmp_path / "flag"
    whole, out, ck = tmp_path / "whole.csv", tmp_path / "out.csv", str(tmp_path / "ck")
    deploy(_graph(data, whole, strings=False), spark, mode="keyed",
           checkpoint=str(tmp_path / "ck-whole"), max_records_per_batch=700).await_termination()
    flag.touch()
    first = deploy(_graph(data, out, strings=False, crash=_CrashOnce(flag, 10_000)), spark,
                   mode="keyed", checkpoint=ck, max_records_per_batch=700)
    with pytest.raises(Exception, match="crash once"):
        first.await_termination()
    assert len(out.read_text() if out.exists() else "") < len(whole.read_text())  # not all committed
    saved = (data / "part-3.parquet").read_bytes()
    pq.write_table(pq.read_table(data / "part-3.parquet").slice(0, 800), data / "part-3.parquet")
    with pytest.raises(TranslationError, match="replaced or rewritten"):
        deploy(_graph(data, out, strings=False, crash=_CrashOnce(flag, 10_000)), spark,
               mode="keyed", checkpoint=ck, max_records_per_batch=700)
    (data / "part-3.parquet").write_bytes(saved)
    # a file added since: it would never be read (the runtime, listing when it starts, would)
    pq.write_table(pq.read_table(data / "part-3.parquet").slice(0, 5), data / "part-9.parquet")
    with pytest.raises(TranslationError, match=r"part-9\.parquet' appeared since the checkpoint"):
        deploy(_graph(data, out, strings=False, crash=_CrashOnce(flag, 10_000)), spark,
               mode="keyed", checkpoint=ck, max_records_per_batch=700)
    # one the key groups could not read (a null key): the plan changed, and the refusal says why
    pq.write_table(pa.table({"sensor": pa.array([None], pa.int64()), "value": [0.5], "ts": [10**6]}),
                   data / "part-9.parquet")
    with pytest.raises(TranslationError, match=r"another plan.*may hold nulls in column 'sensor'"):
        deploy(_graph(data, out, strings=False, crash=_CrashOnce(flag, 10_000)), spark,
               mode="keyed", checkpoint=ck, max_records_per_batch=700)
    (data / "part-9.parquet").unlink()
    second = deploy(_graph(data, out, strings=False, crash=_CrashOnce(flag, 10_000)), spark,
                    mode="keyed", checkpoint=ck, max_records_per_batch=700)
    second.await_termination()
    assert out.read_text() == whole.read_text()


class _CrashOnce:
    def __init__(self, flag: Path, after: int) -> None:
        self.flag, self.after = str(flag), after

    def __call__(self, t: Any) -> bool:
        if t["start"] > self.after and Path(self.flag).exists():
            # (it runs in each key group's task: two may see the flag and both crash)
            Path(self.flag).unlink(missing_ok=True)
            raise RuntimeError("crash once")
        return True


def test_a_parquet_source_the_groups_cannot_read_runs_in_the_feeder_with_the_runtimes_output(
        spark: Any, tmp_path: Path) -> None:
    data = _data(tmp_path / "data", strings=True, seed=11)
    ref, out = tmp_path / "runtime.csv", tmp_path / "driver.csv"
    run_graph(_graph(data, ref, strings=True), clock=VirtualClock())
    d = deploy(_graph(data, out, strings=True), spark, mode="driver", checkpoint=str(tmp_path / "ck"),
               max_records_per_batch=700)
    d.await_termination()
    assert d.plan.where("src") == "feeder" and len(d.feeders) == 1
    assert out.read_text() == ref.read_text()


def test_a_discard_age_window_is_one_key_group_so_a_late_partition_is_judged_as_in_the_runtime(
        spark: Any, tmp_path: Path) -> None:
    """A key first seen in a pane already complete for other keys gets no INITIAL_FULL (SPL
    E18), so Aggregate gives nothing for it: in key groups of their own, its group made the
    pane itself and two rows came out that the runtime does not write."""
    d = tmp_path / "data"
    d.mkdir()
    pq.write_table(pa.table({"k": [4, 4, 4, -1, 4, 4], "v": [0.0] * 6,
                             "ts": [5001, 3940, 5010, 3897, 5020, 9000]}), d / "part-0.parquet")
    clause = "timeInterval, intervalDuration(0.4), creationPeriod(0.2), discardAge(1.0), partitioned"

    def graph(out: Path) -> Graph:
        g = Graph("late-partition")
        src = g.source("src", ParquetSource(d), schema=Schema(k="int64", v="float64", ts="int64"),
                       event_time="ts", resolution="ms", lag=0.3, minimum_gap=0.0)
        agg = g.operator("agg", Aggregate({"n": Count(), "start": IntervalStart(), "top": Max("ts")},
                                          copy=("k",)), [src.window(clause, partition_by="k")])
        g.sink("file", FileSink(str(out), format="csv"), [agg])
        return g

    ref, out = tmp_path / "runtime.csv", tmp_path / "spark.csv"
    run_graph(graph(ref), clock=VirtualClock())
    d2 = deploy(graph(out), spark, mode="keyed", groups=2, checkpoint=str(tmp_path / "ck"))
    d2.await_termination()
    assert d2.plan.groups == 1 and "E18" in d2.plan.notes["agg"]
    assert "-1," not in ref.read_text() and out.read_text() == ref.read_text()
