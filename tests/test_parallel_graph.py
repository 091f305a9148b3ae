"""`Graph.parallel`: which operators form a region, its width, and the rules `freeze` checks."""

from __future__ import annotations

import os
import re
from typing import Any

import pytest

from riverbed.graph import Graph, GraphError, GraphValidationError, Operator, ParallelRegion, Schema, Source

READING = Schema(sensor="rstring", value="float64")


class _Src(Source):
    replayable = True

    def generate(self) -> Any:
        return iter(())


class _Pass(Operator):
    def on_tuple(self, tup: Any, port: int) -> None:
        self.submit(tup)


def _graph(params: dict[str, Any] | None = None) -> tuple[Graph, Any]:
    g = Graph("p", params)
    return g, g.source("src", _Src(), schema=READING)


def _rules(exc: GraphValidationError) -> list[tuple[str | None, str]]:
    return [(e.operator, e.rule) for e in exc.errors]


def test_the_operators_added_inside_the_block_form_the_region() -> None:
    g, src = _graph()
    with g.parallel(3, partition_by="sensor", name="split"):
        a = g.operator("a", _Pass(), [src.window("tumbling, count(2), partitioned",
                                                 partition_by="sensor")], [READING])
        b = g.operator("b", _Pass(), [a], [READING])
    g.sink("out", _Pass(), [b])
    frozen = g.freeze()
    assert frozen.parallel == (ParallelRegion("split", 3, "sensor", ("a", "b")),)
    assert frozen.parallel_of("b") is frozen.parallel[0]
    assert frozen.parallel_of("out") is None and frozen.parallel_of("src") is None


def test_width_defaults_to_the_width_parameter_then_the_cpu_count() -> None:
    g, src = _graph({"width": "4"})
    with g.parallel() as block:
        g.operator("a", _Pass(), [src])
    assert block.width == 4
    g, src = _graph()
    with g.parallel() as block:
        g.operator("a", _Pass(), [src])
    assert block.width == (os.cpu_count() or 1)


@pytest.mark.parametrize("width", [0, -1, 1000, 2.5, True, "two"])
def test_a_bad_width_is_refused_at_once(width: Any) -> None:
    g, _ = _graph()
    with pytest.raises(GraphError, match=r"width=.*expected an int from 1 to 256") as info:
        g.parallel(width)
    assert info.value.rule == "parallel"


def test_an_empty_block_and_nested_blocks_are_refused() -> None:
    g, src = _graph()
    with pytest.raises(GraphError, match="holds no operator"), g.parallel(2):
        pass
    with pytest.raises(GraphError, match="do not nest"), g.parallel(2):
        g.operator("a", _Pass(), [src])
        with g.parallel(2):
            pass


def test_a_window_partitioned_by_another_key_is_refused_naming_the_operator() -> None:
    g, src = _graph()
    with g.parallel(2, partition_by="value"):
        g.operator("a", _Pass(), [src.window("tumbling, count(2), partitioned", partition_by="sensor")])
    with pytest.raises(GraphValidationError, match=r"partitioned by 'sensor' but parallel region "
                                                   r"'parallel0' splits by 'value'") as info:
        g.freeze()
    assert _rules(info.value) == [("a", "parallel")]


def test_a_round_robin_region_refuses_a_partitioned_window() -> None:
    g, src = _graph()
    with g.parallel(2):
        g.operator("a", _Pass(), [src.window("tumbling, count(2), partitioned", partition_by="sensor")])
    with pytest.raises(GraphValidationError, match=r"partition_by='sensor'"):
        g.freeze()


def test_an_unknown_key_attribute_is_refused() -> None:
    g, src = _graph()
    with g.parallel(2, partition_by="room"):
        g.operator("a", _Pass(), [src])
    with pytest.raises(GraphValidationError) as info:
        g.freeze()
    assert _rules(info.value) == [("a", "unknown-attribute")]


def test_a_region_must_be_connected_and_not_left_and_reentered() -> None:
    g, src = _graph()
    with g.parallel(2, name="r"):
        g.operator("a", _Pass(), [src])
        g.operator("b", _Pass(), [src])
    with pytest.raises(GraphValidationError, match="is not connected") as info:
        g.freeze()
    assert ("b", "parallel") in _rules(info.value)
    g, src = _graph()
    block = g.parallel(2, name="r")
    with block:
        a = g.operator("a", _Pass(), [src])
    out = g.operator("outside", _Pass(), [a])
    with block:  # the same region again: b joins it, fed from outside what left it
        g.operator("b", _Pass(), [a, out])
    with pytest.raises(GraphValidationError, match="leads back into it") as info:
        g.freeze()
    assert _rules(info.value) == [("outside", "parallel")]


def test_a_region_inside_a_consistent_region_is_accepted() -> None:
    g, src = _graph()
    g.consistent_region(src, period=1.0)
    with g.parallel(2):
        a = g.operator("a", _Pass(), [src])
        g.operator("b", _Pass(), [a])
    frozen = g.freeze()
    assert frozen.parallel[0].members == ("a", "b")
    assert set(frozen.regions[0].members) >= {"a", "b"}


def test_a_region_straddling_a_consistent_region_border_is_refused() -> None:
    g, src = _graph()
    g.consistent_region(src, period=1.0)
    with g.parallel(2):
        a = g.operator("a", _Pass(), [src])
        g.operator("b", _Pass(), [a])
    g.autonomous("b")  # b leaves the consistent region, a stays in it
    with pytest.raises(GraphValidationError, match="straddles consistent regions") as info:
        g.freeze()
    assert "'b' (none)" in str(info.value)


def test_two_regions_with_one_name_are_refused() -> None:
    g, src = _graph()
    with g.parallel(2, name="r"):
        a = g.operator("a", _Pass(), [src])
    with g.parallel(2, name="r"):
        g.operator("b", _Pass(), [a])
    with pytest.raises(GraphValidationError, match="two parallel regions are named 'r'"):
        g.freeze()


def test_operators_added_earlier_join_a_region_by_name_or_stream() -> None:
    g, src = _graph()
    a = g.operator("a", _Pass(), [src])
    g.operator("b", _Pass(), [a])
    g.parallel(2, name="r").add(a, "b")
    assert g.freeze().parallel[0].members == ("a", "b")
    g.parallel(2, name="s").add("b", "nothing")
    with pytest.raises(GraphValidationError) as info:
        g.freeze()
    assert [str(e) for e in info.value.errors] == [
        "operator 'b': is in parallel regions 'r' and 's': an operator runs in one [parallel]",
        "operator 'nothing': parallel region 's': no such operator in the graph [parallel]"]


@pytest.mark.parametrize(("clause", "flavor", "why"), [
    ("sliding, count(4), count(1), partitioned, partitionCount(2)", "java", "counts across partitions"),
    ("tumbling, time(2), partitioned", "cpp", "timer flushes the window's partitions together"),
    ("tumbling, punct(), partitioned", "cpp", "one empty-window event"),
    ("sliding, count(5), delta(value, 1.0), partitioned", "java", "shares one delta trigger"),
])
def test_a_window_whose_events_span_partitions_is_refused_beyond_width_1(clause: str, flavor: str,
                                                                         why: str) -> None:
    for width in (1, 2):
        g, src = _graph()
        with g.parallel(width, partition_by="sensor"):
            g.operator("w", _Pass(), [src.window(clause, partition_by="sensor", flavor=flavor)])
        if width == 1:
            assert g.freeze().parallel[0].width == 1
            continue
        with pytest.raises(GraphValidationError, match=why) as info:
            g.freeze()
        assert _rules(info.value) == [("w", "parallel")]


@pytest.mark.parametrize(("clause", "why"), [
    ("tumbling, count(4)", "its eviction policy (count(4)) goes by every key's tuples"),
    ("sliding, time(10), count(2)", "its trigger policy (count(2)) goes by every key's tuples"),
    ("sliding, delta(value, 5.0), time(1)", "its eviction policy (delta(value, 5.0)) goes by"),
])
def test_an_unpartitioned_count_or_delta_window_in_a_keyed_region_is_refused_beyond_width_1(
        clause: str, why: str) -> None:
    # Each channel's window holds only its keys' tuples: a count(4) window of Count and Sum gave
    # sums 6, 22, 38 at width 1 and 6, 26, 46, 46 at width 2 (a review), accepted silently.
    def build(width: int, key: str | None, window: str) -> Graph:
        g, src = _graph()
        with g.parallel(width, partition_by=key):
            g.operator("w", _Pass(), [src.window(window)])
        return g

    with pytest.raises(GraphValidationError, match=re.escape(why)) as info:
        build(2, "sensor", clause).freeze()
    assert _rules(info.value) == [("w", "parallel")]
    assert "partition it by the region's key" in str(info.value)
    assert build(1, "sensor", clause).freeze().parallel  # width 1: the one window
    assert build(2, None, clause).freeze().parallel  # round robin: a window per channel, as SPL's
    for kept in ("tumbling, time(2)", "tumbling, punct()", "sliding, time(10), time(1)"):
        assert build(2, "sensor", kept).freeze().parallel  # cut where width 1 cuts


def test_countall_of_a_partitioned_sliding_window_is_refused_beyond_width_1() -> None:
    # CountAll counts every partition's tuples: split over channels it counted only each
    # channel's (3 against 2 at width 2). Count() does not, and width 1 changes nothing.
    from riverbed.operators import Aggregate, Count, CountAll
    from riverbed.testing import ListSource

    def build(width: int, count: Any) -> Graph:
        g = Graph("ca")
        s = g.source("s", ListSource([]), schema=Schema(k="int64", v="int64"))
        with g.parallel(width, partition_by="k"):
            g.operator("agg", Aggregate({"n": count}),
                       [s.window("sliding, count(10), count(1), partitioned", partition_by="k")])
        return g

    with pytest.raises(GraphValidationError, match=r"operator 'agg'.*CountAll\(\) .* counts the "
                                                    r"tuples of every partition"):
        build(2, CountAll()).freeze().parallel  # noqa: B018 - the regions are resolved here
    assert build(1, CountAll()).freeze().parallel
    assert build(2, Count()).freeze().parallel


def test_a_frozen_graph_answers_consumers_and_operators_from_an_index() -> None:
    # Both scanned every operator at each call, once per output port when a job was wired: a
    # chain of 4,000 operators took 7 s to start. The index gives what the scan gave.
    g, src = _graph()
    a = g.operator("a", _Pass(), [src])
    g.operator("b", _Pass(), [src, a])
    g.operator("c", _Pass(), [a])
    frozen = g.freeze()
    assert frozen.consumers(src.operator, 0) == [("a", 0), ("b", 0)]
    assert frozen.consumers("a", 0) == [("b", 1), ("c", 0)]
    assert frozen.consumers("c", 0) == []
    assert frozen.operator("b").name == "b"
    with pytest.raises(KeyError):
        frozen.operator("nope")
