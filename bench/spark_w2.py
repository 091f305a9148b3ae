"""W2 (or W3) on Spark: the bridge's keyed stage next to Spark's own ``window()`` + watermark query.

    .venv/bin/python bench/spark_w2.py [--workload W2|W3] [--readings 2000000] [--batch 250000]

W2: per-sensor tumbling 10 s panes (``timeInterval, intervalDuration(10)``;
Spark: ``window(ts, 10 s)``). W3: per-sensor sliding 10 s panes every 5 s
(``timeInterval, intervalDuration(10), creationPeriod(5)``; Spark:
``window(ts, 10 s, 5 s)``): each reading lands in two panes.

The same readings (`workloads.make_readings`: 1000 sensors, event time in
ms growing by 0-2 ms per reading) go through:

* **bridge**: a riverbed graph (a `ParquetSource` of the same Parquet files with
  ``event_time="ts"``, `PaneAvg` on ``timeInterval, intervalDuration(10),
  partitioned`` by sensor, a digest sink) deployed in keyed mode: each key group
  reads its share of each file in applyInPandasWithState and hosts the window there,
  the sink in the driver stage (``--feeder``: the files read by a generate() source
  in the feeder process, which publishes its rows for Spark's file source instead);
* **spark**: the readings, written once to Parquet files of ``--batch`` rows
  (not timed; both engines read them), read with ``maxFilesPerTrigger=1``, ``withWatermark(ts, 0)``,
  ``groupBy(window(ts, 10 s), sensor).agg(count, avg)`` in append mode,
  results collected by ``foreachBatch``. A last file holds one reading far in
  the future (a sentinel sensor, left out of the results) so the watermark
  passes every real window: riverbed closes them with the maximum
  watermark before final, Spark has no end of stream.

Both run ``availableNow`` with ``--batch`` readings per micro-batch in one
session, after two untimed warm-up runs of each (up to 500k readings; ``--no-warmup``
times cold starts), and both results are digested the same way. Every timed run of
either engine is checked against the hand-written loop's panes
(`workloads.loop_w2` on the same readings) as soon as it ends: a difference
exits with status 1 before any ratio is printed. Runs
alternate between the engines ``--repeat`` times (a 2-core machine's timings
wander by 10-15 % from run to run); it prints each run's wall time and
readings/s, then the medians and their ratio (bridge / spark throughput).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ["PYTHONPATH"] = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])

from riverbed_flows import CLAUSES, PaneAvg  # noqa: E402
from spark_cpu import CpuMeter, cpu_ratio_line, spread_note  # noqa: E402
from workloads import (  # noqa: E402
    PANE_MS,
    SEED,
    SENSORS,
    SLIDE_MS,
    T0,
    Digest,
    loop_w2,
    loop_w3,
    make_readings,
    same_results,
)

from riverbed.graph import Graph, Operator, Schema, Source  # noqa: E402
from riverbed.operators import ParquetSource  # noqa: E402

# The deployment code is imported where it is used: the feeder and Spark's Python workers
# import this module to unpickle the graph's classes, and need none of it.

READING = Schema(sensor="int64", value="float64", ts="int64")


class ParquetReadings(Source):
    """The readings from the Parquet files Spark's own query reads, file by file, in name order
    (the feeder process reads them; nothing is shipped with the graph)."""

    replayable = True

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def generate(self) -> Any:
        import pyarrow.parquet as pq  # type: ignore[import-untyped]

        for name in sorted(os.listdir(self.directory)):
            if name.endswith(".parquet") and not name.startswith("sentinel"):
                for batch in pq.ParquetFile(os.path.join(self.directory, name)).iter_batches(8192):
                    # The dicts `batch.to_pylist()` makes (same keys in the file's order, same
                    # values), built from whole columns: to_pylist runs a dict comprehension over
                    # the column names for every row, a third of the feeder's instructions.
                    columns = (batch.column(n).to_pylist() for n in ("sensor", "value", "ts"))
                    yield from [{"sensor": s, "value": v, "ts": t} for s, v, t in zip(*columns, strict=True)]


class Keep(Operator):
    def __init__(self, workload: str = "W2") -> None:
        self.digest = Digest(workload)

    def on_tuple(self, tup: Any, port: int) -> None:
        self.digest.add(tup)


def bridge(spark: Any, batch: int, data: Path, workload: str = "W2", *, grouped: bool = True
           ) -> tuple[float, dict[str, Any], str]:
    from riverbed.spark_bridge._deploy import deploy

    g = Graph(f"{workload.lower()}-bridge")
    source = (ParquetSource(str(data), pattern=r"^part-.*\.parquet$") if grouped
              else ParquetReadings(str(data)))
    src = g.source("readings", source, schema=READING, event_time="ts", resolution="ms")
    panes = g.operator("agg", PaneAvg(), [src.window(CLAUSES[workload], partition_by="sensor")])
    g.sink("sink", Keep(workload), [panes])
    start = time.perf_counter()
    d = deploy(g, spark, mode="keyed", max_records_per_batch=batch)
    d.await_termination()
    took = time.perf_counter() - start
    return took, d.stage.operator("sink").digest.summary(), f"{_batches(d.query)}; {spread_note(d)}"


def _batches(query: Any) -> str:
    """How many micro-batches, and Spark's own split of their time (ms, summed over batches)."""
    progress = query.recentProgress
    spent: dict[str, int] = {}
    for p in progress:
        for k, v in (p.get("durationMs") or {}).items():
            spent[k] = spent.get(k, 0) + int(v)
    top = ", ".join(f"{k} {v}" for k, v in sorted(spent.items(), key=lambda kv: -kv[1])[:4])
    return f"{len(progress)} micro-batches; ms: {top}"


def write_data(n: int, batch: int, data: Path) -> None:
    """The readings as Parquet files of ``batch`` rows, and the sentinel file (not timed)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    readings = make_readings(n, SEED)
    for i in range(0, n, batch):
        chunk = readings[i:i + batch]
        table = pa.table({"sensor": [r["sensor"] for r in chunk], "value": [r["value"] for r in chunk],
                          "ts": [r["ts"] for r in chunk]})
        pq.write_table(table, data / f"part-{i // batch:05d}.parquet")
    far = readings[-1]["ts"] + 10 * PANE_MS
    pq.write_table(pa.table({"sensor": [SENSORS], "value": [0.0], "ts": [far]}),
                   data / "sentinel.parquet")


def spark_own(spark: Any, data: Path, workload: str = "W2") -> tuple[float, dict[str, Any], str]:
    from pyspark.sql import functions as F

    digest = Digest(workload)
    slide = f"{PANE_MS // 1000} seconds" if workload == "W2" else f"{SLIDE_MS // 1000} seconds"
    batches = [0]

    def collect(df: Any, batch_id: int) -> None:
        batches[0] += 1
        for r in df.collect():
            if r["sensor"] != SENSORS:
                digest.add({"sensor": r["sensor"], "start": r["start"], "count": r["count"],
                            "avg": r["avg"]})

    start = time.perf_counter()
    stream = (spark.readStream.schema("sensor LONG, value DOUBLE, ts LONG")
              .option("maxFilesPerTrigger", 1).parquet(str(data))
              .withColumn("et", F.timestamp_millis("ts"))
              .withWatermark("et", "0 seconds")
              .groupBy(F.window("et", f"{PANE_MS // 1000} seconds", slide), "sensor")
              .agg(F.count("*").alias("count"), F.avg("value").alias("avg"))
              .select("sensor", (F.unix_millis(F.col("window.start"))).alias("start"), "count", "avg"))
    with tempfile.TemporaryDirectory() as ck:
        q = (stream.writeStream.outputMode("append").foreachBatch(collect)
             .option("checkpointLocation", ck).trigger(availableNow=True).start())
        q.awaitTermination()
        took = time.perf_counter() - start
        return took, digest.summary(), _batches(q)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", choices=("W2", "W3"), default="W2")
    ap.add_argument("--readings", type=int, default=2_000_000)
    ap.add_argument("--batch", type=int, default=250_000, help="readings per micro-batch")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--only", choices=("bridge", "spark"))
    ap.add_argument("--feeder", action="store_true",
                    help="the bridge reads the files in its feeder process (a generate() source), "
                         "not in each key group's task (a ParquetSource)")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs of each engine, alternating")
    ap.add_argument("--no-warmup", dest="warmup", action="store_false",
                    help="time cold runs (by default each engine first runs twice untimed, up to "
                         "500000 readings: JVM JIT, Python workers, imports)")
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                    help="a Spark setting for the session (both engines)")
    args = ap.parse_args()
    assert T0 % PANE_MS == 0
    # Both engines get the JVM's whole JIT: riverbed's local sessions stop at C1 (a quick start
    # for short jobs), which would slow Spark's own JVM-heavy query more than the bridge.
    conf = {"spark.driver.extraJavaOptions": "-XX:+TieredCompilation",
            **dict(item.split("=", 1) for item in args.conf)}
    from riverbed.spark_bridge import spark_session

    spark = spark_session(args.master, app_name="riverbed-bench-w2", conf=conf)
    times: dict[str, list[float]] = {"spark": [], "bridge": []}
    cpu: dict[str, list[float]] = {"spark": [], "bridge": []}
    expected = Digest(args.workload)  # the hand-written loop's panes: every timed run must give them
    (loop_w2 if args.workload == "W2" else loop_w3)(make_readings(args.readings, SEED), expected.add)
    want = expected.summary()
    with tempfile.TemporaryDirectory() as tmp:
        if args.warmup:
            warm = Path(tmp) / "warm"
            warm.mkdir()
            # Two runs of each, of up to 500k readings in batches of the timed size: Spark's own
            # query ran its first timed run 25-35 % slower than the later ones after one run of
            # 50k readings (its JIT still compiling), which the median of 3 runs still felt.
            size = min(args.readings, 500_000)
            write_data(size, min(args.batch, size), warm)
            for _ in range(2):
                spark_own(spark, warm, args.workload)
                bridge(spark, min(args.batch, size), warm, args.workload, grouped=not args.feeder)
        data = Path(tmp) / "parquet"
        data.mkdir()
        write_data(args.readings, args.batch, data)
        for _ in range(args.repeat):
            for name in ("spark", "bridge"):
                if args.only and name != args.only:
                    continue
                with CpuMeter() as meter:
                    took, summary, note = (bridge(spark, args.batch, data, args.workload,
                                                  grouped=not args.feeder)
                                           if name == "bridge" else spark_own(spark, data, args.workload))
                used = meter.seconds
                if used is not None:
                    cpu[name].append(used)
                if not same_results(summary, want):
                    sys.exit(f"MISMATCH, no ratio printed: a timed {name} run gave {summary}, "
                             f"the hand-written loop {want}")
                times[name].append(took)
                spent = f"cpu {used:6.1f} s  " if used is not None else ""
                print(f"{name:>6}: {took:7.2f} s  {spent}{args.readings / took:10,.0f} readings/s  "
                      f"{summary['records']} panes  ({note})", flush=True)
                if used is not None:
                    print(f"{'':>8}cpu by process: {meter.split()}", flush=True)
    for name, runs in times.items():
        if runs:
            print(f"{name:>6} median: {statistics.median(runs):7.2f} s  "
                  f"{args.readings / statistics.median(runs):10,.0f} readings/s")
    print(f"results: every timed run equals the hand-written loop's ({want['records']} panes)")
    if times["spark"] and times["bridge"]:
        ratio = statistics.median(times["spark"]) / statistics.median(times["bridge"])
        print(f"{args.workload} bridge / spark throughput (medians of {args.repeat}): {ratio:.2f}x")
    line = cpu_ratio_line(cpu)
    if line is not None:
        print(f"{args.workload} {line}")


if __name__ == "__main__":
    main()
