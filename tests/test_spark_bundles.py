"""How a source's items become key-group bundles in the feeder, without Spark: marked batches
cut at their marks, tuples routed to their key's group (group 0 without a usable key)."""

from __future__ import annotations

from typing import Any

from riverbed.core import MarkedBatch, split_marked
from riverbed.graph import Punct, Watermark
from riverbed.spark_bridge._keyed import expand, group_of
from riverbed.spark_bridge._rows import KIND_BUNDLE, KIND_TUPLE
from riverbed.spark_bridge._source import TUPLES, exit_items, item_rows


class _Exits:
    """A host with given exits at a given time (what `exit_items` reads)."""

    def __init__(self, exits: list[Any], now: int = 7) -> None:
        self.exits = exits
        self.clock = self

        self._now = now

    def now(self) -> int:
        return self._now

    def take_exits(self) -> list[tuple[str, int, Any]]:
        out, self.exits = self.exits, []
        return out


def _marked(controls: bool) -> MarkedBatch:
    items = [{"n": 0}, {"n": 1}, Watermark(5), {"n": 2}, Punct.WINDOW, Watermark(6), {"n": 3}]
    return MarkedBatch(items, 4, 1, [2, 4, 5] if controls else None)


def _as_items(entries: list[Any]) -> list[tuple[int, int, int, Any]]:
    return list(exit_items(_Exits([("src", 0, e) for e in entries])))  # type: ignore[arg-type]


def test_a_marked_batch_leaves_as_runs_and_marks_whether_or_not_its_marks_positions_are_known() -> None:
    expected = _as_items(split_marked(_marked(True)))
    assert [k for k, *_ in expected] == [TUPLES, 3, TUPLES, 1, 3, TUPLES]
    assert _as_items([_marked(True)]) == expected
    assert _as_items([_marked(False)]) == expected
    assert all(type(e[3]) is list for e in expected if e[0] == TUPLES)  # plain lists, not batches


def _routed(tuples: list[Any], groups: int) -> list[list[Any]]:
    """Each group's tuples, in order, out of the bundles `item_rows` makes for ``tuples``."""
    items = iter([(TUPLES, 0, 0, tuples[:3]), (TUPLES, 0, 0, tuples[3:])])
    route = (lambda t: t["k"], groups, 4, list(range(groups)))
    per_group: list[list[Any]] = [[] for _ in range(groups)]
    for row in item_rows(items, 0, route=route):
        assert row[1] == KIND_BUNDLE
        for it in expand([row[:5]]):
            if it[1] == KIND_TUPLE:
                per_group[row[5]].append(it[4])
    return per_group


def test_tuples_go_to_their_keys_group_and_those_without_a_usable_key_to_group_0() -> None:
    tuples: list[Any] = [{"k": 5}, {"k": "east"}, {"v": 1}, {"k": 2}, {"k": [1]}, {"k": 3}, {"k": 8}]
    per_group = _routed(tuples, 3)
    want: list[list[Any]] = [[], [], []]
    for t in tuples:
        try:
            want[group_of(t["k"], 3)].append(t)
        except (KeyError, TypeError):
            want[0].append(t)
    assert per_group == want
    assert {"v": 1} in per_group[0] and {"k": [1]} in per_group[group_of([1], 3)]


def test_keys_python_finds_equal_go_to_one_key_group() -> None:
    # A keyed Join of an int64 key with a float64 one lost 9 of 20 pairs: 3 went to group
    # 3 % groups, 3.0 to its encoding's crc32, and the two never met (the runtime matches them).
    from decimal import Decimal
    from fractions import Fraction

    import numpy as np

    for groups in range(2, 8):
        for n in range(-5, 40):
            same = {group_of(n, groups), group_of(float(n), groups), group_of(Decimal(n), groups),
                    group_of(Fraction(n), groups), group_of(np.int64(n), groups),
                    group_of(np.float64(n), groups)}
            assert same == {n % groups}, (n, groups)
            assert group_of((n, "a"), groups) == group_of([float(n), "a"], groups)
        assert group_of(True, groups) == group_of(1, groups)
        assert group_of(-0.0, groups) == group_of(0.0, groups) == 0
        assert group_of(0.5, groups) == group_of(Fraction(1, 2), groups) == group_of(Decimal("0.5"), groups)
        assert group_of(float("nan"), groups) in range(groups)
