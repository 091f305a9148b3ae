"""Drawings of a graph and a live web console for a running job.

``riverbed graph graph.py --format svg|dot|mermaid`` draws a graph without running it
(`graph_command`); ``riverbed run graph.py --console [HOST:]PORT`` serves a page that
draws the running graph with its rates, queues, watermarks and checkpoints, pushed to the
browser as server-sent events (`serve_console`). The layout is Graphviz's ``dot``; the
page's script and style ship in this package, so nothing is fetched at run time.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._address import ConsoleError, listen, parse_address
from ._draw import FORMATS, draw, graph_command, load_view
from ._layout import LayoutError, lay_out, to_dot, to_mermaid
from ._sampler import MetricsSource, Sampler, format_watermark
from ._svg import render_svg
from ._view import (
    EdgeView,
    GraphView,
    OperatorView,
    ParallelView,
    PortView,
    RegionView,
    view_of,
    view_of_declared,
)

if TYPE_CHECKING:
    from ._server import ConsoleServer, serve_console

# The server pulls in aiohttp (about 100 ms); drawing a graph never needs it.
_LAZY = {"ConsoleServer": "._server", "serve_console": "._server"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "FORMATS",
    "ConsoleError",
    "ConsoleServer",
    "EdgeView",
    "GraphView",
    "LayoutError",
    "MetricsSource",
    "OperatorView",
    "ParallelView",
    "PortView",
    "RegionView",
    "Sampler",
    "draw",
    "format_watermark",
    "graph_command",
    "lay_out",
    "listen",
    "load_view",
    "parse_address",
    "render_svg",
    "serve_console",
    "to_dot",
    "to_mermaid",
    "view_of",
    "view_of_declared",
]
