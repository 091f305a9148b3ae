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

__all__ = ["detached_state", "reusable_state", "state_to_restore"]

DEFAULT_BUDGET = 20_000  # containers copied per operator state: a few milliseconds


class _OverBudget(Exception):
    pass


def _spend(budget: list[int]) -> None:
    """One container more copied: `_OverBudget` once the budget is used up."""
    budget[0] -= 1
    if budget[0] < 0:
        raise _OverBudget


def _copy(value: Any, budget: list[int]) -> Any:
    """``value`` as the checkpoint store gives it back (`riverbed.checkpoint._codec`): a dict or
    list subclass as a plain dict or list, a tuple as a plain tuple. A reset
    then restores what a restart does. Copying only exact dicts and lists kept a
    ``Counter``, a ``defaultdict`` or an ``OrderedDict`` by reference: the operator went on
    changing it after the commit, and a reset restored the changed one (tuples between the
    checkpoint and the failure counted twice, exit 0); and tuples came back as tuples from a
    reset but as lists from a restart, so an operator could pass its reset tests and fail
    after a real restart."""
    if isinstance(value, dict):
        _spend(budget)
        return {k: _copy(v, budget) for k, v in value.items()}
    if isinstance(value, list):
        _spend(budget)
        return [_copy(v, budget) for v in value]
    if isinstance(value, tuple):
        _spend(budget)
        return tuple([_copy(v, budget) for v in value])
    if isinstance(value, set | frozenset):
        _spend(budget)
        return set(value)  # (its items are hashable: immutable)
    if isinstance(value, bytearray):
        return bytes(value)
    return value  # str, int, float, bool, None, bytes, Decimal: immutable


def detached_state(state: Any) -> Any:
    """``state`` (an `OperatorCore.checkpoint_state` taken at a barrier) with the operator's own
    part copied, so that what the operator does after its barrier stays out of the checkpoint.
    The region holds a state until every member reported and the store encodes it: an operator
    whose ``snapshot()`` returns a structure it keeps changing (its live dict) put the tuples
    after the barrier into the checkpoint, and a restart or a reset counted them twice
    (running totals 3,182,498 against 3,176,383, exit 0). The windows' part is built fresh."""
    if not isinstance(state, Mapping) or "operator" not in state:
        return state
    own = state["operator"]
    if own is None or isinstance(own, str | int | float | bool | bytes):
        return state
    unbounded = 1 << 62
    left = [unbounded]  # one pass: what it spent says whether it fits a kept state's budget
    try:
        copied = _copy(own, left)
    except RecursionError:
        return state  # nested deeper than Python recurses: as it was (the store encodes it)
    detached = _Detached(state)
    detached["operator"] = copied
    detached.fits = unbounded - left[0] <= DEFAULT_BUDGET
    return detached


class _Detached(dict[str, Any]):
    """A `detached_state`: its operator part is a copy of its own already, and ``fits`` says
    whether that copy is within the budget a kept state may have (`reusable_state`)."""

    fits = True


def reusable_state(state: Any, budget: int = DEFAULT_BUDGET) -> dict[str, Any] | None:
    """``state`` (an `OperatorCore.checkpoint_state` that was just committed) as it can be kept
    for later resets, with the operator's own part copied; None when that part is over
    ``budget`` containers or the state is not a core state. A `detached_state` is kept as it
    is (its part was copied when it was reported: a second copy cost as much again)."""
    if type(state) is _Detached:
        return state if state.fits and budget >= DEFAULT_BUDGET else None
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
