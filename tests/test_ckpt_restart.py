"""A checkpointing job killed and restarted with another output file (issue 16, item 4), through the
real command line: the restored FileSink completes the old file as the checkpoint left it and
writes the rest to the new one, so the two together are byte for byte an uninterrupted run.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GRAPH = ROOT / "tests" / "graphs" / "crash_graph.py"


def start(input_csv: Path, out: Path, ckpt: Path | None, rate: int) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "riverbed", "run", str(GRAPH), "-p", f"input={input_csv}",
            "-p", f"out={out}", "-p", f"rate={rate}", "--no-status", "--log-format", "json"]
    if ckpt is not None:
        args += ["--checkpoint-dir", str(ckpt), "--checkpoint-period", "100ms"]
    return subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def test_a_restart_with_a_new_out_parameter_writes_the_new_file(tmp_path: Path) -> None:
    input_csv = tmp_path / "readings.csv"
    input_csv.write_text("".join(f"{i},{i % 13},{(i * 7919) % 1000}\n" for i in range(40_000)))
    reference = tmp_path / "reference.csv"
    proc = start(input_csv, reference, None, rate=10_000_000)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    expected = reference.read_bytes()

    out_a, out_b, ckpt = tmp_path / "out_a.csv", tmp_path / "out_b.csv", tmp_path / "ckpt"
    proc = start(input_csv, out_a, ckpt, rate=8_000)  # about 5 s for the whole input
    try:
        # Kill once a checkpoint made output visible: the job is then mid-run with a restore point.
        deadline = time.monotonic() + 60
        while not (out_a.exists() and out_a.stat().st_size > 0):
            assert proc.poll() is None, "the first run ended before a checkpoint was committed"
            assert time.monotonic() < deadline, "no checkpoint committed within 60 s"
            time.sleep(0.01)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    assert 0 < out_a.stat().st_size < len(expected)
    assert any(name.startswith(".out_a.csv.") for name in os.listdir(tmp_path))  # pending output
    assert stat.S_IMODE(ckpt.stat().st_mode) == 0o700

    proc = start(input_csv, out_b, ckpt, rate=10_000_000)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    logs = [json.loads(line) for line in err.decode().splitlines() if line.startswith("{")]
    finished = next(entry for entry in logs if entry["event"] == "job finished")
    assert isinstance(finished["restored_from"], int)
    changed = next(entry for entry in logs if entry["event"] == "output file changed since the checkpoint")
    assert (changed["operator"], changed["checkpoint_file"], changed["file"]) == (
        "write", str(out_a), str(out_b))
    # Before: out_a.csv was finished and out_b.csv never created.
    assert out_b.exists(), "the restarted job ignored its new out parameter"
    assert out_a.read_bytes() + out_b.read_bytes() == expected  # nothing lost, nothing twice
    assert sorted(name for name in os.listdir(tmp_path) if name.startswith(".")) == []
