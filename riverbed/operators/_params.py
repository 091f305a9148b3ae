"""SPL parameter names and Pythonic keyword arguments, accepted alike.

A user porting ``Aggregate`` writes ``groupBy=`` as in SPL; a Python user
writes ``group_by=``. Each operator's constructor takes the Pythonic names;
`spl_aliases` lets it accept the SPL spelling too, and refuses an unknown or
doubly given parameter with a message naming the operator.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["OperatorParameterError", "snake_case", "spl_aliases"]


class OperatorParameterError(TypeError):
    """An operator was given a parameter it does not have, or one twice, or a bad value."""


def snake_case(name: str) -> str:
    """``aggregateIncompleteWindows`` -> ``aggregate_incomplete_windows``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def spl_aliases(operator: str, given: Mapping[str, Any], known: set[str] | frozenset[str]) -> dict[str, Any]:
    """Map SPL-spelled keyword arguments to the Pythonic names in ``known``.

    ``given`` are the extra keyword arguments the constructor received;
    returns them under their Pythonic names.
    """
    out: dict[str, Any] = {}
    for name, value in given.items():
        py = snake_case(name)
        if py not in known:
            close = sorted(known, key=lambda k: _distance(k, py))[:1]
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise OperatorParameterError(f"{operator}: unknown parameter {name!r}{hint}")
        if py in out:
            raise OperatorParameterError(f"{operator}: parameter {py!r} given twice")
        out[py] = value
    return out


def _distance(a: str, b: str) -> int:
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]
