"""`riverbed trace --host spark`: conformance cases replayed through the bridge's keyed stage.

Each case becomes a one-operator graph (a recorder whose windowed input port
carries the case's window) and its steps become rows of one streaming query:
tuples routed to their key group, marks, watermarks and time marks copied to
every group, exactly as the bridge routes a deployed graph's rows. All cases
run in one query (grouped by case and key group) in micro-batches that cut
through the cases, so window state crosses batch boundaries through Spark's
state store. The recorder submits one tuple per window event; the row order
key of each says which step caused it.

Steps that are host actions on the window (``evict_partition``, named
``checkpoint``, ``reset``, ``restart``) travel as command rows that the key
group's host applies between items, as the runtime trace host does.
"""

from __future__ import annotations

import json
import os
import struct
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

from ..core import SyncGraph
from ..graph import Graph, Operator
from ..testing import ListSink, ListSource
from ..trace import TraceError, _event_seconds_to_ns, _Replay, _seconds_to_ns, _tuple_of, case_window
from ..windows import EVENT_TIME_MAX, StreamWindowEvent, TimeIntervalSpec
from ._feeder import publish_rows
from ._keyed import KEYED_OUT_DDL, STATE_DDL, Hosted, group_function, group_of
from ._plan import plan
from ._rows import (
    KIND_COMMAND,
    KIND_FINAL,
    KIND_TIME,
    KIND_TUPLE,
    KIND_WATERMARK,
    KIND_WINDOW,
    decode,
    encode,
    source_ord,
)

__all__ = ["run_cases_on_spark"]

_EVENT_TIME = "__event_time"
CASE_DDL = "ord BINARY, kind INT, time LONG, value LONG, data BINARY, grp INT, case INT"
_CAUSES = {KIND_TIME: "timer", KIND_TUPLE: "tuple", KIND_WINDOW: "punct", KIND_FINAL: "punct",
           KIND_WATERMARK: "watermark"}


class _Recorder(Operator):
    """Submits one tuple per window event (the JSON record the trace prints)."""

    def __init__(self, b_convention: bool) -> None:
        self.buf: list[dict[str, Any]] = []
        self.replay = _Replay(None, self.buf, b_convention, lambda: None)  # type: ignore[arg-type,return-value]

    def on_window_event(self, event: StreamWindowEvent[Any], port: int) -> None:
        self.replay.on_event(event)
        for record in self.buf:
            self.submit(record)
        self.buf.clear()

    def snapshot(self) -> Any:
        r = self.replay
        return {"cause": r.cause, "stopped": r.stopped, "recording": r.recording,
                "checkpoints": r.checkpoints}

    def restore(self, state: Any) -> None:
        r = self.replay
        r.cause, r.stopped, r.recording = state["cause"], state["stopped"], state["recording"]
        r.checkpoints = dict(state["checkpoints"])


class _Hooks:
    """Sets the recorder's cause before each item and applies the case's host actions."""

    def before(self, host: SyncGraph, kind: int) -> None:
        cause = _CAUSES.get(kind)
        if cause is not None:
            host.core("window").op.replay.cause = cause  # type: ignore[attr-defined]

    def command(self, host: SyncGraph, data: bytes) -> None:
        step = decode(data)
        host.call("window", lambda runner: _apply(runner, step, host.clock.now()))


def _apply(runner: Any, step: Mapping[str, Any], now: int) -> None:
    replay = runner.op.replay
    window = runner.windows[0]
    if "evict_partition" in step:
        replay.cause = "evict_partition"
        window.evict_partition(step["evict_partition"])
    elif "checkpoint" in step:
        replay.checkpoints[str(step["checkpoint"])] = json.loads(json.dumps(window.checkpoint()))
    elif "restart" in step:
        replay.stopped, replay.recording = True, False
    elif "reset" in step:
        name = step["reset"]
        if replay.stopped:  # a new PE instance: a fresh window, activated now
            replay.stopped = False
            fresh = runner.make_window(0)
            fresh.activate(now)
            runner.replace_window(0, fresh)
            window = fresh
        replay.recording = True
        replay.cause = "reset"
        window.reset(None if name is None else replay.checkpoints[str(name)])


class _ByCase:
    def __init__(self, graphs: Sequence[Any]) -> None:
        self.graphs = graphs

    def __call__(self, key: tuple[Any, ...]) -> Hosted:
        return Hosted(self.graphs[int(key[0])], ("window",), ("steps", 0))


def _case_graph(case: Mapping[str, Any], flavor: str) -> tuple[Any, int, Any]:
    spec, partition_by = case_window(case)
    g = Graph("trace")
    timed = isinstance(spec, TimeIntervalSpec)
    stream = g.source("steps", ListSource([]), event_time=_EVENT_TIME if timed else None,
                      minimum_gap=0.0, manual_watermarks=True)
    port = stream.window(spec, partition_by=partition_by, flavor=flavor,
                         attribute_types=case.get("schema") or None)
    events = g.operator("window", _Recorder("order" in case), [port], [None])
    g.sink("events", ListSink(), [events])  # stands for the driver stage; the query collects rows
    frozen = g.freeze()
    p = plan(frozen, "keyed", groups=2)
    return frozen, p.groups, partition_by


def _case_rows(index: int, case: Mapping[str, Any], groups: int, partition_by: Any) -> list[tuple[Any, ...]]:
    name = case.get("name", "?")
    schema = case.get("schema") or {}
    rows: list[tuple[Any, ...]] = []
    clock = 0
    everywhere = range(groups)
    start = source_ord(0, index, 0)[:10]  # sorts first; what it raises is the port-ready step -1
    rows.extend((start, KIND_TIME, 0, 0, None, g, index) for g in everywhere)
    for i, step in enumerate(case.get("steps", [])):
        where = f"case {name} step {i}"
        ord_ = source_ord(0, index, i)  # steps in order; the time column carries the clock
        if "at" in step and len(step) == 1:
            clock = max(clock, _seconds_to_ns(step["at"], where))
            rows.extend((ord_, KIND_TIME, clock, 0, None, g, index) for g in everywhere)
        elif "tuple" in step:
            tup = _tuple_of(step, schema, where)
            if "event_time" in step:
                tup[_EVENT_TIME] = _event_seconds_to_ns(step["event_time"], f"{where}: event_time")
            g = group_of(tup.get(partition_by), groups) if groups > 1 else 0
            rows.append((ord_, KIND_TUPLE, clock, 0, encode(tup), g, index))
        elif "punct" in step:
            if step["punct"] not in ("window", "final"):
                raise TraceError(f"{where}: punct must be 'window' or 'final', got {step['punct']!r}")
            kind = KIND_WINDOW if step["punct"] == "window" else KIND_FINAL
            rows.extend((ord_, kind, clock, 0, None, g, index) for g in everywhere)
        elif "watermark" in step:
            v = step["watermark"]
            value = EVENT_TIME_MAX if v == "max" else _event_seconds_to_ns(v, f"{where}: watermark")
            rows.extend((ord_, KIND_WATERMARK, clock, value, None, g, index) for g in everywhere)
        elif "evict_partition" in step:
            g = group_of(step["evict_partition"], groups) if groups > 1 else 0
            rows.append((ord_, KIND_COMMAND, clock, 0, encode(dict(step)), g, index))
        elif any(k in step for k in ("checkpoint", "reset", "restart")):
            rows.extend((ord_, KIND_COMMAND, clock, 0, encode(dict(step)), g, index) for g in everywhere)
        else:
            raise TraceError(f"{where}: unknown step {json.dumps(step)}")
    return rows


def _cases_as_rows(cases: Sequence[Mapping[str, Any]], flavor: str
                   ) -> tuple[list[Any], list[tuple[Any, ...]]]:
    """Each case's one-operator graph, and every case's steps as rows for its key groups."""
    graphs, rows = [], []
    for i, case in enumerate(cases):
        graph, groups, partition_by = _case_graph(case, flavor)
        graphs.append(graph)
        rows.extend(_case_rows(i, case, groups, partition_by))
    return graphs, rows


_SEQ = struct.Struct(">Q")


def _step_of(ord_: bytes) -> int:
    return -1 if len(ord_) < 18 else int(_SEQ.unpack_from(ord_, 10)[0])


def run_cases_on_spark(cases: Sequence[Mapping[str, Any]], flavor: str = "java", *, spark: Any = None,
                       rows_per_batch: int = 64) -> list[list[dict[str, Any]]]:
    """Replay ``cases`` in one query; each case's events, in order of the steps causing them."""
    from ._session import spark_session

    session = spark or spark_session()
    graphs, rows = _cases_as_rows(cases, flavor)
    with tempfile.TemporaryDirectory(prefix="riverbed-trace-") as tmp:
        return _replay(session, graphs, rows, tmp, rows_per_batch=rows_per_batch, n_cases=len(cases))


def _replay(session: Any, graphs: Any, rows: list[Any], tmp: str, *, rows_per_batch: int,
            n_cases: int) -> list[list[dict[str, Any]]]:
    spool = os.path.join(tmp, "rows")
    publish_rows(spool, CASE_DDL, rows, rows_per_batch)
    df = session.readStream.schema(CASE_DDL).option("maxFilesPerTrigger", 1).parquet(spool)
    out = df.groupBy("case", "grp").applyInPandasWithState(
        group_function(_ByCase(graphs), _Hooks(), ["case"], timer_order=False),
        KEYED_OUT_DDL + ", case INT", STATE_DDL, "append", "NoTimeout")
    collected: dict[int, list[tuple[Any, ...]]] = {}

    def collect(batch: Any, batch_id: int) -> None:
        t = batch.toArrow()
        cols = [t.column(c).to_pylist() for c in ("case", "ord", "chan", "kind", "data")]
        collected[batch_id] = list(zip(*cols, strict=True))

    query = (out.writeStream.foreachBatch(collect).option("checkpointLocation", os.path.join(tmp, "spark"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    results: list[list[tuple[bytes, int, dict[str, Any]]]] = [[] for _ in range(n_cases)]
    for batch_rows in collected.values():
        for case, ord_, chan, kind, data in batch_rows:
            if kind == KIND_TUPLE:
                results[case].append((ord_, chan, decode(data)))
    return [_events(per_case) for per_case in results]


def _events(per_case: list[tuple[bytes, int, dict[str, Any]]]) -> list[dict[str, Any]]:
    per_case.sort(key=lambda r: (r[0], r[1]))
    events = []
    for ord_, _chan, record in per_case:
        if "step" in record:
            record["step"] = _step_of(ord_)
        events.append(record)
    return events


def run_cases_locally(cases: Sequence[Mapping[str, Any]], flavor: str = "java",
                      rows_per_batch: int = 64) -> list[list[dict[str, Any]]]:
    """The same replay without Spark: rows cut into micro-batches, each key group's state
    encoded and decoded between them as the state store would. For fast tests of the hosting."""
    from ._keyed import host_group

    graphs, rows = _cases_as_rows(cases, flavor)
    by_case = _ByCase(graphs)
    states: dict[tuple[int, int], bytes] = {}
    results: list[list[tuple[bytes, int, dict[str, Any]]]] = [[] for _ in cases]
    for start in range(0, len(rows), rows_per_batch):
        groups_rows: dict[tuple[int, int], list[tuple[Any, ...]]] = {}
        for ord_, kind, time, value, data, grp, case in rows[start:start + rows_per_batch]:
            groups_rows.setdefault((case, grp), []).append((ord_, kind, time, value, data))
        for key, group_rows in groups_rows.items():
            out, states[key] = host_group(by_case(key), _Hooks(), key, group_rows, states.get(key),
                                          timer_order=False)
            for ord_, kind, _time, _value, tup, _port, chan, case in out:
                if kind == KIND_TUPLE:
                    results[case].append((ord_, chan, tup))
    return [_events(per_case) for per_case in results]
