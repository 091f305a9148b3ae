"""Throughput of riverbed's `TimeIntervalWindow` against a hand-written pane loop.

Usage::

    python bench/time_interval.py [--n N] [--repeat R]

The workload of issue 3: 1000 sensors, panes of 10 s created every 5 s
(``timeInterval, intervalDuration(10), creationPeriod(5), discardAge(2),
partitioned``), 2 M tuples by default. Event time advances 1 ms per tuple
with up to 3 s of random disorder; every 1000 tuples the watermark moves to
the highest event time seen minus a 1 s lag, so some tuples are late (they
re-trigger their pane) and some are too late (dropped).

Measured, best of R runs on a fresh window each:

  (a) ``insert`` per tuple, ``watermark`` every 1000 tuples
  (b) ``insert_batch`` of 1000 tuples, then ``watermark``
  (c) a hand-written loop: dict of panes, dict of partitions, list append,
      the same completion, late re-trigger, close and drop rules

Riverbed's listener and the loop's callback do the same work: on each
TRIGGER they add the number of tuples in the pane partition to a total, and
the totals are checked to be equal. Both print tuples/s; riverbed's rows
say how many times slower than the loop it is.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
from collections.abc import Callable
from typing import Any

from riverbed.windows import EventType, StreamWindowEvent, TimeIntervalWindow

CLAUSE = "timeInterval, intervalDuration(10), creationPeriod(5), discardAge(2), partitioned"
SENSORS = 1000
BATCH = 1000
S = 1_000_000_000
TICK = 1_000_000  # 1 ms of event time per tuple
DISORDER = 3 * S
LAG = 1 * S
D, P, A = 10 * S, 5 * S, 2 * S

Tuple = dict[str, Any]


def make_stream(n: int, seed: int = 20261122) -> tuple[list[list[Tuple]], list[int]]:
    """Batches of tuples (``ts`` = event time in ns) and the watermark after each batch."""
    rng = random.Random(seed)
    batches: list[list[Tuple]] = []
    watermarks: list[int] = []
    high = 0
    batch: list[Tuple] = []
    for i in range(n):
        ts = 100 * S + i * TICK - rng.randrange(DISORDER)
        high = max(high, ts)
        batch.append({"sensor": rng.randrange(SENSORS), "value": i * 0.5, "ts": ts})
        if len(batch) == BATCH:
            batches.append(batch)
            watermarks.append(high - LAG)
            batch = []
    if batch:
        batches.append(batch)
        watermarks.append(high - LAG)
    return batches, watermarks


class Total:
    """The consumer both sides feed: the number of tuples seen by triggers."""

    def __init__(self) -> None:
        self.tuples = 0

    def on_trigger(self, event: StreamWindowEvent[Tuple]) -> None:
        self.tuples += len(event.tuples)


def rb_insert(batches: list[list[Tuple]], watermarks: list[int]) -> int:
    total = Total()
    w: TimeIntervalWindow[Tuple] = TimeIntervalWindow(CLAUSE, event_time="ts", partition_by="sensor")
    w.register_listener(total.on_trigger, (EventType.TRIGGER,))
    insert, watermark = w.insert, w.watermark
    for batch, wm in zip(batches, watermarks, strict=True):
        for tup in batch:
            insert(tup)
        watermark(wm)
    w.watermark(2**63 - 1)
    return total.tuples


def rb_batch(batches: list[list[Tuple]], watermarks: list[int]) -> int:
    total = Total()
    w: TimeIntervalWindow[Tuple] = TimeIntervalWindow(CLAUSE, event_time="ts", partition_by="sensor")
    w.register_listener(total.on_trigger, (EventType.TRIGGER,))
    insert_batch, watermark = w.insert_batch, w.watermark
    for batch, wm in zip(batches, watermarks, strict=True):
        insert_batch(batch)
        watermark(wm)
    w.watermark(2**63 - 1)
    return total.tuples


def loop(batches: list[list[Tuple]], watermarks: list[int]) -> int:
    """The same pane rules, written directly: what a careful user would write by hand."""
    count = 0
    panes: dict[int, list[Any]] = {}  # start -> [parts, updated, complete]
    drop = -1
    last_wm = -1

    def advance(wm: int) -> None:
        nonlocal count
        for start in sorted(panes):
            if start + D > wm:
                break
            pane = panes[start]
            pane[2] = True
            if pane[1]:
                parts = pane[0]
                for key in pane[1]:
                    count += len(parts[key])
                pane[1] = {}
            if wm - (start + D) >= A:
                del panes[start]

    for batch, wm in zip(batches, watermarks, strict=True):
        for tup in batch:
            t = tup["ts"]
            if t < drop:
                continue
            key = tup["sensor"]
            s = t - t % P
            low = t - D
            while s > low:
                pane = panes.get(s)
                if pane is None:
                    pane = panes[s] = [{}, {}, False]
                lst = pane[0].get(key)
                if lst is None:
                    pane[0][key] = [tup]
                else:
                    lst.append(tup)
                pane[1][key] = None
                s -= P
        if wm > last_wm:
            last_wm = wm
            drop = wm - A
            advance(wm)
    advance(2**63 - 1)
    return count


def best_of(repeat: int, run: Callable[[], int]) -> tuple[float, int]:
    best, result = float("inf"), 0
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - start)
    return best, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--n", type=int, default=2_000_000, help="tuples (default 2 000 000)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement, best kept")
    args = parser.parse_args(argv)
    batches, watermarks = make_stream(args.n)
    print(f"timeInterval workload: {CLAUSE}")
    print(f"{args.n} tuples, {SENSORS} sensors, watermark every {BATCH} tuples, best of {args.repeat}")
    t_loop, c_loop = best_of(args.repeat, lambda: loop(batches, watermarks))
    rows = [("hand-written loop", t_loop, c_loop)]
    for name, fn in (("riverbed insert", rb_insert), ("riverbed insert_batch", rb_batch)):
        t, c = best_of(args.repeat, lambda fn=fn: fn(batches, watermarks))  # type: ignore[misc]
        if c != c_loop:
            print(f"MISMATCH: {name} counted {c} triggered tuples, the loop {c_loop}", file=sys.stderr)
            return 1
        rows.append((name, t, c))
    for name, t, _ in rows:
        ratio = "" if name.startswith("hand") else f"  {t / t_loop:5.2f}x the loop"
        print(f"  {name:<24} {args.n / t / 1e6:6.2f} M tuples/s{ratio}")
    print(f"  (tuples seen by triggers: {c_loop})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
