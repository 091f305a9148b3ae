"""Checkpoints of an operator that closes a feedback loop: what is in flight on the loop.

An aligned checkpoint snapshots each operator once the region's barrier arrived on all its
connections, then forwards the barrier. A feedback connection cannot take part in that
alignment: its barrier only comes back after the operator forwarded it, round the loop, so
waiting for it would never end. Treating the returning barrier as the start of a new alignment
(as the core once did) held every looped tuple from then on and failed the next checkpoint.

So the operator's state is taken when its other connections are aligned, and what arrives on
a feedback connection from then until the barrier comes back round is in flight on the loop at
that checkpoint: it was sent after the upstream operators' snapshots and handled after this
one's, so no state holds it. It is logged (Chandy and Lamport's channel state, what Flink's
iteration head keeps), still handled as usual, and stored with the operator's state; the
operator's report waits until every feedback connection delivered the barrier (or ended). A
restore hands the logged items to the operator again, first, as if they had just arrived.

The log holds tuples and marks as plain data (`encode`): a checkpoint store keeps it like any
operator state.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from ..graph import CheckpointBarrier, Punct, Watermark

__all__ = ["LoopLog", "decode", "encode"]


class LoopLog:
    """One checkpoint's state of an operator, waiting for its barrier to come round its loops."""

    __slots__ = ("checkpoint_id", "logged", "state", "waiting")

    def __init__(self, checkpoint_id: int, state: dict[str, Any], conns: Iterable[int]) -> None:
        self.checkpoint_id = checkpoint_id
        self.state = state
        self.waiting = set(conns)  # feedback connections whose barrier has not come back
        self.logged: dict[int, list[Any]] = {c: [] for c in self.waiting}

    def record(self, conn: int, item: Any) -> None:
        """``item`` arrived on feedback connection ``conn`` before the barrier came back."""
        if type(item) is CheckpointBarrier or item is Punct.FINAL:
            return
        self.logged[conn].extend(encode(item))

    def close(self, conn: int) -> bool:
        """The barrier came back on ``conn`` (or it ended); True once none is awaited."""
        self.waiting.discard(conn)
        return not self.waiting

    def finish(self) -> dict[str, Any]:
        """The operator's state with what was in flight on each loop."""
        logged = [[conn, items] for conn, items in self.logged.items() if items]
        return {**self.state, "loop": logged} if logged else self.state


def encode(item: Any) -> list[Any]:
    """An item of a connection as plain entries: ``["t", tuple]``, ``["w"]`` (window mark),
    ``["m", value]`` (watermark)."""
    if item is Punct.WINDOW:
        return [["w"]]
    if type(item) is Watermark:
        return [["m", item.value]]
    if isinstance(item, list):  # a batch, marked or not
        return [["w"] if x is Punct.WINDOW else ["m", x.value] if type(x) is Watermark else ["t", x]
                for x in item]
    raise TypeError(f"a feedback connection delivered {item!r}: expected a batch, a mark or a "
                    "watermark")


def decode(entries: Iterable[Any]) -> Iterator[Any]:
    """`encode`'s entries as items to handle: runs of tuples as batches, marks alone."""
    run: list[Any] = []
    for entry in entries:
        kind = entry[0]
        if kind == "t":
            run.append(entry[1])
            continue
        if run:
            yield run
            run = []
        if kind == "w":
            yield Punct.WINDOW
        elif kind == "m":
            yield Watermark(int(entry[1]))
        else:
            raise ValueError(f"a logged loop item of unknown kind {kind!r}")
    if run:
        yield run
