"""A FileSink inside a parallel region: each channel writes files of its own (``{channel}``).

Found by a review: every channel's copy of the sink opened the one path. Plain, each truncated
the file the other wrote (10,399 of 20,000 rows, some lines two channels' records run
together); transactional, each removed the other's pending files when it opened its own, and
the job still ended with exit 0 and "exactly-once". SPL users put ``getChannel()`` in the file
name; riverbed had no way to. Now ``{channel}`` names each channel's file, and a sink in a
region of width 2 or more without it is refused before the job starts (`check_parallel`).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from riverbed.checkpoint import MemoryStore
from riverbed.graph import Graph, GraphValidationError, Operator, Schema, Source
from riverbed.operators import FileSink, Functor
from riverbed.runtime import Job
from riverbed.runtime._parallel_wire import channel_of

pytestmark = pytest.mark.usefixtures("no_worker_leftovers")

ROW = Schema(k="rstring", i="int64")
N = 20_000


class Numbers(Source):
    replayable = True

    def __init__(self, commits: bool = False) -> None:
        self.pos = 0
        self.commits = commits

    async def run(self) -> None:
        ctx = self.context
        while self.pos < N:
            self.pos += 1
            self.submit({"k": f"k{self.pos % 50}", "i": self.pos})
            if self.pos % 4000 == 0 and self.commits:
                await ctx.make_consistent()  # a commit with the channels' files part written

    def snapshot(self) -> Any:
        return self.pos

    def restore(self, state: Any) -> None:
        self.pos = state


def build(path: str, *, width: int = 2, transactional: bool = False) -> Graph:
    g = Graph("sink-in-region")
    nums = g.source("nums", Numbers(transactional), schema=ROW)
    with g.parallel(width, partition_by="k"):
        doubled = g.operator("double", Functor(output={"i": lambda t: t["i"] * 2}), [nums])
        g.sink("out", FileSink(path, format="csv", transactional=transactional), [doubled])
    return g


def expected_rows() -> set[bytes]:
    return {f'"k{i % 50}",{2 * i}'.encode() for i in range(1, N + 1)}


def test_a_file_sink_whose_channels_would_share_one_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(GraphValidationError) as info:
        build(str(tmp_path / "out.csv")).freeze()
    [error] = info.value.errors
    assert (error.operator, error.rule) == ("out", "parallel")
    assert "{channel}" in str(error) and "parallel0" in str(error) and "2 channels" in str(error)
    g = Graph("moved")
    nums = g.source("nums", Numbers(), schema=ROW)
    with g.parallel(2, partition_by="k"):
        g.sink("out", FileSink(str(tmp_path / "ch{channel}" / "out.csv"),
                               move_file_to_directory=str(tmp_path)), [nums])
    with pytest.raises(GraphValidationError, match="each move would replace the last"):
        g.freeze()  # (both channels moved their out.csv into one directory: rows lost)
    # width 1 and a process group run one copy: one file is right
    build(str(tmp_path / "out.csv"), width=1).freeze()
    g = Graph("grouped")
    nums = g.source("nums", Numbers(), schema=ROW)
    with g.process("io"):
        g.sink("out", FileSink(str(tmp_path / "out.csv")), [nums])
    g.freeze()


@pytest.mark.parametrize("transactional", [False, True])
def test_each_channel_writes_its_own_file_and_together_they_hold_every_row(
        tmp_path: Path, transactional: bool) -> None:
    path = str(tmp_path / "out{channel}.csv")
    store = MemoryStore(keep_last=1000) if transactional else None
    job = Job(build(path, transactional=transactional), checkpoints=store)
    asyncio.run(job.run())
    files = [(tmp_path / f"out{c}.csv").read_bytes().splitlines() for c in (0, 1)]
    assert all(files), "both channels wrote rows"
    assert sorted(files[0] + files[1]) == sorted(expected_rows())
    for c, rows in enumerate(files):  # each key's rows in its channel's file, in order
        keys = {row.split(b",")[0].strip(b'"').decode() for row in rows}
        assert {channel_of(k, 2) for k in keys} == {c}
    assert not list(tmp_path.glob(".out*.pending")), "every pending file committed"
    if transactional:
        assert store is not None and len(store.list()) >= 4, "checkpoints committed meanwhile"


class Checked(Operator):
    def check_parallel(self, width: int) -> Any:
        if width > 3:
            return f"at most 3 copies, not {width}"
        return None

    def on_tuple(self, tup: Any, port: int) -> None:
        pass


class Broken(Checked):
    def check_parallel(self, width: int) -> Any:
        raise ValueError("oops")


def test_an_operators_own_parallel_rule_is_listed_with_the_others() -> None:
    g = Graph("own-rule")
    nums = g.source("nums", Numbers(), schema=ROW)
    with g.parallel(4, partition_by="k"):
        g.sink("a", Checked(), [nums])
    with g.parallel(2, partition_by="k"):
        g.sink("b", Broken(), [nums])
    with pytest.raises(GraphValidationError) as info:
        g.freeze()
    messages = {e.operator: str(e) for e in info.value.errors}
    assert "at most 3 copies, not 4" in messages["a"]
    assert "Broken.check_parallel raised ValueError('oops')" in messages["b"]


def test_a_region_never_given_an_operator_is_refused_before_the_job_starts() -> None:
    # Found by the review: g.parallel(...) neither entered nor add()ed crashed the job with an
    # IndexError (exit 1, retried by --restarts); the with block already said "holds no operator".
    g = Graph("empty-region")
    g.parallel(2, partition_by="k")
    nums = g.source("nums", Numbers(), schema=ROW)
    g.sink("out", Checked(), [nums])
    with pytest.raises(GraphValidationError, match="parallel0' holds no operator"):
        g.freeze()
