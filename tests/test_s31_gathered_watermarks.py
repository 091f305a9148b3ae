"""A sink that sees neither marks nor watermarks takes a marked batch's tuples in one call and
then only its highest watermark (nothing could hear the ones between): its watermark, after
each batch, is where hearing each in turn leaves it, with one input connection and with two."""

from __future__ import annotations

from typing import Any

import pytest

from riverbed.core import MarkedBatch, SyncGraph
from riverbed.graph import Graph, Operator, Watermark
from riverbed.testing import ListSource


class Blind(Operator):
    def __init__(self) -> None:
        self.seen: list[int] = []

    def on_tuples(self, tuples: Any, port: int) -> None:
        self.seen.extend(t["t"] for t in tuples)


class Hears(Blind):
    """The same sink hearing each watermark: the reference."""

    def on_watermark(self, value: int) -> None:
        pass


def _batch(times: list[int], marks: dict[int, int]) -> MarkedBatch:
    """Tuples at ``times`` with a watermark of value ``marks[i]`` after the i-th."""
    items: list[Any] = []
    controls: list[int] = []
    for i, t in enumerate(times):
        items.append({"t": t})
        if i in marks:
            controls.append(len(items))
            items.append(Watermark(marks[i]))
    return MarkedBatch(items, len(times), 0, controls)


@pytest.mark.parametrize("two", [False, True])
def test_a_blind_sink_ends_each_batch_at_the_watermark_each_in_turn_gives(two: bool) -> None:
    g = Graph("gathered-watermarks")
    sources = [g.source(f"s{i}", ListSource([]), event_time="t") for i in range(2 if two else 1)]
    g.sink("blind", Blind(), sources)
    g.sink("hears", Hears(), sources)
    host = SyncGraph(g.freeze(), ("blind", "hears"), now=0)
    batches = [
        ("s0", _batch([1, 2, 3, 4], {0: 1, 1: 2, 3: 4})),
        ("s0", _batch([5, 6], {0: 6, 1: 3})),  # the last lower than one before it: ignored
        ("s1", _batch([7, 8, 9], {0: 5, 2: 9})),
        ("s0", _batch([10], {0: 10})),
        ("s1", _batch([11, 12], {0: 8, 1: 12})),
    ]
    for source, batch in batches:
        if source == "s1" and not two:
            continue
        host.feed(source, 0, batch)  # whole: the sinks take it as one marked batch
        blind, hears = host.core("blind"), host.core("hears")
        assert blind.metrics.watermark == hears.metrics.watermark
        assert blind.metrics.watermark is not None
    assert blind.metrics.watermark == 10
    assert host.core("blind").op.seen == host.core("hears").op.seen  # type: ignore[attr-defined]
