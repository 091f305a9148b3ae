"""How a frozen graph becomes one Spark query, decided before anything is deployed.

Two shapes are exact:

- **driver**: every source runs in a feeder process (`_feeder`); all other operators run
  in the driver, per micro-batch (``foreachBatch``), with their state stored
  under the query's checkpoint by batch id. Any graph whose sources the
  bridge can host runs this way, unchanged: it is the reference.
- **keyed**: one windowed operator, fed by one source through stateless
  single-port operators, and after it a straight line of operators that are
  stateless or windowed on the same partition key. The stateless ones before
  it run in the source's task and route each tuple to a key group (a hash of
  its partition key); the window and the line after it run per key group in
  Spark's ``applyInPandasWithState``, windows and state in the RocksDB
  state store; sinks and everything else run in the driver stage. Marks and
  watermarks are sent to every key group.

``mode="auto"`` takes keyed where it is exact and says why not otherwise;
``mode="keyed"`` refuses a graph it cannot key, naming the operator and why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..graph import FrozenGraph, InputPort, Operator, OperatorDef, Source
from ..windows import Punct as PunctPolicy
from ..windows import TimeIntervalSpec, WindowSpec
from ._errors import TranslationError
from ._outputs import SparkWriter

__all__ = ["Plan", "plan"]

Mode = Literal["auto", "driver", "keyed"]


@dataclass
class Plan:
    graph: FrozenGraph
    mode: Literal["driver", "keyed"]
    sources: list[str]
    pre_chain: list[str] = field(default_factory=list)  # keyed: stateless ops before the window
    keyed: str | None = None  # keyed: the windowed operator
    keyed_chain: list[str] = field(default_factory=list)  # keyed: operators after it, same groups
    groups: int = 1
    driver: list[str] = field(default_factory=list)
    notes: dict[str, str] = field(default_factory=dict)  # operator -> how it was translated
    why_not_keyed: str | None = None

    def explain(self) -> str:
        lines = [f"graph {self.graph.name!r}: {self.mode} mode"]
        if self.why_not_keyed:
            lines.append(f"  (not keyed: {self.why_not_keyed})")
        for op in self.graph.operators:
            lines.append(f"  {op.name}: {self.notes.get(op.name, '?')}")
        return "\n".join(lines)


def _refuse_source(op: OperatorDef) -> str | None:
    """Why source ``op`` cannot run in a feeder process for Spark (None: it can)."""
    src = op.operator
    cls = type(src).__name__
    if cls == "MQTTSource":
        return ("MQTTSource waits on a broker; on Spark read MQTT with "
                "riverbed.spark_bridge.mqtt_source (a replayable Spark source)")
    if cls == "DirectoryScan" and getattr(src, "scans", None) is None:
        return "DirectoryScan without scans= polls forever; give scans=N for a Spark deployment"
    if getattr(src, "hot_file", False):
        return f"{cls} with hot_file=True tails a file forever; Spark needs a source that ends or replays"
    if not getattr(src, "replayable", False) and cls not in ("ListSource",):
        return (f"{cls} is not replayable: Spark replays a micro-batch after a failure, so its "
                "source must produce the same items again (set replayable = True if it does)")
    return None


def _stateless(op: OperatorDef) -> bool:
    """One plain input port, nothing to snapshot, punctuation left to the host: such an operator
    can run in whichever task holds a row, with a fresh instance per micro-batch."""
    o = op.operator
    if (len(op.inputs) != 1 or op.inputs[0].windowed or op.error_port is not None
            or op.event_time is not None  # it generates watermarks: state across batches
            or type(o).on_punct is not Operator.on_punct
            or getattr(o, "window_punctuation", "preserving") != "preserving"):
        return False
    if type(o).snapshot is Operator.snapshot:
        return True
    try:
        return o.snapshot() is None  # e.g. a Functor without state or logic
    except Exception:
        return False  # its state needs setup to be read: it has some


def _describe_window(spec: WindowSpec | TimeIntervalSpec | None) -> str:
    if spec is None:
        return ""
    return spec.clause() if hasattr(spec, "clause") else str(spec)


def plan(graph: FrozenGraph, mode: Mode = "auto", *, groups: int = 2,
         inputs: set[str] | frozenset[str] = frozenset()) -> Plan:
    """Decide the translation; raise `TranslationError` for what has none.

    ``inputs`` names sources whose stream Spark reads instead (`SparkInput`).
    """
    sources = [op.name for op in graph.operators if op.kind == "source"]
    unknown = inputs - set(sources)
    if unknown:
        raise TranslationError(sorted(unknown)[0], "an input was given for it, but it is not a "
                                                   "source of the graph")
    problems = [(op.name, why) for op in graph.operators if op.kind == "source"
                and op.name not in inputs if (why := _refuse_source(op)) is not None]
    for op in graph.operators:
        if any(c.feedback for p in op.inputs for c in p.connections):
            problems.append((op.name, "a feedback connection (a cycle) has no Spark translation: a "
                                      "Structured Streaming query is acyclic"))
    if problems:
        name, why = problems[0]
        raise TranslationError(name, why + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
    for op in graph.operators:
        if op.kind == "source" and not isinstance(op.operator, Source):
            raise TranslationError(op.name, "not a riverbed Source")
    p = Plan(graph, "driver", sources)
    for name in sources:
        p.notes[name] = ("riverbed source: runs in a feeder process on a virtual clock, each item "
                         "stamped with its time, order and watermark, published as Parquet files "
                         "that Spark's file source reads")
    for name in inputs:
        p.notes[name] = ("a Spark stream (SparkInput): rows turned into tuples in Spark's tasks, "
                         "submitted by this source in the driver stage in the stream's order")
    keyed_why = _keyable(graph, p, groups) if not inputs else \
        (None, "a source is read by Spark (SparkInput): the driver stage submits its tuples")
    if mode == "keyed" and keyed_why is not None:
        raise TranslationError(keyed_why[0], f"cannot run keyed: {keyed_why[1]}")
    if mode not in ("auto", "driver", "keyed"):
        raise TranslationError(None, f"mode {mode!r}: expected 'auto', 'driver' or 'keyed'")
    if mode != "driver" and keyed_why is None:
        p.mode = "keyed"
    else:
        if mode != "driver" and keyed_why is not None:
            where, why = keyed_why
            p.why_not_keyed = f"{where}: {why}" if where else why
        p.pre_chain, p.keyed, p.keyed_chain, p.groups = [], None, [], 1
        p.driver = [op.name for op in graph.operators if op.kind != "source"]
    for name in p.driver:
        op = graph.operator(name)
        window = "; windows " + ", ".join(repr(_describe_window(i.window)) for i in op.inputs if i.windowed) \
            if any(i.windowed for i in op.inputs) else ""
        p.notes[name] = f"driver stage (foreachBatch; state stored per batch id){window}"
        if isinstance(op.operator, SparkWriter):
            out = op.operator.output
            p.notes[name] += (f"; Spark's {out.format} writer (SparkOutput): each commit's tuples "
                              f"to {out.path}/commit=<n>, rows {op.operator.ddl}")
    return p


def _keyable(graph: FrozenGraph, p: Plan, groups: int) -> tuple[str | None, str] | None:
    """Fill ``p`` for keyed mode; return (operator, why) when the graph cannot be keyed."""
    windowed = [op for op in graph.operators if any(i.windowed for i in op.inputs)]
    if not windowed:
        return None, "no windowed operator: nothing to key"
    w = windowed[0]
    if len(w.inputs) != 1:
        return w.name, "a windowed operator with several input ports (Join) runs in the driver stage"
    if len(p.sources) != 1:
        return None, f"{len(p.sources)} sources; keyed mode takes one"
    chain: list[str] = []
    upstream = w.inputs[0].connections
    while True:
        if len(upstream) != 1:
            return w.name, "its input merges several streams"
        up = graph.operator(upstream[0].operator)
        if up.kind == "source":
            if len(graph.consumers(up.name, 0)) != 1:
                return up.name, ("its stream also feeds operators outside the keyed stage; only "
                                 "the driver stage sees every row")
            break
        if not _stateless(up):
            return up.name, ("sits between the source and the window but is not a stateless "
                             "single-port operator (state, punctuation handling or an error port)")
        if len(graph.consumers(up.name, 0)) != 1 or len(up.outputs) != 1:
            return up.name, "its output also feeds other operators"
        chain.insert(0, up.name)
        upstream = up.inputs[0].connections
    spec = w.inputs[0].window
    inp = w.inputs[0]
    one_group = "unpartitioned window: one key group" if inp.partition_by is None else _spans(inp)
    g = 1 if one_group else groups
    after = _co_partitioned(graph, w, g)
    hosted = {w.name, *after}
    rest = [op.name for op in windowed if op.name not in hosted]
    if rest:
        return rest[0], (f"{len(windowed)} windowed operators; keyed mode hosts one, with the "
                         "operators after it that keep its partition key (this one is not among them)")
    if g > 1:
        for op in graph.operators:
            if op.name in (*hosted, *chain) or op.kind == "source":
                continue
            for i in op.inputs:
                if isinstance(i.window, WindowSpec) and "punct" in i.window.clause():
                    return op.name, ("a punct() window after the keyed stage: window marks are per "
                                     "key group there and have no order across groups")
    p.pre_chain, p.keyed, p.keyed_chain, p.groups = chain, w.name, after, g
    p.driver = [op.name for op in graph.operators
                if op.kind != "source" and op.name not in (*hosted, *chain)]
    for name in after:
        op = graph.operator(name)
        p.notes[name] = (f"keyed stage, after {w.name!r} in the same key group"
                         + (f": window {_describe_window(op.inputs[0].window)!r} on the same key"
                            if op.inputs[0].windowed else ": stateless"))
    for name in chain:
        p.notes[name] = "stateless: runs in the source's task (mapInPandas), before the key routing"
    key = inp.partition_by if isinstance(inp.partition_by, str) else "a key function"
    p.notes[w.name] = (f"keyed stage: groupBy(hash({key}) mod {g}).applyInPandasWithState hosting "
                       f"window {_describe_window(spec)!r} and the operator; state in the RocksDB "
                       "state store" + (f" ({one_group})" if one_group else ""))
    return None


def _spans(inp: InputPort) -> str | None:
    """Why a partitioned window's behaviour spans its partitions (so it needs one key group)."""
    spec = inp.window
    if not isinstance(spec, WindowSpec):
        return None
    if spec.partition_eviction is not None:
        return "partition eviction counts across all partitions: one key group"
    if inp.flavor == "cpp" and spec.uses_system_time:
        return "cpp time window: its timers flush a default partition window-wide: one key group"
    if inp.flavor == "cpp" and isinstance(spec.eviction, PunctPolicy):
        return ("cpp punct window: a mark finding no tuple in any partition raises one empty-window "
                "event: one key group")
    return None


def _co_partitioned(graph: FrozenGraph, w: OperatorDef, groups: int) -> list[str]:
    """The operators after ``w`` that can share its key groups: a straight line of single-port
    operators, each stateless or windowed on the same partition attribute (its tuples must keep
    the key; the host checks that at run time), up to the first sink or branch."""
    key = w.inputs[0].partition_by
    out: list[str] = []
    cur = w
    while len(cur.outputs) == 1 and cur.error_port is None:
        consumers = graph.consumers(cur.name, 0)
        if len(consumers) != 1:
            break
        nxt = graph.operator(consumers[0][0])
        if nxt.kind == "sink" or len(nxt.inputs) != 1 or len(nxt.inputs[0].connections) != 1:
            break
        inp = nxt.inputs[0]
        if inp.windowed:
            if groups > 1 and (not isinstance(key, str) or inp.partition_by != key):
                break
            if _spans(inp) is not None:
                break
        elif not _stateless(nxt):
            break
        out.append(nxt.name)
        cur = nxt
    return out
