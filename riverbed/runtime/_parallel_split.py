"""The split of a parallel region: which channel each tuple of a batch goes to, in C loops.

Why it is written this way: the job's process splits every tuple entering a region, and on a
machine with as many cores as channels its time per tuple caps the region's speed-up (the
workers wait for it). A Python loop over the batch (key, cache look-up, append to the
channel's list) costs ~250 ns a tuple; here the loops are the interpreter's own: the keys
(``map`` of the key getter), their channels (``map`` of a dict's ``__getitem__``, whose
``__missing__`` hashes a key seen for the first time) collected as one byte per tuple, and
each channel's tuples taken with ``itertools.compress`` over that byte string translated to
0/1 for the channel. About 60-90 ns a tuple at width 2.

A batch with window marks and watermarks (`MarkedBatch`) is split the same way; each channel
gets its tuples and, beside them, the marks with the number of its tuples before each
(``(tuples, marks)``), every mark going to every channel in place. The worker puts them back
into one marked batch, which its operator handles in one call (no entry per run of tuples).
Watermarks travel as ints (unpickling a `Watermark` costs ~8 us).

A worker's exits are packed the same way (`pack_exits`); an operator's marked batch handed
over whole packs straight from its mark positions, without an entry per result and mark first.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable
from typing import Any

from ..core import USER_FAILURES, MarkedBatch, control_positions
from ..graph import Punct, Watermark
from ._parallel_wire import channel_of

__all__ = ["SplitFailed", "Splitter", "join_marked", "pack_exits"]

_KEY_CACHE = 1 << 20  # keys whose channel is remembered (cleared when full)
_MARK = 255  # the byte of a mark: it goes to every channel
_WINDOW = Punct.WINDOW


class SplitFailed(Exception):
    """A tuple's key could not be taken or hashed: ``tuple`` and ``error`` say which and why."""

    def __init__(self, tup: Any, error: BaseException) -> None:
        super().__init__(f"{error!r}")
        self.tuple = tup
        self.error = error


class _Channels(dict[Hashable, int]):
    """Key -> channel; a key not seen yet is hashed (`channel_of`) once."""

    __slots__ = ("width",)

    def __init__(self, width: int) -> None:
        super().__init__()
        self.width = width

    def __missing__(self, key: Hashable) -> int:
        if len(self) >= _KEY_CACHE:
            self.clear()
        c = self[key] = channel_of(key, self.width)
        return c


class Splitter:
    """Splits the batches entering one parallel region over its ``width`` channels, by
    ``key`` (a tuple's partition key) or, with no key, in turn."""

    def __init__(self, width: int, key: Callable[[Any], Hashable] | None) -> None:
        if width > _MARK:
            raise ValueError(f"width={width}: at most {_MARK} channels")
        self.width = width
        self.key = key
        self.cache = _Channels(width)
        self._next = 0  # round-robin: the channel of the next tuple
        self._cycle = bytes(range(width)) * 64
        # Per channel: its byte -> 1, every other byte -> 0 (marks: 0, they travel apart).
        self._only = [bytes(1 if b == c else 0 for b in range(256)) for c in range(width)]

    def reset(self) -> None:
        self._next = 0

    def channels(self, run: list[Any]) -> bytes:
        """One byte per tuple of ``run`` (no marks): its channel (`SplitFailed` if a key is
        missing or unhashable). A replicated source's batch is checked with it."""
        return self._bytes(run)

    def _bytes(self, run: list[Any]) -> bytes:
        """One byte per tuple: its channel."""
        width = self.width
        key = self.key
        if width == 1:
            if key is not None:
                # Every key is taken at width 1 too (~30 ns a tuple), though one channel needs
                # none: a tuple without one fails there as at any other width, not only once
                # the region is widened (`ParallelHost._split_failed`).
                try:
                    set(map(key, run))
                except USER_FAILURES:
                    self._failed(run)
                    raise
            return bytes(len(run))
        if key is None:
            n, first = len(run), self._next
            self._next = (first + n) % width
            cycle = self._cycle
            while len(cycle) < first + n:
                cycle += cycle
            self._cycle = cycle
            return cycle[first:first + n]
        try:
            return bytes(map(self.cache.__getitem__, map(key, run)))
        except USER_FAILURES:  # (a key function's sys.exit() too)
            self._failed(run)
            raise

    def _failed(self, run: list[Any]) -> None:
        """A key of ``run`` could not be taken or hashed: `SplitFailed` naming the first
        such tuple, and why."""
        key = self.key
        assert key is not None
        for t in run:
            try:
                hash(key(t))
            except USER_FAILURES as exc:
                raise SplitFailed(t, exc) from None

    def split(self, batch: list[Any]) -> list[tuple[list[Any], int]]:
        """Each channel's wire items for ``batch`` (a list, or a `MarkedBatch`) and how many
        tuples they hold (a channel with nothing to do gets no items)."""
        if type(batch) is MarkedBatch:
            return self._split_marked(batch)
        chans = self._bytes(batch)
        out: list[tuple[list[Any], int]] = []
        n = len(batch)
        for c in range(self.width):
            k = chans.count(c)
            if k == 0:
                out.append(([], 0))
            elif k == n:
                out.append(([batch], n))
            else:
                out.append(([list(itertools.compress(batch, chans.translate(self._only[c])))], k))
        return out

    def _split_marked(self, batch: MarkedBatch) -> list[tuple[list[Any], int]]:
        marks_n = len(batch) - batch.tuples
        types = list(map(type, batch))
        positions: list[int] = []
        for kind, count in ((Punct, batch.window_marks), (Watermark, marks_n - batch.window_marks)):
            i = -1
            for _ in range(count):
                i = types.index(kind, i + 1)
                positions.append(i)
        positions.sort()
        pieces: list[bytes] = []
        start = 0
        for i in positions:
            if i > start:
                pieces.append(self._bytes(batch[start:i]))
            pieces.append(b"\xff")
            start = i + 1
        if start < len(batch):
            pieces.append(self._bytes(batch[start:]))
        chans = b"".join(pieces)
        marks = [(i, batch[i]) for i in positions]
        out: list[tuple[list[Any], int]] = []
        for c in range(self.width):
            k = chans.count(c)
            wire = [m.value if type(m) is Watermark else m for _, m in marks]
            if k == 0:  # only the marks: each alone, as before
                out.append((wire, 0))
                continue
            tuples = list(itertools.compress(batch, chans.translate(self._only[c])))
            placed: list[tuple[int, Any]] = []
            before = prev = 0
            for (i, _), m in zip(marks, wire, strict=True):
                before += chans.count(c, prev, i)
                prev = i
                placed.append((before, m))
            out.append(([(tuples, placed)], k))
        return out


def join_marked(tuples: list[Any], marks: list[tuple[int, Any]]) -> MarkedBatch:
    """The worker's side of a marked part: its tuples with the marks back in place (``marks``:
    ``(tuples before it, mark)``, a watermark as an int)."""
    window = 0
    controls = []
    for j, (before, m) in enumerate(marks):
        if type(m) is not int:
            window += 1
        tuples.insert(before + j, Watermark(m) if type(m) is int else m)
        controls.append(before + j)
    return MarkedBatch(tuples, len(tuples) - len(marks), window, controls)


def pack_exits(exits: list[tuple[str, int, Any]]) -> list[tuple[str, int, Any]]:
    """A worker's exits with each port's consecutive batches, window marks and watermarks
    packed as one ``(tuples, marks)`` item (a lone batch stays a list); final punctuation and
    barriers stay apart, in place."""
    out: list[tuple[str, int, Any]] = []
    where: tuple[str, int] | None = None
    tuples: list[Any] = []
    marks: list[tuple[int, Any]] = []

    def flush() -> None:
        if where is not None and (tuples or marks):
            out.append((where[0], where[1], (tuples, marks) if marks else tuples))

    for op, port, item in exits:
        kind = type(item)
        if kind is MarkedBatch:  # whole, as a host may hand it over: its marks by position
            if where != (op, port):
                flush()
                where, tuples, marks = (op, port), [], []
            _unmark(item, tuples, marks)
            continue
        if kind is list or item is Punct.WINDOW or kind is Watermark:
            if where != (op, port):
                flush()
                where, tuples, marks = (op, port), [], []
            if kind is list:
                tuples.extend(item)
            else:
                marks.append((len(tuples), item.value if kind is Watermark else item))
            continue
        flush()
        where, tuples, marks = None, [], []
        out.append((op, port, item))
    flush()
    return out


def _unmark(batch: MarkedBatch, tuples: list[Any], marks: list[tuple[int, Any]]) -> None:
    """Append ``batch``'s tuples to ``tuples`` and its marks to ``marks`` (``(tuples before it,
    mark)``, a watermark as an int). An Aggregate marks after every result: with marks that
    dense, one filtering pass beats a slice between every two."""
    controls = batch.controls
    if controls is None:
        controls = control_positions(batch)
    base = len(tuples)
    marks += [(base + i - j, m if (m := batch[i]) is _WINDOW else m.value)
              for j, i in enumerate(controls)]
    if len(controls) * 4 >= len(batch):
        tuples += [x for x in batch if x is not _WINDOW and type(x) is not Watermark]
        return
    start = 0
    for i in controls:
        if i > start:
            tuples += batch[start:i]
        start = i + 1
    if start < len(batch):
        tuples += batch[start:]
