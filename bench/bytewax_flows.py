"""The workloads as Bytewax dataflows; run by ``bench/runtime.py`` with bench/.venv-bytewax's Python.

Usage (prints one JSON object on stdout)::

    bench/.venv-bytewax/bin/python bench/bytewax_flows.py --n N --seed S --w4-n M [--only W1,W2]
        [--repeat R]

Each flow runs single-threaded in this process (`bytewax.testing.run_main`,
one worker, like riverbed's one asyncio loop), reading the same readings
as riverbed (`workloads.make_readings`) from a `TestingSource` in batches of
1000 (riverbed's default batch), and feeding a sink that builds the same
`workloads.Digest`. Time is measured around ``run_main`` only.

How each workload is written, idiomatically for Bytewax 0.21, with its own
operators (``collect``, ``fold_window``, ``stateful_map``):

* W1: Bytewax has no count windows; ``collect`` per sensor with
  ``max_size=100`` (and a timeout of a day, which never fires) gathers each
  sensor's lists of 100; EOF flushes the incomplete lists, which are dropped
  (as in the other engines).
* W2/W3: ``fold_window`` with an `EventClock` (readings' ``ts`` as UTC
  datetimes) and a `TumblingWindower` / `SlidingWindower` aligned to the
  epoch, folding (count, sum) left to right (the same sum as the others),
  then the record. EOF closes every window, like riverbed's maximum watermark before final.
  ``wait_for_system_duration`` is 60 s: Bytewax's watermark also moves with
  the *system* clock, so with 1 s a stall of the process (a loaded machine)
  between two batches made readings with the newest ms late and dropped
  them: one run out of three of W3 gave other results (caught by
  ``bench/runtime.py``'s check of every run). The readings are in
  event-time order, so apart from that the results do not depend on it; it
  keeps panes open 60 s of event time longer (about a dozen of them). ``to_system_utc``
  returns None: the timestamps are historical (2023), so the default would
  ask the runtime to wake every key with an open window on every activation.
* W4/W4inc/W4hand: one key for the whole stream and ``stateful_map`` over a deque.
* chain: ``filter``, ``map``, ``map``.

Bytewax keys must be strings: partitioned flows key on ``str(sensor)``.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import bytewax.operators as op
import bytewax.operators.windowing as win
from bytewax.dataflow import Dataflow
from bytewax.outputs import DynamicSink, StatelessSinkPartition
from bytewax.testing import TestingSource, run_main
from workloads import (
    CHAIN_MIN,
    HOT_F,
    PANE_MS,
    SLIDE_MS,
    W1_COUNT,
    W4_COUNT,
    WORKLOADS,
    Digest,
    Reading,
    make_readings,
    w1_record,
    w4_record,
)

BATCH = 1000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class _DigestPartition(StatelessSinkPartition[Any]):  # type: ignore[misc]  # Any here: bytewax is not installed
    def __init__(self, digest: Digest) -> None:
        self.digest = digest

    def write_batch(self, items: list[Any]) -> None:
        add = self.digest.add
        for _key, rec in items:
            add(rec)


class _PlainDigestPartition(_DigestPartition):
    def write_batch(self, items: list[Any]) -> None:
        add = self.digest.add
        for rec in items:
            add(rec)


class DigestSink(DynamicSink[Any]):  # type: ignore[misc]
    """Keyed (key, record) items (or, ``keyed=False``, records) into a `Digest` (one worker: one
    partition)."""

    def __init__(self, digest: Digest, keyed: bool = True) -> None:
        self.digest = digest
        self.keyed = keyed

    def build(self, step_id: str, worker_index: int, worker_count: int) -> _DigestPartition:
        return _DigestPartition(self.digest) if self.keyed else _PlainDigestPartition(self.digest)


def _source(name: str, readings: list[Reading]) -> tuple[Dataflow, Any]:
    flow = Dataflow(name)
    return flow, op.input("readings", flow, TestingSource(readings, batch_size=BATCH))


def _by_sensor(stream: Any) -> Any:
    return op.key_on("by_sensor", stream, lambda r: str(r["sensor"]))


def flow_w1(readings: list[Reading], digest: Digest) -> Dataflow:
    flow, s = _source("w1", readings)
    lists = op.collect("tumble", _by_sensor(s), timeout=timedelta(days=1), max_size=W1_COUNT)

    def record(item: tuple[str, list[Reading]]) -> tuple[str, Any] | None:
        key, rs = item
        return (key, w1_record(rs)) if len(rs) == W1_COUNT else None  # EOF flushes the rest

    op.output("sink", op.filter_map("agg", lists, record), DigestSink(digest))
    return flow


def _ts(r: Reading) -> datetime:
    return EPOCH + timedelta(milliseconds=r["ts"])


def _no_wakeup(_close: datetime) -> None:
    return None


def _pane_flow(name: str, readings: list[Reading], digest: Digest, windower: Any, period_ms: int
               ) -> Dataflow:
    flow, s = _source(name, readings)
    clock = win.EventClock(_ts, wait_for_system_duration=timedelta(seconds=60),
                           to_system_utc=_no_wakeup)
    panes = win.fold_window("panes", _by_sensor(s), clock, windower, _empty_pane, _fold, _merge)

    def aggregate(item: tuple[str, tuple[int, list[Any]]]) -> tuple[str, Any]:
        key, (window_id, (count, total)) = item
        return key, {"sensor": int(key), "start": window_id * period_ms, "count": count,
                     "avg": total / count}

    op.output("sink", op.map("agg", panes.down, aggregate), DigestSink(digest))
    return flow


def _empty_pane() -> list[Any]:
    return [0, 0.0]


def _fold(acc: list[Any], r: Reading) -> list[Any]:
    acc[0] += 1
    acc[1] += r["value"]
    return acc


def _merge(a: list[Any], b: list[Any]) -> list[Any]:
    return [a[0] + b[0], a[1] + b[1]]


def flow_w2(readings: list[Reading], digest: Digest) -> Dataflow:
    windower = win.TumblingWindower(length=timedelta(milliseconds=PANE_MS), align_to=EPOCH)
    return _pane_flow("w2", readings, digest, windower, PANE_MS)


def flow_w3(readings: list[Reading], digest: Digest) -> Dataflow:
    windower = win.SlidingWindower(length=timedelta(milliseconds=PANE_MS),
                                   offset=timedelta(milliseconds=SLIDE_MS), align_to=EPOCH)
    return _pane_flow("w3", readings, digest, windower, SLIDE_MS)


def flow_w4(readings: list[Reading], digest: Digest) -> Dataflow:
    flow, s = _source("w4", readings)

    def slide(state: deque[Reading] | None, r: Reading) -> tuple[deque[Reading], Any]:
        if state is None:
            state = deque(maxlen=W4_COUNT)
        state.append(r)
        return state, w4_record(state)

    out = op.stateful_map("slide", op.key_on("all", s, lambda _r: "all"), slide)
    op.output("sink", out, DigestSink(digest))
    return flow


def flow_w4inc(readings: list[Reading], digest: Digest) -> Dataflow:
    flow, s = _source("w4inc", readings)

    def slide(state: list[Any] | None, r: Reading) -> tuple[list[Any], Any]:
        if state is None:
            state = [deque(), 0.0]
        window, total = state
        if len(window) == W4_COUNT:
            total -= window.popleft()
        v = r["value"]
        total += v
        window.append(v)
        state[1] = total
        return state, {"ts": r["ts"], "avg": total / len(window)}

    out = op.stateful_map("slide", op.key_on("all", s, lambda _r: "all"), slide)
    op.output("sink", out, DigestSink(digest))
    return flow


def flow_chain(readings: list[Reading], digest: Digest) -> Dataflow:
    flow, s = _source("chain", readings)
    kept = op.filter("filter", s, lambda r: r["value"] >= CHAIN_MIN)
    with_f = op.map("fahrenheit", kept, lambda r: {**r, "f": r["value"] * 1.8 + 32.0})
    out = op.map("hot", with_f, lambda r: {**r, "hot": r["f"] >= HOT_F})
    op.output("sink", out, DigestSink(digest, keyed=False))
    return flow


FLOWS: dict[str, Callable[[list[Reading], Digest], Dataflow]] = {
    "W1": flow_w1, "W2": flow_w2, "W3": flow_w3, "W4": flow_w4, "W4inc": flow_w4inc,
    "W4hand": flow_w4inc,
    "chain": flow_chain,
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--w4-n", type=int, required=True, help="readings for W4 (sum per trigger)")
    ap.add_argument("--only", default=",".join(WORKLOADS))
    ap.add_argument("--repeat", type=int, default=1, help="runs per workload, best time kept")
    args = ap.parse_args(argv)
    from importlib.metadata import version

    readings = make_readings(args.n, args.seed)
    gc.collect()
    gc.freeze()  # the input list is not garbage: keep the collector from rescanning it
    results: dict[str, Any] = {"version": version("bytewax"), "python": sys.version.split()[0],
                               "workloads": {}}
    for name in args.only.split(","):
        data = readings[:args.w4_n] if name == "W4" else readings
        elapsed = cpu = float("inf")
        runs: list[dict[str, Any]] = []  # every timed run's digest: the caller checks each
        for _ in range(args.repeat):
            digest = Digest(name)
            flow = FLOWS[name](data, digest)
            w0, c0 = time.perf_counter(), time.process_time()
            run_main(flow)
            elapsed = min(elapsed, time.perf_counter() - w0)
            cpu = min(cpu, time.process_time() - c0)
            runs.append(digest.summary())
        results["workloads"][name] = {"n": len(data), "seconds": elapsed, "cpu_seconds": cpu,
                                      **runs[-1], "runs": runs}
        print(f"bytewax {name}: {len(data) / elapsed:,.0f} tuples/s", file=sys.stderr, flush=True)
    json.dump(results, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
