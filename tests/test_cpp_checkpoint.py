"""The cpp flavor's drain/reset suspension (spec C14, IBM's C++ WindowThread in a consistent region).

A drain (and so a checkpoint) or a reset suspends the C++ window's timer thread until the next
tuple arrives: ticks in between are skipped with the phase kept, and a time eviction that falls
due meanwhile is polled again one period later. Java re-arms at once (C7) and is unaffected.
"""

from __future__ import annotations

from typing import Any

import pytest

from riverbed.windows import StreamWindow

S = 1_000_000_000


Events = list[tuple[str, list[str], int]]


def _window(clause: str, flavor: str) -> tuple[StreamWindow[dict[str, Any]], Events]:
    w: StreamWindow[dict[str, Any]] = StreamWindow(clause, flavor=flavor)
    events: Events = []
    w.register_listener(lambda e: events.append((e.type.name, [t["id"] for t in e.tuples], w.now)))
    w.activate(0)
    return w, events


def _tumbles(flavor: str) -> list[tuple[list[str], int]]:
    w, events = _window("tumbling, time(10)", flavor)
    for at, tid in ((1, "a"), (15, "b")):
        w.advance_time(at * S)
        w.insert({"id": tid})
    w.advance_time(18 * S)
    w.checkpoint()
    w.advance_time(22 * S)
    w.insert({"id": "c"})
    w.advance_time(31 * S)
    return [(ids, t // S) for kind, ids, t in events if kind == "EVICTION"]


def test_cpp_checkpointed_at_18_next_tuple_at_22_skips_the_tumble_at_20() -> None:
    # IBM's Aggregate/Join docs: "checkpointed at 18, next tuple at 22: the trigger at 20 is
    # ignored, first eviction at 30".
    assert _tumbles("cpp") == [(["a"], 10), (["b", "c"], 30)]
    assert _tumbles("java") == [(["a"], 10), (["b"], 20), (["c"], 30)]


def test_cpp_time_eviction_due_while_suspended_is_polled_one_period_later() -> None:
    w, events = _window("sliding, time(5)", "cpp")
    w.advance_time(1 * S)
    w.insert({"id": "x"})
    w.advance_time(3 * S)
    w.checkpoint()
    w.advance_time(9 * S)  # x was due at 6: suspended, polled again at 11
    assert [e for e in events if e[0] == "EVICTION"] == []
    w.insert({"id": "y"})
    w.advance_time(20 * S)
    assert [(ids, t) for kind, ids, t in events if kind == "EVICTION"] == [
        (["x"], 11 * S + 1), (["y"], 14 * S + 1)]


@pytest.mark.parametrize("reset_to", ["checkpoint", "initial"])
def test_cpp_reset_suspends_until_the_next_tuple_and_keeps_the_phase(reset_to: str) -> None:
    w, events = _window("sliding, count(5), time(4)", "cpp")
    w.advance_time(1 * S)
    w.insert({"id": "a"})
    ckpt = w.checkpoint()
    w.insert({"id": "b"})  # resumes
    w.advance_time(5 * S)
    w.reset(ckpt if reset_to == "checkpoint" else None)
    w.advance_time(13 * S)  # ticks at 8 and 12 are skipped
    triggers = [t // S for kind, _, t in events if kind == "TRIGGER"]
    assert triggers == [4]
    w.insert({"id": "c"})
    w.advance_time(17 * S)
    triggers = [(ids, t // S) for kind, ids, t in events if kind == "TRIGGER"]
    expected = ["a", "c"] if reset_to == "checkpoint" else ["c"]
    assert triggers[1:] == [(expected, 16)]  # the phase of the ticks at 4, 8, 12, ... is kept


def test_counts_and_deltas_are_not_suspended() -> None:
    w, events = _window("tumbling, count(2)", "cpp")
    w.insert({"id": "a"})
    w.checkpoint()
    w.insert({"id": "b"})
    assert [ids for kind, ids, _ in events if kind == "EVICTION"] == [["a", "b"]]
