"""The four workloads of ``bench/runtime.py``: their data, result digests and hand-written loops.

Standard library only: the Bytewax subprocess (``bench/bytewax_flows.py``,
run by another virtualenv's Python) imports this module too, so that the
three engines read the same readings and are checked with the same digest.

Readings are dicts ``{"sensor": int, "value": float, "ts": int}``: 1000
sensors picked at random, event time ``ts`` in ms growing by 0, 1 or 2 ms
per reading from `T0`, all drawn from one seeded generator.

Workloads (every variant emits dict records; a `Digest` sums them up):

* W1: per sensor, tumbling count(100) -> ``{sensor, end, sum, avg}``
  (``end`` = ts of the window's last reading). The readings of a sensor
  left in an incomplete window at the end of the stream are not reported,
  by any engine.
* W2: per sensor, event-time tumbling 10 s panes -> ``{sensor, start, count,
  avg}``, start in ms.
* W3: per sensor, event-time sliding 10 s panes every 5 s -> the same fields.
  Every pane is reported once, when complete; at the end of the stream every
  pane still open is reported (riverbed: the maximum watermark before final;
  Bytewax: EOF closes every window; the loop: a final flush), so the three
  report the same panes.
* W4: unpartitioned sliding count(1000), a result per reading -> ``{ts, avg}``
  over the last (up to) 1000 readings. ``W4`` sums the window on every
  trigger, as a straightforward user would; ``W4inc`` keeps a running sum
  (subtract the evicted value, then add the new one) and is labelled so.
  Issue 18's "W4" (4.8 M/s by hand) is ``W4inc``: the same records, computed
  the way a fast hand loop (and riverbed's Aggregate) computes them.
* W4hand: W4inc's records with no window at all: the running sum over a deque
  written by hand in the engine's stateful operator (riverbed ``Custom``,
  Bytewax ``stateful_map``), as issue 18 compares Bytewax's W4.
* chain: no window: keep readings with ``value >= 25``, add ``f`` (the value
  in Fahrenheit), then ``hot`` (``f >= 150``) -> ``{sensor, value, ts, f, hot}``
  (riverbed: source -> Filter -> Functor -> Functor -> sink).

Each aggregate sums the window's readings in arrival order, in every engine,
so results are bit-identical and the digests can be compared exactly.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

Reading = dict[str, Any]
Record = dict[str, Any]
Emit = Callable[[Record], None]

SENSORS = 1000
SEED = 20250611
T0 = 1_700_000_000_000  # event time of the first reading, ms since the epoch (a multiple of 10 s)
W1_COUNT = 100
PANE_MS = 10_000
SLIDE_MS = 5_000
W4_COUNT = 1000

CHAIN_MIN = 25.0
HOT_F = 150.0

WORKLOADS = ("W1", "W2", "W3", "W4", "W4inc", "W4hand", "chain")
DESCRIPTIONS = {
    "W1": "per-sensor tumbling count(100): sum, avg",
    "W2": "per-sensor event-time tumbling 10 s: count, avg",
    "W3": "per-sensor event-time sliding 10 s every 5 s: count, avg",
    "W4": "sliding count(1000) per tuple: avg, summing the window each time",
    "W4inc": "sliding count(1000) per tuple: avg, running sum (incremental)",
    "W4hand": "W4inc's records, the running sum written by hand (no window)",
    "chain": "stateless: Filter value >= 25, Functor f = value * 1.8 + 32, Functor hot = f >= 150",
}


def make_readings(n: int, seed: int = SEED) -> list[Reading]:
    """N readings, the same for a given seed in any process."""
    rng = random.Random(seed)
    randrange, rand = rng.randrange, rng.random
    ts = T0
    out: list[Reading] = []
    append = out.append
    for _ in range(n):
        ts += randrange(3)
        append({"sensor": randrange(SENSORS), "value": round(rand() * 100.0, 3), "ts": ts})
    return out


# ---------------------------------------------------------------- records
#
# The aggregate of one window, shared by every engine so they compute alike.


def w1_record(readings: Sequence[Reading]) -> Record:
    total = sum(r["value"] for r in readings)
    return {"sensor": readings[0]["sensor"], "end": readings[-1]["ts"], "sum": total,
            "avg": total / len(readings)}


def pane_record(sensor: int, start: int, readings: Sequence[Reading]) -> Record:
    n = len(readings)
    return {"sensor": sensor, "start": start, "count": n, "avg": sum(r["value"] for r in readings) / n}


def w4_record(readings: Sequence[Reading]) -> Record:
    return {"ts": readings[-1]["ts"], "avg": sum(r["value"] for r in readings) / len(readings)}


# ----------------------------------------------------------------- digests

_MASK = (1 << 61) - 1
_KEYS = {"W1": ("sensor", "end"), "W2": ("sensor", "start", "count"),
         "W3": ("sensor", "start", "count"), "W4": ("ts",), "W4inc": ("ts",),
         "W4hand": ("ts",), "chain": ("sensor", "ts", "hot")}
_FLOATS = {"W1": ("sum", "avg"), "W2": ("avg",), "W3": ("avg",), "W4": ("avg",), "W4inc": ("avg",),
           "W4hand": ("avg",), "chain": ("value", "f")}


@dataclass
class Digest:
    """An order-independent summary of a workload's records: count, key hash, exact float sum.

    Engines emit records in different orders; the integer fields are mixed
    into a sum modulo 2**61 and the float fields are summed with
    `math.fsum`, which is exact whatever the order.

    While an engine runs, `add` only keeps the record (one list append, what
    the cheapest real sink costs); `summary`, called after the clock stops,
    digests them. Digesting in `add` cost ~7,000 instructions a record, twice
    what the hand-written W4 loop spends on its own work, inside every
    engine's timed run: it made the engines' ratios to the loop look up to 2.5x
    smaller than they are on workloads with a record per reading.
    """

    workload: str
    records: int = 0
    key_sum: int = 0
    floats: list[float] = field(default_factory=list)
    kept: list[Record] = field(default_factory=list)

    def add(self, rec: Record) -> None:
        # A method, not ``kept.append`` bound at init: `copy.deepcopy` treats a bound builtin
        # method as atomic, so a copied digest (the Spark bridge copies its graph's sink) would
        # keep appending to the original's list.
        self.kept.append(rec)

    def _take(self) -> None:
        kept, self.kept = self.kept, []
        keys, floats = _KEYS[self.workload], _FLOATS[self.workload]
        key_sum = self.key_sum
        for rec in kept:
            h = 0
            for name in keys:
                h = (h * 1_000_003 + rec[name]) & _MASK
            key_sum = (key_sum + h * 2_654_435_761) & _MASK
            self.floats.extend(rec[name] for name in floats)
        self.key_sum = key_sum
        self.records += len(kept)

    def summary(self) -> dict[str, Any]:
        self._take()
        return {"records": self.records, "key_sum": self.key_sum, "float_sum": math.fsum(self.floats)}


def same_results(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two `Digest.summary` results agree: same records, same keys, same float total."""
    return (a["records"] == b["records"] and a["key_sum"] == b["key_sum"]
            and math.isclose(a["float_sum"], b["float_sum"], rel_tol=1e-12, abs_tol=1e-9))


# ------------------------------------------------------- hand-written loops
#
# What a Python programmer writes without a framework: dicts and lists, the
# same aggregate functions, results passed to ``emit``. Event-time panes
# close as soon as a reading at or after their end arrives (the readings are
# in event-time order), and the rest are flushed at the end.


def loop_w1(readings: Iterable[Reading], emit: Emit) -> None:
    windows: dict[int, list[Reading]] = {}
    for r in readings:
        k = r["sensor"]
        buf = windows.get(k)
        if buf is None:
            buf = windows[k] = []
        buf.append(r)
        if len(buf) == W1_COUNT:
            emit(w1_record(buf))
            windows[k] = []


def loop_panes(readings: Iterable[Reading], emit: Emit, duration: int, period: int) -> None:
    """Panes ``[N*period, N*period + duration)`` per sensor, closed when event time passes the end."""
    panes: dict[int, dict[int, list[Reading]]] = {}
    next_end: int | None = None  # the earliest end among open panes

    def close_until(t: int) -> None:
        for start in sorted(panes):
            if start + duration > t:
                break
            for sensor, rs in panes.pop(start).items():
                emit(pane_record(sensor, start, rs))

    for r in readings:
        ts = r["ts"]
        if next_end is not None and ts >= next_end:
            close_until(ts)
            next_end = min(panes) + duration if panes else None
        sensor = r["sensor"]
        start = ts - ts % period
        low = ts - duration
        while start > low:
            parts = panes.get(start)
            if parts is None:
                parts = panes[start] = {}
                if next_end is None or start + duration < next_end:
                    next_end = start + duration
            rs = parts.get(sensor)
            if rs is None:
                parts[sensor] = [r]
            else:
                rs.append(r)
            start -= period
    close_until(1 << 62)


def loop_w2(readings: Iterable[Reading], emit: Emit) -> None:
    loop_panes(readings, emit, PANE_MS, PANE_MS)


def loop_w3(readings: Iterable[Reading], emit: Emit) -> None:
    loop_panes(readings, emit, PANE_MS, SLIDE_MS)


def loop_w4(readings: Iterable[Reading], emit: Emit) -> None:
    window: deque[Reading] = deque(maxlen=W4_COUNT)
    append = window.append
    for r in readings:
        append(r)
        emit(w4_record(window))


def loop_w4inc(readings: Iterable[Reading], emit: Emit) -> None:
    window: deque[float] = deque()
    total = 0.0
    for r in readings:
        if len(window) == W4_COUNT:
            total -= window.popleft()
        v = r["value"]
        total += v
        window.append(v)
        emit({"ts": r["ts"], "avg": total / len(window)})


def loop_chain(readings: Iterable[Reading], emit: Emit) -> None:
    for r in readings:
        if r["value"] >= CHAIN_MIN:
            f = r["value"] * 1.8 + 32.0
            emit({**r, "f": f, "hot": f >= HOT_F})


LOOPS: dict[str, Callable[[Iterable[Reading], Emit], None]] = {
    "W1": loop_w1, "W2": loop_w2, "W3": loop_w3, "W4": loop_w4, "W4inc": loop_w4inc,
    "W4hand": loop_w4inc,
    "chain": loop_chain,
}
