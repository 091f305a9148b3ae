"""Two keyed stages on Spark: the bridge's chained stages next to a hand-written Spark query.

    .venv/bin/python bench/spark_stages.py [--readings 1000000] [--batch 100000] [--repeat 3]

The workload is examples/sensor_sites.py's: ``--sensors`` sensors, sensor i at
site i % ``--sites``, every sensor reporting once a round (a temperature, the
time in ms, ``STEP_MS`` apart); per-sensor panes of 10 readings (mean, low,
high, high - low), then per-site aggregates of each round of panes (how many,
mean of the means, lowest, highest, widest spread, last time). The readings
are written once to Parquet files of ``--batch`` rows (not timed); both
engines read those files.

* **bridge**: a riverbed graph (a source reading the files, an Aggregate on
  ``tumbling, count(10), partitioned`` by sensor, a Functor, an Aggregate on
  ``tumbling, count(sensors per site), partitioned`` by site, a sink keeping
  the results) deployed in keyed mode: two keyed stages in one query, the
  second repartitioned by site;
* **spark**: ``withWatermark`` on the reading time, ``groupBy(window(et, 10
  rounds), sensor, site)`` then ``groupBy(window(window_time, 10 rounds),
  site)`` (Spark chains time-window aggregations and propagates the watermark
  between them), append mode, results collected by ``foreachBatch``. Each
  sensor reports once a round, so a 10-round window is a pane of 10 readings.
  A last file holds one reading far in the future (a sentinel site, left out
  of the results) so the watermark passes every real window.

Runs alternate between the engines ``--repeat`` times after an untimed
warm-up of each; every run's results are checked equal to the first run's
(and the engines' to each other; means within 1e-9, since the engines sum in
different orders); the script exits with 1 on any mismatch. It prints each
run, the medians and their ratio (bridge / spark throughput).
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from spark_cpu import CpuMeter, cpu_ratio_line, spread_note

from riverbed.graph import Graph, Operator, Schema, Source
from riverbed.operators import Aggregate, Average, Count, Functor, Max, Min
from riverbed.spark_bridge import spark_session
from riverbed.spark_bridge._deploy import deploy

STEP_MS = 50  # between rounds
PANE = 10  # readings a pane
T0 = 1_700_000_000_000 - 1_700_000_000_000 % (PANE * STEP_MS)  # a pane boundary

READING = Schema(sensor="int64", site="int64", temp="float64", ts="int64")
PANE_SCHEMA = Schema(sensor="int64", site="int64", mean="float64", low="float64", high="float64",
                     ts="int64")
SPREAD = Schema(sensor="int64", site="int64", mean="float64", low="float64", high="float64", ts="int64",
                spread="float64")
SITE = Schema(site="int64", panes="int64", mean="float64", low="float64", high="float64",
              widest="float64", ts="int64")

Result = tuple[int, int, int, float, float, float, float]  # site, ts, panes, mean, low, high, widest


class ParquetSiteReadings(Source):
    """The readings from the Parquet files, in name order (read in the feeder process)."""

    replayable = True

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def generate(self) -> Any:
        import pyarrow.parquet as pq  # type: ignore[import-untyped]

        for name in sorted(os.listdir(self.directory)):
            if name.endswith(".parquet") and not name.startswith("sentinel"):
                for batch in pq.ParquetFile(os.path.join(self.directory, name)).iter_batches(8192):
                    yield from batch.to_pylist()


class Keep(Operator):
    def __init__(self) -> None:
        self.rows: list[Result] = []

    def on_tuple(self, tup: Any, port: int) -> None:
        self.rows.append((tup["site"], tup["ts"], tup["panes"], tup["mean"], tup["low"], tup["high"],
                          tup["widest"]))


def bridge(spark: Any, batch: int, data: Path, per_site: int) -> tuple[float, list[Result], str]:
    g = Graph("stages-bridge")
    src = g.source("readings", ParquetSiteReadings(str(data)), schema=READING)
    panes = g.operator("panes", Aggregate(
        {"mean": Average("temp"), "low": Min("temp"), "high": Max("temp"), "ts": Max("ts")},
        copy=("sensor", "site")),
        [src.window(f"tumbling, count({PANE}), partitioned", partition_by="sensor")], [PANE_SCHEMA])
    spreads = g.operator("spread", Functor(output={"spread": lambda t: t["high"] - t["low"]}),
                         [panes], [SPREAD])
    sites = g.operator("sites", Aggregate(
        {"panes": Count(), "mean": Average("mean"), "low": Min("low"), "high": Max("high"),
         "widest": Max("spread"), "ts": Max("ts")}, copy=("site",)),
        [spreads.window(f"tumbling, count({per_site}), partitioned", partition_by="site")], [SITE])
    g.sink("sink", Keep(), [sites])
    start = time.perf_counter()
    d = deploy(g, spark, mode="keyed", max_records_per_batch=batch)
    d.await_termination()
    took = time.perf_counter() - start
    assert len(d.plan.stages) == 2, d.plan.explain()
    return took, d.stage.operator("sink").rows, f"{_batches(d.query)}; {spread_note(d)}"


def spark_own(spark: Any, data: Path, sentinel_site: int) -> tuple[float, list[Result], str]:
    from pyspark.sql import functions as F

    rows: list[Result] = []
    pane = f"{PANE * STEP_MS} milliseconds"

    def collect(df: Any, batch_id: int) -> None:
        for r in df.collect():
            if r["site"] != sentinel_site:
                rows.append((r["site"], r["ts"], r["panes"], r["mean"], r["low"], r["high"], r["widest"]))

    start = time.perf_counter()
    panes = (spark.readStream.schema("sensor LONG, site LONG, temp DOUBLE, ts LONG")
             .option("maxFilesPerTrigger", 1).parquet(str(data))
             .withColumn("et", F.timestamp_millis("ts"))
             .withWatermark("et", "0 seconds")
             .groupBy(F.window("et", pane), "sensor", "site")
             .agg(F.avg("temp").alias("mean"), F.min("temp").alias("low"), F.max("temp").alias("high"),
                  F.max("ts").alias("ts")))
    sites = (panes.groupBy(F.window(F.window_time("window"), pane), "site")
             .agg(F.count("*").alias("panes"), F.avg("mean").alias("mean"), F.min("low").alias("low"),
                  F.max("high").alias("high"), F.max(F.col("high") - F.col("low")).alias("widest"),
                  F.max("ts").alias("ts")))
    with tempfile.TemporaryDirectory() as ck:
        q = (sites.writeStream.outputMode("append").foreachBatch(collect)
             .option("checkpointLocation", ck).trigger(availableNow=True).start())
        q.awaitTermination()
        took = time.perf_counter() - start
        return took, rows, _batches(q)


def _batches(query: Any) -> str:
    progress = query.recentProgress
    states = [len(p.get("stateOperators") or []) for p in progress]
    return f"{len(progress)} micro-batches, {max(states, default=0)} stateful operators"


def write_data(sensors: int, sites: int, rounds: int, batch: int, data: Path) -> int:
    """The readings as Parquet files of ``batch`` rows, and the sentinel; returns its site."""
    import random

    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(11)
    cols: dict[str, list[Any]] = {"sensor": [], "site": [], "temp": [], "ts": []}
    part = 0

    def flush() -> None:
        nonlocal part
        if cols["sensor"]:
            pq.write_table(pa.table(cols), data / f"part-{part:05d}.parquet")
            part += 1
            for v in cols.values():
                v.clear()

    for r in range(rounds):
        for s in range(sensors):
            cols["sensor"].append(s)
            cols["site"].append(s % sites)
            cols["temp"].append(round(20.0 + s % 7 + rng.gauss(0, 0.5), 3))
            cols["ts"].append(T0 + r * STEP_MS)
            if len(cols["sensor"]) == batch:
                flush()
    flush()
    far = T0 + (rounds + 10 * PANE) * STEP_MS
    pq.write_table(pa.table({"sensor": [sensors], "site": [sites], "temp": [0.0], "ts": [far]}),
                   data / "sentinel.parquet")
    return sites


def same(a: list[Result], b: list[Result]) -> bool:
    """Equal as sets of results (the engines emit in different orders), floats within 1e-9."""
    def key(rows: list[Result]) -> list[tuple[Any, ...]]:
        return sorted((s, ts, n, round(m, 9), lo, hi, round(w, 9)) for s, ts, n, m, lo, hi, w in rows)
    return len(a) == len(b) and key(a) == key(b)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--readings", type=int, default=1_000_000)
    ap.add_argument("--sensors", type=int, default=1000)
    ap.add_argument("--sites", type=int, default=20)
    ap.add_argument("--batch", type=int, default=100_000, help="readings per micro-batch")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs of each engine, alternating")
    ap.add_argument("--no-warmup", dest="warmup", action="store_false")
    args = ap.parse_args()
    if args.sensors % args.sites:
        ap.error("--sensors must be a multiple of --sites (each site's sensors finish a pane together)")
    rounds = args.readings // args.sensors // PANE * PANE  # whole panes only
    readings = rounds * args.sensors
    per_site = args.sensors // args.sites
    # The JVM's whole JIT for both engines (riverbed's local sessions stop at C1, see spark_w2.py).
    spark = spark_session(args.master, app_name="riverbed-bench-stages",
                          conf={"spark.driver.extraJavaOptions": "-XX:+TieredCompilation"})
    times: dict[str, list[float]] = {"spark": [], "bridge": []}
    cpu: dict[str, list[float]] = {"spark": [], "bridge": []}
    first: list[Result] | None = None
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        if args.warmup:
            warm = Path(tmp) / "warm"
            warm.mkdir()
            sentinel = write_data(args.sensors, args.sites, 2 * PANE, args.sensors * PANE, warm)
            spark_own(spark, warm, sentinel)
            bridge(spark, args.sensors * PANE, warm, per_site)
        data = Path(tmp) / "parquet"
        data.mkdir()
        sentinel = write_data(args.sensors, args.sites, rounds, args.batch, data)
        for _ in range(args.repeat):
            for name in ("spark", "bridge"):
                with CpuMeter() as meter:
                    took, rows, note = (bridge(spark, args.batch, data, per_site) if name == "bridge"
                                        else spark_own(spark, data, sentinel))
                used = meter.seconds
                if used is not None:
                    cpu[name].append(used)
                times[name].append(took)
                if first is None:
                    first = rows
                ok = same(rows, first)
                failed |= not ok
                spent = f"cpu {used:6.1f} s  " if used is not None else ""
                print(f"{name:>6}: {took:7.2f} s  {spent}{readings / took:10,.0f} readings/s  "
                      f"{len(rows)} site "
                      f"aggregates, {'equal' if ok else 'DIFFERENT'}  ({note})", flush=True)
    for name, runs in times.items():
        print(f"{name:>6} median: {statistics.median(runs):7.2f} s  "
              f"{readings / statistics.median(runs):10,.0f} readings/s")
    ratio = statistics.median(times["spark"]) / statistics.median(times["bridge"])
    print(f"results equal on every run: {not failed}")
    line = cpu_ratio_line(cpu)
    if line is not None:
        print(line)
    print(f"bridge / spark throughput (medians of {args.repeat}): {ratio:.2f}x")
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
