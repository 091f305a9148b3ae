"""Checkpointing jobs when storage fails: a full disk stops the job with a clear error and the
last good checkpoint intact; a damaged newest checkpoint is skipped, logged, and the job resumes
from the one before; with no good checkpoint at all the job starts from its initial state."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from riverbed.checkpoint import RocksDBStore, StoreIOError
from riverbed.checkpoint._layout import state_key
from riverbed.graph import Graph, Operator, Source
from riverbed.run import checkpoints_command
from riverbed.runtime import Job, JobError, VirtualClock, run_virtual

ROOT = Path(__file__).resolve().parent.parent
S = 1_000_000_000


class Ticks(Source):
    replayable = True

    def __init__(self, n: int) -> None:
        self.n, self.i = n, 0

    async def run(self) -> None:
        ctx: Any = self.context
        while self.i < self.n:
            await ctx.sleep_until((self.i + 1) * S // 10)
            self.submit({"i": self.i})
            self.i += 1

    def snapshot(self) -> Any:
        return self.i

    def restore(self, state: Any) -> None:
        self.i = state


class Count(Operator):
    def __init__(self) -> None:
        self.seen = 0

    def on_tuple(self, tup: Any, port: int) -> None:
        self.seen += 1

    def snapshot(self) -> Any:
        return self.seen

    def restore(self, state: Any) -> None:
        self.seen = state


def _graph(n: int = 100) -> tuple[Graph, Count]:
    g = Graph("disk")
    count = Count()
    g.sink("count", count, [g.source("ticks", Ticks(n))])
    return g, count


class FullDiskAfter:
    """A store whose disk fills up after ``ok`` saves (rocksdict raises its bare Exception)."""

    def __init__(self, store: RocksDBStore, ok: int) -> None:
        self.store, self.ok = store, ok

    def save(self, checkpoint_id: int, states: Mapping[str, Any], *, job: str, time_ns: int) -> None:
        if self.ok == 0:
            real = self.store._db

            class Full:
                def write(self, *args: Any) -> None:
                    raise Exception("IO error: No space left on device: While appending to file: "
                                    "/x/000009.log: No space left on device")

                def __getattr__(self, name: str) -> Any:
                    return getattr(real, name)

            self.store._db = Full()  # type: ignore[assignment]
            try:
                self.store.save(checkpoint_id, states, job=job, time_ns=time_ns)
            finally:
                self.store._db = real
        self.ok -= 1
        self.store.save(checkpoint_id, states, job=job, time_ns=time_ns)

    def latest_good(self) -> Any:
        return self.store.latest_good()

    def newest_id(self) -> int | None:
        return self.store.newest_id()


def test_a_full_disk_stops_the_job_with_a_clear_error_and_keeps_the_last_good(tmp_path: Path) -> None:
    store = RocksDBStore(tmp_path / "ckpt")
    g, _ = _graph()
    job = Job(g, clock=VirtualClock(), checkpoints=FullDiskAfter(store, 2), checkpoint_period=1.0)
    with pytest.raises(JobError, match=r"the disk is full.*the checkpoints saved before are intact") as info:
        run_virtual(job.run(), job.clock)  # type: ignore[arg-type]
    assert any(isinstance(e, StoreIOError) for e in info.value.errors)
    latest = store.latest_good()
    assert latest is not None and latest.id == 2
    assert latest.states["ticks"]["operator"] == latest.states["count"]["operator"] > 0
    store.close()


def test_with_no_good_checkpoint_the_job_starts_from_its_initial_state(tmp_path: Path) -> None:
    with RocksDBStore(tmp_path / "ckpt") as store:
        g, _ = _graph(20)
        job = Job(g, clock=VirtualClock(), checkpoints=store, checkpoint_period=0.5)
        run_virtual(job.run(), job.clock)  # type: ignore[arg-type]
        ids = [info.id for info in store.list()]
        for cid in ids:  # damage every checkpoint
            key = state_key(cid, "count")
            raw = bytearray(store._db[key])
            raw[len(raw) // 2] ^= 0xFF
            store._db[key] = bytes(raw)
        skipped: list[int] = []
        assert store.latest_good(on_skip=lambda cid, err: skipped.append(cid)) is None
        assert sorted(skipped) == sorted(ids)
    said: list[str] = []  # what `riverbed checkpoints list` tells a script checking the store
    assert checkpoints_command("list", str(tmp_path / "ckpt"), None, echo=said.append) == 1
    assert said[-1].endswith("no good checkpoint: a job restarted on it starts from its initial "
                             "state (riverbed checkpoints repair may recover some)")
    with RocksDBStore(tmp_path / "ckpt") as store:
        g, count = _graph(20)
        again = Job(g, clock=VirtualClock(), checkpoints=store)
        run_virtual(again.run(), again.clock)  # type: ignore[arg-type]
        assert again.restored_from is None and count.seen == 20


def test_a_damaged_newest_checkpoint_is_logged_and_the_previous_one_restored(tmp_path: Path) -> None:
    ckpt, out = tmp_path / "ckpt", tmp_path / "alerts.jsonl"
    args = [sys.executable, "-m", "riverbed", "run", "examples/sensors.py", "-p", "seconds=1",
            "-p", "sensors=20", "-p", f"out={out}", "--checkpoint-dir", str(ckpt),
            "--checkpoint-period", "200ms", "--no-status", "--log-format", "json"]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    first = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert first.returncode == 0, first.stderr
    with RocksDBStore(ckpt) as store:
        newest, previous = [info.id for info in store.list()][-1], [info.id for info in store.list()][-2]
        key = state_key(newest, "average")
        raw = bytearray(store._db[key])
        raw[len(raw) // 2] ^= 0xFF
        store._db[key] = bytes(raw)
    # The restart must take a checkpoint of its own: the readings it owes (stamped on the first
    # run's schedule, in the past now) come at once, so it runs on for 2 s more, and with a
    # shorter period, even on a loaded machine.
    again = [{"200ms": "50ms", "seconds=1": "seconds=3"}.get(a, a) for a in args]
    second = subprocess.run(again, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
                            check=False)
    assert second.returncode == 0, second.stderr
    logs = [json.loads(line) for line in second.stderr.splitlines() if line.startswith("{")]
    skipped = [e for e in logs if e["event"] == "checkpoint skipped"]
    assert skipped and skipped[0]["checkpoint"] == newest
    assert "falling back" in skipped[0]["action"] and str(newest) in skipped[0]["reason"]
    finished = next(e for e in logs if e["event"] == "job finished")
    assert finished["restored_from"] == previous
    assert finished["last_checkpoint"] > newest  # numbering goes on above the damaged one
