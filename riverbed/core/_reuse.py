"""A committed checkpoint kept in memory, so that a consistent region resets without reading it
back.

Decoding a checkpoint is most of a reset: a million windowed tuples take 0.6-1 s to decode on
an idle core, several seconds on a busy one, while restoring the windows from decoded data
takes 0.06 s. The states a region just committed are still in memory, and most of them can
be restored again as they are: a window's snapshot is built of fresh containers at every
checkpoint and a window's restore copies what it takes, so neither changes it afterwards
(the tuples are shared, as they are between a window and its consumers: an operator must not
change a tuple it received, as in SPL, where a window holds const tuples). The core's
watermark and finals lists are fresh too.

An operator's own ``snapshot()`` gives no such promise: it may return a structure it goes on
changing, and its ``restore`` may keep and change what it is given. That part is copied when
the checkpoint commits and again for each reset; a part too large to copy cheaply (over
``budget`` containers) makes the checkpoint not reusable, and the region reads it back from
its store as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["reusable_state", "state_to_restore"]

DEFAULT_BUDGET = 20_000  # containers copied per operator state: a few milliseconds


class _OverBudget(Exception):
    pass


def _copy(value: Any, budget: list[int]) -> Any:
    t = type(value)
    if t is dict:
        budget[0] -= 1
        if budget[0] < 0:
            raise _OverBudget
        return {k: _copy(v, budget) for k, v in value.items()}
    if t is list or t is tuple:
        budget[0] -= 1
        if budget[0] < 0:
            raise _OverBudget
        items = [_copy(v, budget) for v in value]
        return items if t is list else tuple(items)
    if t is bytearray:
        return bytes(value)
    return value  # str, int, float, bool, None, bytes, Decimal: immutable


def reusable_state(state: Any, budget: int = DEFAULT_BUDGET) -> dict[str, Any] | None:
    """``state`` (an `OperatorCore.checkpoint_state` that was just committed) as it can be kept
    for later resets, with the operator's own part copied; None when that part is over
    ``budget`` containers or the state is not a core state."""
    if not isinstance(state, Mapping) or "operator" not in state:
        return None
    try:
        own = _copy(state["operator"], [budget])
    except (_OverBudget, RecursionError):
        return None
    kept = dict(state)
    kept["operator"] = own
    return kept


def state_to_restore(kept: Mapping[str, Any]) -> dict[str, Any]:
    """A kept state for one reset: the operator's part copied again (its restore may keep and
    change it), the rest shared."""
    state = dict(kept)
    state["operator"] = _copy(kept["operator"], [1 << 62])
    return state
