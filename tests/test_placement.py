"""Placement (SPL ``partitionColocation`` / ``partitionIsolation``): ``with g.process(name):``
runs its operators together in a worker process of their own, hosted as a parallel region of
width 1 (the same transport, bounded queues, checkpoints and restarts).
"""

from __future__ import annotations

import asyncio
import io
import multiprocessing
import os
from pathlib import Path
from typing import Any

import pytest

from riverbed.checkpoint import MemoryStore
from riverbed.graph import Graph, GraphError, GraphValidationError, Operator, Punct, Schema, Source
from riverbed.runtime import Job, VirtualClock, run_graph
from riverbed.testing import run_until_crash
from tests.test_parallel_checkpoints import (
    SCHEMA,
    Output,
    PacedReadings,
    Readings,
    RunningTotal,
    WindowSum,
    assert_healed_once,
    by_key_lines,
    kill_worker,
    same,
)

S = 1_000_000_000


pytestmark = pytest.mark.usefixtures("no_worker_leftovers")


class Pass(Operator):
    def on_tuple(self, tup: Any, port: int) -> None:
        self.submit(tup)


class Count(Source):
    def __init__(self, n: int) -> None:
        self.n = n

    def generate(self) -> Any:
        return ({"sensor": i % 7, "value": i, "seq": i} for i in range(self.n))


def build(n: int, out: Output, placement: str | None, sums: WindowSum | None = None,
          region: bool = False) -> Graph:
    """readings -> sums (windowed, partitioned) -> totals -> out; ``placement``: None (all in
    the job's process), "together" (sums and totals in one process), "apart" (one each)."""
    g = Graph("placed")
    src = g.source("readings", Readings(n), schema=SCHEMA)

    def windows() -> Any:
        return g.operator("sums", sums or WindowSum(),
                          [src.window("tumbling, count(5), partitioned", partition_by="sensor")])

    if placement is None:
        totals = g.operator("totals", RunningTotal(), [windows()])
    elif placement == "together":
        with g.process("windows"):
            totals = g.operator("totals", RunningTotal(), [windows()])
    else:
        with g.process("a"):
            s = windows()
        with g.process("b"):
            totals = g.operator("totals", RunningTotal(), [s])
    g.sink("out", out, [totals])
    if region:
        g.consistent_region(src, name="r", period=0.35)
    return g


def reference(n: int) -> list[Any]:
    out = Output()
    assert run_until_crash(Job(build(n, out, None), clock=VirtualClock()), None)
    return out.rows


# ----------------------------------------------------------------------- graph


def test_a_process_block_is_a_width_one_group_without_key() -> None:
    g = build(10, Output(), "apart")
    frozen = g.freeze()
    assert [(r.name, r.width, r.partition_by, r.members, r.process) for r in frozen.parallel] == [
        ("a", 1, None, ("sums",), True), ("b", 1, None, ("totals",), True)]
    assert frozen.parallel_of("sums").kind == "process group"  # type: ignore[union-attr]


def test_an_operator_added_earlier_is_isolated_by_name_or_stream_and_unrelated_ones_colocate() -> None:
    g = Graph("iso")
    a = g.source("a", Count(3), schema=SCHEMA)
    b = g.source("b", Count(3), schema=SCHEMA)
    pa = g.operator("pa", Pass(), [a])
    pb = g.operator("pb", Pass(), [b])
    g.sink("sa", Pass(), [pa])
    g.sink("sb", Pass(), [pb])
    g.process("both").add(pa, "pb")  # not connected to each other: colocation needs no chain
    assert g.freeze().parallel[0].members == ("pa", "pb")


def test_a_group_named_again_is_the_same_group() -> None:
    # g.process("enrich").add(op) after `with g.process("enrich"):` made a second group, refused
    # at freeze as "two process groups are named 'enrich'" (a review of the README).
    g = Graph("again")
    a = g.source("a", Count(3), schema=SCHEMA)
    pre = g.operator("pre", Pass(), [a])
    with g.process("enrich"):
        post = g.operator("post", Pass(), [pre])
    g.sink("out", Pass(), [post])
    g.process("enrich").add("pre")
    (group,) = g.freeze().parallel
    assert (group.name, sorted(group.members)) == ("enrich", ["post", "pre"])


def test_placement_rules_are_typed_errors_naming_the_operator() -> None:
    g = Graph("bad")
    src = g.source("src", Count(3), schema=SCHEMA)
    with pytest.raises(GraphError, match="process group 'p' is opened inside parallel region 'r'"), \
            g.parallel(2, name="r"):
        g.operator("x", Pass(), [src])
        with g.process("p"):
            pass
    with pytest.raises(GraphError, match="process group name 'a b'"):
        g.process("a b")

    class Later(Source):
        async def run(self) -> None:
            pass

    g = Graph("bad2")
    src = g.source("src", Count(3), schema=SCHEMA)
    a = g.operator("a", Pass(), [src])
    back = g.operator("back", Pass(), [a])
    with g.process("p"):
        late = g.source("late", Later(), schema=SCHEMA)
        b = g.operator("b", Pass(), [a, back, late])
    g.process("p2").add(a)
    g.parallel(2, name="p2").add("b")
    g.sink("out", Pass(), [b])
    with pytest.raises(GraphValidationError) as info:
        g.freeze()
    messages = {(e.operator, e.message) for e in info.value.errors}
    assert ("b", "is in process group 'p' and parallel region 'p2': an operator runs in one") \
        in messages
    assert any(op == "late" and "async run()" in m for op, m in messages)
    assert any(op is None and "two parallel regions or process groups are named 'p2'" in m
               for op, m in messages)


def test_a_stream_leaving_a_group_and_coming_back_is_refused_naming_the_operator() -> None:
    g = Graph("loop")
    src = g.source("src", Count(3), schema=SCHEMA)
    with g.process("p") as block:
        a = g.operator("a", Pass(), [src])
    out = g.operator("out", Pass(), [a])
    b = g.operator("b", Pass(), [out])
    block.add(b)
    g.sink("sink", Pass(), [b])
    with pytest.raises(GraphValidationError) as info:
        g.freeze()
    assert [(e.operator, e.rule) for e in info.value.errors] == [("out", "parallel")]
    assert "takes a stream out of process group 'p' and leads back into it (to 'b')" in \
        info.value.errors[0].message


# --------------------------------------------------------------------- running


def test_a_slow_operator_in_its_own_process_does_not_stall_the_other_branch() -> None:
    """The slow operator blocks on its first tuple until the other branch has ended (it waits on
    an event the other branch's sink sets on final): in the job's process it would hold the
    event loop, so the other branch could never end (the wait gives up after 20 s, and says so);
    in a process of its own the other branch flows, ends, and lets it go."""
    gate = multiprocessing.get_context("fork").Event()
    order: list[str] = []

    class Slow(Operator):
        def on_tuple(self, tup: Any, port: int) -> None:
            self.submit({**tup, "gate_open": gate.wait(20)})

    class FastSink(Operator):
        def on_tuple(self, tup: Any, port: int) -> None:
            pass

        def on_punct(self, punct: Punct, port: int) -> None:
            if punct is Punct.FINAL:
                order.append("fast branch ended")
                gate.set()

    class SlowSink(Operator):
        def on_tuple(self, tup: Any, port: int) -> None:
            order.append(f"slow output, gate open: {tup['gate_open']}")

    g = Graph("isolated")
    a = g.source("a", Count(1), schema=SCHEMA)
    b = g.source("b", Count(5000), schema=SCHEMA)
    with g.process("slow"):
        slow = g.operator("slow", Slow(), [a])
    g.sink("slow_sink", SlowSink(), [slow])
    fast = g.operator("fast", Pass(), [b])
    g.sink("fast_sink", FastSink(), [fast])
    job = Job(g)
    asyncio.run(job.run())
    assert order == ["fast branch ended", "slow output, gate open: True"]


@pytest.mark.parametrize("placement", ["together", "apart"])
def test_results_are_the_same_with_and_without_placement(placement: str) -> None:
    n = 600
    out = Output()
    job = Job(build(n, out, placement), clock=VirtualClock())
    assert run_until_crash(job, None)
    assert out.rows == reference(n), "one process per group keeps the order too"
    assert [(m.region, m.kind) for m in job.channel_metrics()] == (
        [("windows", "process")] if placement == "together" else [("a", "process"), ("b", "process")])


def test_a_source_in_a_group_runs_in_its_process() -> None:
    g = Graph("srcproc")
    pids: list[int] = []

    class Where(Source):
        def generate(self) -> Any:
            yield {"pid": os.getpid(), "channel": self.context.channel}  # type: ignore[attr-defined]

    class Record(Operator):
        def on_tuple(self, tup: Any, port: int) -> None:
            pids.append(tup["pid"])

    with g.process("reader"):
        src = g.source("where", Where())
    g.sink("sink", Record(), [src])
    job = Job(g)
    asyncio.run(job.run())
    assert pids == [job.channel_metrics()[0].pid] and pids[0] != os.getpid()


@pytest.mark.parametrize("crash", [9, 33])
def test_a_crash_then_restart_restores_across_a_process_group(crash: int) -> None:
    n = 600
    expected = reference(n)
    store = MemoryStore(keep_last=1000)
    first = Output()
    assert not run_until_crash(Job(build(n, first, "apart"), clock=VirtualClock(), checkpoints=store,
                                   checkpoint_period=0.35), crash * S // 10)
    states = store.latest_good()
    assert states is not None
    assert states.states["sums"]["parallel"] == {"region": "a", "width": 1, "key": None}
    second = Output()
    restarted = Job(build(n, second, "apart"), clock=VirtualClock(), checkpoints=store,
                    checkpoint_period=0.35)
    assert run_until_crash(restarted, None)
    assert restarted.restored_from is not None
    same(second.rows, expected)


def test_an_operator_failing_in_a_group_resets_its_consistent_region(tmp_path: Path) -> None:
    n = 600
    out = Output()
    job = Job(build(n, out, "together", sums=WindowSum({101, 377}, tmp_path), region=True),
              clock=VirtualClock(), checkpoints=MemoryStore(keep_last=1000))
    assert run_until_crash(job, None)
    assert job.regions[0].metrics.resets == 2
    assert job.parallel[0].restarts == 2
    same(out.rows, reference(n))


def test_a_group_worker_killed_is_restarted_from_the_last_checkpoint(tmp_path: Path) -> None:
    from riverbed.operators import FileSink

    n = 6000
    out_schema = Schema(sensor="int64", sum="int64", last="int64", total="int64")

    def graph(path: Path, placed: bool) -> Graph:
        g = Graph("gkill")
        src = g.source("readings", PacedReadings(n, per_tick=50, tick=S // 100), schema=SCHEMA)
        block = g.process("windows")
        s = g.operator("sums", WindowSum(),
                       [src.window("tumbling, count(5), partitioned", partition_by="sensor")])
        totals = g.operator("totals", RunningTotal(), [s], [out_schema])
        if placed:
            block.add(s, totals)
        else:
            g._parallel.remove(block)  # type: ignore[attr-defined]
        g.sink("out", FileSink(str(path), format="csv", transactional=True), [totals])
        return g

    ref_path = tmp_path / "reference.csv"
    asyncio.run(Job(graph(ref_path, False), checkpoints=MemoryStore(keep_last=1000),
                    checkpoint_period=0.1).run())
    expected = ref_path.read_bytes()
    assert expected.count(b"\n") == 7 * (n // 7 // 5)

    path = tmp_path / "out.csv"
    job = Job(graph(path, True), checkpoints=MemoryStore(keep_last=1000), checkpoint_period=0.1)
    killed: list[int] = []

    async def main() -> None:
        run = asyncio.ensure_future(job.run())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while not (job.last_checkpoint >= 2 and job.parallel[0].metrics()[0].tuples_in > 1200):
            assert loop.time() < deadline and not run.done()
            await asyncio.sleep(0.005)
        kill_worker(job, 0, killed)
        await run

    asyncio.run(main())
    assert_healed_once(job, 0, killed[0])
    got = path.read_bytes()
    assert sorted(got.splitlines()) == sorted(expected.splitlines())
    assert by_key_lines(got) == by_key_lines(expected)


def test_the_status_the_metrics_and_the_log_show_the_process() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from riverbed.runtime import StatusView
    from riverbed.runtime._prometheus import JobCollector

    events: list[tuple[str, dict[str, Any]]] = []

    class Log:
        def info(self, event: str, **fields: Any) -> None:
            events.append((event, fields))

        warning = info

    seen: dict[str, Any] = {}

    class Look(Operator):
        def on_tuple(self, tup: Any, port: int) -> None:
            if tup["seq"] == 100:
                seen["lines"] = StatusView(job, stream=io.StringIO()).render(0.0)
                registry = CollectorRegistry()
                registry.register(JobCollector(job))
                seen["prometheus"] = generate_latest(registry).decode()
                seen["metrics"] = [m.as_dict() for m in job.channel_metrics()]

    class Busy(Operator):
        def on_tuple(self, tup: Any, port: int) -> None:
            sum(range(20_000))  # CPU the process spends, which its metrics show
            self.submit(tup)

    g = Graph("shown")
    src = g.source("src", Count(300), schema=SCHEMA)
    with g.process("heavy"):
        p = g.operator("p", Busy(), [src])
    g.sink("look", Look(), [p])
    job = Job(g, logger=Log())
    asyncio.run(job.run())
    (m,) = seen["metrics"]
    assert m["region"] == "heavy" and m["kind"] == "process" and m["alive"]
    assert 0 < m["cpu_seconds"] <= job.channel_metrics()[0].cpu_seconds
    assert any(line.startswith("shown/process heavy[0]: pid=") for line in seen["lines"])
    assert 'riverbed_channel_alive{channel="0",job="shown"' in seen["prometheus"]
    started = [f for e, f in events if e == "channel_started"]
    assert [(f["region"], f["kind"], f["pid"]) for f in started] == [("heavy", "process", m["pid"])]


def test_a_graph_with_groups_runs_from_run_graph() -> None:
    out = Output()
    run_graph(build(100, out, "apart"), clock=VirtualClock())
    assert out.rows == reference(100)


@pytest.mark.parametrize("holder", ["delay", "throttle"])
@pytest.mark.parametrize("where", ["process", "parallel"])
def test_an_operator_holding_final_in_a_worker_lets_the_job_end(holder: str, where: str) -> None:
    """A Delay or Throttle releases its last tuples, and then final, from a timer: the worker
    must end it then, when no item comes any more (it waited for one, and the job hung)."""
    from riverbed.operators import Delay, Throttle

    g = Graph("held-final")
    src = g.source("src", Count(40), schema=Schema(sensor="int64", value="int64", seq="int64"))
    op = Delay(0.02) if holder == "delay" else Throttle(2000.0)
    if where == "process":
        with g.process("slow"):
            held = g.operator("hold", op, [src], [None])
    else:
        with g.parallel(2, partition_by="sensor"):
            held = g.operator("hold", op, [src], [None])
    out = Output()
    g.sink("out", out, [held])
    job = Job(g)

    async def main() -> None:  # (the bound fails the test instead of hanging the suite)
        await asyncio.wait_for(job.run(), 120)

    asyncio.run(main())
    assert sorted(t["seq"] for t in out.rows) == list(range(40))


def test_a_worker_dying_while_the_job_stops_says_the_job_ends_and_where_to_resume() -> None:
    """The region cannot reset once the job is stopping: the error must say the job ends and
    a run with the same store resumes (it said the region resets, which did not happen)."""
    from riverbed.runtime import JobError

    n = 6000
    g = Graph("stopkill")
    src = g.source("readings", PacedReadings(n, per_tick=50, tick=S // 100), schema=SCHEMA)
    with g.process("windows"):
        s = g.operator("sums", WindowSum(),
                       [src.window("tumbling, count(5), partitioned", partition_by="sensor")])
    g.sink("out", Output(), [s])
    job = Job(g, checkpoints=MemoryStore(keep_last=1000), checkpoint_period=0.1)
    killed: list[int] = []

    async def main() -> None:
        run = asyncio.ensure_future(job.run())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while not job.last_checkpoint >= 2:
            assert loop.time() < deadline and not run.done()
            await asyncio.sleep(0.005)
        job.stop()
        kill_worker(job, 0, killed)
        await run

    with pytest.raises(JobError, match=r"ended without finishing \(killed by signal 9\); the job "
                                       r"was stopping, so it ends here without draining; run "
                                       r"again with the same checkpoint directory to resume "
                                       r"from checkpoint \d+"):
        asyncio.run(main())
