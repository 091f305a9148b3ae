"""The SPL standard toolkit in Python: SPL's operators with SPL's punctuation behaviour.

Each operator's docstring states its window modes and its punctuation
behaviour; constructors take Pythonic keyword arguments and SPL's own
parameter names alike (``group_by=`` or ``groupBy=``).
"""

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
    "DynamicFilter",
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
