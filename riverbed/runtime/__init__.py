"""The asyncio runtime: runs a frozen graph on one machine.

`Job` runs a graph (`Job.run`, `Job.stop`); `run_graph` does it from
synchronous code. Time comes from a `Clock`: `RealClock` in production,
`VirtualClock` (with `run_virtual`) in tests, where time jumps to the next
timer whenever every task waits.
"""

from ._clock import Clock, RealClock, VirtualClock, run_virtual
from ._errors import JobError, OperatorError, SchemaViolation
from ._job import Job, run_graph
from ._logging import configure_logging, get_logger
from ._metrics import InputPortMetrics, JobMetrics, OperatorMetrics, OutputPortMetrics
from ._prometheus import MetricsServer, serve_metrics
from ._status import StatusView, render_plain

__all__ = [
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
    "SchemaViolation",
    "StatusView",
    "VirtualClock",
    "configure_logging",
    "get_logger",
    "render_plain",
    "run_graph",
    "run_virtual",
    "serve_metrics",
]
