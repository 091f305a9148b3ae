"""DirectoryScan keeps its scan schedule across a restart, as Beacon keeps its pace: restored, it
waited its init delay again from the checkpoint's time and scanned then, so a file that came
during the run was reported at another time than without the restart (a review)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from riverbed.checkpoint import MemoryStore
from riverbed.graph import Graph, Operator
from riverbed.operators import DirectoryScan
from riverbed.runtime import Job, VirtualClock
from riverbed.testing import run_until_crash

S = 1_000_000_000


class Seen(Operator):
    """A sink whose output (file name, clock time) is its state."""

    transactional = True

    def __init__(self) -> None:
        self.rows: list[Any] = []

    def on_tuple(self, tup: Any, port: int) -> None:
        self.rows.append([Path(tup["path"]).name, self.context.now()])

    def snapshot(self) -> Any:
        return list(self.rows)

    def restore(self, state: Any) -> None:
        self.rows = [list(r) for r in state]


def _graph(directory: Path, out: Seen) -> Graph:
    g = Graph("scan")
    files = g.source("files", DirectoryScan(str(directory), init_delay=0.5, sleep_time=1.0, scans=4))
    g.sink("out", out, [files])
    g.consistent_region(files, name="r", period=0.35)
    return g


def test_a_file_that_came_during_the_run_is_reported_at_the_same_scan_after_a_restart(
        tmp_path: Path) -> None:
    def arrives(directory: Path) -> Any:
        return lambda job: (directory / "late.csv").write_text("x\n")

    first_dir = tmp_path / "reference"
    first_dir.mkdir()
    (first_dir / "early.csv").write_text("x\n")
    reference = Seen()
    assert run_until_crash(Job(_graph(first_dir, reference), clock=VirtualClock(),
                               checkpoints=MemoryStore()), None, [(1.2, arrives(first_dir))])
    assert reference.rows == [["early.csv", S // 2], ["late.csv", 3 * S // 2]]

    again_dir = tmp_path / "restarted"
    again_dir.mkdir()
    (again_dir / "early.csv").write_text("x\n")
    store = MemoryStore(keep_last=100)
    assert not run_until_crash(Job(_graph(again_dir, Seen()), clock=VirtualClock(), checkpoints=store),
                               round(1.2 * S), [(1.2, arrives(again_dir))])
    restarted = Seen()
    job = Job(_graph(again_dir, restarted), clock=VirtualClock(), checkpoints=store)
    assert run_until_crash(job, None)
    assert job.restored_from is not None
    assert restarted.rows == reference.rows
