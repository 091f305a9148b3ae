"""Parallel regions: W2 and W3 through SPL Aggregate at width 1, 2 and 4, in two shapes.

Usage::

    .venv/bin/python bench/parallel.py [--n N] [--repeat K] [--widths 1,2,4] [--only W2]
                                       [--shapes split,replicated] [--input partitions]
                                       [--sink collect] [--processes P]

Each workload (see `workloads`: per sensor, event-time panes of 10 s, tumbling for W2,
sliding every 5 s for W3) runs as ``source -> Aggregate -> sink`` at each width, in two shapes,
and once with no region (everything in the job's process):

* ``split``: the source in the job's process, the Aggregate in a region split by sensor: the
  job's process generates the readings, derives watermarks, splits every batch by key,
  pickles the parts and merges the results; the workers unpickle, window and aggregate.
* ``replicated``: the source inside the region (SPL replicates it): each channel's replica
  reads the shared readings and keeps its channel's sensors (``channel_of(sensor, width) ==
  context.channel``), in the worker, while the clock runs (that cost is counted: with numpy,
  which the spark extra installs, a vectorised look-up of the sensor column, a few ns a row not
  kept, as a reader of its own partitions would pay; without it, a scan in Python, ~0.25 us a
  row in every replica, which width 1 does not pay; with ``--input partitions``, each replica
  reads columns holding only its channel's rows, split before the clock runs, as a reader of
  a partitioned topic or file set does, and pays nothing for the others' rows); its tuples
  go straight into the channel's Aggregate (no split, no pickling); the job's process only
  merges the results.

A region of width 4 on a machine of 2 cores runs in 2 worker processes, two channels each
(``--processes`` sets the most a region runs in; ``--processes 4`` gives each channel a process
of its own, as before channels were grouped).

Variants alternate, each ``--repeat`` times (default 3); the table gives the median tuples/s,
and the ratios width 2 / width 1, width 4 / width 2, and each width / no region. Every run's
results (an order-independent digest of every record) must equal the no-region run's: the
script fails otherwise. Each target ratio is also given per round (run k of one width against
run k of the other) and, from 5 rounds on, as their geometric mean with a 95 % interval: on a
shared machine a single median can land either side of a target met by a few percent.

The table shows the CPU seconds per tuple of the job's process (``process_time``) and of the
workers (their rusage), and "CPU-bound/s": the rate those CPU seconds allow on idle cores (the
busiest process, or all the work spread over the cores, whichever is slower), which other load
on the machine disturbs far less than wall time. On 2 cores shared with other work, numbers are
noisy: compare medians, and look at the CPU columns.

Transport: the cost per tuple of moving a batch of 1000 readings through a socketpair (framed,
as the region does it) with pickle, with msgpack and with Arrow IPC, through an os.pipe with
pickle, and as pickle written into shared memory with only its length sent; and the
hand-written loop's cost per tuple for the whole workload, printed side by side.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import os
import pickle
import resource
import socket
import statistics
import sys
import time
from array import array
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from riverbed_flows import CLAUSES, READING, DigestSink
from workloads import Digest, Reading, loop_w2, loop_w3, make_readings, same_results

from riverbed.graph import Graph, Operator, Source
from riverbed.operators import Aggregate, Average, Count, IntervalStart
from riverbed.runtime import Job
from riverbed.runtime._parallel_wire import channel_of

LOOPS = {"W2": loop_w2, "W3": loop_w3}
SHAPES = ("split", "replicated")
Variant = tuple[str, int | None]  # (shape, width); ("none", None): no region


class Columns:
    """The readings as a columnar file would hold them (one array per attribute), read by the
    sources of every variant while the clock runs. Why not the list of dicts `make_readings`
    returns: a worker inherits that list from the job's process (fork), and a replica that
    scans it touches every dict's reference count, so the kernel copies every page of it into
    each worker (copy-on-write, ~0.27 us a reading per replica here); a source reads its input,
    it does not inherit it. ``--input dicts`` measures that way anyway."""

    def __init__(self, readings: Sequence[Reading]) -> None:
        self.sensor = array("l", (r["sensor"] for r in readings))
        self.value = array("d", (r["value"] for r in readings))
        self.ts = array("q", (r["ts"] for r in readings))
        self.dicts = readings
        # ``--input partitions``: (width, channel) -> that channel's rows, as columns of their
        # own (a topic's partitions, a file per partition), split before the clock runs.
        self.partitions: dict[tuple[int, int], tuple[array[int], array[float], array[int]]] = {}

    def partition(self, widths: Sequence[int]) -> None:
        """Store each channel's rows apart for every width in ``widths``: a replica then reads
        only its own partition and pays nothing for the rows of the others (arrays, not lists:
        a worker reading an inherited list would touch, and so copy, its pages)."""
        for width in widths:
            if width < 2:
                continue
            mine = {s: channel_of(s, width) for s in set(self.sensor)}
            chans = bytes(map(mine.__getitem__, self.sensor))
            for c in range(width):
                mask = chans.translate(bytes(int(b == c) for b in range(256)))
                pick = partial(itertools.compress, selectors=mask)
                self.partitions[width, c] = (array("l", pick(self.sensor)),
                                             array("d", pick(self.value)), array("q", pick(self.ts)))

    def __deepcopy__(self, memo: dict[int, Any]) -> Columns:
        return self  # read-only: the copy a host makes of each operator it runs must share it


def _rows(sensor: Any, value: Any, ts: Any) -> Any:
    return ({"sensor": s, "value": v, "ts": t} for s, v, t in zip(sensor, value, ts, strict=True))


class ReadColumns(Source):
    """Every reading, a dict built from the columns as it is read (``dicts``: the list)."""

    def __init__(self, columns: Columns, dicts: bool) -> None:
        self.columns, self.use_dicts = columns, dicts

    def generate(self) -> Any:
        c = self.columns
        return iter(c.dicts) if self.use_dicts else _rows(c.sensor, c.value, c.ts)


class ShareOfReadings(ReadColumns):
    """A replica's share of the readings: those whose sensor its channel owns (all of them
    outside a region), found in the worker while the benchmark's clock runs: the sensor column
    is scanned, and only the replica's rows are built."""

    def generate(self) -> Any:
        ctx: Any = self.context
        me, width = ctx.channel, ctx.width
        c = self.columns
        if width == 1:
            return super().generate()
        own = c.partitions.get((width, me))
        if own is not None and not self.use_dicts:  # ``--input partitions``
            return _rows(*own)
        np = NUMPY
        sensor = None if np is None or self.use_dicts or not c.sensor else np.asarray(c.sensor)
        if sensor is not None and sensor.min() >= 0:
            # Which channel each sensor number is, in a table, then the table looked up for
            # every row in one vectorised step: only the rows kept become Python objects.
            present = np.flatnonzero(np.bincount(sensor)).tolist()
            mine_at = np.zeros(present[-1] + 1, dtype=bool)
            for s in present:
                mine_at[s] = channel_of(s, width) == me
            sel = mine_at[sensor]
            return _rows(sensor[sel].tolist(), np.asarray(c.value)[sel].tolist(),
                         np.asarray(c.ts)[sel].tolist())
        mine = {s: channel_of(s, width) == me for s in set(c.sensor)}
        mask = bytes(map(mine.__getitem__, c.sensor))
        if self.use_dicts:
            return itertools.compress(c.dicts, mask)
        pick = partial(itertools.compress, selectors=mask)
        return _rows(pick(c.sensor), pick(c.value), pick(c.ts))


def _numpy() -> Any:
    """numpy, when installed (the spark extra brings it), else None: a replica's scan of the
    rows it does not keep then costs a few ns a row, as reading only its partitions would.
    Imported before the clock runs (the workers inherit it)."""
    try:
        import numpy
    except ImportError:
        return None
    return numpy


NUMPY = _numpy()


class CollectSink(Operator):
    """``--sink collect``: keeps each result; the digest is computed after the clock stops.
    Why: `DigestSink` hashes every record with big-int arithmetic in the job's process
    (~10,000 instructions a record, ~40 % of that process's work for W2), which every variant
    pays alike but which, on 2 cores, shares them with the workers; a sink that only stores its
    results shows what the region itself leaves to the job's process."""

    def __init__(self, records: list[Any]) -> None:
        self.records = records

    def on_tuple(self, tup: Any, port: int) -> None:
        self.records.append(tup)

    def on_tuples(self, tuples: Any, port: int) -> None:
        self.records.extend(tuples)


def graph(workload: str, readings: Columns, digest: Digest, variant: Variant,
          dicts: bool = False, collect: list[Any] | None = None,
          processes: int | None = None) -> Graph:
    shape, width = variant
    g = Graph(f"parallel-{workload}")
    agg = Aggregate({"start": IntervalStart(), "count": Count(), "avg": Average("value")},
                    copy=("sensor",))

    def source(op: Source) -> Any:
        return g.source("readings", op, schema=READING, event_time="ts", resolution="ms")

    if width is None:
        src = source(ReadColumns(readings, dicts))
        out = g.operator("agg", agg, [src.window(CLAUSES[workload], partition_by="sensor")])
    elif shape == "split":
        src = source(ReadColumns(readings, dicts))
        with g.parallel(width, partition_by="sensor").processes(processes):
            out = g.operator("agg", agg, [src.window(CLAUSES[workload], partition_by="sensor")])
    else:
        with g.parallel(width, partition_by="sensor").processes(processes):
            src = source(ShareOfReadings(readings, dicts))
            out = g.operator("agg", agg, [src.window(CLAUSES[workload], partition_by="sensor")])
    g.sink("sink", DigestSink(digest) if collect is None else CollectSink(collect), [out])
    return g


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_once(workload: str, readings: Columns, variant: Variant, dicts: bool,
             collect: bool = False, processes: int | None = None) -> dict[str, Any]:
    import asyncio

    digest = Digest(workload)
    records: list[Any] | None = [] if collect else None
    job = Job(graph(workload, readings, digest, variant, dicts, records, processes))
    gc.collect()
    children = _children_cpu()
    cpu = time.process_time()
    wall = time.perf_counter()
    asyncio.run(job.run())
    wall = time.perf_counter() - wall
    cpu = time.process_time() - cpu  # the job's: the collected results' digest comes after
    for rec in records or ():
        digest.add(rec)
    return {"wall": wall, "main_cpu": cpu, "worker_cpu": _children_cpu() - children,
            "summary": digest.summary()}


def transport_costs(readings: Sequence[Reading], batch: int = 1000, rounds: int = 200) -> dict[str, float]:
    """ns per tuple to send a batch of readings through a socketpair and decode it."""
    import msgpack  # type: ignore[import-untyped]

    from riverbed.runtime._parallel_wire import frame

    chunk = list(readings[:batch])
    a, b = socket.socketpair()
    a.setblocking(True)
    b.setblocking(True)
    out: dict[str, float] = {}
    codecs: list[tuple[str, Callable[[Any], bytes], Callable[[bytes], Any]]] = [
        ("pickle", lambda x: pickle.dumps(x, protocol=5), pickle.loads),
        ("msgpack", msgpack.packb, msgpack.unpackb),
        ("arrow-ipc", _arrow_dumps, _arrow_loads),
    ]
    try:
        for name, dumps, loads in codecs:
            def trip(dumps: Callable[[Any], bytes] = dumps,
                     loads: Callable[[bytes], Any] = loads) -> Any:
                data = frame(dumps(chunk))
                a.sendall(data)
                got = bytearray()
                while len(got) < len(data):
                    got += b.recv(len(data) - len(got))
                return loads(bytes(got[4:]))

            out[name] = _best_ns(trip, chunk, rounds)
    finally:
        a.close()
        b.close()
    out.update(_pipe_and_shared_memory(chunk, rounds))
    return out


def _arrow_dumps(rows: list[Any]) -> bytes:
    import pyarrow as pa  # type: ignore[import-untyped]

    batch = pa.RecordBatch.from_pylist(rows)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue())


def _arrow_loads(data: bytes) -> Any:
    import pyarrow as pa

    return pa.ipc.open_stream(data).read_all().to_pylist()


def _pipe_and_shared_memory(chunk: list[Any], rounds: int) -> dict[str, float]:
    """Pickle through an os.pipe (framed), and pickle written into shared memory with only its
    length sent (the copy the socket makes, saved; the encoding stays)."""
    from multiprocessing import shared_memory

    from riverbed.runtime._parallel_wire import frame

    out: dict[str, float] = {}
    r, w = os.pipe()

    def through_pipe() -> Any:
        data = frame(pickle.dumps(chunk, protocol=5))
        view = memoryview(data)
        while view:
            view = view[os.write(w, view):]
        got = bytearray()
        while len(got) < len(data):
            got += os.read(r, len(data) - len(got))
        return pickle.loads(bytes(got[4:]))

    try:
        out["pickle over a pipe"] = _best_ns(through_pipe, chunk, rounds)
    finally:
        os.close(r)
        os.close(w)
    shm = shared_memory.SharedMemory(create=True, size=1 << 20)
    shared = shm.buf
    assert shared is not None  # None only once closed
    a, b = socket.socketpair()

    def through_shared_memory() -> Any:
        data = pickle.dumps(chunk, protocol=5)
        shared[:len(data)] = data
        a.sendall(len(data).to_bytes(4, "big"))
        n = int.from_bytes(b.recv(4), "big")
        return pickle.loads(shared[:n])

    try:
        out["pickle via shared memory"] = _best_ns(through_shared_memory, chunk, rounds)
    finally:
        a.close()
        b.close()
        shm.close()
        shm.unlink()
    return out


def _best_ns(trip: Callable[[], Any], chunk: list[Any], rounds: int) -> float:
    """ns per tuple of ``trip`` (one batch sent and decoded), best of 3 runs of ``rounds``;
    the batch must come back equal."""
    best = float("inf")
    decoded = None
    for _ in range(3):
        t = time.perf_counter_ns()
        for _ in range(rounds):
            decoded = trip()
        best = min(best, (time.perf_counter_ns() - t) / (rounds * len(chunk)))
    assert decoded == chunk
    return best


def loop_cost(workload: str, readings: Sequence[Reading]) -> float:
    digest = Digest(workload)
    t = time.perf_counter_ns()
    LOOPS[workload](readings, digest.add)
    return (time.perf_counter_ns() - t) / len(readings)


def _paired(runs: dict[Variant, list[dict[str, Any]]], a: Variant, b: Variant) -> str:
    """The wall-time ratio of ``a`` to ``b`` in each round of the alternating runs (run k of
    one against run k of the other, made minutes apart at most): its spread says how much of a
    median ratio the machine's noise can move."""
    pairs = sorted(y["wall"] / x["wall"] for x, y in zip(runs[a], runs[b], strict=True))
    if len(pairs) < 2:
        return ""
    text = f"; per round {pairs[0]:.2f}-{pairs[-1]:.2f}x"
    if len(pairs) >= 5:
        mean, low, high = _geometric_interval(pairs)
        text += f", geometric mean {mean:.3f}x (95 % interval {low:.3f}-{high:.3f}x)"
    return text


# Student's t at 97.5 % for 4 to 30 degrees of freedom (then the normal's 1.96).
_T975 = (2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052,
         2.048, 2.045, 2.042)


def _geometric_interval(ratios: Sequence[float]) -> tuple[float, float, float]:
    """The geometric mean of per-round ratios and its 95 % confidence interval (t on the logs):
    whether a target such as "no slower" (1.0x) is met or only within the noise."""
    import math

    logs = [math.log(r) for r in ratios]
    n = len(logs)
    mean = statistics.fmean(logs)
    half = (_T975[n - 5] if n - 5 < len(_T975) else 1.96) * statistics.stdev(logs) / math.sqrt(n)
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=400_000, help="readings per run (default 400,000)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per variant (median kept)")
    parser.add_argument("--widths", default="1,2,4", help="region widths (default 1,2,4)")
    parser.add_argument("--only", default="W2,W3", help="workloads (default W2,W3)")
    parser.add_argument("--input", choices=("columns", "dicts", "partitions"), default="columns",
                        help="what the sources read: arrays, a dict built per reading as it is "
                             "read (default); the list of dicts made before the clock runs; or "
                             "(partitions) as columns, each replica reading only its channel's "
                             "rows, split before the clock runs (a partitioned topic or file set)")
    parser.add_argument("--shapes", default=",".join(SHAPES),
                        help="split (source in the job's process), replicated (source in the "
                             "region); default both")
    parser.add_argument("--sink", choices=("digest", "collect"), default="digest",
                        help="digest: the sink hashes each result as it comes (default); "
                             "collect: it keeps them, hashed after the clock stops")
    parser.add_argument("--processes", type=int, default=None,
                        help="the most worker processes a region runs in (default: the CPU "
                             "count; a channel per process: a width's own number)")
    args = parser.parse_args(argv)
    widths = [int(w) for w in args.widths.split(",")]
    readings = make_readings(args.n)
    print(f"parallel regions: {args.n:,} readings, 1000 sensors, {os.cpu_count()} CPUs, "
          f"Python {sys.version.split()[0]}, median of {args.repeat} alternating runs, "
          f"worker processes a region: at most {args.processes or os.cpu_count()}")
    columns = Columns(readings)
    if args.input == "partitions":
        columns.partition(widths)
    costs = transport_costs(readings)
    # The benchmark's own input (a dict per reading, kept to check results; the columns) out of
    # the collector's way: a job's process does not hold its input, but here every full
    # collection in it would walk these millions of objects, a cost that grows with how many
    # results the job's process unpickles, not with anything the region does.
    gc.collect()
    gc.freeze()
    shapes = [x for x in args.shapes.split(",") if x]
    failed = False
    for workload in args.only.split(","):
        variants: list[Variant] = [("none", None)] + [(sh, w) for sh in shapes for w in widths]
        runs: dict[Variant, list[dict[str, Any]]] = {v: [] for v in variants}
        for _ in range(args.repeat):
            for v in variants:
                runs[v].append(run_once(workload, columns, v, args.input == "dicts",
                                        args.sink == "collect", args.processes))
        reference = runs[("none", None)][0]["summary"]
        print(f"\n{workload}: Aggregate over '{CLAUSES[workload]}' ({reference['records']:,} records)")
        print(f"  {'variant':<22} {'tuples/s':>10} {'vs 1 proc':>9} {'main us/t':>9} "
              f"{'workers us/t':>12} {'total us/t':>10} {'CPU-bound/s':>11} {'identical':>9}")
        rate: dict[Variant, float] = {}
        bound: dict[Variant, float] = {}
        for v in variants:
            wall = statistics.median(r["wall"] for r in runs[v])
            main_cpu = statistics.median(r["main_cpu"] for r in runs[v])
            worker_cpu = statistics.median(r["worker_cpu"] for r in runs[v])
            same = all(same_results(r["summary"], reference) for r in runs[v])
            failed |= not same
            rate[v] = args.n / wall
            shape, width = v
            label = "no region" if width is None else f"{shape}, width {width}"
            # What the CPU seconds allow on idle cores: the busiest process, or all the work
            # shared by the cores, whichever is slower (a model: it ignores waiting).
            cores = os.cpu_count() or 1
            procs = min(width or 1, args.processes or cores)  # worker processes of the region
            busiest = max(main_cpu, worker_cpu / procs, (main_cpu + worker_cpu) / cores)
            bound[v] = args.n / busiest
            print(f"  {label:<22} {rate[v]:>10,.0f} {rate[v] / rate[('none', None)]:>8.2f}x "
                  f"{main_cpu / args.n * 1e6:>9.2f} {worker_cpu / args.n * 1e6:>12.2f} "
                  f"{(main_cpu + worker_cpu) / args.n * 1e6:>10.2f} "
                  f"{args.n / busiest:>11,.0f} {'yes' if same else 'NO':>9}")
        for shape in shapes:
            r1, r2, r4 = (rate.get((shape, w)) for w in (1, 2, 4))
            b1, b2, b4 = (bound.get((shape, w)) for w in (1, 2, 4))
            if r1 and r2 and b1 and b2:
                print(f"  {shape}: width 2 / width 1: {r2 / r1:.2f}x wall, {b2 / b1:.2f}x CPU-bound "
                      f"(target >= 1.7x on 2 cores){_paired(runs, (shape, 2), (shape, 1))}")
            if r2 and r4 and b2 and b4:
                print(f"  {shape}: width 4 / width 2: {r4 / r2:.2f}x wall, {b4 / b2:.2f}x CPU-bound "
                      f"(target >= 1.0x){_paired(runs, (shape, 4), (shape, 2))}")
        print(f"  per tuple: hand loop {loop_cost(workload, readings):.0f} ns; transport "
              + ", ".join(f"{k} {v:.0f} ns" for k, v in costs.items())
              + " (a 1000-reading batch through a socketpair, encoded and decoded)")
    if failed:
        print("\nFAILED: a parallel run's results differ from the single-process run's")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
