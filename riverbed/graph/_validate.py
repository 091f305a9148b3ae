"""Graph validation: every rule checked before a graph runs, every broken rule reported.

Each `GraphError` names the operator and a rule id. The rules:

``input``            every input port has at least one stream; sources have none
``fan-in-schema``    the streams of one port carry the same schema
``window-clause``    the port's window clause parses (the message points at the text)
``partition-key``    a partitioned window has ``partition_by``; an unpartitioned one has none
``unknown-attribute`` partition, delta and event-time attributes exist in a declared schema
``attribute-type``   delta attributes are numeric or timestamp; event time is timestamp/int64/uint64
``event-time``       a timeInterval window sits downstream of an event-time source (SPL E4);
                     definitions differing in attribute, type or resolution do not meet (E27)
``cycle``            a cycle is closed only through a feedback connection
``sink-outputs``     a sink declares no output streams
``consistent-region`` regions start at sources, do not overlap, have valid parameters
``operator``         the operator's own rules for its ports (`Operator.check_ports`): a window
                     it needs, the number of its ports, the attributes it reads
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..windows import Delta, TimeIntervalSpec, WindowClauseError, WindowSpec
from ._errors import GraphError, GraphValidationError
from ._model import Connection, EventTime, FrozenGraph, InputPort, OperatorDef, parse_port_window
from ._operator import PortLayout, own_rules
from ._regions import resolve_regions
from ._schema import Schema

if TYPE_CHECKING:
    from ._model import Graph

__all__ = ["event_time_region", "freeze"]

_NUMERIC = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
            "float32", "float64", "decimal32", "decimal64", "decimal128", "timestamp"}
_EVENT_TIME_TYPES = {"timestamp", "int64", "uint64"}


def freeze(graph: Graph) -> FrozenGraph:
    errors: list[GraphError] = []
    defs: dict[str, OperatorDef] = {}
    pending = graph._pending
    if not pending:
        raise GraphValidationError(graph.name, [GraphError(None, "empty", "the graph has no operators")])
    unparsed: set[str] = set()  # operators with a window clause that did not parse
    for name, raw in pending.items():
        ports: list[InputPort] = []
        if raw["kind"] == "source" and raw["inputs"]:
            errors.append(GraphError(name, "input", "a source has no input ports"))
        if raw["kind"] != "source" and not raw["inputs"]:
            errors.append(GraphError(name, "input", "needs at least one input port"))
        for i, port in enumerate(raw["inputs"]):
            window = None
            partition_by = port.partition_by
            if port.window is not None:
                try:
                    window = parse_port_window(name, i, port.window)
                except GraphError as exc:
                    errors.append(exc)
                    unparsed.add(name)
                    partition_by = None  # its window is not known: no second error about the key
            conns = tuple(Connection(s.operator, s.port, port.feedback) for s in port.streams)
            ports.append(InputPort(conns, window, partition_by, port.flavor,
                                   dict(port.attribute_types) if port.attribute_types else None))
        defs[name] = OperatorDef(name, raw["operator"], raw["kind"], tuple(ports),
                                 tuple(raw["outputs"]), raw["event_time"], raw["error_port"],
                                 raw["queue_batches"])
    for op in defs.values():
        errors.extend(_check_operator(op, defs))
        if op.name not in unparsed:  # (a clause that did not parse: the port has no window)
            errors.extend(_operator_rules(op, defs))
    order, cycle_errors = _topological(defs)
    errors.extend(cycle_errors)
    reach = _reach(defs)
    region = reach.region
    errors.extend(_event_time_errors(defs, reach))
    for op in defs.values():
        for i, port in enumerate(op.inputs):
            if isinstance(port.window, TimeIntervalSpec) and op.name not in region:
                errors.append(GraphError(op.name, "event-time",
                                         f"input port {i} has a timeInterval window but no event time "
                                         "reaches it: give an upstream source event_time=..."))
    consumers: dict[str, list[str]] = {n: [] for n in defs}
    for op in defs.values():
        for inp in op.inputs:
            for c in inp.connections:
                if c.operator in consumers and not c.feedback:
                    consumers[c.operator].append(op.name)
    unknown = sorted(graph._autonomous - set(defs))
    errors.extend(GraphError(n, "consistent-region", f"autonomous({n!r}): no such operator")
                  for n in unknown)
    regions, region_errors = resolve_regions(graph._regions, {n: d.kind for n, d in defs.items()},
                                             consumers, graph._autonomous, order or list(defs))
    errors.extend(region_errors)
    for reg in regions:
        errors.extend(GraphError(s, "consistent-region", f"region {reg.name!r} starts at {s!r}, which "
                                                        "cannot replay (replayable = False): a reset "
                                                        "would lose or repeat what it emitted")
                      for s in reg.start if not getattr(defs[s].operator, "replayable", False))
    if errors:
        raise GraphValidationError(graph.name, errors)
    return FrozenGraph(graph.name, tuple(defs[n] for n in order), dict(graph.params), tuple(regions))


def _port_schema(port: InputPort, defs: dict[str, OperatorDef]) -> Schema | None:
    for c in port.connections:
        up = defs.get(c.operator)
        if up is not None and c.port < len(up.outputs):
            return up.outputs[c.port]
    return None


def _operator_rules(op: OperatorDef, defs: dict[str, OperatorDef]) -> list[GraphError]:
    """The operator's own rules for the ports it is given (`Operator.check_ports`)."""
    data = tuple(s for i, s in enumerate(op.outputs) if i != op.error_port)
    layout = PortLayout(op.name, tuple(p.window for p in op.inputs),
                        tuple(_port_schema(p, defs) for p in op.inputs), len(data), data)
    return [GraphError(op.name, "operator", message)
            for message in own_rules(op.operator, "check_ports", layout)]


def _check_operator(op: OperatorDef, defs: dict[str, OperatorDef]) -> list[GraphError]:
    errors: list[GraphError] = []
    name = op.name
    if op.kind == "sink" and len(op.outputs) > (1 if op.error_port is not None else 0):
        errors.append(GraphError(name, "sink-outputs", "a sink has no output streams"))
    if op.event_time is not None:
        et = op.event_time
        schema = op.outputs[0] if op.outputs else None
        if schema is not None:
            t = schema.type_of(et.attribute)
            if t is None:
                errors.append(GraphError(name, "unknown-attribute",
                                         f"event-time attribute {et.attribute!r} is not in the output "
                                         f"schema {schema}"))
            elif t not in _EVENT_TIME_TYPES:
                errors.append(GraphError(name, "attribute-type",
                                         f"event-time attribute {et.attribute!r} is {t}; it must be "
                                         "timestamp, int64 or uint64"))
            elif t == "timestamp" and et.resolution != "ns":
                errors.append(GraphError(name, "event-time", "a timestamp event time has "
                                                             "nanosecond resolution"))
    for i, port in enumerate(op.inputs):
        schemas = []
        for c in port.connections:
            up = defs.get(c.operator)
            if up is None:
                errors.append(GraphError(name, "input", f"input port {i}: no operator "
                                                        f"{c.operator!r} in the graph"))
            elif c.port >= len(up.outputs):
                errors.append(GraphError(name, "input", f"input port {i}: {c.operator!r} has no "
                                                        f"output port {c.port}"))
            else:
                schemas.append(up.outputs[c.port])
        if len({str(s) for s in schemas}) > 1:
            errors.append(GraphError(name, "fan-in-schema",
                                     f"input port {i} is fed streams of different schemas: "
                                     + "; ".join(str(s) for s in schemas)))
        errors.extend(_check_window(op, i, port, schemas[0] if schemas else None))
    return errors


def _check_window(op: OperatorDef, i: int, port: InputPort, schema: Schema | None) -> list[GraphError]:
    window = port.window
    errors: list[GraphError] = []
    if window is None:
        if port.partition_by is not None:
            errors.append(GraphError(op.name, "partition-key", f"input port {i}: partition_by "
                                                               "needs a partitioned window"))
        return errors
    if port.flavor not in ("java", "cpp"):
        errors.append(GraphError(op.name, "window-flavor", f"input port {i}: flavor "
                                                           f"{port.flavor!r}: expected 'java' or 'cpp'"))
    if window.partitioned and port.partition_by is None:
        errors.append(GraphError(op.name, "partition-key",
                                 f"input port {i}: the window is partitioned ({window.clause()}) "
                                 "but no partition_by is given"))
    if not window.partitioned and port.partition_by is not None:
        errors.append(GraphError(op.name, "partition-key",
                                 f"input port {i}: partition_by is given but the window "
                                 f"({window.clause()}) is not partitioned; add 'partitioned'"))
    if schema is None:
        return errors
    if isinstance(port.partition_by, str) and schema.type_of(port.partition_by) is None:
        errors.append(GraphError(op.name, "unknown-attribute",
                                 f"input port {i}: partition attribute {port.partition_by!r} is not "
                                 f"in the schema {schema}"))
    if isinstance(window, WindowSpec):
        for role, policy in (("eviction", window.eviction), ("trigger", window.trigger)):
            if isinstance(policy, Delta):
                t = schema.type_of(policy.attribute)
                if t is None:
                    errors.append(GraphError(op.name, "unknown-attribute", f"input port {i}: " + _pointed(
                        f"{role} {policy.clause()} uses {policy.attribute!r}, which is not in the "
                        f"schema {schema}", window, role, policy.attribute)))
                elif t not in _NUMERIC:
                    errors.append(GraphError(op.name, "attribute-type",
                                             f"input port {i}: {role} {policy.clause()}: "
                                             f"{policy.attribute!r} is {t}; a delta needs a numeric "
                                             "or timestamp attribute"))
    return errors


def _topological(defs: dict[str, OperatorDef]) -> tuple[list[str], list[GraphError]]:
    """Kahn's order over non-feedback connections; what remains sits on a cycle."""
    indegree = dict.fromkeys(defs, 0)
    edges: dict[str, list[str]] = {n: [] for n in defs}
    for op in defs.values():
        for port in op.inputs:
            for c in port.connections:
                if c.operator in defs and not c.feedback:
                    edges[c.operator].append(op.name)
                    indegree[op.name] += 1
    ready = [n for n, d in indegree.items() if d == 0]
    order: list[str] = []
    while ready:
        n = ready.pop(0)
        order.append(n)
        for m in edges[n]:
            indegree[m] -= 1
            if indegree[m] == 0:
                ready.append(m)
    stuck = [n for n in defs if n not in order]
    if not stuck:
        return order, []
    # What Kahn's order leaves is the cycles *and* everything downstream of them: report only the
    # operators on a cycle (in a strongly connected component), each with a cycle it is on.
    errors = []
    for component in _components(stuck, edges):
        for n in component:
            path = " -> ".join(_cycle_through(n, set(component), edges))
            errors.append(GraphError(n, "cycle", f"is on a cycle with no feedback connection ({path}); "
                                                 "mark the stream that closes it with .feedback()"))
    return order + stuck, errors


def _components(nodes: list[str], edges: dict[str, list[str]]) -> list[list[str]]:
    """The strongly connected components among ``nodes`` that hold a cycle, each in graph order
    (Tarjan's algorithm, iterative)."""
    among = set(nodes)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in nodes:
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter([m for m in edges[root] if m in among]))]
        while work:
            node, successors = work[-1]
            for m in successors:
                if m not in index:
                    index[m] = low[m] = len(index)
                    stack.append(m)
                    on_stack.add(m)
                    work.append((m, iter([x for x in edges[m] if x in among])))
                    break
                if m in on_stack:
                    low[node] = min(low[node], index[m])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component: list[str] = []
                    while not component or component[-1] != node:
                        component.append(stack.pop())
                        on_stack.discard(component[-1])
                    if len(component) > 1 or node in edges[node]:
                        found.append(sorted(component, key=nodes.index))
    return found


def _cycle_through(start: str, members: set[str], edges: dict[str, list[str]]) -> list[str]:
    """A shortest cycle from ``start`` back to it within its component, as names (start repeated)."""
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        node = frontier.pop(0)
        for m in edges[node]:
            if m == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [start, *reversed(path[:-1]), start] if node != start else [start, start]
            if m in members and m not in came_from:
                came_from[m] = node
                frontier.append(m)
    return [start]  # unreachable: every member of a component is on a cycle


@dataclass(frozen=True, slots=True)
class _Origin:
    """An event-time definition and the operator declaring it (SPL ``@eventTime``)."""

    operator: str
    et: EventTime
    type: str | None  # the attribute's type in the operator's output schema (None: undeclared)

    def agrees(self, other: _Origin) -> bool:
        """Whether the two may meet at an operator (E27: lag and minimum gap may differ; an
        undeclared type is taken for the other's)."""
        return (self.et.attribute == other.et.attribute and self.et.resolution == other.et.resolution
                and (self.type == other.type or self.type is None or other.type is None))

    def describe(self) -> str:
        return (f"{self.operator!r} (event_time={self.et.attribute!r}, "
                f"{self.type or 'undeclared type'}, resolution={self.et.resolution!r})")


@dataclass(slots=True)
class _Reach:
    """What event time reaches the operators of a graph (SPL E27).

    ``region``: every operator event time reaches through any connection (stopping at an
    operator with its own definition), as the runtime forwards watermarks. ``carried``: per
    operator without its own definition and per input port, the definitions carried into it
    through a stream that has the attribute with the definition's type (or an undeclared
    schema), SPL's event-time region proper: only these may conflict.
    """

    region: dict[str, _Origin]
    carried: dict[str, dict[int, list[_Origin]]]
    out: dict[str, list[_Origin]]  # per operator, what its output ports carry on (its own)


def _origin(op: OperatorDef) -> _Origin | None:
    et = op.event_time
    if et is None:
        return None
    schema = op.outputs[0] if op.outputs else None
    return _Origin(op.name, et, schema.type_of(et.attribute) if schema is not None else None)


def _carries(schema: Schema | None, origin: _Origin) -> bool:
    """A stream of ``schema`` carries ``origin`` on (E27: it has the attribute, same type)."""
    if schema is None:
        return True
    t = schema.type_of(origin.et.attribute)
    return t is not None and (t == origin.type or (origin.type is None and t in _EVENT_TIME_TYPES))


def _reach(defs: dict[str, OperatorDef]) -> _Reach:
    # upstream operator -> (consumer, its input port, the upstream output port)
    consumers: dict[str, list[tuple[OperatorDef, int, int]]] = {}
    for op in defs.values():
        for i, port in enumerate(op.inputs):
            for c in port.connections:
                consumers.setdefault(c.operator, []).append((op, i, c.port))
    own = {name: o for name, op in defs.items() if (o := _origin(op)) is not None}
    # Carried definitions (E27), propagated to a fixpoint: an origin is added once per port.
    carried: dict[str, dict[int, list[_Origin]]] = {}
    out: dict[str, list[_Origin]] = {name: [o] for name, o in own.items()}
    frontier = deque(own)
    while frontier:
        name = frontier.popleft()
        up = defs[name]
        for op, i, out_port in consumers.get(name, ()):
            if op.name in own:
                continue
            schema = up.outputs[out_port] if out_port < len(up.outputs) else None
            ports = carried.setdefault(op.name, {})
            seen = out.setdefault(op.name, [])
            for origin in out[name]:
                if not _carries(schema, origin):
                    continue
                at_port = ports.setdefault(i, [])
                if origin not in at_port:
                    at_port.append(origin)
                if origin not in seen:
                    seen.append(origin)
                    frontier.append(op.name)
    # The region the runtime forwards watermarks in: every connection, stopping at an operator
    # with its own definition. Each operator takes what is carried into it, else the first
    # definition reaching it.
    region: dict[str, _Origin] = dict(own)
    frontier = deque(own)
    while frontier:
        name = frontier.popleft()
        for op, _i, _port in consumers.get(name, ()):
            if op.name in region:
                continue
            reaching = out.get(op.name)
            region[op.name] = reaching[0] if reaching else region[name]
            frontier.append(op.name)
    return _Reach(region, {n: ports for n, ports in carried.items() if ports}, out)


def _merged(origins: list[_Origin]) -> EventTime:
    """The definition of several compatible ones meeting: the largest lag and gap (E27)."""
    et = origins[0].et
    lag = max(o.et.lag_ns for o in origins)
    gap = max(o.et.minimum_gap_ns for o in origins)
    if lag == et.lag_ns and gap == et.minimum_gap_ns:
        return et
    return replace(et, lag_ns=lag, minimum_gap_ns=gap)


def event_time_region(defs: dict[str, OperatorDef] | Any) -> dict[str, EventTime]:
    """Operators reached by event time (SPL E27), with the definition that reaches them.

    Event time spreads downstream from each operator with its own
    ``event_time`` through every connection, and stops at an operator that
    declares its own. Where several definitions reach an operator through streams
    that have their attribute (validation refuses them unless they differ only in lag and
    minimum gap), it gets their definition with the largest lag and gap.
    """
    if not isinstance(defs, dict):
        defs = {op.name: op for op in defs.operators}
    reach = _reach(defs)
    result: dict[str, EventTime] = {}
    for name, origin in reach.region.items():
        ports = reach.carried.get(name)
        if ports and defs[name].event_time is None:
            result[name] = _merged([o for found in ports.values() for o in found])
        else:
            result[name] = origin.et
    return result


def _all_agree(origins: list[_Origin]) -> bool:
    return all(a.agrees(b) for k, a in enumerate(origins) for b in origins[k + 1:])


def _brought(c: Connection, defs: dict[str, OperatorDef], reach: _Reach) -> list[_Origin]:
    """The definitions one connection carries (E27)."""
    up = defs.get(c.operator)
    if up is None:
        return []
    schema = up.outputs[c.port] if c.port < len(up.outputs) else None
    return [o for o in reach.out.get(c.operator, []) if _carries(schema, o)]


def _event_time_errors(defs: dict[str, OperatorDef], reach: _Reach) -> list[GraphError]:
    """Different definitions meeting at an operator (E27), reported where they first meet, and
    timeInterval windows on a port whose declared schema lacks the event-time attribute."""
    errors: list[GraphError] = []
    for name, ports in reach.carried.items():
        found = [o for at_port in ports.values() for o in at_port]
        if _all_agree(found):
            continue
        op = defs[name]
        if any(not _all_agree(_brought(c, defs, reach)) for port in op.inputs for c in port.connections):
            continue  # one stream brings them all: they met upstream, reported there
        where = "; ".join(f"input port {i} from " + " and ".join(o.describe() for o in at_port)
                          for i, at_port in sorted(ports.items()))
        errors.append(GraphError(name, "event-time",
                                 f"different event-time definitions meet here: {where}; they must "
                                 "have the same attribute, type and resolution (SPL E27; lag and "
                                 "minimum_gap may differ, the largest is used)"))
    for op in defs.values():
        origin = reach.region.get(op.name)
        if origin is None:
            continue
        for i, port in enumerate(op.inputs):
            if not isinstance(port.window, TimeIntervalSpec):
                continue
            schema = _port_schema(port, defs)
            if schema is None:
                continue
            attribute = origin.et.attribute
            t = schema.type_of(attribute)
            source = f"the event time of {origin.operator!r}"
            if t is None:
                errors.append(GraphError(op.name, "unknown-attribute",
                                         f"input port {i}: the timeInterval window reads "
                                         f"{source}, attribute {attribute!r}, which is not in the "
                                         f"schema {schema}"))
            elif t not in _EVENT_TIME_TYPES:
                errors.append(GraphError(op.name, "attribute-type",
                                         f"input port {i}: the timeInterval window reads "
                                         f"{source}, attribute {attribute!r}, which is {t} in the "
                                         f"schema {schema}; it must be timestamp, int64 or uint64"))
            elif origin.type is not None and t != origin.type:
                errors.append(GraphError(op.name, "attribute-type",
                                         f"input port {i}: the timeInterval window reads "
                                         f"{source}, attribute {attribute!r}, which is {t} in the "
                                         f"schema {schema} but {origin.type} where "
                                         f"{origin.operator!r} declares it"))
    return errors


def _pointed(reason: str, window: WindowSpec, role: str, attribute: str) -> str:
    """``reason`` with the clause under it and a caret under the delta's attribute, as the
    clause parser's own errors point at the text (eviction's delta is the first, trigger's the
    last)."""
    clause = window.clause()
    text = f"delta({attribute}"
    at = clause.find(text) if role == "eviction" else clause.rfind(text)
    if at < 0:
        return reason
    return str(WindowClauseError(reason, clause, at + len("delta("), len(attribute)))

