"""A listener raising at INSERTION: the error reaches the caller, and the window goes on.

Found by a review: in ``tumbling, count(2)`` a listener raising at the INSERTION of tuple 2
skipped the tumble that tuple completed; the window then held 3, 4, ... tuples and, its size
passed, never tumbled again. An operator with an error port sent tuple 2 there and every later
tuple silently nowhere. The insertion's policy (tumble, eviction, trigger count, the other
panes of a timeInterval window) now completes first, then the error is raised.

Each case runs the same tuples through two windows with the same clause: one whose INSERTION
listener raises at tuple ``k``, one whose listener does not. The events after the failure must
be the same; the failing insert must raise; tuples are inserted one at a time and in batches
(a host going on after the failed tuple with the rest of its batch).
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from riverbed.windows import EventType, StreamWindow, TimeIntervalWindow

CLAUSES = [
    "tumbling, count(2)",
    "tumbling, count(3), partitioned",
    "tumbling, delta(v, 4)",
    "tumbling, punct()",
    "sliding, count(3), count(1)",
    "sliding, count(4), count(2), partitioned",
    "sliding, delta(v, 5), count(2)",
]


class Boom(Exception):
    pass


def _run(clause: str, flavor: str, tuples: list[dict[str, Any]], fail_at: int | None,
         batch: bool) -> tuple[list[Any], list[int]]:
    window: StreamWindow[dict[str, Any]] = StreamWindow(
        clause, flavor=flavor, partition_by="k" if "partitioned" in clause else None)
    events: list[Any] = []

    def listener(e: Any) -> None:
        events.append((e.type.name, e.partition, tuple(t["id"] for t in e.tuples)))
        if e.type is EventType.INSERTION and e.tuples[0]["id"] == fail_at:
            raise Boom(fail_at)

    window.register_listener(listener)
    raised: list[int] = []
    if batch:
        rest = tuples
        while rest:
            try:
                window.insert_tuples(rest)
                rest = []
            except Boom:
                at = window.batch_failed_at
                raised.append(rest[at]["id"])
                rest = rest[at + 1:]  # the host routes that tuple, then goes on
    else:
        for t in tuples:
            try:
                window.insert(t)
            except Boom:
                raised.append(t["id"])
    window.punctuate("window")
    return events, raised


@pytest.mark.parametrize("flavor", ["java", "cpp"])
@pytest.mark.parametrize("clause", CLAUSES)
@pytest.mark.parametrize("batch", [False, True])
def test_the_window_goes_on_after_an_insertion_listener_raised(clause: str, flavor: str,
                                                                batch: bool) -> None:
    rng = random.Random(f"{clause}/{flavor}/{batch}")
    for _ in range(30):
        n = rng.randrange(3, 25)
        tuples = [{"id": i, "k": rng.choice("ab"), "v": rng.randrange(10)} for i in range(n)]
        fail_at = rng.randrange(n)
        got, raised = _run(clause, flavor, tuples, fail_at, batch)
        want, none = _run(clause, flavor, tuples, None, batch)
        assert none == [] and raised == [fail_at]
        assert got == want, (clause, flavor, fail_at)


def test_the_tumble_the_failed_tuple_completes_still_happens() -> None:
    events, raised = _run("tumbling, count(2)", "java", [{"id": i} for i in range(1, 9)], 2, False)
    assert raised == [2]
    assert [e[2] for e in events if e[0] == "EVICTION"] == [(1, 2), (3, 4), (5, 6), (7, 8)]


def test_a_time_interval_tuple_enters_all_its_panes_though_a_listener_raised() -> None:
    def run(fail: bool) -> list[Any]:
        w: TimeIntervalWindow[dict[str, Any]] = TimeIntervalWindow(
            "timeInterval, intervalDuration(10), creationPeriod(5)", event_time="t")
        seen: list[Any] = []

        def listener(e: Any) -> None:
            seen.append((e.type.name, e.interval_start, tuple(x["id"] for x in e.tuples)))
            if fail and e.type is EventType.INSERTION and e.tuples[0]["id"] == 1:
                raise Boom

        w.register_listener(listener)
        for i, t in enumerate((2, 7, 12)):
            if fail and i == 1:
                with pytest.raises(Boom):
                    w.insert({"id": i, "t": t})
            else:
                w.insert({"id": i, "t": t})
        w.watermark(100)
        return seen

    assert run(True) == run(False)
