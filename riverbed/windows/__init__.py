"""SPL windows for Python: tumbling, sliding, partitioned and timeInterval, exactly as IBM Streams.

Pure and synchronous: no asyncio, no I/O, no clock. A host drives a
`StreamWindow` (insert, punctuation, time advance) or a `TimeIntervalWindow`
(insert, watermark) and it raises `StreamWindowEvent`s to its listeners in
the order IBM's runtime does. `make_window` builds either from a clause. A
host inserting batches into a `StreamWindow` calls the function that
`StreamWindow.inserter` returns (see its contract).

Each window keeps its configuration (a frozen `WindowConfig` or
`TimeIntervalConfig`, its ``config``) apart from its state, which is exactly
what its ``snapshot()`` stores; partition keys in every snapshot of keyed
state go through `encode_partition_key` and come back through
`decode_partition_key`.
"""

from ._clause import parse_window_clause, same_clause
from ._config import WindowConfig
from ._errors import (
    PunctuationError,
    SnapshotError,
    WatermarkError,
    WindowClauseError,
    WindowError,
    WindowStateError,
    WindowTupleError,
)
from ._events import EventType, PaneEvent, PaneTiming, StreamWindowEvent, StreamWindowListener
from ._factory import make_window
from ._flavor import Flavor
from ._keys import decode_partition_key, encode_partition_key
from ._policy import (
    EVENT_TIME_MAX,
    EVENT_TIME_MIN,
    MAX_SECONDS,
    NS_PER_SECOND,
    Count,
    Delta,
    PartitionAge,
    PartitionCount,
    Punct,
    Time,
    TimeIntervalSpec,
    TupleCount,
    WindowSpec,
    WindowType,
    check_watermark,
    seconds_to_ns,
    seconds_to_ticks,
)
from ._time_interval import TimeIntervalWindow
from ._time_interval_state import TimeIntervalConfig
from ._trigger_runs import TriggerRun, drop_front
from ._window import StreamWindow

__all__ = [
    "EVENT_TIME_MAX",
    "EVENT_TIME_MIN",
    "MAX_SECONDS",
    "NS_PER_SECOND",
    "Count",
    "Delta",
    "EventType",
    "Flavor",
    "PaneEvent",
    "PaneTiming",
    "PartitionAge",
    "PartitionCount",
    "Punct",
    "PunctuationError",
    "SnapshotError",
    "StreamWindow",
    "StreamWindowEvent",
    "StreamWindowListener",
    "Time",
    "TimeIntervalConfig",
    "TimeIntervalSpec",
    "TimeIntervalWindow",
    "TriggerRun",
    "TupleCount",
    "WatermarkError",
    "WindowClauseError",
    "WindowConfig",
    "WindowError",
    "WindowSpec",
    "WindowStateError",
    "WindowTupleError",
    "WindowType",
    "check_watermark",
    "decode_partition_key",
    "drop_front",
    "encode_partition_key",
    "make_window",
    "parse_window_clause",
    "same_clause",
    "seconds_to_ns",
    "seconds_to_ticks",
]
