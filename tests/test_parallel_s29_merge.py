"""The merge's run path (`Merge._take_run`) against SPL's rules applied one item at a time.

A channel's exits come as runs ``(tuples, marks)``; the merge decides, before walking a run,
how many of its window marks and watermarks can leave (only this channel's count and watermark
change during it) and only counts the rest. Whatever it skips, what leaves the region must be
exactly what the item-by-item rules give: the same tuples, window marks and watermarks in the
same places, the same counts afterwards.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, cast

import pytest

from riverbed.graph import Punct, Watermark
from riverbed.runtime._parallel_merge import Merge

WINDOW = Punct.WINDOW


class _Out:
    """What the merge writes into: the port's buffer, with marks in place and controls apart."""

    def __init__(self) -> None:
        self.buf: list[Any] = []

    def mark(self, item: Any) -> None:
        self.buf.append(item.value if type(item) is Watermark else item)

    def control(self, item: Any) -> None:
        self.buf.append(("control", item))


@dataclass
class _Counted:
    tuples_out: int = 0


def _merge(width: int) -> tuple[Merge, _Out, list[_Counted]]:
    out = _Out()
    counted = [_Counted() for _ in range(width)]
    return Merge(cast(Any, None), cast(Any, out), cast(Any, counted)), out, counted


def _runs(rng: random.Random, width: int, n: int) -> list[tuple[int, list[Any], list[tuple[int, Any]]]]:
    """``n`` runs of random channels: tuples, window marks and rising watermarks per channel."""
    wm = [rng.randrange(5) for _ in range(width)]
    seq = [0] * width
    runs = []
    for _ in range(n):
        ch = rng.randrange(width)
        tuples: list[Any] = []
        marks: list[tuple[int, Any]] = []
        for _ in range(rng.randrange(12)):
            r = rng.random()
            if r < 0.5:
                tuples.append((ch, seq[ch]))
                seq[ch] += 1
            elif r < 0.8:
                marks.append((len(tuples), WINDOW))
            else:
                wm[ch] += rng.randrange(1, 4)
                marks.append((len(tuples), wm[ch]))
        runs.append((ch, tuples, marks))
    return runs


def _one_by_one(ch: int, tuples: list[Any], marks: list[tuple[int, Any]]) -> list[Any]:
    """The run as lone items, as a worker sent them before runs were packed."""
    items: list[Any] = []
    start = 0
    for before, mark in marks:
        if before > start:
            items.append(tuples[start:before])
            start = before
        items.append(mark)
    if start < len(tuples):
        items.append(tuples[start:])
    return items


@pytest.mark.parametrize("width", [1, 2, 3, 4])
@pytest.mark.parametrize("seed", range(25))
def test_a_run_leaves_the_region_exactly_as_its_items_one_by_one(width: int, seed: int) -> None:
    rng = random.Random(seed * 10 + width)
    runs = _runs(rng, width, 60)
    fast, fast_out, fast_counted = _merge(width)
    ref, ref_out, ref_counted = _merge(width)
    for ch, tuples, marks in runs:
        fast.take(ch, (list(tuples), list(marks)) if marks else list(tuples))
        for item in _one_by_one(ch, tuples, marks):
            ref.take(ch, item)
        assert fast_out.buf == ref_out.buf
    for ch in range(width):
        fast.take(ch, Punct.FINAL)
        ref.take(ch, Punct.FINAL)
    assert fast_out.buf == ref_out.buf
    assert fast.marks == ref.marks and fast.marks_sent == ref.marks_sent
    assert fast.wm == ref.wm and fast.wm_sent == ref.wm_sent
    assert [c.tuples_out for c in fast_counted] == [c.tuples_out for c in ref_counted]


def test_a_channel_ahead_sends_nothing_of_its_run_until_the_other_catches_up() -> None:
    merge, out, _ = _merge(2)
    merge.take(0, (["a", "b", "c"], [(1, WINDOW), (2, 10), (3, WINDOW), (3, 20)]))
    assert out.buf == ["a", "b", "c"]  # channel 1 sent no mark and no watermark yet
    assert merge.marks == [2, 0] and merge.wm == [20, None]
    merge.take(1, (["x"], [(0, 15), (1, WINDOW), (1, WINDOW), (1, WINDOW), (1, 30)]))
    # Its first watermark makes the minimum 15; its two first marks meet channel 0's; the third
    # waits; at 30 the minimum is channel 0's 20.
    assert out.buf == ["a", "b", "c", 15, "x", WINDOW, WINDOW, 20]
    assert merge.marks == [2, 3] and merge.marks_sent == 2 and merge.wm_sent == 20


def test_a_run_of_a_channel_ahead_is_counted_not_walked_mark_by_mark() -> None:
    """The merge's work for a run that cannot move the region's minimum: its watermarks are not
    looked at one by one against the other channels (the cost the run path removes)."""
    looked: list[int] = []

    class Counting(Merge):
        __slots__ = ()

        def _watermark(self, index: int, value: int) -> int | None:
            looked.append(value)
            return super()._watermark(index, value)

    out = _Out()
    merge = Counting(cast(Any, None), cast(Any, out), cast(Any, [_Counted(), _Counted()]))
    merge.take(1, 5)  # channel 1: watermark 5, no window mark yet
    looked.clear()
    marks: list[tuple[int, Any]] = []
    for i in range(100):
        marks += [(i + 1, WINDOW), (i + 1, 10 + i)]
    merge.take(0, ([f"t{i}" for i in range(100)], marks))
    assert looked == [10]  # the first takes the minimum to channel 1's 5; the rest cannot move it
    assert out.buf == ["t0", 5] + [f"t{i}" for i in range(1, 100)]
    assert merge.marks == [100, 0] and merge.wm == [109, 5] and merge.wm_sent == 5
