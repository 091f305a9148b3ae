"""The utility operators through the real runtime on the virtual clock (standard-operators.md
sections 8-16): exact output items and punctuation per port, exact clock times for the timed
operators, and snapshot-restore-continue for every stateful one."""

from __future__ import annotations

import asyncio
import bisect
import itertools
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.checkpoint import MemoryStore
from riverbed.graph import Graph, GraphValidationError, Operator, Punct, Schema, Source
from riverbed.operators._params import OperatorParameterError
from riverbed.operators._utility import DeDuplicate, Split, SplitMapping, ThreadedSplit, Union
from riverbed.operators._utility_sync import Barrier, DynamicFilter, Gate, Pair
from riverbed.operators._utility_timed import Beacon, Delay, Throttle
from riverbed.runtime import Job, JobError, VirtualClock, run_graph, run_virtual
from riverbed.testing import ListSink, ListSource, at, run_until_crash
from tests.test_op_relational import F, W, items, plain, run, run_split

S = 1_000_000_000


def stamped(port: list[tuple[float, Any]]) -> list[tuple[float, Any]]:
    """(seconds, item) pairs with tuples reduced to their ``v`` (or the whole dict)."""
    return [(t, x["v"] if isinstance(x, dict) and "v" in x else x) for t, x in port]


# ------------------------------------------------------------------------ Union


def test_union_merges_in_arrival_order_and_drops_window_marks() -> None:
    out = run(Union(), {0: [{"v": 1}, W, at(2), {"v": 4}], 1: [at(1), {"v": 2}, W, {"v": 3}]})
    assert items(out[0]) == [{"v": 1}, {"v": 2}, {"v": 3}, {"v": 4}, F]


def test_union_keeps_the_output_schema_attributes_in_any_input_order() -> None:
    out = run(Union(), {0: [{"a": 1, "b": "x", "extra": 0}], 1: [at(1), {"b": "y", "a": 2}]},
              schemas=[Schema(a="int64", b="rstring")])
    assert items(out[0]) == [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}, F]
    assert list(items(out[0])[1]) == ["a", "b"]
    with pytest.raises(JobError, match=r"a tuple of input port 1 has no attribute 'b'"):
        run(Union(), {0: [{"a": 1, "b": "x"}], 1: [{"a": 2}]}, schemas=[Schema(a="int64", b="rstring")])


# ------------------------------------------------------------------------ Split


def test_split_index_takes_modulo_drops_negatives_repeats_and_marks_go_everywhere() -> None:
    op = Split(lambda t: t["to"])
    feed = [{"v": 0, "to": 0}, {"v": 1, "to": 4}, {"v": 2, "to": -1}, W, {"v": 3, "to": [2, 0, 2, -5]},
            {"v": 4, "to": 7}]
    out = run(op, feed, outputs=3)
    assert [x if x in (W, F) else x["v"] for x in items(out[0])] == [0, W, 3, F]
    assert [x if x in (W, F) else x["v"] for x in items(out[1])] == [1, W, 4, F]  # 4 % 3, 7 % 3
    assert [x if x in (W, F) else x["v"] for x in items(out[2])] == [W, 3, 3, F]


def test_split_mapping_file_with_default_quoted_keys_and_comments(tmp_path: Path) -> None:
    path = tmp_path / "mapping.txt"
    path.write_text("# mapping\n"
                    "default, -1 # drop the rest\n"
                    '"Harvey Smith", 0\n'
                    '"Ringo, Starr", 0, 1   # both ports\n'
                    "Bugra, 1\n"
                    "42, 1\n", encoding="utf-8")
    op = Split(file=str(path), key="name")
    feed = [{"name": "Harvey Smith"}, {"name": "Ringo, Starr"}, {"name": "Bugra"}, {"name": "nobody"},
            {"name": 42}, {"name": "42"}]
    out = run(op, feed, outputs=2)
    assert items(out[0]) == [{"name": "Harvey Smith"}, {"name": "Ringo, Starr"}, F]
    assert items(out[1]) == [{"name": "Ringo, Starr"}, {"name": "Bugra"}, {"name": 42}, {"name": "42"}, F]


def test_split_mapping_errors(tmp_path: Path) -> None:
    with pytest.raises(JobError, match=r"key 'x' is not in the mapping file .*no 'default' line"):
        path = tmp_path / "m.txt"
        path.write_text("a, 0\n", encoding="utf-8")
        run(Split(file=path, key=lambda t: t["k"]), [{"k": "x"}])
    with pytest.raises(OperatorParameterError, match=r"line 2: key 'a' appears twice"):
        SplitMapping.parse("a, 0\na, 1\n")
    with pytest.raises(OperatorParameterError, match=r"line 1: index 'one' is not an integer"):
        SplitMapping.parse("a, one\n")
    with pytest.raises(OperatorParameterError, match=r"cannot read the mapping file"):
        Split(file=tmp_path / "absent.txt", key="k")
    with pytest.raises(OperatorParameterError, match=r"either index .* or file and key"):
        Split(lambda t: 0, file="m.txt", key="k")
    with pytest.raises(OperatorParameterError, match=r"file and key go together"):
        Split(file="m.txt")


def test_split_index_must_be_ints() -> None:
    with pytest.raises(JobError, match=r"an output port index must be an int"):
        run(Split(lambda t: "0"), [{"v": 1}])


# ---------------------------------------------------------------- ThreadedSplit


def test_threaded_split_deals_round_robin_and_puts_marks_everywhere() -> None:
    out = run(ThreadedSplit(bufferSize=10), [{"v": i} for i in range(3)] + [W] + [{"v": 3}], outputs=2)
    assert [x if x in (W, F) else x["v"] for x in items(out[0])] == [0, 2, W, F]
    assert [x if x in (W, F) else x["v"] for x in items(out[1])] == [1, W, 3, F]
    feed = [{"v": 0}, at(1), {"v": 1}, {"v": 2}, at(2), {"v": 3}]
    assert run_split(lambda: ThreadedSplit(1), {0: feed}, 1.0, outputs=3) == 1
    with pytest.raises(OperatorParameterError, match=r"buffer_size \(bufferSize\) is required"):
        ThreadedSplit()


# ---------------------------------------------------------------- Barrier, Pair


def test_barrier_combines_the_oldest_tuple_of_every_port() -> None:
    op = Barrier(output={"sum": lambda a, b: a["x"] + b["y"]})
    out = run(op, {0: [{"id": 1, "x": 1}, {"id": 2, "x": 2}, W, at(2), {"id": 3, "x": 3}],
                   1: [at(1), {"id": 10, "y": 10, "z": 0}, W, {"id": 20, "y": 20, "z": 0}]})
    # id comes from port 0 (the first port that has it); marks are dropped.
    assert stamped(out[0]) == [(1.0, {"id": 1, "x": 1, "y": 10, "z": 0, "sum": 11}),
                               (1.0, {"id": 2, "x": 2, "y": 20, "z": 0, "sum": 22}), (2.0, F)]


def test_barrier_with_a_schema_and_three_partitioned_ports() -> None:
    op = Barrier(partitionBy0="k", partitionBy1=lambda t: t["key"], partitionBy2="k",
                 output={"total": lambda a, b, c: a["v"] + b["v"] + c["v"]})
    out = run(op, {0: [{"k": "a", "v": 1}, {"k": "b", "v": 2}],
                   1: [at(1), {"key": "b", "v": 20}, {"key": "a", "v": 10}],
                   2: [at(2), {"k": "b", "v": 200}, {"k": "c", "v": 0}, at(3), {"k": "a", "v": 100}]},
              schemas=[Schema(k="rstring", total="int64")])
    assert stamped(out[0]) == [(2.0, {"k": "b", "total": 222}), (3.0, {"k": "a", "total": 111}),
                               (3.0, F)]


def test_barrier_partition_parameters_lhs_rhs_and_errors() -> None:
    op = Barrier(partitionByLHS="k", partitionByRHS="k")
    out = run(op, {0: [{"k": 1, "a": 1}, {"k": 2, "a": 2}], 1: [at(1), {"k": 2, "b": 2}]})
    assert items(out[0]) == [{"k": 2, "a": 2, "b": 2}, F]
    with pytest.raises(GraphValidationError,
                       match=r"one partitionBy key per input port; port\(s\) \[1\]"):
        run(Barrier(partitionByLHS="k"), {0: [{"k": 1}], 1: [{"k": 1}]})
    with pytest.raises(GraphValidationError,
                       match=r"operator 'op': has 1 input port; Barrier takes at least 2"):
        run(Barrier(), [{"k": 1}])
    with pytest.raises(OperatorParameterError, match=r"partition_by .* not both"):
        Barrier(partition_by=["k", "k"], partitionByLHS="k")


def test_barrier_snapshot_restore_continue() -> None:
    feeds = {0: [{"k": 1, "a": 1}, {"k": 2, "a": 2}, {"k": 1, "a": 3}, at(1), at(2), {"k": 2, "a": 4}],
             1: [at(0.5), {"k": 1, "b": 1}, at(1.5), {"k": 2, "b": 2}, {"k": 1, "b": 3}, {"k": 2, "b": 4}]}
    state = run_split(lambda: Barrier(partition_by=["k", "k"]), feeds, 1.0)
    assert state == [[1, [[{"k": 1, "a": 3}], []]], [2, [[{"k": 2, "a": 2}], []]]]


def test_pair_emits_the_matched_tuples_in_port_order_then_a_mark() -> None:
    out = run(Pair(), {0: [{"v": 1}, W, {"v": 2}], 1: [at(1), {"v": 10}, at(2), {"v": 20}, {"v": 30}]})
    assert stamped(out[0]) == [(1.0, 1), (1.0, 10), (1.0, W), (2.0, 2), (2.0, 20), (2.0, W), (2.0, F)]


def test_pair_partitioned_snapshot_restore_continue() -> None:
    feeds = {0: [{"k": "x", "v": 1}, {"k": "y", "v": 2}, at(1), {"k": "x", "v": 3}, at(3),
                 {"k": "y", "v": 4}],
             1: [at(0.5), {"k": "y", "v": 20}, at(2), {"k": "x", "v": 10}, {"k": "x", "v": 30}]}
    out = run(Pair(partition_by=["k", lambda t: t["k"]]), feeds)
    assert stamped(out[0]) == [(0.5, 2), (0.5, 20), (0.5, W), (2.0, 1), (2.0, 10), (2.0, W),
                               (2.0, 3), (2.0, 30), (2.0, W), (3.0, F)]
    run_split(lambda: Pair(partition_by=["k", "k"]), feeds, 1.0)


# ------------------------------------------------------------------ DeDuplicate


def test_deduplicate_default_time_out_is_600_s_inclusive_and_resets_on_duplicate() -> None:
    feed = [{"k": "a", "v": 1}, at(600), {"k": "a", "v": 2}, at(1100), {"k": "a", "v": 3},
            at(1701), {"k": "a", "v": 4}]
    out = run(DeDuplicate(key="k"), feed, outputs=2)
    # 600 s after the first: still a duplicate (inclusive), and it refreshes the time,
    # so 1100 s is a duplicate of the one at 600 s; 1701 is 601 s after 1100: passes.
    assert stamped(out[0]) == [(0.0, 1), (1701.0, 4), (1701.0, F)]
    assert stamped(out[1]) == [(600.0, 2), (1100.0, 3), (1701.0, F)]


def test_deduplicate_without_reset_on_duplicate_measures_from_the_first() -> None:
    feed = [{"k": "a", "v": 1}, at(500), {"k": "a", "v": 2}, at(601), {"k": "a", "v": 3}]
    out = run(DeDuplicate(lambda t: t["k"], timeOut=600, resetOnDuplicate=False), feed)
    assert [x["v"] for x in items(out[0])[:-1]] == [1, 3]
    reset = run(DeDuplicate(lambda t: t["k"], time_out=600), feed)
    assert [x["v"] for x in items(reset[0])[:-1]] == [1]


def test_deduplicate_by_count_and_by_delta() -> None:
    feed = [{"k": k, "v": i} for i, k in enumerate("abaacxxa")]
    out = run(DeDuplicate("k", count=2, reset_on_duplicate=False), feed)
    # a@0; a@2 is 2 tuples later (duplicate); a@3 is 3 later: passes; a@7 is 4 after a@3.
    assert [x["v"] for x in items(out[0])[:-1]] == [0, 1, 3, 4, 5, 7]
    temps = [{"k": "s", "v": v} for v in (10, 12, 15, 14, 21, 23)]
    by_delta = run(DeDuplicate("k", deltaAttribute="v", delta=5), temps)
    # resetOnDuplicate: 12 and 15 are within 5 of the remembered value and move it along;
    # 21 is 7 above 14 (passes), 23 is 2 above 21.
    assert [x["v"] for x in items(by_delta[0])[:-1]] == [10, 21]


def test_deduplicate_whole_tuple_key_marks_forwarded_to_both_ports_and_flush_on_punctuation() -> None:
    feed = [{"v": 1}, {"v": 1}, W, {"v": 1}, {"v": [1, 2]}, {"v": [1, 2]}]
    kept = run(DeDuplicate(), feed, outputs=2)
    assert items(kept[0]) == [{"v": 1}, W, {"v": [1, 2]}, F]
    assert items(kept[1]) == [{"v": 1}, W, {"v": 1}, {"v": [1, 2]}, F]
    flushed = run(DeDuplicate(flushOnPunctuation=True), feed, outputs=2)
    assert items(flushed[0]) == [{"v": 1}, W, {"v": 1}, {"v": [1, 2]}, F]
    assert items(flushed[1]) == [{"v": 1}, W, {"v": [1, 2]}, F]


def test_deduplicate_final_punctuation_flushes_too() -> None:
    op = DeDuplicate(flush_on_punctuation=True)
    run(op, [{"v": 1}])
    assert op.snapshot()["seen"] == []
    keep = DeDuplicate()
    run(keep, [{"v": 1}])
    assert keep.snapshot()["seen"] == [[[["v", 1]], 0]]


def test_deduplicate_nan_keys_always_pass_and_assignments_apply_to_first_occurrences() -> None:
    nan = float("nan")
    out = run(DeDuplicate("x", output={"first": True}), [{"x": nan}, {"x": nan}, {"x": 1.0}, {"x": 1.0}],
              outputs=2)
    assert len(items(out[0])) == 4 and all(t["first"] for t in items(out[0])[:-1])
    assert items(out[1]) == [{"x": 1.0}, F]


def test_deduplicate_parameter_rules() -> None:
    with pytest.raises(OperatorParameterError, match=r"at most one of .*got time_out and count"):
        DeDuplicate(time_out=1, count=2)
    with pytest.raises(OperatorParameterError, match=r"delta and delta_attribute .*go together"):
        DeDuplicate(delta=1)
    with pytest.raises(OperatorParameterError, match=r"parameter 'time_out' given twice"):
        DeDuplicate(time_out=1, timeOut=2)
    with pytest.raises(OperatorParameterError, match=r"time_out=-1: the duration must be >= 0"):
        DeDuplicate(time_out=-1)


def test_deduplicate_snapshot_restore_continue_and_time_counts_across_a_restore() -> None:
    feed = [{"k": "a", "v": 1}, {"k": "b", "v": 2}, at(10), {"k": "a", "v": 3}, at(20),
            {"k": "b", "v": 4}, at(700), {"k": "a", "v": 5}, {"k": "b", "v": 6}]
    run_split(lambda: DeDuplicate("k"), {0: feed}, 10.0, outputs=2)
    counted = [{"k": i % 3, "v": i} for i in range(6)] + [at(1)] + [{"k": i % 4, "v": i} for i in range(6)]
    run_split(lambda: DeDuplicate("k", count=4), {0: counted}, 1.0, outputs=2)
    # A restore 601 s after the snapshot: the remembered times are absolute, so "a" passes again.
    op = DeDuplicate("k")
    run(op, [{"k": "a"}])
    fresh = DeDuplicate("k")
    fresh.restore(plain(op.snapshot()))
    assert items(run(fresh, [{"k": "a"}], start=600.0)[0]) == [F]
    assert items(run(fresh, [{"k": "a"}], start=1201.5)[0]) == [{"k": "a"}, F]


# ---------------------------------------------------------------- DynamicFilter


def test_dynamic_filter_follows_the_key_set_and_forwards_only_port_0_marks() -> None:
    op = DynamicFilter("sym", addKey="sym", removeKey=lambda t: t["sym"])
    out = run(op, {0: [{"sym": "A", "v": 0}, at(2), {"sym": "A", "v": 1}, {"sym": "B", "v": 2}, W,
                       at(4), {"sym": "A", "v": 3}, {"sym": "B", "v": 4}],
                   1: [at(1), {"sym": "A"}, {"sym": "B"}, W],
                   2: [at(3), {"sym": "A"}, W]}, outputs=2)
    assert stamped(out[0]) == [(2.0, 1), (2.0, 2), (2.0, W), (4.0, 4), (4.0, F)]
    assert stamped(out[1]) == [(0.0, 0), (2.0, W), (4.0, 3), (4.0, F)]
    run_split(lambda: DynamicFilter("sym", "sym", "sym"),
              {0: [at(0.5), {"sym": "A"}, at(2), {"sym": "A"}, at(4), {"sym": "B"}],
               1: [{"sym": "A"}, {"sym": "B"}], 2: [at(3), {"sym": "A"}]}, 2.0, outputs=2)


def test_dynamic_filter_remove_key_goes_with_a_third_port() -> None:
    with pytest.raises(GraphValidationError, match=r"remove_key \(removeKey\) goes with a third input port"):
        run(DynamicFilter("k", "k", "k"), {0: [{"k": 1}], 1: [{"k": 1}]})
    with pytest.raises(OperatorParameterError, match=r"add_key is required"):
        DynamicFilter("k")


# ------------------------------------------------------------------------- Gate


def test_gate_passes_up_to_the_maximum_then_waits_for_acknowledgements() -> None:
    op = Gate(maxUnackedTupleCount=2, numTuplesToAck=lambda t: t["n"])
    out = run(op, {0: [{"v": i} for i in range(3)] + [W, {"v": 3}, {"v": 4}, {"v": 5}],
                   1: [at(1), {"n": 1}, W, at(2), {"n": 2}, at(3), {"n": 9}]})
    # 0, 1 pass at once; 2 waits for the ack at 1 s; the mark and 3 wait for the acks at 2 s;
    # over-acknowledging (9) opens the gate for two more: 4 and 5.
    assert stamped(out[0]) == [(0.0, 0), (0.0, 1), (1.0, 2), (2.0, W), (2.0, 3), (2.0, 4), (3.0, 5),
                               (3.0, F)]


def test_gate_discards_what_still_waits_when_both_ports_end() -> None:
    op = Gate(1)
    out = run(op, {0: [{"v": 0}, {"v": 1}, {"v": 2}], 1: [at(1), {"ack": True}]})
    assert stamped(out[0]) == [(0.0, 0), (1.0, 1), (1.0, F)]
    assert op.discarded == 1
    feeds = {0: [{"v": 0}, {"v": 1}, W, {"v": 2}, at(1), at(2), {"v": 3}],
             1: [at(0.5), {}, at(1.5), {}, at(3), {}]}
    assert run_split(lambda: Gate(1), feeds, 1.0) == {"unacked": 1, "waiting": [["w"], ["t", {"v": 2}]]}


# ----------------------------------------------------------------------- Beacon


def run_source(src: Source, schema: Schema | None = None, *, start: float = 0.0) -> list[tuple[float, Any]]:
    g = Graph("beacon")
    s = g.source("src", src, schema=schema)
    sink = ListSink()
    g.sink("sink", sink, [s])
    run_graph(g, clock=VirtualClock(round(start * S)))
    return [(t / S, x) for t, x in zip(sink.times, sink.items, strict=True)]


def test_beacon_paces_iterations_after_the_initial_delay_then_a_mark_then_final() -> None:
    out = run_source(Beacon(iterations=3, period=1.0, initDelay=2.0,
                            output={"n": lambda i: i, "tag": "b"}))
    assert out == [(2.0, {"n": 0, "tag": "b"}), (3.0, {"n": 1, "tag": "b"}), (4.0, {"n": 2, "tag": "b"}),
                   (4.0, W), (4.0, F)]


def test_beacon_fills_unassigned_schema_attributes_with_spl_defaults() -> None:
    schema = Schema(seq="uint64", x="float64", name="rstring", ok="boolean", tags="list<int32>")
    out = run_source(Beacon(iterations=2, output={"seq": lambda i: i}), schema)
    assert [x for _, x in out] == [
        {"seq": 0, "x": 0.0, "name": "", "ok": False, "tags": []},
        {"seq": 1, "x": 0.0, "name": "", "ok": False, "tags": []}, W, F]
    assert [x for _, x in run_source(Beacon(iterations=0))] == [W, F]


def test_beacon_without_period_is_fast_and_restores_its_iteration_count() -> None:
    out = run_source(Beacon(iterations=5000, output={"n": lambda i: i}))
    assert [x["n"] for _, x in out[:-2]] == list(range(5000)) and out[-2:] == [(0.0, W), (0.0, F)]
    first = Beacon(iterations=5, period=0.5, output={"n": lambda i: i})
    first.count = 3  # as if it had run three iterations
    second = Beacon(iterations=5, period=0.5, output={"n": lambda i: i})
    second.restore(plain(first.snapshot()))
    assert run_source(second, start=10.0) == [(10.0, {"n": 3}), (10.5, {"n": 4}), (10.5, W), (10.5, F)]
    done = Beacon(iterations=1)
    run_source(done)
    again = Beacon(iterations=1)
    again.restore(plain(done.snapshot()))
    assert run_source(again) == [(0.0, F)]  # everything, mark included, was sent before


def test_beacon_stopped_early_sends_no_mark_and_trigger_count_takes_checkpoints() -> None:
    g = Graph("forever")
    s = g.source("b", Beacon(period=1.0, triggerCount=3, output={"n": lambda i: i}))
    sink = ListSink()
    g.sink("sink", sink, [s])
    store = MemoryStore(keep_last=10)
    job = Job(g, clock=VirtualClock(), checkpoints=store)

    async def main() -> None:
        task = asyncio.ensure_future(job.run())
        await job.clock.sleep_until(round(7.5 * S))
        job.stop()
        await task

    run_virtual(main(), job.clock)  # type: ignore[arg-type]
    # The job has checkpoints, so the stop suspends it: no final (a restart goes on from 8).
    assert [x if x is F else x["n"] for x in sink.items] == [*range(8)]
    # Every third tuple asks for one; the stop takes the last, at tuple 8.
    assert [store.load(c.id).states["b"]["operator"]["count"] for c in store.list()] == [3, 6, 8]


class Counting(Operator):
    """A sink whose state is how many tuples it took; ``at`` records it at each checkpoint."""

    def __init__(self) -> None:
        self.n = 0
        self.at: list[int] = []

    def on_tuple(self, tup: Any, port: int) -> None:
        self.n += 1

    def snapshot(self) -> Any:
        self.at.append(self.n)
        return self.n

    def restore(self, state: Any) -> None:
        self.n = state


@pytest.mark.parametrize("period", [None, 0.01])
def test_beacon_trigger_count_checkpoints_right_after_every_that_many_tuples(period: float | None) -> None:
    # Without a period the request waited for the Beacon's next flush, 1,024 tuples later, and
    # those made meanwhile were dropped: triggerCount 10 checkpointed at 0, 100 and 100.
    g = Graph("trig")
    b = g.source("b", Beacon(iterations=100, period=period, trigger_count=10,
                             output={"i": lambda k: k}), schema=Schema(i="int64"))
    g.consistent_region([b], name="r", trigger="operator_driven")
    sink = Counting()
    g.sink("c", sink, [b])
    assert run_until_crash(Job(g, clock=VirtualClock(), region_checkpoints={"r": MemoryStore(keep_last=100)}),
                           None)
    assert sink.at[:11] == list(range(0, 101, 10))


def _beacon_graph(sink: ListSink, *, period: float, init_delay: float = 0.0) -> Graph:
    g = Graph("pace")
    src = g.source("beacon", Beacon(iterations=4, period=period, init_delay=init_delay,
                                    output={"i": lambda i: i}), schema=Schema(i="int64"))
    g.sink("sink", sink, [src])
    return g


@pytest.mark.parametrize(("before", "after", "times"), [
    # period 3600 s -> 1 s: tuple 1 came at 3600 s, the old deadline (an hour idle after a restart)
    ({"period": 3600.0}, {"period": 1.0}, [(1, 20.0), (2, 21.0), (3, 22.0)]),
    # restored before the first tuple: init_delay 3600 s -> 30 s counts from the run's start
    ({"period": 1.0, "init_delay": 3600.0}, {"period": 1.0, "init_delay": 30.0},
     [(0, 30.0), (1, 31.0), (2, 32.0), (3, 33.0)]),
])
def test_a_restored_beacon_paces_by_the_period_and_initial_delay_it_has_now(
        before: dict[str, float], after: dict[str, float], times: list[tuple[int, float]]) -> None:
    store = MemoryStore(keep_last=100)
    run_until_crash(Job(_beacon_graph(ListSink(), **before), clock=VirtualClock(), checkpoints=store,
                        checkpoint_period=10.0), 25 * S)
    newest = store.latest_good()
    assert newest is not None and newest.time_ns == 20 * S
    sink = ListSink()
    assert run_until_crash(Job(_beacon_graph(sink, **after), clock=VirtualClock(newest.time_ns),
                               checkpoints=store, checkpoint_period=10.0), None)
    assert [(t["i"], at / S) for t, at in zip(sink.items, sink.times, strict=True)
            if not isinstance(t, Punct)] == times


def test_a_beacon_held_up_goes_on_from_then_instead_of_sending_the_missed_tuples_at_once() -> None:
    g = Graph("stall")
    sink = ListSink()
    g.sink("sink", sink, [g.source("b", Beacon(iterations=200, period=0.01, output={"i": lambda i: i}))])
    run_graph(g, clock=StallingClock(late=S))  # a second: the process was paused
    times = [at for t, at in zip(sink.items, sink.times, strict=True) if not isinstance(t, Punct)]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # one gap of the stall, every other a period: 100 tuples left in one instant before
    assert sorted(gaps)[-1] == S + S // 100 and set(sorted(gaps)[:-1]) == {S // 100}


def test_beacon_parameter_errors() -> None:
    with pytest.raises(OperatorParameterError, match=r"iterations=-1: expected an int >= 0"):
        Beacon(iterations=-1)
    with pytest.raises(OperatorParameterError, match=r"period=-1: the duration must be >= 0"):
        Beacon(period=-1)
    with pytest.raises(GraphValidationError, match=r"output assigns 'nope', which the schema"):
        run_source(Beacon(iterations=1, output={"nope": 1}), Schema(n="int64"))


# ------------------------------------------------------------------------ Delay


def test_delay_keeps_inter_arrival_times_and_delays_marks_and_final() -> None:
    out = run(Delay(1.5), [{"v": 1}, at(0.5), {"v": 2}, W, {"v": 3}, at(4), {"v": 4}, at(4.2)])
    assert stamped(out[0]) == [(1.5, 1), (2.0, 2), (2.0, W), (2.0, 3), (5.5, 4), (5.7, F)]


def test_delay_final_waits_for_the_delay_and_the_buffer() -> None:
    out = run(Delay(delay=2.0, bufferSize=1), [{"v": 1}, {"v": 2}, {"v": 3}])
    assert stamped(out[0]) == [(2.0, 1), (2.0, 2), (2.0, 3), (2.0, F)]
    immediate = run(Delay(0), [{"v": 1}, W, at(1), {"v": 2}])
    assert stamped(immediate[0]) == [(0.0, 1), (0.0, W), (1.0, 2), (1.0, F)]
    with pytest.raises(OperatorParameterError, match=r"Delay: delay \(seconds\) is required"):
        Delay()


def test_delay_snapshot_holds_the_items_in_flight_and_restores_them() -> None:
    feed = [{"v": 1}, at(0.4), {"v": 2}, W, at(1), {"v": 3}, at(1.2), {"v": 4}]
    state = run_split(lambda: Delay(0.75), {0: feed}, 1.0)
    assert state == {"held": [[round(1.15 * S), "t", {"v": 2}], [round(1.15 * S), "w"]],
                     "final_at": None}
    late = Delay(0.75)
    late.restore(state)  # restored after the items were due: they leave at once
    assert stamped(run(late, {0: []}, start=5.0)[0]) == [(5.0, 2), (5.0, W), (5.75, F)]


# --------------------------------------------------------------------- Throttle


def test_throttle_paces_a_backlog_at_the_rate_and_final_follows_the_last_tuple() -> None:
    out = run(Throttle(2.0), [{"v": i} for i in range(5)] + [W])
    assert stamped(out[0]) == [(0.0, 0), (0.5, 1), (1.0, 2), (1.5, 3), (2.0, 4), (2.0, W), (2.0, F)]


def test_throttle_include_punctuations_paces_marks_like_tuples() -> None:
    out = run(Throttle(rate=2.0, includePunctuations=True), [{"v": 0}, {"v": 1}, W, {"v": 2}])
    assert stamped(out[0]) == [(0.0, 0), (0.5, 1), (1.0, W), (1.5, 2), (1.5, F)]


def test_throttle_lets_a_slow_stream_through_and_pays_a_burst_back_over_the_period() -> None:
    feed = [{"v": 0}, at(1), {"v": 1}, at(2), {"v": 2}, at(3), *[{"v": i} for i in range(3, 12)]]
    out = run(Throttle(2.0), feed)
    # IBM's scheme (two sync points half a period apart, period = 10 / rate = 5 s): the idle
    # seconds let four tuples pass at 3 s, then 1 / rate apart, then a pause until the rate
    # over the last sync points is back at 2 per second.
    assert stamped(out[0]) == [(0.0, 0), (1.0, 1), (2.0, 2), (3.0, 3), (3.0, 4), (3.0, 5), (3.0, 6),
                               (3.5, 7), (4.0, 8), (4.5, 9), (5.0, 10), (7.0, 11), (7.0, F)]


class LateClock(VirtualClock):
    """A clock whose timers fire 1 ms late, as a real clock's do (the event loop's poll rounds up
    to milliseconds)."""

    def call_at(self, when: int, callback: Any) -> Any:
        return super().call_at(when + 1_000_000, callback)


def _throttled(rate: float, n: int, clock: VirtualClock) -> list[int]:
    """When each of ``n`` tuples left a Throttle at ``rate`` on ``clock``."""
    g = Graph("paced")
    sink = ListSink()
    g.sink("k", sink, [g.operator("thr", Throttle(rate),
                                  [g.source("s", ListSource([{"v": i} for i in range(n)]))])])
    run_graph(g, clock=clock)
    assert len(sink.tuples) == n
    return sink.times[:-1]  # (final after the last tuple)


def test_throttle_holds_its_rate_when_its_timers_fire_late() -> None:
    # 10,000/s: a tuple every 0.1 ms, against timers 1 ms late. Timed from each late wake, the
    # backlog left at ~3,900/s; timed from when each was due, every millisecond's ten leave.
    times = _throttled(10_000.0, 3000, LateClock())
    took = (times[-1] - times[0]) / S
    assert 0.29 <= took <= 0.31, took  # 3,000 at 10,000/s: 0.3 s


def test_a_beacon_restores_a_checkpoint_that_kept_only_its_deadline() -> None:
    # Checkpoints of riverbed before stop 42 hold the next tuple's deadline ("due").
    beacon = Beacon(iterations=4, period=1.0, output={"n": lambda i: i})
    beacon.restore({"count": 2, "marked": False, "due": 12 * S})
    assert run_source(beacon, start=10.0) == [(12.0, {"n": 2}), (13.0, {"n": 3}), (13.0, W), (13.0, F)]
    assert beacon.snapshot() == {"count": 4, "marked": True, "began": 12 * S, "last": 13 * S}


class StallingClock(VirtualClock):
    """A clock whose first timer due at 0.5 s or later fires ``late`` ns late (80 ms: another
    operator held the event loop)."""

    def __init__(self, late: int = 80_000_000) -> None:
        super().__init__()
        self.stalled = False
        self.late = late

    def call_at(self, when: int, callback: Any) -> Any:
        if not self.stalled and when >= S // 2:
            self.stalled = True
            when += self.late
        return super().call_at(when, callback)


def test_throttle_makes_up_for_a_stall_by_one_period_at_most() -> None:
    # 1,000/s, period 10 ms: after an 80 ms stall the tuples of the last period leave at once,
    # not the 80 ms's worth (a 100 ms catch-up let 92 leave in 10 ms).
    times = _throttled(1000.0, 1500, StallingClock())
    most = max(bisect.bisect_right(times, t + S // 100 - 1) - i for i, t in enumerate(times))
    assert most <= 30, most
    assert (times[-1] - times[0]) / S == pytest.approx(1.5, abs=0.1)  # the rate holds overall


def test_a_throttle_restarted_after_downtime_paces_as_from_a_fresh_start() -> None:
    # Restored an hour after its last tuple, the old sync points let 16 of 50/s out in the
    # first 0.2 s, where a fresh start lets 10 (the burst after an idle spell is a live
    # Throttle's, as IBM's, not a restarted one's).
    def graph(sink: ListSink) -> Graph:
        g = Graph("paced")
        g.sink("k", sink, [g.operator("thr", Throttle(50.0),
                                      [g.source("s", ListSource([{"v": i} for i in range(300)]))])])
        return g

    def first(sink: ListSink, since: int) -> int:
        return sum(1 for t, x in zip(sink.times, sink.items, strict=True)
                   if x is not F and since <= t < since + S // 5)

    fresh = ListSink()
    run_graph(graph(fresh), clock=VirtualClock())
    store = MemoryStore(keep_last=10)
    run_until_crash(Job(graph(ListSink()), clock=VirtualClock(), checkpoints=store,
                        checkpoint_period=1.0), 2 * S + S // 2)
    newest = store.latest_good()
    assert newest is not None
    later = newest.time_ns + 3600 * S
    restarted = ListSink()
    assert run_until_crash(Job(graph(restarted), clock=VirtualClock(later), checkpoints=store), None)
    assert first(restarted, later) == first(fresh, 0) == 10


def test_throttle_snapshot_restore_continue() -> None:
    feed = [{"v": i} for i in range(4)] + [W, at(1.25)] + [{"v": i} for i in range(4, 7)]
    state = run_split(lambda: Throttle(2.0), {0: feed}, 1.25)
    assert state["held"] == [["t", {"v": 3}], ["w"]] and state["release_at"] == round(1.5 * S)
    with pytest.raises(OperatorParameterError, match=r"rate=0: expected a number of tuples per second > 0"):
        Throttle(0)


def test_the_modules_export_what_they_define() -> None:
    from riverbed.operators import _relational, _utility, _utility_sync, _utility_timed

    assert set(_relational.__all__) == {"Custom", "Filter", "Functor", "Punctor"}
    assert set(_utility.__all__) == {"DeDuplicate", "Split", "SplitMapping", "ThreadedSplit", "Union"}
    assert set(_utility_sync.__all__) == {"Barrier", "DynamicFilter", "Gate", "Pair"}
    assert set(_utility_timed.__all__) == {"Beacon", "Delay", "Throttle"}
    for module in (_relational, _utility, _utility_sync, _utility_timed):
        for name in module.__all__:
            if name == "SplitMapping":
                continue
            cls = getattr(module, name)
            assert issubclass(cls, Operator) and cls.__doc__ and "unctuation" in cls.__doc__, name


# ------------------------------------------------ real checkpoints: crash and restart


class _Replay(Source):
    """Replayable: item i at i * 0.1 s; the state is the next offset."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.offset = 0

    async def run(self) -> None:
        ctx: Any = self.context
        while self.offset < self.n:
            i = self.offset
            await ctx.sleep_until(i * S // 10)
            self.submit({"k": i % 3, "v": i})
            if i % 7 == 6:
                ctx.submit_punct()
            self.offset += 1

    def snapshot(self) -> Any:
        return self.offset

    def restore(self, state: Any) -> None:
        self.offset = state


class _Rows(Operator):
    """A sink whose output is its state: (time, item) rows."""

    def __init__(self) -> None:
        self.rows: list[Any] = []

    def on_tuple(self, tup: Any, port: int) -> None:
        self.rows.append([self.context.now(), tup])

    def on_punct(self, punct: Punct, port: int) -> None:
        self.rows.append([self.context.now(), punct.value])

    def snapshot(self) -> Any:
        return list(self.rows)

    def restore(self, state: Any) -> None:
        self.rows = list(state)


_CRASH_OPS = {
    "delay": lambda: Delay(0.35),
    "throttle": lambda: Throttle(4.0, include_punctuations=True),
    "dedup": lambda: DeDuplicate("k", time_out=0.35, reset_on_duplicate=False),
}


def _crash_run(kind: str, crash_at: int | None, store: MemoryStore | None) -> tuple[list[Any], bool]:
    g = Graph("crash")
    src = g.source("src", _Replay(40))
    op = g.operator("op", _CRASH_OPS[kind](), [src])
    rows = _Rows()
    g.sink("out", rows, [op])
    job = Job(g, clock=VirtualClock(), checkpoints=store, checkpoint_period=0.3 if store else None)
    done = run_until_crash(job, crash_at)
    return rows.rows, done


@settings(max_examples=15, deadline=None)
@given(kind=st.sampled_from(sorted(_CRASH_OPS)), crash=st.integers(min_value=1, max_value=45))
def test_a_crash_at_any_instant_then_restart_gives_the_uninterrupted_output(kind: str, crash: int) -> None:
    reference, _ = _crash_run(kind, None, None)
    store = MemoryStore()
    first, completed = _crash_run(kind, crash * S // 10 + S // 20, store)
    if completed:
        assert first == reference
        return
    second, completed = _crash_run(kind, None, store)
    assert completed
    # A checkpoint taken as the source ended holds it still open (its barrier precedes its
    # final): the restarted source then ends at once, and final comes at the restart's instant
    # (0 on the restarted job's clock) instead of when the first run's source ended.
    assert second[:-1] == reference[:-1]
    assert second[-1][1] == reference[-1][1] == "final" and second[-1][0] in (reference[-1][0], 0)


# ------------------------------------------------------- watermarks held with tuples (issue 16.2)


class _TimedReadings(Source):
    """Readings 10 ms apart in event time, event time in ``ts``; ``paced``: also 10 ms apart on
    the clock, else all at once (a fast producer: what a Throttle holds back most)."""

    replayable = True

    def __init__(self, n: int = 2000, *, paced: bool = True) -> None:
        self.n = n
        self.i = 0
        self.paced = paced

    async def run(self) -> None:
        ctx: Any = self.context
        while self.i < self.n:
            if self.paced:
                await ctx.sleep_until(self.i * S // 100)
            self.submit({"k": "a", "ts": self.i * S // 100})
            self.i += 1

    def snapshot(self) -> Any:
        return self.i

    def restore(self, state: Any) -> None:
        self.i = state


def _held_pane_counts(holder: Operator, n: int = 2000, *, paced: bool = True) -> tuple[list[Any], ListSink]:
    from riverbed.operators import Aggregate, Count

    g = Graph("held")
    src = g.source("readings", _TimedReadings(n, paced=paced), schema=Schema(k="rstring", ts="timestamp"),
                   event_time="ts")
    held = g.operator("hold", holder, [src])
    panes = g.operator("panes", Aggregate({"n": Count()}),
                       [held.window("timeInterval, intervalDuration(1)")])
    sink = ListSink()
    g.sink("sink", sink, [panes])
    run_graph(g, clock=VirtualClock())
    return [x["n"] for x in sink.items if isinstance(x, dict)], sink


@pytest.mark.parametrize(("holder", "paced"), [(lambda: Throttle(4000.0), False),
                                               (lambda: Throttle(50.0), True),
                                               (lambda: Delay(0.05), True), (lambda: Delay(0.05), False),
                                               (lambda: Delay(3.0), True)],
                         ids=["throttle-burst", "throttle-slow", "delay-short", "delay-burst",
                              "delay-long"])
def test_a_watermark_never_overtakes_the_tuples_throttle_or_delay_hold(holder: Any, paced: bool) -> None:
    counts, _ = _held_pane_counts(holder(), paced=paced)
    assert sum(counts) == 2000, f"{2000 - sum(counts)} readings dropped as late"
    assert counts == [100] * 20


def test_gate_holds_watermarks_with_its_waiting_tuples() -> None:
    g = Graph("gate")
    data = g.source("data", _TimedReadings(300), schema=Schema(k="rstring", ts="timestamp"),
                    event_time="ts")
    acks = g.source("acks", Beacon(iterations=300, period=0.02, init_delay=0.5,
                                   output={"n": lambda i: i}), schema=Schema(n="int64"))
    gated = g.operator("gate", Gate(10), [data, acks])
    marks: list[tuple[int, int]] = []  # (tuples seen so far, watermark value)

    class Probe(Operator):
        seen = 0

        def on_tuple(self, tup: Any, port: int) -> None:
            assert self.context.watermark is None or tup["ts"] > self.context.watermark, \
                f"tuple {tup} arrived behind watermark {self.context.watermark}"
            Probe.seen += 1

        def on_watermark(self, value: int) -> None:
            marks.append((Probe.seen, value))

    g.sink("probe", Probe(), [gated])
    run_graph(g, clock=VirtualClock())
    assert Probe.seen == 300 and marks and marks[-1][1] > 0


def test_throttle_holds_its_input_back_while_its_buffer_is_full() -> None:
    """A burst into a Throttle: at most about ``buffer_size`` items wait inside it (plus the
    batch being handled), the rest wait upstream (backpressure); the output is unchanged."""

    class Burst(Source):
        def generate(self) -> Any:
            return iter({"v": i} for i in range(3000))

    def run_once(buffer_size: int) -> tuple[list[Any], int]:
        g = Graph("burst")
        s = g.source("s", Burst())
        throttle = Throttle(1000.0, buffer_size=buffer_size)
        t = g.operator("t", throttle, [s])
        sink = ListSink()
        g.sink("k", sink, [t])
        most = 0

        def watch(job: Job) -> None:
            nonlocal most
            most = max(most, len(throttle.held))
            job.clock.call_at(job.clock.now() + S // 100, lambda: watch(job))

        job = Job(g, clock=VirtualClock(), batch_size=50)
        assert run_until_crash(job, None, [(0.0, watch)])
        return [sink.items, sink.times], most

    bounded, most = run_once(100)
    unbounded, everything = run_once(100_000)
    assert bounded == unbounded
    assert most <= 150 < everything


def test_a_beacon_starts_a_consistent_region_and_a_reset_replays_its_iterations() -> None:
    """Beacon is replayable (its state is the iteration count): a region may start at it, and
    an operator failing once is healed by a reset with nothing lost or repeated."""
    from tests.test_parallel_checkpoints import Output


    class FailOnce(Operator):
        failed = False

        def on_tuple(self, tup: Any, port: int) -> None:
            if tup["i"] == 120 and not FailOnce.failed:
                FailOnce.failed = True
                raise RuntimeError("once")
            self.submit(tup)

    g = Graph("beacon-region")
    src = g.source("src", Beacon(iterations=300, period=0.01, output={"i": lambda k: k}),
                   schema=Schema(i="int64"))
    g.consistent_region([src], period=0.2)
    passed = g.operator("fail", FailOnce(), [src], [Schema(i="int64")])
    kept = Output()  # transactional: a reset takes back what followed the checkpoint
    g.sink("kept", kept, [passed])
    job = Job(g, clock=VirtualClock(), checkpoints=MemoryStore())
    assert run_until_crash(job, None)
    assert FailOnce.failed and [t["i"] for t in kept.rows] == list(range(300))


def test_a_beacon_restored_between_two_tuples_sends_the_next_at_its_time() -> None:
    def graph(sink: ListSink) -> Graph:
        g = Graph("pace")
        src = g.source("beacon", Beacon(iterations=6, period=1.0, output={"i": lambda i: i}),
                       schema=Schema(i="int64"))
        g.sink("sink", sink, [src])
        return g

    store = MemoryStore(keep_last=100)
    run_until_crash(Job(graph(ListSink()), clock=VirtualClock(), checkpoints=store,
                        checkpoint_period=0.75), 2_900_000_000)
    newest = store.latest_good()
    # Taken at 2.25 s while the beacon waited for 3 s (its barrier goes out at once; it waited
    # for the next tuple, and the checkpoint came at 2 s).
    assert newest is not None and newest.time_ns == 2_250_000_000
    sink = ListSink()
    assert run_until_crash(Job(graph(sink), clock=VirtualClock(newest.time_ns), checkpoints=store,
                               checkpoint_period=0.75), None)
    # Tuple i at i seconds, as without the crash: restored mid-wait, tuple 3 still at 3 s.
    assert [(t["i"], at) for t, at in zip(sink.items, sink.times, strict=True)
            if not isinstance(t, Punct)] == [
        (i, i * 1_000_000_000) for i in range(3, 6)]


def test_delay_and_throttle_reset_to_initial_forget_the_final_they_saw() -> None:
    """A reset to the initial state (a region with no checkpoint yet) kept Delay's final time
    and both operators' ``final seen``: the state a fresh operator has, and a snapshot of it,
    differed from the reset one's."""
    for fresh, used in ((Delay(0.5), Delay(0.5)), (Throttle(10.0), Throttle(10.0))):
        used._final_seen = True  # as final punctuation sets it (no context to run it here)
        if isinstance(used, Delay):
            used._final_at = 5_000_000_000
        used.reset_to_initial_state()
        assert used.snapshot() == fresh.snapshot()
        assert used._final_seen is False
