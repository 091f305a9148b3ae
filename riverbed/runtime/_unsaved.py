"""Operators of the user's that keep state in attributes but have no `snapshot()`.

Only what `Operator.snapshot` returns is in a checkpoint; the default returns None (stateless).
A counter kept in ``self.n`` without a ``snapshot``/``restore`` pair starts over after a
restart, with the job logging ``exactly-once`` and nothing else: a review found 115 of 200
rows wrong after a stop and restart. Nothing can tell state from configuration when an
operator is built, so the region compares each such operator's attributes at two successive
commits: one that changed between them is state the checkpoints do not hold, and the job
warns once, naming it. Attributes set in ``setup`` are in place by the first commit.

What is compared, per attribute: a scalar's value, a container's length, any other object's
identity: a container changed in place without changing its length is not seen, nor is an
object's own state (a random generator's).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..core import HOST_ATTRIBUTES
from ..graph import Operator

if TYPE_CHECKING:
    from ._runner import OperatorRunner

__all__ = ["UnsavedState"]

_SCALARS = (int, float, str, bytes, bool, type(None))
_CONTAINERS = (list, dict, set, deque, bytearray)


class _Length(tuple[int]):
    """A container's length, as a fingerprint (never equal to a scalar attribute's value)."""


class UnsavedState:
    """The operators of ``members`` written by the user without their own `snapshot`; call
    `committed` at each commit for those whose attributes changed since the last one."""

    def __init__(self, members: Iterable[OperatorRunner]) -> None:
        self._ops = {r.name: r.op for r in members
                     if type(r.op).snapshot is Operator.snapshot
                     and not type(r.op).__module__.startswith("riverbed.")}
        self._seen: dict[str, dict[str, Any]] | None = None

    def committed(self) -> list[tuple[str, list[str]]]:
        """(operator, attributes changed since the previous commit) for each operator found
        now; each is named once."""
        if not self._ops:
            return []
        now = {name: _fingerprint(op) for name, op in self._ops.items()}
        seen, self._seen = self._seen, now
        if seen is None:
            return []
        found = []
        for name, prints in now.items():
            before = seen[name]
            changed = sorted(k for k, v in prints.items() if k not in before or _differs(before[k], v))
            if changed:
                found.append((name, changed))
                del self._ops[name]
        return found


def _differs(before: Any, now: Any) -> bool:
    """Not equal, as NaN is to itself: a NaN setting never changed."""
    return bool(before != now) and not (isinstance(now, float) and math.isnan(now)
                                        and isinstance(before, float) and math.isnan(before))


def _fingerprint(op: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in vars(op).items():
        if name in HOST_ATTRIBUTES or name.startswith("__"):
            continue
        if isinstance(value, _SCALARS):
            out[name] = value
        elif isinstance(value, _CONTAINERS):
            out[name] = _Length((len(value),))
        else:
            out[name] = id(value)
    return out
