"""The SPL standard toolkit in Python: SPL's operators with SPL's punctuation behaviour.

Each operator's docstring states its window modes and its punctuation
behaviour; constructors take Pythonic keyword arguments and SPL's own
parameter names alike (``group_by=`` or ``groupBy=``).
"""

from ._files import (
    DirectoryScan,
    DirectoryScanError,
    FileFormatError,
    FileSink,
    FileSinkError,
    FileSource,
    FileSourceError,
    FileSourceOfFile,
    FileSourceWithInput,
)
from ._params import OperatorParameterError
from ._relational import Custom, Filter, Functor, Punctor
from ._utility import DeDuplicate, Split, ThreadedSplit, Union
from ._utility_sync import Barrier, DynamicFilter, Gate, Pair
from ._utility_timed import Beacon, Delay, Throttle

__all__ = [
    "Barrier",
    "Beacon",
    "Custom",
    "DeDuplicate",
    "Delay",
    "DirectoryScan",
    "DirectoryScanError",
    "DynamicFilter",
    "FileFormatError",
    "FileSink",
    "FileSinkError",
    "FileSource",
    "FileSourceError",
    "FileSourceOfFile",
    "FileSourceWithInput",
    "Filter",
    "Functor",
    "Gate",
    "OperatorParameterError",
    "Pair",
    "Punctor",
    "Split",
    "ThreadedSplit",
    "Throttle",
    "Union",
]
