"""Hypothesis strategies for random window clauses and scripted inputs."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from riverbed.windows import StreamWindow, StreamWindowEvent

KEYS = ("a", "b", "c")


@st.composite
def clauses(draw: st.DrawFn, flavor: str = "java") -> str:
    tumbling = draw(st.booleans())
    low = 0 if flavor == "cpp" or tumbling else 1
    count = st.integers(low, 5).map(lambda n: f"count({n})")
    time = st.sampled_from(["time(1)", "time(0.5)", "time(2.5)"])
    delta = st.integers(0, 4).map(lambda d: f"delta(v, {d})")
    if tumbling:
        parts = ["tumbling", draw(st.one_of(count, time, delta, st.just("punct()")))]
    else:
        parts = ["sliding", draw(st.one_of(count, time, delta))]
        trigger = draw(st.none() | st.integers(1, 4).map(lambda n: f"count({n})") | time | delta)
        if trigger is not None:
            parts.append(trigger)
    if draw(st.booleans()):
        parts.append("partitioned")
        pe = draw(st.sampled_from([None, "partitionCount(1)", "partitionCount(2)", "tupleCount(3)",
                                   "tupleCount(5)", "partitionAge(1)", "partitionAge(1.5)"]))
        if pe is not None:
            parts.append(pe)
    return ", ".join(parts)


def ops(partitioned: bool) -> st.SearchStrategy[list[tuple[Any, ...]]]:
    tuple_op = st.tuples(st.just("t"), st.sampled_from(KEYS), st.integers(0, 12))
    time_op = st.tuples(st.just("at"), st.sampled_from([0, 100, 250, 500, 1000, 1700, 3100]))
    punct_op = st.tuples(st.just("punct"), st.sampled_from(["window", "window", "final"]))
    choices = [tuple_op, tuple_op, tuple_op, time_op, time_op, punct_op]
    if partitioned:
        choices.append(st.tuples(st.just("evict"), st.sampled_from(KEYS)))
    return st.lists(st.one_of(*choices), max_size=40)


class Recorder:
    """Listener keeping (type, partition, tuple ids, time) of every event."""

    def __init__(self, window: StreamWindow[dict[str, Any]]) -> None:
        self.window = window
        self.events: list[tuple[str, Any, list[int], int]] = []

    def handle_event(self, event: StreamWindowEvent[dict[str, Any]]) -> None:
        self.events.append((event.type.name, event.partition, [t["id"] for t in event.tuples],
                            self.window.now))


def apply(window: StreamWindow[dict[str, Any]], op: tuple[Any, ...], seq: int) -> None:
    kind = op[0]
    if kind == "t":
        window.insert({"id": seq, "k": op[1], "v": op[2]})
    elif kind == "at":
        window.advance_time(window.now + op[1] * 1_000_000)
    elif kind == "punct":
        window.punctuate(op[1])
    else:
        window.evict_partition(op[1])
