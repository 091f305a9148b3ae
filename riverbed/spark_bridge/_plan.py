"""How a frozen graph becomes one Spark query, decided before anything is deployed.

Two shapes are exact:

- **driver**: every source runs in a feeder process (`_feeder`); all other operators run
  in the driver, per micro-batch (``foreachBatch``), with their state stored
  under the query's checkpoint by batch id. Any graph whose sources the
  bridge can host runs this way, unchanged: it is the reference.
- **keyed**: a windowed operator fed by one source through stateless
  single-port operators, then a straight line of keyed stages. The stateless
  operators before the first window run in the source's task and route each
  tuple to a key group (a hash of its partition key). A stage is a windowed
  operator and the operators after it that are stateless or windowed on the
  same partition key; each windowed operator keyed differently (another
  partition attribute, or none: one group) starts the next stage, whose input
  Spark repartitions by its key, all in one query: the first stage runs in
  ``applyInPandasWithState``, the later ones in ``transformWithStateInPandas``
  (Spark allows one of the former per query). Marks, watermarks and time are
  copied to every key group of every stage, and each stage merges its
  predecessor's groups as parallel channels (E30). Sinks and everything else
  run in the driver stage.

``mode="auto"`` takes keyed where it is exact and says why not otherwise;
``mode="keyed"`` refuses a graph it cannot key, naming the operator and why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..graph import Connection, FrozenGraph, InputPort, Operator, OperatorDef, Source
from ..windows import Punct as PunctPolicy
from ..windows import TimeIntervalSpec, WindowSpec
from ._errors import TranslationError
from ._outputs import SparkWriter
from ._reads import ReadPlan, read_plan

__all__ = ["Plan", "plan"]

Mode = Literal["auto", "driver", "keyed"]


@dataclass
class Stage:
    """A keyed stage: ``members`` (its windowed operator first) run per key group, fed by the
    stream ``entry``; ``groups`` key groups (1 when the window spans its partitions: ``one``
    says why)."""

    members: list[str]
    entry: tuple[str, int]
    groups: int
    one: str | None = None


@dataclass
class Plan:
    graph: FrozenGraph
    mode: Literal["driver", "keyed"]
    sources: list[str]
    pre_chain: list[str] = field(default_factory=list)  # keyed: stateless ops before the window
    keyed: str | None = None  # keyed: the windowed operator
    keyed_chain: list[str] = field(default_factory=list)  # keyed: operators after it, same groups
    groups: int = 1
    later: list[Stage] = field(default_factory=list)  # keyed: the stages after the first, in order
    # keyed Join: stream i of the (merged) source rows enters the first stage at entries[i]
    entries: list[tuple[str, int]] = field(default_factory=list)
    driver: list[str] = field(default_factory=list)
    reads: dict[str, ReadPlan] = field(default_factory=dict)  # sources Spark's tasks read in parts
    feeder: dict[str, str] = field(default_factory=dict)  # sources run by the feeder -> why there
    notes: dict[str, str] = field(default_factory=dict)  # operator -> how it was translated
    why_not_keyed: str | None = None

    @property
    def group_read(self) -> ReadPlan | None:
        """The source's read plan when the first stage's key groups read it themselves
        (`_group_reads`); None otherwise."""
        read = self.reads.get(self.sources[0]) if self.sources else None
        return read if read is not None and read.grouped else None

    @property
    def stages(self) -> list[Stage]:
        """Every keyed stage, the first included (empty in driver mode)."""
        if self.keyed is None:
            return []
        first = self.pre_chain[-1] if self.pre_chain else self.sources[0]
        return [Stage([self.keyed, *self.keyed_chain], (first, 0), self.groups), *self.later]

    def where(self, name: str) -> str:
        """Where operator ``name`` runs: ``feeder``, ``parallel read`` (Spark's tasks read the
        source in parts), ``source task``, ``stage <n>`` (keyed, on the executors), ``spark``
        (a SparkInput's stream) or ``driver``."""
        op = self.graph.operator(name)
        if op.kind == "source":
            if name in self.reads:
                return "parallel read"
            return "feeder" if name in self.feeder else "spark"
        if any(r.reader == name for r in self.reads.values()):
            return "parallel read"
        if name in self.pre_chain:
            return "source task"
        for n, stage in enumerate(self.stages, 1):
            if name in stage.members:
                return f"stage {n}"
        return "driver"

    def explain(self) -> str:
        stages = self.stages
        head = f"graph {self.graph.name!r}: {self.mode} mode"
        if stages:
            head += f", {len(stages)} keyed stage{'s' if len(stages) > 1 else ''} on the executors"
        lines = [head]
        if self.why_not_keyed:
            lines.append(f"  (not keyed: {self.why_not_keyed})")
        for op in self.graph.operators:
            where = self.where(op.name)
            tag = {"feeder": "[feeder]", "source task": "[executors, source task]",
                   "parallel read": "[executors, parallel read]",
                   "spark": "[executors, Spark stream]",
                   "driver": "[driver]"}.get(where, f"[executors, {where}]")
            lines.append(f"  {op.name} {tag}: {self.notes.get(op.name, '?')}")
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


def _refuse_reader(op: OperatorDef) -> str | None:
    """Why operator ``op``, not a source, cannot run on Spark (None: it can): a FileSource
    reading the files named by its input that deletes or moves each one once read. Spark runs a
    micro-batch again after a failure (a task, or the driver stage's logged batch), and the
    files the first run took away are gone (a restart failed for ever: "cannot open ...")."""
    from ..operators import FileSourceWithInput

    src = op.operator
    if not isinstance(src, FileSourceWithInput):
        return None
    if src.delete_file:
        what = "delete_file=True deletes"
    elif src.move_file_to_directory is not None:
        what = f"move_file_to_directory={src.move_file_to_directory!r} moves"
    else:
        return None
    return (f"FileSource with {what} each file once read, so it is not replayable: Spark replays "
            "a micro-batch after a failure, and the replay could not find the file again; read the "
            "files in place on Spark (and remove them after the run)")


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
    problems += [(op.name, why) for op in graph.operators if op.kind != "source"
                 and (why := _refuse_reader(op)) is not None]
    for op in graph.operators:
        if any(c.feedback for p in op.inputs for c in p.connections):
            problems.append((op.name, "a feedback connection (a cycle) has no Spark translation: a "
                                      "Structured Streaming query is acyclic"))
    if problems:
        name, why = problems[0]
        raise TranslationError(name, why + "".join(f"; and operator {other!r}: {also}"
                                                   for other, also in problems[1:]))
    for op in graph.operators:
        if op.kind == "source" and not isinstance(op.operator, Source):
            raise TranslationError(op.name, "not a riverbed Source")
    p = Plan(graph, "driver", sources)
    only = len(sources) == 1 and not inputs
    for name in sources:
        if name in inputs:
            continue
        how = read_plan(graph, name, only_source=only)
        if isinstance(how, ReadPlan):
            p.reads[name] = how
            p.notes[name] = (f"riverbed source read by Spark: {how.why}; the parts (described in "
                             "Parquet files that Spark's file source reads, a micro-batch each) "
                             "spread over the tasks by repartition")
            if how.reader is not None:
                p.notes[how.reader] = (f"reads each file {name!r} reports, in the task reading "
                                       "that file (its output is the stream Spark reads)")
        else:
            p.feeder[name] = how
            p.notes[name] = ("riverbed source: runs in a feeder process on a virtual clock, each "
                             "item stamped with its time, order and watermark, published as "
                             f"Parquet files that Spark's file source reads; in one place because: "
                             f"{how}")
    for name in inputs:
        p.notes[name] = ("a Spark stream (SparkInput): rows turned into tuples in Spark's tasks, "
                         "submitted by this source in the driver stage in the stream's order (an "
                         "MQTT subscription has one reader: one session delivers its messages in "
                         "one order, which readers sharing a subscription would not keep)")
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
    if p.keyed is not None and len(sources) == 1 and p.sources[0] in p.feeder:
        _group_reads(graph, p)
    readers = {r.reader for r in p.reads.values()}
    p.driver = [name for name in p.driver if name not in readers]
    for name in p.driver:
        op = graph.operator(name)
        window = "; windows " + ", ".join(repr(_describe_window(i.window)) for i in op.inputs if i.windowed) \
            if any(i.windowed for i in op.inputs) else ""
        p.notes[name] = (f"driver stage (foreachBatch; state stored per batch id){window}; "
                         f"{_why_driver(p, op)}")
        if isinstance(op.operator, SparkWriter):
            out = op.operator.output
            p.notes[name] += (f"; Spark's {out.format} writer (SparkOutput): each commit's tuples "
                              f"to {out.path}/commit=<n>, rows {op.operator.ddl}")
    return p


def _group_reads(graph: FrozenGraph, p: Plan) -> None:
    """An event-time ParquetSource feeding the first keyed stage: read by the key groups
    themselves where that is exact (`_group_reads`), else it stays in the feeder, saying why."""
    from ..operators import ParquetSource
    from ._group_reads import group_read_plan

    name = p.sources[0]
    if not isinstance(graph.operator(name).operator, ParquetSource):
        return
    assert p.keyed is not None
    why = group_read_plan(graph, name, p.keyed, pre_chain=bool(p.pre_chain), join=bool(p.entries))
    if why is not None:
        p.notes[name] += f"; not read by the key groups themselves: {why}"
        return
    del p.feeder[name]
    p.reads[name] = ReadPlan(name, (name, 0), None, False, "read by each key group", grouped=True)
    p.notes[name] = ("riverbed source read by each key group of the first stage in its own task: "
                     "the event-time column planned at deployment (the watermarks placed as the "
                     "runtime places them), each group reading a part's columns and keeping its "
                     "own keys' rows; no feeder process and no shuffle")


def _why_driver(p: Plan, op: OperatorDef) -> str:
    """Why ``op`` runs in the driver, naming what decided it."""
    if p.mode == "driver":
        return f"why: the whole graph runs in the driver ({p.why_not_keyed or 'mode=driver was asked'})"
    if op.kind == "sink":
        return "why: a sink (its effects happen once, in one place: the driver)"
    if isinstance(op.operator, SparkWriter):
        return "why: a Spark writer"
    last = p.stages[-1].members[-1]
    return (f"why: it is not on the straight line of keyed stages (after {last!r}, the line ends "
            "at a branch, a sink, an error port or an operator with several inputs); the driver "
            "stage merges the key groups' streams for it")


def _preserving(graph: FrozenGraph, members: list[str]) -> bool:
    """Whether every window mark out of a stage is a copy each of its groups forwards."""
    return all(graph.operator(m).operator.window_punctuation == "preserving" for m in members)


def _punct_window(op: OperatorDef) -> bool:
    return any(isinstance(i.window, WindowSpec) and "punct" in i.window.clause() for i in op.inputs)


def _keyable(graph: FrozenGraph, p: Plan, groups: int) -> tuple[str | None, str] | None:
    """Fill ``p`` for keyed mode; return (operator, why) when the graph cannot be keyed."""
    windowed = [op for op in graph.operators if any(i.windowed for i in op.inputs)]
    if not windowed:
        return None, "no windowed operator: nothing to key"
    w = windowed[0]
    chain: list[str] = []
    if len(w.inputs) != 1:
        why = _joinable(graph, w, p.sources)
        if why is not None:
            return w.name, why
        p.entries = [(name, 0) for name in p.sources]
        upstream: tuple[Connection, ...] = ()
    elif len(p.sources) != 1:
        return None, f"{len(p.sources)} sources; keyed mode takes one (or two into a Join)"
    else:
        upstream = w.inputs[0].connections
    while upstream:
        if len(upstream) != 1:
            return w.name, "its input merges several streams"
        up = graph.operator(upstream[0].operator)
        if up.kind == "source":
            if len(graph.consumers(up.name, 0)) != 1:
                return up.name, ("its stream also feeds operators outside the keyed stage; only "
                                 "the driver stage sees every row")
            break
        if any(r.reader == up.name for r in p.reads.values()):
            return up.name, ("reads the files a DirectoryScan reports (Spark's tasks read them in "
                             "parallel): keyed stages start from a source's own stream")
        if not _stateless(up):
            return up.name, ("sits between the source and the window but is not a stateless "
                             "single-port operator (state, punctuation handling or an error port)")
        if len(graph.consumers(up.name, 0)) != 1 or len(up.outputs) != 1:
            return up.name, "its output also feeds other operators"
        chain.insert(0, up.name)
        upstream = up.inputs[0].connections
    stages: list[Stage] = []
    entry = (chain[-1] if chain else p.sources[0], 0)
    nxt: OperatorDef | None = w
    while nxt is not None:
        inp = nxt.inputs[0]
        one = "unpartitioned window: one key group" if inp.partition_by is None else _spans(inp)
        if p.entries and nxt is w:  # a Join, keyed by its equality keys
            one = None
        g = 1 if one else groups
        if stages and stages[-1].groups > 1 and _punct_window(nxt) \
                and not _preserving(graph, stages[-1].members):
            return nxt.name, ("a punct() window after a keyed stage whose groups make their own "
                              "window marks: those have no order across groups")
        stages.append(Stage([nxt.name, *_co_partitioned(graph, nxt, g)], entry, g, one))
        entry = (stages[-1].members[-1], 0)
        nxt = _next_window(graph, stages[-1].members[-1])
    hosted = {m for s in stages for m in s.members}
    rest = [op.name for op in windowed if op.name not in hosted]
    if rest:
        return rest[0], (f"{len(windowed)} windowed operators; keyed stages host a straight line of "
                         "single-port windowed operators after the source (with the stateless "
                         "ones between them), and this one is not on it")
    last = stages[-1]
    if last.groups > 1 and not _preserving(graph, last.members):
        for op in graph.operators:
            if op.name not in hosted and op.name not in chain and op.kind != "source" \
                    and _punct_window(op):
                return op.name, ("a punct() window after the keyed stages: the last stage's groups "
                                 "make their own window marks, which have no order across groups")
    first = stages[0]
    p.pre_chain, p.keyed, p.keyed_chain, p.groups = chain, first.members[0], first.members[1:], first.groups
    p.later = stages[1:]
    p.driver = [op.name for op in graph.operators
                if op.kind != "source" and op.name not in (*hosted, *chain)]
    for name in chain:
        p.notes[name] = ("stateless (it snapshots nothing: state kept in plain attributes would "
                         "start over in each task): runs in the source's task (mapInPandas), "
                         "before the key routing")
    for n, stage in enumerate(stages, 1):
        head = graph.operator(stage.members[0])
        inp = head.inputs[0]
        key = inp.partition_by if isinstance(inp.partition_by, str) else "a key function"
        by = ("a constant (no key: one group)" if inp.partition_by is None
              else f"hash({key}) mod {stage.groups}")
        spec = _describe_window(inp.window)
        if n == 1 and p.entries:
            how = ("a Join keyed by its equality keys: the sources' rows (one stream in order) "
                   "routed in the sources' task (mapInPandas), a tuple by its side's equality key "
                   f"mod {stage.groups}, marks copied to every group; then groupBy(group)"
                   ".applyInPandasWithState hosting windows "
                   + " and ".join(repr(_describe_window(i.window)) if i.windowed else "none (lookup)"
                                  for i in head.inputs)
                   + " and the operator; state in the RocksDB state store")
        elif n == 1:
            how = (f"groupBy({by}).applyInPandasWithState hosting window "
                   f"{spec!r} and the operator; state in the RocksDB state store")
        else:
            how = (f"repartitioned by its key: groupBy({by})."
                   f"transformWithStateInPandas hosting window {spec!r} and the operator, merging the "
                   f"{stages[n - 2].groups} key group(s) of stage {n - 1} as parallel channels "
                   "(final once all sent it, watermarks at their minimum, window marks "
                   + ("by count: copies" if _preserving(graph, stages[n - 2].members) else
                      "each: the groups make their own") + "); state in the RocksDB state store")
        p.notes[head.name] = f"keyed stage {n}: {how}" + (f" ({stage.one})" if stage.one else "")
        for name in stage.members[1:]:
            op = graph.operator(name)
            p.notes[name] = (f"keyed stage {n}, after {head.name!r} in the same key group"
                             + (f": window {_describe_window(op.inputs[0].window)!r}, assuming the "
                                "operators before it keep the key (checked as it runs: a tuple of "
                                "another group stops the query; --mode driver runs such a graph)"
                                if op.inputs[0].windowed else
                                ": stateless (it snapshots nothing: state kept in plain attributes "
                                "would start over in each key group and micro-batch)"))
    return None


def _joinable(graph: FrozenGraph, w: OperatorDef, sources: list[str]) -> str | None:
    """Why the Join ``w`` cannot be keyed by its equality keys (None: it can). Keyed, each group
    holds the window contents of its keys only: exact when a window's contents do not depend
    on other keys' tuples (a time eviction, or no window) and nothing comes out but what an
    arrival causes (an inner join: an outer one outputs unmatched tuples as time evicts them,
    in every group at once, with no order across groups)."""
    from ..operators import Join
    from ..windows import Time, WindowType

    op = w.operator
    if not isinstance(op, Join):
        return "a windowed operator with several input ports (not a Join) runs in the driver stage"
    if op.equality_keys is None:
        return "a Join without equality keys matches every pair: nothing to key it by"
    if op.algorithm != "inner":
        return (f"a {op.algorithm} Join outputs unmatched tuples when time evicts them, in every "
                "key group at once, with no order across groups; only an inner Join is keyed")
    if len(sources) != 2 or len(w.inputs) != 2:
        return "a keyed Join takes its two inputs straight from two sources"
    fed: list[str] = []
    for i, inp in enumerate(w.inputs):
        if len(inp.connections) != 1 or graph.operator(inp.connections[0].operator).kind != "source":
            return f"its input port {i} is not fed straight by one source"
        src = inp.connections[0].operator
        if len(graph.consumers(src, 0)) != 1:
            return f"source {src!r} also feeds other operators"
        fed.append(src)
        spec = inp.window
        if inp.windowed and not (isinstance(spec, WindowSpec) and spec.type is WindowType.SLIDING
                                 and isinstance(spec.eviction, Time) and not spec.partitioned):
            return (f"its port {i} window {_describe_window(spec)!r} holds tuples of every key "
                    "together (count or delta eviction, or partitions): a key group would hold "
                    "other contents; only unpartitioned sliding time windows (or none) are keyed")
    if sorted(fed) != sorted(sources):
        return "a keyed Join takes its two inputs straight from two sources"
    return None


def _next_window(graph: FrozenGraph, last: str) -> OperatorDef | None:
    """The single-port windowed operator that alone takes the stream of stage member ``last``
    (its only output), if there is one: it starts the next keyed stage."""
    cur = graph.operator(last)
    if len(cur.outputs) != 1 or cur.error_port is not None:
        return None
    consumers = graph.consumers(last, 0)
    if len(consumers) != 1:
        return None
    nxt = graph.operator(consumers[0][0])
    if (nxt.kind == "sink" or len(nxt.inputs) != 1 or len(nxt.inputs[0].connections) != 1
            or not nxt.inputs[0].windowed):
        return None
    return nxt


def _spans(inp: InputPort) -> str | None:
    """Why a partitioned window's behaviour spans its partitions (so it needs one key group)."""
    spec = inp.window
    if isinstance(spec, TimeIntervalSpec) and spec.discard_age > 0:
        return ("timeInterval window with discardAge: a partition first seen in a pane already "
                "complete gets no INITIAL_FULL (SPL E18), and whether the pane was complete "
                "depends on every partition's tuples: one key group")
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
