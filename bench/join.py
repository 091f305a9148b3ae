"""Throughput of the SPL Join through riverbed's runtime, against a hand-written loop.

Usage::

    .venv/bin/python bench/join.py [--n N] [--sensors S] [--window W] [--repeat R] [--profile]

Workload: two sensor streams, temperature ``{sensor, temp, ts}`` on the left and
humidity ``{sensor, hum, ts}`` on the right, N readings each from S sensors
picked at random (seeded). ``Join(equality_lhs="sensor", equality_rhs="sensor")``
with ``sliding, count(W)`` windows on both ports (W = 1000 by default): each
reading is matched with the other stream's last W readings of the same sensor,
and the pair goes out as the merged tuple; a window mark follows every reading
that matched. The graph is ``left, right -> join -> sink``, run by
``riverbed.runtime.run_graph`` on the real clock.

The loop does the same join in plain Python (a deque per window, a dict of
deques per side keyed by sensor, the same merged output and marks) and no
runtime. Both feed one digest (output count, marks, an exact float sum).

Two sources feed the join, and the order in which their batches reach it is the
scheduler's business; the result depends on that order. So one untimed run first
records the order the join saw (per tuple: left or right), the loop replays it,
and every timed run, of riverbed and of the loop, must produce that run's digest
(a different order would show) before any ratio is printed; a difference exits
with status 1. (The order is the same from run to run: the runtime schedules
its tasks deterministically, and no timer is involved.)

Printed: input tuples/s of each, and the ratio loop rate / riverbed rate (how
many times slower riverbed is than the loop), by wall-clock and CPU time.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import random
import time
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

from riverbed.graph import Graph, Operator, Punct, Source
from riverbed.operators import Join
from riverbed.runtime import run_graph
from riverbed.windows import EventType

SEED = 20250611


def make_streams(n: int, sensors: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rng = random.Random(SEED)
    left = [{"sensor": rng.randrange(sensors), "temp": round(rng.uniform(-10, 40), 2), "ts": i}
            for i in range(n)]
    right = [{"sensor": rng.randrange(sensors), "hum": round(rng.uniform(0, 100), 1), "ts": i}
             for i in range(n)]
    return left, right


class Digest:
    """Output count, window marks and an exact sum over the outputs."""

    def __init__(self) -> None:
        self.count = 0
        self.marks = 0
        self.total = 0.0

    def add(self, tup: dict[str, Any]) -> None:
        self.count += 1
        self.total += tup["temp"] * tup["hum"]

    def summary(self) -> tuple[int, int, float]:
        return self.count, self.marks, self.total


class Readings(Source):
    def __init__(self, rows: Sequence[dict[str, Any]]) -> None:
        self.rows = rows

    def generate(self) -> Iterable[Any]:
        return iter(self.rows)


class DigestSink(Operator):
    def __init__(self, digest: Digest) -> None:
        self.digest = digest

    def on_tuple(self, tup: Any, port: int) -> None:
        self.digest.add(tup)

    def on_punct(self, punct: Punct, port: int) -> None:
        if punct is Punct.WINDOW:
            self.digest.marks += 1


class RecordingJoin(Join):
    """The same join, noting which port each arrival came from (for the untimed run only)."""

    def __init__(self, order: list[int], **kw: Any) -> None:
        super().__init__(**kw)
        self.order = order

    def setup(self) -> None:
        super().setup()
        for port in (0, 1):
            window: Any = self.context.window(port)
            window.register_listener(lambda event, port=port: self.order.append(port),
                                     (EventType.INSERTION,))


def graph(left: Sequence[dict[str, Any]], right: Sequence[dict[str, Any]], window: int, digest: Digest,
          order: list[int] | None = None) -> Graph:
    g = Graph("joinbench")
    a = g.source("temperature", Readings(left))
    b = g.source("humidity", Readings(right))
    params: dict[str, Any] = {"equality_lhs": "sensor", "equality_rhs": "sensor"}
    op = Join(**params) if order is None else RecordingJoin(order, **params)
    clause = f"sliding, count({window})"
    joined = g.operator("join", op, [a.window(clause), b.window(clause)])
    g.sink("sink", DigestSink(digest), [joined])
    return g


def hand_written(left: Sequence[dict[str, Any]], right: Sequence[dict[str, Any]], order: Sequence[int],
                 window: int, digest: Digest) -> None:
    """The join as one would write it for this one case: no runtime, no windows library."""
    streams = (iter(left), iter(right))
    windows: tuple[deque[dict[str, Any]], deque[dict[str, Any]]] = (deque(), deque())
    indexes: tuple[dict[Any, deque[dict[str, Any]]], dict[Any, deque[dict[str, Any]]]] = ({}, {})
    add = digest.add
    for port in order:
        t = next(streams[port])
        own, mine, other = windows[port], indexes[port], indexes[1 - port]
        key = t["sensor"]
        matches = other.get(key)
        if matches:
            for u in matches:
                add({**u, **t} if port == 0 else {**t, **u})
            digest.marks += 1
        if len(own) == window:
            old = own.popleft()
            evicted_from = mine[old["sensor"]]
            evicted_from.popleft()
            if not evicted_from:
                del mine[old["sensor"]]
        own.append(t)
        bucket = mine.get(key)
        if bucket is None:
            mine[key] = deque((t,))
        else:
            bucket.append(t)


def best_of(repeat: int, variants: dict[str, Any], expected: Any) -> dict[str, tuple[float, float]]:
    """Best wall and CPU time of each variant over ``repeat`` rounds; a round runs every variant
    once, in turn, so that a change in the machine's load between rounds (other jobs share
    it) reaches all of them alike instead of skewing their ratio. Each run's result must be
    ``expected`` (else the script exits with status 1 before printing any ratio)."""
    best = {name: (float("inf"), float("inf")) for name in variants}
    for run in range(1, repeat + 1):
        for name, fn in variants.items():
            gc.collect()
            w0, c0 = time.perf_counter(), time.process_time()
            result = fn()
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            best[name] = (min(best[name][0], wall), min(best[name][1], cpu))
            if result != expected:
                raise SystemExit(f"MISMATCH, no ratio printed: timed {name} run {run} gave {result}, "
                                 f"the recorded run {expected}")
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=200_000, help="readings per stream (default 200000)")
    parser.add_argument("--sensors", type=int, default=1000, help="distinct sensors (default 1000)")
    parser.add_argument("--window", type=int, default=1000, help="count(W) of both windows")
    parser.add_argument("--repeat", type=int, default=3,
                        help="rounds (each runs riverbed, then the loop); the best of each counts")
    parser.add_argument("--profile", action="store_true", help="cProfile one riverbed run instead")
    args = parser.parse_args()
    left, right = make_streams(args.n, args.sensors)
    inputs = 2 * args.n

    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        run_graph(graph(left, right, args.window, Digest()))
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(20)
        return

    order: list[int] = []
    expected = Digest()
    run_graph(graph(left, right, args.window, expected, order))
    assert len(order) == inputs

    def riverbed() -> tuple[int, int, float]:
        digest = Digest()
        run_graph(graph(left, right, args.window, digest))
        return digest.summary()

    def loop() -> tuple[int, int, float]:
        digest = Digest()
        hand_written(left, right, order, args.window, digest)
        return digest.summary()

    want = expected.summary()
    if loop() != want:
        raise SystemExit(f"MISMATCH: the loop replaying the recorded order gives {loop()}, "
                         f"riverbed gave {want}")
    best = best_of(args.repeat, {"riverbed": riverbed, "loop": loop}, want)
    (r_wall, r_cpu), (l_wall, l_cpu) = best["riverbed"], best["loop"]
    print(f"Join: equality on sensor, sliding count({args.window}) on both ports, "
          f"{args.n} readings per stream from {args.sensors} sensors")
    print(f"outputs {expected.count}, window marks {expected.marks}; every timed run agreed")
    print(f"{'':10} {'tuples/s (wall)':>16} {'tuples/s (cpu)':>16}")
    print(f"{'riverbed':10} {inputs / r_wall:16,.0f} {inputs / r_cpu:16,.0f}")
    print(f"{'loop':10} {inputs / l_wall:16,.0f} {inputs / l_cpu:16,.0f}")
    print(f"ratio loop/riverbed: {r_wall / l_wall:.2f}x (wall), {r_cpu / l_cpu:.2f}x (cpu)")


if __name__ == "__main__":
    main()
