"""One sample of a running job a second: counts, rates, queues, watermarks, checkpoints.

The console reads the job's `JobMetrics` (the counters the status view and the Prometheus
endpoint read) once per interval, whether or not a page is open, so a page opened later
still has the last minutes to plot. A sample is a plain dict, ready for JSON; rates are the
difference to the previous sample over the wall time between them. The checkpoint history
is kept apart: a region's newest committed checkpoint or reset count changing between two
samples makes an entry. A job with parallel regions (``Job.channel_metrics``) adds each
channel: its worker process, tuples in and out with their rates, its bounded queue.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from riverbed.core import JobMetrics
from riverbed.windows import EVENT_TIME_MAX

from ._view import GraphView

__all__ = ["MetricsSource", "Sampler", "format_watermark"]

_TICKS_PER_SECOND = {"ns": 1_000_000_000, "us": 1_000_000, "ms": 1_000}
_RETRIES = 5


class MetricsSource(Protocol):
    """What the console needs from a job (a `riverbed.runtime.Job` is one)."""

    @property
    def name(self) -> str: ...

    def snapshot_metrics(self) -> JobMetrics: ...


def format_watermark(value: int | None, resolution: str = "ns") -> str:
    """Ticks as seconds with milliseconds ("-": none yet; "max": the final watermark). Done
    here, in integers, because JavaScript numbers lose the digits of epoch nanoseconds."""
    if value is None:
        return "-"
    if value == EVENT_TIME_MAX:
        return "max"
    per_second = _TICKS_PER_SECOND.get(resolution, 1_000_000_000)
    seconds, rest = divmod(abs(value), per_second)
    return f"{'-' if value < 0 else ''}{seconds}.{rest * 1000 // per_second:03d}s"


def _plotted(sample: dict[str, Any]) -> dict[str, Any]:
    """What the page plots of an older sample: each operator's rates and queue, nothing else."""
    return {"t": sample["t"], "operators": {
        name: {"in_rate": op["in_rate"], "out_rate": op["out_rate"], "queue": op["queue"],
               "waits_rate": op["waits_rate"]} for name, op in sample["operators"].items()}}


def _rate(now: int, before: int | None, elapsed: float) -> float | None:
    if before is None or elapsed <= 0:
        return None
    return round((now - before) / elapsed, 2)


class Sampler:
    """Samples ``source`` on demand (`sample`), keeping ``history`` samples and the
    checkpoint history. Not thread-safe: one thread calls it (the console's)."""

    def __init__(self, source: MetricsSource, view: GraphView, *, history: int = 600,
                 resolution: str = "ns", checkpoints: int = 200) -> None:
        self.source = source
        self.view = view
        self.resolution = resolution
        # The samples before the newest hold only what the page plots (`_plotted`): whole,
        # 600 of them took 600 MB for a graph of 800 operators, and 160 MB a page load.
        self.samples: deque[dict[str, Any]] = deque(maxlen=history)
        self.latest: dict[str, Any] | None = None
        self.checkpoints: deque[dict[str, Any]] = deque(maxlen=checkpoints)
        self._previous: dict[str, Any] | None = None
        self._previous_at = 0.0
        self._previous_channels: dict[tuple[str, int], dict[str, Any]] = {}

    def _read(self) -> dict[str, Any]:
        # The job's loop keeps counting while this thread reads; an operator registering a
        # counter of its own mid-read changes a dict being iterated: read again.
        for _ in range(_RETRIES):
            try:
                return self.source.snapshot_metrics().as_dict()
            except RuntimeError:
                continue
        return self.source.snapshot_metrics().as_dict()

    def sample(self, now: float | None = None) -> dict[str, Any]:
        """Read the job now (``now``: monotonic seconds) and return the sample, also kept."""
        at = time.monotonic() if now is None else now
        raw = self._read()
        before = self._previous
        elapsed = at - self._previous_at if before is not None else 0.0
        old_ops = {o["name"]: o for o in before["operators"]} if before else {}
        operators: dict[str, Any] = {}
        streams: dict[str, float | None] = {}
        for op in raw["operators"]:
            old = old_ops.get(op["name"])
            tuples_in = sum(p["tuples_processed"] for p in op["inputs"])
            tuples_out = sum(p["tuples_submitted"] for p in op["outputs"])
            outputs = []
            for port, p in enumerate(op["outputs"]):
                prior = old["outputs"][port]["tuples_submitted"] if old else None
                rate = _rate(p["tuples_submitted"], prior, elapsed)
                streams[f"{op['name']}.{port}"] = rate
                outputs.append({"submitted": p["tuples_submitted"], "rate": rate,
                                "window_puncts": p["window_puncts_submitted"],
                                "final_puncts": p["final_puncts_submitted"],
                                "watermarks": p["watermarks_submitted"]})
            inputs = []
            for port, p in enumerate(op["inputs"]):
                prior = old["inputs"][port]["tuples_processed"] if old else None
                inputs.append({"processed": p["tuples_processed"],
                               "rate": _rate(p["tuples_processed"], prior, elapsed),
                               "window_puncts": p["window_puncts_processed"],
                               "final_puncts": p["final_puncts_processed"],
                               "late": p["tuples_dropped_late"], "errors": p["errors"]})
            old_in = sum(p["tuples_processed"] for p in old["inputs"]) if old else None
            old_out = sum(p["tuples_submitted"] for p in old["outputs"]) if old else None
            operators[op["name"]] = {
                "in": tuples_in, "out": tuples_out,
                # A source has no input to count, a sink no output: no rate, rather than 0/s.
                "in_rate": _rate(tuples_in, old_in, elapsed) if op["inputs"] else None,
                "out_rate": _rate(tuples_out, old_out, elapsed) if op["outputs"] else None,
                "queue": op["queue_size"], "capacity": op["queue_capacity"],
                "high_water": op["queue_high_water"], "waits": op["backpressure_waits"],
                "waits_rate": _rate(op["backpressure_waits"], old["backpressure_waits"] if old else None,
                                    elapsed),
                "watermark": format_watermark(op["watermark"], self.resolution),
                "late": sum(p["tuples_dropped_late"] for p in op["inputs"]),
                "errors": sum(p["errors"] for p in op["inputs"]),
                "finished": op["finished"], "inputs": inputs, "outputs": outputs,
                "counters": op["counters"],
            }
        wall = time.time()
        new_checkpoints = self._checkpoint_events(raw, before, wall)
        channels = self._channels(elapsed)
        self._previous, self._previous_at = raw, at
        result = {"t": round(wall, 3), "job": raw["job"], "operators": operators, "streams": streams,
                  "regions": raw["regions"], "restarts": raw["restarts"],
                  "checkpoints": new_checkpoints, "channels": channels}
        if self.latest is not None:
            self.samples[-1] = _plotted(self.latest)
        self.samples.append(result)
        self.latest = result
        return result

    def _channels(self, elapsed: float) -> list[dict[str, Any]]:
        """Each channel of the job's parallel regions (none for a job without), with rates.

        Read the way the status view and the Prometheus endpoint read them: `Job` has
        ``channel_metrics()``, a source of metrics without it (a test's) has no channels."""
        read: Callable[[], list[Any]] | None = getattr(self.source, "channel_metrics", None)
        if read is None:
            return []
        out: list[dict[str, Any]] = []
        previous = self._previous_channels
        self._previous_channels = {}
        for metrics in read():
            now = metrics.as_dict()
            key = (now["region"], now["channel"])
            old = previous.get(key)
            self._previous_channels[key] = now
            out.append({
                "region": now["region"], "channel": now["channel"], "kind": now["kind"],
                "pid": now["pid"], "alive": now["alive"], "finished": now["finished"],
                "cpu_seconds": now["cpu_seconds"], "messages": now["worker_messages"],
                "writes": now["worker_writes"],
                "in": now["tuples_in"], "out": now["tuples_out"],
                "in_rate": _rate(now["tuples_in"], old["tuples_in"] if old else None, elapsed),
                "out_rate": _rate(now["tuples_out"], old["tuples_out"] if old else None, elapsed),
                "in_flight": now["batches_in_flight"], "capacity": now["capacity"],
                "waits": now["backpressure_waits"],
                "waits_rate": _rate(now["backpressure_waits"], old["backpressure_waits"] if old else None,
                                    elapsed),
            })
        return out

    def _checkpoint_events(self, raw: dict[str, Any], before: dict[str, Any] | None,
                           wall: float) -> list[dict[str, Any]]:
        old = {r["name"]: r for r in before["regions"]} if before else {}
        events: list[dict[str, Any]] = []
        for region in raw["regions"]:
            prior = old.get(region["name"], {})
            label = region["name"] or "job"
            taken = region["checkpoints"] - prior.get("checkpoints", 0)
            committed = region["last_committed"]
            if committed is not None and committed != prior.get("last_committed"):
                events.append({"t": round(wall, 3), "region": label, "kind": "checkpoint",
                               "id": committed, "count": max(taken, 1),
                               "drain_ms": round(region["drain_ms"], 2),
                               "save_ms": round(region["checkpoint_ms"], 2)})
            resets = region["resets"] - prior.get("resets", 0)
            if resets > 0:
                events.append({"t": round(wall, 3), "region": label, "kind": "reset", "count": resets,
                               "recovery_ms": round(region["last_recovery_ms"], 2),
                               "state": region["state"]})
        self.checkpoints.extend(events)
        return events

    def history(self) -> dict[str, Any]:
        """The samples kept (the newest whole, the others as plotted) and the checkpoint
        history: what a page opened now starts from."""
        return {"samples": list(self.samples), "checkpoints": list(self.checkpoints)}
