"""The operator core: one operator's semantics, host-neutral, and the synchronous host.

Every host drives the same `OperatorCore` (windows, punctuation, watermarks, checkpoint
alignment, error ports, schema checks) and nothing else: the asyncio runtime
(`riverbed.runtime`), the synchronous `SyncGraph` that Spark stages and trace replays use,
and any future host (a worker process). A host implements `CoreHost`.
"""

from ._core import HOST_ATTRIBUTES, CoreHost, FinalHold, OperatorCore, TimerHandle
from ._errors import (
    USER_FAILURES,
    JobError,
    OperatorError,
    RestoreRefused,
    SchemaViolation,
    TupleFailed,
    with_notes,
)
from ._metrics import (
    Counter,
    InputPortMetrics,
    JobMetrics,
    OperatorMetrics,
    OutputPortMetrics,
    RegionMetrics,
)
from ._output import MarkedBatch, OutputPort, control_positions, split_marked
from ._reuse import detached_state, reusable_state, state_to_restore
from ._state import describe_key, same_key
from ._submit import ManualWatermark
from ._sync import StampClock, SyncGraph

__all__ = [
    "HOST_ATTRIBUTES",
    "USER_FAILURES",
    "CoreHost",
    "Counter",
    "FinalHold",
    "InputPortMetrics",
    "JobError",
    "JobMetrics",
    "ManualWatermark",
    "MarkedBatch",
    "OperatorCore",
    "OperatorError",
    "OperatorMetrics",
    "OutputPort",
    "OutputPortMetrics",
    "RegionMetrics",
    "RestoreRefused",
    "SchemaViolation",
    "StampClock",
    "SyncGraph",
    "TimerHandle",
    "TupleFailed",
    "control_positions",
    "describe_key",
    "detached_state",
    "reusable_state",
    "same_key",
    "split_marked",
    "state_to_restore",
    "with_notes",
]
