"""What a drawing of a graph shows, as plain data: operators, their ports, streams, regions, errors.

Both drawings (``riverbed graph`` and the live console) start from a `GraphView`, so they
agree on what an operator box says. A valid graph gives its view from the `FrozenGraph`
(`view_of`); an invalid one has no frozen form, so its view comes from what the script
declared (`Graph.declared`, carried by the `InvalidGraphError` that ``freeze`` raised),
with each validation error pinned to the operator it names (`view_of_declared`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from riverbed.graph import (
    ConsistentRegion,
    DeclaredGraph,
    DeclaredOperator,
    DeclaredPort,
    FrozenGraph,
    GraphError,
    InputPort,
    OperatorDef,
    ParallelRegion,
)

__all__ = ["EdgeView", "GraphView", "OperatorView", "ParallelView", "PortView", "RegionView",
           "view_of", "view_of_declared"]


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
    parallel: str | None = None  # the parallel region it runs in

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "type": self.type_name,
                "inputs": [{"index": p.index, "window": p.window, "partitioned": p.partitioned}
                           for p in self.inputs],
                "outputs": self.outputs, "error_port": self.error_port, "event_time": self.event_time,
                "region": self.region, "parallel": self.parallel, "errors": list(self.errors)}


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
class ParallelView:
    """A parallel region: ``width`` channels of ``members``, split by ``partition_by`` (an
    attribute, or a function's name followed by ``()``) or round-robin (None)."""

    name: str
    width: int
    partition_by: str | None
    members: tuple[str, ...]
    process: bool = False  # a process group (`Graph.process`): one worker, not channels

    @property
    def how(self) -> str:
        """The channels in words: ``4 channels, by sensor`` or ``2 channels, round-robin``."""
        split = f"by {self.partition_by}" if self.partition_by is not None else "round-robin"
        return f"{self.width} channel{'s' if self.width != 1 else ''}, {split}"

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "width": self.width, "partition_by": self.partition_by,
                "members": list(self.members), "process": self.process}


@dataclass(frozen=True, slots=True)
class GraphView:
    name: str
    operators: tuple[OperatorView, ...]
    edges: tuple[EdgeView, ...]
    regions: tuple[RegionView, ...] = ()
    errors: tuple[str, ...] = ()  # every validation error, as the validator words it
    parallel: tuple[ParallelView, ...] = ()

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
                "regions": [r.as_dict() for r in self.regions],
                "parallel": [p.as_dict() for p in self.parallel], "errors": list(self.errors)}


def _clause(window: Any) -> str | None:
    if window is None:
        return None
    if isinstance(window, str):
        return " ".join(window.split())
    clause = getattr(window, "clause", None)
    return str(clause()) if callable(clause) else repr(window)


def _region_view(region: ConsistentRegion, members: Sequence[str]) -> RegionView:
    return RegionView(region.name, region.trigger, region.period, tuple(members))


def _key_text(key: str | Callable[[Any], Any] | None) -> str | None:
    if key is None or isinstance(key, str):
        return key
    return f"{getattr(key, '__qualname__', None) or type(key).__name__}()"


def _parallel_view(region: ParallelRegion) -> ParallelView:
    return ParallelView(region.name, region.width, _key_text(region.partition_by), region.members,
                        region.process)


def _op_view(op: OperatorDef | DeclaredOperator, region: str | None, parallel: str | None,
             errors: Sequence[str] = ()) -> OperatorView:
    ports = []
    inputs: Sequence[InputPort | DeclaredPort] = op.inputs
    for i, port in enumerate(inputs):
        clause = _clause(port.window)
        partitioned = getattr(port.window, "partitioned", None)
        if partitioned is None:  # a clause not parsed yet (an invalid graph): read its text
            partitioned = clause is not None and "partitioned" in clause
        ports.append(PortView(i, clause, bool(partitioned)))
    return OperatorView(op.name, op.kind, type(op.operator).__name__, tuple(ports), len(op.outputs),
                        op.error_port, op.event_time.attribute if op.event_time else None, region,
                        tuple(errors), parallel)


def _edges(operators: Sequence[OperatorDef | DeclaredOperator]) -> tuple[EdgeView, ...]:
    edges: list[EdgeView] = []
    for op in operators:
        inputs: Sequence[InputPort | DeclaredPort] = op.inputs
        edges.extend(EdgeView(c.operator, c.port, op.name, i, c.feedback)
                     for i, port in enumerate(inputs) for c in port.connections)
    return tuple(edges)


def view_of(graph: FrozenGraph) -> GraphView:
    """The view of a valid graph: operators in topological order, streams, regions."""
    owner = {m: r.name for r in graph.regions for m in r.members}
    channels = {m: r.name for r in graph.parallel for m in r.members}
    operators = tuple(_op_view(op, owner.get(op.name), channels.get(op.name)) for op in graph.operators)
    regions = tuple(_region_view(r, r.members) for r in graph.regions)
    return GraphView(graph.name, operators, _edges(graph.operators), regions,
                     parallel=tuple(_parallel_view(r) for r in graph.parallel))


def view_of_declared(declared: DeclaredGraph, errors: Sequence[GraphError] = ()) -> GraphView:
    """The view of what a graph declared (valid or not), each error pinned to the operator it
    names. Consistent regions are drawn with what they would hold: everything downstream of
    their start operators over streams that are not feedback, autonomous operators (and what
    only they reach) left out, as ``freeze`` resolves them."""
    by_operator: dict[str, list[str]] = {}
    for e in errors:
        if e.operator is not None:
            by_operator.setdefault(e.operator, []).append(f"{e.message} [{e.rule}]")
    downstream: dict[str, list[str]] = {}
    for op in declared.operators:
        for port in op.inputs:
            for c in port.connections:
                if not c.feedback:
                    downstream.setdefault(c.operator, []).append(op.name)
    owner: dict[str, str] = {}
    for region in declared.regions:
        for name in _reachable(region.start, downstream, declared.autonomous):
            owner.setdefault(name, region.name)
    channels: dict[str, str] = {}
    for par in declared.parallel:
        for name in par.members:
            channels.setdefault(name, par.name)
    operators = tuple(_op_view(op, owner.get(op.name), channels.get(op.name), by_operator.get(op.name, ()))
                      for op in declared.operators)
    names = [op.name for op in declared.operators]
    regions = tuple(_region_view(r, [n for n in names if owner.get(n) == r.name]) for r in declared.regions)
    return GraphView(declared.name, operators, _edges(declared.operators), regions,
                     tuple(str(e) for e in errors), tuple(_parallel_view(r) for r in declared.parallel))


def _reachable(start: Sequence[str], downstream: dict[str, list[str]],
               autonomous: frozenset[str]) -> set[str]:
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
