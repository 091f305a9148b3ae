"""Chained keyed stages cut into micro-batches the way Spark cuts them, without Spark.

Source rows are routed to the first stage's key groups; each group runs a
micro-batch (`host_group`) and sorts its output into one bundle per group of
the next stage (`next_stage_rows`); each of those groups merges what every
group before it sent (`host_merged_group`); the last stage's bundles go to
the driver stage. States are kept between batches as Spark keeps them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from riverbed.graph import FrozenGraph, Graph, Operator, Punct, Schema, Source
from riverbed.operators import Aggregate, Count, FileSink, Functor, Sum
from riverbed.run import load_graph
from riverbed.runtime import Job, VirtualClock, run_graph, run_virtual
from riverbed.spark_bridge import TranslationError
from riverbed.spark_bridge._deploy import stage_hosts
from riverbed.spark_bridge._keyed import KEYED_OUT_DDL, bundle_rows, host_group
from riverbed.spark_bridge._plan import plan
from riverbed.spark_bridge._source import arrow_batch, route_of, source_rows
from riverbed.spark_bridge._stages import host_merged_group, next_stage_rows
from riverbed.testing import ListSink, ListSource
from riverbed.windows import EventType, StreamWindowEvent
from tests.spark_fakes import FakeBatch

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _bridge(graph: FrozenGraph, *, groups: int = 2, bundle: int = 16, rounds: int = 2,
            labels: tuple[int, ...] = (5, 2, 7)) -> Any:
    """Runs ``graph``'s keyed stages batch by batch; returns the driver stage."""
    p = plan(graph, "keyed", groups=groups)
    hosts, stage = stage_hosts(graph, p, list(labels[:groups]), None)
    rows = list(source_rows(graph, p.sources[0], 0,
                            route=route_of(graph, p.keyed, p.groups, bundle, list(labels[:p.groups]))))
    states: list[dict[int, bytes]] = [{} for _ in hosts]
    per_batch = rounds * p.groups
    for batch_id, start in enumerate(range(0, len(rows), per_batch)):
        by_group: dict[int, list[tuple[Any, ...]]] = {}
        for row in rows[start:start + per_batch]:
            by_group.setdefault(row[5], []).append(row[:5])
        out: list[tuple[Any, ...]] = []
        for n, (hosted, nxt) in enumerate(hosts):
            produced_rows: list[tuple[Any, ...]] = []
            for label, group_rows in by_group.items():
                if n == 0:
                    tail: list[tuple[bytes, int]] = []
                    produced, states[n][label] = host_group(hosted, None, (label,), group_rows,
                                                            states[n].get(label), tail=tail)
                    last = tail[-1] if tail else None
                else:
                    produced, states[n][label], last = host_merged_group(
                        hosted, (label,), group_rows, states[n].get(label))
                produced_rows += (next_stage_rows(produced, label, nxt, last) if nxt is not None
                                  else bundle_rows(produced, label))
            if nxt is None:
                out = produced_rows
                break
            by_group = {}  # what Spark's shuffle does between the stages: by destination label
            for row in produced_rows:
                by_group.setdefault(row[5], []).append((*row[:5], row[6]))
        stage.process(FakeBatch(arrow_batch(out, KEYED_OUT_DDL)), batch_id)
    return stage


def _runtime(graph: FrozenGraph) -> list[Any]:
    clock = VirtualClock()
    job = Job(graph, clock=clock)
    run_virtual(job.run(), clock)
    return list(job.runners["sink"].op.items)  # type: ignore[attr-defined]


def _sites(tmp_path: Path, name: str, **params: Any) -> tuple[FrozenGraph, Path]:
    out = tmp_path / f"{name}.csv"
    return load_graph(EXAMPLES / "sensor_sites.py", {**params, "out": str(out)}), out


def test_sensor_sites_plans_two_stages_keyed_by_sensor_then_site(tmp_path: Path) -> None:
    graph, _ = _sites(tmp_path, "plan")
    p = plan(graph, groups=2)
    assert p.mode == "keyed"
    assert [(s.members, s.entry, s.groups) for s in p.stages] == [
        (["panes", "spread"], ("sensors", 0), 2), (["sites"], ("spread", 0), 2)]
    assert p.driver == ["file"]
    text = p.explain()
    assert "2 keyed stages on the executors" in text
    assert "sites [executors, stage 2]: keyed stage 2: repartitioned by its key: groupBy(hash(site)" in text
    assert "file [driver]: " in text and "why: a sink" in text
    assert "sensors [feeder]" in text


@pytest.mark.parametrize(("groups", "rounds", "bundle"), [(2, 1, 16), (2, 3, 64), (3, 2, 40)])
def test_sensor_sites_two_stages_write_the_runtimes_file(tmp_path: Path, groups: int, rounds: int,
                                                        bundle: int) -> None:
    params = {"sites": 3, "per_site": 4, "seconds": 3}
    ref_graph, ref = _sites(tmp_path, "runtime", **params)
    run_graph(ref_graph, clock=VirtualClock())
    graph, out = _sites(tmp_path, "bridge", **params)
    stage = _bridge(graph, groups=groups, rounds=rounds, bundle=bundle)
    stage.close()
    assert len(ref.read_text().splitlines()) == 18  # 60 rounds: 6 panes a sensor, 6 rounds a site
    assert out.read_text() == ref.read_text()


class _Paced(Source):
    """Readings every 0.25 s from 0.4 s on: the first comes after the job's start."""

    replayable = True

    def __init__(self, n: int) -> None:
        self.n, self.i = n, 0

    async def run(self) -> None:
        ctx: Any = self.context
        while self.i < self.n and not ctx.stopping:
            t = 400_000_000 + self.i * 250_000_000
            await ctx.sleep_until(t)
            self.submit({"seq": self.i, "at_ms": t // 1_000_000})
            self.i += 1

    def snapshot(self) -> Any:
        return self.i

    def restore(self, state: Any) -> None:
        self.i = state or 0


@pytest.mark.parametrize("clause", ["tumbling, time(1)", "sliding, time(2), time(1)"])
def test_an_unpartitioned_time_window_starts_with_the_job_not_the_first_reading(
        tmp_path: Path, clause: str) -> None:
    # The key group started its clock at the first row's time: panes [0.4, 1.4) instead of
    # [0, 1), and a sliding window's triggers at x.4 s.
    def graph(out: Path) -> FrozenGraph:
        g = Graph("phase")
        src = g.source("src", _Paced(16), schema=Schema(seq="int64", at_ms="int64"))
        agg = g.operator("agg", Aggregate({"n": Count(), "last": Sum("at_ms")}),
                         [src.window(clause)])
        g.sink("sink", FileSink(str(out), format="csv"), [agg])
        return g.freeze()

    run_graph(graph(tmp_path / "runtime.csv"), clock=VirtualClock())
    stage = _bridge(graph(tmp_path / "bridge.csv"), groups=1)
    stage.close()
    assert (tmp_path / "runtime.csv").read_text().splitlines()[:2] == (
        ["3,1950", "4,6100"] if clause.startswith("tumbling") else ["3,1950", "7,8050"])
    assert (tmp_path / "bridge.csv").read_text() == (tmp_path / "runtime.csv").read_text()


@pytest.mark.parametrize("delay", [0.0, 1.0])
def test_a_delayed_file_read_in_parts_keeps_each_keys_order(tmp_path: Path, delay: float) -> None:
    # Every part began with the source's start mark (0) and its first bundle, ordered by that
    # mark, went ahead of the part before's later ones (stamped at the delay): tuples out of
    # file order, or final before them and a failed query. Only the source's start has it.
    from riverbed.operators import FileSource, First, Last
    from riverbed.spark_bridge._reads import PART_BITS, part_items, plan_parts, read_plan
    from riverbed.spark_bridge._source import item_rows

    (tmp_path / "in.csv").write_text("".join(f"k{i % 3},{i}\n" for i in range(30_000)))

    def graph(out: Path) -> FrozenGraph:
        g = Graph("parts")
        src = g.source("src", FileSource(str(tmp_path / "in.csv"), init_delay=delay),
                       schema=Schema(k="rstring", v="int64"))
        agg = g.operator("agg", Aggregate({"first": First("v"), "last": Last("v"), "n": Count()},
                                          copy=("k",)),
                         [src.window("tumbling, count(1000), partitioned", partition_by="k")])
        g.sink("sink", FileSink(str(out)), [agg])
        return g.freeze()

    run_graph(graph(tmp_path / "runtime.csv"), clock=VirtualClock())
    fg, labels = graph(tmp_path / "bridge.csv"), [5, 2]
    p = plan(fg, "keyed", groups=2)
    rp = read_plan(fg, p.sources[0], only_source=True)
    assert not isinstance(rp, str)
    parts = plan_parts(fg, rp, records=16_000, tasks=2)
    assert len(parts) > 2
    route = route_of(fg, p.keyed, p.groups, 0, labels)
    ((hosted, _),), stage = stage_hosts(fg, p, labels, None)
    states: dict[int, bytes] = {}
    for batch_id, start in enumerate(range(0, len(parts), 2)):  # a micro-batch: a part a task
        by_group: dict[int, list[tuple[Any, ...]]] = {}
        for k in range(start, min(start + 2, len(parts))):
            for row in item_rows(part_items(fg, rp, parts[k]), 0, route=route, seq0=k << PART_BITS):
                by_group.setdefault(row[5], []).append(row[:5])
        out: list[tuple[Any, ...]] = []
        for label, group_rows in by_group.items():
            produced, states[label] = host_group(hosted, None, (label,), group_rows,
                                                 states.get(label), tail=[])
            out += bundle_rows(produced, label)
        stage.process(FakeBatch(arrow_batch(out, KEYED_OUT_DDL)), batch_id)
    stage.close()
    runtime = (tmp_path / "runtime.csv").read_text().splitlines()
    assert len(runtime) == 30
    assert sorted((tmp_path / "bridge.csv").read_text().splitlines()) == sorted(runtime)


def test_explain_says_an_unpartitioned_window_has_no_key(tmp_path: Path) -> None:
    g = Graph("nokey")
    src = g.source("src", _Paced(4), schema=Schema(seq="int64", at_ms="int64"))
    agg = g.operator("agg", Aggregate({"n": Count()}), [src.window("tumbling, time(1)")])
    g.sink("sink", FileSink(str(tmp_path / "o.csv")), [agg])
    text = plan(g.freeze(), "keyed", groups=2).explain()
    assert "groupBy(a constant (no key: one group))" in text and "key function" not in text


class _Marked(Source):
    """Readings of five sensors with a window mark after every sixth."""

    replayable = True

    def generate(self) -> Any:
        for i in range(30):
            yield {"sensor": "abcde"[(i * 7) % 5], "v": i}
            if i % 6 == 5:
                yield Punct.WINDOW


def test_a_sink_cutting_files_at_marks_gets_each_groups_panes_apart(tmp_path: Path) -> None:
    # What one mark released in two key groups alternated row by row (pane, pane, mark, mark):
    # a file per pane in the runtime, two groups' panes in one file here.
    def graph(out: Path) -> FrozenGraph:
        g = Graph("files")
        src = g.source("src", _Marked(), schema=Schema(sensor="rstring", v="int64"))
        agg = g.operator("agg", Aggregate({"n": Count(), "total": Sum("v")}, copy=("sensor",)),
                         [src.window("tumbling, punct(), partitioned", partition_by="sensor")])
        g.sink("sink", FileSink(str(out / "f{id}.csv"), close_mode="punct"), [agg])
        return g.freeze()

    def files(where: Path) -> list[str]:
        return sorted(f.read_text() for f in where.iterdir())

    (tmp_path / "runtime").mkdir()
    (tmp_path / "bridge").mkdir()
    run_graph(graph(tmp_path / "runtime"), clock=VirtualClock())
    _bridge(graph(tmp_path / "bridge"), groups=2).close()
    assert len(files(tmp_path / "runtime")) == 25  # five marks, five panes each
    assert files(tmp_path / "bridge") == files(tmp_path / "runtime")


def _rekeyed(items: list[Any], second: str, *, preserving: bool) -> FrozenGraph:
    """Stage 1 keyed by k; stage 2 by ``second`` (a computed attribute j, or none)."""
    g = Graph("rekeyed")
    s = g.source("src", ListSource(items))
    if preserving:  # each group forwards the copies of the source's marks
        a = g.operator("each", _Each(), [s.window("sliding, count(2), count(2), partitioned",
                                                  partition_by="k")])
    else:
        a = g.operator("a", Aggregate({"s": Sum("v"), "n": Count()}, copy=("k",)),
                       [s.window("tumbling, count(2), partitioned", partition_by="k")])
        a = g.operator("j", Functor(output={"j": lambda t: t["s"] % 3}), [a],
                       [Schema(k="int64", s="int64", n="int64", j="int64")])
    b = g.operator("b", Aggregate({"s": Sum("s"), "n": Count()}, copy=("j",)),
                   [a.window("tumbling, count(3), partitioned" if second else "tumbling, count(3)",
                             partition_by=second or None)])
    g.sink("sink", ListSink(), [b])
    return g.freeze()


class _Each(Operator):
    """Submits each trigger's sum, keeping j; forwards window marks (copies, one per group).
    (A mark flushing tumbling windows in several groups at once would raise their events group
    by group: see decisions.md, "Spark: chained keyed stages".)"""

    window_punctuation = "preserving"
    window_events = frozenset({EventType.TRIGGER})

    def on_window_event(self, event: StreamWindowEvent[Any], port: int) -> None:
        if event.tuples:
            self.submit({"k": event.partition, "j": event.tuples[0]["j"],
                         "s": sum(t["v"] for t in event.tuples)})


@pytest.mark.parametrize("preserving", [False, True])
@pytest.mark.parametrize("second", ["j", ""])
@pytest.mark.parametrize("groups", [2, 3])
def test_a_rekeyed_second_stage_gives_the_runtimes_items_marks_and_final(
        preserving: bool, second: str, groups: int) -> None:
    items: list[Any] = [{"k": i % 5, "v": i, "j": i % 3} for i in range(90)]
    items[40:40] = [Punct.WINDOW]
    items[71:71] = [Punct.WINDOW]
    want = _runtime(_rekeyed(items, second, preserving=preserving))
    stage = _bridge(_rekeyed(items, second, preserving=preserving), groups=groups, bundle=7)
    p = plan(_rekeyed(items, second, preserving=preserving), "keyed", groups=groups)
    assert len(p.stages) == 2 and p.stages[1].groups == (groups if second else 1)
    got = list(stage.operator("sink").items)
    assert [t for t in want if isinstance(t, dict)] and got == want
    assert got[-1] is Punct.FINAL and Punct.WINDOW in got  # final merged once; marks went through


def test_a_punct_window_fed_by_groups_making_their_own_marks_is_refused() -> None:
    g = Graph("punct")
    s = g.source("src", ListSource([]))
    a = g.operator("a", Aggregate({"n": Count()}, copy=("k",)),
                   [s.window("tumbling, count(2), partitioned", partition_by="k")])
    g.operator("b", Aggregate({"n": Count()}), [a.window("tumbling, punct(), partitioned",
                                                         partition_by="n")])
    with pytest.raises(TranslationError, match=r"operator 'b': cannot run keyed: a punct\(\) window "
                                               r"after a keyed stage whose groups make their own"):
        plan(g.freeze(), "keyed", groups=2)
    assert plan(g.freeze(), groups=2).mode == "driver"
    assert "why: the whole graph runs in the driver (b: a punct() window" in plan(g.freeze()).explain()


def test_join_exposes_its_equality_keys_as_functions_of_a_tuple() -> None:
    from riverbed.operators import Join

    keys = Join(equality_lhs=["room", "floor"], equality_rhs=["r", "f"]).equality_keys
    assert keys is not None
    assert keys[0]({"room": 1, "floor": 2}) == keys[1]({"r": 1, "f": 2}) == (1, 2)
    assert Join().equality_keys is None


def _join_bridge(graph: FrozenGraph, *, groups: int, rows_per_batch: int) -> Any:
    """A keyed Join batch by batch as deploy builds it: the sources merged in order (the
    feeder), routed per row (the router), each group's rows hosted, the bundles to the driver."""
    import heapq

    import pandas as pd

    from riverbed.spark_bridge._deploy import _join_keys
    from riverbed.spark_bridge._stages import host_joined_group, make_join_router

    p = plan(graph, "keyed", groups=groups)
    labels = [5, 2, 7][:groups]
    hosts, stage = stage_hosts(graph, p, labels, None)
    hosted, nxt = hosts[0]
    assert nxt is None
    merged = list(heapq.merge(*[[(*r, i) for r in source_rows(graph, name, i)]
                                for i, name in enumerate(p.sources)], key=lambda r: r[0]))
    route = make_join_router(_join_keys(graph, p), labels)
    states: dict[int, bytes] = {}
    for batch_id, start in enumerate(range(0, len(merged), rows_per_batch)):
        frame = pd.DataFrame(merged[start:start + rows_per_batch],
                             columns=["ord", "kind", "time", "value", "data", "stream"])
        by_group: dict[int, list[tuple[Any, ...]]] = {}
        for routed in route(iter([frame])):
            for row in routed.itertuples(index=False):
                by_group.setdefault(int(row.grp), []).append(tuple(row)[:6])
        out: list[tuple[Any, ...]] = []
        for label, rows in by_group.items():
            produced, states[label], _tail = host_joined_group(hosted, (label,), rows, states.get(label))
            out += bundle_rows(produced, label)
        stage.process(FakeBatch(arrow_batch(out, KEYED_OUT_DDL)), batch_id)
    stage.close()
    return p


@pytest.mark.parametrize(("groups", "rows_per_batch"), [(2, 7), (3, 40)])
def test_sensor_join_keyed_by_room_writes_the_runtimes_file(tmp_path: Path, groups: int,
                                                            rows_per_batch: int) -> None:
    params = {"seconds": 6, "rooms": 4}
    example = EXAMPLES / "sensor_join.py"
    run_graph(load_graph(example, {**params, "out": str(tmp_path / "ref.csv")}), clock=VirtualClock())
    p = _join_bridge(load_graph(example, {**params, "out": str(tmp_path / "out.csv")}),
                     groups=groups, rows_per_batch=rows_per_batch)
    assert (p.keyed, p.keyed_chain, p.groups, p.driver) == ("join", ["comfort"], groups, ["file"])
    assert "join [executors, stage 1]: keyed stage 1: a Join keyed by its equality keys" in p.explain()
    ref = (tmp_path / "ref.csv").read_text()
    assert len(ref.splitlines()) > 100
    assert (tmp_path / "out.csv").read_text() == ref


def test_joins_that_a_key_group_cannot_hold_alone_run_in_the_driver() -> None:
    from riverbed.operators import Join

    def graph(algorithm: str = "inner", window: str = "sliding, time(2)", keys: bool = True) -> Any:
        g = Graph("j")
        a = g.source("a", ListSource([]))
        b = g.source("b", ListSource([]))
        eq = {"equality_lhs": "k", "equality_rhs": "k"} if keys else {}
        j = g.operator("j", Join(algorithm=algorithm, **eq), [a.window(window), b.window("sliding, time(2)")])
        g.sink("sink", ListSink(), [j])
        return g.freeze()

    assert plan(graph(), groups=2).mode == "keyed"
    for g, why in [(graph("leftOuter"), "a leftOuter Join outputs unmatched tuples when time evicts"),
                   (graph(window="sliding, count(3)"), "its port 0 window 'sliding, count(3), count(1)'"),
                   (graph(keys=False), "a Join without equality keys")]:
        p = plan(g, groups=2)
        assert p.mode == "driver" and why in (p.why_not_keyed or ""), p.why_not_keyed
        assert f"why: the whole graph runs in the driver (j: {why}" in p.explain()
