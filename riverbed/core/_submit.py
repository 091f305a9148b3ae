"""How tuples enter an operator core's output ports: the submit functions and a source's items.

A submit is built once per core, the cheapest that does what the core's ports need: an
append to the port's buffer, or with event time (SPL ``outputEventTime``) an append whose
watermark follows each tuple (E29). The schema is not checked here but per batch, when an
`OutputPort` is sealed. A synchronous source's items (`emit_items`) are taken a batch at a
time: plain tuples in one ``extend``, event-time dicts with their watermarks found in C loops;
only a batch holding marks or odd tuples goes through the submit a tuple at a time.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable
from itertools import accumulate
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from ..graph import Punct, Watermark
from ..windows import EVENT_TIME_MAX
from ._errors import SchemaViolation
from ._output import MarkedBatch, OutputPort

if TYPE_CHECKING:
    from ._core import OperatorCore

__all__ = ["ManualWatermark", "batch_submit", "emit_items", "make_submit", "result_submit", "results_submit"]

_DICTS = {dict}
_INTS = {int}
# Sets a new `Watermark`'s slot: object.__new__ and this make one without the frozen
# dataclass's generated __init__ (which sets the slot through object.__setattr__).
_SET_VALUE = Watermark.__dict__["value"].__set__


def no_port(core: OperatorCore, port: Any) -> IndexError:
    """The error for a submit to ``port``, which ``core`` does not have."""
    n = len(core.outputs)
    has = f"output ports 0 to {n - 1}" if n > 1 else "output port 0 only" if n else "no output port"
    return IndexError(f"operator {core.name!r}: output port {port!r} does not exist (it has {has})")


def output_port(core: OperatorCore, port: int) -> OutputPort:
    """``core.outputs[port]``, refusing a negative index as well as one past the end."""
    if not (type(port) is int and 0 <= port < len(core.outputs)):
        raise no_port(core, port)
    return core.outputs[port]


def make_submit(core: OperatorCore) -> Callable[..., None]:
    """``submit(tup, port=0)`` for ``core``."""
    appends = [o.buf.append for o in core.outputs]  # the buffers live as long as the core
    if core._generates_watermarks:
        return _event_time_submit(core, appends)
    if len(appends) == 1:
        append = appends[0]

        def submit_one(tup: Any, port: int = 0) -> None:
            if port:
                raise no_port(core, port)
            append(tup)

        return submit_one

    def submit(tup: Any, port: int = 0) -> None:
        try:
            add = appends[port] if port >= 0 else None  # not an index from the end
        except (IndexError, TypeError):
            add = None
        if add is None:
            raise no_port(core, port)
        add(tup)

    return submit


def batch_submit(core: OperatorCore, port: int) -> Callable[[Iterable[Any]], None]:
    """`OperatorCore.batch_submit`."""
    out = output_port(core, port)
    if port == 0 and core._generates_watermarks:  # each tuple may move the watermark
        submit = core.submit

        def submit_each(tuples: Iterable[Any]) -> None:
            for tup in tuples:
                submit(tup, 0)

        return submit_each
    return out.buf.extend


def result_submit(core: OperatorCore, port: int) -> Callable[[Any], None]:
    """`OperatorCore.result_submit`: the tuple, then a window mark after it, in one call (an
    Aggregate's row and mark after each trigger, a Join arrival's one pair and its mark)."""
    out = output_port(core, port)
    mark = Punct.WINDOW
    if port == 0 and core._generates_watermarks:  # the tuple may move the watermark
        submit, submit_punct = core.submit, core.submit_punct

        def submit_then_mark(tup: Any) -> None:
            submit(tup, 0)
            submit_punct(mark, 0)

        return submit_then_mark
    buf, at = out.buf, out.at  # both live as long as the port (`OutputPort`)
    append, at_append = buf.append, at.append

    def submit_result(tup: Any) -> None:  # `submit`, then `OutputPort.mark` inlined
        append(tup)
        at_append(len(buf))
        append(mark)

    return submit_result


def results_submit(core: OperatorCore, port: int) -> Callable[[list[Any]], None]:
    """`OperatorCore.results_submit`: each tuple of a list followed by a window mark, as
    `result_submit` on each would, in C passes (a run of an Aggregate's triggers at once)."""
    out = output_port(core, port)
    mark = Punct.WINDOW
    if port == 0 and core._generates_watermarks:  # each tuple may move the watermark
        submit_result = result_submit(core, port)

        def submit_each(tuples: list[Any]) -> None:
            for tup in tuples:
                submit_result(tup)

        return submit_each
    buf, at = out.buf, out.at  # both live as long as the port (`OutputPort`)
    extend, at_extend = buf.extend, at.extend

    def submit_results(tuples: list[Any]) -> None:
        start = len(buf)
        items = [mark] * (2 * len(tuples))
        items[::2] = tuples
        extend(items)
        at_extend(range(start + 1, len(buf), 2))

    return submit_results


def _event_time_submit(core: OperatorCore, appends: list[Callable[[Any], None]]) -> Callable[..., None]:
    """A submit with E29 inlined: the watermark follows each tuple's event time."""
    append, attr, lag, gap = appends[0], core._et_attribute, core._lag_ticks, core._gap_ticks
    metrics, most = core.metrics, EVENT_TIME_MAX

    def slow(tup: Any, port: int) -> None:
        if port:
            output_port(core, port)  # raises: there is no such port
            appends[port](tup)
            return
        candidate = core._event_time_of(tup)  # refuses a bad event time before taking it
        append(tup)
        core._watermark_after(candidate)

    def submit_et(tup: Any, port: int = 0) -> None:
        if port:
            slow(tup, port)
            return
        try:
            t = tup[attr]
        except (KeyError, TypeError, IndexError):
            t = None
        if type(t) is not int:
            slow(tup, port)  # raises the error that says what is wrong
            return
        candidate = t - lag  # E29: the watermark follows the tuple
        watermark = core._watermark
        if watermark is None or candidate > watermark:
            if t > most:
                slow(tup, port)  # raises: outside the int64 range (only a rising time can be)
                return
            append(tup)
            core._watermark = metrics.watermark = candidate
            last = core._last_sent
            if last is None or candidate >= last + gap:
                core._send_watermark(candidate)
        else:
            append(tup)

    return submit_et


class ManualWatermark:
    """A watermark a source set while a host pulled items from its ``generate()``
    (`OperatorCore.pull_items`): it holds its place among them, and goes out after the
    tuples before it. Not a `Watermark`: a source that yields one of those is still told how
    to set one."""

    __slots__ = ("value",)

    def __init__(self, value: int) -> None:
        self.value = value


def emit_items(core: OperatorCore, items: list[Any]) -> bool:
    """`OperatorCore.emit_items`. One pass over the types finds the marks (12 ns a tuple;
    ``Punct.FINAL in items`` compares each dict to the mark, 20 ns): a batch of plain tuples
    without event time is one ``extend``, and a batch of dicts with integer event times finds
    its watermarks in C loops (`_emit_timed`); otherwise without event time a tuple is only
    appended, and with it each goes through the event-time submit, which says what is wrong.

    A declared schema is checked first when the batch can go out whole (nothing waiting on the
    port, one data port): passing it, every item is a valid tuple, so none is a mark and the
    pass over the types is not needed; the batch is queued as it is, not checked again."""
    out = core.outputs[0]
    check = out.first_invalid
    alone = not out.buf and not out.at and core._data_ports == [0]  # it can go out whole
    if alone and check is not None and items and check(items) < 0:
        if not core._generates_watermarks:
            out.pending.append(items.copy())
            return False
        if _emit_timed(core, items, whole=True):
            return False
        return _submit_each(core, items, False)  # event times that are not ints: say which
    ended = False
    types = set(map(type, items))
    if Punct in types or ManualWatermark in types:
        end = next((i for i, item in enumerate(items) if item is Punct.FINAL), -1)
        if end >= 0:  # a final item ends the source: what follows it is not emitted
            items, ended = items[:end], True
    elif not core._generates_watermarks:
        out.buf.extend(items)  # the schema, if any, is checked when it is sealed
        return False
    elif types == _DICTS and _emit_timed(core, items, whole=alone and check is None):
        return False
    if not core._generates_watermarks:
        mark, append, window = out.mark, out.buf.append, Punct.WINDOW
        for item in items:
            if item is window:
                mark(window)
            elif type(item) is ManualWatermark:
                core._send_watermark(item.value)
            else:
                append(item)
        return ended
    return _submit_each(core, items, ended)


def _submit_each(core: OperatorCore, items: list[Any], ended: bool) -> bool:
    """An event-time source's items a tuple at a time (E29), marks in their places: the
    submit says what is wrong with a bad tuple. Returns ``ended``."""
    mark, window = core.outputs[0].mark, Punct.WINDOW
    submit = core.submit
    for item in items:
        if item is window:
            mark(window)
            continue
        try:
            submit(item)
        except SchemaViolation as exc:
            core.fail_or_route(exc, None, item)  # (a source: no input port)
    return ended


def _emit_timed(core: OperatorCore, items: list[Any], whole: bool) -> bool:
    """`emit_items` for a batch of dicts whose event times are all integers (False, having
    done nothing, otherwise): the same tuples and watermarks in the same places, found with
    C loops. Each tuple moves the watermark to the running maximum of the event times (minus
    the lag); one is sent after the first tuple that takes it a minimum gap past the last one
    sent, so the next send is a binary search in the running maximum.

    ``whole``: the batch goes out whole, its watermarks placed here (`emit_items` found the
    port empty, its only data port taking every tuple, and the batch checked or no schema to
    check): it needs no per-mark appends and no check of each run between watermarks when it
    is sealed."""
    try:
        times = list(map(itemgetter(core._et_attribute), items))
    except (KeyError, TypeError, IndexError):
        return False
    if set(map(type, times)) != _INTS:
        return False
    # the running maximum: the times themselves when they never go back (a sorted list is
    # one pass of timsort and a compare; accumulate(max) costs ten times that)
    top = times if sorted(times) == times else list(accumulate(times, max))
    if top[-1] > EVENT_TIME_MAX:
        return False  # one by one: the tuple whose time is out of range is refused, named
    out = core.outputs[0]
    batch: list[Any] = [] if whole else out.buf
    controls: list[int] = []
    lag, gap = core._lag_ticks, core._gap_ticks
    watermark, last, n, start = core._watermark, core._last_sent, len(items), 0
    new, W, set_value = object.__new__, Watermark, _SET_VALUE  # Watermark(v) at half the cost
    while True:
        if last is None and watermark is None:
            i = 0
        else:  # E29: after the watermark, and a minimum gap after the last one sent
            need = watermark + 1 if last is None else last + gap  # type: ignore[operator]
            if watermark is not None and need <= watermark:
                need = watermark + 1
            i = bisect_left(top, need + lag, start)
            if i >= n:
                break
        batch += items[start:i + 1]
        start = i + 1
        watermark = top[i] - lag
        if whole:  # `_send_watermark` in place
            if last is None or watermark > last:
                controls.append(len(batch))
                mark = new(W)
                set_value(mark, watermark)
                batch.append(mark)
                last = watermark
        else:
            core._send_watermark(watermark)
            last = core._last_sent
        if start >= n:
            break
    core._last_sent = last
    if start < n:
        batch += items[start:] if start else items
    if whole:  # checked already: queued as it is
        out.pending.append(MarkedBatch(batch, n, 0, controls) if controls else batch)
    candidate = top[-1] - lag
    if watermark is None or candidate > watermark:
        watermark = candidate
    core._watermark = core.metrics.watermark = watermark
    return True
