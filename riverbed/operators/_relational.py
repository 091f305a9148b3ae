"""The per-tuple relational operators: Filter, Functor, Punctor, and Custom.

None of them has a window: each input tuple is handled on its own, the
moment it arrives. They differ in what they do with it and, above all, in
what happens to window punctuation (SPL rule P2):

- Filter and Functor are *preserving*: a window mark that reaches them is
  forwarded to every output port, so the groups a downstream ``punct()``
  window sees are the groups upstream made.
- Punctor is *generating*: it drops incoming marks and cuts the stream into
  groups itself, putting a mark before or after each tuple whose
  ``punctuate`` condition holds.
- Custom is *free*: nothing is forwarded except final; the logic submits
  window marks itself where it wants them.

Final punctuation is never the operator's business (P1): the runtime
forwards it on every output port once every input port has seen it.

SPL expressions are Python callables of the input tuple
(``filter=lambda t: t["price"] > 10``); output clauses map attributes to
such callables or to constants, and unassigned attributes are copied from
the input tuple (auto-assignment).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, Literal

from ..graph import PortLayout, Punct, WindowPunctuationMode
from ._params import OperatorParameterError
from ._utility_support import (
    OutputClause,
    PortRanges,
    ShapedOperator,
    batch_submit,
    check_callable,
    output_schema,
    params,
    port_shape,
)

__all__ = ["Custom", "Filter", "Functor", "Punctor"]

Predicate = Callable[[Any], Any]


class Filter(ShapedOperator):
    """SPL ``Filter``: tuples for which ``filter`` holds go to output 0, the others to output 1.

    Parameters: ``filter`` (a callable of the tuple; absent: every tuple
    passes). One input port, no window; one or two output ports (the second,
    optional, receives the tuples that fail the condition). Tuples are
    forwarded unchanged (Filter has no output assignments).

    Punctuation: preserving: each window mark is forwarded to every output
    port. Final is forwarded by the runtime after the input ended.
    """

    passes_through: ClassVar[bool] = True

    port_ranges = PortRanges(inputs=(1, 1), outputs=(1, 2))

    window_punctuation: ClassVar[WindowPunctuationMode] = "preserving"

    def __init__(self, filter: Predicate | None = None, **spl: Any) -> None:
        p = params("Filter", {"filter": filter}, spl)
        self.filter = check_callable("Filter", "filter", p["filter"])
        self._rejects = False
        self._pass: Callable[[Iterable[Any]], None] = self._submit_each

    def _submit_each(self, tuples: Iterable[Any]) -> None:
        for tup in tuples:
            self.submit(tup, 0)

    def setup(self) -> None:
        shape = port_shape(self, self.port_ranges)
        self._rejects = shape.outputs == 2
        self._pass = batch_submit(self, 0)

    def on_tuple(self, tup: Any, port: int) -> None:
        if self.filter is None or self.filter(tup):
            self.submit(tup, 0)
        elif self._rejects:
            self.submit(tup, 1)

    def on_tuples(self, tuples: Iterator[Any], port: int) -> None:
        keep = self.filter
        if self._rejects:
            submit = self.submit
            for tup in tuples:
                submit(tup, 0 if keep is None or keep(tup) else 1)
        elif keep is None:
            self._pass(tuples)
        else:
            self._pass(filter(keep, tuples))  # `filter` calls keep(tup) and takes its truth


class Functor(ShapedOperator):
    """SPL ``Functor``: per passing tuple, one output tuple on **each** output port.

    Parameters: ``filter`` (callable; absent: every tuple passes);
    ``output`` (port 0's output clause: attribute -> callable of the input
    tuple or constant) or ``outputs`` (one clause per output port);
    unassigned attributes are copied from the input tuple, and with a
    declared output schema the output holds exactly the schema's attributes.
    ``state`` (a dict of plain data, kept and snapshotted) with ``logic``
    (a callable ``logic(state, tup)``) plays SPL's ``logic state`` /
    ``onTuple``: it runs first for every tuple, before the filter;
    assignments may read the same dict (restore updates it in place).

    One input port without window; one or more output ports.
    Punctuation: preserving (window marks go to every output port); final
    is forwarded by the runtime.
    """

    port_ranges = PortRanges(inputs=(1, 1), outputs=(1, None))

    window_punctuation: ClassVar[WindowPunctuationMode] = "preserving"

    def __init__(self, filter: Predicate | None = None, *,
                 output: Mapping[str, Any] | None = None,
                 outputs: Sequence[Mapping[str, Any] | None] | None = None,
                 state: dict[str, Any] | None = None,
                 logic: Callable[[dict[str, Any], Any], None] | None = None, **spl: Any) -> None:
        p = params("Functor", {"filter": filter, "output": output, "outputs": outputs,
                               "state": state, "logic": logic}, spl)
        self.filter = check_callable("Functor", "filter", p["filter"])
        if p["output"] is not None and p["outputs"] is not None:
            raise OperatorParameterError("Functor: give output (port 0's clause) or outputs (one "
                                         "clause per port), not both")
        clauses = [p["output"]] if p["outputs"] is None else list(p["outputs"])
        self.clauses = [OutputClause("Functor", i, c) for i, c in enumerate(clauses)]
        if p["state"] is not None and not isinstance(p["state"], dict):
            raise OperatorParameterError(f"Functor: state must be a dict of plain data, got "
                                         f"{p['state']!r}")
        self.state: dict[str, Any] = p["state"] if p["state"] is not None else {}
        self._initial = copy.deepcopy(self.state)
        self.logic = p["logic"]
        if self.logic is not None and not callable(self.logic):
            raise OperatorParameterError(f"Functor: logic must be a callable (state, tup), got "
                                         f"{self.logic!r}")
        self._builders: list[Callable[[Any], Any]] = []
        self._submits: list[Callable[[Iterable[Any]], None]] = []
        self._build_run: Callable[[Iterable[Any], Callable[[list[Any]], None]], None] = _no_run

    def check_ports(self, ports: PortLayout) -> list[str]:
        problems = super().check_ports(ports)
        if len(self.clauses) > ports.outputs:
            problems.append(self._too_many_clauses(ports.outputs))
        clauses = self.clauses + [OutputClause("Functor", i, None)
                                  for i in range(len(self.clauses), ports.outputs)]
        return problems + _clause_problems(clauses, ports)

    def _too_many_clauses(self, outputs: int) -> str:
        return (f"{len(self.clauses)} output clauses for {outputs} output port(s); give one "
                "clause per port")

    def setup(self) -> None:
        shape = port_shape(self, self.port_ranges)
        if len(self.clauses) > shape.outputs:
            raise OperatorParameterError(f"Functor {self.context.name!r}: "
                                         f"{self._too_many_clauses(shape.outputs)}")
        clauses = self.clauses + [OutputClause("Functor", i, None)
                                  for i in range(len(self.clauses), shape.outputs)]
        self._builders = [c.bind_one(output_schema(self, i)) for i, c in enumerate(clauses)]
        self._submits = [batch_submit(self, i) for i in range(len(self._builders))]
        self._build_run = clauses[0].bind_run(output_schema(self, 0))

    def on_tuple(self, tup: Any, port: int) -> None:
        if self.logic is not None:
            self.logic(self.state, tup)
        if self.filter is not None and not self.filter(tup):
            return
        for i, build in enumerate(self._builders):
            self.submit(build(tup), i)

    def on_tuples(self, tuples: Iterator[Any], port: int) -> None:
        keep = self.filter
        if self.logic is None and len(self._builders) == 1:
            passing = tuples if keep is None else filter(keep, tuples)
            self._build_run(passing, self._submits[0])  # one tuple at a time, in order
            return
        logic, state, submit = self.logic, self.state, self.submit
        builders = list(enumerate(self._builders))
        for tup in tuples:
            if logic is not None:
                logic(state, tup)
            if keep is not None and not keep(tup):
                continue
            for i, build in builders:
                submit(build(tup), i)

    def snapshot(self) -> Any:
        return copy.deepcopy(self.state) if self.logic is not None or self.state else None

    def restore(self, state: Any) -> None:
        if state is None:
            return
        self.state.clear()
        self.state.update(copy.deepcopy(state))

    def reset_to_initial_state(self) -> None:
        self.state.clear()
        self.state.update(copy.deepcopy(self._initial))


def _no_run(tuples: Iterable[Any], submit: Callable[[list[Any]], None]) -> None:
    raise RuntimeError("Functor: a run of tuples arrived before setup()")


class Punctor(ShapedOperator):
    """SPL ``Punctor``: cuts a stream into groups with window marks.

    Parameters: ``punctuate`` (callable of the tuple, required), ``position``
    (``"before"`` or ``"after"``, required): when ``punctuate`` holds for a
    tuple, a window mark is submitted right before or right after its output
    tuple. ``output``: the output clause (auto-assignment for the rest).

    One input port without window, one output port. Punctuation: generating:
    incoming window marks are dropped; final is forwarded by the runtime.
    """

    port_ranges = PortRanges(inputs=(1, 1), outputs=(1, 1))

    window_punctuation: ClassVar[WindowPunctuationMode] = "generating"

    def __init__(self, punctuate: Predicate | None = None,
                 position: Literal["before", "after"] | None = None, *,
                 output: Mapping[str, Any] | None = None, **spl: Any) -> None:
        p = params("Punctor", {"punctuate": punctuate, "position": position, "output": output}, spl)
        self.punctuate = check_callable("Punctor", "punctuate", p["punctuate"], optional=False)
        if p["position"] not in ("before", "after"):
            raise OperatorParameterError(f"Punctor: position={p['position']!r}: expected 'before' "
                                         "or 'after'")
        self.before = p["position"] == "before"
        self.clause = OutputClause("Punctor", 0, p["output"])
        self._build: Callable[..., Any] = self.clause.bind(None)

    def check_ports(self, ports: PortLayout) -> list[str]:
        return super().check_ports(ports) + _clause_problems([self.clause], ports)

    def setup(self) -> None:
        port_shape(self, self.port_ranges)
        self._build = self.clause.bind_one(output_schema(self, 0))

    def on_tuple(self, tup: Any, port: int) -> None:
        mark = bool(self.punctuate(tup))
        if mark and self.before:
            self.submit_punct(Punct.WINDOW, 0)
        self.submit(self._build(tup), 0)
        if mark and not self.before:
            self.submit_punct(Punct.WINDOW, 0)

    def on_tuples(self, tuples: Iterator[Any], port: int) -> None:
        punctuate, build, before = self.punctuate, self._build, self.before
        submit, submit_punct, window = self.submit, self.submit_punct, Punct.WINDOW
        for tup in tuples:
            if punctuate(tup):
                if before:
                    submit_punct(window, 0)
                    submit(build(tup), 0)
                else:
                    submit(build(tup), 0)
                    submit_punct(window, 0)
            else:
                submit(build(tup), 0)


TupleLogic = Callable[["Custom", Any, int], None]
PunctLogic = Callable[["Custom", Punct, int], None]


class Custom(ShapedOperator):
    """SPL ``Custom``: your logic per tuple and per punctuation, with state that is checkpointed.

    ``on_tuple(op, tup, port)`` runs for each tuple (SPL ``onTuple``),
    ``on_punct(op, punct, port)`` for each window mark and for the final
    mark of each input port (SPL ``onPunct``; ``punct`` is `Punct.WINDOW` or
    `Punct.FINAL`). They submit with ``op.submit(tup, port)`` and
    ``op.submit_punct(Punct.WINDOW, port)`` and keep what they need in
    ``op.state``, initialised from ``state`` (plain data: it is what
    `snapshot` saves and `restore` brings back; a deep copy, so the
    argument itself is never changed). Subclassing and overriding
    ``on_tuple``/``on_punct`` works too.

    Any number of input and output ports, no windows. Punctuation: free:
    incoming window marks are not forwarded, so submit one where the output
    should have it; final is forwarded by the runtime once every input port
    has seen final (after ``on_punct`` ran for it). SPL's
    ``submit(Sys.FinalMarker, port)``, which ends one output stream early, has
    no equivalent: an output port ends with the operator (submitting
    `Punct.FINAL` fails the operator, saying so).
    """

    port_ranges = PortRanges(inputs=(0, None), outputs=(0, None))

    window_punctuation: ClassVar[WindowPunctuationMode] = "free"

    def __init__(self, on_tuple: TupleLogic | None = None, on_punct: PunctLogic | None = None, *,
                 state: Any = None) -> None:
        for name, fn in (("on_tuple", on_tuple), ("on_punct", on_punct)):
            if fn is not None and not callable(fn):
                raise OperatorParameterError(f"Custom: {name} must be a callable (op, item, port), "
                                             f"got {fn!r}")
        self._tuple_logic = on_tuple
        self._punct_logic = on_punct
        self._initial = copy.deepcopy(state)
        self.state: Any = copy.deepcopy(state)

    def setup(self) -> None:
        port_shape(self, self.port_ranges)

    def on_tuple(self, tup: Any, port: int) -> None:
        if self._tuple_logic is None:
            raise NotImplementedError(f"Custom {self.context.name!r} received a tuple on input port "
                                      f"{port} but has no on_tuple logic")
        self._tuple_logic(self, tup, port)

    def on_tuples(self, tuples: Iterator[Any], port: int) -> None:
        logic = self._tuple_logic
        if logic is None or type(self).on_tuple is not Custom.on_tuple:  # a subclass's on_tuple
            on_tuple = self.on_tuple
            for tup in tuples:
                on_tuple(tup, port)
            return
        for tup in tuples:
            logic(self, tup, port)

    def on_punct(self, punct: Punct, port: int) -> None:
        if self._punct_logic is not None:
            self._punct_logic(self, punct, port)

    def snapshot(self) -> Any:
        return copy.deepcopy(self.state)

    def restore(self, state: Any) -> None:
        self.state = copy.deepcopy(state)

    def reset_to_initial_state(self) -> None:
        self.state = copy.deepcopy(self._initial)


def _clause_problems(clauses: list[OutputClause], ports: PortLayout) -> list[str]:
    """What each output clause breaks against its port's declared schema (`check_ports`)."""
    return [m for i, clause in enumerate(clauses)
            for m in clause.problems(ports.output_schema(i), ports.input_schemas)]
