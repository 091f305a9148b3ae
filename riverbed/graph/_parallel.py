"""Parallel regions (SPL ``@parallel``): one operator or a chain, run as ``width`` channels.

The operators added inside ``with g.parallel(width, partition_by="sensor"):`` form a region.
A host that can (the asyncio runtime) runs each channel in a worker process of its own; tuples
enter a channel by a stable hash of the partition key (keyed) or in turn (round-robin), and
leave through a merge at the region's end. A host that cannot (the Spark bridge, trace
replays) runs the operators once, as if the region were not there: a region changes where
operators run, never what a partition's tuples see.

Why the rules below: a partition's tuples must all reach one channel, in order, so every
partitioned window inside a keyed region must be partitioned by the region's own key, and a
round-robin region must hold no partitioned window at all. A region must be connected (one
split, one merge), and no stream may leave the region and come back into it (the merge would
wait on itself). A region is inside one consistent region or none: its channels checkpoint
together (barriers go to every channel and leave once every channel sent them), so it cannot
straddle a border.

Sources in a region are replicated, as SPL replicates every operator of a region: each channel
runs its own replica, which reads ``context.channel`` and ``context.width`` (SPL's
``getChannel()`` / ``getMaxChannels()``) to produce its own share; nothing is split. A replica
runs inside its worker, driven by the worker (``generate``), so a source whose body is an
``async def run`` cannot be one. A replicated source may start a consistent region (it must be
replayable, as every start): the job's region asks every worker to start each checkpoint, each
replica reports its position with its channel's operators and emits the barrier between two
batches, and a reset restores every replica to its checkpointed position (see
docs/decisions.md).

Process groups (`Graph.process`, SPL's ``partitionColocation`` / ``partitionIsolation``) are
regions of width 1 without a key: the operators of a group run together in one worker process
of their own, so a slow Python operator there does not stall the job's other operators. They
obey the same rules, except those about channels (there is one), and need not be connected
(colocated operators may be unrelated).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ..windows import Count, Delta, Punct, WindowSpec, WindowType
from ._errors import GraphError, GraphValidationError
from ._names import is_name
from ._operator import Source, own_rules

if TYPE_CHECKING:
    from ._model import FrozenGraph, InputPort, OperatorDef

__all__ = ["MAX_WIDTH", "ParallelBlock", "ParallelRegion", "parallel_spec", "process_spec",
           "resolve_parallel"]

MAX_WIDTH = 256  # more channels than this is a mistake (a width meant for another setting)
PartitionKey = str | Callable[[Any], Hashable]


@dataclass(frozen=True, slots=True)
class ParallelRegion:
    """One parallel region of a frozen graph: ``width`` channels of ``members`` (graph order).

    ``partition_by`` is an attribute name or a function of a tuple (keyed), or None
    (round-robin). ``processes``: how many worker processes host the channels at most (None:
    the CPU count of the machine that runs the job)."""

    name: str
    width: int
    partition_by: PartitionKey | None = None
    members: tuple[str, ...] = ()
    process: bool = False  # a process group (`Graph.process`): width 1, no key
    processes: int | None = None

    def worker_processes(self) -> int:
        """How many worker processes run the region: one per channel, but no more than
        ``processes`` (default: the CPU count). Why not always one per channel: on a machine
        with fewer cores than channels, the extra processes only add forks, exits, context
        switches and caches to refill; a process then hosts several channels, each unchanged
        (its own operators, replicas, keys, socket and metrics)."""
        return max(1, min(self.width, self.processes or os.cpu_count() or 1))

    @property
    def keyed(self) -> bool:
        return self.partition_by is not None

    @property
    def kind(self) -> str:
        """What the status view and the errors call it: "parallel region" or "process group"."""
        return "process group" if self.process else "parallel region"

    def __contains__(self, operator: object) -> bool:
        return operator in self.members


@dataclass
class ParallelBlock:
    """What ``with g.parallel(...)`` opens: it collects the operators added inside the block."""

    spec: ParallelRegion
    members: list[str] = field(default_factory=list)
    _graph: Any = None

    def __enter__(self) -> ParallelBlock:
        graph = self._graph
        if graph._parallel_open is not None:
            outer = graph._parallel_open.spec
            raise GraphError(None, "parallel", f"{self.spec.kind} {self.spec.name!r} is opened inside "
                                               f"{outer.kind} {outer.name!r}: parallel regions and "
                                               "process groups do not nest (a region's channels "
                                               "are processes already)")
        graph._parallel_open = self
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._graph._parallel_open = None
        if exc_type is None and not self.members:
            raise GraphError(None, "parallel", f"{self.spec.kind} {self.spec.name!r} holds no "
                                               "operator: add the operators to run in parallel "
                                               "inside the with block")

    def add(self, *operators: Any) -> ParallelBlock:
        """Put operators added earlier (names or their streams) into the region: how a graph that
        a script built without regions is run in parallel without editing it."""
        for op in operators:
            name = getattr(op, "operator", op)
            if not isinstance(name, str):
                raise GraphError(None, "parallel", f"{self.spec.kind} {self.spec.name!r}: add() takes "
                                                   f"operator names or streams, got {op!r}")
            if name not in self.members:
                self.members.append(name)
        return self

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def width(self) -> int:
        return self.spec.width

    def processes(self, processes: int | None) -> ParallelBlock:
        """Host the region's channels in at most ``processes`` worker processes (None: the CPU
        count, the default): ``with g.parallel(4, partition_by="k").processes(2):``."""
        self.spec = replace(self.spec, processes=_processes(self.spec.name, processes))
        return self


def _count(name: str, setting: str, value: Any, meaning: str) -> int:
    """A region's ``width`` or ``processes``, checked: an int from 1 to `MAX_WIDTH`, or its
    digits (``-p width=4`` is read as text); ``meaning`` ends the error's message."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WIDTH:
        raise GraphError(None, "parallel", f"parallel region {name!r}: {setting}={value!r}: "
                                           f"expected an int from 1 to {MAX_WIDTH} {meaning}")
    return value


def _processes(name: str, processes: Any) -> int | None:
    if processes is None:
        return None
    return _count(name, "processes", processes, "(the most worker processes hosting its "
                                                "channels), or None (the CPU count)")


def parallel_spec(name: str, width: Any, partition_by: Any, params: Mapping[str, Any],
                  processes: Any = None) -> ParallelRegion:
    """A region from `Graph.parallel`'s arguments, checked at once. ``width`` None: the graph's
    ``width`` parameter if it has one, else the CPU count. ``processes`` None: the graph's
    ``processes`` parameter if it has one, else (at run time) the CPU count."""
    if not is_name(name):
        raise GraphError(None, "parallel", f"parallel region name {name!r}: use letters, digits, "
                                           "_ . -")
    if width is None:
        width = params.get("width", os.cpu_count() or 1)
    width = _count(name, "width", width, "(the number of channels)")
    if partition_by is not None and not (isinstance(partition_by, str) and partition_by) \
            and not callable(partition_by):
        raise GraphError(None, "parallel", f"parallel region {name!r}: partition_by="
                                           f"{partition_by!r}: expected an attribute name, a "
                                           "function of a tuple, or None (round-robin)")
    if processes is None:
        processes = params.get("processes")
    return ParallelRegion(name, width, partition_by, processes=_processes(name, processes))


def process_spec(name: str) -> ParallelRegion:
    """A process group from `Graph.process`'s arguments, checked at once."""
    if not is_name(name):
        raise GraphError(None, "parallel", f"process group name {name!r}: use letters, digits, "
                                           "_ . -")
    return ParallelRegion(name, 1, None, process=True)


def resolve_parallel(graph: FrozenGraph, blocks: list[ParallelBlock],
                     consistent: Mapping[str, str]) -> FrozenGraph:
    """``graph`` with its parallel regions, every rule checked (`GraphValidationError` lists all
    broken ones). ``consistent``: operator -> the consistent region it is in."""
    errors: list[GraphError] = []
    defs = {op.name: op for op in graph.operators}
    regions = [replace(b.spec, members=tuple(n for n in defs if n in b.members)) for b in blocks]
    owner: dict[str, str] = {}
    kinds: dict[str, str] = {}
    for b in blocks:
        kinds.setdefault(b.name, b.spec.kind)
        for n in b.members:
            if n not in defs:
                errors.append(GraphError(n, "parallel", f"{b.spec.kind} {b.name!r}: no such "
                                                        "operator in the graph"))
            elif n in owner:
                first = kinds[owner[n]]
                where = (f"{first}s {owner[n]!r} and {b.name!r}" if first == b.spec.kind else
                         f"{first} {owner[n]!r} and {b.spec.kind} {b.name!r}")
                errors.append(GraphError(n, "parallel", f"is in {where}: an operator runs in one"))
            owner.setdefault(n, b.name)
            kinds.setdefault(b.name, b.spec.kind)
    names = [r.name for r in regions]
    for name in sorted({n for n in names if names.count(n) > 1}):
        named = {r.kind for r in regions if r.name == name}
        what = f"{named.pop()}s" if len(named) == 1 else "parallel regions or process groups"
        errors.append(GraphError(None, "parallel", f"two {what} are named {name!r}"))
    for block, region in zip(blocks, regions, strict=True):
        if not block.members:  # ``g.parallel(...)`` neither entered nor given operators by add()
            errors.append(GraphError(None, "parallel", f"{region.kind} {region.name!r} holds no "
                                                       "operator: add the operators to run in "
                                                       "parallel inside its with block or with add()"))
        elif region.members:
            errors.extend(_check_region(region, defs, consistent))
    if errors:
        raise GraphValidationError(graph.name, errors)
    return replace(graph, parallel=tuple(regions))


def _check_region(region: ParallelRegion, defs: Mapping[str, OperatorDef],
                  consistent: Mapping[str, str]) -> list[GraphError]:
    errors: list[GraphError] = []
    members = set(region.members)
    where = f"{region.kind} {region.name!r}"
    for name in region.members:
        op = defs[name]
        if op.kind == "source":
            errors.extend(_check_source(region, op))
        if not region.process:
            errors.extend(_operator_rules(region, op))
        for i, port in enumerate(op.inputs):
            if any(c.feedback for c in port.connections):
                errors.append(GraphError(name, "parallel", f"input port {i} has a feedback "
                                                           f"connection: not allowed in {where}"))
            window = port.window
            if (window is not None and not window.partitioned and not region.process
                    and region.width > 1 and region.partition_by is not None):
                mixed = _mixes_keys(window)
                if mixed is not None:
                    errors.append(GraphError(name, "parallel", f"input port {i}: the window is not "
                                                               f"partitioned and {mixed}, so its windows "
                                                               f"would change with the channels of {where} "
                                                               "(each holds only its channel's keys); "
                                                               "partition it by the region's key, or run "
                                                               "it with width 1 or out of the region"))
            if window is None or not window.partitioned or region.process:
                continue
            spans = _spans_partitions(port) if region.width > 1 else None
            if spans is not None:
                errors.append(GraphError(name, "parallel", f"input port {i}: {spans}, so its events "
                                                           f"would change with the channels of {where}; "
                                                           "run it with width 1 or out of the region"))
            if region.partition_by is None:
                errors.append(GraphError(name, "parallel", f"input port {i}: the window is "
                                                           f"partitioned but {where} has no "
                                                           "partition_by, so one partition's tuples "
                                                           "would be spread over channels; give "
                                                           f"g.parallel(partition_by={port.partition_by!r})"))
            elif port.partition_by != region.partition_by:
                errors.append(GraphError(name, "parallel", f"input port {i}: the window is "
                                                           f"partitioned by {port.partition_by!r} but "
                                                           f"{where} splits by {region.partition_by!r}: "
                                                           "a partition would be spread over channels; "
                                                           "split by the window's key"))
        if isinstance(region.partition_by, str):
            for i, port in enumerate(op.inputs):
                for c in port.connections:
                    up = defs.get(c.operator)
                    if c.operator in members or up is None or c.port >= len(up.outputs):
                        continue
                    schema = up.outputs[c.port]
                    if schema is not None and schema.type_of(region.partition_by) is None:
                        errors.append(GraphError(name, "unknown-attribute",
                                                 f"input port {i}: {where} splits by "
                                                 f"{region.partition_by!r}, which is not in the "
                                                 f"schema {schema} of {c.operator!r}"))
    inside = {consistent.get(n) for n in region.members}
    if len(inside) > 1:
        names = sorted(f"{n!r} ({consistent[n]!r})" if n in consistent else f"{n!r} (none)"
                       for n in region.members)
        errors.append(GraphError(region.members[0], "parallel", f"{where} straddles consistent "
                                 f"regions: {', '.join(names)}; its channels checkpoint together, "
                                 "so put all of its operators in one consistent region or none"))
    errors.extend(_check_shape(region, defs))
    return errors


def _operator_rules(region: ParallelRegion, op: OperatorDef) -> list[GraphError]:
    """The operator's own rules for running in the region's channels (`Operator.check_parallel`)."""
    return [GraphError(op.name, "parallel", f"{region.kind} {region.name!r}: {message}")
            for message in own_rules(op.operator, "check_parallel", region.width)]


def _check_source(region: ParallelRegion, op: OperatorDef) -> list[GraphError]:
    """A source in a region runs as one replica per channel, inside the channel's worker."""
    errors: list[GraphError] = []
    where = f"{region.kind} {region.name!r}"
    src = op.operator
    if isinstance(src, Source) and type(src).run is not Source.run:
        errors.append(GraphError(op.name, "parallel", f"a source in {where} runs inside a worker "
                                                      "process, which drives generate(); this one "
                                                      "has an async run(), which needs the job's "
                                                      "event loop: give it generate(), or add it "
                                                      "before the with block"))
    key = region.partition_by
    schema = op.outputs[0] if op.outputs else None
    if isinstance(key, str) and region.width > 1 and schema is not None \
            and schema.type_of(key) is None:
        errors.append(GraphError(op.name, "unknown-attribute",
                                 f"{where} is keyed by {key!r}, which is not in the schema "
                                 f"{schema} of its replicated source"))
    return errors


def _mixes_keys(spec: Any) -> str | None:
    """Why an unpartitioned window in a keyed region would not hold the same tuples at every
    width (its count or delta policy goes by every key's tuples: a channel sees only its own
    keys), or None (time and punct windows cut where they would at width 1)."""
    if not isinstance(spec, WindowSpec):
        return None  # a timeInterval window: panes by event time
    for role, policy in (("eviction", spec.eviction), ("trigger", spec.trigger)):
        if isinstance(policy, (Count, Delta)):
            return f"its {role} policy ({policy.clause()}) goes by every key's tuples"
    return None


def _spans_partitions(port: InputPort) -> str | None:
    """Why a partitioned window's events depend on partitions other than the tuple's own (so
    splitting its partitions over channels would change them), or None."""
    spec = port.window
    if not isinstance(spec, WindowSpec):
        return None  # a timeInterval window: panes per partition, one watermark for all
    if spec.partition_eviction is not None:
        return f"its partition eviction ({spec.partition_eviction.clause()}) counts across partitions"
    if port.flavor == "cpp" and spec.uses_system_time:
        return "a cpp time window's timer flushes the window's partitions together"
    if port.flavor == "cpp" and isinstance(spec.eviction, Punct):
        return "a cpp punct window raises one empty-window event when no partition holds a tuple"
    if port.flavor == "java" and spec.type is WindowType.SLIDING and isinstance(spec.trigger, Delta):
        return "IBM's Java sliding window shares one delta trigger boundary among its partitions"
    return None


def _check_shape(region: ParallelRegion, defs: Mapping[str, OperatorDef]) -> list[GraphError]:
    """Connected, and no stream leaves the region to come back into it."""
    members = set(region.members)
    where = f"{region.kind} {region.name!r}"
    downstream: dict[str, set[str]] = {n: set() for n in defs}
    for op in defs.values():
        for port in op.inputs:
            for c in port.connections:
                if c.operator in downstream and not c.feedback:
                    downstream[c.operator].add(op.name)
    errors: list[GraphError] = []
    # Connected: every member reached from the first through connections between members,
    # either way (a process group may colocate unrelated operators).
    linked: dict[str, set[str]] = {n: set() for n in members}
    for n in members:
        for m in downstream[n] & members:
            linked[n].add(m)
            linked[m].add(n)
    seen: set[str] = set()
    todo = [region.members[0]] if region.members else []
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            todo.extend(linked[n])
    for n in region.members:
        if n not in seen and not region.process:
            errors.append(GraphError(n, "parallel", f"is not connected to the other operators of "
                                                    f"{where} ({', '.join(region.members)}): a region "
                                                    "is one operator or a chain"))
    # No way out and back in: a non-member reached from a member must not reach a member.
    outside = {m for n in members for m in downstream[n] if m not in members}
    todo, seen = list(outside), set()
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        for m in downstream[n]:
            if m in members:
                errors.append(GraphError(n, "parallel", f"takes a stream out of {where} and leads "
                                                        f"back into it (to {m!r}): put {n!r} in the "
                                                        "region too, or out of its path"))
            else:
                todo.append(m)
    return errors
