"""What the live console costs a job: throughput with no console, with one and no page open, with one page.

Usage::

    .venv/bin/python bench/console.py [--seconds S] [--rounds R] [--page browser|sse] [--interval I]

Workload: ``examples/sensors.py`` (200 sensors, 50 readings a second each, a
partitioned sliding count window, a delta window, a file sink) for ``S``
seconds of *virtual* time, so nothing waits: the job runs flat out on one core
and its wall time is its CPU work (readings/s = readings / wall seconds).

Compared, in alternating rounds (best of R each, so a noisy round costs none):

  off   no console;
  idle  ``serve_console`` on 127.0.0.1 (its thread samples the job every
        interval, for the history a page opened later plots), no page open;
  page  the same with one page open: Debian's Chromium showing the console
        (``--page browser``, a separate process, as a person's browser is) or a
        bare server-sent-event reader (``--page sse``), connected before the
        job starts and reading every push while it runs.

The machine this runs on may be shared (other jobs, other benches), so wall
time can swing by tens of percent between identical runs. The ratios are
therefore printed two ways: by wall time, and by process CPU time (readings per
CPU second of the job's process, the console's thread included), which other
processes barely move; and the console thread's own CPU time as a share of the
process's, the cost measured directly. 1.000 = no cost; the target is > 0.98
with a page open.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from riverbed.console import serve_console
from riverbed.run import load_graph
from riverbed.runtime import Job, VirtualClock, run_virtual

ROOT = Path(__file__).resolve().parent.parent
SENSORS = ROOT / "examples" / "sensors.py"

_BROWSER = """
import sys
from playwright.sync_api import sync_playwright
with sync_playwright() as p:
    browser = p.chromium.launch(executable_path=sys.argv[2], args=["--no-sandbox"])
    page = browser.new_page()
    page.goto(sys.argv[1])
    page.wait_for_selector("body[data-ready=true]")
    print("open", flush=True)
    sys.stdin.read()  # until the bench closes it
    browser.close()
"""

_SSE = """
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1] + "events") as events:
    print("open", flush=True)
    for _ in events:
        pass
"""


def _open_page(kind: str, url: str) -> subprocess.Popen[str]:
    chromium = shutil.which("chromium")
    if kind == "browser" and chromium is None:
        raise SystemExit("--page browser: no chromium on PATH (scripts/install_console_deps.sh)")
    code, args = (_BROWSER, [url, chromium or ""]) if kind == "browser" else (_SSE, [url])
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "open":
        raise SystemExit(f"the {kind} page did not open (exit {proc.wait()})")
    return proc


def one_run(variant: str, seconds: float, work: Path, page: str, interval: float
            ) -> tuple[float, float, float, int]:
    """Wall and process CPU seconds of one run, the console thread's CPU seconds, and the
    readings the job processed."""
    graph = load_graph(SENSORS, {"sensors": 200, "rate": 50, "seconds": seconds,
                                 "out": str(work / f"{variant}.jsonl")})
    clock = VirtualClock()
    job = Job(graph, clock=clock)
    server = viewer = None
    if variant != "off":
        server = serve_console(job, graph, "127.0.0.1:0", interval=interval)
    if variant == "page":
        assert server is not None
        viewer = _open_page(page, server.url)
        deadline = time.monotonic() + 30
        while server.pages < 1 and time.monotonic() < deadline:  # the page's event stream is up
            time.sleep(0.01)
    try:
        console0 = server.cpu_seconds() if server is not None else 0.0
        wall0, cpu0 = time.perf_counter(), time.process_time()
        run_virtual(job.run(), clock)
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        console = server.cpu_seconds() - console0 if server is not None else 0.0
        if server is not None and variant == "page" and server.pages < 1:
            raise SystemExit("the page was not connected while the job ran")
    finally:
        if viewer is not None:
            assert viewer.stdin is not None
            viewer.stdin.close()
            viewer.wait(timeout=60)
        if server is not None:
            server.close()
    processed = job.snapshot_metrics().operators["average"].inputs[0].tuples_processed
    return wall, cpu, console, processed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=40.0, help="virtual seconds of readings (default 40)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--page", choices=("browser", "sse"),
                    default="browser" if shutil.which("chromium") else "sse")
    ap.add_argument("--interval", type=float, default=1.0, help="the console's sampling interval")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="riverbed-console-bench-"))
    best: dict[str, dict[str, Any]] = {}
    print(f"examples/sensors.py, 200 sensors x 50/s x {args.seconds:g} virtual s; page: {args.page}; "
          f"interval {args.interval:g} s; best of {args.rounds}")
    for round_ in range(args.rounds):
        for variant in ("off", "idle", "page"):
            wall, cpu, console, processed = one_run(variant, args.seconds, work, args.page, args.interval)
            print(f"  round {round_ + 1} {variant:<4} {processed / wall:>10,.0f} readings/s  "
                  f"wall {wall:6.2f} s  cpu {cpu:6.2f} s  console thread {console * 1000:7.1f} ms",
                  flush=True)
            b = best.setdefault(variant, {"wall": wall, "cpu": cpu, "console": console})
            b["wall"], b["cpu"] = min(b["wall"], wall), min(b["cpu"], cpu)
            b["console"] = min(b["console"], console)
            b["readings"] = processed
    shutil.rmtree(work, ignore_errors=True)
    for variant, b in best.items():
        print(f"{variant:<4} {b['readings'] / b['wall']:>10,.0f} readings/s (wall)  "
              f"{b['readings'] / b['cpu']:>10,.0f} readings/CPU-s  console thread "
              f"{b['console'] / b['cpu']:.2%} of the process CPU")
    off = best["off"]
    for variant in ("idle", "page"):
        b = best[variant]
        print(f"throughput ratio {variant}/off: {1 - b['console'] / b['cpu']:.4f} by the console "
              f"thread's CPU share; wall {off['wall'] / b['wall']:.3f}, process cpu "
              f"{off['cpu'] / b['cpu']:.3f} (noisy on a shared machine)  (1 = no cost; target > 0.98)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
