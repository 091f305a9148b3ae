"""The untimed utility operators that route and filter one stream: Union, Split, ThreadedSplit
and DeDuplicate.

- Union merges streams in arrival order; Split routes each tuple to the
  output ports chosen by an index (or a mapping file); ThreadedSplit deals
  tuples to its outputs in turn.
- DeDuplicate drops tuples whose key was seen recently: within a time, a
  number of tuples, or while an attribute moved by at most a delta.

Window punctuation (SPL rule P2) is stated in each docstring: Union drops
marks; Split, ThreadedSplit and DeDuplicate forward them to every output
port. Final punctuation is always forwarded by the runtime once every input
port ended (P1). The operators that synchronise several input ports
(Barrier, Pair, Gate, DynamicFilter) are in ``_utility_sync``; the timed
ones (Beacon, Delay, Throttle) in ``_utility_timed``.

ThreadedSplit has no threads here: IBM's operator hands each tuple to the
next output buffer with room; riverbed deals them round-robin, which is what
IBM's does whenever the consumers keep up (see its docstring).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

from ..graph import PortLayout, Punct, WindowPunctuationMode
from ._params import OperatorParameterError
from ._utility_support import (
    KeyFn,
    OutputClause,
    PortRanges,
    ShapedOperator,
    attribute_problems,
    batch_submit,
    check_callable,
    freeze_key,
    has_nan,
    int_param,
    iter_indices,
    key_fn,
    key_out,
    output_schema,
    params,
    port_shape,
    seconds_ns,
    subset_problems,
    thaw_key,
)

__all__ = ["DeDuplicate", "Split", "SplitMapping", "ThreadedSplit", "Union"]


# ------------------------------------------------------------------------ Union


class Union(ShapedOperator):
    """SPL ``Union``: the tuples of all input ports merged into one stream, in arrival order.

    One or more input ports (SPL requires two; one port fed by several
    streams is a union too), no windows, one output port. With a declared
    output schema each tuple is cut down to the schema's attributes (inputs
    may carry extra attributes, in any order); without one, tuples pass
    unchanged.

    Punctuation: free: window marks are dropped. Final is forwarded by the
    runtime once every input port has seen final.
    """

    port_ranges = PortRanges(inputs=(1, None), outputs=(1, 1))

    window_punctuation: ClassVar[WindowPunctuationMode] = "free"

    def __init__(self) -> None:
        self._names: tuple[str, ...] | None = None
        self._put: Callable[[Iterable[Any]], None] = self._submit_each
        self._project: Callable[[Any], Any] | None = None

    def check_ports(self, ports: PortLayout) -> list[str]:
        """The port counts, and with a declared output schema every declared input having each
        of its attributes, typed alike (SPL's rule; a tuple lacking one failed the job)."""
        return super().check_ports(ports) + subset_problems(ports, "Union")

    def setup(self) -> None:
        port_shape(self, self.port_ranges)
        schema = output_schema(self, 0)
        self._names = schema.names if schema is not None else None
        self._put = batch_submit(self, 0)
        if self._names is not None:
            self._project = _projection(self._names)

    def _submit_each(self, tuples: Iterable[Any]) -> None:
        for tup in tuples:
            self.submit(tup, 0)

    def on_tuples(self, tuples: Iterator[Any], port: int) -> None:
        project = self._project
        if project is None:
            self._put(tuples)
            return
        try:
            self._put(map(project, tuples))
        except KeyError as exc:
            raise KeyError(f"Union {self.context.name!r}: a tuple of input port {port} has no "
                           f"attribute {exc.args[0]!r}, which the output schema needs") from None

    def on_tuple(self, tup: Any, port: int) -> None:
        names = self._names
        if names is None:
            self.submit(tup, 0)
            return
        try:
            self.submit({a: tup[a] for a in names}, 0)
        except KeyError as exc:
            raise KeyError(f"Union {self.context.name!r}: a tuple of input port {port} has no "
                           f"attribute {exc.args[0]!r}, which the output schema needs") from None


# ------------------------------------------------------------------------ Split


class Split(ShapedOperator):
    """SPL ``Split``: each tuple goes to the output ports its index selects.

    ``index``: a callable of the tuple returning an int or a list of ints.
    Each value selects an output port: a value >= the number of output
    ports is taken modulo that number, a negative value drops the tuple
    (for that value), and a value repeated in a list sends the tuple that
    many times. Or ``file`` + ``key``: a mapping file whose lines are
    ``key, index, index...`` (``#`` starts a comment; string keys may be
    quoted; a ``default, ...`` line gives the indices of unmatched keys) and
    ``key``, a callable (or attribute name) whose value is looked up; a key
    that matches no line when there is no ``default`` line is an error.
    String key values match a line's key text; numbers match numeric keys.

    One input port, no window, one or more output ports; tuples are
    forwarded unchanged. Punctuation: preserving: window marks go to every
    output port. Final is forwarded by the runtime.
    """

    passes_through: ClassVar[bool] = True

    port_ranges = PortRanges(inputs=(1, 1), outputs=(1, None))

    window_punctuation: ClassVar[WindowPunctuationMode] = "preserving"

    def __init__(self, index: Callable[[Any], Any] | None = None, *, file: str | Path | None = None,
                 key: KeyFn | str | None = None, **spl: Any) -> None:
        p = params("Split", {"index": index, "file": file, "key": key}, spl)
        # (Split refuses a bool index: its example is a port number, or a list of them)
        self.index = check_callable("Split", "index", p["index"],
                                    example="lambda t: 0 if t['price'] > 10 else 1")
        if (p["file"] is None) != (p["key"] is None):
            raise OperatorParameterError("Split: file and key go together: give both, or index alone")
        if (self.index is None) == (p["file"] is None):
            raise OperatorParameterError("Split: give either index (a callable of the tuple) or "
                                         "file and key (a mapping file and the key to look up)")
        self.key = key_fn("Split", "key", p["key"])
        self.mapping: SplitMapping | None = (SplitMapping.read(p["file"]) if p["file"] is not None
                                             else None)
        self._ports = 1

    def setup(self) -> None:
        self._ports = port_shape(self, self.port_ranges).outputs

    def on_tuple(self, tup: Any, port: int) -> None:
        if self.index is not None:
            indices: Iterable[int] = iter_indices(self.index(tup))
        else:
            assert self.mapping is not None and self.key is not None
            indices = self.mapping.lookup(self.key(tup))
        n = self._ports
        for i in indices:
            if i >= 0:
                self.submit(tup, i % n)

    def on_tuples(self, tuples: Iterator[Any], port: int) -> None:
        index, submit, n = self.index, self.submit, self._ports
        if index is None:
            on_tuple = self.on_tuple
            for tup in tuples:
                on_tuple(tup, port)
            return
        for tup in tuples:
            chosen = index(tup)
            if type(chosen) is int:  # the common case, as iter_indices would take it
                if chosen >= 0:
                    submit(tup, chosen % n)
                continue
            for i in iter_indices(chosen):
                if i >= 0:
                    submit(tup, i % n)


class SplitMapping:
    """A Split mapping file: key -> output port indices, and the optional ``default`` line."""

    __slots__ = ("by_number", "by_text", "default", "path")

    def __init__(self, path: str, by_text: dict[str, list[int]], by_number: dict[Any, list[int]],
                 default: list[int] | None) -> None:
        self.path = path
        self.by_text = by_text
        self.by_number = by_number
        self.default = default

    @classmethod
    def read(cls, file: str | Path) -> SplitMapping:
        path = Path(file)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise OperatorParameterError(f"Split: cannot read the mapping file {str(path)!r}: "
                                         f"{exc.strerror or exc}") from None
        return cls.parse(text, str(path))

    @classmethod
    def parse(cls, text: str, path: str = "<mapping>") -> SplitMapping:
        by_text: dict[str, list[int]] = {}
        by_number: dict[Any, list[int]] = {}
        default: list[int] | None = None
        for lineno, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            where = f"Split: mapping file {path!r}, line {lineno}"
            key, quoted, rest = _split_key(line, where)
            indices = _parse_indices(rest, where)
            if not quoted and key == "default":
                default = indices
                continue
            if key in by_text:
                raise OperatorParameterError(f"{where}: key {key!r} appears twice")
            by_text[key] = indices
            if not quoted:
                number = _number(key)
                if number is not None:
                    by_number[number] = indices
        return cls(path, by_text, by_number, default)

    def lookup(self, value: Any) -> list[int]:
        if isinstance(value, bool):
            found = self.by_text.get("true" if value else "false")
        elif isinstance(value, int | float):
            found = self.by_number.get(value)
        else:
            found = self.by_text.get(str(value))
        if found is not None:
            return found
        if self.default is None:
            raise KeyError(f"Split: key {value!r} is not in the mapping file {self.path!r}, which "
                           "has no 'default' line; add one (e.g. 'default, -1' drops such tuples)")
        return self.default


def _split_key(line: str, where: str) -> tuple[str, bool, str]:
    if line.startswith('"'):
        i, chars = 1, []
        while i < len(line):
            ch = line[i]
            if ch == "\\" and i + 1 < len(line):
                chars.append(line[i + 1])
                i += 2
                continue
            if ch == '"':
                if line[i + 1:i + 2] == '"':  # CSV doubled quote
                    chars.append('"')
                    i += 2
                    continue
                rest = line[i + 1:].lstrip()
                if not rest.startswith(","):
                    raise OperatorParameterError(f"{where}: expected ',' after the quoted key")
                return "".join(chars), True, rest[1:]
            chars.append(ch)
            i += 1
        raise OperatorParameterError(f"{where}: the quoted key has no closing quote")
    key, sep, rest = line.partition(",")
    if not sep:
        raise OperatorParameterError(f"{where}: expected 'key, index[, index...]'")
    return key.strip(), False, rest


def _parse_indices(rest: str, where: str) -> list[int]:
    body = rest.split("#", 1)[0]
    out: list[int] = []
    for raw in body.split(",") if body.strip() else ():
        field = raw.strip()
        try:
            out.append(int(field))
        except ValueError:
            raise OperatorParameterError(f"{where}: index {field!r} is not an integer") from None
    if not out:
        raise OperatorParameterError(f"{where}: the key has no output port index")
    return out


def _number(text: str) -> int | float | None:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return None


# ---------------------------------------------------------------- ThreadedSplit


class ThreadedSplit(ShapedOperator):
    """SPL ``ThreadedSplit``, without threads: tuples are dealt to the output ports round-robin.

    IBM's operator runs one thread per output port and puts each tuple into
    the next buffer (of ``bufferSize`` tuples) that has room, so which port
    gets a tuple depends on how fast each consumer is. riverbed has one task
    per operator and flushes each output port after every input batch, so
    there is nothing to balance within the operator: each tuple goes to the
    next port in turn (port 0, 1, ..., n-1, 0, ...), which is what IBM's
    operator does whenever every buffer has room. ``buffer_size``
    (``bufferSize``, required, >= 0) is validated and otherwise unused;
    backpressure comes from the consumers' bounded inboxes.

    One input port, no window, one or more output ports. Punctuation:
    window marks go to every output port (preserving), as IBM puts them in
    every buffer; final is forwarded by the runtime. The round-robin position
    is snapshotted so a restored job continues the rotation.
    """

    passes_through: ClassVar[bool] = True

    port_ranges = PortRanges(inputs=(1, 1), outputs=(1, None))

    window_punctuation: ClassVar[WindowPunctuationMode] = "preserving"

    def __init__(self, buffer_size: int | None = None, **spl: Any) -> None:
        p = params("ThreadedSplit", {"buffer_size": buffer_size}, spl)
        if p["buffer_size"] is None:
            raise OperatorParameterError("ThreadedSplit: buffer_size (bufferSize) is required")
        self.buffer_size = max(1, int_param("ThreadedSplit", "buffer_size", p["buffer_size"]))
        self._ports = 1
        self._next = 0

    def setup(self) -> None:
        self._ports = port_shape(self, self.port_ranges).outputs

    def on_tuple(self, tup: Any, port: int) -> None:
        port = self._next % self._ports
        self.submit(tup, port)
        self._next = port + 1

    def on_tuples(self, tuples: Iterator[Any], port: int) -> None:
        submit, n = self.submit, self._ports
        out = self._next % n
        try:
            for tup in tuples:
                submit(tup, out)
                out = out + 1 if out + 1 < n else 0
        finally:
            self._next = out

    def snapshot(self) -> Any:
        return self._next % self._ports

    def restore(self, state: Any) -> None:
        self._next = int(state) if state is not None else 0

    def reset_to_initial_state(self) -> None:
        self._next = 0


# ------------------------------------------------------------------ DeDuplicate


class DeDuplicate(ShapedOperator):
    """SPL ``DeDuplicate``: the first tuple of each key passes; repeats seen "recently" do not.

    ``key``: a callable of the tuple or an attribute name (absent: the whole
    tuple). What "recently" means is exactly one of:

    - ``time_out`` (``timeOut``, seconds, the default with 600): a repeat
      arriving at most that long after the remembered time is a duplicate;
    - ``count``: a repeat within the next ``count`` tuples (all tuples count);
    - ``delta_attribute`` (``deltaAttribute``, callable or attribute name)
      with ``delta``: a repeat whose attribute is at most ``delta`` above the
      remembered value.

    The bound is inclusive: a repeat exactly ``time_out`` seconds, ``count``
    tuples or ``delta`` later is still a duplicate; beyond it the tuple
    passes again and becomes the remembered one. ``reset_on_duplicate``
    (``resetOnDuplicate``, default True): a suppressed duplicate also
    becomes the remembered time/count/value, so a steady stream of repeats
    stays suppressed. ``flush_on_punctuation`` (``flushOnPunctuation``,
    default False): any punctuation, window or final, forgets every key.
    A key holding a float NaN never matches and always passes.

    ``output``: the output clause of port 0 (first occurrences; auto-assigned
    from the input). One input port, no window; output 0 and an optional
    output 1 receiving the duplicates unchanged. Punctuation: preserving
    (window marks go to every output port); final is forwarded by the
    runtime. State: the remembered keys with their time/count/value (clock
    times are absolute, so time spent between a checkpoint and a restore
    counts toward ``time_out``).
    """

    port_ranges = PortRanges(inputs=(1, 1), outputs=(1, 2))

    window_punctuation: ClassVar[WindowPunctuationMode] = "preserving"

    def __init__(self, key: KeyFn | str | None = None, *, time_out: float | None = None,
                 count: int | None = None, delta_attribute: KeyFn | str | None = None,
                 delta: float | None = None, reset_on_duplicate: bool | None = None,
                 flush_on_punctuation: bool | None = None, output: Mapping[str, Any] | None = None,
                 **spl: Any) -> None:
        p = params("DeDuplicate", {
            "key": key, "time_out": time_out, "count": count, "delta_attribute": delta_attribute,
            "delta": delta, "reset_on_duplicate": reset_on_duplicate,
            "flush_on_punctuation": flush_on_punctuation, "output": output}, spl)
        self.key = key_fn("DeDuplicate", "key", p["key"])
        self._reads = [("key", p["key"]), ("delta_attribute", p["delta_attribute"])]
        if (p["delta"] is None) != (p["delta_attribute"] is None):
            raise OperatorParameterError("DeDuplicate: delta and delta_attribute (deltaAttribute) go "
                                         "together")
        modes = [m for m in ("time_out", "count", "delta") if p[m] is not None]
        if len(modes) > 1:
            raise OperatorParameterError(f"DeDuplicate: give at most one of time_out, count or "
                                         f"delta_attribute + delta, got {' and '.join(modes)}")
        self.mode = modes[0] if modes else "time_out"
        self.diff: int | float
        self.delta_of: KeyFn | None = None
        if self.mode == "time_out":
            self.diff = seconds_ns("DeDuplicate", "time_out", 600 if p["time_out"] is None
                                   else p["time_out"])
        elif self.mode == "count":
            self.diff = int_param("DeDuplicate", "count", p["count"])
        else:
            d = p["delta"]
            # (NaN compares false with everything: no repeat was ever within it, so nothing
            # was deduplicated, silently)
            if isinstance(d, bool) or not isinstance(d, int | float) or not math.isfinite(d) \
                    or d < 0:
                raise OperatorParameterError(f"DeDuplicate: delta={d!r}: expected a finite "
                                             "number >= 0")
            self.diff = d
            self.delta_of = key_fn("DeDuplicate", "delta_attribute", p["delta_attribute"])
        for flag in ("reset_on_duplicate", "flush_on_punctuation"):
            if p[flag] is not None and not isinstance(p[flag], bool):
                raise OperatorParameterError(f"DeDuplicate: {flag}={p[flag]!r}: expected True or False")
        self.reset_on_duplicate: bool = p["reset_on_duplicate"] is not False
        self.flush_on_punctuation: bool = p["flush_on_punctuation"] is True
        self.clause = OutputClause("DeDuplicate", 0, p["output"])
        self._build: Callable[..., Any] = self.clause.bind(None)
        self._copies = False
        self._duplicates = False
        self._seen: OrderedDict[Hashable, Any] = OrderedDict()  # oldest first
        self._n = 0

    def check_ports(self, ports: PortLayout) -> list[str]:
        return (super().check_ports(ports) + attribute_problems(self._reads, ports.input_schema())
                + self.clause.problems(ports.output_schema(), ports.input_schemas))

    def setup(self) -> None:
        self._duplicates = port_shape(self, self.port_ranges).outputs == 2
        schema = output_schema(self, 0)
        self._build = self.clause.bind_one(schema)
        self._copies = self.clause.passes_input(schema)

    def _value(self, tup: Any) -> Any:
        if self.mode == "time_out":
            return self.context.now()
        if self.mode == "count":
            n = self._n
            self._n += 1
            return n
        assert self.delta_of is not None
        return self.delta_of(tup)

    def on_tuple(self, tup: Any, port: int) -> None:
        value = self._value(tup)
        key = freeze_key(self.key(tup) if self.key is not None else tup)
        if has_nan(key):
            self.submit(self._build(tup), 0)
            return
        seen = self._seen
        diff = self.diff
        old = seen.get(key, _ABSENT)
        if old is _ABSENT or value - old > diff:
            self.submit(self._build(tup), 0)
            seen[key] = value
            seen.move_to_end(key)
        else:
            if self.reset_on_duplicate:
                seen[key] = value
                seen.move_to_end(key)
            if self._duplicates:
                self.submit(tup, 1)
        # Forget what has expired, oldest first, as IBM's operator does after every tuple.
        while seen:
            oldest = next(iter(seen.values()))
            if value - oldest <= diff:
                break
            seen.popitem(last=False)

    def on_tuples(self, tuples: Iterator[Any], port: int) -> None:
        """`on_tuple` for a run of tuples, with the per-tuple steps inlined (a plain int or
        string key needs no freezing and cannot be NaN)."""
        seen, diff, reset, duplicates = self._seen, self.diff, self.reset_on_duplicate, self._duplicates
        key_of, build, submit, move_to_end = self.key, self._build, self.submit, seen.move_to_end
        by_count, by_time = self.mode == "count", self.mode == "time_out"
        now, delta_of = self.context.now, self.delta_of
        copied = self._copies  # no output clause, no schema: the tuple itself goes out
        n = self._n
        try:
            for tup in tuples:
                if by_count:
                    value = n
                    n += 1
                elif by_time:
                    value = now()
                else:
                    assert delta_of is not None
                    value = delta_of(tup)
                key = key_of(tup) if key_of is not None else tup
                kind = type(key)
                if kind is not int and kind is not str:
                    key = freeze_key(key)
                    if has_nan(key):
                        submit(tup if copied else build(tup), 0)
                        continue
                old = seen.get(key, _ABSENT)
                if old is _ABSENT or value - old > diff:
                    submit(tup if copied else build(tup), 0)
                    seen[key] = value
                    move_to_end(key)
                else:
                    if reset:
                        seen[key] = value
                        move_to_end(key)
                    if duplicates:
                        submit(tup, 1)
                # Forget what has expired, oldest first, as IBM's operator does after every tuple.
                while seen:
                    oldest = next(iter(seen.values()))
                    if value - oldest <= diff:
                        break
                    seen.popitem(last=False)
        finally:
            self._n = n

    def on_punct(self, punct: Punct, port: int) -> None:
        if self.flush_on_punctuation:
            self._seen.clear()

    def snapshot(self) -> Any:
        return {"n": self._n, "seen": [[key_out(k), v] for k, v in self._seen.items()]}

    def restore(self, state: Any) -> None:
        self._n = int(state["n"])
        self._seen = OrderedDict((thaw_key(k), v) for k, v in state["seen"])

    def reset_to_initial_state(self) -> None:
        self._seen = OrderedDict()
        self._n = 0


_ABSENT: Any = object()


def _projection(names: tuple[str, ...]) -> Callable[[Any], Any]:
    """``tup -> {name: tup[name] for name in names}``, generated as one dict display."""
    env: dict[str, Any] = {}
    fields = ", ".join(f"{name!r}: t[{name!r}]" for name in names)
    exec(f"def project(t):\n    return {{{fields}}}\n", env)  # names are schema identifiers
    project: Callable[[Any], Any] = env["project"]
    return project
