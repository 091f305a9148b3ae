"""Chaos, for real (issue 19): faults injected at random tuples reset the job's consistent region
in place, and the job process is killed with SIGKILL at random instants and restarted by
``riverbed run --restarts``; the transactional sink's file must end byte-identical to an
uninterrupted run's. `bench/chaos.py` runs the same for longer.

RIVERBED_CHAOS_KILLS (default 6) and RIVERBED_CHAOS_SEED change the kills and their instants.
"""

from __future__ import annotations

import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GRAPH = ROOT / "tests" / "graphs" / "chaos_graph.py"
KILLS = int(os.environ.get("RIVERBED_CHAOS_KILLS", "6"))
SEED = int(os.environ.get("RIVERBED_CHAOS_SEED", "20261125"))


def _args(input_csv: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "riverbed", "run", str(GRAPH), "-p", f"input={input_csv}",
            "-p", f"out={out}", "--no-status", "--log-format", "json", *extra]


def _lines(stream: object, into: queue.Queue[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        into.put(line)


def test_injected_faults_and_kills_then_byte_identical_output(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    input_csv = tmp_path / "readings.csv"
    input_csv.write_text("".join(f"{i},{i % 13},{rng.randrange(1000)}\n" for i in range(30_000)))
    reference = tmp_path / "reference.csv"
    done = subprocess.run(_args(input_csv, reference, "-p", "rate=10000000"), cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    expected = reference.read_bytes()

    out, ckpt = tmp_path / "out.csv", tmp_path / "ckpt"
    supervisor = subprocess.Popen(
        _args(input_csv, out, "-p", "rate=15000", "-p", "fault_rate=0.0005", "-p", f"seed={SEED}",
              "--checkpoint-dir", str(ckpt), "--checkpoint-period", "100ms", "--restarts", "100"),
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=_lines, args=(supervisor.stderr, lines), daemon=True)
    reader.start()
    seen: list[dict[str, object]] = []

    def drain() -> None:
        while not lines.empty():
            line = lines.get()
            if line.startswith("{"):
                seen.append(json.loads(line))

    kills = 0
    while kills < KILLS:
        try:
            supervisor.wait(timeout=rng.uniform(0.5, 2.0))  # the stimulus: a kill at a random instant
            break  # the job finished between kills
        except subprocess.TimeoutExpired:
            drain()
            started = [e for e in seen if e["event"] == "job process started"]
            if started:
                try:
                    os.kill(int(started[-1]["pid"]), signal.SIGKILL)  # type: ignore[call-overload]
                except ProcessLookupError:
                    continue  # between two processes (a restart's backoff)
                kills += 1
    assert supervisor.wait(timeout=300) == 0
    reader.join(timeout=10)
    drain()
    restarts = [e for e in seen if e["event"] == "job process restarted"]
    resets = [e for e in seen if e["event"] == "region reset"]
    assert len(restarts) >= kills > 0
    assert len(resets) >= 10, f"only {len(resets)} faults were injected"
    assert all("InjectedFault" in str(e["reason"]) for e in resets)
    assert out.read_bytes() == expected, f"after {kills} kills and {len(resets)} resets"
