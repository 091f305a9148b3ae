"""How often the interpreter looks for reference cycles while a job runs.

CPython starts a young collection every 700 net allocations of container objects. A job
allocates a tuple (a dict) or more per input tuple, so with the default it collects every few
hundred tuples, and each collection walks every list still young: the batches in flight, a
thousand tuples each, read once more from memory, then again in the next generation's
collection when they survive. A stateless chain (Filter, Functor, Functor) spent 50 ms of
264 in collections, the hand-written loop doing the same 0.5 ms. Between two collections most
batches are delivered and freed, so with a larger threshold most are never walked at all.

The setting is the interpreter's, so a job raises it only while it runs and puts back what it
found when the last running job of the process ends. Worker processes forked by a job inherit
it. Nothing here changes what is collected: cycles are found as before, only later (at most
``threshold`` container allocations later).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["JOB_GC_THRESHOLD", "check_threshold", "collection_threshold"]

JOB_GC_THRESHOLD = 20_000  # the chain: 10,000-20,000 fastest; 700 and 2,000 ~10 % slower


class _Process:
    """What the jobs running in this process share: how many run with a threshold, what the
    first of them found and what it set."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.found: tuple[int, int, int] | None = None
        self.set: tuple[int, int, int] | None = None


_PROCESS = _Process()


def check_threshold(threshold: object) -> int | None:
    """``threshold`` if it is None or an int >= 1; a ValueError saying what is wrong otherwise."""
    if threshold is None or (type(threshold) is int and threshold >= 1):
        return threshold
    raise ValueError(f"gc_threshold={threshold!r}: expected an int >= 1 (container allocations "
                     "between two young collections), or None to leave the interpreter's as it is")


@contextmanager
def collection_threshold(threshold: int | None) -> Iterator[None]:
    """Young collections at most every ``threshold`` allocations while the block runs (never
    more often than the interpreter was set to); None leaves the interpreter's setting alone.

    The thresholds found are put back when the last job running with one ends, unless the
    program changed them meanwhile: then its own setting stays."""
    if threshold is None:
        yield
        return
    shared = _PROCESS
    with shared.lock:
        if shared.running == 0:
            shared.found = gc.get_threshold()
            first, second, third = shared.found
            if first and first < threshold:  # 0: collections are off; they stay off
                gc.set_threshold(threshold, second, third)
            shared.set = gc.get_threshold()
        shared.running += 1
    try:
        yield
    finally:
        with shared.lock:
            shared.running -= 1
            if shared.running == 0:
                if shared.found is not None and gc.get_threshold() == shared.set:
                    gc.set_threshold(*shared.found)
                shared.found = shared.set = None
