"""The split of a parallel region (`_parallel_split`): the channel of each tuple, in order, and
the marks of a marked batch in place in every channel."""

from __future__ import annotations

import operator
import random
from typing import Any

import pytest

from riverbed.core import MarkedBatch
from riverbed.graph import Punct, Watermark
from riverbed.runtime._parallel_split import SplitFailed, Splitter, join_marked
from riverbed.runtime._parallel_wire import channel_of

KEY = operator.itemgetter("k")


def _batch(n: int, seed: int = 7, keys: int = 50) -> list[Any]:
    rng = random.Random(seed)
    return [{"k": f"s{rng.randrange(keys)}", "i": i} for i in range(n)]


def _marked(n: int, seed: int = 7) -> MarkedBatch:
    rng = random.Random(seed)
    items: list[Any] = []
    tuples = window = 0
    wm = 0
    for t in _batch(n, seed):
        if rng.random() < 0.1:
            wm += 1
            items.append(Watermark(wm))
        if rng.random() < 0.03:
            items.append(Punct.WINDOW)
            window += 1
        items.append(t)
        tuples += 1
    items.append(Watermark(wm + 1))
    return MarkedBatch(items, tuples, window)


def _expected(batch: list[Any], width: int, channel: int) -> list[Any]:
    """What a channel must see: its tuples and every mark, in the batch's order."""
    return [x for x in batch if type(x) is not dict or channel_of(x["k"], width) == channel]


def _as_feed(items: list[Any]) -> list[Any]:
    """A channel's wire items as the worker feeds them."""
    out: list[Any] = []
    for item in items:
        if type(item) is tuple:
            out.extend(join_marked(list(item[0]), item[1]))
        elif type(item) is int:
            out.append(Watermark(item))
        elif type(item) is list:
            out.extend(item)
        else:
            out.append(item)
    return out


@pytest.mark.parametrize("width", [1, 2, 3, 5])
def test_each_tuple_goes_to_the_channel_of_its_key_in_order(width: int) -> None:
    batch = _batch(2000)
    parts = Splitter(width, KEY).split(batch)
    for c, (items, n) in enumerate(parts):
        assert _as_feed(items) == _expected(batch, width, c)
        assert n == len(_expected(batch, width, c))


@pytest.mark.parametrize("width", [1, 2, 3])
def test_a_marked_batch_gives_each_channel_its_tuples_and_every_mark_in_place(width: int) -> None:
    batch = _marked(3000)
    parts = Splitter(width, KEY).split(batch)
    for c, (items, n) in enumerate(parts):
        assert _as_feed(items) == _expected(list(batch), width, c)
        assert n == sum(1 for x in batch if type(x) is dict and channel_of(x["k"], width) == c)
        for item in items:
            if type(item) is tuple:  # the worker's batch counts its tuples and window marks
                joined = join_marked(list(item[0]), item[1])
                assert joined.tuples == n
                assert joined.window_marks == batch.window_marks
                assert joined.controls == [i for i, x in enumerate(joined)
                                           if x is Punct.WINDOW or type(x) is Watermark]


def test_a_channel_without_tuples_in_a_marked_batch_still_gets_every_mark() -> None:
    batch = MarkedBatch([Watermark(1), {"k": "a"}, Punct.WINDOW, {"k": "a"}, Watermark(2)], 2, 1)
    idle = 1 - channel_of("a", 2)
    items, n = Splitter(2, KEY).split(batch)[idle]
    assert n == 0 and items == [1, Punct.WINDOW, 2]


def test_round_robin_deals_tuples_in_turn_across_batches() -> None:
    splitter = Splitter(3, None)
    first = splitter.split(list(range(7)))
    second = splitter.split(MarkedBatch([7, Watermark(5), 8, 9], 3, 0))
    assert [_as_feed(items) for items, _ in first] == [[0, 3, 6], [1, 4], [2, 5]]
    assert [_as_feed(items) for items, _ in second] == [
        [Watermark(5), 9], [7, Watermark(5)], [Watermark(5), 8]]


def test_a_tuple_without_a_hashable_key_is_named() -> None:
    batch = [{"k": "a"}, {"k": ["not", "hashable"]}, {"k": "b"}]
    with pytest.raises(SplitFailed) as info:
        Splitter(2, KEY).split(batch)
    assert info.value.tuple == {"k": ["not", "hashable"]}
    assert isinstance(info.value.error, TypeError)


def test_a_workers_exits_pack_each_ports_run_of_tuples_and_marks_in_order() -> None:
    from riverbed.graph import CheckpointBarrier
    from riverbed.runtime._parallel_split import pack_exits

    barrier = CheckpointBarrier(3, "r")
    exits = [("a", 0, [1, 2]), ("a", 0, Punct.WINDOW), ("a", 0, [3]), ("a", 0, Watermark(9)),
             ("b", 0, [7]), ("a", 0, barrier), ("a", 0, [4]), ("a", 0, Punct.FINAL)]
    assert pack_exits(exits) == [
        ("a", 0, ([1, 2, 3], [(2, Punct.WINDOW), (3, 9)])), ("b", 0, [7]), ("a", 0, barrier),
        ("a", 0, [4]), ("a", 0, Punct.FINAL)]
