"""The asyncio runtime: runs a frozen graph on one machine.

`Job` runs a graph (`Job.run`, `Job.stop`); `run_graph` does it from
synchronous code. Time comes from a `Clock`: `RealClock` in production,
`VirtualClock` (with `run_virtual`) in tests, where time jumps to the next
timer whenever every task waits.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ..core import (
    InputPortMetrics,
    JobError,
    JobMetrics,
    OperatorError,
    OperatorMetrics,
    OutputPortMetrics,
    RestoreRefused,
    SchemaViolation,
)
from ._clock import Clock, RealClock, VirtualClock, run_virtual
from ._gc import JOB_GC_THRESHOLD
from ._job import MIN_CHECKPOINT_PERIOD, Job, run_graph
from ._parallel import close_in_workers, forget_in_workers
from ._parallel_wire import channel_of
from ._replica import ReplicaKeyError

if TYPE_CHECKING:
    from ._logging import configure_logging, get_logger
    from ._prometheus import MetricsServer, serve_metrics
    from ._status import StatusView, render_plain
    from ._trace_host import replay_in_runtime

# Logging, the status view and the Prometheus exporter pull in structlog, rich and
# prometheus_client (about 80 ms). Processes that only run graphs, such as the Spark
# bridge's source and key-group workers, never need them, so they load on first use.
_LAZY = {
    "configure_logging": "._logging", "get_logger": "._logging",
    "MetricsServer": "._prometheus", "serve_metrics": "._prometheus",
    "StatusView": "._status", "render_plain": "._status",
    "replay_in_runtime": "._trace_host",  # `riverbed trace --host runtime`
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "JOB_GC_THRESHOLD",
    "MIN_CHECKPOINT_PERIOD",
    "Clock",
    "InputPortMetrics",
    "Job",
    "JobError",
    "JobMetrics",
    "MetricsServer",
    "OperatorError",
    "OperatorMetrics",
    "OutputPortMetrics",
    "RealClock",
    "ReplicaKeyError",
    "RestoreRefused",
    "SchemaViolation",
    "StatusView",
    "VirtualClock",
    "channel_of",
    "close_in_workers",
    "configure_logging",
    "forget_in_workers",
    "get_logger",
    "render_plain",
    "replay_in_runtime",
    "run_graph",
    "run_virtual",
    "serve_metrics",
]
