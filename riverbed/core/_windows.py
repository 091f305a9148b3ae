"""The windows of an operator's input ports, built from the graph's declarations."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..graph import EventTime, FrozenGraph, Operator, OperatorDef
from ..windows import (
    EventType,
    PaneEvent,
    StreamWindow,
    StreamWindowEvent,
    TimeIntervalSpec,
    TimeIntervalWindow,
)
from ._errors import OperatorError, reason_of
from ._output import OutputPort

__all__ = ["Window", "build_window", "route_listener_errors"]

Window = StreamWindow[Any] | TimeIntervalWindow[Any]

_INT_TYPES = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "timestamp"}


def _default_key(types: dict[str, str], partition_by: Any) -> Any:
    """The partition key IBM's C++ timers use when no partition exists: the type's default."""
    spl_type = types.get(partition_by) if isinstance(partition_by, str) else None
    if spl_type in _INT_TYPES:
        return 0
    if spl_type in ("float32", "float64"):
        return 0.0
    if spl_type == "boolean":
        return False
    return ""


def build_window(odef: OperatorDef, port: int, graph: FrozenGraph, *, event_time: EventTime | None,
                 op: Operator, listener: Callable[[StreamWindowEvent[Any]], None]) -> Window | None:
    """The window of input port ``port`` (None for a plain port), ``listener`` registered for
    the events the operator wants (a timeInterval window raises pane events only)."""
    inp = odef.inputs[port]
    if inp.window is None:
        return None
    w: Window
    if isinstance(inp.window, TimeIntervalSpec):
        assert event_time is not None  # validation: a timeInterval window is in the region
        w = TimeIntervalWindow(inp.window, event_time=event_time.attribute,
                               resolution=event_time.resolution, partition_by=inp.partition_by,
                               flavor=inp.flavor)
        pane_events = {EventType.INITIAL_FULL, EventType.TRIGGER, EventType.CLOSE}
        wanted = op.window_events
        w.register_listener(listener, pane_events if wanted is None else pane_events & wanted)
        return w
    schema = graph.input_schema(odef.name, port)
    types = schema.as_dict() if schema is not None else dict(inp.attribute_types or {})
    w = StreamWindow(inp.window, flavor=inp.flavor, partition_by=inp.partition_by,
                     attribute_types=types, default_partition=_default_key(types, inp.partition_by))
    w.register_listener(listener, op.window_events)
    return w


# The events whose tuples the operator will not see again in this window: a failure there sends
# them to the error port, else they would be gone. A sliding window's TRIGGER and INITIAL_FULL
# leave their tuples in the window (the next trigger sees them), so one record stands for
# the failure; so do a pane's INITIAL_FULL and CLOSE (a CLOSE's tuples were triggered before).
_GONE = frozenset({EventType.INSERTION, EventType.EVICTION, EventType.PARTITION_EVICTION,
                   EventType.FINAL})
_PANE_GONE = frozenset({EventType.INSERTION, EventType.TRIGGER})


def route_listener_errors(window: Window, route: Callable[[list[Any], str], None],
                          outputs: list[OutputPort]) -> None:
    """Send what the window's listeners raise to ``route(tuples, reason)`` (an operator's
    error port) and let the window finish its step: each tuple of an event listed above, or
    one None for an event whose tuples stay. What the failed call had submitted to
    ``outputs`` (the data ports) is taken back, so a pane is output whole or not at all (a
    batch already sealed meanwhile, by a final or a barrier the call sent, stays). An
    `OperatorError` (a failure the operator has already attributed) still leaves the
    window: it ends the job."""
    panes = isinstance(window, TimeIntervalWindow)
    gone = _PANE_GONE if panes else _GONE
    partitioned = window.is_partitioned

    def before() -> list[tuple[int, int, int, int]]:
        return [out.position() for out in outputs]

    def failed(event: StreamWindowEvent[Any], exc: Exception,
               positions: list[tuple[int, int, int, int]]) -> None:
        if isinstance(exc, OperatorError):
            raise exc
        for out, position in zip(outputs, positions, strict=True):
            out.rewind(position)
        reason = reason_of(exc)
        etype = event.type
        if etype is not EventType.INSERTION:
            reason = f"{reason} at {etype.name}"
            if partitioned:
                reason = f"{reason} of partition {event.partition!r}"
            if isinstance(event, PaneEvent):
                reason = f"{reason} of pane [{event.interval_start}, {event.interval_end})"
        tuples = list(event.tuples) if etype in gone else []
        route(tuples or [None], reason)

    window.on_listener_error(failed, before)


def failed_event(exc: BaseException) -> str | None:
    """The window event a listener raised ``exc`` in, as a failure names it ("EVICTION of
    partition 'a' (3 tuples)"), or None when it was not raised in one. A tumble's listener
    that fails was reported "on tuple" the one that completed the window, which is not the
    culprit. The handlers the windows call are the operators' own (Aggregate and Sort register
    theirs), unwrapped on the hot path, so the failure's frames are read here, once, instead:
    the innermost one holding an event."""
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):
        for value in frame.f_locals.values():
            if isinstance(value, StreamWindowEvent):
                n = len(value.tuples)
                label = value.type.name
                if value.partition is not None:
                    label += f" of partition {value.partition!r}"
                return f"{label} ({n} tuple{'' if n == 1 else 's'})"
    return None
