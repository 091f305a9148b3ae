"""The merge at a parallel region's end: SPL's rules for what its channels send out of it.

Tuples pass as they come (a key's tuples come from one channel, in order); a window mark leaves
once every channel has sent its next one; the watermark leaving is the minimum over the
channels; final leaves once every channel has sent it. A checkpoint barrier leaves once every
channel (that has not ended) sent it, and what a channel sends after its barrier waits until
then: it must not reach a checkpoint taken downstream of the region.

A channel's run of tuples with marks among them comes as one ``(tuples, marks)`` item
(`_parallel_split.pack_exits`). Its marks are counted in place, and the tuples before a mark
are cut from the run only when the mark leaves: an Aggregate sends a window mark after every
result, and most of them wait for another channel's, so a run is mostly copied in one piece.
"""

from __future__ import annotations

from operator import itemgetter
from typing import TYPE_CHECKING, Any, Protocol, cast

from ..graph import CheckpointBarrier, Punct, Watermark

if TYPE_CHECKING:
    from ..core import OutputPort
    from ._runner import OperatorRunner

__all__ = ["Merge"]

_WINDOW = Punct.WINDOW
_SECOND = itemgetter(1)  # a mark's item, from its (position, item)


class _Counted(Protocol):
    tuples_out: int


class Merge:
    """One output port of a member that leads out of the region."""

    __slots__ = ("barriers", "counted", "final_from", "finals", "held", "marks", "marks_sent", "out",
                 "runner", "width", "wm", "wm_sent")

    def __init__(self, runner: OperatorRunner, out: OutputPort, counted: list[_Counted]) -> None:
        width = len(counted)
        self.runner = runner
        self.out = out
        self.counted = counted  # each channel's metrics: tuples merged out of it
        self.width = width
        self.marks = [0] * width
        self.marks_sent = 0
        self.wm: list[int | None] = [None] * width
        self.wm_sent: int | None = None
        self.finals = 0
        self.final_from = [False] * width
        self.barriers: dict[int, tuple[CheckpointBarrier, set[int]]] = {}  # id -> the channels sent
        self.held: list[list[Any] | None] = [None] * width  # a channel's items after its barrier

    def take(self, index: int, item: Any) -> None:
        """One item channel ``index`` sent on this port."""
        held = self.held[index]
        if held is not None:
            held.append(item)
            return
        out = self.out
        kind = type(item)
        if kind is list:
            out.buf.extend(item)
            self.counted[index].tuples_out += len(item)
        elif kind is tuple:
            self._take_run(index, *item)
        elif item is _WINDOW:
            self.marks[index] += 1
            if min(self.marks) > self.marks_sent:
                self.marks_sent += 1
                out.mark(_WINDOW)
        elif kind is int:
            low = self._watermark(index, item)
            if low is not None:
                out.mark(Watermark(low))
        elif kind is CheckpointBarrier:
            self.barriers.setdefault(item.id, (item, set()))[1].add(index)
            self.held[index] = []  # until the others sent it
            self._release()
        elif item is Punct.FINAL:
            self.finals += 1
            self.final_from[index] = True
            self._release()  # the channel owes no barrier any more
            if self.finals == self.width:
                out.control(Punct.FINAL)

    def _take_run(self, index: int, tuples: list[Any], marks: list[tuple[int, Any]]) -> None:
        """A run of tuples with window marks and watermarks (ints) at their positions.

        Only this channel's mark count and watermark change during the run, so what of it can
        leave is known before it: its k-th window mark leaves only while this channel stays at
        or behind every other (``counts[index] + k <= min(others)``), and its watermarks only
        while they stay below the other channels' lowest (once this channel's watermark reached
        it, the region's minimum is another channel's). Past both, the rest of the run is only
        counted: one pass over its marks, no look at the other channels per mark. At width 2 and
        more most marks wait for another channel, so most of a run takes that pass.
        """
        out = self.out
        buf = out.buf
        counts = self.marks
        self.counted[index].tuples_out += len(tuples)
        if not marks:
            buf.extend(tuples)
            return
        wm = self.wm
        if self.width == 1:
            quota = len(marks)
            ceiling: int | None = None
            wm_open = True
        else:
            quota = min(c for i, c in enumerate(counts) if i != index) - counts[index]
            others = [v for i, v in enumerate(wm) if i != index]
            if None in others:
                ceiling, wm_open = None, False  # no minimum leaves before every channel sent one
            else:
                ceiling = min(v for v in others if v is not None)
                wm_open = wm[index] is None or wm[index] < ceiling  # type: ignore[operator]
        start = 0
        left = seen = 0  # window marks of the run that left, and that were walked
        emit, extend = out.mark, buf.extend
        rest = len(marks)
        for k, (before, mark) in enumerate(marks):
            if left >= quota and not wm_open:
                rest = k
                break
            if mark is _WINDOW:
                seen += 1
                if left >= quota:
                    continue  # another channel has not sent its mark yet
                left += 1
                if before > start:
                    extend(tuples[start:before])
                    start = before
                emit(_WINDOW)
            else:
                low = self._watermark(index, mark)
                if ceiling is not None:
                    wm_open = wm[index] < ceiling  # type: ignore[operator]
                if low is None:
                    continue
                if before > start:
                    extend(tuples[start:before])
                    start = before
                emit(Watermark(low))
        counts[index] += seen
        self.marks_sent += left
        i, n = rest, len(marks)
        if i < n:  # nothing more of the run leaves: count its marks, keep its last watermark
            kinds = list(map(_SECOND, marks[i:] if i else marks))
            windows = kinds.count(_WINDOW)
            counts[index] += windows
            if windows < len(kinds):
                # A port's watermarks rise (a core sends none at or below the last it sent), so
                # the run's last is its highest: found from the end, not by a walk of them all.
                top = next(m for m in reversed(kinds) if m is not _WINDOW)
                current = wm[index]
                if current is None or top > current:
                    wm[index] = top
        if start < len(tuples):
            buf.extend(tuples[start:] if start else tuples)

    def _watermark(self, index: int, value: int) -> int | None:
        """Channel ``index``'s watermark is ``value``: the new minimum to send, or None."""
        wm = self.wm
        current = wm[index]
        if current is not None and value <= current:
            return None  # no rise: the minimum cannot move
        wm[index] = value
        if None in wm:
            return None
        low = min(cast("list[int]", wm))  # every channel has one: all ints
        if self.wm_sent is None or low > self.wm_sent:
            self.wm_sent = low
            return low
        return None

    def _barriers_due(self) -> list[CheckpointBarrier]:
        """The barriers every channel sent (or ended without: it owes none), in order."""
        ended = self.final_from
        due = [b for b, seen in self.barriers.values()
               if all(c in seen or ended[c] for c in range(self.width))]
        for b in due:
            del self.barriers[b.id]
        return due

    def _release(self) -> None:
        """Barriers every channel sent go out; the items held behind them follow, in order."""
        due = self._barriers_due()
        if not due:
            return
        for barrier in due:
            self.out.control(barrier)
        for index, held in enumerate(self.held):
            if held is not None and not any(index in seen for _, seen in self.barriers.values()):
                self.held[index] = None
                for item in held:
                    self.take(index, item)
