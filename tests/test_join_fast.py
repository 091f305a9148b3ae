"""Join's compiled handlers (`riverbed.operators._join_fast`) against the reference handlers.

The reference is the same operator with ``_fast`` off (the generic `Join._arrived` /
`Join._evicted` through an EVICTION listener). The compiled paths must give the same items on
every output port, marks included, also across a crash and a restore, and also when a tuple
fails (its error goes to the error port and the join goes on).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.checkpoint import MemoryStore
from riverbed.graph import Graph, Punct
from riverbed.operators._join import Join
from riverbed.runtime import Job, VirtualClock, run_graph
from riverbed.testing import ListSink, ListSource, at, run_until_crash
from tests.test_op_join import Keep, Replay

_W = Punct.WINDOW


def _run(op: Join, timeline: Sequence[tuple[str, Any]], *, left: str | None, right: str | None,
         flavor: str = "java", outputs: int = 1, error_port: bool = False) -> list[list[Any]]:
    """The items of every output port (final mark stripped); ``timeline`` as in test_op_join."""
    items: dict[str, list[Any]] = {"L": [], "R": []}
    for i, (side, item) in enumerate(timeline):
        items[side] += [at(i + 1), item]
    g = Graph("joinfast")
    a = g.source("left", ListSource(items["L"]))
    b = g.source("right", ListSource(items["R"]))
    lp = a.window(left, flavor=flavor) if left else a
    rp = b.window(right, flavor=flavor) if right else b
    streams = g.operator("join", op, [lp, rp], [None] * outputs, error_port=error_port)
    streams = streams if isinstance(streams, tuple) else (streams,)
    sinks = [ListSink() for _ in streams]
    for i, (stream, sink) in enumerate(zip(streams, sinks, strict=True)):
        g.sink(f"out{i}", sink, [stream])
    run_graph(g, clock=VirtualClock())
    return [s.items[:-1] for s in sinks]


def _reference(op: Join) -> Join:
    op._fast = False
    return op


def _fifo_ports(op: Join) -> list[int]:
    """The ports whose arrivals evict from the mirror themselves (the count path)."""
    return [side.port for side in op._sides if side.fifo is not None]


OUTPUT = {"plain": None, "assigned": {"sum": lambda lhs, rhs: lhs.get("v", 0) + rhs.get("v", 0), "c": 7},
          "function": lambda lhs, rhs: {"l": lhs.get("L"), "r": rhs.get("R")}}

# An attribute is read with a subscript on the count path; the other forms call the key function.
KEYS: dict[str, Any] = {"name": "k", "list": ["k"], "function": lambda t: t["k"] % 2,
                        "names": ["k", "v"]}


@settings(max_examples=60, deadline=None)
@given(arrivals=st.lists(st.tuples(st.sampled_from("LR"), st.integers(0, 3), st.integers(0, 9)),
                         min_size=1, max_size=40),
       algorithm=st.sampled_from(["inner", "leftOuter", "rightOuter"]),
       windows=st.sampled_from([("sliding, count(3)", "sliding, count(2)"),
                                ("sliding, count(1)", "sliding, count(5)"),
                                ("sliding, delta(t, 3)", "sliding, count(4)"),
                                ("sliding, count(2)", "sliding, time(4)"),
                                ("sliding, count(3)", None)]),
       flavor=st.sampled_from(["java", "cpp"]), with_match=st.booleans(),
       output=st.sampled_from(sorted(OUTPUT)), outputs2=st.booleans(),
       key=st.sampled_from(sorted(KEYS)))
def test_the_count_path_gives_exactly_the_reference_output(
        arrivals: list[tuple[str, int, int]], algorithm: str, windows: tuple[str, str | None],
        flavor: str, with_match: bool, output: str, outputs2: bool, key: str) -> None:
    """Every key collides often (4 keys), windows are small, and the clash attribute ``v`` is on
    both sides (the left one must win): matching order, eviction order and the merge all show."""
    timeline = [(side, {"k": k, "v": v, "t": i, side: i}) for i, (side, k, v) in enumerate(arrivals)]
    outputs = 2 if outputs2 and algorithm != "inner" else 1

    def make() -> Join:
        return Join(algorithm=algorithm, equality_lhs=KEYS[key], equality_rhs=KEYS[key],
                    output=OUTPUT[output],
                    match=(lambda lhs, rhs: (lhs["v"] + rhs["v"]) % 3 != 0) if with_match else None)

    kw: dict[str, Any] = {"left": windows[0], "right": windows[1], "flavor": flavor, "outputs": outputs}
    fast = make()
    assert _run(fast, timeline, **kw) == _run(_reference(make()), timeline, **kw)
    # The count path is what ran: an inner side with a count window has it.
    expected = [p for p, (clause, outer) in enumerate(zip(
        windows, (algorithm == "leftOuter", algorithm == "rightOuter"), strict=True))
        if clause is not None and "count" in clause and not outer and windows[1 - p] is not None]
    assert _fifo_ports(fast) == expected


@settings(max_examples=60, deadline=None)
@given(arrivals=st.lists(st.tuples(st.sampled_from("LR"), st.integers(0, 3), st.integers(0, 9)),
                         min_size=1, max_size=40),
       algorithm=st.sampled_from(["inner", "leftOuter", "rightOuter", "outer"]),
       windows=st.sampled_from([("sliding, count(3)", "sliding, count(2)"),
                                ("sliding, count(2)", "sliding, count(4)"),
                                ("sliding, time(5)", "sliding, count(3)"),
                                ("sliding, count(3)", "sliding, delta(t, 4)")]),
       flavor=st.sampled_from(["java", "cpp"]))
def test_the_plain_pairs_give_exactly_the_reference_output(
        arrivals: list[tuple[str, int, int]], algorithm: str, windows: tuple[str, str],
        flavor: str) -> None:
    """No ``match``, no ``output``: the pairs are built inline, and the matched flags they set on
    the other side decide which of its tuples go out unmatched when they leave (outer joins)."""
    timeline = [(side, {"k": k, "v": v, "t": i, side: i}) for i, (side, k, v) in enumerate(arrivals)]
    kw: dict[str, Any] = {"left": windows[0], "right": windows[1], "flavor": flavor}

    def make() -> Join:
        return Join(algorithm=algorithm, equality_lhs="k", equality_rhs="k")

    assert _run(make(), timeline, **kw) == _run(_reference(make()), timeline, **kw)


@pytest.mark.parametrize("windows", [("sliding, count(3)", "sliding, delta(t, 4)"),
                                     ("sliding, delta(t, 4)", "sliding, count(3)"),
                                     ("sliding, count(3)", "sliding, count(3)"),
                                     ("sliding, time(30)", "sliding, time(30)")])
@pytest.mark.parametrize("algorithm", ["leftOuter", "rightOuter", "outer"])
@pytest.mark.parametrize("first", ["L", "R"])
def test_a_tuple_matched_only_by_a_later_arrival_does_not_leave_unmatched(
        windows: tuple[str, str], algorithm: str, first: str) -> None:
    """The first tuple finds nothing; the other side's next arrival matches it (flagging it);
    three more arrivals on its own side push it out of a count or delta window: silently."""
    other = "R" if first == "L" else "L"
    timeline = [(first, {"k": 1, first: 1, "t": 1}), (other, {"k": 1, other: 1, "t": 2})]
    timeline += [(first, {"k": 2, first: i, "t": 10 + i}) for i in range(2, 6)]
    kw: dict[str, Any] = {"left": windows[0], "right": windows[1]}

    def make() -> Join:
        return Join(algorithm=algorithm, equality_lhs="k", equality_rhs="k")

    out = _run(make(), timeline, **kw)
    assert out == _run(_reference(make()), timeline, **kw)
    assert {"k": 1, first: 1, "t": 1} not in out[0]  # never joined with a default tuple


def test_the_plain_merge_lets_the_left_attribute_win_from_either_side() -> None:
    timeline = [("L", {"k": 1, "x": "left1"}), ("R", {"k": 1, "x": "right1", "r": 1}),
                ("L", {"k": 1, "x": "left2"})]
    fast = Join(equality_lhs="k", equality_rhs="k")
    out = _run(fast, timeline, left="sliding, count(2)", right="sliding, count(2)")
    assert _fifo_ports(fast) == [0, 1]
    assert out == [[{"k": 1, "x": "left1", "r": 1}, _W, {"k": 1, "x": "left2", "r": 1}, _W]]


def test_a_count_window_drops_exactly_its_oldest_tuple_on_each_arrival() -> None:
    """count(2) on the right: the third right arrival evicts the first, which no longer matches."""
    timeline = [("R", {"k": 1, "r": 1}), ("R", {"k": 2, "r": 2}), ("R", {"k": 1, "r": 3}),
                ("L", {"k": 1, "l": 1}), ("L", {"k": 2, "l": 2})]
    fast = Join(equality_lhs="k", equality_rhs="k")
    out = _run(fast, timeline, left="sliding, count(2)", right="sliding, count(2)")
    assert out == [[{"k": 1, "r": 3, "l": 1}, _W, {"k": 2, "r": 2, "l": 2}, _W]]
    right = fast._sides[1]
    assert right.fifo is not None and [e[0]["r"] for e in right.fifo] == [2, 3]
    assert {k: [e[0]["r"] for e in dq] for k, dq in right.index.items()} == {1: [3], 2: [2]}


# ------------------------------------------------------------ a failing tuple


@pytest.mark.parametrize("windows", [("sliding, count(2)", "sliding, count(2)"),
                                     ("sliding, time(30)", "sliding, delta(t, 5)")])
def test_a_tuple_without_the_key_is_routed_once_and_the_join_goes_on(windows: tuple[str, str]) -> None:
    """The keyless tuple stays in its window (the window took it before the join failed on it):
    its eviction later is silent, and the next arrivals join as if it were any unmatched tuple."""
    timeline = [("L", {"k": 1, "l": 1, "t": 1}), ("L", {"l": 2, "t": 2}), ("R", {"k": 1, "r": 1, "t": 3}),
                ("L", {"k": 1, "l": 3, "t": 4}), ("L", {"k": 1, "l": 4, "t": 5}),
                ("R", {"k": 1, "r": 2, "t": 6}), ("L", {"k": 2, "l": 5, "t": 7}),
                ("R", {"k": 2, "r": 3, "t": 8})]
    kw: dict[str, Any] = {"left": windows[0], "right": windows[1], "error_port": True}
    fast = _run(Join(equality_lhs="k", equality_rhs="k"), timeline, **kw)
    assert fast == _run(_reference(Join(equality_lhs="k", equality_rhs="k")), timeline, **kw)
    errors = fast[1]
    assert len(errors) == 1 and errors[0]["tuple"] == {"l": 2, "t": 2}, errors
    if windows[0] == "sliding, count(2)":  # the left window: l=1 and l=2, then l=2, l=3 ...
        assert fast[0] == [{"k": 1, "r": 1, "l": 1, "t": 1}, _W,
                           {"k": 1, "r": 1, "l": 3, "t": 4}, _W,
                           {"k": 1, "r": 1, "l": 4, "t": 5}, _W,  # l=2 evicted silently before
                           {"k": 1, "l": 3, "r": 2, "t": 4}, {"k": 1, "l": 4, "r": 2, "t": 5}, _W,
                           {"k": 2, "r": 3, "l": 5, "t": 7}, _W]


# ------------------------------------------------------------- checkpoints


def _build(keeps: list[Keep], left: str, right: str, algorithm: str) -> Graph:
    g = Graph("ckfast")
    a = g.source("left", Replay([(0.05 + i * 0.1, {"k": (1 + i * i) % 5, "l": i}) for i in range(60)], 7.0))
    b = g.source("right", Replay([(0.1 + i * 0.1, {"k": (2 + i * i) % 5, "r": i}) for i in range(60)], 7.0))
    op = Join(algorithm=algorithm, equality_lhs="k", equality_rhs="k")
    n = 2 if algorithm != "inner" else 1
    outs = g.operator("join", op, [a.window(left), b.window(right)], [None] * n)
    outs = outs if isinstance(outs, tuple) else (outs,)
    for i, (stream, keep) in enumerate(zip(outs, keeps, strict=True)):
        g.sink(f"out{i}", keep, [stream])
    return g


CHECKPOINTED = {"inner count": ("sliding, count(3)", "sliding, count(4)", "inner"),
                "leftOuter count": ("sliding, count(3)", "sliding, count(4)", "leftOuter"),
                "inner count/delta": ("sliding, count(2)", "sliding, delta(r, 5)", "inner")}


@settings(max_examples=25, deadline=None)
@given(crash=st.integers(min_value=1, max_value=65), kind=st.sampled_from(sorted(CHECKPOINTED)))
def test_a_restored_count_path_gives_the_uninterrupted_output(crash: int, kind: str) -> None:
    """The mirrors are rebuilt at the first event after the restore; on a full count window that
    is an INSERTION whose eviction raised no event, so the oldest checkpointed flag is dropped."""
    left, right, algorithm = CHECKPOINTED[kind]
    n = 2 if algorithm != "inner" else 1
    reference = [Keep() for _ in range(n)]
    assert run_until_crash(Job(_build(reference, left, right, algorithm), clock=VirtualClock()), None)
    store = MemoryStore()
    first = [Keep() for _ in range(n)]
    job = Job(_build(first, left, right, algorithm), clock=VirtualClock(), checkpoints=store,
              checkpoint_period=0.45)
    if run_until_crash(job, crash * 1_000_000_000 // 10):
        assert [k.rows for k in first] == [k.rows for k in reference]
        return
    second = [Keep() for _ in range(n)]
    restarted = Job(_build(second, left, right, algorithm), clock=VirtualClock(), checkpoints=store,
                    checkpoint_period=0.45)
    assert run_until_crash(restarted, None)
    assert [k.rows for k in second] == [k.rows for k in reference], \
        f"crash at {crash / 10} s, restored from {restarted.restored_from}"
