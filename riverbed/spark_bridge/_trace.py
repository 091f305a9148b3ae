"""`riverbed trace --host spark`: conformance cases replayed through the bridge's keyed stage.

Each case becomes a one-operator graph (a recorder whose windowed input
port carries the case's window), and the interpreter's calls become rows of
one streaming query (`_CaseRows` is the `Host`): tuples routed to their key
group, marks, watermarks and time marks copied to every group, exactly as
the bridge routes a deployed graph's rows. All cases run in one query
(grouped by case and key group) in micro-batches that cut through the
cases, so window state crosses batch boundaries through Spark's state store.
The recorder submits one tuple per window event, stamped with the key
group's clock; the order key of its row says which step raised it.

What the operator itself does to its window (``evict_partition``, a named
checkpoint, a reset, a new PE after a restart, the stop that mutes it)
travels as command rows that the key group applies between items. Since the
events come back only when the query is done, the key group's recorder
mutes itself where the interpreter muted its log.
"""

from __future__ import annotations

import json
import os
import struct
import tempfile
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Literal, Protocol

from ..conformance import Case, Event, EventLog, Replay, TupleStep, WindowHost, parse_case, trace_records
from ..graph import Graph, Operator
from ..testing import ListSink, ListSource
from ..windows import StreamWindowEvent
from ._feeder import publish_rows
from ._keyed import KEYED_OUT_DDL, STATE_DDL, Hosted, group_function, group_of, host_group
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

__all__ = ["replay_on_spark", "run_cases_locally", "run_cases_on_spark"]

_EVENT_TIME = "__event_time"
CASE_DDL = "ord BINARY, kind INT, time LONG, value LONG, data BINARY, grp INT, case INT"
_SEQ = struct.Struct(">Q")
_SUBS = 4  # rows one step may send to a group in order (a reset after a restart sends two)
Row = tuple[bytes, int, int, int, bytes | None, int, int]


class _Recorder(Operator):
    """Submits one tuple per window event (the event's JSON record, its step still unknown)."""

    def __init__(self) -> None:
        self.log = EventLog()
        self.states: dict[str, Any] = {}  # checkpoints taken in this key group, by step token

    def on_window_event(self, event: StreamWindowEvent[Any], port: int) -> None:
        self.log.record(event, self.context.now())
        for e in self.log.events:
            self.submit(e.as_json())
        self.log.events.clear()

    def snapshot(self) -> Any:
        return {"muted": self.log.muted, "states": self.states}

    def restore(self, state: Any) -> None:
        self.log.muted = state["muted"]
        self.states = dict(state["states"])


class _Core(Protocol):
    """What a command uses of the key group's core of the recorder."""

    op: Any
    windows: list[Any]

    def now(self) -> int: ...

    def make_window(self, port: int) -> Any: ...

    def replace_window(self, port: int, window: Any) -> None: ...


def _execute(core: _Core, command: list[Any]) -> None:
    """A command row: what the operator does to its window, at the key group's clock."""
    recorder: _Recorder = core.op
    action, now = command[0], core.now()
    if action == "stop":
        recorder.log.muted = True
        return
    if action == "new":
        fresh = core.make_window(0)
        fresh.activate(now)
        core.replace_window(0, fresh)
        return
    window = core.windows[0]
    # The window's clock moves with the items and timers of its own group; a command acts now.
    window.advance_time(now)
    if action == "evict":
        window.evict_partition(command[1])
    elif action == "checkpoint":
        recorder.states[str(command[1])] = json.loads(json.dumps(window.checkpoint()))
    else:
        recorder.log.muted = False
        window.reset(None if command[1] is None else recorder.states[str(command[1])])


class _Hooks:
    """Applies the command rows; nothing to do before the other items."""

    def before(self, host: Any, kind: int) -> None:
        pass

    def command(self, host: Any, data: bytes) -> None:
        command = decode(data)
        host.call("window", lambda core: _execute(core, command))


class _CaseRows:
    """The `Host` of one case: each call becomes the rows of its key groups."""

    def __init__(self, index: int, case: Case, groups: int) -> None:
        self.index, self.case, self.groups = index, case, groups
        self.rows: list[Row] = []
        self.log = EventLog()
        self.clock = 0
        self._step, self._sub = -2, 0

    def _ord(self) -> bytes:
        step = self.log.step
        if step != self._step:
            self._step, self._sub = step, 0
        self._sub += 1
        assert self._sub < _SUBS
        return source_ord(0, self.index, (step + 1) * _SUBS + self._sub)

    def _everywhere(self, kind: int, value: int = 0, data: bytes | None = None) -> None:
        ord_ = self._ord()
        self.rows.extend((ord_, kind, self.clock, value, data, g, self.index) for g in range(self.groups))

    def _to(self, key: Any, kind: int, data: bytes) -> None:
        g = group_of(key, self.groups) if self.groups > 1 else 0
        self.rows.append((self._ord(), kind, self.clock, 0, data, g, self.index))

    def _command(self, *command: Any) -> None:
        self._everywhere(KIND_COMMAND, data=encode(list(command)))

    def start(self, log: EventLog) -> None:
        self.log = log
        self._everywhere(KIND_TIME)  # sorts first; what it raises is the port-ready step -1

    def insert(self, step: TupleStep) -> None:
        tup = step.tuple()
        if step.event_time is not None:
            tup[_EVENT_TIME] = step.event_time
        self._to(tup.get(self.case.partition_by or ""), KIND_TUPLE, encode(tup))

    def advance(self, now: int) -> None:
        self.clock = now
        self._everywhere(KIND_TIME)

    def punctuate(self, kind: Literal["window", "final"]) -> None:
        self._everywhere(KIND_WINDOW if kind == "window" else KIND_FINAL)

    def watermark(self, value: int) -> None:
        self._everywhere(KIND_WATERMARK, value)

    def evict_partition(self, partition: Hashable) -> None:
        self._to(partition, KIND_COMMAND, encode(["evict", partition]))

    def checkpoint(self) -> object:
        token = self.log.step  # each key group keeps its own part of the state under it
        self._command("checkpoint", token)
        return token

    def stop(self) -> None:
        self._command("stop")

    def new_instance(self) -> None:
        self._command("new")

    def reset(self, state: object | None) -> None:
        self._command("reset", state)


def _case_graph(case: Case, flavor: str) -> tuple[Any, int]:
    WindowHost(case, flavor)  # a window the flavor cannot build fails here, not in a Spark worker
    g = Graph("trace")
    stream = g.source("steps", ListSource([]), event_time=_EVENT_TIME if case.time_interval else None,
                      minimum_gap=0.0, manual_watermarks=True)
    port = stream.window(case.spec, partition_by=case.partition_by, flavor=flavor,
                         attribute_types=case.schema or None)
    events = g.operator("window", _Recorder(), [port], [None])
    g.sink("events", ListSink(), [events])  # stands for the driver stage; the query collects rows
    frozen = g.freeze()
    return frozen, plan(frozen, "keyed", groups=2).groups


def _cases_as_rows(runs: Sequence[tuple[Case, str]]) -> tuple[list[Any], list[Row]]:
    """Each case's one-operator graph, and every case's steps as rows for its key groups."""
    graphs, rows = [], []
    for i, (case, flavor) in enumerate(runs):
        graph, groups = _case_graph(case, flavor)
        graphs.append(graph)
        host = _CaseRows(i, case, groups)
        for _ in Replay(case, host).run():
            pass
        rows.extend(host.rows)
    return graphs, rows


class _ByCase:
    def __init__(self, graphs: Sequence[Any]) -> None:
        self.graphs = graphs

    def __call__(self, key: tuple[Any, ...]) -> Hosted:
        return Hosted(self.graphs[int(key[0])], ("window",), ("steps", 0))


def _step_of(ord_: bytes) -> int:
    """The step of an output row (its cause's order key); the port-ready events have none."""
    return -1 if len(ord_) < 18 else int(_SEQ.unpack_from(ord_, 10)[0]) // _SUBS - 1


def _events(per_case: list[tuple[bytes, int, Any]]) -> list[Event]:
    per_case.sort(key=lambda r: (r[0], r[1]))
    return [Event.from_json(record).at_step(_step_of(ord_)) for ord_, _chan, record in per_case]


def replay_on_spark(runs: Sequence[tuple[Case, str]], *, spark: Any = None,
                    rows_per_batch: int = 64) -> list[list[Event]]:
    """Replay each (case, flavor) in one query; each case's events, in the order of the steps
    that raised them (events of one step in one key group in the order raised)."""
    from ._session import spark_session

    session = spark or spark_session()
    graphs, rows = _cases_as_rows(runs)
    with tempfile.TemporaryDirectory(prefix="riverbed-trace-") as tmp:
        return _replay(session, graphs, rows, tmp, rows_per_batch=rows_per_batch, n_cases=len(runs))


def _replay(session: Any, graphs: Any, rows: list[Row], tmp: str, *, rows_per_batch: int,
            n_cases: int) -> list[list[Event]]:
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
    results: list[list[tuple[bytes, int, Any]]] = [[] for _ in range(n_cases)]
    for batch_rows in collected.values():
        for case, ord_, chan, kind, data in batch_rows:
            if kind == KIND_TUPLE:
                results[case].append((ord_, chan, decode(data)))
    return [_events(per_case) for per_case in results]


def replay_locally(runs: Sequence[tuple[Case, str]], rows_per_batch: int = 64) -> list[list[Event]]:
    """The same replay without Spark: rows cut into micro-batches, each key group's state
    encoded and decoded between them as the state store would. For fast tests of the hosting."""
    graphs, rows = _cases_as_rows(runs)
    by_case = _ByCase(graphs)
    states: dict[tuple[int, int], bytes] = {}
    results: list[list[tuple[bytes, int, Any]]] = [[] for _ in runs]
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


def _parsed(cases: Sequence[Mapping[str, Any] | Case], flavor: str) -> list[tuple[Case, str]]:
    return [(c if isinstance(c, Case) else parse_case(c), flavor) for c in cases]


def run_cases_on_spark(cases: Sequence[Mapping[str, Any] | Case], flavor: str = "java", *,
                       spark: Any = None, rows_per_batch: int = 64) -> list[list[dict[str, Any]]]:
    """`replay_on_spark` for cases of one flavor; each case's records as `riverbed trace` prints them."""
    runs = _parsed(cases, flavor)
    results = replay_on_spark(runs, spark=spark, rows_per_batch=rows_per_batch)
    return [trace_records(case, events) for (case, _), events in zip(runs, results, strict=True)]


def run_cases_locally(cases: Sequence[Mapping[str, Any] | Case], flavor: str = "java",
                      rows_per_batch: int = 64) -> list[list[dict[str, Any]]]:
    """`replay_locally` for cases of one flavor; each case's records as `riverbed trace` prints them."""
    runs = _parsed(cases, flavor)
    results = replay_locally(runs, rows_per_batch=rows_per_batch)
    return [trace_records(case, events) for (case, _), events in zip(runs, results, strict=True)]
