"""Checkpoint time and size of a big partitioned window through `RocksDBStore`.

Usage::

    python bench/checkpoint.py [--n N] [--partitions P] [--repeat R] [--layout whole|split|both]

A ``tumbling, count(2000), partitioned`` window is filled with N dict tuples
``{"sensor": i % P, "value": float, "ts": int}`` (``insert_batch``; with the
defaults every partition holds 1000 tuples, none fires). Then, best of R
runs, each into a fresh temporary directory:

  snapshot  ``window.checkpoint()``: the state as plain data
  save      ``RocksDBStore.save``: msgpack encoding, checksums, one synced WriteBatch
  size      the directory right after the save (write-ahead log) and after close (flushed, compressed)
  load      reopen, ``store.load``: read, verify, decode
  restore   ``window.reset(state)`` on a fresh window (and putting the split state back together)

Two layouts of the same snapshot:

  whole     the snapshot as ONE state value (``"op/window/0"``)
  split     the window header under ``"op/window/0"`` and each partition under
            ``"op/window/0/p/<index>"``: P values of ~N/P tuples each

Every run checks, untimed, that the restored window is the saved one (every
partition's tuples, in order, and the whole snapshot) before its figures count;
a difference exits with status 1.

The target is under 1 s for save and for load + restore at the defaults.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from riverbed.checkpoint import RocksDBStore
from riverbed.windows import StreamWindow

CLAUSE = "tumbling, count(2000), partitioned"
KEY = "op/window/0"
SEED = 20240601
T0_NS = 1_700_000_000_000_000_000

perf_counter = time.perf_counter


def build_window(n: int, partitions: int) -> StreamWindow[dict[str, Any]]:
    rnd = random.Random(SEED)
    window: StreamWindow[dict[str, Any]] = StreamWindow(CLAUSE, partition_by="sensor")
    window.insert_batch([{"sensor": i % partitions, "value": rnd.uniform(-50.0, 50.0), "ts": T0_NS + i}
                         for i in range(n)])
    return window


def split(snapshot: dict[str, Any]) -> dict[str, Any]:
    """One state for the window header (with the partition count) and one per partition, in order."""
    parts = snapshot["partitions"]
    header = {**snapshot, "partitions": len(parts)}
    return {KEY: header, **{f"{KEY}/p/{i:06d}": part for i, part in enumerate(parts)}}


def join(states: dict[str, Any]) -> dict[str, Any]:
    header = states[KEY]
    return {**header, "partitions": [states[f"{KEY}/p/{i:06d}"] for i in range(header["partitions"])]}


class Mismatch(Exception):
    """The restored window is not the window that was saved."""


def check_restored(saved: StreamWindow[dict[str, Any]], restored: StreamWindow[dict[str, Any]]) -> None:
    """Every partition, in the same order, with the same tuples, and the same state (not timed)."""
    parts = saved.partitions()
    if restored.partitions() != parts:
        raise Mismatch(f"the restored window has {len(restored.partitions())} partitions, the saved "
                       f"one {len(parts)} (or another order)")
    for p in parts:
        if restored.contents(p) != saved.contents(p):
            raise Mismatch(f"partition {p!r}: the restored tuples differ from the saved ones")
    if restored.snapshot() != saved.snapshot():
        raise Mismatch("the restored window's snapshot differs from the saved window's")


def dir_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.iterdir() if f.is_file())


def run_once(window: StreamWindow[dict[str, Any]], layout: str, root: Path) -> dict[str, float]:
    t0 = perf_counter()
    snapshot = window.checkpoint()
    t1 = perf_counter()
    states = split(snapshot) if layout == "split" else {KEY: snapshot}
    store = RocksDBStore(root / "ckpt")
    t2 = perf_counter()
    store.save(1, states, job="bench", time_ns=T0_NS)
    t3 = perf_counter()
    wal_bytes = dir_size(root / "ckpt")
    sizes = store.list()[0]
    store.close()
    t4 = perf_counter()
    del states, snapshot
    flushed_bytes = dir_size(root / "ckpt")

    t5 = perf_counter()
    store = RocksDBStore(root / "ckpt")
    t6 = perf_counter()
    loaded = store.load(1)
    t7 = perf_counter()
    state = join(loaded.states) if layout == "split" else loaded.states[KEY]
    fresh: StreamWindow[dict[str, Any]] = StreamWindow(CLAUSE, partition_by="sensor")
    fresh.reset(state)
    t8 = perf_counter()
    store.close()
    check_restored(window, fresh)
    return {"snapshot": t1 - t0, "save": t3 - t2, "close+flush": t4 - t3, "open": t6 - t5,
            "load": t7 - t6, "restore": t8 - t7, "load+restore": t8 - t6,
            "record bytes": sizes.total_bytes, "WAL bytes": wal_bytes, "flushed bytes": flushed_bytes}


def report(layout: str, runs: list[dict[str, float]]) -> None:
    print(f"\n{layout} layout ({len(runs)} runs; best / median)")
    for name in runs[0]:
        values = [r[name] for r in runs]
        if name.endswith("bytes"):
            print(f"  {name:<14} {values[0] / 1e6:8.1f} MB")
        else:
            print(f"  {name:<14} {min(values) * 1e3:8.0f} ms / {statistics.median(values) * 1e3:6.0f} ms")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--layout", choices=["whole", "split", "both"], default="both")
    args = parser.parse_args(argv)
    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs; "
          f"{args.n:,} tuples in {args.partitions:,} partitions of '{CLAUSE}'")
    t0 = perf_counter()
    window = build_window(args.n, args.partitions)
    print(f"window filled in {perf_counter() - t0:.2f} s")
    layouts = ["whole", "split"] if args.layout == "both" else [args.layout]
    for layout in layouts:
        runs = []
        for _ in range(args.repeat):
            gc.collect()
            with tempfile.TemporaryDirectory(prefix="riverbed-ckpt-bench-") as tmp:
                try:
                    runs.append(run_once(window, layout, Path(tmp)))
                except Mismatch as exc:
                    print(f"MISMATCH, no figures printed: {layout} layout: {exc}", file=sys.stderr)
                    return 1
        report(layout, runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
