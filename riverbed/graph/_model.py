"""The graph: operators connected by streams, built by a script and frozen before it runs.

`Graph` is the builder a user script calls (``source``, ``operator``,
``sink``). `Graph.freeze` validates it and returns a `FrozenGraph`: plain
frozen dataclasses naming operators, ports and connections, which is what the
asyncio runtime executes and what the Spark bridge translates. Nothing here
knows how a graph is executed.

`Graph.declared` reads back what a script declared, valid or not, as a
`DeclaredGraph` of immutable records; a graph that fails `freeze` raises
`InvalidGraphError`, which carries that declaration. Tools that show a graph
(``riverbed graph`` draws an invalid one with its errors) read it there rather
than the builder's private state.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Literal

from ..windows import TimeIntervalSpec, WindowError, WindowSpec, parse_window_clause, seconds_to_ns
from ._errors import GraphError, GraphValidationError
from ._names import is_name
from ._operator import Operator, Source
from ._parallel import ParallelBlock, ParallelRegion, parallel_spec, process_spec, resolve_parallel
from ._regions import ConsistentRegion, region_spec
from ._schema import Schema

__all__ = [
    "INBOX_BATCHES",
    "Connection",
    "DeclaredGraph",
    "DeclaredOperator",
    "DeclaredPort",
    "EventTime",
    "FrozenGraph",
    "Graph",
    "InputPort",
    "InvalidGraphError",
    "OperatorDef",
    "PortInput",
    "Stream",
]

OperatorKind = Literal["source", "operator", "sink"]
PartitionBy = str | Callable[[Any], Hashable]

NS_PER_SECOND = 1_000_000_000

# Batches an operator's inbox holds in one process unless its ``queue_batches`` says otherwise.
# A producer runs ahead until it fills, so what it holds is read again after everything the
# producer did meanwhile: 8 keeps a thousand-tuple batch in the caches until its consumer takes
# it (the stateless chain 4 % faster than with 16; 1 and 2 switch tasks too often).
INBOX_BATCHES = 8


@dataclass(frozen=True, slots=True)
class EventTime:
    """SPL ``@eventTime``: where event time comes from and how watermarks are generated.

    ``lag`` and ``minimum_gap`` are seconds (E26 defaults: 0.0 and 0.1),
    held as integer nanoseconds; ``resolution`` gives the tick unit of the
    attribute (``ns`` for timestamps, ``ms``/``us``/``ns`` for integers).
    """

    attribute: str
    resolution: str = "ns"
    lag_ns: int = 0
    minimum_gap_ns: int = NS_PER_SECOND // 10
    manual: bool = False  # SPL "manual" mode: the operator sets watermarks itself (E28)

    @classmethod
    def of(cls, attribute: str, *, resolution: str = "ns", lag: float = 0.0,
           minimum_gap: float = 0.1, manual: bool = False) -> EventTime:
        if resolution not in ("ns", "us", "ms"):
            raise GraphError(None, "event-time", f"resolution {resolution!r}: expected 'ns', 'us' "
                                                 "or 'ms'")
        if lag < 0 or minimum_gap < 0:
            raise GraphError(None, "event-time", f"lag {lag} and minimum_gap {minimum_gap} must "
                                                 "be >= 0 seconds")
        return cls(attribute, resolution, seconds_to_ns(lag), seconds_to_ns(minimum_gap), manual)

    def ticks(self, ns: int) -> int:
        """A duration in ns converted to this attribute's ticks (truncating)."""
        return ns // {"ns": 1, "us": 1_000, "ms": 1_000_000}[self.resolution]


@dataclass(frozen=True, slots=True)
class Connection:
    """One stream feeding one input port: (upstream operator, its output port)."""

    operator: str
    port: int
    feedback: bool = False


@dataclass(frozen=True, slots=True)
class InputPort:
    """An input port: its connections and, if windowed, the window clause and partitioning."""

    connections: tuple[Connection, ...]
    window: WindowSpec | TimeIntervalSpec | None = None
    partition_by: PartitionBy | None = None
    flavor: str = "java"
    attribute_types: Mapping[str, str] | None = None  # delta typing when the stream has no schema

    @property
    def windowed(self) -> bool:
        return self.window is not None


@dataclass(frozen=True, slots=True)
class OperatorDef:
    """One operator of a frozen graph."""

    name: str
    operator: Operator
    kind: OperatorKind
    inputs: tuple[InputPort, ...]
    outputs: tuple[Schema | None, ...]
    event_time: EventTime | None = None
    error_port: int | None = None  # output port receiving failed tuples, if the user asked
    queue_batches: int | None = None  # None: the host's own (`INBOX_BATCHES` in one process)

    @property
    def inbox_batches(self) -> int:
        """The batches its inbox holds in one process: ``queue_batches``, else `INBOX_BATCHES`."""
        return self.queue_batches or INBOX_BATCHES


@dataclass(frozen=True, slots=True)
class FrozenGraph:
    """A validated graph: operators in topological order (feedback edges aside), and its
    consistent regions with their members resolved."""

    name: str
    operators: tuple[OperatorDef, ...]
    params: Mapping[str, Any] = field(default_factory=dict)
    regions: tuple[ConsistentRegion, ...] = ()
    parallel: tuple[ParallelRegion, ...] = ()  # parallel regions (`Graph.parallel`)
    # Built once: `operator` and `consumers` scanned every operator at each call, and wiring a
    # job asks once per output port (4,000 operators: 7 s to start).
    _by_name: dict[str, OperatorDef] = field(init=False, repr=False, compare=False)
    _consumers: dict[tuple[str, int], list[tuple[str, int]]] = field(init=False, repr=False,
                                                                     compare=False)

    def __post_init__(self) -> None:
        consumers: dict[tuple[str, int], list[tuple[str, int]]] = {}
        for op in self.operators:
            for i, inp in enumerate(op.inputs):
                for c in inp.connections:
                    consumers.setdefault((c.operator, c.port), []).append((op.name, i))
        object.__setattr__(self, "_by_name", {op.name: op for op in self.operators})
        object.__setattr__(self, "_consumers", consumers)

    def parallel_of(self, name: str) -> ParallelRegion | None:
        """The parallel region an operator runs in (None: it runs once, in the job's process)."""
        for region in self.parallel:
            if name in region.members:
                return region
        return None

    def region_of(self, name: str) -> ConsistentRegion | None:
        """The consistent region an operator belongs to (None: it runs autonomously)."""
        for region in self.regions:
            if name in region.members:
                return region
        return None

    def operator(self, name: str) -> OperatorDef:
        return self._by_name[name]

    def consumers(self, name: str, port: int) -> list[tuple[str, int]]:
        """The (operator, input port) pairs that a stream feeds."""
        return list(self._consumers.get((name, port), ()))

    def stream_schema(self, name: str, port: int) -> Schema | None:
        return self.operator(name).outputs[port]

    def input_schema(self, name: str, port: int) -> Schema | None:
        """The schema of the streams operator ``name``'s input ``port`` takes (its first
        connection's: the streams of one port carry one schema, rule ``fan-in-schema``)."""
        c = self.operator(name).inputs[port].connections[0]
        return self.stream_schema(c.operator, c.port)

    def guarantee(self) -> tuple[str, list[str]]:
        """What checkpointing can promise for this graph, and why not more.

        ``exactly-once``: every source replays and every sink is transactional;
        ``at-least-once``: sources replay, but some sink may repeat output after a
        restart; ``at-most-once``: some source cannot replay, so a crash loses
        what it had emitted after the last checkpoint.
        """
        reasons = [f"source {op.name!r} cannot replay" for op in self.operators
                   if op.kind == "source" and not getattr(op.operator, "replayable", False)]
        if reasons:
            return "at-most-once", reasons
        reasons = [f"sink {op.name!r} is not transactional" for op in self.operators
                   if op.kind == "sink" and not op.operator.transactional]
        return ("at-least-once" if reasons else "exactly-once"), reasons


@dataclass(frozen=True, slots=True)
class DeclaredPort:
    """An input port as the script declared it: the streams into it and its window clause as
    given (SPL text not yet parsed, or a spec). Nothing is checked: the stream may come from
    an operator that does not exist, the clause may not parse."""

    connections: tuple[Connection, ...]
    window: str | WindowSpec | TimeIntervalSpec | None = None
    partition_by: PartitionBy | None = None
    flavor: str = "java"
    attribute_types: Mapping[str, str] | None = None

    @property
    def feedback(self) -> bool:
        return any(c.feedback for c in self.connections)


@dataclass(frozen=True, slots=True)
class DeclaredOperator:
    """An operator as the script declared it. ``outputs`` holds one schema (or None) per
    output port, the error port included when asked for (``error_port`` is its index)."""

    name: str
    kind: OperatorKind
    operator: Operator
    inputs: tuple[DeclaredPort, ...]
    outputs: tuple[Schema | None, ...]
    error_port: int | None = None
    event_time: EventTime | None = None
    queue_batches: int | None = None


@dataclass(frozen=True, slots=True)
class DeclaredGraph:
    """What a `Graph` declares, valid or not (`Graph.declared`): operators in the order they
    were added, the consistent regions as declared (their ``start`` operators; ``members``
    are resolved only by `Graph.freeze`), the autonomous operators, and the parallel regions
    with the operators put in them."""

    name: str
    params: Mapping[str, Any]
    operators: tuple[DeclaredOperator, ...]
    regions: tuple[ConsistentRegion, ...] = ()
    autonomous: frozenset[str] = frozenset()
    parallel: tuple[ParallelRegion, ...] = ()

    def operator(self, name: str) -> DeclaredOperator:
        for op in self.operators:
            if op.name == name:
                return op
        raise KeyError(name)


class InvalidGraphError(GraphValidationError):
    """What `Graph.freeze` raises for a graph that breaks rules: every error, as a
    `GraphValidationError`, and ``declared``, what the graph declared, so a tool can still
    show the graph the errors are in."""

    def __init__(self, failure: GraphValidationError, declared: DeclaredGraph) -> None:
        super().__init__(failure.graph, failure.errors)
        self.declared = declared


class Stream:
    """An output port of an operator in a graph being built; feed it to other operators."""

    __slots__ = ("_graph", "operator", "port")

    def __init__(self, graph: Graph, operator: str, port: int) -> None:
        self._graph = graph
        self.operator = operator
        self.port = port

    @property
    def schema(self) -> Schema | None:
        return self._graph._pending[self.operator]["outputs"][self.port]  # type: ignore[no-any-return]

    def window(self, clause: str | WindowSpec | TimeIntervalSpec, *,
               partition_by: PartitionBy | None = None, flavor: str = "java",
               attribute_types: Mapping[str, str] | None = None) -> PortInput:
        """This stream into a windowed input port (an SPL ``window`` clause).

        ``attribute_types`` gives SPL types of the attributes delta policies
        use, for a stream without a declared schema (with one, the schema's
        types are used).
        """
        return PortInput((self,), clause, partition_by, flavor, attribute_types=attribute_types)

    def feedback(self) -> PortInput:
        """This stream as a feedback connection: it may close a cycle."""
        return PortInput((self,), None, None, "java", feedback=True)

    def __repr__(self) -> str:
        return f"Stream({self.operator}.out[{self.port}])"


@dataclass(frozen=True)
class PortInput:
    """What feeds one input port while building: streams, and optionally a window."""

    streams: tuple[Stream, ...]
    window: str | WindowSpec | TimeIntervalSpec | None = None
    partition_by: PartitionBy | None = None
    flavor: str = "java"
    feedback: bool = False
    attribute_types: Mapping[str, str] | None = None


PortArg = Stream | PortInput | Sequence[Stream]


class Graph:
    """Builds a graph: ``g.source(...)``, ``g.operator(...)``, ``g.sink(...)``, then `freeze`.

    Each method returns the operator's output streams (one `Stream`, or a
    tuple when it has several ports). Errors that can be told at once (a bad
    name, a bad clause) raise `GraphError` immediately; the rest are found by
    `freeze`, which lists every broken rule.
    """

    def __init__(self, name: str, params: Mapping[str, Any] | None = None) -> None:
        if not is_name(name):
            raise GraphError(None, "name", f"graph name {name!r}: use letters, digits, _ . -")
        self.name = name
        # The caller's own dict, not a copy: `riverbed run` hears which -p the graph read (a
        # region's ``width``), to name a misspelled one (``-p widht=1`` ran at the CPU count).
        self.params = params if isinstance(params, dict) else dict(params or {})
        self._pending: dict[str, dict[str, Any]] = {}
        self._regions: list[ConsistentRegion] = []
        self._autonomous: set[str] = set()
        self._parallel: list[ParallelBlock] = []
        self._parallel_open: ParallelBlock | None = None

    def parallel(self, width: int | None = None, partition_by: PartitionBy | None = None, *,
                 name: str | None = None, processes: int | None = None) -> ParallelBlock:
        """SPL ``@parallel``: ``with g.parallel(width, partition_by="sensor"):`` makes the
        operators added in the block (one operator or a chain) a parallel region of ``width``
        channels, each in a worker process of its own when the asyncio runtime runs the graph.

        ``width`` None: the graph's ``width`` parameter (``-p width=4``), else the CPU count.
        ``partition_by`` (an attribute or a function of a tuple) sends each key to one channel,
        by a stable hash, so its tuples stay in order and partitioned windows behave as with
        width 1; None deals tuples to the channels in turn (round-robin).

        ``processes``: at most this many worker processes host the channels (None: the graph's
        ``processes`` parameter, else the CPU count); on 2 cores, width 4 runs as two processes
        of two channels each, every channel unchanged.
        """
        spec = parallel_spec(name or f"parallel{len(self._parallel)}", width, partition_by,
                             self.params, processes)
        block = ParallelBlock(spec, _graph=self)
        self._parallel.append(block)
        return block

    def process(self, name: str | None = None) -> ParallelBlock:
        """Placement (SPL ``partitionColocation`` / ``partitionIsolation``): ``with
        g.process("slow"):`` runs the operators added in the block together in one worker
        process of their own, so a slow operator there does not stall the rest of the job (which
        goes on in the job's process, and in other groups' processes). ``g.process().add(s)``
        isolates an operator added earlier, and ``g.process("slow").add(s)`` puts it into the
        group of that name (a name names one group: it made a second one, refused at freeze).
        Operators in no group run in the job's process.

        A group is hosted as a parallel region of width 1 (the same transport, bounded queues,
        checkpoints and restarts); a source in a group runs in its process too.
        """
        if name is not None:  # the group of that name, again: ``g.process("slow").add(op)``
            for block in self._parallel:
                if block.spec.name == name and block.spec.process:
                    return block
        spec = process_spec(name or f"process{len(self._parallel)}")
        block = ParallelBlock(spec, _graph=self)
        self._parallel.append(block)
        return block

    def consistent_region(self, start: Stream | str | Sequence[Stream | str], *,
                          name: str | None = None, **params: Any) -> ConsistentRegion:
        """SPL ``@consistent``: the operators reachable from the ``start`` sources (streams or
        operator names) form a consistent region, checkpointed and reset together.

        ``trigger="periodic"`` with ``period`` (seconds) or ``"operator_driven"`` (a source's
        ``make_consistent``); ``drain_timeout``, ``reset_timeout`` (seconds, default 180) and
        ``max_consecutive_reset_attempts`` (default 5); SPL's names (``drainTimeout``...)
        too. Members are resolved by `freeze`; `autonomous` operators are left out.
        """
        items = [start] if isinstance(start, Stream | str) else list(start)
        names = tuple(dict.fromkeys(s.operator if isinstance(s, Stream) else s for s in items))
        spec = region_spec(name or f"region{len(self._regions)}", names, params)
        self._regions.append(spec)
        return spec

    def autonomous(self, operator: Stream | str) -> None:
        """SPL ``@autonomous``: this operator, and what only it reaches, is in no region."""
        self._autonomous.add(operator.operator if isinstance(operator, Stream) else operator)

    def source(self, name: str, operator: Source, *, schema: Schema | Mapping[str, str] | None = None,
               event_time: str | EventTime | None = None, lag: float = 0.0,
               minimum_gap: float = 0.1, resolution: str | None = None,
               manual_watermarks: bool = False) -> Stream:
        """A source with one output stream; ``event_time`` names the attribute carrying event
        time (SPL ``@eventTime``), which makes watermarks flow from this source: each tuple's
        event time minus ``lag`` (seconds), sent when it exceeds the last one sent by at least
        ``minimum_gap`` (seconds). With ``manual_watermarks`` the source sets them itself
        (``context.set_watermark``)."""
        et: EventTime | None
        if isinstance(event_time, str):
            res = resolution or _default_resolution(_as_schema(name, schema), event_time)
            et = EventTime.of(event_time, resolution=res, lag=lag, minimum_gap=minimum_gap,
                              manual=manual_watermarks)
        else:
            et = event_time
        streams = self._add(name, operator, "source", (), outputs=[schema], event_time=et,
                            error_port=False)
        return streams[0]

    def operator(self, name: str, operator: Operator, inputs: Iterable[PortArg],
                 outputs: Sequence[Schema | Mapping[str, str] | None] = (None,), *,
                 error_port: bool = False, event_time: EventTime | None = None,
                 queue_batches: int | None = None) -> Any:
        """An operator with input ports (one per item of ``inputs``) and output ports.

        ``outputs`` gives each output port's schema (None: undeclared). With
        ``error_port=True`` one more output stream carries the tuples whose
        processing raised, as ``{"operator", "port", "tuple", "error"}``
        dicts, instead of stopping the job (a window event that raised: each
        tuple it took out of the window, or one record with tuple None when its
        tuples stay, as after a sliding trigger). ``queue_batches``: how many batches
        its inbox holds before its producers wait (None: `INBOX_BATCHES`; as
        the first operator of a parallel region, the batches in flight to each
        channel's process, 16 when None, since each waits for a round trip).
        Returns one `Stream` when there is one output, else a tuple of them.
        """
        streams = self._add(name, operator, "operator", inputs, outputs=list(outputs),
                            event_time=event_time, error_port=error_port, queue_batches=queue_batches)
        return streams[0] if len(streams) == 1 else streams

    def sink(self, name: str, operator: Operator, inputs: Iterable[PortArg], *,
             error_port: bool = False, queue_batches: int | None = None) -> Stream | None:
        """An operator without output streams (except its error stream if asked)."""
        streams = self._add(name, operator, "sink", inputs, outputs=[], event_time=None,
                            error_port=error_port,
                            queue_batches=queue_batches)
        return streams[0] if streams else None

    def add_input(self, operator: str, arg: PortArg) -> None:
        """Give an operator added earlier one more input port: how a loop is closed.

        A stream from downstream makes a cycle, which `freeze` accepts only
        when the connection is marked ``stream.feedback()``.
        """
        entry = self._pending.get(operator)
        if entry is None:
            raise GraphError(operator, "input", "no such operator in the graph")
        if entry["kind"] == "source":
            raise GraphError(operator, "input", "a source has no input ports")
        entry["inputs"].append(self._port(operator, len(entry["inputs"]), arg))

    def _add(self, name: str, operator: Operator, kind: OperatorKind, inputs: Iterable[PortArg], *,
             outputs: list[Schema | Mapping[str, str] | None], event_time: EventTime | None,
             error_port: bool, queue_batches: int | None = None) -> tuple[Stream, ...]:
        if not isinstance(name, str) or not is_name(name):
            raise GraphError(str(name), "name", "operator names use letters, digits, _ . - and "
                                                "start with a letter or _")
        if name in self._pending:
            raise GraphError(name, "name", "an operator with this name is already in the graph")
        if not isinstance(operator, Operator):
            raise GraphError(name, "operator-type", f"{operator!r} is not a riverbed Operator "
                                                    "(subclass riverbed.Operator or Source)")
        if kind == "source" and not isinstance(operator, Source):
            raise GraphError(name, "operator-type", f"a source must be a Source, got "
                                                    f"{type(operator).__name__}")
        if queue_batches is not None and (type(queue_batches) is not int or queue_batches < 1):
            raise GraphError(name, "queue", f"queue_batches={queue_batches!r}: expected an int >= 1 "
                                            "(batches its inbox holds), or None for the host's default")
        schemas = [_as_schema(name, s) for s in outputs]
        if error_port:
            schemas.append(None)
        ports = [self._port(name, i, arg) for i, arg in enumerate(inputs)]
        if self._parallel_open is not None:
            self._parallel_open.members.append(name)  # a source: one replica per channel
        self._pending[name] = {
            "operator": operator, "kind": kind, "inputs": ports, "outputs": schemas,
            "event_time": event_time, "error_port": len(schemas) - 1 if error_port else None,
            "queue_batches": queue_batches,
        }
        return tuple(Stream(self, name, i) for i in range(len(schemas)))

    def _port(self, name: str, index: int, arg: PortArg) -> PortInput:
        if isinstance(arg, Stream):
            arg = PortInput((arg,))
        elif not isinstance(arg, PortInput):
            streams = tuple(arg)
            if not streams or not all(isinstance(s, Stream) for s in streams):
                raise GraphError(name, "input", f"input port {index}: expected a Stream, a list of "
                                                f"Streams or stream.window(...), got {arg!r}")
            arg = PortInput(streams)
        for s in arg.streams:
            if s._graph is not self:
                raise GraphError(name, "input", f"input port {index}: {s!r} belongs to another graph")
        return arg

    def declared(self) -> DeclaredGraph:
        """What the graph declares so far, valid or not, as immutable records (a snapshot:
        later builder calls do not change it)."""
        operators = tuple(
            DeclaredOperator(name, entry["kind"], entry["operator"],
                             tuple(_declared_port(p) for p in entry["inputs"]), tuple(entry["outputs"]),
                             entry["error_port"], entry["event_time"], entry["queue_batches"])
            for name, entry in self._pending.items())
        parallel = tuple(replace(b.spec, members=tuple(b.members)) for b in self._parallel)
        return DeclaredGraph(self.name, MappingProxyType(dict(self.params)), operators,
                             tuple(self._regions), frozenset(self._autonomous), parallel)

    def freeze(self) -> FrozenGraph:
        """Validate the graph; return it as frozen data or raise `InvalidGraphError` (a
        `GraphValidationError` that carries `declared`)."""
        from ._validate import freeze

        try:
            frozen = freeze(self)
            if not self._parallel:
                return frozen
            consistent = {n: r.name for r in frozen.regions for n in r.members}
            return resolve_parallel(frozen, self._parallel, consistent)
        except GraphValidationError as exc:
            raise InvalidGraphError(exc, self.declared()).with_traceback(exc.__traceback__) from None


def _declared_port(port: PortInput) -> DeclaredPort:
    return DeclaredPort(tuple(Connection(s.operator, s.port, port.feedback) for s in port.streams),
                        port.window, port.partition_by, port.flavor, port.attribute_types)


def _as_schema(name: str, schema: Schema | Mapping[str, str] | None) -> Schema | None:
    if schema is None or isinstance(schema, Schema):
        return schema
    if isinstance(schema, Mapping):
        return Schema(schema)
    raise GraphError(name, "schema", f"expected a Schema or a mapping of attribute types, got "
                                     f"{schema!r}")


def _default_resolution(schema: Schema | None, attribute: str) -> str:
    """SPL E26: a timestamp attribute is in ns; int64/uint64 default to milliseconds."""
    if schema is not None and schema.type_of(attribute) in ("int64", "uint64"):
        return "ms"
    return "ns"


def parse_port_window(operator: str, index: int, window: str | WindowSpec | TimeIntervalSpec
                      ) -> WindowSpec | TimeIntervalSpec:
    """A port's window clause parsed, its errors naming the operator and the port."""
    if isinstance(window, (WindowSpec, TimeIntervalSpec)):
        return window
    try:
        return parse_window_clause(window)
    except WindowError as exc:
        raise GraphError(operator, "window-clause", f"input port {index}: {exc}") from None
