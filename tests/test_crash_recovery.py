"""Crash recovery, for real: SIGKILL a checkpointing job at random instants, restart it, and
compare its output file byte for byte with an uninterrupted run. Nothing lost, nothing twice.

RIVERBED_CRASH_KILLS (default 20) and RIVERBED_CRASH_SEED change the number of kills and their
instants, for a longer run than the test suite's.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GRAPH = ROOT / "tests" / "graphs" / "crash_graph.py"
KILLS = int(os.environ.get("RIVERBED_CRASH_KILLS", "20"))
SEED = int(os.environ.get("RIVERBED_CRASH_SEED", "20261122"))


def _start(input_csv: Path, out: Path, ckpt: Path | None, rate: int = 2000) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "riverbed", "run", str(GRAPH), "-p", f"input={input_csv}",
            "-p", f"out={out}", "-p", f"rate={rate}", "--no-status", "--log-format", "json"]
    if ckpt is not None:
        args += ["--checkpoint-dir", str(ckpt), "--checkpoint-period", "150ms"]
    return subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def test_sigkill_at_random_moments_then_restart_gives_byte_identical_output(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    input_csv = tmp_path / "readings.csv"
    lines = [f"{i},{i % 13},{rng.randrange(1000)}" for i in range(30_000)]
    input_csv.write_text("\n".join(lines) + "\n")

    reference = tmp_path / "reference.csv"
    proc = _start(input_csv, reference, None, rate=10_000_000)  # the pace does not change output
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    expected = reference.read_bytes()
    assert expected.count(b"\n") > 4000

    out, ckpt = tmp_path / "out.csv", tmp_path / "ckpt"
    kills = completed = 0
    while kills < KILLS:
        proc = _start(input_csv, out, ckpt)
        try:
            # The stimulus: a kill at a random instant of the run (start-up included).
            proc.wait(timeout=rng.uniform(0.3, 2.5))
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            kills += 1
            visible = out.read_bytes() if out.exists() else b""
            assert expected.startswith(visible), f"after kill {kills}: output is not a prefix"
            continue
        # The job got to the end between kills (a fast machine): it must be exact, then the
        # next episode starts from scratch so that the kills keep landing mid-run.
        assert proc.returncode == 0, proc.stderr.read().decode() if proc.stderr else ""
        assert out.read_bytes() == expected, f"episode {completed} ended with a different output"
        completed += 1
        out.unlink()
        shutil.rmtree(ckpt)
    committed_before = out.exists() and out.stat().st_size > 0  # a checkpoint made output visible
    proc = _start(input_csv, out, ckpt)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    finished = [json.loads(line) for line in err.decode().splitlines()
                if line.startswith("{") and '"job finished"' in line]
    assert finished
    if committed_before:
        assert isinstance(finished[0]["restored_from"], int), "the last run did not resume"
    assert out.read_bytes() == expected


ET_GRAPH = ROOT / "tests" / "graphs" / "crash_eventtime_graph.py"
ET_EPISODES = int(os.environ.get("RIVERBED_CRASH_ET_EPISODES", "12"))


def _start_et(input_csv: Path, out: Path, ckpt: Path | None, rate: int = 20000) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "riverbed", "run", str(ET_GRAPH), "-p", f"input={input_csv}",
            "-p", f"out={out}", "-p", f"rate={rate}", "--no-status", "--log-format", "json"]
    if ckpt is not None:
        args += ["--checkpoint-dir", str(ckpt), "--checkpoint-period", "100ms"]
    return subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def test_sigkill_and_sigterm_of_an_event_time_graph_with_held_tuples_then_restart(tmp_path: Path) -> None:
    """Issue 16: Delay and Throttle hold tuples and watermarks, timeInterval panes complete on
    watermarks, a sliding window keeps panes; stopped by SIGKILL (a crash) or SIGTERM (a clean
    stop, which suspends the job at a checkpoint) at random instants, each restart must
    continue so that the file ends as an uninterrupted run's."""
    rng = random.Random(SEED + 1)
    input_csv = tmp_path / "readings.csv"
    rows = []
    for i in range(20_000):  # event time (ms) 2 ms apart, up to 0.3 s out of order, a few late
        ts = i * 2 + rng.randrange(300) - (900 if rng.random() < 0.002 else 0)
        rows.append(f"{i},{i % 7},{rng.randrange(1000)},{max(ts, 0)}")
    input_csv.write_text("\n".join(rows) + "\n")

    reference = tmp_path / "reference.csv"
    proc = _start_et(input_csv, reference, None, rate=10_000_000)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    expected = reference.read_bytes()
    assert expected.count(b"\n") > 1000

    out, ckpt = tmp_path / "out.csv", tmp_path / "ckpt"
    stops = {"SIGKILL": 0, "SIGTERM": 0}
    episode = 0
    while sum(stops.values()) < ET_EPISODES:
        episode += 1
        proc = _start_et(input_csv, out, ckpt)
        try:
            proc.wait(timeout=rng.uniform(0.4, 2.0))
        except subprocess.TimeoutExpired:
            sig = signal.SIGKILL if episode % 2 else signal.SIGTERM
            proc.send_signal(sig)
            _, err = proc.communicate(timeout=60)
            stops[sig.name] += 1
            # A SIGTERM that lands while the interpreter still imports riverbed, or after the
            # command ended, kills the process as SIGKILL would: judge it as a crash.
            if sig is signal.SIGTERM and proc.returncode != -signal.SIGTERM:
                assert proc.returncode == 0, err.decode()
                assert b'"job finished"' in err, err.decode()  # suspended (or it had ended)
            # A stop suspends the job at a checkpoint: no partial pane is flushed, so the
            # committed output is always a prefix of the uninterrupted run's, as after a crash.
            visible = out.read_bytes() if out.exists() else b""
            assert expected.startswith(visible), f"after {sig.name} {stops[sig.name]}: not a prefix"
            continue
        assert proc.returncode == 0, proc.stderr.read().decode() if proc.stderr else ""
        assert out.read_bytes() == expected, f"episode {episode} ended with a different output"
        out.unlink()
        shutil.rmtree(ckpt)
    proc = _start_et(input_csv, out, ckpt)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    assert stops["SIGTERM"] and stops["SIGKILL"]
    assert out.read_bytes() == expected, f"after {stops} stops the output differs"
