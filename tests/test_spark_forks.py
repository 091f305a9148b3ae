"""Feeders forked from the warm fork server (`_forks`), without Spark.

What must hold: a feeder is forked from the server, not started cold; it runs with the
driver's environment, directory and path as they are when it starts; its CPU time is still
counted among the driver's descendants'; a feeder that dies without a word is reported; and
a server that has gone is replaced (or the feeder started cold), never a lost source.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from riverbed.graph import FrozenGraph, Graph, Operator, Source
from riverbed.spark_bridge import _forks
from riverbed.spark_bridge._feeder import SourceFeeder, SourceFeederError
from riverbed.spark_bridge._rows import ROW_DDL, decode
from riverbed.spark_bridge._source import dump_payload
from riverbed.testing import ListSource


class _Nothing(Operator):
    def on_tuple(self, tup: Any, port: int) -> None:
        pass


class _Where(Source):
    """One tuple telling where the feeder runs: a variable of its environment, its directory."""

    replayable = True

    def generate(self) -> Any:
        yield {"mark": os.environ.get("RIVERBED_FORK_TEST", ""), "cwd": os.getcwd()}


class _Busy(Source):
    """Burns a measurable amount of CPU before its only tuple."""

    replayable = True

    def generate(self) -> Any:
        total = 0
        for i in range(3_000_000):
            total += i
        yield {"v": total}


def _graph(source: Source) -> FrozenGraph:
    g = Graph("src")
    s = g.source("src", source)
    g.sink("sink", _Nothing(), [s])
    return g.freeze()


def _tuples(spool: Path) -> list[Any]:
    rows = []
    for path in sorted(spool.glob("*.parquet")):
        rows.extend(pq.read_table(path).to_pylist())
    return [decode(r["data"]) for r in rows if r["data"] is not None]


def _feeder(graph: FrozenGraph, spool: Path, *, ahead: int = 1000) -> SourceFeeder:
    return SourceFeeder([dump_payload((graph, "src", 0, None))], str(spool), ROW_DDL, first=10,
                        size=10, ahead=ahead)


def _run_to_end(feeder: SourceFeeder) -> None:
    """Start the feeder, wait until its source is done, and stop it."""
    feeder.start()
    try:
        assert feeder.finished.wait(60)
    finally:
        feeder.stop()


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    monkeypatch.setenv("RIVERBED_SPARK_FORK_SERVER", "1")
    _forks.start_fork_server()
    pid = _forks.fork_server_pid()
    assert pid is not None
    yield pid


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _children_cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[13]) + int(fields[14])  # cutime + cstime: waited-for children's CPU


def test_a_feeder_is_forked_from_the_running_server(tmp_path: Path, server: int) -> None:
    feeder = _feeder(_graph(ListSource([{"v": i} for i in range(100_000)])), tmp_path, ahead=1)
    feeder.start()  # it then waits for room: nobody reads its files
    try:
        process = feeder._process
        assert isinstance(process, _forks.ForkedProcess)
        assert _parent(process.pid) == server
    finally:
        feeder.stop()
    assert feeder.error is None


def test_a_forked_feeder_runs_with_the_drivers_environment_and_directory_of_its_start(
        tmp_path: Path, server: int, monkeypatch: pytest.MonkeyPatch) -> None:
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.setenv("RIVERBED_FORK_TEST", "set after the server started")
    monkeypatch.chdir(here)
    feeder = _feeder(_graph(_Where()), tmp_path / "spool")
    _run_to_end(feeder)
    assert feeder.error is None
    assert _tuples(tmp_path / "spool") == [{"mark": "set after the server started", "cwd": str(here)}]


def test_a_forked_feeders_cpu_time_is_counted_in_the_servers_children(tmp_path: Path, server: int) -> None:
    before = _children_cpu_ticks(server)
    feeder = _feeder(_graph(_Busy()), tmp_path)
    _run_to_end(feeder)  # (stop returns once the process has exited)
    assert feeder.error is None
    # The server waits for the child when its SIGCHLD arrives, which is after the exit the
    # driver saw: poll the server's counters for a while.
    deadline = time.monotonic() + 30
    while _children_cpu_ticks(server) == before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _children_cpu_ticks(server) > before


def test_a_forked_feeder_killed_without_a_word_is_reported(tmp_path: Path, server: int) -> None:
    feeder = _feeder(_graph(ListSource([{"v": i} for i in range(100_000)])), tmp_path, ahead=1)
    feeder.start()
    try:
        process = feeder._process
        assert isinstance(process, _forks.ForkedProcess)
        os.kill(process.pid, signal.SIGKILL)
        assert feeder.finished.wait(60)
    finally:
        feeder.stop()
    assert isinstance(feeder.error, SourceFeederError)
    assert "exited without reporting" in str(feeder.error)


def test_a_server_that_has_gone_is_replaced(tmp_path: Path, server: int) -> None:
    os.kill(server, signal.SIGKILL)
    feeder = _feeder(_graph(ListSource([{"v": i} for i in range(50)])), tmp_path)
    _run_to_end(feeder)
    assert feeder.error is None
    assert _tuples(tmp_path) == [{"v": i} for i in range(50)]
    assert _forks.fork_server_pid() not in (None, server)


def test_without_the_server_a_feeder_starts_cold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RIVERBED_SPARK_FORK_SERVER", "0")
    feeder = _feeder(_graph(ListSource([{"v": i} for i in range(50)])), tmp_path)
    _run_to_end(feeder)
    assert not isinstance(feeder._process, _forks.ForkedProcess)
    assert _tuples(tmp_path) == [{"v": i} for i in range(50)]


class _FakeStream:
    """Stands in for ``spark.readStream``: every call returns itself."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: self


class _FakeSpark:
    readStream = _FakeStream()


def test_a_source_frames_feeder_starts_when_the_frame_is_made(tmp_path: Path, server: int) -> None:
    # Its first file is then made while the rest of the query is built and started (the
    # deployment stops the feeders if the query does not start).
    from riverbed.spark_bridge._deploy import _source_frame

    feeders: list[SourceFeeder] = []
    _source_frame(_FakeSpark(), _graph(ListSource([{"v": i} for i in range(50)])), [("src", 0)],
                  max_rows=10, spool=str(tmp_path), feeders=feeders)
    try:
        assert len(feeders) == 1
        assert isinstance(feeders[0]._process, _forks.ForkedProcess)
    finally:
        feeders[0].stop()
    assert feeders[0].error is None
