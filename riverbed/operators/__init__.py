"""The SPL standard toolkit in Python: SPL's operators with SPL's punctuation behaviour.

Each operator's docstring states its window modes and its punctuation
behaviour; constructors take Pythonic keyword arguments and SPL's own
parameter names alike (``group_by=`` or ``groupBy=``). Aggregate's output
functions are here too; SPL's ``Any`` and its ``Custom`` aggregate are
exported as ``AnyOf`` and ``CustomAggregate`` (``Any`` would shadow
``typing.Any``, ``Custom`` is the Custom operator).
"""

from ._aggregate import Aggregate
from ._aggregate_functions import Any as AnyOf
from ._aggregate_functions import (
    ArgMax,
    ArgMin,
    Average,
    Collect,
    CollectArgMax,
    CollectArgMin,
    CollectDistinct,
    Count,
    CountAll,
    CountByDistinct,
    CountByGroup,
    CountDistinct,
    CountGroups,
    First,
    IntervalEnd,
    IntervalStart,
    Last,
    Max,
    MaxCount,
    Min,
    MinCount,
    PaneIndex,
    PaneTimingOf,
    PopulationStdDev,
    SampleStdDev,
    Sum,
)
from ._aggregate_functions import Custom as CustomAggregate
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
from ._join import Join
from ._params import OperatorParameterError
from ._parquet_source import ParquetSource, ParquetSourceError
from ._relational import Custom, Filter, Functor, Punctor
from ._sort import Sort
from ._utility import DeDuplicate, Split, ThreadedSplit, Union
from ._utility_sync import Barrier, DynamicFilter, Gate, Pair
from ._utility_timed import Beacon, Delay, Throttle

__all__ = [
    "Aggregate",
    "AnyOf",
    "ArgMax",
    "ArgMin",
    "Average",
    "Barrier",
    "Beacon",
    "Collect",
    "CollectArgMax",
    "CollectArgMin",
    "CollectDistinct",
    "Count",
    "CountAll",
    "CountByDistinct",
    "CountByGroup",
    "CountDistinct",
    "CountGroups",
    "Custom",
    "CustomAggregate",
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
    "First",
    "Functor",
    "Gate",
    "IntervalEnd",
    "IntervalStart",
    "Join",
    "Last",
    "Max",
    "MaxCount",
    "Min",
    "MinCount",
    "OperatorParameterError",
    "Pair",
    "PaneIndex",
    "PaneTimingOf",
    "ParquetSource",
    "ParquetSourceError",
    "PopulationStdDev",
    "Punctor",
    "SampleStdDev",
    "Sort",
    "Split",
    "Sum",
    "ThreadedSplit",
    "Throttle",
    "Union",
]
