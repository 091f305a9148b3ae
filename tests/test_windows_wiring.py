"""Listeners and partitioners: both window engines share one mechanism, so the same misuse
raises the same error from a tumbling/sliding window and from a timeInterval window."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from riverbed.windows import (
    EventType,
    StreamWindow,
    TimeIntervalWindow,
    WindowStateError,
    WindowTupleError,
)

Window = StreamWindow[dict[str, Any]] | TimeIntervalWindow[dict[str, Any]]
Build = Callable[..., Window]


def _sliding(partitioned: bool = False, **options: Any) -> Window:
    return StreamWindow("sliding, count(2)" + (", partitioned" if partitioned else ""), **options)


def _panes(partitioned: bool = False, **options: Any) -> Window:
    return TimeIntervalWindow("timeInterval, intervalDuration(10)" + (", partitioned" if partitioned else ""),
                              event_time="ts", **options)


ENGINES = pytest.mark.parametrize("build", [_sliding, _panes], ids=["StreamWindow", "TimeIntervalWindow"])
NEVER_RAISED = {_sliding: EventType.CLOSE, _panes: EventType.EVICTION}


class _NotAListener:
    handle_event = "not callable"


@ENGINES
@pytest.mark.parametrize(("listener", "types", "error", "message"), [
    (42, None, TypeError, r"needs handle_event\(event\) or must be callable, got 42"),
    (_NotAListener(), None, TypeError, "needs handle_event"),
    (print, ["TRIGGER"], TypeError, "EventType members, got 'TRIGGER'"),
])
def test_a_bad_listener_is_the_same_type_error_in_both_engines(
        build: Build, listener: Any, types: Any, error: type[Exception], message: str) -> None:
    window = build()
    with pytest.raises(error, match=message):
        window.register_listener(listener, types)


@ENGINES
def test_a_listener_only_for_events_the_window_never_raises_is_refused(build: Build) -> None:
    window = build()
    never = NEVER_RAISED[build]
    with pytest.raises(WindowStateError, match=f"raises no {never.name} events"):
        window.register_listener(print, [never])
    # Asking for the union of both engines' events (an operator written for both) is fine.
    seen: list[str] = []
    window.register_listener(lambda e: seen.append(e.type.name), [never, EventType.INSERTION])
    window.insert({"ts": 1, "k": "a"})
    assert seen == ["INSERTION"]
    window.register_listener(print, [])  # asking for nothing registers nothing, and is no error


@ENGINES
def test_partitioner_misuse_raises_the_same_errors_in_both_engines(build: Build) -> None:
    with pytest.raises(WindowStateError, match="is not partitioned; add 'partitioned'"):
        build(partition_by="k")
    with pytest.raises(TypeError, match="partition_by must be an attribute name or a function, got 3"):
        build(partitioned=True, partition_by=3)
    window = build(partitioned=True)
    with pytest.raises(WindowStateError, match="partitioned but has no partitioner; pass partition_by="):
        window.insert({"ts": 1, "k": "a"})
    window.register_partitioner("k")
    window.register_partitioner("k2")  # still empty: the partitioner may change
    with pytest.raises(WindowTupleError, match=r"cannot compute the partition key \(k2\) of tuple"):
        window.insert({"ts": 1, "k": "a"})
    with pytest.raises(WindowTupleError, match=r"partition key \[1\] of tuple .* is not hashable"):
        window.insert({"ts": 1, "k2": [1]})
    window.insert({"ts": 1, "k2": "a"})
    with pytest.raises(WindowStateError, match="already has partitions"):
        window.register_partitioner("k")
    window.reset_to_initial_state()
    window.register_partitioner("k")
    window.insert({"ts": 1, "k": "b"})
    assert window.partitions() == ["b"]


@ENGINES
def test_listeners_hear_their_types_in_registration_order_in_both_engines(build: Build) -> None:
    window = build()
    calls: list[tuple[str, str]] = []
    window.register_listener(lambda e: calls.append(("all", e.type.name)))
    window.register_listener(lambda e: calls.append(("insertion", e.type.name)), [EventType.INSERTION])

    class Handler:
        def handle_event(self, event: Any) -> None:
            calls.append(("object", event.type.name))

    window.register_listener(Handler(), {EventType.INSERTION})
    window.insert({"ts": 1})
    assert [c for c in calls if c[1] == "INSERTION"] == [
        ("all", "INSERTION"), ("insertion", "INSERTION"), ("object", "INSERTION")]
    assert all(who == "all" for who, etype in calls if etype != "INSERTION")
