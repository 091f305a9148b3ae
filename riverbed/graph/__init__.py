"""Graphs of operators as frozen data, shared by every host (asyncio runtime, Spark bridge).

A script builds a `Graph` (sources, operators with windowed or plain input
ports, sinks), `Graph.freeze` validates it into a `FrozenGraph`, and a host
runs that. Nothing here is tied to a particular executor.
"""

from ._errors import GraphError, GraphValidationError, SchemaError
from ._model import (
    INBOX_BATCHES,
    Connection,
    DeclaredGraph,
    DeclaredOperator,
    DeclaredPort,
    EventTime,
    FrozenGraph,
    Graph,
    InputPort,
    InvalidGraphError,
    OperatorDef,
    PortInput,
    Stream,
)
from ._operator import Operator, OperatorContext, PortLayout, Source, SourceContext, WindowPunctuationMode
from ._parallel import ParallelBlock, ParallelRegion
from ._punct import CheckpointBarrier, Punct, Watermark
from ._regions import ConsistentRegion
from ._schema import Schema, split_composite
from ._validate import event_time_region

__all__ = [
    "INBOX_BATCHES",
    "CheckpointBarrier",
    "Connection",
    "ConsistentRegion",
    "DeclaredGraph",
    "DeclaredOperator",
    "DeclaredPort",
    "EventTime",
    "FrozenGraph",
    "Graph",
    "GraphError",
    "GraphValidationError",
    "InputPort",
    "InvalidGraphError",
    "Operator",
    "OperatorContext",
    "OperatorDef",
    "ParallelBlock",
    "ParallelRegion",
    "PortInput",
    "PortLayout",
    "Punct",
    "Schema",
    "SchemaError",
    "Source",
    "SourceContext",
    "Stream",
    "Watermark",
    "WindowPunctuationMode",
    "event_time_region",
    "split_composite",
]
