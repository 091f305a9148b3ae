"""The demo job: an SPL window over a generated temperature-sensor stream.

Simulated sensors report every 100 ms of simulated time; the window (any SPL
clause, partitioned by sensor when the clause says ``partitioned``) runs on a
virtual clock that follows the readings, and every TRIGGER or tumble prints
the average temperature of what the window holds. Deterministic for a seed.
"""

from __future__ import annotations

import random
import sys
from typing import Any

from .windows import (
    EventType,
    StreamWindow,
    StreamWindowEvent,
    TimeIntervalSpec,
    WindowError,
    parse_window_clause,
)

__all__ = ["main"]

_STEP_NS = 100_000_000  # one reading every 100 ms of simulated time
_READING = {"sensor": "rstring", "temp": "float64", "seq": "int64"}  # what the readings hold


def _is_time_interval(clause: str) -> bool:
    """The clause parses as an event-time (timeInterval) window, which the demo cannot drive."""
    try:
        return isinstance(parse_window_clause(clause), TimeIntervalSpec)
    except WindowError:
        return False


def main(clause: str, sensors: int, readings: int, flavor: str, seed: int) -> int:
    if sensors < 1 or readings < 0:
        print(f"riverbed demo: --sensors {sensors} --readings {readings}: expected at least one "
              "sensor and no negative number of readings", file=sys.stderr)
        return 2
    try:
        window: StreamWindow[dict[str, Any]] = StreamWindow(clause, flavor=flavor,
                                                            attribute_types=_READING)
    except WindowError as exc:
        if _is_time_interval(clause):
            print(f"riverbed demo: {clause}: a timeInterval window closes its panes by "
                  "watermarks, which the demo's readings do not carry; the demo runs sliding and "
                  "tumbling windows, e.g. --window 'tumbling, time(2), partitioned'",
                  file=sys.stderr)
        else:
            print(f"riverbed demo: {exc}", file=sys.stderr)
        return 2
    if window.is_partitioned:
        window.register_partitioner("sensor")
    counts = dict.fromkeys(EventType, 0)

    def show(event: StreamWindowEvent[dict[str, Any]]) -> None:
        counts[event.type] += 1
        if event.type in (EventType.TRIGGER, EventType.EVICTION) and event.tuples:
            temps = [t["temp"] for t in event.tuples]
            where = f"sensor {event.partition}" if event.partition is not None else "all sensors"
            print(f"t={window.now / 1e9:7.1f}s {event.type.name:<9} {where:<12} "
                  f"n={len(temps):<3} avg={sum(temps) / len(temps):6.2f}")
        elif event.type is EventType.PARTITION_EVICTION:
            print(f"t={window.now / 1e9:7.1f}s PARTITION_EVICTION sensor {event.partition}")

    window.register_listener(show)
    print(f"riverbed demo: window '{window.spec.clause()}' ({flavor} flavor), "
          f"{sensors} sensors, {readings} readings")
    rng = random.Random(seed)
    temps = [20.0 + rng.uniform(-2, 2) for _ in range(sensors)]
    window.activate(0)
    try:
        for i in range(readings):
            window.advance_time(i * _STEP_NS)
            s = rng.randrange(sensors)
            temps[s] += rng.gauss(0, 0.5)
            window.insert({"sensor": f"s{s}", "temp": round(temps[s], 2), "seq": i})
    except WindowError as exc:  # a clause naming an attribute the readings do not have
        print(f"riverbed demo: {exc}; the demo's readings have "
              f"{', '.join(f'{t} {n}' for n, t in _READING.items())}", file=sys.stderr)
        return 2
    window.final_mark()
    summary = ", ".join(f"{t.name}={n}" for t, n in counts.items() if n)
    print(f"riverbed demo: done: {summary}")
    return 0
