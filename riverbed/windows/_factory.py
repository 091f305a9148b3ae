"""One entry point for every SPL window clause.

Hosts (the asyncio runtime, the Spark bridge, ``riverbed trace``) receive a
clause from the user and should not have to know which engine serves it.
"""

from __future__ import annotations

from typing import Any

from ._clause import parse_window_clause
from ._policy import TimeIntervalSpec, WindowSpec
from ._time_interval import TimeIntervalWindow
from ._window import StreamWindow

__all__ = ["make_window"]


def make_window(spec: WindowSpec | TimeIntervalSpec | str,
                **options: Any) -> StreamWindow[Any] | TimeIntervalWindow[Any]:
    """Build the window a clause or spec describes.

    ``options`` go to the engine's constructor: `StreamWindow` for tumbling
    and sliding windows, `TimeIntervalWindow` (which also takes
    ``event_time`` and ``resolution``) for timeInterval windows.
    """
    if isinstance(spec, str):
        spec = parse_window_clause(spec)
    if isinstance(spec, TimeIntervalSpec):
        return TimeIntervalWindow(spec, **options)
    return StreamWindow(spec, **options)
