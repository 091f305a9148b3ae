"""Runs of tuples into tumbling count windows fed in batches cut before each filling tuple
(`_runs`): the same rows, in the same order, as feeding each tuple alone, at a fraction of
the host calls."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from riverbed.core import SyncGraph
from riverbed.graph import FrozenGraph, Graph, Operator, Punct, Schema, Watermark
from riverbed.operators import Aggregate, Average, Count, Functor, Max, Min, Sum
from riverbed.spark_bridge import _keyed, _stages
from riverbed.spark_bridge._deploy import stage_hosts
from riverbed.spark_bridge._keyed import host_group
from riverbed.spark_bridge._plan import plan
from riverbed.spark_bridge._runs import FillSplitter, SilentBatchError, feed_cut
from riverbed.spark_bridge._source import route_of, source_rows
from riverbed.spark_bridge._stages import host_merged_group, next_stage_rows
from riverbed.testing import ListSink, ListSource
from riverbed.windows import EventType, StreamWindowEvent

READING = Schema(sensor="int64", site="int64", temp="float64", ts="int64")


def _sites(sensors: int = 60, sites: int = 4, rounds: int = 40, pane: int = 10) -> FrozenGraph:
    rng = random.Random(3)
    items = [{"sensor": s, "site": s % sites, "temp": round(20 + rng.gauss(0, 1), 3), "ts": r}
             for r in range(rounds) for s in range(sensors)]
    g = Graph("sites")
    src = g.source("src", ListSource(items), schema=READING)
    panes = g.operator("panes", Aggregate({"mean": Average("temp"), "low": Min("temp"), "high": Max("temp"),
                                           "ts": Max("ts")}, copy=("sensor", "site")),
                       [src.window(f"tumbling, count({pane}), partitioned", partition_by="sensor")])
    spread = g.operator("spread", Functor(output={"spread": lambda t: t["high"] - t["low"]}), [panes])
    per = g.operator("per", Aggregate({"n": Count(), "mean": Average("mean"), "w": Max("spread")},
                                      copy=("site",)),
                     [spread.window(f"tumbling, count({sensors // sites}), partitioned",
                                    partition_by="site")])
    g.sink("sink", ListSink(), [per])
    return g.freeze()


def _stage_rows(graph: FrozenGraph, *, batch_rows: int) -> list[Any]:
    """Every row each stage's groups produce, batch by batch (state kept between batches)."""
    p = plan(graph, "keyed", groups=2)
    hosts, _ = stage_hosts(graph, p, [0, 1], None)
    rows = list(source_rows(graph, p.sources[0], 0, route=route_of(graph, p.keyed, 2, 64, [0, 1])))
    states: list[dict[int, bytes]] = [{}, {}]
    produced_all: list[Any] = []
    for start in range(0, len(rows), batch_rows):
        by_group: dict[int, list[Any]] = {}
        for row in rows[start:start + batch_rows]:
            by_group.setdefault(row[5], []).append(row[:5])
        for n, (hosted, nxt) in enumerate(hosts):
            nxt_rows: list[Any] = []
            for label, group_rows in sorted(by_group.items()):
                if n == 0:
                    tail: list[tuple[bytes, int]] = []
                    out, states[n][label] = host_group(hosted, None, (label,), group_rows,
                                                       states[n].get(label), tail=tail)
                    last = tail[-1] if tail else None
                else:
                    out, states[n][label], last = host_merged_group(hosted, (label,), group_rows,
                                                                    states[n].get(label))
                produced_all.append((n, label, out))
                if nxt is not None:
                    nxt_rows += next_stage_rows(out, label, nxt, last)
            by_group = {}
            for row in nxt_rows:
                by_group.setdefault(row[5], []).append((*row[:5], row[6]))
    return produced_all


class _Feeds:
    """Counts the host's feed calls carrying tuples, and the tuples they carry (`install`)."""

    def __init__(self) -> None:
        self.calls = self.tuples = 0

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real = SyncGraph.feed

        def feed(host: SyncGraph, operator: str, port: int, item: Any) -> None:
            if type(item) is list:
                self.calls += 1
                self.tuples += len(item)
            real(host, operator, port, item)

        monkeypatch.setattr(SyncGraph, "feed", feed)
        real_marked = SyncGraph.feed_marked

        def feed_marked(host: SyncGraph, operator: str, port: int, batch: Any,
                        controls: Any = None, **kw: Any) -> Any:
            # As the feed calls it stands for: one a tuple (one_by_one), else one a run.
            window, final = Punct.WINDOW, Punct.FINAL
            tuples = [x for x in batch if x is not window and x is not final and type(x) is not Watermark]
            if kw.get("one_by_one"):
                self.calls += len(tuples)
            elif tuples:
                runs, previous = 0, False
                for x in batch:
                    is_tuple = x is not window and x is not final and type(x) is not Watermark
                    runs += is_tuple and not previous
                    previous = is_tuple
                self.calls += runs
            self.tuples += len(tuples)
            return real_marked(host, operator, port, batch, controls, **kw)

        monkeypatch.setattr(SyncGraph, "feed_marked", feed_marked)


@pytest.mark.parametrize(("batch_rows", "marked"), [(6, True), (40, True), (40, False)])
def test_cut_runs_give_every_stage_the_rows_of_a_tuple_at_a_time_in_a_fraction_of_the_calls(
        monkeypatch: pytest.MonkeyPatch, batch_rows: int, marked: bool) -> None:
    graph = _sites()
    feeds = _Feeds()
    feeds.install(monkeypatch)
    if not marked:  # each filling tuple fed alone (its outputs not cut out of a whole run's)
        real = FillSplitter.of.__func__  # type: ignore[attr-defined]

        def unmarked(cls: type, *args: Any) -> Any:
            made = real(cls, *args)
            if made is not None:
                made.marked = False
            return made

        monkeypatch.setattr(FillSplitter, "of", classmethod(unmarked))
    cut = _stage_rows(graph, batch_rows=batch_rows)
    cut_calls, cut_tuples = feeds.calls, feeds.tuples
    with monkeypatch.context() as m:  # the splitter off: each tuple fed alone, as before
        m.setattr(_keyed.FillSplitter, "of", classmethod(lambda cls, *a: None))
        feeds.calls = feeds.tuples = 0
        alone = _stage_rows(graph, batch_rows=batch_rows)
    assert sum(len(out) for *_, out in alone) > 400  # panes and site rows, with their marks
    assert cut == alone  # the same rows (order keys included), group by group, batch by batch
    assert feeds.calls == feeds.tuples == cut_tuples  # alone: one call a tuple
    # 2400 readings, a pane filled every 10th of a sensor's; 240 panes, a site's filled every 15th
    assert cut_tuples == 2400 + 240
    if marked:  # stage 1: a call per run (a round of a group's sensors, 80, and where batches cut
        # one); stage 2: one per round of panes (the marks between panes do not end its runs)
        assert cut_calls <= 100, cut_calls
    else:  # and one per filling tuple
        assert cut_calls < (240 + 16) + 2 * 40 * 2 + 40 * 2 * 2, cut_calls


@pytest.mark.parametrize(("marked", "message"), [
    (False, "8 tuples fed in one batch, none filling its tumbling count window, raised 8 items"),
    (True, "0 tuples filling their tumbling count window raised 4 window marks"),
])
def test_a_batch_that_raises_what_the_splitter_did_not_foresee_stops_the_stage(
        marked: bool, message: str) -> None:
    graph = _sites(sensors=4, sites=2, rounds=3, pane=2)
    host = SyncGraph(graph, ["panes", "spread"])
    splitter = FillSplitter.of(graph, host, "panes", ["spread"])
    assert splitter is not None and splitter.marked  # an Aggregate, then a Functor
    splitter.marked = marked
    splitter.size = 99  # wrong on purpose: the second reading of a sensor fills its pane
    readings = [{"sensor": s % 4, "site": s % 2, "temp": 1.0, "ts": 0} for s in range(8)]
    with pytest.raises(SilentBatchError, match=message):
        feed_cut(host, ("src", 0), splitter, readings, ord_of=lambda j: b"", taken=lambda o: None,
                 where="panes/0")


class _Inserts(Operator):
    window_events = frozenset({EventType.INSERTION, EventType.EVICTION})

    def on_window_event(self, event: StreamWindowEvent[Any], port: int) -> None:
        self.submit({"n": len(event.tuples)})


@pytest.mark.parametrize(("clause", "op", "error_port"), [
    ("sliding, count(4), count(2), partitioned", "agg", False),  # its trigger counter is not public
    ("tumbling, count(4), partitioned", "inserts", False),  # answers every insertion
    ("tumbling, count(4), partitioned", "agg", True),  # routes a bad tuple at once
    ("tumbling, time(4), partitioned", "agg", False),
])
def test_no_cut_where_a_tuple_other_than_a_filling_one_can_raise_something(
        clause: str, op: str, error_port: bool) -> None:
    g = Graph("nocut")
    src = g.source("src", ListSource([]), schema=Schema(k="int64", v="int64"))
    operator = _Inserts() if op == "inserts" else Aggregate({"s": Sum("v")}, copy=("k",))
    w = g.operator("w", operator, [src.window(clause, partition_by="k")], error_port=error_port)
    g.sink("sink", ListSink(), [w])
    graph = g.freeze()
    assert FillSplitter.of(graph, SyncGraph(graph, ["w"]), "w") is None


def test_the_later_stage_cuts_its_runs_too(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[str] = []
    real = _stages.FillSplitter.of.__func__  # type: ignore[attr-defined]

    def of(cls: type, graph: FrozenGraph, host: SyncGraph, member: str, after: Any = ()) -> Any:
        made.append(member)
        return real(cls, graph, host, member, after)

    monkeypatch.setattr(FillSplitter, "of", classmethod(of))
    _stage_rows(_sites(rounds=20), batch_rows=40)
    assert {"panes", "per"} <= set(made)


def test_the_sensor_sites_example_runs_both_stages_cut(tmp_path: Path) -> None:
    from riverbed.run import load_graph

    graph = load_graph(Path(__file__).resolve().parents[1] / "examples" / "sensor_sites.py",
                       {"out": str(tmp_path / "x.csv")})
    host = SyncGraph(graph, ["panes", "spread"])
    assert FillSplitter.of(graph, host, "panes") is not None
    assert FillSplitter.of(graph, SyncGraph(graph, ["sites"]), "sites") is not None
