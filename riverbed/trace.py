"""Replay a window trace case (``shared/conformance/FORMAT.md``) and list its events.

`riverbed trace CASE.json` builds the window a case describes, applies its
steps on a virtual clock and prints one JSON object per raised event. It is
the conformance harness and also a tool for people porting SPL code: write a
clause and a few tuples, see exactly what the window does.

The ``at`` field. The case corpora annotate the instant of an event in two
conventions, and the conformance checker compares ``at`` strictly wherever a
case uses it, so the trace follows the convention of the case it replays:

* cases with an ``order`` field (the B corpus): ``at`` on events raised by a
  timer, by the port becoming ready, or by a reset;
* other cases (the A corpus): ``at`` on events raised by a timer; on a
  partitioned window, on every event.

In both, the EVICTION raised by a sliding time eviction's own timer carries no
``at`` (IBM's runtimes re-check 1 ms or 1 ns after the deadline).

The ``step`` field is printed under the B convention only. The A corpus
predates it and lists, without steps, evictions that IBM raises in different
steps (``A-sliding-time5-seed``: B at 7.001 s, C at 9.501 s); the checker
merges adjacent evictions only when neither side names a step, so printing
steps there would split what the case merges.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from .windows import (
    EVENT_TIME_MAX,
    EventType,
    PaneEvent,
    StreamWindow,
    StreamWindowEvent,
    Time,
    TimeIntervalSpec,
    TimeIntervalWindow,
    WindowError,
    WindowSpec,
    WindowType,
    parse_window_clause,
    seconds_to_ns,
)
from .windows._policy import NS_PER_SECOND

AnyWindow = StreamWindow[dict[str, Any]] | TimeIntervalWindow[dict[str, Any]]

__all__ = ["TraceError", "load_cases", "main", "run_case"]

_INT_TYPES = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"}
_FLOAT_TYPES = {"float32", "float64"}


class TraceError(Exception):
    """A case cannot be replayed: bad JSON, an unknown step, a clause we cannot build."""


def load_cases(path: Path) -> Iterator[dict[str, Any]]:
    """The cases of one file (one case or a JSON array of cases)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise TraceError(f"{path}: cannot read the case: {exc}") from None
    for i, case in enumerate(data if isinstance(data, list) else [data]):
        if not isinstance(case, dict):
            raise TraceError(f"{path}[{i}]: a case must be a JSON object")
        case.setdefault("name", f"{path.stem}[{i}]")
        yield case


def _seconds_to_ns(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TraceError(f"{where}: expected seconds as a number, got {value!r}")
    return round(value * NS_PER_SECOND)


def _event_seconds_to_ns(value: Any, where: str) -> int:
    """Event times and watermarks: float seconds to a timestamp as SPL's ``timestamp(double)`` does."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TraceError(f"{where}: expected seconds as a number, got {value!r}")
    if not math.isfinite(value):
        raise TraceError(f"{where}: expected a finite number of seconds, got {value!r}")
    return seconds_to_ns(value)


@dataclass
class _Replay:
    window: AnyWindow
    out: list[dict[str, Any]]
    b_convention: bool
    make_window: Callable[[], AnyWindow]
    step: int = -1
    cause: str = "activation"
    checkpoints: dict[str, Any] = field(default_factory=dict)
    stopped: bool = False  # a {"restart": true} step stopped the PE; the next reset restarts it
    clock: int = 0
    recording: bool = True  # False: events are not part of the expectation (a new PE starting)

    def on_event(self, event: StreamWindowEvent[dict[str, Any]]) -> None:
        if not self.recording:
            return
        record: dict[str, Any] = {
            "event": event.type.value,
            "partition": event.partition,
            "tuples": [t.get("id") for t in event.tuples],
        }
        if self.b_convention:
            record["step"] = self.step
        if isinstance(event, PaneEvent):
            record["pane"] = [event.interval_start / NS_PER_SECOND, event.interval_end / NS_PER_SECOND]
            if event.type is EventType.TRIGGER:
                record["pane_timing"] = event.pane_timing.value
                record["pane_index"] = event.pane_index
        elif self._wants_at(event):
            record["at"] = event.window.now / NS_PER_SECOND
        self.out.append(record)

    def _wants_at(self, event: StreamWindowEvent[dict[str, Any]]) -> bool:
        window = event.window
        assert isinstance(window, StreamWindow)
        spec = window.spec
        sliding_time_eviction = (event.type is EventType.EVICTION and spec.type is WindowType.SLIDING
                                 and isinstance(spec.eviction, Time))
        if self.cause == "timer":
            return not sliding_time_eviction
        if self.b_convention:
            return self.cause in ("activation", "reset")
        return spec.partitioned


def _tuple_of(step: Mapping[str, Any], schema: Mapping[str, str], where: str) -> dict[str, Any]:
    raw = step["tuple"]
    if not isinstance(raw, dict):
        raise TraceError(f"{where}: 'tuple' must be an object of attributes")
    t = dict(raw)
    for name, spl_type in schema.items():
        if spl_type == "timestamp" and name in t and isinstance(t[name], (int, float)):
            t[name] = _seconds_to_ns(t[name], f"{where}: attribute {name}")
    return t


def _default_key(schema: Mapping[str, str], partition_by: str | None) -> Any:
    spl_type = schema.get(partition_by or "")
    if spl_type in _INT_TYPES or spl_type == "timestamp":
        return 0
    if spl_type in _FLOAT_TYPES:
        return 0.0
    if spl_type == "boolean":
        return False
    return ""


def case_window(case: Mapping[str, Any]) -> tuple[WindowSpec | TimeIntervalSpec, str | None]:
    """A case's parsed window clause and its partition attribute (None: unpartitioned)."""
    name = case.get("name", "?")
    clause = case.get("window")
    if not isinstance(clause, str):
        raise TraceError(f"case {name}: 'window' must be the SPL clause text")
    try:
        spec = parse_window_clause(clause)
    except WindowError as exc:
        raise TraceError(f"case {name}: {exc}") from None
    return spec, case.get("partition_by") if spec.partitioned else None


def run_case(case: Mapping[str, Any], flavor: str = "java") -> list[dict[str, Any]]:
    """Replay one case on the window library; return its events as JSON-ready dicts."""
    name = case.get("name", "?")
    spec, key = case_window(case)
    schema = case.get("schema") or {}
    partition_by = case.get("partition_by")

    def make_window() -> AnyWindow:
        if isinstance(spec, TimeIntervalSpec):
            return TimeIntervalWindow(spec, flavor=flavor, partition_by=key)
        return StreamWindow(
            spec, flavor=flavor, partition_by=key,
            attribute_types=schema, default_partition=_default_key(schema, partition_by))

    try:
        window = make_window()
    except WindowError as exc:
        raise TraceError(f"case {name}: {exc}") from None
    out: list[dict[str, Any]] = []
    replay = _Replay(window, out, "order" in case, make_window)
    _listen(window, replay.on_event)
    window.activate(0)
    for index, step in enumerate(case.get("steps", [])):
        replay.step = index
        where = f"case {name}, step {index}"
        if not isinstance(step, dict):
            raise TraceError(f"{where}: a step must be an object")
        try:
            _apply(replay, step, schema, where)
        except WindowError as exc:
            raise TraceError(f"{where}: {exc}") from None
    return out


def _listen(window: AnyWindow, listener: Callable[[StreamWindowEvent[dict[str, Any]]], None]) -> None:
    if isinstance(window, TimeIntervalWindow):
        # The cases record pane events only, not the per-pane INSERTIONs.
        window.register_listener(listener, (EventType.INITIAL_FULL, EventType.TRIGGER, EventType.CLOSE))
    else:
        window.register_listener(listener)


def _apply(replay: _Replay, step: Mapping[str, Any], schema: Mapping[str, str], where: str) -> None:
    window = replay.window
    if replay.stopped and "reset" not in step:
        if "at" in step:
            replay.clock = _seconds_to_ns(step["at"], where)
            return
        raise TraceError(f"{where}: the PE is stopped by a restart step; only 'at' and 'reset' may follow")
    if "checkpoint" in step:
        # A JSON round trip proves the snapshot is plain data, as a store would hold it.
        replay.checkpoints[str(step["checkpoint"])] = json.loads(json.dumps(window.checkpoint()))
    elif "restart" in step:
        replay.stopped = True
        replay.clock = window.now
    elif "reset" in step:
        name = step["reset"]
        if name is not None and str(name) not in replay.checkpoints:
            raise TraceError(f"{where}: no checkpoint named {name!r} was taken before")
        if replay.stopped:
            # A new PE instance: what it raises on its own before the reset is not expected.
            replay.stopped = False
            fresh = replay.make_window()
            _listen(fresh, replay.on_event)
            replay.step -= 1
            fresh.activate(replay.clock)
            replay.step += 1
            replay.window = window = fresh
        replay.cause = "reset"
        window.reset(None if name is None else replay.checkpoints[str(name)])
    elif "tuple" in step:
        replay.cause = "tuple"
        tup = _tuple_of(step, schema, where)
        if isinstance(window, TimeIntervalWindow):
            if "event_time" not in step:
                raise TraceError(f"{where}: a tuple for a timeInterval window needs 'event_time'")
            window.insert(tup, _event_seconds_to_ns(step["event_time"], f"{where}: event_time"))
        elif "event_time" in step:
            raise TraceError(f"{where}: tuples with event_time need a timeInterval window")
        else:
            window.insert(tup)
    elif "watermark" in step:
        replay.cause = "watermark"
        value = step["watermark"]
        if not isinstance(window, TimeIntervalWindow):
            raise TraceError(f"{where}: watermarks drive timeInterval windows only; this window "
                             "is not one")
        window.watermark(EVENT_TIME_MAX if value == "max"
                         else _event_seconds_to_ns(value, f"{where}: watermark"))
    elif "at" in step:
        replay.cause = "timer"
        window.advance_time(_seconds_to_ns(step["at"], where))
    elif "punct" in step:
        replay.cause = "punct"
        kind = step["punct"]
        if kind not in ("window", "final"):
            raise TraceError(f"{where}: punct must be 'window' or 'final', got {kind!r}")
        window.punctuate(kind)
    elif "evict_partition" in step:
        replay.cause = "evict_partition"
        if isinstance(window, TimeIntervalWindow):
            raise TraceError(f"{where}: timeInterval windows have no evict_partition")
        window.evict_partition(step["evict_partition"])
    else:
        raise TraceError(f"{where}: unknown step {json.dumps(step)}; expected one of tuple, at, "
                         "punct, evict_partition, watermark, checkpoint, reset, restart")


def _write(events: Iterable[dict[str, Any]], stream: TextIO) -> None:
    for event in events:
        stream.write(json.dumps(event) + "\n")


def main(paths: list[str], flavor: str, host: str, out_dir: str | None,
         echo: Callable[[str], None] | None = None) -> int:
    """The ``riverbed trace`` command; returns the exit code."""
    err = echo or (lambda msg: print(msg, file=sys.stderr))
    if host not in ("windows", "runtime", "spark"):
        err(f"riverbed trace: unknown host {host!r}; use --host windows, runtime or spark")
        return 2
    if host == "spark":
        return _main_spark(paths, flavor, out_dir, err)
    replay: Callable[[Mapping[str, Any], str], list[dict[str, Any]]] = run_case
    if host == "runtime":
        from .runtime._trace_host import run_case_in_runtime

        replay = run_case_in_runtime
    status = 0
    for raw in paths:
        path = Path(raw)
        try:
            cases = list(load_cases(path))
            results = [replay(case, flavor) for case in cases]
        except TraceError as exc:
            err(f"riverbed trace: {exc}")
            status = 1
            continue
        _output(path, [e for r in results for e in r], out_dir)
    return status


def _output(path: Path, events: list[dict[str, Any]], out_dir: str | None) -> None:
    """A case file's events: to DIR/<stem>.jsonl with --out, else to stdout."""
    if out_dir is not None:
        with open(Path(out_dir) / f"{path.stem}.jsonl", "w") as fh:
            _write(events, fh)
    else:
        _write(events, sys.stdout)


def _main_spark(paths: list[str], flavor: str, out_dir: str | None, err: Callable[[str], None]) -> int:
    """All cases of all files in one Spark query (a session costs seconds to start)."""
    from .spark_bridge._trace import run_cases_on_spark

    status = 0
    files: list[tuple[Path, int]] = []
    cases: list[dict[str, Any]] = []
    for raw in paths:
        path = Path(raw)
        try:
            found = list(load_cases(path))
        except TraceError as exc:
            err(f"riverbed trace: {exc}")
            status = 1
            continue
        files.append((path, len(found)))
        cases.extend(found)
    try:
        results = run_cases_on_spark(cases, flavor)
    except TraceError as exc:
        err(f"riverbed trace: {exc}")
        return 1
    at = 0
    for path, n in files:
        _output(path, [e for r in results[at:at + n] for e in r], out_dir)
        at += n
    return status
