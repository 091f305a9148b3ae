"""Chaos at length: hundreds of injected faults and process kills, then nothing lost or repeated.

Usage::

    .venv/bin/python bench/chaos.py [--readings N] [--sensors S] [--kills K] [--fault-rate P]
                                    [--window CLAUSE] [--rate R] [--seed SEED]

The graph is `tests/graphs/chaos_graph.py`: a paced, replayable reader (R readings a real
second) -> Chaos, which raises at random tuples (probability P each) -> a windowed
sum per sensor -> running totals -> a transactional FileSink, all in the job's consistent
region (``--checkpoint-dir``, ``--checkpoint-period 1s``). Each fault resets the region in
place; on top, the bench kills the job process with SIGKILL at random instants (K times),
and ``riverbed run --restarts`` starts it again from its newest checkpoint.

The default window, ``sliding, count(1000), count(500), partitioned`` over 1000 sensors,
holds 1,000,000 readings once warm: every checkpoint and every recovery carries a million
windowed tuples of state.

Printed: events survived (faults and kills), readings lost and duplicated in the output
(compared, line by line as a multiset, with an uninterrupted run's), and the time to recover,
p50/p99: for a fault, from the failure to processing again (the region's own measure); for a
kill, from the kill to the new process having restored its checkpoint. That includes the
supervisor's backoff, which doubles (up to 30 s) while restarted processes are killed before
they ran 3 s: kills 1-6 s apart make a crash loop now and then, and its p99 shows it.
Exits non-zero when anything was lost or duplicated (or the job failed). The supervisor's
log lines are kept in the work directory (``supervisor.log``).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GRAPH = ROOT / "tests" / "graphs" / "chaos_graph.py"


def _args(input_csv: Path, out: Path, window: str, rate: float, *extra: str) -> list[str]:
    return [sys.executable, "-m", "riverbed", "run", str(GRAPH), "-p", f"input={input_csv}",
            "-p", f"out={out}", "-p", f"window={window}", "-p", f"rate={rate}", "--no-status",
            "--log-format", "json", *extra]


def _percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--readings", type=int, default=3_000_000)
    ap.add_argument("--sensors", type=int, default=1000)
    ap.add_argument("--kills", type=int, default=60)
    # A fault every ~2.5 s at 40,000 readings/s and a checkpoint every second: a region gives
    # up after max_consecutive_reset_attempts (5) resets with no checkpoint between them, so
    # faults must come less often than checkpoints (0.0002 with a 10 s period made 8 faults a
    # second, no checkpoint ever committed, and the job failed with nothing written).
    ap.add_argument("--fault-rate", type=float, default=0.00001)
    ap.add_argument("--window", default="sliding, count(1000), count(500), partitioned")
    ap.add_argument("--rate", type=float, default=40_000)
    ap.add_argument("--period", default="1s")
    ap.add_argument("--seed", type=int, default=20261125)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="riverbed-chaos-"))
    input_csv = work / "readings.csv"
    with input_csv.open("w") as f:
        for i in range(args.readings):
            f.write(f"{i},{i % args.sensors},{rng.randrange(1000)}\n")
    print(f"{args.readings:,} readings, {args.sensors} sensors, window {args.window!r}, "
          f"fault rate {args.fault_rate} per reading, {args.kills} kills; work dir {work}")

    reference = work / "reference.csv"
    started = time.monotonic()
    done = subprocess.run(_args(input_csv, reference, args.window, 1e9), cwd=ROOT,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        print(done.stderr[-3000:])
        return 1
    produced = len(reference.read_bytes().splitlines())
    print(f"uninterrupted run: {time.monotonic() - started:.1f} s, {produced:,} output lines")

    out, ckpt = work / "out.csv", work / "ckpt"
    supervisor = subprocess.Popen(
        _args(input_csv, out, args.window, args.rate, "-p", f"fault_rate={args.fault_rate}",
              "-p", f"seed={args.seed}", "--checkpoint-dir", str(ckpt), "--checkpoint-period",
              args.period, "--restarts", str(args.kills * 2 + 10)),
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[tuple[float, str]] = queue.Queue()

    def read() -> None:
        assert supervisor.stderr is not None
        with (work / "supervisor.log").open("w") as log:  # kept: why a run failed
            for line in supervisor.stderr:
                log.write(line)
                lines.put((time.monotonic(), line))

    threading.Thread(target=read, daemon=True).start()
    events: list[tuple[float, dict[str, object]]] = []

    def drain() -> None:
        while not lines.empty():
            at, line = lines.get()
            if line.startswith("{"):
                events.append((at, json.loads(line)))

    kill_times: list[float] = []
    while len(kill_times) < args.kills:
        try:
            supervisor.wait(timeout=rng.uniform(1.0, 6.0))
            break
        except subprocess.TimeoutExpired:
            drain()
            pids = [int(e["pid"]) for _, e in events if e["event"] == "job process started"]  # type: ignore[call-overload]
            if not pids:
                continue
            try:
                os.kill(pids[-1], signal.SIGKILL)
            except ProcessLookupError:
                continue
            kill_times.append(time.monotonic())
            so_far = sum(e["event"] == "region reset" for _, e in events)
            print(f"  kill {len(kill_times)}/{args.kills} ({so_far} faults so far)", flush=True)
    code = supervisor.wait()
    time.sleep(0.2)  # the reader thread's last lines
    drain()
    faults = [e for _, e in events if e["event"] == "region reset"]
    recovered = [e for _, e in events if e["event"] == "region recovered"]
    slowest = max(recovered, key=lambda e: float(e["recovery_ms"]), default=None)  # type: ignore[arg-type]
    fault_recovery = [float(e["recovery_ms"]) for _, e in events  # type: ignore[arg-type]
                      if e["event"] == "region recovered"]
    restored = [at for at, e in events if e["event"] == "restored"]
    kill_recovery = []
    for k in kill_times:
        after = [at for at in restored if at > k]
        if after:
            kill_recovery.append((after[0] - k) * 1000)

    expected = Counter(reference.read_text().splitlines())
    got = Counter(out.read_text().splitlines()) if out.exists() else Counter()
    lost = sum((expected - got).values())
    duplicated = sum((got - expected).values())
    print(f"job exit code {code}")
    print(f"events survived: {len(faults)} faults + {len(kill_times)} kills = "
          f"{len(faults) + len(kill_times)}")
    print(f"readings' results lost: {lost}, duplicated: {duplicated} "
          f"(of {sum(expected.values()):,} output lines)")
    for name, values in (("fault (region reset)", fault_recovery), ("kill (process restart)", kill_recovery)):
        if values:
            print(f"recovery after a {name}: p50 {statistics.median(values):.0f} ms, "
                  f"p99 {_percentile(values, 99):.0f} ms, max {max(values):.0f} ms "
                  f"({len(values)} recoveries)")
    if slowest is not None:
        print("the slowest reset, by phase: " + ", ".join(
            f"{k} {slowest[k]} ms" for k in ("stop_ms", "load_ms", "restore_ms") if k in slowest))
        for key in ("stop_ms", "load_ms", "restore_ms"):
            phase = [float(e[key]) for e in recovered if key in e]  # type: ignore[arg-type]
            if phase:
                print(f"  {key[:-3]}: p50 {statistics.median(phase):.0f} ms, "
                      f"p99 {_percentile(phase, 99):.0f} ms")
    return 0 if code == 0 and lost == 0 and duplicated == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
