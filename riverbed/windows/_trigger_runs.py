"""A full sliding count window's triggers, a batch at a time, for the one listener that can.

A sliding window evicting by ``count(N)`` and triggering on every tuple (``count(1)``) raises,
once full, one eviction and one TRIGGER per tuple: its listener does the same small step
for each tuple of a batch (one value out, one in, one result). A listener that mirrors the
window (Aggregate) can do all of a batch's steps together, in C passes, for a fraction of
the per-trigger cost; what it cannot do that way (a value that is not a plain float, a row
that needs user code) it refuses, and the window raises the events as always.

The contract (`StreamWindow.register_trigger_run`): ``run(key, batch, tuples, size)`` is
called before the window changes, with the partition's key, the batch, the partition's
tuples (the window before the batch, not to be changed) and the eviction count. It returns
True after doing, for each tuple of the batch in order, exactly what its TRIGGER listener
would have done once that tuple was evicted for and inserted; the window then evicts and
inserts the batch without events. It returns False having done nothing, and the window
inserts the batch tuple by tuple with its events.

The window offers the run only where nothing could tell the difference: an unpartitioned
window without partition eviction, already full (so no INITIAL_FULL can fall inside the
batch: every tuple evicts one), where nothing listens to the events an insertion raises
(INSERTION, EVICTION, TRIGGER) but the run's own TRIGGER handler, with a batch of more than
one tuple. No timer
fires inside a batch (the clock only moves between batches), so nothing else runs between
the batch's triggers either.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Sequence
from itertools import repeat, starmap
from typing import Any

from ._events import EventType
from ._listeners import Handler
from ._partition import Partition

__all__ = ["TriggerRun", "drop_front", "run_inserter"]

TriggerRun = Callable[[Hashable, Sequence[Any], Any, int], bool]


def drop_front(items: deque[Any], k: int) -> None:
    """Remove the ``k`` oldest items of a deque in one C loop."""
    if k >= len(items):
        items.clear()
    else:
        deque(starmap(items.popleft, repeat((), k)), 0)


def run_inserter(insert_tuples: Callable[[Sequence[Any]], None], *, parts: dict[Hashable, Partition],
                 handlers: dict[EventType, list[Handler]], run: TriggerRun, trigger: Handler,
                 size: int, live: list[bool]) -> Callable[[Sequence[Any]], None]:
    """``insert_tuples`` (the window's compiled batch path), offering each batch to ``run``
    first while the window is as the module says."""
    triggered_to = handlers[EventType.TRIGGER]
    # What else an insertion here raises: nothing may listen to it (INITIAL_FULL is past).
    inserted, evicted_to = handlers[EventType.INSERTION], handlers[EventType.EVICTION]

    def insert_run(batch: Sequence[Any]) -> None:
        if live[0] and len(batch) > 1:  # (a retired path hands over through insert_tuples)
            part = parts.get(None)
            if (part is not None and part.seen_full and len(part.tuples) == size
                    and len(triggered_to) == 1 and triggered_to[0] == trigger
                    and not inserted and not evicted_to and run(None, batch, part.tuples, size)):
                tuples = part.tuples
                tuples.extend(batch)
                drop_front(tuples, len(batch))
                part.evicted += len(batch)
                return
        insert_tuples(batch)

    return insert_run
