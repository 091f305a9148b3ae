"""The asyncio runtime: runs a frozen graph on one machine.

`Job` runs a graph (`Job.run`, `Job.stop`); `run_graph` does it from
synchronous code. Time comes from a `Clock`: `RealClock` in production,
`VirtualClock` (with `run_virtual`) in tests, where time jumps to the next
timer whenever every task waits.
"""

from ._clock import Clock, RealClock, VirtualClock, run_virtual
from ._errors import JobError, OperatorError, SchemaViolation
from ._job import Job, run_graph
from ._metrics import InputPortMetrics, JobMetrics, OperatorMetrics, OutputPortMetrics

__all__ = [
    "Clock",
    "InputPortMetrics",
    "Job",
    "JobError",
    "JobMetrics",
    "OperatorError",
    "OperatorMetrics",
    "OutputPortMetrics",
    "RealClock",
    "SchemaViolation",
    "VirtualClock",
    "run_graph",
    "run_virtual",
]
