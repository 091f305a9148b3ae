"""The one rule for the names of graphs, operators, streams' parallel regions and consistent
regions: they appear in logs, metrics labels, checkpoint keys and file names."""

from __future__ import annotations

import re

__all__ = ["is_name"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")


def is_name(name: str) -> bool:
    """A whole name: ``fullmatch``, since a ``$`` pattern took "src\\n" as a name beside "src"."""
    return _NAME.fullmatch(name) is not None
