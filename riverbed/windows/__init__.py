"""SPL windows for Python: tumbling, sliding and partitioned, exactly as IBM Streams.

Pure and synchronous: no asyncio, no I/O, no clock. A host drives a
`StreamWindow` (insert, punctuation, time advance) and it raises
`StreamWindowEvent`s to its listeners in the order IBM's runtime does.
"""

from ._clause import parse_window_clause
from ._errors import SnapshotError, WindowClauseError, WindowError, WindowStateError, WindowTupleError
from ._events import EventType, StreamWindowEvent, StreamWindowListener
from ._flavor import Flavor
from ._policy import (
    Count,
    Delta,
    PartitionAge,
    PartitionCount,
    Punct,
    Time,
    TupleCount,
    WindowSpec,
    WindowType,
    seconds_to_ns,
)
from ._window import StreamWindow

__all__ = [
    "Count",
    "Delta",
    "EventType",
    "Flavor",
    "PartitionAge",
    "PartitionCount",
    "Punct",
    "SnapshotError",
    "StreamWindow",
    "StreamWindowEvent",
    "StreamWindowListener",
    "Time",
    "TupleCount",
    "WindowClauseError",
    "WindowError",
    "WindowSpec",
    "WindowStateError",
    "WindowTupleError",
    "WindowType",
    "parse_window_clause",
    "seconds_to_ns",
]
