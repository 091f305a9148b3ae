"""The Spark bridge on a local Spark (one session for the run): the same output as the runtime.

Each test deploys a graph as a Structured Streaming query with small
micro-batches, so window state crosses batch boundaries through Spark's
state store (keyed mode) or the driver stage's store (driver mode).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from riverbed.graph import FrozenGraph, Graph, Operator, Schema, Source
from riverbed.operators import Aggregate, Count, FileSink, Filter, Functor, Sum
from riverbed.run import load_graph
from riverbed.runtime import VirtualClock, run_graph
from riverbed.spark_bridge import SparkOutput, TranslationError
from riverbed.spark_bridge._deploy import deploy
from riverbed.spark_bridge._trace import run_cases_on_spark
from riverbed.testing import ListSink, ListSource
from riverbed.trace import load_cases
from tests.trace_compare import mismatch

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
CASES = ROOT / "tests" / "conformance" / "cases"


def _cases(flavor: str) -> list[dict[str, Any]]:
    found = []
    for f in sorted(CASES.glob("*.json")):
        for case in load_cases(f):
            timed = str(case.get("window", "")).strip().startswith("timeInterval")
            if timed or case.get("runtime", "any") in ("any", flavor):
                found.append(case)
    return found


@pytest.mark.parametrize("flavor", ["java", "cpp"])
def test_every_public_case_through_the_keyed_stage(spark: Any, flavor: str) -> None:
    cases = _cases(flavor)
    results = run_cases_on_spark(cases, flavor, spark=spark, rows_per_batch=40)
    failures = {c["name"]: why for c, ev in zip(cases, results, strict=True)
                if (why := mismatch(dict(c, order="by_key"), ev)) is not None}
    assert not failures, failures
    assert len(cases) == {"java": 100, "cpp": 74}[flavor]


def _counts_graph(n: int = 300) -> Graph:
    g = Graph("counts")
    src = g.source("src", ListSource([{"k": f"k{i % 7}", "v": i} for i in range(n)]))
    kept = g.operator("keep", Filter(lambda t: t["v"] % 5 != 0), [src])
    agg = g.operator("agg", Aggregate({"s": Sum("v"), "n": Count()}, copy=("k",)),
                     [kept.window("tumbling, count(4), partitioned", partition_by="k")])
    g.sink("sink", ListSink(), [agg])
    return g


def _runtime_items(g: Graph | FrozenGraph, sink: str = "sink") -> list[Any]:
    from riverbed.runtime import Job, run_virtual

    clock = VirtualClock()
    job = Job(g, clock=clock)
    run_virtual(job.run(), clock)
    return list(job.runners[sink].op.items)  # type: ignore[attr-defined]


@pytest.mark.parametrize("mode", ["keyed", "driver"])
def test_a_partitioned_aggregate_gives_the_runtimes_output_in_its_order(spark: Any, tmp_path: Path,
                                                                       mode: str) -> None:
    expected = _runtime_items(_counts_graph())
    checkpoint = str(tmp_path / "ck") if mode == "keyed" else None  # None: a temporary one
    d = deploy(_counts_graph(), spark, mode=mode, checkpoint=checkpoint,  # type: ignore[arg-type]
               max_records_per_batch=50)
    d.await_termination()
    assert d.plan.mode == mode
    assert d.stage.batches >= 6  # 300 items and the marks, 50 a batch
    assert d.stage.operator("sink").items == expected
    assert Path(d.checkpoint).exists() == (checkpoint is not None)  # a temporary one is removed


def _files(tmp_path: Path) -> Path:
    data = tmp_path / "sales"
    data.mkdir()
    for f in range(4):
        lines = ["item,qty,amount"] + [f"i{r},{r + f},{r * 1.5 + f}" for r in range(f * 3 + 1)]
        (data / f"f{f}.csv").write_text("\n".join(lines) + "\n")
    return data


@pytest.mark.parametrize(("example", "params", "mode"), [
    ("stock_moving_average.py", {"seconds": 6, "symbols": 4}, "keyed"),
    ("sensors.py", {"sensors": 20, "seconds": 3}, "keyed"),
    ("per_file_totals.py", {}, "driver"),
    ("sensor_join.py", {"seconds": 3, "rooms": 3}, "keyed"),
])
def test_examples_write_the_same_file_on_spark_as_in_the_runtime(
        spark: Any, tmp_path: Path, example: str, params: dict[str, Any], mode: str) -> None:
    if example == "per_file_totals.py":
        params = {"input": str(_files(tmp_path))}
    ext = ".jsonl" if example == "sensors.py" else ".csv"
    ref, out = tmp_path / f"runtime{ext}", tmp_path / f"spark{ext}"
    run_graph(load_graph(EXAMPLES / example, {**params, "out": str(ref)}), clock=VirtualClock())
    d = deploy(load_graph(EXAMPLES / example, {**params, "out": str(out)}), spark,
               checkpoint=str(tmp_path / "ck"), max_records_per_batch=200)
    d.await_termination()
    assert d.plan.mode == mode
    if example == "per_file_totals.py":  # each scanned file read by a Spark task, not the feeder
        assert d.plan.where("scan") == d.plan.where("read") == "parallel read"
        assert sorted(part for part, *_ in d.read_tasks) == [0, 1, 2, 3, 4]  # 4 files, then final
    else:
        assert not d.plan.reads and d.read_tasks == []
    assert ref.read_text(), "the example wrote nothing: the comparison would prove nothing"
    assert out.read_text() == ref.read_text()


class _CrashOnce:
    """A Functor expression that fails once, at one value, while ``flag`` exists: a crash of the
    query in the middle of the stream (the flag is gone when the query is restarted)."""

    def __init__(self, flag: Path, at: int) -> None:
        self.flag, self.at = str(flag), at

    def __call__(self, t: Any) -> Any:
        if t["v"] == self.at and Path(self.flag).exists():
            Path(self.flag).unlink()
            raise RuntimeError("crash in the middle of the stream")
        return t["v"] * 3


def _crash_graph(out: Path, flag: Path, sink: Operator | None = None) -> Graph:
    g = Graph("restart")
    src = g.source("src", ListSource([{"k": f"k{i % 5}", "v": i} for i in range(1000)]))
    tripled = g.operator("triple", Functor(output={"v": _CrashOnce(flag, 640)}), [src])
    agg = g.operator("agg", Aggregate({"s": Sum("v"), "n": Count()}, copy=("k",)),
                     [tripled.window("sliding, count(5), count(2), partitioned", partition_by="k")],
                     outputs=[Schema(k="rstring", s="int64", n="int64")])
    g.sink("file", sink or FileSink(str(out), format="csv"), [agg])
    return g


def test_a_query_that_failed_mid_stream_resumes_from_its_checkpoint(spark: Any, tmp_path: Path) -> None:
    """The query fails in the middle (a batch half done, nothing of it committed); restarted from
    the same checkpoint, its output file equals an uninterrupted run's: the windows resumed from
    the state store, the failed batch was replayed, the transactional sink wrote nothing twice."""
    ref = tmp_path / "ref.csv"
    run_graph(_crash_graph(ref, tmp_path / "no-flag"), clock=VirtualClock())
    out, flag, ck = tmp_path / "out.csv", tmp_path / "flag", str(tmp_path / "ck")
    flag.touch()
    first = deploy(_crash_graph(out, flag), spark, checkpoint=ck, max_records_per_batch=100)
    assert first.plan.mode == "keyed" and first.plan.pre_chain == ["triple"]
    with pytest.raises(Exception, match="crash in the middle of the stream"):
        first.await_termination()
    partial = out.read_text() if out.exists() else ""
    assert 0 < len(partial) < len(ref.read_text())  # some batches were committed, not all
    second = deploy(_crash_graph(out, flag), spark, checkpoint=ck, max_records_per_batch=100)
    second.await_termination()
    assert out.read_text() == ref.read_text()


def _written(spark: Any, path: Path) -> tuple[list[int], list[dict[str, Any]]]:
    """The commit numbers a SparkOutput wrote under ``path``, and their rows in commit order."""
    commits = sorted(int(p.name.removeprefix("commit=")) for p in path.iterdir()
                     if p.name.startswith("commit="))
    rows = [r.asDict() for n in commits for r in spark.read.parquet(str(path / f"commit={n}")).collect()]
    return commits, rows


def test_spark_writes_a_sink_stream_once_per_commit_across_a_crash(spark: Any, tmp_path: Path) -> None:
    """A SparkOutput in place of the sink: Spark's parquet writer, one directory per commit.
    After a crash mid-stream and a restart, the commits hold the runtime's tuples in order,
    none twice, none missing."""
    expected = [t for t in _runtime_items(_crash_graph(tmp_path / "unused", tmp_path / "no-flag", ListSink()),
                                          "file") if isinstance(t, dict)]
    flag, ck, path = tmp_path / "flag", str(tmp_path / "ck"), tmp_path / "pq"
    flag.touch()
    outputs = {"file": SparkOutput(str(path))}
    first = deploy(_crash_graph(tmp_path / "unused", flag), spark, checkpoint=ck,
                   max_records_per_batch=100, outputs=outputs)
    assert "Spark's parquet writer (SparkOutput)" in first.plan.notes["file"]
    with pytest.raises(Exception, match="crash in the middle of the stream"):
        first.await_termination()
    written = len(list(path.iterdir())) if path.exists() else 0
    assert written > 0
    second = deploy(_crash_graph(tmp_path / "unused", flag), spark, checkpoint=ck,
                    max_records_per_batch=100, outputs=outputs)
    second.await_termination()
    commits, got = _written(spark, path)
    assert commits == list(range(len(commits))) and len(commits) > written
    assert got == expected


def test_a_batch_spark_delivers_again_after_the_stage_stored_it_is_not_applied_twice(
        spark: Any, tmp_path: Path) -> None:
    """A crash after the driver stage stored a batch and before Spark committed it: on restart
    Spark runs that batch again. Its key groups must still commit their state (Spark fails the
    query otherwise) and the sink must not write it twice."""
    ref, out, ck = tmp_path / "ref.csv", tmp_path / "out.csv", tmp_path / "ck"
    run_graph(_crash_graph(ref, tmp_path / "no-flag"), clock=VirtualClock())
    first = deploy(_crash_graph(out, tmp_path / "no-flag"), spark, checkpoint=str(ck),
                   max_records_per_batch=100)
    first.await_termination()
    assert first.plan.mode == "keyed" and out.read_text() == ref.read_text()
    commits = ck / "spark" / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    for p in commits.iterdir():  # as if the driver died before Spark wrote its commit
        if p.name in (str(last), f".{last}.crc"):
            p.unlink()
    again = deploy(_crash_graph(out, tmp_path / "no-flag"), spark, checkpoint=str(ck),
                   max_records_per_batch=100)
    again.await_termination()
    assert again.query.lastProgress["batchId"] == last  # Spark did run that batch again
    assert out.read_text() == ref.read_text()


def test_refusals_name_the_operator_and_why(spark: Any) -> None:
    g = Graph("two")
    a = g.source("a", ListSource([{"k": 1, "j": 2}]))
    w1 = g.operator("w1", Aggregate({"n": Count()}, copy=("k", "j")),
                    [a.window("tumbling, count(2), partitioned", partition_by="k")])
    g.operator("w2", Aggregate({"n": Count()}),
               [w1.window("tumbling, count(2), partitioned", partition_by="j")])
    g.sink("tap", ListSink(), [w1])  # w1's stream branches: w2 is not on the line of stages
    with pytest.raises(TranslationError, match=r"operator 'w2': cannot run keyed: 2 windowed operators"):
        deploy(g, spark, mode="keyed")


class _Broken(Source):
    replayable = True

    def generate(self) -> Any:
        for i in range(3000):
            yield {"k": i % 4, "v": i}
        raise RuntimeError("the disk went away at item 3000")


@pytest.mark.parametrize("mode", ["keyed", "driver"])
def test_a_source_that_fails_fails_the_deployment_with_its_error(spark: Any, tmp_path: Path,
                                                                  mode: str) -> None:
    """The source runs in a process of its own (`SourceFeeder`); its exception is what the
    driver raises, and the query is stopped, whether it would end with its sources or not."""
    g = Graph("broken")
    s = g.source("src", _Broken())
    agg = g.operator("agg", Aggregate({"n": Count()}, copy=("k",)),
                     [s.window("tumbling, count(100), partitioned", partition_by="k")])
    g.sink("sink", ListSink(), [agg])
    d = deploy(g, spark, mode=mode, checkpoint=str(tmp_path / "ck"), max_records_per_batch=1000,
               available_now=mode == "keyed", processing_time="100 milliseconds")
    with pytest.raises(RuntimeError, match="the disk went away at item 3000"):
        d.await_termination(120)  # a query with a processing-time trigger is stopped too
    assert not d.query.isActive


def test_a_trigger_spark_refuses_fails_the_deployment_and_leaves_no_thread_or_feeder(
        spark: Any, tmp_path: Path) -> None:
    import threading

    before = {t.name for t in threading.enumerate()}
    with pytest.raises(Exception, match=r"(?i)interval"):
        deploy(_counts_graph(), spark, mode="driver", checkpoint=str(tmp_path / "ck"),
               available_now=False, processing_time="every so often")
    leaked = {t.name for t in threading.enumerate() if t.is_alive()} - before
    assert not {name for name in leaked if name.startswith("riverbed")}, leaked


def test_the_cli_runs_a_graph_script_on_spark(tmp_path: Path) -> None:
    """``riverbed spark run`` in its own process (its own local Spark): the example's file equals
    the runtime's."""
    import subprocess
    import sys

    params = ["-p", "seconds=4", "-p", "symbols=3"]
    ref, out = tmp_path / "ref.csv", tmp_path / "out.csv"
    run_graph(load_graph(EXAMPLES / "stock_moving_average.py",
                         {"seconds": 4, "symbols": 3, "out": str(ref)}), clock=VirtualClock())
    done = subprocess.run([sys.executable, "-m", "riverbed", "spark", "run",
                           str(EXAMPLES / "stock_moving_average.py"), *params, "-p", f"out={out}",
                           "--checkpoint", str(tmp_path / "ck"), "--max-records", "300"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "keyed mode" in done.stdout and "micro-batches" in done.stdout
    assert out.read_text() == ref.read_text()


def test_a_spark_source_stands_in_for_a_graph_source(spark: Any, tmp_path: Path) -> None:
    """Spark's own deterministic rate source feeds the graph's source: its rows become tuples
    submitted in ``value`` order at their timestamps, and a time window sees those times."""
    from riverbed.spark_bridge import rate_input

    def graph(source: Any) -> Graph:
        g = Graph("rate")
        ticks = g.source("ticks", source)
        sums = g.operator("sums", Aggregate({"total": Sum("value"), "n": Count()}),
                          [ticks.window("tumbling, time(2)")])
        g.sink("sink", ListSink(), [sums])
        return g

    # 4 rows a batch, each batch 1 s later: tumbling time(2) closes every two batches
    ns = 1_000_000_000
    items = [{"value": v, "timestamp": (v // 4) * ns} for v in range(24)]
    d = deploy(graph(ListSource([])), spark, inputs={"ticks": rate_input(spark, rows_per_batch=4)},
               checkpoint=str(tmp_path / "ck"), available_now=False, processing_time="50 milliseconds")
    try:  # the rate source never runs dry: wait on the query until enough rows went through
        deadline = time.monotonic() + 120
        while d.stage.rows < 28:  # the row at 6 s lets the third tumble (at 6 s) fire
            assert not d.query.awaitTermination(0.05), d.query.exception()
            assert time.monotonic() < deadline, f"{d.stage.rows} rows after 120 s"
    finally:
        d.stop()
    sums = [t for t in d.stage.operator("sink").items if isinstance(t, dict)]
    # the first tumble fires at 2 s (the window started at the first row's time, 0 s)
    assert sums[:3] == [{"total": sum(range(8)), "n": 8}, {"total": sum(range(8, 16)), "n": 8},
                        {"total": sum(range(16, 24)), "n": 8}]
    assert all(t["timestamp"] == (t["value"] // 4) * ns for t in items)


def test_spark_file_source_stands_in_for_a_graph_source(spark: Any, tmp_path: Path) -> None:
    """`file_input`: JSON files read by Spark's file source, a file a micro-batch, the rows
    submitted in ``seq`` order: the windows see what the runtime's ListSource gives them. The
    times go back every few rows: still in ``seq`` order (they were sorted by time)."""
    import json
    import os

    from riverbed.spark_bridge import file_input

    rows = [{"seq": i, "ts": 10_000 + 1000 * i - 1500 * (i % 4), "k": f"k{i % 3}", "v": i * 7 % 11}
            for i in range(60)]
    data = tmp_path / "in"
    data.mkdir()
    for f in range(3):  # written newest-first, timed oldest-first: Spark goes by the times
        part = rows[f * 20:(f + 1) * 20]
        path = data / f"part-{2 - f}.json"
        path.write_text("".join(json.dumps(r) + "\n" for r in reversed(part)))
        os.utime(path, (1_700_000_000 + f, 1_700_000_000 + f))

    def graph(source: Any) -> Graph:
        g = Graph("files")
        src = g.source("src", source)
        agg = g.operator("agg", Aggregate({"s": Sum("v"), "n": Count()}, copy=("k",)),
                         [src.window("tumbling, count(4), partitioned", partition_by="k")])
        g.sink("sink", ListSink(), [agg])
        return g

    expected = [t for t in _runtime_items(graph(ListSource(rows))) if isinstance(t, dict)]
    d = deploy(graph(ListSource([])), spark, checkpoint=str(tmp_path / "ck"), inputs={
        "src": file_input(spark, str(data), format="json", schema="seq LONG, ts LONG, k STRING, v LONG",
                          order_by="seq", time_column="ts", max_files_per_trigger=1)})
    d.await_termination()
    assert d.stage.batches == 3
    got = [t for t in d.stage.operator("sink").items if isinstance(t, dict)]
    assert got == expected and len(got) == 15


def test_a_query_stopped_between_batches_resumes_from_its_checkpoint(spark: Any, tmp_path: Path) -> None:
    """A graceful stop mid-stream (the query idle between two triggers), then a restart from the
    same checkpoint: the output equals an uninterrupted run's."""
    example = EXAMPLES / "stock_moving_average.py"
    params = {"seconds": 8, "symbols": 4}
    ref, out, ck = tmp_path / "ref.csv", tmp_path / "out.csv", str(tmp_path / "ck")
    run_graph(load_graph(example, {**params, "out": str(ref)}), clock=VirtualClock())
    first = deploy(load_graph(example, {**params, "out": str(out)}), spark, checkpoint=ck,
                   available_now=False, processing_time="3 seconds", max_records_per_batch=200)
    deadline = time.monotonic() + 120
    while first.stage.batches < 2 or first.query.status["isTriggerActive"]:
        assert not first.query.awaitTermination(0.05), first.query.exception()
        assert time.monotonic() < deadline, "two micro-batches did not run in 120 s"
    first.stop()
    assert 0 < len(out.read_text()) < len(ref.read_text())  # stopped mid-stream
    second = deploy(load_graph(example, {**params, "out": str(out)}), spark, checkpoint=ck,
                    max_records_per_batch=200)
    second.await_termination()
    assert out.read_text() == ref.read_text()


@pytest.mark.parametrize("group", [False, True])
def test_sigterm_stops_the_cli_query_and_a_rerun_resumes_it(tmp_path: Path, group: bool) -> None:
    """``riverbed spark run --trigger``: SIGTERM once output appeared stops the query cleanly
    (exit 0); the same command without a trigger resumes from the checkpoint and finishes, and
    the file equals the runtime's. ``group``: the signal goes to the whole process group, as
    ``timeout``, systemd and ``kill -- -PGID`` send it; Spark's JVM dies of it before the query
    stops, which was reported as a failed query ("Connection refused", exit 1)."""
    import os
    import signal
    import subprocess
    import sys

    params = {"seconds": 40, "symbols": 3}
    ref, out, ck = tmp_path / "ref.csv", tmp_path / "out.csv", str(tmp_path / "ck")
    run_graph(load_graph(EXAMPLES / "stock_moving_average.py", {**params, "out": str(ref)}),
              clock=VirtualClock())
    cmd = [sys.executable, "-m", "riverbed", "spark", "run", str(EXAMPLES / "stock_moving_average.py"),
           *[a for k, v in params.items() for a in ("-p", f"{k}={v}")], "-p", f"out={out}",
           "--checkpoint", ck, "--max-records", "1500"]
    live = subprocess.Popen([*cmd, "--trigger", "2 seconds"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, start_new_session=group)
    deadline = time.monotonic() + 180
    while not (out.exists() and out.stat().st_size):  # the first batches' output is published
        assert live.poll() is None, "the query ended before it was stopped"
        assert time.monotonic() < deadline, "no output after 180 s"
        time.sleep(0.1)  # polling a file another process writes; nothing to await here
    if group:
        os.killpg(live.pid, signal.SIGTERM)
    else:
        live.send_signal(signal.SIGTERM)
    stdout, _ = live.communicate(timeout=120)
    assert live.returncode == 0, stdout
    assert "stopping the query" in stdout or "riverbed spark: stopped; Spark's processes" in stdout
    assert len(out.read_text()) < len(ref.read_text())  # stopped mid-stream
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert out.read_text() == ref.read_text()


_HOOKED_SCRIPT = '''
from riverbed import Graph, Schema
from riverbed.operators import Aggregate, Count, FileSink, Sum
from riverbed.spark_bridge import SparkOutput, rate_input
from riverbed.testing import ListSource


def build(params):
    g = Graph("hooks", params)
    src = g.source("src", ListSource([{"k": f"k{i % 3}", "v": i} for i in range(60)]),
                   schema=Schema(k="rstring", v="int64"))
    agg = g.operator("agg", Aggregate({"s": Sum("v"), "n": Count()}, copy=("k",)),
                     [src.window("tumbling, count(5), partitioned", partition_by="k")],
                     outputs=[Schema(k="rstring", s="int64", n="int64")])
    g.sink("out", FileSink(params["out"], format="csv"), [agg])
    return g


def spark_outputs(params):
    return {"out": SparkOutput(params["pq"])}
'''


def test_a_scripts_spark_outputs_hook_has_spark_write_the_sinks_stream(spark: Any, tmp_path: Path) -> None:
    """``riverbed spark run``: the script's ``spark_outputs`` replaces its FileSink by Spark's
    parquet writer; ``riverbed run`` of the same script writes the same rows to the file. An
    earlier run's commits under the path are removed first, as a FileSink truncates its file
    (a review found them read back mixed with this run's); nothing else there is touched."""
    import csv

    from riverbed.spark_bridge._cli import spark_command

    script = tmp_path / "hooked.py"
    script.write_text(_HOOKED_SCRIPT)
    ref, pq = tmp_path / "ref.csv", tmp_path / "pq"
    for stale in (0, 5):  # an earlier run's, with another checkpoint
        spark.createDataFrame([("old", 0, 0)], "k STRING, s LONG, n LONG").write.parquet(
            str(pq / f"commit={stale}"))
    (pq / "notes.txt").write_text("kept")
    run_graph(load_graph(script, {"out": str(ref), "pq": str(pq)}), clock=VirtualClock())
    expected = [{"k": k, "s": int(s), "n": int(n)} for k, s, n in csv.reader(ref.open())]
    said: list[str] = []
    code = spark_command("run", str(script), params=[f"out={tmp_path / 'unused.csv'}", f"pq={pq}"],
                         checkpoint=str(tmp_path / "ck"), echo=said.append)
    assert code == 0, said
    assert "Spark's parquet writer (SparkOutput)" in said[0]
    assert not (tmp_path / "unused.csv").exists()
    assert (pq / "notes.txt").read_text() == "kept"
    commits, got = _written(spark, pq)
    assert got == expected and len(expected) == 12 and commits == list(range(len(commits)))


def test_a_scripts_spark_inputs_hook_replaces_its_source_and_a_bad_hook_is_refused(
        spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from riverbed.spark_bridge._cli import spark_command

    script = tmp_path / "hooked.py"
    script.write_text(_HOOKED_SCRIPT + "\n\ndef spark_inputs(spark, params):\n"
                      "    return {'src': rate_input(spark, rows_per_batch=10)}\n")
    said: list[str] = []
    params = ["out=x.csv", "pq=x"]
    assert spark_command("explain", str(script), params=params, echo=said.append) == 0
    assert "src [executors, Spark stream]: a Spark stream (SparkInput)" in said[0]
    script.write_text(_HOOKED_SCRIPT + "\n\ndef spark_inputs(spark, params):\n    return ['src']\n")
    assert spark_command("explain", str(script), params=params, echo=said.append) == 2
    assert "spark_inputs() must return a dict of operator names to SparkInput" in capsys.readouterr().err


@pytest.mark.parametrize(("output", "why"), [
    (SparkOutput("pq", format="parqet", ddl="k STRING, s LONG, n LONG"),
     r"operator 'sink'.*SparkOutput format 'parqet' cannot write rows of .*Failed to find the data "
     r"source: parqet"),
    (SparkOutput("pq", ddl="k LONGG"),
     r"operator 'sink'.*SparkOutput ddl 'k LONGG': Spark cannot parse it: .*Unsupported data type"),
    (SparkOutput("pq", format="csv", ddl="k ARRAY<LONG>"),
     r"operator 'sink'.*SparkOutput format 'csv' cannot write rows of 'k ARRAY<LONG>'.*CSV"),
])
def test_a_spark_output_spark_cannot_write_is_refused_before_the_query_starts(
        spark: Any, tmp_path: Path, output: SparkOutput, why: str) -> None:
    """A misspelt format or a bad ddl failed the first commit, after a batch ran, with
    "Py4JJavaError: An error occurred while calling o144.save." or "ParseException: "."""
    output = SparkOutput(str(tmp_path / "pq"), output.format, output.options, output.ddl)
    with pytest.raises(TranslationError, match=why):
        deploy(_counts_graph(), spark, checkpoint=str(tmp_path / "ck"), outputs={"sink": output})
    assert not (tmp_path / "pq").exists() and not (tmp_path / "ck").exists()
