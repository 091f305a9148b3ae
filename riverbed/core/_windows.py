"""The windows of an operator's input ports, built from the graph's declarations."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..graph import EventTime, FrozenGraph, Operator, OperatorDef
from ..windows import EventType, StreamWindow, StreamWindowEvent, TimeIntervalSpec, TimeIntervalWindow

__all__ = ["Window", "build_window"]

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
    c = inp.connections[0]
    schema = graph.stream_schema(c.operator, c.port)
    types = schema.as_dict() if schema is not None else dict(inp.attribute_types or {})
    w = StreamWindow(inp.window, flavor=inp.flavor, partition_by=inp.partition_by,
                     attribute_types=types, default_partition=_default_key(types, inp.partition_by))
    w.register_listener(listener, op.window_events)
    return w
