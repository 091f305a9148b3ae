"""A restart whose stored state does not fit the graph (or its input) any more is refused before
anything runs (`RestoreRefused`: `riverbed run` exits 2 and `--restarts` does not retry), naming
the checkpoint and what changed. Each case here failed another way before (a review): exit 1
after "restored", retried, the region resetting again and again; or exit 0 with the state
regrouped under another key."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from riverbed.checkpoint import MemoryStore
from riverbed.graph import Graph, Operator
from riverbed.operators import FileSource, FileSourceError
from riverbed.runtime import Job, JobError, RealClock, RestoreRefused, VirtualClock, run_virtual
from riverbed.testing import run_until_crash
from riverbed.windows import EventType
from tests.test_parallel_checkpoints import SCHEMA, Output, PacedReadings, Readings

S = 1_000_000_000
N = 400

pytestmark = pytest.mark.usefixtures("no_worker_leftovers")


class Total(Operator):
    """A running total per sensor, state of its own (no window)."""

    def __init__(self) -> None:
        self.totals: dict[int, int] = {}

    def on_tuple(self, tup: Any, port: int) -> None:
        total = self.totals[tup["sensor"]] = self.totals.get(tup["sensor"], 0) + tup["value"]
        self.submit({"sensor": tup["sensor"], "seq": tup["seq"], "total": total})

    def snapshot(self) -> Any:
        return [[k, v] for k, v in self.totals.items()]

    def restore(self, state: Any) -> None:
        self.totals = dict(state)


class Strict(Operator):
    """Another operator under the same name: its state is a dict."""

    def snapshot(self) -> Any:
        return {"seen": 0}

    def restore(self, state: Any) -> None:
        self.seen = state["seen"]


def _graph(out: Output, *, key: Any = "sensor", width: int | None = 2, op: Operator | None = None,
           sources: int = 1) -> Graph:
    g = Graph("refused")
    srcs = [g.source(f"readings{i or ''}", Readings(N), schema=SCHEMA) for i in range(sources)]
    if width is None:
        tot = g.operator("tot", op or Total(), [srcs])
    else:
        with g.parallel(width, partition_by=key):
            tot = g.operator("tot", op or Total(), [srcs])
    g.sink("out", out, [tot])
    return g


def _stopped_midway(graph: Graph) -> MemoryStore:
    store = MemoryStore(keep_last=100)
    assert not run_until_crash(Job(graph, clock=VirtualClock(), checkpoints=store,
                                   checkpoint_period=0.35), 2 * S)
    return store


def _refused(graph: Graph, store: MemoryStore) -> str:
    job = Job(graph, clock=VirtualClock(), checkpoints=store)
    with pytest.raises(JobError) as info:
        run_virtual(job.run(), job.clock)  # type: ignore[arg-type]
    (err,) = info.value.errors
    assert isinstance(err, RestoreRefused), err
    return str(err)


def _restores(graph: Graph, store: MemoryStore) -> Job:
    job = Job(graph, clock=VirtualClock(), checkpoints=store)
    assert run_until_crash(job, None)
    assert job.restored_from is not None
    return job


def _reference() -> list[Any]:
    out = Output()
    assert run_until_crash(Job(_graph(out, width=None), clock=VirtualClock()), None)
    return sorted(map(repr, out.rows))


# -------------------------------------------------------------- parallel regions


def test_a_region_split_by_another_key_is_refused() -> None:
    # The same grouping, other channels: 6,580 of 10,000 totals were wrong, exit 0.
    store = _stopped_midway(_graph(Output()))
    said = _refused(_graph(Output(), key=lambda t: ("k", t["sensor"])), store)
    assert "split by 'sensor'" in said and "<lambda>" in said


def test_an_operator_taken_out_of_its_region_takes_its_one_channel_or_is_refused() -> None:
    said = _refused(_graph(Output(), width=None), _stopped_midway(_graph(Output(), width=2)))
    assert "parallel region of width 2" in said and "-p width=2" in said
    out = Output()
    _restores(_graph(out, width=None), _stopped_midway(_graph(Output(), width=1)))
    assert sorted(map(repr, out.rows)) != []
    # What the restart output is the rest of the uninterrupted run's (the sink's state is kept).
    assert sorted(map(repr, out.rows)) == _reference()


def test_a_checkpoint_without_the_region_is_named_so_at_width_two() -> None:
    said = _refused(_graph(Output(), width=2), _stopped_midway(_graph(Output(), width=None)))
    assert "outside any parallel region" in said


# --------------------------------------------------------- keys, connections, operators


def _key(mod: int | None) -> Any:
    if mod is None:
        return lambda t: t["sensor"]
    return lambda t: t["sensor"] % mod


class _Sums(Operator):
    """The size of each window (a tumble or a trigger), as a row."""

    window_events = frozenset({EventType.EVICTION, EventType.TRIGGER})

    def on_window_event(self, event: Any, port: int) -> None:
        if event.tuples:
            self.submit({"sensor": -1, "seq": event.tuples[-1]["seq"], "total": len(event.tuples)})


def _windowed(out: Output, key: Any) -> Graph:
    g = Graph("refused")
    src = g.source("readings", Readings(N), schema=SCHEMA)
    sums = g.operator("sums", _Sums(), [src.window("tumbling, count(3), partitioned", partition_by=key)])
    g.sink("out", out, [sums])
    return g


def test_a_window_keyed_by_another_function_is_refused_the_same_one_restores() -> None:
    # The old partitions went on under keys the new function never makes: exit 0, no warning.
    store = _stopped_midway(_windowed(Output(), _key(None)))
    said = _refused(_windowed(Output(), _key(2)), store)  # other code
    assert "input port 0 had window" in said and "_key.<locals>.<lambda>" in said
    _restores(_windowed(Output(), _key(None)), store)  # a new lambda of the same code
    store = _stopped_midway(_windowed(Output(), _key(2)))
    _refused(_windowed(Output(), _key(3)), store)  # the same code, closing over another value


def test_a_checkpoint_of_an_older_riverbed_keyed_by_a_function_restores() -> None:
    from riverbed.core import same_key
    assert same_key("a key function", "a key function f #0123456789ab py3.11")
    assert same_key("a key function f #0123456789ab py3.10", "a key function f #ba9876543210 py3.11")
    assert not same_key("a key function f #0123456789ab py3.11", "a key function f #ba9876543210 py3.11")
    assert not same_key("a key function f #0123456789ab py3.10", "a key function g #0123456789ab py3.11")
    assert not same_key("sensor", "a key function f #0123456789ab py3.11")


def test_an_operator_with_other_connections_is_refused_before_it_starts() -> None:
    store = _stopped_midway(_graph(Output(), width=None, sources=2))
    said = _refused(_graph(Output(), width=None, sources=1), store)
    assert "'tot' had 2 input connection(s) and now has 1" in said


def test_another_operator_under_the_same_name_is_refused_naming_the_checkpoint() -> None:
    store = _stopped_midway(_graph(Output(), width=None))
    said = _refused(_graph(Output(), width=None, op=Strict()), store)
    assert said.startswith("checkpoint ") and "'tot'" in said and "new checkpoint directory" in said


def test_a_file_source_whose_file_was_replaced_refuses_its_state(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text("".join(f"{i},{i * 2}\n" for i in range(100)))
    reader = FileSource(str(path), format="csv", schema={"a": "int64", "b": "int64"})
    state = {"file": str(path), "offset": 60, "line": 9, "tuples": 9, "done": False,
             "before": path.read_bytes()[:60][-64:]}
    reader.restore(dict(state))  # the same file: taken back
    path.write_text("0,0\n" + path.read_text())  # a line put in front
    with pytest.raises(FileSourceError, match="not the one the checkpoint read"):
        reader.restore(dict(state))
    path.write_text("0,0\n")
    with pytest.raises(FileSourceError, match="shorter now"):
        reader.restore(dict(state))
    path.unlink()
    reader.restore(dict(state))  # missing: reading it says so (or ignores it, if told to)


# ------------------------------------------------------------------------ clock


def test_a_wall_clock_behind_the_checkpoint_runs_ahead_of_it_instead_of_failing() -> None:
    # The window refused its snapshot, taken "later" than the clock's now: exit 1 (retried by
    # --restarts) until the wall clock caught up.
    ahead = time.time_ns() + 3600 * S  # taken on a machine (or before a step back) an hour ahead

    def graph(out: Output) -> Graph:
        g = Graph("refused")
        src = g.source("readings", PacedReadings(40), schema=SCHEMA)
        sums = g.operator("sums", _Sums(), [src.window("sliding, time(5), count(10)")])
        g.sink("out", out, [sums])
        return g

    store = MemoryStore(keep_last=100)
    assert not run_until_crash(Job(graph(Output()), clock=VirtualClock(ahead), checkpoints=store,
                                   checkpoint_period=0.05), ahead + S // 4)
    assert store.latest_good() is not None
    clock = RealClock()
    job = Job(graph(Output()), clock=clock, checkpoints=store)
    asyncio.run(job.run())
    assert job.restored_from is not None and clock.ahead > 3500 * S
    assert clock.now() - time.time_ns() > 3500 * S


# ------------------------------------------------------------- key descriptions


_KEY_SCRIPT = """
import functools, operator, sys
from riverbed.core import describe_key
def bucket(t, n=4):
    return t["s"] % n
helpers = (len, str.upper, operator, functools.partial)
class Bucket:
    def __init__(self, n):
        self.n, self.names = n, {"a", "b", "c"}
    def __call__(self, t):
        return t["s"] % self.n
keys = [Bucket(4), Bucket(4).__call__, lambda t: t["s"] in {"a", "b", "c", "d", "e"},
        lambda t: (helpers, t["s"]), operator.itemgetter("s"), functools.partial(bucket, n=8)]
print([describe_key(k) for k in keys])
"""


def test_a_key_function_is_described_alike_in_every_process() -> None:
    # A set literal's repr follows the process's string hash seed: the same script recorded
    # another digest at each run, and its restart was refused (a review of this stop).
    import os
    import subprocess
    import sys
    said = {subprocess.run([sys.executable, "-c", _KEY_SCRIPT], capture_output=True, text=True,
                           check=True, env={**os.environ, "PYTHONHASHSEED": seed}).stdout
            for seed in ("1", "2", "3")}
    assert len(said) == 1, said


def test_key_functions_that_differ_in_arguments_are_described_apart() -> None:
    import functools
    import operator

    from riverbed.core import describe_key, same_key

    def bucket(t: Any, n: int = 4) -> int:
        return int(t["s"]) % n

    def default(n: int) -> Any:
        return lambda t, n=n: t["s"] % n

    class Bucket:
        def __init__(self, n: int) -> None:
            self.n = n

        def __call__(self, t: Any) -> int:
            return int(t["s"]) % self.n

        def of(self, t: Any) -> int:
            return int(t["s"]) % self.n

    four, eight = Bucket(4), Bucket(8)
    pairs = [(operator.itemgetter("sensor"), operator.itemgetter("site")),
             (functools.partial(bucket, n=4), functools.partial(bucket, n=8)),
             (default(4), default(8)),
             # a callable object and a bound method were compared by their type and name only
             (Bucket(4), Bucket(8)), (Bucket(4).of, Bucket(8).of),
             (lambda t, b=four: b(t), lambda t, b=eight: b(t))]
    for a, b in pairs:
        assert not same_key(describe_key(a), describe_key(b)), (a, b)
        assert same_key(describe_key(a), describe_key(a))


class Unreachable(Total):
    """Its state lives elsewhere, reached at restore (a connection refused once)."""

    def restore(self, state: Any) -> None:
        raise ConnectionRefusedError(111, "Connection refused")


def test_a_restore_failing_on_io_is_a_failure_to_retry_not_a_refusal() -> None:
    store = _stopped_midway(_graph(Output(), width=None))
    job = Job(_graph(Output(), width=None, op=Unreachable()), clock=VirtualClock(), checkpoints=store)
    with pytest.raises(JobError) as info:
        run_virtual(job.run(), job.clock)  # type: ignore[arg-type]
    assert not any(isinstance(e, RestoreRefused) for e in info.value.errors)
    assert "Connection refused" in str(info.value)
