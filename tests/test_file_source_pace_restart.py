"""FileSource keeps its pace across a restart, as Beacon does: restored, it waited its
``init_delay`` again and each record's delay again from the restore, so every later tuple came
late (a review: tuple 10 at 5.10 s instead of 3.10 s; a file closed by time then split at other
tuples). Its checkpoint now holds when reading starts and when the last record went out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from riverbed.checkpoint import MemoryStore
from riverbed.graph import Graph, Operator, Schema
from riverbed.operators import FileSource
from riverbed.runtime import Job, VirtualClock
from riverbed.testing import run_until_crash

S = 1_000_000_000
ROW = Schema(n="int64", text="rstring")


class Times(Operator):
    """A sink whose output (each row's n and clock time) is its state."""

    transactional = True

    def __init__(self) -> None:
        self.rows: list[Any] = []

    def on_tuple(self, tup: Any, port: int) -> None:
        self.rows.append([tup["n"], self.context.now()])

    def snapshot(self) -> Any:
        return list(self.rows)

    def restore(self, state: Any) -> None:
        self.rows = [list(r) for r in state]


def _graph(path: Path, out: Times, paced: bool) -> Graph:
    g = Graph("pace")
    src = g.source("src", FileSource(file=str(path), has_delay_field=paced, init_delay=2.0),
                   schema=ROW)
    g.sink("out", out, [src])
    g.consistent_region(src, name="r", period=0.35)
    return g


@pytest.mark.parametrize(("paced", "crash"), [(True, 1.1), (True, 2.55), (True, 3.43), (False, 1.0)])
def test_a_restart_keeps_the_init_delay_and_the_records_delays(tmp_path: Path, paced: bool,
                                                                crash: float) -> None:
    path = tmp_path / "in.csv"
    path.write_text("".join((f"0.1,{i},r{i}\n" if paced else f"{i},r{i}\n") for i in range(30)))
    reference = Times()
    assert run_until_crash(Job(_graph(path, reference, paced), clock=VirtualClock(),
                               checkpoints=MemoryStore()), None)
    store = MemoryStore(keep_last=100)
    assert not run_until_crash(Job(_graph(path, Times(), paced), clock=VirtualClock(),
                                   checkpoints=store), round(crash * S))
    again = Times()
    job = Job(_graph(path, again, paced), clock=VirtualClock(), checkpoints=store)
    assert run_until_crash(job, None)
    assert job.restored_from is not None
    assert again.rows == reference.rows


def test_a_tailed_file_rotated_under_its_name_is_followed(tmp_path: Path) -> None:
    # Renamed, then made again (a log rotation): the job went on reading the renamed file's
    # descriptor and never saw the new one, while a restart did (a review).
    from riverbed.graph import Punct
    from riverbed.testing import ListSink

    path = tmp_path / "app.log"
    path.write_text("1,a\n2,b\n")
    g = Graph("tail")
    sink = ListSink()
    g.sink("out", sink, [g.source("src", FileSource(file=str(path), hot_file=True,
                                                    poll_interval=0.1), schema=ROW)])

    def grow(job: Job) -> None:
        with open(path, "a") as f:
            f.write("3,c\n")

    def rotate(job: Job) -> None:  # written to just before, and its last line unterminated
        with open(path, "a") as f:
            f.write("6,f\n7,g")
        path.rename(tmp_path / "app.log.1")
        path.write_text("4,d\n5,e\n")

    assert run_until_crash(Job(g, clock=VirtualClock()), None,
                           [(0.5, grow), (1.0, rotate), (2.0, lambda job: job.stop())])
    rows = [t["n"] if isinstance(t, dict) else t for t in sink.items]
    assert rows[:6] == [1, 2, 3, 6, 7, Punct.WINDOW] and rows[6:8] == [4, 5]
