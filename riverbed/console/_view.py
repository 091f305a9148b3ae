"""What a drawing of a graph shows, as plain data: operators, their ports, streams, regions, errors.

Both drawings (``riverbed graph`` and the live console) start from a `GraphView`, so they
agree on what an operator box says. A valid graph gives its view from the `FrozenGraph`;
an invalid one has no frozen form, so its view comes from a `Draft` that recorded the
builder calls the script made (`draft_graph`), with each validation error pinned to the
operator it names.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import riverbed
import riverbed.graph
from riverbed.graph import (
    ConsistentRegion,
    FrozenGraph,
    Graph,
    GraphError,
    OperatorDef,
    PortInput,
    Stream,
)

__all__ = ["Draft", "EdgeView", "GraphView", "OperatorView", "PortView", "RegionView",
           "draft_graph", "view_of"]


@dataclass(frozen=True, slots=True)
class PortView:
    """One input port: its window clause as SPL text (None: not windowed)."""

    index: int
    window: str | None = None
    partitioned: bool = False


@dataclass(frozen=True, slots=True)
class OperatorView:
    name: str
    kind: str  # source, operator, sink
    type_name: str  # the operator's class
    inputs: tuple[PortView, ...] = ()
    outputs: int = 0
    error_port: int | None = None
    event_time: str | None = None
    region: str | None = None
    errors: tuple[str, ...] = ()  # validation errors naming this operator

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "type": self.type_name,
                "inputs": [{"index": p.index, "window": p.window, "partitioned": p.partitioned}
                           for p in self.inputs],
                "outputs": self.outputs, "error_port": self.error_port, "event_time": self.event_time,
                "region": self.region, "errors": list(self.errors)}


@dataclass(frozen=True, slots=True)
class EdgeView:
    """One stream into one input port: ``source`` output ``source_port`` to ``target`` input
    ``target_port``."""

    source: str
    source_port: int
    target: str
    target_port: int
    feedback: bool = False

    @property
    def stream(self) -> str:
        """The stream's key, shared by every edge it feeds: ``operator.port``."""
        return f"{self.source}.{self.source_port}"

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "source_port": self.source_port, "target": self.target,
                "target_port": self.target_port, "feedback": self.feedback, "stream": self.stream}


@dataclass(frozen=True, slots=True)
class RegionView:
    name: str
    trigger: str
    period: float | None
    members: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "trigger": self.trigger, "period": self.period,
                "members": list(self.members)}


@dataclass(frozen=True, slots=True)
class GraphView:
    name: str
    operators: tuple[OperatorView, ...]
    edges: tuple[EdgeView, ...]
    regions: tuple[RegionView, ...] = ()
    errors: tuple[str, ...] = ()  # every validation error, as the validator words it

    @property
    def valid(self) -> bool:
        return not self.errors

    def operator(self, name: str) -> OperatorView:
        for op in self.operators:
            if op.name == name:
                return op
        raise KeyError(name)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "operators": [o.as_dict() for o in self.operators],
                "edges": [e.as_dict() for e in self.edges],
                "regions": [r.as_dict() for r in self.regions], "errors": list(self.errors)}


def _clause(window: Any) -> str | None:
    if window is None:
        return None
    if isinstance(window, str):
        return " ".join(window.split())
    clause = getattr(window, "clause", None)
    return str(clause()) if callable(clause) else repr(window)


def _region_view(region: ConsistentRegion, members: Sequence[str]) -> RegionView:
    return RegionView(region.name, region.trigger, region.period, tuple(members))


def _op_view(op: OperatorDef, region: str | None) -> OperatorView:
    ports = tuple(PortView(i, _clause(p.window), bool(getattr(p.window, "partitioned", False)))
                  for i, p in enumerate(op.inputs))
    return OperatorView(op.name, op.kind, type(op.operator).__name__, ports, len(op.outputs),
                        op.error_port, op.event_time.attribute if op.event_time else None, region)


def view_of(graph: FrozenGraph) -> GraphView:
    """The view of a valid graph: operators in topological order, streams, regions."""
    owner = {m: r.name for r in graph.regions for m in r.members}
    operators = tuple(_op_view(op, owner.get(op.name)) for op in graph.operators)
    edges = tuple(EdgeView(c.operator, c.port, op.name, i, c.feedback)
                  for op in graph.operators for i, port in enumerate(op.inputs) for c in port.connections)
    regions = tuple(_region_view(r, r.members) for r in graph.regions)
    return GraphView(graph.name, operators, edges, regions)


# ------------------------------------------------------------------ invalid graphs


@dataclass
class _Recorded:
    name: str
    kind: str
    operator: Any
    inputs: list[Any] = field(default_factory=list)
    outputs: int = 0
    error_port: bool = False
    event_time: str | None = None


class Draft(Graph):
    """A `Graph` that also records, through its public builder methods, what the script
    declared, so a graph that fails validation can still be drawn."""

    def __init__(self, name: str, params: Any = None) -> None:
        super().__init__(name, params)
        self.recorded: dict[str, _Recorded] = {}
        self.recorded_regions: list[ConsistentRegion] = []
        self.recorded_autonomous: set[str] = set()
        with _DRAFTS_LOCK:
            _DRAFTS.append(self)

    def source(self, name: str, operator: Any, **kwargs: Any) -> Stream:
        stream = super().source(name, operator, **kwargs)
        event_time = kwargs.get("event_time")
        self.recorded[name] = _Recorded(name, "source", operator, [], 1, False,
                                        event_time if isinstance(event_time, str | None)
                                        else getattr(event_time, "attribute", None))
        return stream

    def operator(self, name: str, operator: Any, inputs: Any, outputs: Any = (None,),
                 **kwargs: Any) -> Any:
        inputs = list(inputs)
        streams = super().operator(name, operator, inputs, outputs, **kwargs)
        count = len(streams) if isinstance(streams, tuple) else 1
        self.recorded[name] = _Recorded(name, "operator", operator, inputs, count,
                                        bool(kwargs.get("error_port")))
        return streams

    def sink(self, name: str, operator: Any, inputs: Any, **kwargs: Any) -> Stream | None:
        inputs = list(inputs)
        stream = super().sink(name, operator, inputs, **kwargs)
        self.recorded[name] = _Recorded(name, "sink", operator, inputs, 1 if stream else 0,
                                        bool(kwargs.get("error_port")))
        return stream

    def add_input(self, operator: str, arg: Any) -> None:
        super().add_input(operator, arg)
        self.recorded[operator].inputs.append(arg)

    def consistent_region(self, start: Any, *, name: str | None = None, **params: Any) -> ConsistentRegion:
        region = super().consistent_region(start, name=name, **params)
        self.recorded_regions.append(region)
        return region

    def autonomous(self, operator: Stream | str) -> None:
        super().autonomous(operator)
        self.recorded_autonomous.add(operator.operator if isinstance(operator, Stream) else operator)

    def view(self, errors: Sequence[GraphError] = ()) -> GraphView:
        """The drawing of what was declared, each error pinned to the operator it names."""
        by_operator: dict[str, list[str]] = {}
        for e in errors:
            if e.operator is not None:
                by_operator.setdefault(e.operator, []).append(f"{e.message} [{e.rule}]")
        downstream: dict[str, list[str]] = {}
        for rec in self.recorded.values():
            for arg in rec.inputs:
                port = _as_port_input(arg)
                for s in port.streams if not port.feedback else ():
                    downstream.setdefault(s.operator, []).append(rec.name)
        members = {r.name: _reachable(r.start, downstream, self.recorded_autonomous)
                   for r in self.recorded_regions}
        owner: dict[str, str] = {}
        for region in self.recorded_regions:
            for name in members[region.name]:
                owner.setdefault(name, region.name)
        operators: list[OperatorView] = []
        edges: list[EdgeView] = []
        for rec in self.recorded.values():
            ports: list[PortView] = []
            for i, arg in enumerate(rec.inputs):
                port = _as_port_input(arg)
                clause = _clause(port.window)
                ports.append(PortView(i, clause, clause is not None and "partitioned" in clause))
                edges.extend(EdgeView(s.operator, s.port, rec.name, i, port.feedback) for s in port.streams)
            outputs = rec.outputs
            operators.append(OperatorView(rec.name, rec.kind, type(rec.operator).__name__, tuple(ports),
                                          outputs, outputs - 1 if rec.error_port else None,
                                          rec.event_time, owner.get(rec.name),
                                          tuple(by_operator.get(rec.name, ()))))
        regions = tuple(_region_view(r, [n for n in self.recorded if owner.get(n) == r.name])
                        for r in self.recorded_regions)
        return GraphView(self.name, tuple(operators), tuple(edges), regions, tuple(str(e) for e in errors))


def _reachable(start: Sequence[str], downstream: dict[str, list[str]], autonomous: set[str]) -> set[str]:
    """What a region holds, as the validator resolves it: reachable from its start operators
    over non-feedback streams, autonomous operators (and what only they reach) left out."""
    seen: set[str] = set()
    todo = list(start)
    while todo:
        name = todo.pop()
        if name in seen or name in autonomous:
            continue
        seen.add(name)
        todo.extend(downstream.get(name, ()))
    return seen


def _as_port_input(arg: Any) -> PortInput:
    if isinstance(arg, Stream):
        return PortInput((arg,))
    if isinstance(arg, PortInput):
        return arg
    return PortInput(tuple(arg))


_DRAFTS: list[Draft] = []
_DRAFTS_LOCK = threading.Lock()
_PATCH_LOCK = threading.Lock()


@contextlib.contextmanager
def draft_graph() -> Iterator[list[Draft]]:
    """While open, a script's ``Graph(...)`` (from ``riverbed`` or ``riverbed.graph``) builds a
    `Draft`; yields the drafts made, newest last.

    The graph package has no public way to read what an unfrozen graph declares, so the
    public names are swapped for the recording subclass for the time a script runs (one
    script at a time, under a lock) and restored after.
    """
    with _PATCH_LOCK:
        saved = riverbed.Graph, riverbed.graph.Graph
        made: list[Draft] = []
        with _DRAFTS_LOCK:
            _DRAFTS.clear()
        riverbed.Graph = riverbed.graph.Graph = Draft  # type: ignore[misc]
        try:
            yield made
        finally:
            riverbed.Graph, riverbed.graph.Graph = saved  # type: ignore[misc]
            with _DRAFTS_LOCK:
                made.extend(_DRAFTS)
                _DRAFTS.clear()
