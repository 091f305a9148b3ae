"""`Operator.retire_checkpoint` hears of every checkpoint the store dropped, those an earlier
run of the job took included: a restart started counting afresh, so the checkpoints the store
held when the job stopped were dropped without a word, and state an operator kept outside the
store for them (SPL's StateHandler pattern) leaked (a review: 5, 6 and 7 never retired)."""

from __future__ import annotations

from typing import Any, ClassVar

from riverbed.checkpoint import MemoryStore
from riverbed.graph import Graph, Operator
from riverbed.runtime import Job, VirtualClock
from riverbed.testing import run_until_crash
from tests.test_parallel_checkpoints import SCHEMA, Output, Readings

S = 1_000_000_000


class Keeper(Operator):
    """Passes tuples on; remembers the checkpoints it was told were dropped."""

    retired: ClassVar[list[int]] = []  # over both runs (class-level: one list for every instance)

    def on_tuple(self, tup: Any, port: int) -> None:
        self.submit(tup)

    def retire_checkpoint(self, checkpoint_id: int) -> None:
        Keeper.retired.append(checkpoint_id)


def _graph() -> Graph:
    g = Graph("retire")
    src = g.source("readings", Readings(300), schema=SCHEMA)
    g.sink("out", Output(), [g.operator("keep", Keeper(), [src])])
    return g


def test_the_checkpoints_an_earlier_run_left_are_retired_when_the_store_drops_them() -> None:
    Keeper.retired = []
    store = MemoryStore(keep_last=3)
    assert not run_until_crash(Job(_graph(), clock=VirtualClock(), checkpoints=store,
                                   checkpoint_period=0.25), 2 * S)
    left = store.held_ids()
    assert len(left) == 3 and all(i not in Keeper.retired for i in left)
    job = Job(_graph(), clock=VirtualClock(), checkpoints=store, checkpoint_period=0.25)
    assert run_until_crash(job, None)
    taken = range(1, max(store.held_ids()) + 1)
    assert sorted(Keeper.retired) == [i for i in taken if i not in store.held_ids()]
    assert set(left) <= set(Keeper.retired)
