"""Sources inside a parallel region: one replica per channel, in the channel's worker process.

Each replica reads ``context.channel`` and ``context.width`` (SPL ``getChannel()`` /
``getMaxChannels()``) and produces its own share; the region's results are the same as with the
source outside it (and as with no region), and a replica emitting another channel's key stops
the job naming it.
"""

from __future__ import annotations

import asyncio
import os
from collections import defaultdict
from typing import Any

import pytest

from riverbed.checkpoint import MemoryStore
from riverbed.graph import Graph, GraphError, GraphValidationError, Operator, Punct, Schema, Source
from riverbed.runtime import Job, JobError, VirtualClock, run_graph, run_virtual
from riverbed.runtime._parallel_wire import channel_of
from riverbed.windows import EventType, StreamWindowEvent

READING = Schema(k="rstring", v="int64", ts="int64")
KEYS = 29


pytestmark = pytest.mark.usefixtures("no_worker_leftovers")


def _reading(i: int) -> dict[str, Any]:
    return {"k": f"s{(i * 7919) % KEYS}", "v": i, "ts": 1000 + i}


class Share(Source):
    """``n`` readings; a replica keeps those whose key is its channel's (all of them outside a
    region), found as it goes: what a replicated reader of one shared input does."""

    def __init__(self, n: int, *, cheat: bool = False) -> None:
        self.n, self.cheat = n, cheat
        self.seen_in_setup: tuple[int, int] | None = None

    def setup(self) -> None:
        self.seen_in_setup = (self.context.channel, self.context.width)  # type: ignore[attr-defined]

    def generate(self) -> Any:
        me, width = self.context.channel, self.context.width  # type: ignore[attr-defined]
        for i in range(self.n):
            r = _reading(i)
            if self.cheat or channel_of(r["k"], width) == me:
                yield r


class Sums(Operator):
    window_events = frozenset({EventType.EVICTION, EventType.TRIGGER})

    def on_window_event(self, event: StreamWindowEvent[Any], port: int) -> None:
        if event.tuples:
            self.submit({"k": event.partition, "sum": sum(t["v"] for t in event.tuples),
                         "n": len(event.tuples), "pid": os.getpid()})


class Collect(Operator):
    def __init__(self) -> None:
        self.tuples: list[Any] = []
        self.watermarks: list[int] = []
        self.finals = 0

    def on_tuple(self, tup: Any, port: int) -> None:
        self.tuples.append(tup)

    def on_punct(self, punct: Punct, port: int) -> None:
        self.finals += punct is Punct.FINAL

    def on_watermark(self, value: int) -> None:
        self.watermarks.append(value)


def _by_key(tuples: list[Any]) -> dict[str, list[tuple[int, int]]]:
    out: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for t in tuples:
        out[t["k"]].append((t["sum"], t["n"]))
    return dict(out)


def _graph(width: int | None, *, n: int = 3000, source_inside: bool = True, cheat: bool = False,
           clause: str = "timeInterval, intervalDuration(0.05), partitioned",
           ) -> tuple[Graph, Collect, Share]:
    g = Graph("replicas")
    share = Share(n, cheat=cheat)
    sink = Collect()

    def source() -> Any:
        return g.source("src", share, schema=READING, event_time="ts", resolution="ms",
                        minimum_gap=0.0)

    if width is None:
        src = source()
        out = g.operator("sums", Sums(), [src.window(clause, partition_by="k")])
    else:
        src = None if source_inside else source()
        with g.parallel(width, partition_by="k"):
            src = source() if src is None else src
            out = g.operator("sums", Sums(), [src.window(clause, partition_by="k")])
    g.sink("sink", sink, [out])
    return g, sink, share


def test_a_source_inside_a_block_is_a_member_of_the_region() -> None:
    g, _, _ = _graph(2)
    assert g.freeze().parallel[0].members == ("src", "sums")


@pytest.mark.parametrize("virtual", [False, True], ids=["real-clock", "virtual-clock"])
@pytest.mark.parametrize("width", [1, 2, 3])
def test_replicas_give_the_same_panes_and_watermarks_as_one_source(width: int, virtual: bool) -> None:
    g, sink, _ = _graph(None)
    run_graph(g, clock=VirtualClock() if virtual else None)
    expected = _by_key(sink.tuples)
    last_watermark = sink.watermarks[-1]
    assert len(expected) == KEYS and len(sink.tuples) > KEYS
    g, sink, _ = _graph(width)
    job = Job(g, clock=VirtualClock() if virtual else None)
    if virtual:
        run_virtual(job.run(), job.clock)  # type: ignore[arg-type]
    else:
        asyncio.run(job.run())
    assert _by_key(sink.tuples) == expected
    assert sink.finals == 1
    # Event time crossed the merge: the watermark leaving is the minimum over the replicas,
    # never going back, and the last is the end of every replica's input.
    assert sink.watermarks == sorted(sink.watermarks) and sink.watermarks[-1] == last_watermark
    channels = job.channel_metrics()
    assert [m.channel for m in channels] == list(range(width))
    assert all(m.tuples_in == 0 for m in channels), "nothing was split: the replicas produced it"
    assert sum(m.tuples_out for m in channels) == len(sink.tuples)
    pids = {m.channel: m.pid for m in channels}
    assert {t["pid"] for t in sink.tuples} <= set(pids.values())
    assert all(t["pid"] == pids[channel_of(t["k"], width)] for t in sink.tuples)


def test_replicas_match_the_source_outside_the_region() -> None:
    g, sink, _ = _graph(2, source_inside=False)
    run_graph(g)
    outside = _by_key(sink.tuples)
    g, sink, _ = _graph(2)
    run_graph(g)
    assert _by_key(sink.tuples) == outside


def test_each_replica_sees_its_channel_and_the_width_from_setup_on() -> None:
    g = Graph("who")
    seen: list[Any] = []

    class Who(Source):
        def setup(self) -> None:
            self.at_setup = (self.context.channel, self.context.width)  # type: ignore[attr-defined]

        def generate(self) -> Any:
            yield {"channel": self.context.channel, "width": self.context.width,  # type: ignore[attr-defined]
                   "at_setup": self.at_setup}

    class Record(Operator):
        def on_tuple(self, tup: Any, port: int) -> None:
            seen.append(tup)

    with g.parallel(3):
        src = g.source("who", Who())
    g.sink("sink", Record(), [src])
    run_graph(g)
    assert sorted((t["channel"], t["width"], t["at_setup"]) for t in seen) == \
        [(c, 3, (c, 3)) for c in range(3)]
    # Outside any region: channel 0 of 1, so a replica-ready source reads everything.
    g = Graph("who1")
    src = g.source("who", Who())
    g.sink("sink", Record(), [src])
    seen.clear()
    run_graph(g)
    assert [(t["channel"], t["width"]) for t in seen] == [(0, 1)]


def test_a_replica_emitting_another_channels_key_stops_the_job_naming_it() -> None:
    g, _, _ = _graph(2, cheat=True)
    with pytest.raises(JobError) as info:
        run_graph(g)
    text = str(info.value)
    assert "'src'" in text and "ReplicaKeyError" in text
    assert "belongs to channel" in text and "context.channel" in text


def test_a_round_robin_region_does_not_check_keys() -> None:
    g = Graph("rr")
    out: list[Any] = []

    class Many(Source):
        def generate(self) -> Any:
            return ({"k": f"s{i}", "c": self.context.channel} for i in range(50))  # type: ignore[attr-defined]

    class Record(Operator):
        def on_tuple(self, tup: Any, port: int) -> None:
            out.append(tup)

    with g.parallel(2):
        src = g.source("many", Many())
    g.sink("sink", Record(), [src])
    run_graph(g)
    assert sorted(t["c"] for t in out) == [0] * 50 + [1] * 50


def test_a_stop_ends_the_replicas_and_drains_the_region() -> None:
    g = Graph("endless")
    got: list[Any] = []

    class Endless(Source):
        def generate(self) -> Any:
            i = 0
            while True:
                yield {"k": f"s{self.context.channel}", "i": i}  # type: ignore[attr-defined]
                i += 1

    job: Job | None = None

    seen: set[str] = set()
    stopped = False

    class StopAfter(Operator):
        # Stops once 5000 tuples arrived and both replicas were heard from: one
        # worker may start well before the other, so a count alone can stop the
        # job before the later one sent anything.
        def on_tuple(self, tup: Any, port: int) -> None:
            nonlocal stopped
            got.append(tup)
            seen.add(tup["k"])
            if not stopped and len(got) >= 5000 and len(seen) == 2:
                stopped = True
                assert job is not None
                job.stop()

        def on_punct(self, punct: Punct, port: int) -> None:
            if punct is Punct.FINAL:
                got.append("final")

    with g.parallel(2):
        src = g.source("endless", Endless())
    g.sink("sink", StopAfter(), [src])
    job = Job(g)
    asyncio.run(job.run())
    assert stopped and got[-1] == "final" and len(got) > 5000
    for channel in ("s0", "s1"):
        # Each replica's tuples arrive in order with none lost up to the stop.
        numbers = [t["i"] for t in got[:-1] if t["k"] == channel]
        assert numbers == list(range(len(numbers)))


def test_a_replicated_source_runs_with_checkpoints_and_reports_each_replicas_state() -> None:
    """(Refused before replicas could checkpoint: tests/test_parallel_replica_checkpoints.py.)"""
    g, sink, _ = _graph(None)
    run_graph(g)
    expected = _by_key(sink.tuples)
    g, sink, _ = _graph(2)
    store = MemoryStore(keep_last=1000)
    job = Job(g, checkpoints=store)

    async def main() -> None:
        run = asyncio.ensure_future(job.run())
        assert await job.regions[0].request_consistent()
        await run

    asyncio.run(main())
    assert _by_key(sink.tuples) == expected
    (info,) = store.list()
    state = store.load(info.id).states["src"]
    assert state["parallel"] == {"region": "parallel0", "width": 2, "key": "k"}
    assert len(state["channels"]) == 2


def test_an_async_source_is_refused_in_a_region_naming_it() -> None:
    class Later(Source):
        async def run(self) -> None:
            pass

    g = Graph("bad")
    with g.parallel(2, partition_by="k"):
        a = g.source("later", Later(), schema=READING)
        b = g.source("nokey", Share(1), schema=Schema(v="int64"))
        c = g.operator("pass", Sums(), [a, b])
    g.sink("sink", Collect(), [c])
    with pytest.raises(GraphValidationError) as info:
        g.freeze()
    found = {(e.operator, e.rule): e.message for e in info.value.errors}
    assert "async run()" in found[("later", "parallel")]
    assert "'k'" in found[("nokey", "unknown-attribute")]


def test_a_replayable_replicated_source_may_start_a_consistent_region() -> None:
    class Replayable(Share):
        replayable = True

    g = Graph("ckpt")
    with g.parallel(2):
        s = g.source("src", Replayable(1), schema=READING)
        out = g.operator("p", Sums(), [s])
    g.sink("sink", Collect(), [out])
    g.consistent_region(s, period=1.0)
    (region,) = g.freeze().regions
    assert region.members == ("src", "p", "sink")


def test_a_source_in_a_block_is_accepted_where_it_was_refused() -> None:
    g = Graph("ok")
    try:
        with g.parallel(2):
            g.source("inner", Share(1))
    except GraphError as exc:  # pragma: no cover - what it did before
        pytest.fail(f"refused: {exc}")


def test_a_worker_leaves_what_it_inherited_to_the_garbage_collector_frozen() -> None:
    """A collection in a worker would write to every object it inherited from the job's process
    (fork), copying the pages they are on: the worker freezes them first."""
    import gc

    g = Graph("frozen")
    seen: list[Any] = []

    class Frozen(Source):
        def generate(self) -> Any:
            yield {"frozen": gc.get_freeze_count()}

    class Record(Operator):
        def on_tuple(self, tup: Any, port: int) -> None:
            seen.append(tup["frozen"])

    with g.parallel(2):
        src = g.source("src", Frozen())
    g.sink("sink", Record(), [src])
    run_graph(g)
    assert len(seen) == 2 and all(n > 1000 for n in seen)
    assert gc.get_freeze_count() == 0, "the job's process is left as it was"


def test_a_region_with_a_replicated_source_also_takes_a_stream_from_outside() -> None:
    g = Graph("both")
    got: list[Any] = []

    class Tag(Source):
        def __init__(self, tag: str, n: int) -> None:
            self.tag, self.n = tag, n

        def generate(self) -> Any:
            where = getattr(self.context, "channel", None)
            return ({"tag": self.tag, "i": i, "channel": where} for i in range(self.n))

    class Union(Operator):
        def on_tuple(self, tup: Any, port: int) -> None:
            self.submit({**tup, "port": port, "pid": os.getpid()})

    class Record(Operator):
        def on_tuple(self, tup: Any, port: int) -> None:
            got.append(tup)

    outside = g.source("outside", Tag("outside", 1000))
    with g.parallel(2):
        inside = g.source("inside", Tag("inside", 300))
        union = g.operator("union", Union(), [inside, outside])
    g.sink("sink", Record(), [union])
    job = Job(g)
    asyncio.run(job.run())
    pids = [m.pid for m in job.channel_metrics()]
    inside_rows = [t for t in got if t["tag"] == "inside"]
    assert sorted((t["channel"], t["i"]) for t in inside_rows) == \
        sorted((c, i) for c in range(2) for i in range(300))
    assert all(t["pid"] == pids[t["channel"]] and t["port"] == 0 for t in inside_rows)
    assert sorted(t["i"] for t in got if t["tag"] == "outside") == list(range(1000))
    assert {t["pid"] for t in got if t["tag"] == "outside"} == set(pids), "split round-robin"


def test_replicas_window_marks_pass_the_key_check_and_a_missing_key_is_named() -> None:
    got: list[Any] = []

    class Marked(Source):
        def __init__(self, bad: bool) -> None:
            self.bad = bad

        def generate(self) -> Any:
            me, width = self.context.channel, self.context.width  # type: ignore[attr-defined]
            for i in range(400):
                r = _reading(i)
                if channel_of(r["k"], width) == me:
                    yield r
                if i % 100 == 99:
                    yield Punct.WINDOW
            if self.bad:
                yield {"v": 1}

    class Record(Operator):
        def on_tuple(self, tup: Any, port: int) -> None:
            got.append(tup)

        def on_punct(self, punct: Punct, port: int) -> None:
            got.append(punct)

    def graph(bad: bool) -> Graph:
        g = Graph("marks")
        with g.parallel(2, partition_by="k"):
            src = g.source("src", Marked(bad))
        g.sink("sink", Record(), [src])
        return g

    run_graph(graph(False))
    assert got.count(Punct.WINDOW) == 4 and got[-1] is Punct.FINAL
    assert sorted(t["v"] for t in got if isinstance(t, dict)) == list(range(400))
    with pytest.raises(JobError) as info:
        run_graph(graph(True))
    text = str(info.value)
    assert "'src'" in text and "KeyError" in text and "{'v': 1}" in text


def test_a_stop_asked_before_the_workers_started_reaches_the_replicas() -> None:
    class Endless(Source):
        def generate(self) -> Any:
            while True:
                yield {"i": 0}

    got: list[Any] = []

    class Record(Operator):
        def on_tuple(self, tup: Any, port: int) -> None:
            got.append(tup)

    g = Graph("early")
    with g.parallel(2):
        src = g.source("endless", Endless())
    g.sink("sink", Record(), [src])
    job = Job(g)
    job.stop()

    async def main() -> None:
        await asyncio.wait_for(job.run(), 60)  # without the stop it would never end

    asyncio.run(main())
    assert got == []  # the replicas were told before their first batch
