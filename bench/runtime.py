"""End-to-end throughput of riverbed's asyncio runtime against a hand-written loop and Bytewax.

Usage::

    .venv/bin/python bench/runtime.py [--n N] [--quick] [--no-bytewax] [--only W1,W4]
    .venv/bin/python bench/runtime.py --profile W2 [--path listener] [--n N]   # cProfile of riverbed

Windowed workloads over 1000 sensors and a stateless chain (see `workloads`
for their exact results), each run these ways on the same seeded readings:

  (a) riverbed "toolkit": a graph ``source -> Aggregate -> sink`` (the
      chain: ``source -> Filter -> Functor -> Functor -> sink``), what the
      README teaches, run by ``riverbed.runtime.run_graph`` on the real clock;
  (b) riverbed "listener": the same graph with an operator of our own on the
      window's events instead of Aggregate (``bench/riverbed_flows.py``);
  (c) a hand-written Python loop computing the same records;
  (d) Bytewax 0.21 (``bench/bytewax_flows.py``) with its own operators
      (``collect``, ``fold_window``, ``stateful_map``, ``filter``/``map``), in
      a subprocess running the Python of ``bench/.venv-bytewax``, which
      ``bench/setup_bytewax.sh`` creates on first use. This process never
      imports bytewax.

Every variant's records go to the same `workloads.Digest` (count, key hash,
exact float sum), which keeps them while the clock runs (one list append a
record, for every engine and the loop) and digests them after it stops; and
EVERY timed run's digest must equal the loop's: a
mismatch is reported, its row gets no ratio, and the script exits 1. The
table gives tuples/s, each riverbed path's slowdown against the loop (loop
rate / riverbed rate) and its speedup against Bytewax (riverbed rate /
Bytewax rate), by wall-clock time and again by CPU time (``process_time``),
which other processes competing for the CPUs disturb less; the script warns
when that happened.

Latency: W1, W4 and W4inc run again (each riverbed path) with a source paced
on the real clock at half of that path's measured throughput for that workload; each result's
latency is the time from the emission of the newest reading it includes
(the one that completed the window, or triggered it) to the sink seeing
it. Reported as p50/p99 over every result.

``W4`` (summing 1000 readings on every trigger) costs ~40 us per reading in
any engine, so it runs on the first ``--w4-n`` readings (default 200,000).
Each variant runs ``--repeat`` times (default 2) and keeps its best time. Each workload is
measured in ``--processes`` fresh processes (default 3), Bytewax's too, and the median of their
rates kept (``--shared-process``: all in this one, where what ran before changes the figures:
see `measure_apart`).
At the default N = 2,000,000 a full run takes about 4 minutes on 2 idle cores;
``--quick`` (N = 200,000) under a minute.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import platform
import pstats
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import riverbed_flows
from riverbed_flows import PATHS, LatencySink, PacedReadings, latency_graph, throughput_graph
from workloads import DESCRIPTIONS, LOOPS, SEED, WORKLOADS, Digest, Reading, make_readings, same_results

from riverbed.runtime import run_graph

HERE = Path(__file__).resolve().parent
BYTEWAX_PYTHON = HERE / ".venv-bytewax" / "bin" / "python"
DEFAULT_N = 2_000_000
DEFAULT_W4_N = 200_000
QUICK_N = 200_000
QUICK_W4_N = 50_000
LATENCY_WORKLOADS = ("W1", "W4", "W4inc")


Timed = tuple[float, float, list[dict[str, Any]]]  # best wall s, best CPU s, every run's digest


def run_riverbed(name: str, readings: Sequence[Reading], repeat: int, path: str) -> Timed:
    """Best wall and CPU seconds of ``repeat`` runs, each on a fresh graph, and every digest."""
    wall = cpu = float("inf")
    digests = []
    for _ in range(repeat):
        digest = Digest(name)
        graph = throughput_graph(name, readings, digest, path)
        w0, c0 = time.perf_counter(), time.process_time()
        run_graph(graph)
        wall = min(wall, time.perf_counter() - w0)
        cpu = min(cpu, time.process_time() - c0)
        digests.append(digest.summary())
    return wall, cpu, digests


def run_loop(name: str, readings: Sequence[Reading], repeat: int) -> Timed:
    wall = cpu = float("inf")
    digests = []
    for _ in range(repeat):
        digest = Digest(name)
        w0, c0 = time.perf_counter(), time.process_time()
        LOOPS[name](readings, digest.add)
        wall = min(wall, time.perf_counter() - w0)
        cpu = min(cpu, time.process_time() - c0)
        digests.append(digest.summary())
    return wall, cpu, digests


def first_mismatch(digests: Sequence[dict[str, Any]], reference: dict[str, Any]) -> int | None:
    """The index of the first run whose digest differs from ``reference``, or None."""
    return next((i for i, d in enumerate(digests) if not same_results(d, reference)), None)


def run_latency(name: str, readings: Sequence[Reading], rate: float, seconds: float, path: str
                ) -> tuple[list[int], float]:
    """Latencies (ns) of every result, and the emission rate the paced source achieved."""
    count = min(len(readings), max(1, int(rate * seconds)))
    source = PacedReadings(readings[:count], rate)
    sink = LatencySink()
    graph = latency_graph(name, source, sink, path)
    gc.collect()
    gc.freeze()  # the source's stamped copies are input, not runtime state
    run_graph(graph)
    return sink.latencies, count / max(source.elapsed_ns, 1) * 1e9


def setup_bytewax() -> str | None:
    """Install Bytewax into bench/.venv-bytewax if needed; None when it works, else why not."""
    try:
        proc = subprocess.run(["bash", str(HERE / "setup_bytewax.sh")], capture_output=True, text=True,
                              timeout=900, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"setup_bytewax.sh could not run: {exc}"
    if proc.returncode != 0:
        return f"setup_bytewax.sh failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}"
    return None


def run_bytewax(n: int, w4_n: int, seed: int, only: Sequence[str], repeat: int) -> dict[str, Any]:
    cmd = [str(BYTEWAX_PYTHON), str(HERE / "bytewax_flows.py"), "--n", str(n), "--seed", str(seed),
           "--w4-n", str(w4_n), "--only", ",".join(only), "--repeat", str(repeat)]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, timeout=3600, check=True)
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def percentile(sorted_values: Sequence[int], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))] / 1e6


def fmt_rate(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:,.0f}"


def fmt_x(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def profile(name: str, readings: Sequence[Reading], top: int, path: str) -> None:
    digest = Digest(name)
    graph = throughput_graph(name, readings, digest, path)
    prof = cProfile.Profile()
    prof.enable()
    run_graph(graph)
    prof.disable()
    print(f"riverbed {path} {name} ({DESCRIPTIONS[name]}), {len(readings):,} readings, under cProfile:")
    stats = pstats.Stats(prof)
    stats.sort_stats("tottime").print_stats(top)


def paths_of(name: str) -> tuple[str, ...]:
    return ("toolkit",) if name == "chain" else PATHS


def measure(name: str, readings: Sequence[Reading], w4_n: int, paths: Sequence[str],
            repeat: int) -> dict[str, Any]:
    """One workload's row: the loop and each riverbed path, every run's digest checked."""
    data = readings[:w4_n] if name == "W4" else readings
    n_data = len(data)
    loop_s, loop_cpu, loop_digests = run_loop(name, data, repeat)
    reference = loop_digests[0]
    row: dict[str, Any] = {"name": name, "n": n_data, "loop": n_data / loop_s,
                           "loop_cpu": n_data / loop_cpu, "bw": None, "bw_cpu": None,
                           "busy": loop_cpu / loop_s, "records": reference["records"],
                           "bad": [], "digests": {"loop": loop_digests}}
    bad = first_mismatch(loop_digests, reference)
    if bad is not None:
        row["bad"].append(f"loop run {bad}")
    for path in paths:
        if path not in paths_of(name):
            continue
        rb_s, rb_cpu, rb_digests = run_riverbed(name, data, repeat, path)
        row[path], row[path + "_cpu"] = n_data / rb_s, n_data / rb_cpu
        row["busy"] = min(row["busy"], rb_cpu / rb_s)
        row["digests"][path] = rb_digests
        bad = first_mismatch(rb_digests, reference)
        if bad is not None:
            row["bad"].append(f"{path} run {bad}")
    return row


def measure_apart(name: str, args: argparse.Namespace, n: int, w4_n: int,
                  paths: Sequence[str]) -> dict[str, Any]:
    """`measure` in ``--processes`` fresh processes of its own (``--measure``), as pyperf runs
    each benchmark, each rate the median over them. A workload run after others in one process
    inherits their heap (its arenas, what the collector tracks), which moved the chain's loop by
    up to 20 % and riverbed's by 7 %, in opposite directions. And fresh processes differ among
    themselves: the W1 loop ran at 4.25-5.78M readings/s in three of them (not the string hash
    seed: fixed seeds spread as much)."""
    cmd = [sys.executable, str(HERE / "runtime.py"), "--measure", name, "--n", str(n),
           "--w4-n", str(w4_n), "--seed", str(args.seed), "--repeat", str(args.repeat),
           "--paths", ",".join(paths)] + (["--no-schema"] if args.no_schema else [])
    rows = []
    for _ in range(args.processes):
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, timeout=3600, check=True)
        rows.append(json.loads(proc.stdout.splitlines()[-1]))
    row: dict[str, Any] = rows[0]
    for key in ("loop", "loop_cpu", *paths, *(p + "_cpu" for p in paths)):
        if row.get(key) is not None:
            row[key] = statistics.median(r[key] for r in rows)
    row["busy"] = min(r["busy"] for r in rows)
    row["digests"] = {k: [d for r in rows for d in r["digests"][k]] for k in row["digests"]}
    # every run of every process against the first process's loop (each process checked its
    # own runs against its own loop only)
    reference = row["digests"]["loop"][0]
    row["bad"] = [f"{k} run {i} (of every process's)" for k, digests in row["digests"].items()
                  if (i := first_mismatch(digests, reference)) is not None]
    return row


def bytewax_apart(name: str, args: argparse.Namespace, n: int, w4_n: int
                  ) -> tuple[str, dict[str, Any]]:
    """Bytewax's `run_bytewax` for one workload in ``--processes`` processes: its version, and
    the median seconds with every run's digest."""
    outs = [run_bytewax(n, w4_n, args.seed, [name], args.repeat) for _ in range(args.processes)]
    parts = [o["workloads"][name] for o in outs]
    return outs[0]["version"], {
        "n": parts[0]["n"], "seconds": statistics.median(p["seconds"] for p in parts),
        "cpu_seconds": statistics.median(p["cpu_seconds"] for p in parts),
        "runs": [d for p in parts for d in p["runs"]]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, help=f"readings per workload (default {DEFAULT_N:,})")
    ap.add_argument("--w4-n", type=int, help=f"readings for W4, summing per trigger (default "
                                             f"min(N, {DEFAULT_W4_N:,}))")
    ap.add_argument("--quick", action="store_true", help=f"N = {QUICK_N:,}, W4 on {QUICK_W4_N:,}, "
                                                         "2 s of latency")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--repeat", type=int, default=2, help="runs per variant, best time kept (default 2)")
    ap.add_argument("--only", default=",".join(WORKLOADS), help="workloads, comma-separated")
    ap.add_argument("--paths", default=",".join(PATHS),
                    help="riverbed paths: toolkit (Aggregate, Filter, Functor) and/or listener")
    ap.add_argument("--no-bytewax", action="store_true", help="skip Bytewax (and its installation)")
    ap.add_argument("--no-latency", action="store_true", help="skip the paced latency runs")
    ap.add_argument("--no-schema", action="store_true",
                    help="riverbed's source declares no schema (no per-tuple check), like the others")
    ap.add_argument("--latency-seconds", type=float, help="paced run length per workload (default 5)")
    ap.add_argument("--shared-process", action="store_true",
                    help="measure every workload in this one process (default: a process each)")
    ap.add_argument("--processes", type=int, default=3,
                    help="fresh processes a workload is measured in, medians kept (default 3)")
    ap.add_argument("--measure", metavar="W", help=argparse.SUPPRESS)  # one workload, as JSON
    ap.add_argument("--profile", metavar="W", help="only profile riverbed on workload W (cProfile)")
    ap.add_argument("--path", default="toolkit", choices=PATHS, help="the riverbed path --profile runs")
    ap.add_argument("--top", type=int, default=25, help="lines of profile to print")
    args = ap.parse_args(argv)
    if args.no_schema:
        riverbed_flows.DECLARE_SCHEMA = False
    n = args.n or (QUICK_N if args.quick else DEFAULT_N)
    w4_n = min(n, args.w4_n or (QUICK_W4_N if args.quick else DEFAULT_W4_N))
    lat_seconds = args.latency_seconds or (2.0 if args.quick else 5.0)
    only = [w.strip() for w in args.only.split(",") if w.strip()]
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    for w in only + [w for w in (args.profile, args.measure) if w]:
        if w not in WORKLOADS:
            ap.error(f"unknown workload {w!r}: expected some of {', '.join(WORKLOADS)}")
    for p in paths:
        if p not in PATHS:
            ap.error(f"unknown path {p!r}: expected some of {', '.join(PATHS)}")

    # The readings this process runs on itself: none when each workload runs in processes of
    # its own and no latency run follows (those processes make their own).
    apart_only = not (args.shared_process or args.measure or args.profile) and args.no_latency
    readings = [] if apart_only else make_readings(n, args.seed)
    gc.collect()
    gc.freeze()  # the input list is not garbage: keep the collector from rescanning it
    if args.measure:
        print(json.dumps(measure(args.measure, readings, w4_n, paths, args.repeat)))
        return 0
    if args.profile:
        path = "toolkit" if args.profile == "chain" else args.path
        profile(args.profile, readings[:w4_n] if args.profile == "W4" else readings, args.top, path)
        return 0

    print(f"riverbed runtime bench: N={n:,} readings ({w4_n:,} for W4), 1000 sensors, seed {args.seed}, "
          f"best of {args.repeat}; Python {platform.python_version()}, {os.cpu_count()} CPUs")
    bytewax_note: str | None = "skipped (--no-bytewax)" if args.no_bytewax else None
    if not args.no_bytewax:
        print("setting up Bytewax in bench/.venv-bytewax ...", flush=True)
        bytewax_note = setup_bytewax()
        if bytewax_note is not None:
            print(f"BYTEWAX NOT AVAILABLE: {bytewax_note}\nreporting riverbed against the loop only.")

    rows: list[dict[str, Any]] = []
    ok = True
    for name in only:
        row = (measure(name, readings, w4_n, paths, args.repeat) if args.shared_process
               else measure_apart(name, args, n, w4_n, paths))
        ok &= not row["bad"]
        rows.append(row)
        line = f"  {name}: loop {row['loop']:,.0f}/s" + "".join(
            f", {path} {row[path]:,.0f}/s" for path in paths if row.get(path) is not None)
        print(f"{line}, {row['records']:,} records{' RESULTS DIFFER' if row['bad'] else ''}",
              flush=True)

    bytewax_version = None
    if bytewax_note is None:
        print("running Bytewax in a subprocess ...", flush=True)
        try:
            if args.shared_process:
                bw_runs = run_bytewax(n, w4_n, args.seed, only, args.repeat)
            else:  # processes of their own, as for riverbed and the loop
                apart = {name: bytewax_apart(name, args, n, w4_n) for name in only}
                bw_runs = {"version": next(iter(apart.values()))[0],
                           "workloads": {name: res for name, (_, res) in apart.items()}}
        except (OSError, subprocess.SubprocessError, json.JSONDecodeError) as exc:
            bytewax_note = f"the Bytewax run failed: {exc}"
            print(f"BYTEWAX FAILED: {bytewax_note}")
        else:
            bytewax_version = bw_runs["version"]
            for row in rows:
                res = bw_runs["workloads"][row["name"]]
                row["bw"] = res["n"] / res["seconds"]
                row["bw_cpu"] = res["n"] / res["cpu_seconds"]
                row["busy"] = min(row["busy"], res["cpu_seconds"] / res["seconds"])
                row["digests"]["bytewax"] = res["runs"]
                bad = first_mismatch(res["runs"], row["digests"]["loop"][0])
                if bad is not None:
                    row["bad"].append(f"bytewax run {bad}")
                    ok = False

    def ratio(r: dict[str, Any], a: str, b: str) -> str:
        if r["bad"] or r.get(a) is None or r.get(b) is None:
            return "-"
        return fmt_x(r[a] / r[b])

    for title, suffix in (("throughput (tuples/s)", ""),
                          ("the same per CPU second (process_time; steadier when other processes "
                           "share the CPUs)", "_cpu")):
        print(f"\n{title}; Bytewax {bytewax_version or 'n/a'}"
              f"{'' if bytewax_note is None else ' - ' + bytewax_note}")
        head = (f"{'workload':<7} {'N':>10} {'toolkit':>11} {'listener':>11} {'loop':>11} "
                f"{'bytewax':>11} {'loop/toolkit':>13} {'loop/listener':>14} {'toolkit/bw':>11} "
                f"{'listener/bw':>12} {'records':>10}  check")
        print(head)
        print("-" * len(head))
        for r in rows:
            tk, ls, lp, bw = ("toolkit" + suffix, "listener" + suffix, "loop" + suffix, "bw" + suffix)
            print(f"{r['name']:<7} {r['n']:>10,} {fmt_rate(r.get(tk)):>11} {fmt_rate(r.get(ls)):>11} "
                  f"{fmt_rate(r[lp]):>11} {fmt_rate(r.get(bw)):>11} {ratio(r, lp, tk):>13} "
                  f"{ratio(r, lp, ls):>14} {ratio(r, tk, bw):>11} {ratio(r, ls, bw):>12} "
                  f"{r['records']:>10,}  {'MISMATCH: ' + ', '.join(r['bad']) if r['bad'] else 'ok'}")
    for r in rows:
        print(f"  {r['name']}: {DESCRIPTIONS[r['name']]}")
    busy = min(r["busy"] for r in rows) if rows else 1.0
    if busy < 0.9:
        print(f"WARNING: a timed run had the CPU only {busy:.0%} of its wall time: other processes are "
              "competing for the CPUs, so wall-clock rates (and latencies) are pessimistic.")
    if not ok:
        for r in rows:
            if r["bad"]:
                print(f"RESULTS DIFFER in {r['name']} ({', '.join(r['bad'])}): digests "
                      f"{json.dumps(r['digests'])}")

    lat_rows = [] if args.no_latency else [r for r in rows if r["name"] in LATENCY_WORKLOADS]
    if lat_rows:
        print(f"\nriverbed end-to-end latency at half its max rate ({lat_seconds:g} s paced on the real "
              "clock)")
        print(f"{'workload':<7} {'path':<9} {'rate/s':>10} {'achieved':>10} {'results':>9} {'p50 ms':>9} "
              f"{'p99 ms':>9} {'max ms':>9}")
        for r in lat_rows:
            for path in paths:
                if r.get(path) is None:
                    continue
                rate = r[path] / 2
                found, achieved = run_latency(r["name"], readings, rate, lat_seconds, path)
                lat = sorted(found)
                if not lat:
                    print(f"{r['name']:<7} {path:<9} {rate:>10,.0f} {achieved:>10,.0f}  no result within "
                          "the run")
                    continue
                print(f"{r['name']:<7} {path:<9} {rate:>10,.0f} {achieved:>10,.0f} {len(lat):>9,} "
                      f"{percentile(lat, 0.5):>9.2f} {percentile(lat, 0.99):>9.2f} "
                      f"{lat[-1] / 1e6:>9.2f}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
