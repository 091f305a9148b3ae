"""What the relational and utility operators share: parameters, port shapes, output clauses,
hashable keys, and waking an operator on the clock.

SPL operators learn their port counts and output schemas from the compiler;
here they read them from the host when they are set up (`port_shape`,
`output_schema`). An SPL output clause (``output O : a = expr, b = expr``)
is an `OutputClause`: each assignment is a callable of the input tuple or a
constant, and every attribute left unassigned is copied from the input
attribute of the same name (SPL auto-assignment, rule P4). When the output
stream declares a schema, the output holds exactly its attributes; without
one, the input's attributes plus the assigned ones.

Handlers are synchronous, so an operator that must act later (Delay,
Throttle) cannot sleep. `OperatorTimer` wakes it on the host's clock inside
its own task, in order with its input, and lets it hold back final
punctuation until it has emitted what it still holds. The asyncio runtime
has no public hook for that yet; the adapter uses the runner's clock and
inbox, and is the one place to change when the host offers
``context.call_at`` and a way to defer final (see `OperatorTimer`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, ClassVar

from ..graph import Operator, PortLayout, Punct, Schema
from ..windows import EventType, TimeIntervalWindow
from ._params import OperatorParameterError, spl_aliases

__all__ = [
    "KeyFn",
    "OperatorTimer",
    "OutputClause",
    "PortRanges",
    "PortShape",
    "ShapedOperator",
    "attribute_problems",
    "batch_submit",
    "check_callable",
    "declared_output",
    "every_event",
    "freeze_key",
    "fresh",
    "has_nan",
    "int_param",
    "iter_indices",
    "key_fn",
    "key_out",
    "name_failure",
    "one_schema_problems",
    "output_schema",
    "params",
    "passthrough_problems",
    "port_shape",
    "result_submit",
    "results_submit",
    "seconds_ns",
    "spl_default",
    "subset_problems",
    "thaw_key",
]

_NS = 1_000_000_000


# ------------------------------------------------------------------ parameters


def params(operator: str, explicit: dict[str, Any], spl: Mapping[str, Any]) -> dict[str, Any]:
    """Merge Pythonic keyword arguments (``explicit``, None = not given) with SPL spellings.

    ``explicit`` lists every parameter the operator has under its Pythonic
    name; ``spl`` holds the extra keyword arguments (``timeOut=``,
    ``bufferSize=``). A parameter given both ways is refused.
    """
    out = dict(explicit)
    for name, value in spl_aliases(operator, spl, frozenset(explicit)).items():
        if out[name] is not None:
            raise OperatorParameterError(f"{operator}: parameter {name!r} given twice (once under "
                                         "its SPL name)")
        out[name] = value
    return out


def check_callable(operator: str, name: str, value: Any, *, optional: bool = True,
                   example: str = "lambda t: t['price'] > 10") -> Any:
    """``value`` if it is callable (or None when optional), else a clear error; ``example``
    is a callable of the right kind for this parameter (a predicate by default)."""
    if value is None and optional:
        return None
    if not callable(value):
        raise OperatorParameterError(f"{operator}: {name} must be a callable of the tuple "
                                     f"(e.g. {example}), got {value!r}")
    return value


def seconds_ns(operator: str, name: str, value: Any, *, positive: bool = False) -> int:
    """A duration in seconds (int or float, >= 0, or > 0 if ``positive``) as integer ns."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise OperatorParameterError(f"{operator}: {name}={value!r}: expected a finite number of "
                                     "seconds")
    if value < 0 or (positive and value == 0):
        bound = "> 0" if positive else ">= 0"
        raise OperatorParameterError(f"{operator}: {name}={value!r}: the duration must be {bound} "
                                     "seconds")
    return round(value * _NS)


KeyFn = Callable[[Any], Any]


def key_fn(operator: str, name: str, value: Any, *, optional: bool = True) -> KeyFn | None:
    """A key expression: a callable of the tuple, or an attribute name."""
    if value is None:
        if optional:
            return None
        raise OperatorParameterError(f"{operator}: {name} is required (a callable of the tuple or "
                                     "an attribute name)")
    if isinstance(value, str):
        attr = value
        return lambda t: t[attr]
    if callable(value):
        return value  # type: ignore[no-any-return]
    raise OperatorParameterError(f"{operator}: {name} must be a callable of the tuple or an "
                                 f"attribute name, got {value!r}")


def int_param(operator: str, name: str, value: Any, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise OperatorParameterError(f"{operator}: {name}={value!r}: expected an int >= {minimum}")
    return value


def spl_default(spl_type: str) -> Any:
    """The value an unassigned SPL attribute of this type holds."""
    t = spl_type.strip()
    if t.startswith(("int", "uint")) or t == "timestamp":
        return 0
    if t.startswith("float"):
        return 0.0
    if t.startswith("decimal"):
        return Decimal(0)
    if t in ("rstring", "ustring"):
        return ""
    if t == "boolean":
        return False
    if t == "blob":
        return b""
    if t.startswith("list"):
        return []
    if t.startswith("map"):
        return {}
    if t.startswith("set"):
        return set()
    return None


def fresh(value: Any) -> Any:
    """A default value for one tuple: a new list, map or set each time (tuples never share
    one), the others as they are."""
    return value.copy() if isinstance(value, list | dict | set) else value


# ------------------------------------------------------------------ port shapes


@dataclass(frozen=True, slots=True)
class PortShape:
    """How many input and data output ports an operator instance has in its graph."""

    inputs: int
    outputs: int


def _definition(op: Operator) -> Any:
    odef = getattr(op.context, "odef", None)
    if odef is None:
        raise RuntimeError(f"{type(op).__name__}: the host does not describe the operator's ports "
                           "(riverbed's asyncio runtime does); run it in a riverbed Job")
    return odef


@dataclass(frozen=True, slots=True)
class PortRanges:
    """The port counts an operator takes, ``(min, max)`` each (max None: any); unless
    ``windowed``, its input ports are plain. The error port is not an output."""

    inputs: tuple[int, int | None]
    outputs: tuple[int, int | None]
    windowed: bool = False

    def problems(self, operator: str, n_in: int, n_out: int,
                 windows: Sequence[Any]) -> list[str]:
        """What the ports break, one message each (``windows``: each input port's clause or
        None)."""
        found: list[str] = []
        for what, n, (lo, hi) in (("input", n_in, self.inputs), ("output", n_out, self.outputs)):
            if n < lo or (hi is not None and n > hi):
                if hi is None:
                    allowed = f"at least {lo}"
                elif lo == hi:
                    allowed = f"exactly {lo}"
                else:
                    allowed = f"{lo} to {hi}"
                found.append(f"has {n} {what} port{'s' if n != 1 else ''}; {operator} takes "
                             f"{allowed}")
        if not self.windowed:
            found += [f"input port {i} has a window ({w.clause()}); {operator} takes no window: "
                      "connect the stream itself, without .window(...)"
                      for i, w in enumerate(windows) if w is not None]
        return found


class ShapedOperator(Operator):
    """An operator whose port counts are its class's `port_ranges`: the graph is refused at
    freeze when they do not fit (`check_ports`), and `port_shape` reads them at setup."""

    port_ranges: ClassVar[PortRanges]
    # Its output ports send input port 0's tuples on unchanged (Filter, Split, Delay...): SPL
    # wants their schemas to be the input's, and a narrower one failed at the first tuple.
    passes_through: ClassVar[bool] = False

    def check_ports(self, ports: PortLayout) -> list[str]:
        problems = self.port_ranges.problems(type(self).__name__, len(ports.windows), ports.outputs,
                                             ports.windows)
        return problems + passthrough_problems(ports) if self.passes_through else problems


def _spl_types(schema: Schema) -> dict[str, str]:
    """Attribute -> type without spaces (``map<a, b>`` is ``map<a,b>``)."""
    return {n: "".join(t.split()) for n, t in schema.as_dict().items()}


def _differences(have: dict[str, str], want: dict[str, str], whose: str) -> list[str]:
    """What ``want`` (a declared schema's types) does differently from ``have`` (``whose``)."""
    diffs = [f"lacks {n!r}" for n in have if n not in want]
    diffs += [f"adds {n!r}" for n in want if n not in have]
    diffs += [f"makes {n!r} {want[n]} ({whose} is {have[n]})"
              for n in have if n in want and want[n] != have[n]]
    return diffs


def passthrough_problems(ports: PortLayout) -> list[str]:
    """For each output port whose declared schema is not input port 0's (both declared), what
    differs: an operator that sends its input's tuples on unchanged cannot add, drop or retype
    an attribute (SPL's compiler refuses it; here the first tuple failed the job)."""
    given = ports.input_schema(0)
    if given is None:
        return []
    problems = []
    have = _spl_types(given)
    for port, declared in enumerate(ports.output_schemas):
        if declared is None:
            continue
        want = _spl_types(declared)
        if want == have:
            continue
        problems.append(f"output port {port} sends input port 0's tuples on unchanged, so its "
                        f"schema must be the input's {given}; the declared {declared} "
                        + ", ".join(_differences(have, want, "the input's")))
    return problems


def one_schema_problems(ports: PortLayout, operator: str) -> list[str]:
    """For an operator whose every input port and output carry one schema (SPL's Pair sends
    each input's tuples on unchanged): each declared input schema that is not the declared
    output's (or, without one, not the first declared input's), and what differs."""
    reference = ports.output_schema(0)
    where = "output port 0's"
    if reference is None:
        first = next((p for p, s in enumerate(ports.input_schemas) if s is not None), None)
        if first is None:
            return []
        reference = ports.input_schemas[first]
        where = f"input port {first}'s"
    assert reference is not None
    have = _spl_types(reference)
    problems = []
    for port, declared in enumerate(ports.input_schemas):
        if declared is None or declared is reference:
            continue
        want = _spl_types(declared)
        if want != have:
            problems.append(
                f"input port {port}'s schema {declared} is not {where} {reference}: {operator} "
                f"sends every input's tuples on unchanged, so SPL gives all its ports one "
                f"schema; input port {port}'s " + ", ".join(_differences(have, want, where)))
    return problems


def subset_problems(ports: PortLayout, operator: str) -> list[str]:
    """For an operator that cuts each input tuple to the declared output schema (SPL's Union:
    the output's attributes are a subset of every input's, with the same types): each
    declared input schema that lacks an output attribute or types it otherwise."""
    out = ports.output_schema(0)
    if out is None:
        return []
    want = _spl_types(out)
    problems = []
    for port, declared in enumerate(ports.input_schemas):
        if declared is None:
            continue
        have = _spl_types(declared)
        diffs = [f"lacks {n!r}" for n in want if n not in have]
        diffs += [f"has {n!r} as {have[n]} (the output's is {want[n]})"
                  for n in want if n in have and have[n] != want[n]]
        if diffs:
            problems.append(
                f"input port {port}'s schema {declared} " + ", ".join(diffs) + f": {operator} "
                f"takes each attribute of output port 0's schema {out} from every input's tuples")
    return problems


def attribute_problems(reads: Iterable[tuple[str, Any]], schema: Schema | None) -> list[str]:
    """For each ``(what, expression)`` whose expression is an attribute name that the declared
    ``schema`` lacks, the message saying so (nothing when the schema is not declared)."""
    if schema is None:
        return []
    return [f"{what} reads attribute {expr!r}, which the input schema {schema} does not have"
            for what, expr in reads if isinstance(expr, str) and schema.type_of(expr) is None]


def port_shape(op: Operator, ranges: PortRanges) -> PortShape:
    """The operator's port counts, checked against ``ranges`` (a frozen graph has been checked
    already; a host that did not freeze one has not)."""
    odef = _definition(op)
    n_in = len(odef.inputs)
    n_out = len(odef.outputs) - (1 if odef.error_port is not None else 0)
    name = type(op).__name__
    problems = ranges.problems(name, n_in, n_out, [p.window for p in odef.inputs])
    if problems:
        raise ValueError(f"{name} {odef.name!r}: {problems[0]}")
    return PortShape(n_in, n_out)


def name_failure(exc: BaseException, what: str) -> None:
    """Say in ``exc`` which clause of the operator failed (``what``: an output attribute, a
    sort key), in place: its type and traceback stay (the job's message finds the window
    event from the frames). For the error path only.

    Where riverbed's own code raised (comparing or adding the values), ``what`` goes in front
    of the message: "'<' not supported ..." alone did not say what was compared. A user's
    function that raised keeps its own text (an error port's record of it is the user's
    exception) and ``what`` is a note, shown with its traceback; so is ``what`` on an
    exception whose text is not its one message argument (a KeyError's is its key's repr,
    the missing attribute's name already)."""
    args = exc.args
    if (_raised_by_riverbed(exc) and type(exc).__str__ is BaseException.__str__
            and len(args) <= 1):
        exc.args = (f"{what}: {args[0]}" if args else what,)
    else:
        exc.add_note(what)


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _raised_by_riverbed(exc: BaseException) -> bool:
    """Whether the innermost frame of ``exc``'s traceback is riverbed's (or code it generated,
    ``<riverbed ...>``), not a user's function."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    filename = tb.tb_frame.f_code.co_filename
    return filename.startswith(("<riverbed", _PACKAGE + os.sep))


def declared_output(context: Any, port: int = 0) -> Schema | None:
    """The schema declared for output ``port`` when the host describes the operator's ports
    (None: undeclared, or a host that does not say)."""
    outputs = getattr(getattr(context, "odef", None), "outputs", None)
    schema = outputs[port] if outputs and port < len(outputs) else None
    return schema if isinstance(schema, Schema) else None


def output_schema(op: Operator, port: int) -> Schema | None:
    """`declared_output` of a host that must describe the operator's ports (it says so)."""
    _definition(op)
    return declared_output(op.context, port)


def batch_submit(op: Operator, port: int = 0) -> Callable[[Iterable[Any]], None]:
    """The host's way to submit every tuple of an iterable on ``port`` (riverbed's operator core
    offers ``batch_submit``), or a loop over the operator's ``submit`` under a host without one."""
    of_host = getattr(op.context, "batch_submit", None)
    if of_host is not None:
        found: Callable[[Iterable[Any]], None] = of_host(port)
        return found
    submit = op.submit

    def submit_each(tuples: Iterable[Any]) -> None:
        for tup in tuples:
            submit(tup, port)

    return submit_each


def result_submit(op: Operator, port: int = 0) -> Callable[[Any], None]:
    """The host's way to submit a result and the window mark after it on ``port`` (riverbed's
    operator core offers ``result_submit``), or ``submit`` then ``submit_punct`` under a host
    without one."""
    of_host = getattr(op.context, "result_submit", None)
    if of_host is not None:
        found: Callable[[Any], None] = of_host(port)
        return found
    submit, submit_punct, mark = op.submit, op.submit_punct, Punct.WINDOW

    def submit_then_mark(tup: Any) -> None:
        submit(tup, port)
        submit_punct(mark, port)

    return submit_then_mark


def results_submit(op: Operator, port: int = 0) -> Callable[[list[Any]], None]:
    """The host's way to submit each tuple of a list followed by a window mark on ``port``
    (riverbed's operator core offers ``results_submit``), or `result_submit` on each under a
    host without one."""
    of_host = getattr(op.context, "results_submit", None)
    if of_host is not None:
        found: Callable[[list[Any]], None] = of_host(port)
        return found
    submit_result = result_submit(op, port)

    def submit_each(tuples: list[Any]) -> None:
        for tup in tuples:
            submit_result(tup)

    return submit_each


def every_event(window: Any) -> tuple[EventType, ...]:
    """The event types a listener registers to see everything ``window`` raises (what a host's
    listener sees when the operator's ``window_events`` is None): a timeInterval window raises
    pane events only."""
    if isinstance(window, TimeIntervalWindow):
        return (EventType.INITIAL_FULL, EventType.TRIGGER, EventType.CLOSE)
    return tuple(EventType)


# ---------------------------------------------------------------- output clauses


Assignment = Callable[..., Any] | Any


class OutputClause:
    """SPL's ``output`` clause for one port: assignments, the rest auto-assigned from the input.

    ``assign`` maps output attributes to a callable of the input tuple(s) or
    a constant. Call `bind` with the port's schema once the graph is known;
    it returns the function that builds an output tuple from the input
    tuples (one per input port for Barrier, else one). With several inputs,
    an unassigned attribute comes from the first input port that has it.
    """

    __slots__ = ("assign", "operator", "port")

    def __init__(self, operator: str, port: int, assign: Mapping[str, Assignment] | None) -> None:
        if assign is not None and not isinstance(assign, Mapping):
            raise OperatorParameterError(f"{operator}: the output clause of port {port} must be a "
                                         f"mapping attribute -> callable or constant, got {assign!r}")
        for attr in assign or {}:
            if not isinstance(attr, str) or not attr.isidentifier():
                raise OperatorParameterError(f"{operator}: output attribute {attr!r} (port {port}) "
                                             "is not an attribute name")
        self.operator = operator
        self.port = port
        self.assign = dict(assign or {})

    def problems(self, schema: Schema | None, inputs: Sequence[Schema | None]) -> list[str]:
        """What keeps the clause from building tuples of the declared output ``schema``
        (`Operator.check_ports`): an assigned attribute the schema lacks, and, when every
        input's schema is declared, an attribute neither assigned nor in an input."""
        if schema is None:
            return []
        found: list[str] = []
        unknown = sorted(set(self.assign) - set(schema.names))
        if unknown:
            found.append(self._unknown(unknown, schema))
        if inputs and all(s is not None for s in inputs):
            found += [f"output port {self.port} attribute {attr!r} is neither assigned nor in "
                      f"the input schema; add it to the output clause" for attr in schema.names
                      if attr not in self.assign
                      and all(s is None or s.type_of(attr) is None for s in inputs)]
        return found

    def _unknown(self, unknown: list[str], schema: Schema) -> str:
        return (f"output port {self.port} assigns {', '.join(map(repr, unknown))}, which the "
                f"port's schema {schema} does not have")

    def bind(self, schema: Schema | None) -> Callable[..., Any]:
        """The builder ``f(*inputs) -> output tuple`` for a port with this schema."""
        calls = {a: v for a, v in self.assign.items() if callable(v)}
        consts = {a: v for a, v in self.assign.items() if not callable(v)}
        operator, port = self.operator, self.port
        if schema is None:
            if not self.assign:
                return _first
            def build_free(*inputs: Any) -> Any:
                out = _merge(inputs)
                out.update(consts)
                for attr, fn in calls.items():
                    out[attr] = fn(*inputs)
                return out
            return build_free
        unknown = sorted(set(self.assign) - set(schema.names))
        if unknown:
            raise OperatorParameterError(f"{operator}: {self._unknown(unknown, schema)}")
        names = schema.names

        def build(*inputs: Any) -> Any:
            out: dict[str, Any] = {}
            for attr in names:
                if attr in calls:
                    out[attr] = calls[attr](*inputs)
                elif attr in consts:
                    out[attr] = consts[attr]
                else:
                    for tup in inputs:
                        if attr in tup:
                            out[attr] = tup[attr]
                            break
                    else:
                        raise KeyError(f"{operator}: output port {port} attribute {attr!r} is neither "
                                       "assigned nor in the input tuple; add it to the output clause")
            return out
        return build


    def passes_input(self, schema: Schema | None) -> bool:
        """The builder for this schema returns its (one) input tuple itself: nothing to build."""
        return schema is None and not self.assign

    def bind_one(self, schema: Schema | None) -> Callable[[Any], Any]:
        """`bind` for an operator with one input: ``f(tup) -> output tuple``, generated for the
        clause (no loop over the attributes), with the same result.

        The copied attributes are read before any assignment runs: a dict lookup has no effect,
        so only the order of the assignments' calls shows, and that is the schema's (or the
        clause's) as in `bind`. A tuple that is not a plain dict, or lacks an attribute to copy,
        goes through `bind`'s builder, which raises the error that says what is missing.
        """
        slow = self.bind(schema)
        if schema is None and not self.assign:
            return slow  # the input tuple itself
        build: Callable[[Any], Any] = self._generate(schema, slow, run=False)
        return build

    def bind_run(self, schema: Schema | None) -> Callable[[Iterable[Any], Callable[[list[Any]], None]], None]:
        """`bind_one` over a run: ``f(tuples, submit)`` builds each tuple's output in one
        generated loop (the user's functions called from Python, not from C through ``map``)
        and hands ``submit`` the list; if a tuple fails, the outputs of those before it are
        submitted, then the error propagates."""
        slow = self.bind(schema)
        if schema is None and not self.assign:
            def passed(tuples: Iterable[Any], submit: Callable[[list[Any]], None]) -> None:
                submit(list(map(slow, tuples)))
            return passed
        run: Callable[[Iterable[Any], Callable[[list[Any]], None]], None] = \
            self._generate(schema, slow, run=True)
        return run

    def _generate(self, schema: Schema | None, slow: Callable[..., Any], *, run: bool) -> Any:
        """The source of `bind_one`'s builder (``run``: `bind_run`'s loop), compiled.

        Without a schema the output is a copy of the input with the assignments stored into
        it, constants first: ``{**t, ...}`` builds the same dict through an empty one and a
        second dict per display, a third slower. With a schema it is one dict display."""
        env: dict[str, Any] = {"slow": slow, "dict": dict, "type": type}
        body: list[str] = []  # statements leaving the output in ``out``
        copies: list[str] = []
        if schema is None:
            consts = [(a, v) for a, v in self.assign.items() if not callable(v)]
            calls = [(a, v) for a, v in self.assign.items() if callable(v)]
            body.append("out = t.copy()")
            for i, (attr, value) in enumerate(consts + calls):
                name = f"_v{i}"
                env[name] = value
                body.append(f"out[{attr!r}] = {name}(t)" if callable(value) else f"out[{attr!r}] = {name}")
        else:
            fields: list[str] = []
            for i, attr in enumerate(schema.names):
                name = f"_v{i}"
                if attr in self.assign:
                    value = self.assign[attr]
                    env[name] = value
                    fields.append(f"{attr!r}: {name}(t)" if callable(value) else f"{attr!r}: {name}")
                else:
                    copies.append(f"{name} = t[{attr!r}]")
                    fields.append(f"{attr!r}: {name}")
            body.append(f"out = {{{', '.join(fields)}}}")
        # The names the body uses become default arguments: locals are read by index, globals
        # by a dict lookup each.
        names = ", ".join(f"{name}={name}" for name in env)
        if run:
            fallback, ind = ["append(slow(t))", "continue"], "            "
            head = (f"def build(tuples, submit, {names}):\n    built = []\n    append = built.append\n"
                    "    try:\n        for t in tuples:\n")
            body.append("append(out)")
            tail = "    finally:\n        submit(built)\n"
        else:
            fallback, ind = ["return slow(t)"], "    "
            head = f"def build(t, {names}):\n"
            body.append("return out")
            tail = ""
        lines = ["if type(t) is not dict:", *("    " + f for f in fallback)]
        if copies:
            lines += ["try:", *("    " + c for c in copies), "except KeyError:",
                      *("    " + f for f in fallback)]
        code = head + "".join(f"{ind}{line}\n" for line in lines + body) + tail
        exec(code, env)  # attribute names are identifiers (checked), values are bound by name
        return env["build"]


def _first(*inputs: Any) -> Any:
    return inputs[0] if len(inputs) == 1 else _merge(inputs)


def _merge(inputs: Sequence[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for tup in reversed(inputs):  # the first port that has an attribute wins
        out.update(tup)
    return out


# ------------------------------------------------------------------------ keys


def freeze_key(value: Any) -> Hashable:
    """A hashable, comparable form of a key: lists become tuples, dicts sorted item tuples,
    sets sorted tuples (so the key survives a msgpack round trip through `thaw_key`)."""
    if isinstance(value, list | tuple):
        return tuple(freeze_key(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, freeze_key(v)) for k, v in sorted(value.items(), key=lambda kv: repr(kv[0])))
    if isinstance(value, set | frozenset):
        return tuple(sorted((freeze_key(v) for v in value), key=repr))
    return value  # type: ignore[no-any-return]


def key_out(key: Hashable) -> Any:
    """A frozen key as plain data (tuples as lists)."""
    if isinstance(key, tuple):
        return [key_out(k) for k in key]
    return key


def thaw_key(data: Any) -> Hashable:
    """`key_out`'s data back to the frozen key (msgpack returns tuples as lists)."""
    if isinstance(data, list | tuple):
        return tuple(thaw_key(k) for k in data)
    return data  # type: ignore[no-any-return]


def has_nan(key: Any) -> bool:
    """True if the (frozen) key holds a float NaN, which can never equal itself."""
    if isinstance(key, float):
        return math.isnan(key)
    if isinstance(key, tuple):
        return any(has_nan(k) for k in key)
    return False


# ----------------------------------------------------------------------- timers




class OperatorTimer:
    """Wakes an operator at clock instants, in its own task, in order with its input.

    ``on_wake`` runs like any handler: the host flushes what it submitted
    right after. Only the earliest pending instant is kept (`set` moves it);
    the operator recomputes the next one on each wake-up. `hold_final`
    keeps the operator running after its inputs ended, until `release_final`,
    so final punctuation follows everything it still holds.

    It rests on the host's operator timers (``context.call_at``: the
    callback runs in the operator's task, between two items, outputs flushed
    after it) and deferred final (``context.defer_final``).
    """

    __slots__ = ("_at", "_handle", "_on_wake", "_op", "_release")

    def __init__(self, op: Operator, on_wake: Callable[[], None]) -> None:
        self._op = op
        self._on_wake = on_wake
        self._at: int | None = None
        self._handle: Any = None
        self._release: Callable[[], None] | None = None

    @property
    def pending(self) -> int | None:
        """The instant (ns) the next wake-up is due, if one is set."""
        return self._at

    def set(self, when: int | None) -> None:
        """Be woken at ``when`` (ns; now or earlier: as soon as possible); None: not at all."""
        if when == self._at:
            return
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._at = when
        if when is not None:
            self._handle = self._op.context.call_at(when, self.wake)

    def wake(self) -> None:
        """The host's timer fired (in the operator's task): run ``on_wake``."""
        self._handle = None
        self._at = None
        self._on_wake()

    def hold_final(self) -> None:
        """Keep the operator running after its last input ended (call from on_punct(FINAL))."""
        if self._release is None or not getattr(self._release, "active", True):
            self._release = self._op.context.defer_final()  # (again, after a reset of the host)

    def release_final(self) -> None:
        """Let final punctuation go (after the operator emitted everything it held)."""
        if self._release is not None:
            release, self._release = self._release, None
            release()

    def cancel(self) -> None:
        """Forget the pending wake-up (the job is ending, or the state was reset)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._at = None


def iter_indices(value: Any) -> Iterable[int]:
    """An SPL index expression's value (an int or a list of ints) as ints."""
    if isinstance(value, bool):
        raise TypeError(f"an output port index must be an int or a list of ints, got {value!r}")
    if isinstance(value, int):
        return (value,)
    if isinstance(value, list | tuple):
        for v in value:
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"an output port index must be an int, got {v!r} in {value!r}")
        return value
    raise TypeError(f"an output port index must be an int or a list of ints, got {value!r}")
