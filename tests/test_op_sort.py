"""SPL Sort through the real runtime on the virtual clock: batch sorts on tumbling and
timeInterval windows, progressive sorts on sliding windows, marks and final punctuation."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.checkpoint import MemoryStore
from riverbed.graph import Graph, GraphValidationError, Operator, Punct, Schema, Source, Watermark
from riverbed.operators._params import OperatorParameterError
from riverbed.operators._sort import Sort
from riverbed.runtime import Job, VirtualClock, run_graph
from riverbed.testing import ListSink, ListSource, at, run_operator, run_until_crash

S = 1_000_000_000
W = Punct.WINDOW
F = Punct.FINAL


def vs(*values: int, key: str = "v") -> list[dict[str, int]]:
    return [{key: v} for v in values]


def sort(op: Sort, items: list[Any], window: str, **kw: Any) -> list[Any]:
    out = run_operator(op, items, window=window, **kw)
    assert out.items[-1] is F
    return out.items[:-1]


def values(items: list[Any], key: str = "v") -> list[Any]:
    return [x if isinstance(x, Punct) else x[key] for x in items]


# ------------------------------------------------------------------ tumbling


def test_a_tumbling_count_window_outputs_each_batch_sorted_then_a_mark_and_final_does_not_flush() -> None:
    out = sort(Sort(sort_by="v"), vs(3, 1, 2, 6, 5, 4, 7), "tumbling, count(3)")
    assert values(out) == [1, 2, 3, W, 4, 5, 6, W]  # 7 is still in the window at final


def test_descending_mixed_orders_function_keys_and_stable_ties() -> None:
    rows = [{"g": "b", "v": 1, "i": 0}, {"g": "a", "v": 1, "i": 1}, {"g": "b", "v": 2, "i": 2},
            {"g": "a", "v": 1, "i": 3}, {"g": "a", "v": 5, "i": 4}]
    window = "tumbling, count(5)"
    down = sort(Sort(sort_by="v", order="descending"), rows, window)
    assert values(down, "i") == [4, 2, 0, 1, 3, W]  # ties (v=1) keep their arrival order
    mixed = sort(Sort(sort_by=["g", lambda t: t["v"]], order=["ascending", "descending"]), rows, window)
    assert values(mixed, "i") == [4, 1, 3, 2, 0, W]
    spl = sort(Sort(sortBy=("g", "v"), order="descending"), rows, window)
    assert values(spl, "i") == [2, 0, 4, 1, 3, W]


def test_a_punct_window_sorts_between_marks_and_an_empty_one_gives_just_the_mark() -> None:
    out = sort(Sort(sort_by="v"), [*vs(3, 1), W, W, *vs(2)], "tumbling, punct()")
    assert values(out) == [1, 3, W, W]  # 2 is never flushed: final does not flush


def test_java_partitioned_punct_windows_flush_every_kept_partition() -> None:
    items = [{"k": "a", "v": 2}, {"k": "b", "v": 1}, {"k": "a", "v": 1}, W, W]
    out = sort(Sort(sort_by="v"), items, "tumbling, punct(), partitioned", partition_by="k")
    # each partition its own batch and mark; the second mark finds both partitions empty
    assert out == [{"k": "a", "v": 1}, {"k": "a", "v": 2}, W, {"k": "b", "v": 1}, W, W, W]


def test_cpp_partitioned_punct_windows_flush_non_empty_partitions_or_give_one_mark() -> None:
    items = [W, {"k": "a", "v": 2}, {"k": "b", "v": 1}, {"k": "a", "v": 1}, W, W]
    out = sort(Sort(sort_by="v"), items, "tumbling, punct(), partitioned", partition_by="k", flavor="cpp")
    assert out == [W, {"k": "a", "v": 1}, {"k": "a", "v": 2}, W, {"k": "b", "v": 1}, W, W]


def test_incoming_marks_on_other_windows_are_dropped() -> None:
    out = sort(Sort(sort_by="v"), [*vs(2), W, *vs(1), W], "tumbling, count(2)")
    assert values(out) == [1, 2, W]


def test_partitioned_tumbling_count_windows_sort_each_partition() -> None:
    items = [{"k": k, "v": v} for k, v in [("a", 3), ("b", 9), ("a", 1), ("b", 8), ("a", 2)]]
    out = sort(Sort(sort_by="v"), items, "tumbling, count(2), partitioned", partition_by="k")
    assert values(out) == [1, 3, W, 8, 9, W]


def test_a_tumbling_time_window_sorts_each_period_on_the_virtual_clock() -> None:
    g = Graph("timed")
    src = g.source("src", ListSource([at(0.5), *vs(3, 1), at(2.5), *vs(2), at(6.5)]))
    sink = ListSink()
    g.sink("out", sink, [g.operator("sort", Sort(sort_by="v"), [src.window("tumbling, time(2)")])])
    run_graph(g, clock=VirtualClock())
    assert values(sink.items) == [1, 3, W, 2, W, W, F]  # the tumble at 6 s was empty: a lone mark
    assert [t / S for t in sink.times] == [2, 2, 2, 4, 4, 6, 6.5]


def test_a_tumbling_delta_window_flushes_before_the_tuple_that_leaves_the_delta() -> None:
    rows = [{"ts": t, "v": v} for t, v in [(0, 5), (2, 4), (5, 3), (6, 2), (7, 1)]]
    out = sort(Sort(sort_by="v"), rows, "tumbling, delta(ts, 5)")
    assert values(out) == [3, 4, 5, W]  # ts=6 is more than 5 past ts=0: flush, then a new batch


# ------------------------------------------------------------- progressive


def test_a_sliding_window_sorts_progressively_and_final_flushes_what_is_left() -> None:
    out = sort(Sort(sort_by="v"), vs(5, 3, 8, 1, 9, 2, 7), "sliding, count(3)")
    # full at 8; then each arrival pushes out the smallest kept tuple: 3, then 1 (which had
    # just arrived, smaller than everything), 5, 2; final outputs 7, 8, 9 in order, no marks.
    assert values(out) == [3, 1, 5, 2, 7, 8, 9]


def test_a_descending_progressive_sort_keeps_ties_in_arrival_order() -> None:
    rows = [{"v": v, "i": i} for i, v in enumerate([3, 3, 1, 2])]
    out = sort(Sort(sort_by="v", order="descending"), rows, "sliding, count(3), count(1)")
    # kept [i0, i1, i2] (i0 before i1: same v, earlier); i3 pushes out i0; final: i1, i3, i2
    assert values(out, "i") == [0, 1, 3, 2]


def test_partitioned_progressive_sorts_flush_partition_by_partition_at_final() -> None:
    items = [{"k": k, "v": v} for k, v in [("b", 5), ("a", 2), ("b", 4), ("a", 1), ("b", 6), ("a", 3)]]
    out = sort(Sort(sort_by="v"), items, "sliding, count(2), partitioned", partition_by="k")
    assert out == [{"k": "b", "v": 4}, {"k": "a", "v": 1},  # pushed out by b=6 and a=3
                   {"k": "b", "v": 5}, {"k": "b", "v": 6}, {"k": "a", "v": 2}, {"k": "a", "v": 3}]


def test_a_partition_evicted_from_a_progressive_sort_is_dropped_without_output() -> None:
    items = [{"k": k, "v": v} for k, v in [("a", 2), ("a", 1), ("b", 4), ("b", 3)]]
    out = sort(Sort(sort_by="v"), items, "sliding, count(5), partitioned, partitionCount(1)",
               partition_by="k")
    assert values(out) == [3, 4]


# ----------------------------------------------------------- timeInterval


def test_time_interval_panes_are_sorted_on_each_trigger_then_marked() -> None:
    items = [{"ts": 101 * S, "v": 3}, {"ts": 104 * S, "v": 1}, {"ts": 112 * S, "v": 2},
             Watermark(110 * S), {"ts": 113 * S, "v": 0}, Watermark(121 * S)]
    out = sort(Sort(sort_by="v"), items, "timeInterval, intervalDuration(10)", event_time="ts")
    assert [x for x in out if not isinstance(x, Watermark)] == [
        {"ts": 104 * S, "v": 1}, {"ts": 101 * S, "v": 3}, W,
        {"ts": 113 * S, "v": 0}, {"ts": 112 * S, "v": 2}, W,
    ]


# -------------------------------------------------------------- validation


@pytest.mark.parametrize(("kwargs", "message"), [
    ({}, "sort_by is required"),
    ({"sort_by": []}, "at least one key"),
    ({"sort_by": "v", "order": "up"}, "order='up'; expected 'ascending' or 'descending'"),
    ({"sort_by": ["a", "b", "c"], "order": ["ascending", "descending"]}, "2 values for 3 sort_by keys"),
    ({"sort_by": "v", "partitionBy": "k"}, "declared on the input port"),
    ({"sort_by": 3}, "must be an attribute name or a function"),
    ({"sort_by": "v", "sortBy": "w"}, "given twice"),
    ({"sort_by": "v", "oder": "ascending"}, "did you mean 'order'"),
])
def test_bad_parameters_are_refused_with_the_rule(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(OperatorParameterError, match=message):
        Sort(**kwargs)


@pytest.mark.parametrize(("window", "message"), [
    ("sliding, count(3), count(2)", "needs count\\(N\\) eviction and a count\\(1\\) trigger"),
    ("sliding, time(3)", "needs count\\(N\\) eviction"),
    ("sliding, delta(v, 2), count(1)", "needs count\\(N\\) eviction"),
    ("tumbling, count(0)", "keeps no tuple"),
    (None, "the input port needs a window"),
])
def test_unsupported_windows_are_refused_with_the_graph(window: str | None, message: str) -> None:
    with pytest.raises(GraphValidationError, match=message) as info:
        run_operator(Sort(sort_by="v"), vs(1), window=window)
    assert [(e.operator, e.rule) for e in info.value.errors] == [("op", "operator")]


def test_port_counts_and_unknown_sort_attributes_are_listed_together() -> None:
    g = Graph("sort-misfits")
    s = g.source("s", ListSource([]), schema=Schema(k="rstring", v="int64"))
    g.operator("sort", Sort(sort_by=["v", "when"]), [s.window("sliding, time(3)"), s], [None, None])
    with pytest.raises(GraphValidationError) as info:
        g.freeze()
    assert [e.message for e in info.value.errors] == [
        "has one input and one output port, the graph gives it 2 and 2",
        "sliding window 'sliding, time(3), count(1)': a progressive sort needs count(N) eviction "
        "and a count(1) trigger; allowed: tumbling with count(N >= 1), delta, time or punct eviction; "
        "sliding with count(N >= 1) eviction and a count(1) trigger; timeInterval; each "
        "optionally partitioned",
        "sort_by reads attribute 'when', which the input schema tuple<rstring k, int64 v> does "
        "not have"]


def test_setup_still_refuses_a_window_for_a_host_that_did_not_freeze() -> None:
    class Ctx:
        name = "direct"

        def window(self, port: int) -> Any:
            raise ValueError("no window")

    op = Sort(sort_by="v")
    op.context = Ctx()  # type: ignore[assignment]
    with pytest.raises(OperatorParameterError, match="Sort 'direct': the input port needs a window"):
        op.setup()


# ------------------------------------------------------------ checkpoints


class Replay(Source):
    """Tuples every 0.1 s from 0.05 s; its checkpointed state is how many it sent."""

    def __init__(self, rows: list[Any]) -> None:
        self.rows = rows
        self.offset = 0

    async def run(self) -> None:
        ctx: Any = self.context
        while self.offset < len(self.rows):
            await ctx.sleep_until(S // 20 + self.offset * S // 10)
            self.submit(self.rows[self.offset])
            self.offset += 1

    def snapshot(self) -> Any:
        return self.offset

    def restore(self, state: Any) -> None:
        self.offset = state


class Keep(Operator):
    def __init__(self) -> None:
        self.rows: list[Any] = []

    def on_tuple(self, tup: Any, port: int) -> None:
        self.rows.append(tup)

    def on_punct(self, punct: Punct, port: int) -> None:
        if punct is W:
            self.rows.append("mark")

    def snapshot(self) -> Any:
        return list(self.rows)

    def restore(self, state: Any) -> None:
        self.rows = list(state)


ROWS = [{"k": i % 3, "v": (i * 37) % 23, "i": i} for i in range(60)]


def build(keep: Keep, window: str) -> Graph:
    g = Graph("cksort")
    src = g.source("src", Replay(ROWS))
    out = g.operator("sort", Sort(sort_by=["v", "i"], order=["descending", "ascending"]),
                     [src.window(window, partition_by="k")])
    g.sink("out", keep, [out])
    return g



@settings(max_examples=20, deadline=None)
@given(crash=st.integers(min_value=1, max_value=60),
       window=st.sampled_from(["sliding, count(4), partitioned", "tumbling, count(4), partitioned"]))
def test_a_crash_then_restore_from_a_checkpoint_gives_the_uninterrupted_output(crash: int,
                                                                             window: str) -> None:
    reference = Keep()
    assert run_until_crash(Job(build(reference, window), clock=VirtualClock()), None)
    store = MemoryStore()
    first = Keep()
    if run_until_crash(Job(build(first, window), clock=VirtualClock(), checkpoints=store,
                     checkpoint_period=0.45), crash * S // 10):
        assert first.rows == reference.rows
        return
    second = Keep()
    assert run_until_crash(Job(build(second, window), clock=VirtualClock(), checkpoints=store,
                         checkpoint_period=0.45), None)
    assert second.rows == reference.rows


def test_snapshot_of_a_progressive_sort_holds_its_sorted_partitions_as_plain_data() -> None:
    store = MemoryStore()
    assert not run_until_crash(Job(build(Keep(), "sliding, count(4), partitioned"), clock=VirtualClock(),
                             checkpoints=store, checkpoint_period=1.0), S + S // 2)
    states = store.latest_good().states
    sent = states["src"]["operator"]
    state = states["sort"]["operator"]
    assert state["format"] == "riverbed.sort/1"
    assert [k for k, _ in state["partitions"]] == [0, 1, 2]
    for k, rows in state["partitions"]:
        assert len(rows) == min(4, len([i for i in range(sent) if i % 3 == k]))
        assert [r["v"] for r in rows] == sorted((r["v"] for r in rows), reverse=True)


# ------------------------------------- listeners of its own = the generic path


class EveryEvent(Sort):
    """Sort seeing every event through `on_window_event`: the generic path, the reference."""

    def on_window_event(self, event: Any, port: int) -> None:
        super().on_window_event(event, port)


@settings(max_examples=50, deadline=None)
@given(items=st.lists(st.one_of(st.tuples(st.integers(0, 2), st.integers(0, 5)), st.just(W)),
                      max_size=30),
       window=st.sampled_from(["tumbling, count(3)", "tumbling, punct()", "tumbling, delta(t, 2)",
                               "sliding, count(3)", "sliding, count(2)"]),
       partitioned=st.booleans(), descending=st.booleans(),
       flavor=st.sampled_from(["java", "cpp"]))
def test_the_sort_s_own_listeners_give_exactly_what_every_event_gives(
        items: list[Any], window: str, partitioned: bool, descending: bool, flavor: str) -> None:
    tuples = [x if x is W else {"p": x[0], "v": x[1], "t": i} for i, x in enumerate(items)]
    order = "descending" if descending else "ascending"
    clause = window + (", partitioned" if partitioned else "")
    kw: dict[str, Any] = {"window": clause, "flavor": flavor,
                          "partition_by": "p" if partitioned else None}
    fast = run_operator(Sort(sort_by="v", order=order), tuples, **kw)
    reference = run_operator(EveryEvent(sort_by="v", order=order), tuples, **kw)
    assert fast.items == reference.items
    assert fast.metrics.operators["op"].outputs[0].window_puncts_submitted == \
        reference.metrics.operators["op"].outputs[0].window_puncts_submitted


def test_a_progressive_sort_keeps_its_order_after_a_key_it_cannot_compare() -> None:
    """A tuple whose key cannot be compared goes to the error port; it still takes its slot
    in the window, and its eviction outputs nothing (before, the sorted copy stayed one short
    for good and every later output was the wrong one)."""
    values = [5, None, 9, 1, 7, 3, 8, 2, 6, 4]
    g = Graph("sort-hole")
    s = g.source("s", ListSource([{"v": v} for v in values]))
    out, errors = g.operator("op", Sort(sort_by="v"), [s.window("sliding, count(3)")], [None],
                             error_port=True)
    ok, bad = ListSink(), ListSink()
    g.sink("ok", ok, [out])
    g.sink("bad", bad, [errors])
    run_graph(g, clock=VirtualClock())
    # windows after each arrival: [5 _ 9] -> 1 evicts 5: out 5; [_ 9 1]: 7 evicts the hole;
    # [9 1 7]: 3 evicts 9: out 1; then 3, 7, 2, 6, and final flushes 4, 8, 9 in order
    assert [t["v"] for t in ok.tuples] == [5, 1, 3, 7, 2, 6, 4, 8, 9]
    assert [e["tuple"] for e in bad.tuples] == [{"v": None}]


def test_a_failed_flush_names_the_event_not_the_tuple_that_completed_the_window() -> None:
    # {'w': 2} lacks the sort key; {'v': 3} only completed the window, and was named as if it
    # had failed: "KeyError: 'v' on tuple {'v': 3}".
    from riverbed.operators import Aggregate, Sum
    from riverbed.runtime import JobError
    from riverbed.testing import run_operator

    # (a KeyError's text is its key: what the operator was computing is a note after it)
    for op, what in ((Aggregate({"s": Sum("v")}), "output 's' = Sum(value='v')"),
                     (Sort(sort_by="v"), "Sort sort_by='v'")):
        with pytest.raises(JobError) as info:
            run_operator(op, [{"v": 1}, {"w": 2}, {"v": 3}], window="tumbling, count(3)")
        assert str(info.value).splitlines()[-1].strip() == (
            f"operator 'op', input port 0: KeyError: 'v' ({what}) at EVICTION (3 tuples), set off by "
            "tuple {'v': 3}")

