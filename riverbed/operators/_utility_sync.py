"""The utility operators that synchronise or gate several input ports: Barrier, Pair, Gate and
DynamicFilter.

- Barrier and Pair queue tuples per input port (and per partition key)
  until every port has one, then emit one combined tuple (Barrier) or the
  matched tuples in port order followed by a window mark (Pair).
- Gate lets data tuples through only while fewer than N are unacknowledged;
  tuples on its control port acknowledge them.
- DynamicFilter passes tuples whose key is in a set that its other input
  ports add to and remove from.

The input ports are served in arrival order, one item at a time. Where IBM's
operators block a port (a full Barrier/Pair ``bufferSize``, Gate waiting for
acknowledgements), a riverbed handler cannot: Barrier and Pair queue without
bound, Gate queues what it may not pass yet. The tuples that come out, and
their order, are the ones IBM's operators produce; only the backpressure on
the producers differs.

Window punctuation (SPL rule P2): Barrier drops marks, Pair generates its
own, Gate forwards port 0's in order with its tuples, DynamicFilter forwards
port 0's to every output. Final punctuation is forwarded by the runtime once
every input port ended (P1).
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, ClassVar

from ..graph import PortLayout, Punct, Watermark, WindowPunctuationMode
from ._params import OperatorParameterError
from ._utility_support import (
    KeyFn,
    OutputClause,
    PortRanges,
    ShapedOperator,
    attribute_problems,
    freeze_key,
    int_param,
    key_fn,
    key_out,
    one_schema_problems,
    output_schema,
    params,
    port_shape,
    thaw_key,
)

__all__ = ["Barrier", "DynamicFilter", "Gate", "Pair"]


# -------------------------------------------------------------- Barrier, Pair

_PARTITION_PARAM = re.compile(r"^partition_?[bB]y_?(LHS|RHS|lhs|rhs|\d+)$")


class _Synchroniser(ShapedOperator):
    """Queues per input port and partition; a match takes the oldest tuple of every port."""

    port_ranges = PortRanges(inputs=(2, None), outputs=(1, 1))

    _operator: ClassVar[str] = ""

    def __init__(self, partition_by: Sequence[KeyFn | str] | None, buffer_size: int | None,
                 spl: dict[str, Any]) -> None:
        name = self._operator
        per_port: dict[str, Any] = {}
        for k in list(spl):
            m = _PARTITION_PARAM.match(k)
            if m:
                per_port[m.group(1).lower()] = spl.pop(k)
        p = params(name, {"buffer_size": buffer_size}, spl)
        if p["buffer_size"] is not None:
            int_param(name, "buffer_size", p["buffer_size"])
        self.buffer_size: int | None = p["buffer_size"]
        if partition_by is not None and per_port:
            raise OperatorParameterError(f"{name}: give partition_by (one key per input port) or "
                                         "the SPL partitionByLHS/RHS/<i> parameters, not both")
        if partition_by is not None and (isinstance(partition_by, str)
                                         or not isinstance(partition_by, Sequence)):
            raise OperatorParameterError(f"{name}: partition_by must be a list with one key (a "
                                         "callable or attribute name) per input port")
        self._partition_given: dict[str, Any] = (
            {str(i): v for i, v in enumerate(partition_by)} if partition_by is not None else per_port)
        self._keys: list[KeyFn] | None = None
        self._n = 0
        self._parts: dict[Hashable, list[deque[Any]]] = {}

    def check_ports(self, ports: PortLayout) -> list[str]:
        problems = super().check_ports(ports)
        found, keys = self._partition_problems(len(ports.windows))
        return problems + found + [m for port, expr in keys.items() for m in attribute_problems(
            [(f"partitionBy of input port {port}", expr)], ports.input_schema(port))]

    def _partition_problems(self, n: int) -> tuple[list[str], dict[int, Any]]:
        """What the partitionBy parameters break for ``n`` input ports, and the key of each port."""
        problems: list[str] = []
        keys: dict[int, Any] = {}
        for label, value in self._partition_given.items():
            port = 0 if label == "lhs" else n - 1 if label == "rhs" else int(label)
            if port >= n:
                problems.append(f"partitionBy{label} names input port {port}, but the operator "
                                f"has {n} input ports")
            elif port in keys:
                problems.append(f"input port {port} has two partitionBy parameters (LHS/RHS are "
                                "ports 0 and n-1)")
            else:
                keys[port] = value
        missing = [i for i in range(n) if i not in keys]
        if self._partition_given and missing and not problems:
            problems.append(f"partitioned synchronisation needs one partitionBy key per input "
                            f"port; port(s) {missing} have none")
        return problems, keys

    def _setup_ports(self) -> None:
        self._n = n = port_shape(self, self.port_ranges).inputs
        if not self._partition_given:
            return
        problems, keys = self._partition_problems(n)
        if problems:
            raise OperatorParameterError(f"{self._operator} {self.context.name!r}: {problems[0]}")
        fns: list[KeyFn] = []
        for i in range(n):
            fn = key_fn(self._operator, f"partitionBy{i}", keys[i], optional=False)
            assert fn is not None  # optional=False: a missing key raised
            fns.append(fn)
        self._keys = fns

    def on_tuple(self, tup: Any, port: int) -> None:
        key: Hashable = None if self._keys is None else freeze_key(self._keys[port](tup))
        queues = self._parts.get(key)
        if queues is None:
            queues = self._parts[key] = [deque() for _ in range(self._n)]
        queues[port].append(tup)
        if all(queues):
            matched = [q.popleft() for q in queues]
            if not any(queues):
                del self._parts[key]
            self._emit(matched)

    def _emit(self, matched: list[Any]) -> None:
        raise NotImplementedError

    def snapshot(self) -> Any:
        return [[key_out(k), [list(q) for q in queues]] for k, queues in self._parts.items()]

    def restore(self, state: Any) -> None:
        self._parts = {thaw_key(k): [deque(q) for q in queues] for k, queues in state or []}

    def reset_to_initial_state(self) -> None:
        self._parts = {}


class Barrier(_Synchroniser):
    """SPL ``Barrier``: one output tuple per set of corresponding tuples from every input port.

    Tuples queue per input port; when every port has at least one, the
    oldest of each are combined into one output tuple. ``output``: the
    output clause, whose callables take the matched tuples as positional
    arguments in port order (``{"total": lambda a, b: a["x"] + b["y"]}``);
    an unassigned attribute is copied from the first input port that has it.
    ``partition_by``: one key per input port (callable or attribute name),
    or SPL's ``partitionByLHS``/``partitionByRHS``/``partitionBy<i>``: then
    tuples are matched only with tuples of the same key. ``buffer_size``
    (``bufferSize``): accepted; IBM blocks a port whose queue is full, which
    a riverbed handler cannot, so queues are unbounded (the output is the same).

    Two or more input ports, no windows, one output port. Punctuation: free
    (window marks are dropped); final is forwarded by the runtime after
    every input port ended; unmatched tuples are then discarded. State: the
    unmatched tuples per partition.
    """

    window_punctuation: ClassVar[WindowPunctuationMode] = "free"
    _operator: ClassVar[str] = "Barrier"

    def __init__(self, *, output: Mapping[str, Any] | None = None,
                 partition_by: Sequence[KeyFn | str] | None = None,
                 buffer_size: int | None = None, **spl: Any) -> None:
        super().__init__(partition_by, buffer_size, spl)
        self.clause = OutputClause("Barrier", 0, output)
        self._build: Callable[..., Any] = self.clause.bind(None)

    def check_ports(self, ports: PortLayout) -> list[str]:
        return super().check_ports(ports) + self.clause.problems(ports.output_schema(),
                                                                 ports.input_schemas)

    def setup(self) -> None:
        self._setup_ports()
        self._build = self.clause.bind(output_schema(self, 0))

    def _emit(self, matched: list[Any]) -> None:
        self.submit(self._build(*matched), 0)


class Pair(_Synchroniser):
    """SPL ``Pair``: like `Barrier`, but the matched tuples are emitted one by one, in input-port
    order, each set followed by a window mark.

    Parameters: ``partition_by`` (or ``partitionByLHS``/``RHS``/``<i>``) and
    ``buffer_size`` as for `Barrier`. All ports carry the same schema; tuples
    are forwarded unchanged.

    Two or more input ports, no windows, one output port. Punctuation:
    generating: a window mark after each matched set; incoming marks are
    dropped; final is forwarded by the runtime after every input ended.
    """

    window_punctuation: ClassVar[WindowPunctuationMode] = "generating"
    _operator: ClassVar[str] = "Pair"

    def __init__(self, *, partition_by: Sequence[KeyFn | str] | None = None,
                 buffer_size: int | None = None, **spl: Any) -> None:
        super().__init__(partition_by, buffer_size, spl)

    def check_ports(self, ports: PortLayout) -> list[str]:
        """`_Synchroniser`'s rules, and one schema on every port (SPL's Pair: the tuples go on
        unchanged, so a port of another schema failed the job at its first tuple)."""
        return super().check_ports(ports) + one_schema_problems(ports, "Pair")

    def setup(self) -> None:
        self._setup_ports()

    def _emit(self, matched: list[Any]) -> None:
        for tup in matched:
            self.submit(tup, 0)
        self.submit_punct(Punct.WINDOW, 0)


# ---------------------------------------------------------------- DynamicFilter


class DynamicFilter(ShapedOperator):
    """SPL ``DynamicFilter``: port-0 tuples pass when their key is in a set that ports 1 and 2 edit.

    ``key``: a callable (or attribute name) giving a port-0 tuple's key;
    ``add_key`` (``addKey``): the key a port-1 tuple adds to the set;
    ``remove_key`` (``removeKey``): the key a port-2 tuple removes (required
    when there is a third input port, refused without). A port-0 tuple whose
    key is in the set goes to output 0 unchanged, otherwise to the optional
    output 1. The ports are served in arrival order (IBM serves them
    concurrently under one lock, so the order across ports is whatever
    arrives first there too).

    Two or three input ports without windows, one or two output ports.
    Punctuation: window marks of port 0 are forwarded to every output port;
    those of ports 1 and 2 are dropped. Final is forwarded by the runtime
    once every input port ended. State: the key set.
    """

    passes_through: ClassVar[bool] = True

    port_ranges = PortRanges(inputs=(2, 3), outputs=(1, 2))

    window_punctuation: ClassVar[WindowPunctuationMode] = "generating"

    def __init__(self, key: KeyFn | str | None = None, add_key: KeyFn | str | None = None,
                 remove_key: KeyFn | str | None = None, **spl: Any) -> None:
        p = params("DynamicFilter", {"key": key, "add_key": add_key, "remove_key": remove_key}, spl)
        self.key = key_fn("DynamicFilter", "key", p["key"], optional=False)
        self.add_key = key_fn("DynamicFilter", "add_key", p["add_key"], optional=False)
        self.remove_key = key_fn("DynamicFilter", "remove_key", p["remove_key"])
        self._reads = [(0, "key", p["key"]), (1, "add_key", p["add_key"]),
                       (2, "remove_key", p["remove_key"])]
        self.keys: dict[Hashable, None] = {}
        self._outputs = 1

    def check_ports(self, ports: PortLayout) -> list[str]:
        problems = super().check_ports(ports)
        n = len(ports.windows)
        if 2 <= n <= 3 and (n == 3) != (self.remove_key is not None):
            problems.append(self._remove_key_problem(n))
        return problems + [m for port, what, expr in self._reads
                           for m in attribute_problems([(what, expr)], ports.input_schema(port))]

    def _remove_key_problem(self, inputs: int) -> str:
        return (f"remove_key (removeKey) goes with a third input port (the removals), and only "
                f"with one: the graph gives it {inputs} input ports and remove_key is "
                f"{'set' if self.remove_key else 'not set'}")

    def setup(self) -> None:
        shape = port_shape(self, self.port_ranges)
        if (shape.inputs == 3) != (self.remove_key is not None):
            raise OperatorParameterError(f"DynamicFilter {self.context.name!r}: "
                                         f"{self._remove_key_problem(shape.inputs)}")
        self._outputs = shape.outputs

    def on_tuple(self, tup: Any, port: int) -> None:
        if port == 0:
            assert self.key is not None
            if freeze_key(self.key(tup)) in self.keys:
                self.submit(tup, 0)
            elif self._outputs == 2:
                self.submit(tup, 1)
        elif port == 1:
            assert self.add_key is not None
            self.keys[freeze_key(self.add_key(tup))] = None
        else:
            assert self.remove_key is not None
            self.keys.pop(freeze_key(self.remove_key(tup)), None)

    def on_punct(self, punct: Punct, port: int) -> None:
        if punct is Punct.WINDOW and port == 0:
            for out in range(self._outputs):
                self.submit_punct(Punct.WINDOW, out)

    def snapshot(self) -> Any:
        return [key_out(k) for k in self.keys]

    def restore(self, state: Any) -> None:
        self.keys = {thaw_key(k): None for k in state or []}

    def reset_to_initial_state(self) -> None:
        self.keys = {}


# ------------------------------------------------------------------------- Gate


class Gate(ShapedOperator):
    """SPL ``Gate``: lets port-0 tuples through while fewer than N are unacknowledged.

    ``max_unacked_tuple_count`` (``maxUnackedTupleCount``, required; 0 acts
    as 1): how many tuples may be out without acknowledgement. Each tuple
    on the control port 1 acknowledges ``num_tuples_to_ack``
    (``numTuplesToAck``: an int, or a callable of the control tuple;
    default 1) tuples (the count never goes below zero). A port-0 tuple that
    finds the count at the maximum waits, and so does everything behind it,
    window marks included, until acknowledgements open the gate; IBM blocks
    the port, riverbed queues the waiting items in order (without bound).

    Data port 0 and control port 1, no windows, one output port.
    Punctuation: window marks of port 0 are forwarded in order with the
    tuples (a mark also waits for an opening, but does not count); marks of
    port 1 are dropped. Final is forwarded by the runtime once both ports
    ended; tuples still waiting then are never sent (IBM's would wait until
    shutdown) and are counted in ``discarded``. Watermarks wait in line with
    the tuples (``holds_watermarks``) and go out, uncounted, when the tuples
    before them have. SPL does not checkpoint Gate; riverbed snapshots the
    count and the waiting items.
    """

    passes_through: ClassVar[bool] = True

    port_ranges = PortRanges(inputs=(2, 2), outputs=(1, 1))

    window_punctuation: ClassVar[WindowPunctuationMode] = "generating"
    holds_watermarks: ClassVar[bool] = True

    def __init__(self, max_unacked_tuple_count: int | None = None, *,
                 num_tuples_to_ack: int | Callable[[Any], int] | None = None, **spl: Any) -> None:
        p = params("Gate", {"max_unacked_tuple_count": max_unacked_tuple_count,
                            "num_tuples_to_ack": num_tuples_to_ack}, spl)
        if p["max_unacked_tuple_count"] is None:
            raise OperatorParameterError("Gate: max_unacked_tuple_count (maxUnackedTupleCount) is "
                                         "required")
        self.max_unacked = max(1, int_param("Gate", "max_unacked_tuple_count",
                                         p["max_unacked_tuple_count"]))
        ack = 1 if p["num_tuples_to_ack"] is None else p["num_tuples_to_ack"]
        if not callable(ack):
            int_param("Gate", "num_tuples_to_ack", ack)
        self.num_tuples_to_ack: int | Callable[[Any], int] = ack
        self.unacked = 0
        self.waiting: deque[Any] = deque()
        self.discarded = 0
        self._ended: set[int] = set()

    def setup(self) -> None:
        port_shape(self, self.port_ranges)

    def on_tuple(self, tup: Any, port: int) -> None:
        if port == 0:
            self.waiting.append(tup)
        else:
            ack = self.num_tuples_to_ack
            n = ack(tup) if callable(ack) else ack
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise ValueError(f"Gate {self.context.name!r}: num_tuples_to_ack gave {n!r}; "
                                 "expected an int >= 0")
            self.unacked = max(0, self.unacked - n)
        self._release()

    def on_punct(self, punct: Punct, port: int) -> None:
        if punct is Punct.WINDOW:
            if port == 0:
                self.waiting.append(Punct.WINDOW)
                self._release()
            return
        self._ended.add(port)
        if len(self._ended) == 2:  # no acknowledgement can come any more
            self.discarded += sum(1 for x in self.waiting
                                 if x is not Punct.WINDOW and type(x) is not Watermark)
            self.waiting.clear()

    def on_watermark(self, value: int) -> None:
        self.waiting.append(Watermark(value))
        self._release()

    def _release(self) -> None:
        waiting = self.waiting
        while waiting and self.unacked < self.max_unacked:  # marks, too, wait for an opening
            item = waiting.popleft()
            if item is Punct.WINDOW:
                self.submit_punct(Punct.WINDOW, 0)
            elif type(item) is Watermark:
                self.context.submit_watermark(item.value)
            else:
                self.unacked += 1
                self.submit(item, 0)

    def snapshot(self) -> Any:
        return {"unacked": self.unacked, "waiting": [
            ["w"] if x is Punct.WINDOW else ["m", x.value] if type(x) is Watermark else ["t", x]
            for x in self.waiting]}

    def restore(self, state: Any) -> None:
        self.unacked = int(state["unacked"])
        self.waiting = deque(Punct.WINDOW if x[0] == "w" else Watermark(int(x[1])) if x[0] == "m"
                             else x[1] for x in state["waiting"])

    def reset_to_initial_state(self) -> None:
        self.unacked = 0
        self.waiting = deque()
