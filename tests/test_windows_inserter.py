"""The host's insert functions (`StreamWindow.inserter`, `tuple_inserter`) and the compiled
paths behind them: asked for explicitly, replaced when the insert path changes, never run on
stale state; and the window's configuration, frozen, apart from its state."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import msgpack
import pytest

from riverbed.windows import EventType, StreamWindow, WindowStateError
from riverbed.windows._fastpath import SHAPES, _factory, _source, shape_for

FAST = ["tumbling, count(3)", "tumbling, time(1)", "tumbling, delta(v, 2)", "tumbling, punct()",
        "sliding, count(3), count(2)", "sliding, time(1), count(2)", "sliding, delta(v, 2), count(2)",
        "sliding, count(3), time(1)", "sliding, time(1), time(0.5)"]
ALL_FAST = [*FAST, *(c + ", partitioned" for c in FAST)]


def _window(clause: str, flavor: str = "java", fast: bool = True) -> StreamWindow[dict[str, Any]]:
    return StreamWindow(clause, flavor=flavor, partition_by="k" if "partitioned" in clause else None,
                        fast_paths=fast)


@pytest.mark.parametrize("clause", ALL_FAST)
def test_every_fast_clause_gets_compiled_functions_once_active(clause: str) -> None:
    w = _window(clause)
    assert w.inserter() == w._insert_each  # not active yet: the generic path
    w.activate(0)
    assert shape_for(w.config) is not None
    assert w.inserter() != w._insert_each
    assert w.tuple_inserter() != w._insert_generic
    generic = _window(clause, fast=False)
    generic.activate(0)
    assert generic.inserter() == generic._insert_each


@pytest.mark.parametrize("clause", ALL_FAST)
def test_the_inserter_stays_the_same_function_until_the_insert_path_changes(clause: str) -> None:
    w = _window(clause)
    w.activate(0)
    first = w.inserter()
    w.insert_tuples([{"k": "a", "v": 1}, {"k": "b", "v": 2}])
    w.advance_time(5_000_000_000)
    w.window_mark()
    assert w.inserter() is first
    snap = w.snapshot()
    for change in (lambda: w.restore(snap), w.reset_to_initial_state, lambda: w.reset(snap), w.final_mark):
        before = w.inserter()
        change()
        assert w.inserter() is not before


def test_a_cpp_checkpoint_suspends_time_and_the_next_tuple_resumes_it_on_a_new_path() -> None:
    w = _window("sliding, time(1), count(2)", flavor="cpp")
    w.activate(0)
    fast = w.inserter()
    w.checkpoint()  # C14: the window's time stands still until the next tuple
    suspended = w.inserter()
    assert suspended is not fast
    suspended([{"v": 1}])  # the generic path resumes time and compiles again
    assert w.inserter() is not suspended
    assert w.inserter() is not fast


class _ChangeOnce:
    """A listener that, at the ``at``-th event, changes the window's insert path."""

    def __init__(self, window: StreamWindow[dict[str, Any]], change: str, at: int) -> None:
        self.window, self.change, self.at, self.seen = window, change, at, 0
        self.snapshot: Any = None
        self.events: list[tuple[str, Any, list[int]]] = []

    def __call__(self, event: Any) -> None:
        self.seen += 1
        self.events.append((event.type.name, event.partition, [t["id"] for t in event.tuples]))
        if self.seen != self.at:
            return
        if self.change == "restore":
            self.window.restore(self.snapshot)
        elif self.change == "reset":
            self.window.reset_to_initial_state()
        else:
            self.window.final_mark()


@pytest.mark.parametrize("clause", ALL_FAST)
@pytest.mark.parametrize("change", ["restore", "reset", "final"])
@pytest.mark.parametrize("at", [1, 3, 7])
@pytest.mark.parametrize("insertions", [True, False])
def test_a_listener_changing_the_insert_path_mid_batch_hands_the_rest_over(
        clause: str, change: str, at: int, insertions: bool) -> None:
    def run(fast: bool) -> tuple[list[Any], list[Any], Any]:
        w = _window(clause, fast=fast)
        w.activate(0)
        w.insert_tuples([{"id": -1, "k": "a", "v": 0}])
        listener = _ChangeOnce(w, change, at)
        listener.snapshot = msgpack.unpackb(msgpack.packb(w.snapshot()))
        w.register_listener(listener, None if insertions else
                            [t for t in EventType if t is not EventType.INSERTION])
        batch = [{"id": i, "k": "ab"[i % 2], "v": i} for i in range(24)]
        outcome: list[Any] = []
        insert = w.inserter()
        start = 0
        while start < len(batch):
            try:
                insert(batch[start:])
                break
            except WindowStateError as exc:  # after a final mark
                outcome.append((start + w.batch_failed_at, str(exc)))
                start += w.batch_failed_at + 1
        return listener.events, outcome, w.snapshot()

    assert run(True) == run(False)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_every_shape_the_generator_accepts_compiles_with_every_rule_written_out(shape: Any) -> None:
    assert callable(_factory(shape))
    source = _source(shape, ["window"])
    assert "@" not in source and "OUT(" not in source and "NOW" not in source


def test_a_traceback_through_a_compiled_path_shows_its_source() -> None:
    import traceback

    w = _window("sliding, count(3), count(1)")
    w.activate(0)

    def fail(event: Any) -> None:
        raise RuntimeError("listener failed")

    w.register_listener(fail, [EventType.TRIGGER])
    insert: Callable[[Any], None] = w.tuple_inserter()
    with pytest.raises(RuntimeError) as info:
        insert({"v": 1})
    text = "".join(traceback.format_exception(info.value))
    assert "riverbed.windows fast path" in text and "handle(event)" in text


def test_the_configuration_is_frozen_and_the_snapshot_is_the_state() -> None:
    w = _window("sliding, delta(v, 2), count(2), partitioned")
    with pytest.raises(dataclasses.FrozenInstanceError):
        w.config.ev_n = 3  # type: ignore[misc]
    w.insert({"k": "a", "v": 1})
    w.insert({"k": "a", "v": 2})
    state = w._state
    snap = w.snapshot()
    assert snap["now"] == state.now and snap["active"] == state.active and snap["final"] == state.final
    assert [p["key"] for p in snap["partitions"]] == list(state.parts)
    assert [p["tuples"] for p in snap["partitions"]] == [list(p.tuples) for p in state.parts.values()]
    w.restore(snap)
    assert w._state is not state  # a restore builds a new state; the configuration stays
    assert w.snapshot() == snap
