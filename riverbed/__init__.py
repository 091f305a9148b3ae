"""riverbed: IBM Streams' SPL semantics on a Python stream runtime.

The names a graph script needs are here; the subpackages hold the rest:
`riverbed.windows` (the window engine), `riverbed.graph` (graphs as frozen
data), `riverbed.runtime` (the asyncio runtime).
"""

from .graph import Graph, Operator, Punct, Schema, Source, Watermark
from .runtime import Job, RealClock, VirtualClock, run_graph
from .windows import EventType, StreamWindowEvent

__version__ = "0.1.0"

__all__ = [
    "EventType",
    "Graph",
    "Job",
    "Operator",
    "Punct",
    "RealClock",
    "Schema",
    "Source",
    "StreamWindowEvent",
    "VirtualClock",
    "Watermark",
    "run_graph",
]
