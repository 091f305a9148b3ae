"""The region machinery's cheaper paths keep its guarantees: what they skip is only work whose
outcome is already known."""

from __future__ import annotations

from typing import Any

import pytest

from riverbed.graph import Graph, Operator, Schema, Source
from riverbed.runtime import JobError, run_graph
from riverbed.runtime._parallel_wire import channel_of

READING = Schema(k="rstring", v="int64", ts="int64")


pytestmark = pytest.mark.usefixtures("no_worker_leftovers")


class LateStranger(Source):
    """Its channel's keys for three batches (every one seen by the key check by then), then
    one reading with another channel's key among them."""

    def __init__(self, batch: int) -> None:
        self.batch = batch

    def generate(self) -> Any:
        me, width = self.context.channel, self.context.width  # type: ignore[attr-defined]
        own = [k for k in (f"s{i}" for i in range(40)) if channel_of(k, width) == me][:5]
        other = next(k for k in (f"s{i}" for i in range(40)) if channel_of(k, width) != me)
        for i in range(3 * self.batch):
            yield {"k": own[i % len(own)], "v": i, "ts": i}
        for i in range(self.batch):
            yield {"k": other if i == self.batch // 2 else own[i % len(own)], "v": i, "ts": i}


class Drop(Operator):
    def on_tuple(self, tup: Any, port: int) -> None:
        pass


def test_a_foreign_key_after_batches_of_known_keys_still_stops_the_job() -> None:
    """The key check's fast path (every key of the batch seen before) must not let a batch
    with one new key of another channel through."""
    g = Graph("stranger")
    with g.parallel(2, partition_by="k"):
        src = g.source("src", LateStranger(50), schema=READING)
        out = g.operator("pass", Drop(), [src], outputs=[])
    del out
    with pytest.raises(JobError) as info:
        run_graph(g, batch_size=50)
    text = str(info.value)
    assert "'src'" in text and "ReplicaKeyError" in text and "belongs to channel" in text


def _marked(items: list[Any], known: bool = True) -> Any:
    from riverbed.core import MarkedBatch
    from riverbed.graph import Punct, Watermark

    controls = [i for i, x in enumerate(items) if x is Punct.WINDOW or type(x) is Watermark]
    return MarkedBatch(items, len(items) - len(controls), None, controls if known else None)


@pytest.mark.parametrize(("dense", "known"), [(True, True), (False, True), (True, False)])
def test_a_marked_batch_handed_over_whole_packs_as_its_plain_entries_do(dense: bool,
                                                                        known: bool) -> None:
    """A worker's exits may hold an operator's marked batch whole (no entry per result and
    mark): it packs to the very ``(tuples, marks)`` items its plain entries pack to, next to
    the entries around it, with watermarks as ints."""
    from riverbed.core import split_marked
    from riverbed.graph import Punct, Watermark
    from riverbed.runtime._parallel_split import pack_exits

    w = Punct.WINDOW
    if dense:  # an Aggregate's: a mark after every result
        items = [{"r": 0}, w, {"r": 1}, w, Watermark(5), {"r": 2}, w, Watermark(9)]
    else:
        items = [{"r": i} for i in range(12)] + [w] + [{"r": 12}, Watermark(7), {"r": 13}]
    first = _marked(items, known)
    second = _marked([{"r": 99}, w])
    whole = [("agg", 0, [{"r": -1}]), ("agg", 0, first), ("agg", 0, second),
             ("agg", 1, _marked([w, {"x": 1}])), ("agg", 0, Punct.FINAL)]
    plain = [("agg", 0, [{"r": -1}])] + [("agg", 0, p) for p in split_marked(first)] \
        + [("agg", 0, p) for p in split_marked(second)] \
        + [("agg", 1, p) for p in split_marked(_marked([w, {"x": 1}]))] + [("agg", 0, Punct.FINAL)]
    assert pack_exits(whole) == pack_exits(plain)
    tuples, marks = pack_exits(whole)[0][2]
    assert all(type(m) is int or m is w for _, m in marks)
    assert len(tuples) == 1 + first.tuples + 1
