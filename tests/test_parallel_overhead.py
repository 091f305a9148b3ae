"""The region machinery's cheaper paths keep its guarantees: what they skip is only work whose
outcome is already known."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from typing import Any

import pytest

from riverbed.graph import Graph, Operator, Schema, Source
from riverbed.runtime import JobError, run_graph
from riverbed.runtime._parallel import parent_fds
from riverbed.runtime._parallel_wire import channel_of

READING = Schema(k="rstring", v="int64", ts="int64")


@pytest.fixture(autouse=True)
def _no_leftovers() -> Iterator[None]:
    yield
    assert multiprocessing.active_children() == []
    assert parent_fds() == frozenset()


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
