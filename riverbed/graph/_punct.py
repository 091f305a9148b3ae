"""Control items that flow in order with tuples: punctuation and watermarks.

They are plain values, not tied to any executor: the asyncio runtime moves
them through its queues in the same batches as tuples, and the Spark bridge
turns them into marker rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = ["CheckpointBarrier", "Punct", "Watermark"]


class Punct(Enum):
    """SPL punctuation: a window mark ends a group of tuples; a final mark ends the stream."""

    WINDOW = "window"
    FINAL = "final"


@dataclass(frozen=True, slots=True)
class Watermark:
    """Event time has reached ``value`` (integer ticks, ns by default) on this connection."""

    value: int


@dataclass(frozen=True, slots=True)
class CheckpointBarrier:
    """Checkpoint ``id`` is being taken: everything before this marker on a connection belongs
    to it, everything after to the next (aligned checkpoints, Chandy-Lamport style). ``region``
    names the consistent region the checkpoint is of ("" for the one over a whole job);
    operators outside it drop the barrier."""

    id: int
    region: str = ""
