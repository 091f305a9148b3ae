"""Conformance: replay window trace cases (``tests/conformance/FORMAT.md``) on any host.

A case file is read with `load_cases` and each case checked once by
`parse_case` into a `Case` with typed steps. `replay` runs a case on a
`Host`, which says what each kind of step means where the window lives: the
window library (`WindowHost`), a one-operator job in the asyncio runtime, the
Spark bridge's keyed stage. The result is a list of `Event`s, each with the
step that raised it and the clock time it was raised at; `trace_records`
gives the JSON objects `riverbed trace` prints for them.
"""

from ._cases import FLAVORS, Case, load_cases, parse_case
from ._events import Event, EventLog, trace_records
from ._host import Host
from ._interpreter import Replay, replay
from ._steps import (
    NS_PER_SECOND,
    AtStep,
    CaseError,
    CheckpointStep,
    EvictPartitionStep,
    PunctStep,
    ResetStep,
    RestartStep,
    Step,
    TupleStep,
    WatermarkStep,
)
from ._window_host import WindowHost

__all__ = [
    "FLAVORS",
    "NS_PER_SECOND",
    "AtStep",
    "Case",
    "CaseError",
    "CheckpointStep",
    "Event",
    "EventLog",
    "EvictPartitionStep",
    "Host",
    "PunctStep",
    "Replay",
    "ResetStep",
    "RestartStep",
    "Step",
    "TupleStep",
    "WatermarkStep",
    "WindowHost",
    "load_cases",
    "parse_case",
    "replay",
    "trace_records",
]
