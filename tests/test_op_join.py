"""SPL Join through the real runtime on the virtual clock: exact outputs and window marks.

Each test lays out a timeline of arrivals, one per second starting at 1 s, on
the left (port 0) or right (port 1) input, so the interleaving of the two
streams is exact. Outputs are compared item by item, marks included.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.checkpoint import MemoryStore
from riverbed.graph import Graph, GraphValidationError, Operator, Punct, Schema, Source
from riverbed.operators._join import Join
from riverbed.operators._params import OperatorParameterError
from riverbed.runtime import Job, VirtualClock, run_graph
from riverbed.testing import ListSink, ListSource, at, run_until_crash

S = 1_000_000_000
W = Punct.WINDOW
F = Punct.FINAL


@dataclass
class Ran:
    ports: list[list[Any]]  # per output port, final mark stripped
    times: list[list[int]]  # clock time (ns) of each item

    @property
    def out(self) -> list[Any]:
        return self.ports[0]


def run_join(op: Join, timeline: Sequence[tuple[str, Any]], *,
             left: str | None = "sliding, count(10)", right: str | None = "sliding, count(10)",
             left_by: Any = None, right_by: Any = None, flavor: str = "java",
             outputs: int = 1, end: float | None = None) -> Ran:
    """``timeline``: ("L" | "R", tuple or Punct.WINDOW), the i-th arriving at i + 1 seconds.
    ``left``/``right``: the ports' window clauses (None: no window, SPL count(0)). Both
    streams stay open until ``end`` seconds if given."""
    items: dict[str, list[Any]] = {"L": [], "R": []}
    for i, (side, item) in enumerate(timeline):
        items[side] += [at(i + 1), item]
    if end is not None:
        items["L"].append(at(end))
        items["R"].append(at(end))
    g = Graph("join")
    a = g.source("left", ListSource(items["L"]))
    b = g.source("right", ListSource(items["R"]))
    lp = a.window(left, partition_by=left_by, flavor=flavor) if left else a
    rp = b.window(right, partition_by=right_by, flavor=flavor) if right else b
    streams = g.operator("join", op, [lp, rp], [None] * outputs)
    streams = streams if isinstance(streams, tuple) else (streams,)
    sinks = [ListSink() for _ in streams]
    for i, (stream, sink) in enumerate(zip(streams, sinks, strict=True)):
        g.sink(f"out{i}", sink, [stream])
    run_graph(g, clock=VirtualClock())
    for sink in sinks:
        assert sink.items[-1] is F and F not in sink.items[:-1]
    return Ran([s.items[:-1] for s in sinks], [s.times[:-1] for s in sinks])


def L(**kw: Any) -> tuple[str, dict[str, Any]]:
    return ("L", kw)


def R(**kw: Any) -> tuple[str, dict[str, Any]]:
    return ("R", kw)


# ------------------------------------------------------------------- inner


def test_an_arrival_matches_the_other_window_in_storage_order_then_one_mark() -> None:
    ran = run_join(Join(), [L(a=1), L(a=2), R(b=1), L(a=3), R(b=2)])
    assert ran.out == [
        {"a": 1, "b": 1}, {"a": 2, "b": 1}, W,  # b=1 meets a=1, a=2 (oldest first)
        {"a": 3, "b": 1}, W,  # a=3 meets b=1; it never meets itself or a=1, a=2
        {"a": 1, "b": 2}, {"a": 2, "b": 2}, {"a": 3, "b": 2}, W,
    ]


def test_no_match_no_mark_and_the_left_attribute_wins_a_name_clash() -> None:
    ran = run_join(Join(match=lambda lhs, rhs: lhs["v"] < rhs["v"]),
                   [L(v=5, side="L"), R(v=1, side="R"), R(v=9, side="R")])
    # SPL auto-assignment takes an attribute from port 0 first: "side" and "v" come from the left.
    assert ran.out == [{"v": 5, "side": "L"}, W]


def test_without_a_schema_the_left_attributes_come_first_then_the_rights_it_lacks() -> None:
    # Attribute order is what a schema-less csv FileSink writes as its columns.
    timeline = [L(a=2, n="l", k=1), R(k=1, b=3, n="r", c=4)]
    merged = run_join(Join(), timeline).out[0]
    assert list(merged.items()) == [("a", 2), ("n", "l"), ("k", 1), ("b", 3), ("c", 4)]
    mapped = run_join(Join(output={"tag": "x"}), timeline).out[0]
    assert list(mapped) == ["a", "n", "k", "b", "c", "tag"]


def test_matching_uses_the_other_window_before_this_arrival_is_inserted() -> None:
    ran = run_join(Join(), [R(b=1), L(a=1), L(a=2), R(b=2)],
                   left="sliding, count(1)", right="sliding, count(1)")
    assert ran.out == [
        {"a": 1, "b": 1}, W,
        {"a": 2, "b": 1}, W,  # a=2 evicted a=1 from its own window: no effect on its matches
        {"a": 2, "b": 2}, W,  # b=2 evicted b=1, then saw only a=2
    ]


def test_equality_keys_make_a_hash_join_combined_with_match() -> None:
    op = Join(equality_lhs=["k", lambda t: t["g"] % 2], equality_rhs=("k", "parity"),
              match=lambda lhs, rhs: rhs["v"] > 0)
    ran = run_join(op, [R(k="x", parity=0, v=1), R(k="x", parity=1, v=2), R(k="x", parity=0, v=-1),
                        R(k="y", parity=0, v=3), L(k="x", g=4), L(k="y", g=1)])
    assert ran.out == [{"k": "x", "parity": 0, "v": 1, "g": 4}, W]


def test_spl_parameter_spellings_are_accepted() -> None:
    op = Join(equalityLHS="k", equalityRHS="k", algorithm="leftOuter", defaultTupleRHS={"r": 0})
    ran = run_join(op, [L(k=1), L(k=2), R(k=2, r=7)], left="sliding, count(1)")
    assert ran.out == [{"k": 1, "r": 0}, W, {"k": 2, "r": 7}, W]


def test_output_assignments_and_output_functions() -> None:
    timeline = [L(a=2, n="l"), R(b=3, n="r")]
    mapped = run_join(Join(output={"prod": lambda lhs, rhs: lhs["a"] * rhs["b"], "tag": "x"}), timeline)
    assert mapped.out == [{"a": 2, "b": 3, "n": "l", "prod": 6, "tag": "x"}, W]
    whole = run_join(Join(output=lambda lhs, rhs: {"pair": (lhs["n"], rhs["n"])}), timeline)
    assert whole.out == [{"pair": ("l", "r")}, W]


# ------------------------------------------------------------------- outer


def test_left_outer_unmatched_evictions_join_the_arrivals_batch_after_its_matches() -> None:
    op = Join(algorithm="leftOuter", equality_lhs="k", equality_rhs="k", default_tuple_rhs={"r": None})
    ran = run_join(op, [L(k=1, a=1), R(k=2, r="b"), L(k=2, a=2), L(k=3, a=3), L(k=2, a=4)],
                   left="sliding, count(1)")
    assert ran.out == [
        {"k": 2, "a": 2, "r": "b"},  # a=2 matches b ...
        {"k": 1, "a": 1, "r": None},  # ... and its insertion evicts a=1, which never matched
        W,
        # a=3 matches nothing and evicts a=2, which matched: no output, no mark
        {"k": 2, "a": 4, "r": "b"},  # a=4 matches b ...
        {"k": 3, "a": 3, "r": None},  # ... and evicts a=3, unmatched
        W,
    ]


def test_right_outer_with_two_outputs_sends_unmatched_tuples_unchanged_without_marks() -> None:
    op = Join(algorithm="rightOuter", match=lambda lhs, rhs: lhs["a"] == rhs["b"])
    ran = run_join(op, [R(b=1), R(b=2), L(a=2), R(b=3), R(b=4)], right="sliding, count(2)", outputs=2)
    assert ran.ports[0] == [{"a": 2, "b": 2}, W]
    # b=3 evicts b=1 (unmatched), b=4 evicts b=2 (matched); port 0 got nothing then: no mark.
    assert ran.ports[1] == [{"b": 1}]


def test_outer_with_three_outputs() -> None:
    op = Join(algorithm="outer", match=lambda lhs, rhs: lhs["a"] == rhs["b"])
    ran = run_join(op, [L(a=1), R(b=1), R(b=2), L(a=3), L(a=4), R(b=5), L(a=6), R(b=7)],
                   left="sliding, count(2)", right="sliding, count(2)", outputs=3)
    assert ran.ports[0] == [{"a": 1, "b": 1}, W]  # only port 0 gets marks
    # a=4 and b=5 evict matched tuples (a=1, b=1); a=6 and b=7 evict unmatched ones.
    assert ran.ports[1] == [{"a": 3}]
    assert ran.ports[2] == [{"b": 2}]


def test_outer_with_one_output_joins_unmatched_tuples_with_the_default_tuples() -> None:
    op = Join(algorithm="outer", match=lambda lhs, rhs: lhs["a"] == rhs["b"],
              default_tuple_lhs={"a": -1}, default_tuple_rhs={"b": -1})
    ran = run_join(op, [L(a=1), R(b=2), L(a=3), R(b=4)],
                   left="sliding, count(1)", right="sliding, count(1)")
    assert ran.out == [{"a": 1, "b": -1}, W, {"a": -1, "b": 2}, W]


def test_final_punctuation_does_not_flush_unmatched_tuples_and_input_marks_are_ignored() -> None:
    op = Join(algorithm="outer", match=lambda lhs, rhs: lhs["a"] == rhs["b"])
    ran = run_join(op, [L(a=1), ("L", W), R(b=2), ("R", W), L(a=2)], outputs=3)
    # a=1 and b=2 are still in their windows, unmatched, when final arrives: never output
    assert ran.ports == [[{"a": 2, "b": 2}, W], [], []]


# --------------------------------------------------------- count(0) lookup


def test_an_unwindowed_port_is_the_count0_lookup_side() -> None:
    op = Join(algorithm="leftOuter", equality_lhs="sym", equality_rhs="sym",
              default_tuple_rhs={"px": 0.0})
    ran = run_join(op, [R(sym="A", px=1.0), L(sym="A", q=1), L(sym="B", q=2), R(sym="A", px=2.0),
                        R(sym="A", px=3.0), L(sym="A", q=3)],
                   left=None, right="sliding, count(2)")
    assert ran.out == [
        {"sym": "A", "q": 1, "px": 1.0}, W,
        {"sym": "B", "q": 2, "px": 0.0}, W,  # no match: out at once with the default tuple
        # right arrivals find an empty left side: the lookup side keeps nothing
        {"sym": "A", "q": 3, "px": 2.0}, {"sym": "A", "q": 3, "px": 3.0}, W,
    ]


def test_a_lookup_side_with_its_own_outer_port() -> None:
    op = Join(algorithm="leftOuter", match=lambda lhs, rhs: lhs["a"] == rhs["b"])
    ran = run_join(op, [R(b=1), L(a=1), L(a=2)], left=None, right="sliding, count(5)", outputs=2)
    assert ran.ports == [[{"a": 1, "b": 1}, W], [{"a": 2}]]


# ------------------------------------------------------------- partitions


def test_partitioned_windows_evict_per_partition_and_match_partition_by_partition() -> None:
    op = Join(algorithm="rightOuter", match=lambda lhs, rhs: True)
    ran = run_join(op, [R(k="x", b=1), R(k="y", b=2), R(k="x", b=3), L(a=1), R(k="y", b=4),
                        R(k="z", b=5)],
                   right="sliding, count(1), partitioned", right_by="k", outputs=2)
    assert ran.ports[0] == [
        # partitions in creation order (x, then y), oldest first within each
        {"a": 1, "k": "x", "b": 3}, {"a": 1, "k": "y", "b": 2}, W,
        # b=4 meets a=1; it also evicts b=2 (matched): nothing for that
        {"a": 1, "k": "y", "b": 4}, W,
        {"a": 1, "k": "z", "b": 5}, W,
    ]
    assert ran.ports[1] == [{"k": "x", "b": 1}]  # evicted from partition x by b=3, unmatched


def test_equality_join_of_partitioned_windows() -> None:
    op = Join(equality_lhs="k", equality_rhs="k")
    ran = run_join(op, [R(k=1, g="p", b=1), R(k=1, g="q", b=2), R(k=1, g="p", b=3), R(k=2, g="p", b=4),
                        L(k=1, a=1)],
                   right="sliding, count(1), partitioned", right_by="g")
    # partition p holds b=4 (k=2) only; b=3 was evicted by it
    assert ran.out == [{"k": 1, "g": "q", "b": 2, "a": 1}, W]


def test_a_partition_eviction_drops_its_tuples_silently_even_in_an_outer_join() -> None:
    op = Join(algorithm="rightOuter")
    ran = run_join(op, [R(k=1, b=1), R(k=2, b=2), L(a=1)],
                   right="sliding, count(5), partitioned, partitionCount(1)", right_by="k", outputs=2)
    assert ran.ports == [[{"a": 1, "k": 2, "b": 2}, W], []]


# ------------------------------------------------------------- time, delta


@pytest.mark.parametrize(("flavor", "lag"), [("java", 1_000_000), ("cpp", 1)])
def test_time_evictions_output_unmatched_tuples_on_their_own_without_a_mark(flavor: str, lag: int) -> None:
    op = Join(algorithm="rightOuter", match=lambda lhs, rhs: lhs["a"] == rhs["b"])
    ran = run_join(op, [R(b=1), L(a=1), R(b=2), R(b=3), L(a=3)], left="sliding, count(1)",
                   right="sliding, time(3)", flavor=flavor, outputs=1, end=20)
    assert ran.out == [{"a": 1, "b": 1}, W, {"a": 3, "b": 3}, W, {"b": 2}]
    assert ran.times[0][-1] == 3 * S + 3 * S + lag  # b=2 arrived at 3 s: out once older than 3 s


@pytest.mark.parametrize("flavor", ["java", "cpp"])
def test_time_still_evicts_from_a_side_whose_input_ended(flavor: str) -> None:
    # SPL's Join windows never see final: with the right input ended at 0 s and the left going
    # on to 10 s, the right tuple leaves its window at 1 s, unmatched (the Java flavor's final
    # stopped that window's timers for good).
    g = Graph("j")
    left = g.source("left", ListSource([{"id": 1, "l": "a"}, at(10)]))
    right = g.source("right", ListSource([{"id": 9, "r": "y"}]))
    out = g.operator("join", Join(equality_lhs="id", equality_rhs="id", algorithm="outer"),
                     [left.window("sliding, time(1)", flavor=flavor),
                      right.window("sliding, time(1)", flavor=flavor)])
    sink = ListSink()
    g.sink("k", sink, [out])
    run_graph(g, clock=VirtualClock())
    assert sink.tuples == [{"id": 1, "l": "a"}, {"id": 9, "r": "y"}]


def test_delta_evictions_belong_to_the_arrivals_batch() -> None:
    op = Join(algorithm="rightOuter", match=lambda lhs, rhs: lhs["a"] == rhs["b"],
              default_tuple_lhs={"a": None})
    ran = run_join(op, [L(a=10), R(b=1, t=0), R(b=2, t=1), R(b=10, t=5)],
                   right="sliding, delta(t, 2), count(1)")
    assert ran.out == [
        {"a": 10, "b": 10, "t": 5},  # b=10 matches a=10 ...
        {"a": None, "b": 1, "t": 0}, {"a": None, "b": 2, "t": 1},  # ... after evicting these
        W,
    ]


# ---------------------------------------------------- fast path = reference


def _reference(op: Join) -> Join:
    op._fast = False  # the generic handlers only
    return op


@settings(max_examples=40, deadline=None)
@given(arrivals=st.lists(st.tuples(st.sampled_from("LR"), st.integers(0, 3), st.integers(0, 9)),
                         min_size=1, max_size=30),
       algorithm=st.sampled_from(["inner", "leftOuter", "rightOuter", "outer"]),
       windows=st.sampled_from([("sliding, count(3)", "sliding, count(2)"),
                                ("sliding, delta(t, 3)", "sliding, count(4)"),
                                ("sliding, time(4)", "sliding, delta(t, 2)")]),
       flavor=st.sampled_from(["java", "cpp"]), outputs3=st.booleans())
def test_the_compiled_equality_path_gives_exactly_the_reference_output(
        arrivals: list[tuple[str, int, int]], algorithm: str, windows: tuple[str, str], flavor: str,
        outputs3: bool) -> None:
    timeline = [(side, {"k": k, "v": v, "t": i, side: i}) for i, (side, k, v) in enumerate(arrivals)]
    outputs = {"outer": 3, "leftOuter": 2, "rightOuter": 2}.get(algorithm, 1) if outputs3 else 1

    def make() -> Join:
        return Join(algorithm=algorithm, equality_lhs="k", equality_rhs="k",
                    match=lambda lhs, rhs: (lhs["v"] + rhs["v"]) % 3 != 0)

    kw: dict[str, Any] = {"left": windows[0], "right": windows[1], "flavor": flavor, "outputs": outputs,
                          "end": len(arrivals) + 10}
    assert run_join(make(), timeline, **kw).ports == run_join(_reference(make()), timeline, **kw).ports


# -------------------------------------------------------------- validation


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"algorithm": "full"}, "algorithm='full'; expected 'inner'"),
    ({"equality_lhs": "k"}, "go together"),
    ({"equality_lhs": ["a", "b"], "equality_rhs": "a"}, "2 key.*1"),
    ({"default_tuple_lhs": {"a": 1}}, "default_tuple_lhs is used only by a 'rightOuter' or 'outer'"),
    ({"algorithm": "rightOuter", "default_tuple_rhs": {"a": 1}}, "default_tuple_rhs is used only"),
    ({"match": 3}, "match=3 must be a function"),
    ({"partitionByLHS": "k"}, r"declared on the input port.*left.window"),
    ({"mtch": None}, "unknown parameter 'mtch'.*did you mean 'match'"),
    ({"equality_lhs": "k", "equalityLHS": "k"}, "given twice"),
    ({"output": 5}, "output=5"),
])
def test_bad_parameters_are_refused_with_the_rule(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(OperatorParameterError, match=message):
        Join(**kwargs)


@pytest.mark.parametrize(("setup", "message"), [
    ({"left": "tumbling, count(2)"}, "port 0 .*'tumbling, count\\(2\\)' is not sliding"),
    ({"right": "sliding, count(3), count(2)"}, "port 1 .*needs a count\\(1\\) trigger"),
    ({"right": "sliding, time(3), time(1)"}, "needs a count\\(1\\) trigger"),
    ({"right": "sliding, count(0), count(1)", "flavor": "cpp"}, "connect the stream without a window"),
    ({"left": None, "right": None}, "both input ports are connected without a window"),
    ({"outputs": 2}, "'inner' join has 1 output port"),
    ({"outputs": 2, "op": Join(algorithm="outer")}, "'outer' join has 1 or 3 output"),
    ({"outputs": 3, "op": Join(algorithm="leftOuter", default_tuple_rhs={"x": 1})}, "1 or 2"),
    ({"outputs": 2, "op": Join(algorithm="leftOuter", default_tuple_rhs={"x": 1})},
     "default tuples are for single-output"),
])
def test_unsupported_windows_and_ports_are_refused_with_the_graph(setup: dict[str, Any],
                                                                  message: str) -> None:
    op = setup.pop("op", Join())
    with pytest.raises(GraphValidationError, match=message) as info:
        run_join(op, [L(a=1)], **setup)
    assert {(e.operator, e.rule) for e in info.value.errors} == {("join", "operator")}


def test_every_port_rule_a_join_breaks_is_listed() -> None:
    g = Graph("join-misfits")
    s = g.source("s", ListSource([]))
    g.operator("join", Join(algorithm="outer"),
               [s.window("tumbling, count(2)"), s.window("sliding, count(3), count(2)"), s],
               [None, None])
    with pytest.raises(GraphValidationError) as info:
        g.freeze()
    assert [m.split(";")[0] for m in (e.message for e in info.value.errors)] == [
        "needs exactly 2 input ports (left, right), the graph gives it 3",
        "a 'outer' join has 1 or 3 output port(s), the graph gives it 2",
        "input port 0 (left): window 'tumbling, count(2)' is not sliding",
        "input port 1 (right): window 'sliding, count(3), count(2)': Join needs a count(1) trigger "
        "(every arrival joins)"]


# ----------------------------------------------------------- checkpoints


class Replay(Source):
    """Emits scheduled tuples (time in seconds, tuple) and stays open until ``end``;
    its checkpointed state is the index of the next tuple."""

    def __init__(self, items: list[tuple[float, Any]], end: float) -> None:
        self.items = items
        self.end = end
        self.offset = 0

    async def run(self) -> None:
        ctx: Any = self.context
        tick = S // 4  # wake up regularly: a source takes a checkpoint when it flushes
        while True:
            done = self.offset >= len(self.items)
            when = round((self.end if done else self.items[self.offset][0]) * S)
            now = ctx.now()
            if now < when:
                await ctx.sleep_until(min(when, (now // tick + 1) * tick))
            elif done:
                return
            else:
                self.submit(self.items[self.offset][1])
                self.offset += 1

    def snapshot(self) -> Any:
        return self.offset

    def restore(self, state: Any) -> None:
        self.offset = state


class Keep(Operator):
    """A sink whose state is what it received (punctuation as strings)."""

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


def _stream(name: str, seed: int, n: int, offset: float) -> list[tuple[float, Any]]:
    return [(offset + i * 0.1, {"k": (seed + i * i) % 7, "g": i % 3, name: i}) for i in range(n)]


def build_checkpointed(keeps: list[Keep], *, left: str, right: str) -> Graph:
    g = Graph("ckjoin")
    a = g.source("left", Replay(_stream("l", 1, 60, 0.05), 7.0))
    b = g.source("right", Replay(_stream("r", 2, 60, 0.1), 7.0))
    op = Join(algorithm="outer", equality_lhs="k", equality_rhs="k",
              match=lambda lhs, rhs: (lhs["l"] + rhs["r"]) % 3 != 0)
    outs = g.operator("join", op, [a.window(left, partition_by=lambda t: (t["g"], "p")),
                                   b.window(right)], [None, None, None])
    for i, (stream, keep) in enumerate(zip(outs, keeps, strict=True)):
        g.sink(f"out{i}", keep, [stream])
    return g



WINDOWS = {"count": ("sliding, count(2), partitioned", "sliding, count(4)"),
           "delta": ("sliding, delta(l, 8), partitioned", "sliding, delta(r, 5)")}


@settings(max_examples=20, deadline=None)
@given(crash=st.integers(min_value=1, max_value=65), kind=st.sampled_from(sorted(WINDOWS)))
def test_a_crash_then_restore_from_a_checkpoint_gives_the_uninterrupted_output(crash: int, kind: str) -> None:
    left, right = WINDOWS[kind]
    reference = [Keep(), Keep(), Keep()]
    reference_job = Job(build_checkpointed(reference, left=left, right=right), clock=VirtualClock())
    assert run_until_crash(reference_job, None)
    assert all(k.rows for k in reference), "the workload reaches every output"

    store = MemoryStore()
    first = [Keep(), Keep(), Keep()]
    job = Job(build_checkpointed(first, left=left, right=right), clock=VirtualClock(),
              checkpoints=store, checkpoint_period=0.45)
    if run_until_crash(job, crash * S // 10):
        assert [k.rows for k in first] == [k.rows for k in reference]
        return
    second = [Keep(), Keep(), Keep()]
    restarted = Job(build_checkpointed(second, left=left, right=right), clock=VirtualClock(),
                    checkpoints=store, checkpoint_period=0.45)
    assert run_until_crash(restarted, None)
    assert [k.rows for k in second] == [k.rows for k in reference], \
        f"crash at {crash / 10} s, restored from {restarted.restored_from}"


@pytest.mark.parametrize(("flavor", "partitioned"), [("java", False), ("java", True), ("cpp", True)])
def test_restoring_later_evicts_overdue_tuples_and_outputs_the_unmatched_ones(flavor: str,
                                                                             partitioned: bool) -> None:
    """A time window restored after its tuples expired evicts them while it is being restored,
    before the operator could rebuild its mirrors: the checkpointed flags still decide."""
    clause = "sliding, time(5), partitioned" if partitioned else "sliding, time(5)"
    by = (lambda t: t["b"] % 2) if partitioned else None

    def build(keeps: list[Keep]) -> Graph:
        g = Graph("late")
        a = g.source("left", Replay([(1.0, {"a": 1}), (12.0, {"a": 3})], 20.0))
        b = g.source("right", Replay([(0.5, {"b": 1}), (1.5, {"b": 2}), (11.0, {"b": 3}),
                                      (13.0, {"b": 4})], 20.0))
        op = Join(algorithm="rightOuter", match=lambda lhs, rhs: lhs["a"] == rhs["b"])
        outs = g.operator("join", op, [a.window("sliding, count(1)", flavor=flavor),
                                       b.window(clause, partition_by=by, flavor=flavor)], [None, None])
        for i, (stream, keep) in enumerate(zip(outs, keeps, strict=True)):
            g.sink(f"out{i}", keep, [stream])
        return g

    store = MemoryStore()
    first = [Keep(), Keep()]
    assert not run_until_crash(Job(build(first), clock=VirtualClock(), checkpoints=store,
                             checkpoint_period=2.0), 3 * S)
    state = store.latest_good()
    assert state is not None and state.id == 1
    right = [[1, 1, [0]], [0, 1, []]] if partitioned else [[None, 2, [0]]]  # b=1 matched, b=2 not
    assert state.states["join"]["operator"]["sides"] == [[[None, 1, [0]]], right]

    # Restarted at 10 s: b=1 (matched) and b=2 (not) are overdue and leave during the restore.
    second = [Keep(), Keep()]
    assert run_until_crash(Job(build(second), clock=VirtualClock(10 * S), checkpoints=store), None)
    assert second[0].rows == [{"a": 1, "b": 1}, "mark", {"a": 3, "b": 3}, "mark"]
    assert second[1].rows == [{"b": 2}, {"b": 4}]  # b=4 when it expires at 18 s


# ------------------------------------------------- listeners on the windows


class Recording(Join):
    """A subclass that looks at every window event, as one written against on_window_event."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.seen: list[tuple[str, int]] = []

    def on_window_event(self, event: Any, port: int) -> None:
        self.seen.append((event.type.name, port))
        super().on_window_event(event, port)


def test_a_subclass_overriding_on_window_event_still_sees_insertions_and_evictions() -> None:
    op = Recording(equality_lhs="k", equality_rhs="k")
    ran = run_join(op, [L(k=1, a=1), R(k=1, b=1), R(k=1, b=2)], right="sliding, count(1)")
    assert ran.out == [{"k": 1, "a": 1, "b": 1}, W, {"k": 1, "a": 1, "b": 2}, W]
    assert [s for s in op.seen if s[0] in ("INSERTION", "EVICTION")] == [
        ("INSERTION", 0), ("INSERTION", 1), ("EVICTION", 1), ("INSERTION", 1)]
    assert op.seen.count(("TRIGGER", 1)) == 2  # every event, as from the host


# ------------------------------------------------------- a declared output schema


def schema_join(algorithm: str, out: Schema, **params: Any) -> list[Any]:
    left_schema = Schema(k="int64", a="int64")
    right_schema = Schema(k="int64", b="int64", seen="list<int64>")
    g = Graph("schema-join")
    left = g.source("l", ListSource([at(1), {"k": 1, "a": 1}, at(2), {"k": 2, "a": 2},
                                     at(4), {"k": 4, "a": 4}]), schema=left_schema)
    right = g.source("r", ListSource([at(1.5), {"k": 1, "b": 10, "seen": [1]}, at(3),
                                      {"k": 3, "b": 30, "seen": [3]}, at(5),
                                      {"k": 5, "b": 50, "seen": [5]}]), schema=right_schema)
    joined = g.operator("j", Join(algorithm=algorithm, equality_lhs="k", equality_rhs="k", **params),
                        [left.window("sliding, count(1)"), right.window("sliding, count(1)")], [out])
    sink = ListSink()
    g.sink("out", sink, [joined])
    run_graph(g, clock=VirtualClock())
    return sink.tuples


def test_an_outer_join_fills_the_missing_side_of_a_declared_output_with_defaults() -> None:
    """SPL: the output is the declared type; a missing side is a default-initialised tuple."""
    out = Schema(k="int64", a="int64", b="int64", tag="rstring", seen="list<int64>")
    rows = schema_join("outer", out, output={"tag": "j"})
    assert rows == [{"k": 1, "a": 1, "b": 10, "tag": "j", "seen": [1]},
                    {"k": 2, "a": 2, "b": 0, "tag": "j", "seen": []},
                    {"k": 3, "a": 0, "b": 30, "tag": "j", "seen": [3]}]  # 4, 5: never evicted
    rows = schema_join("leftOuter", Schema(k="int64", a="int64", b="int64"),
                       default_tuple_rhs={"b": -1})
    assert rows == [{"k": 1, "a": 1, "b": 10}, {"k": 2, "a": 2, "b": -1}]


def test_a_declared_output_takes_only_its_attributes() -> None:
    assert schema_join("inner", Schema(k="int64", b="int64")) == [{"k": 1, "b": 10}]


def test_an_output_attribute_nothing_gives_is_refused_with_the_graph() -> None:
    with pytest.raises(GraphValidationError, match=r"output attribute 'site' is not assigned "
                                                   r"\(output=\.\.\.\) and neither input schema has it"):
        schema_join("inner", Schema(k="int64", site="rstring"))


@pytest.mark.parametrize("left_window", ["sliding, count(1)", "sliding, count(5)", "sliding, time(1.2)"])
def test_list_typed_equality_keys_match_by_value(left_window: str) -> None:
    """SPL compares list keys by value; a dict cannot hold a list, so the frozen form keys."""
    g = Graph("list-keys")
    left = g.source("l", ListSource([at(1), {"k": [1, 2], "a": 1}, at(2), {"k": [2], "a": 2},
                                     at(4), {"k": [1, 2], "a": 3}]),
                    schema=Schema(k="list<int64>", a="int64"))
    right = g.source("r", ListSource([at(1.5), {"k": [1, 2], "b": 10}, at(3), {"k": [2], "b": 30},
                                      at(5), {"k": [1, 2], "b": 50}]),
                     schema=Schema(k="list<int64>", b="int64"))
    joined = g.operator("j", Join(equality_lhs="k", equality_rhs="k"),
                        [left.window(left_window), right.window("sliding, count(5)")])
    sink = ListSink()
    g.sink("out", sink, [joined])
    run_graph(g, clock=VirtualClock())
    pairs = [(t["a"], t["b"]) for t in sink.tuples]
    expected = {"sliding, count(1)": [(1, 10), (2, 30), (3, 10), (3, 50)],
                "sliding, count(5)": [(1, 10), (2, 30), (3, 10), (1, 50), (3, 50)],
                "sliding, time(1.2)": [(1, 10), (2, 30), (3, 10), (3, 50)]}[left_window]
    assert sorted(pairs) == sorted(expected)
