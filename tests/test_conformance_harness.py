"""The conformance harness itself: steps read and checked once, one interpreter deciding what
checkpoints, restarts and resets mean, events stamped with their step and clock time."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Literal

import pytest

from riverbed.conformance import (
    AtStep,
    CaseError,
    CheckpointStep,
    Event,
    EventLog,
    EvictPartitionStep,
    PunctStep,
    Replay,
    ResetStep,
    RestartStep,
    TupleStep,
    WatermarkStep,
    WindowHost,
    parse_case,
    replay,
    trace_records,
)
from riverbed.windows import EVENT_TIME_MAX, EventType, StreamWindow, StreamWindowEvent, WindowTupleError


def raw_case(steps: list[Any], window: str = "tumbling, count(2)", **fields: Any) -> dict[str, Any]:
    return {"name": "c", "window": window, "steps": steps, "expect": [], **fields}


# -- steps, read once ---------------------------------------------------------------------------

def test_steps_become_typed_values_with_times_in_nanoseconds() -> None:
    case = parse_case(raw_case(
        [{"at": 0.1}, {"tuple": {"id": "a", "t": 1.5, "v": 2.5}}, {"punct": "window"},
         {"evict_partition": "x"}, {"checkpoint": "c1"}, {"restart": True}, {"at": 2},
         {"reset": "c1"}, {"reset": None}, {"punct": "final"}],
        window="sliding, delta(t, 1.0), partitioned", partition_by="k", schema={"t": "timestamp"}))
    assert case.steps == (
        AtStep(100_000_000), TupleStep({"id": "a", "t": 1_500_000_000, "v": 2.5}), PunctStep("window"),
        EvictPartitionStep("x"), CheckpointStep("c1"), RestartStep(), AtStep(2_000_000_000),
        ResetStep("c1"), ResetStep(None), PunctStep("final"))


def test_event_times_and_watermarks_truncate_as_spl_does() -> None:
    case = parse_case(raw_case(
        [{"tuple": {"id": "a"}, "event_time": 1.1}, {"watermark": 0.3}, {"watermark": "max"}],
        window="timeInterval, intervalDuration(1.0)"))
    assert case.steps == (TupleStep({"id": "a"}, 1_100_000_000), WatermarkStep(300_000_000),
                          WatermarkStep(EVENT_TIME_MAX))


def test_a_step_tuple_is_copied_for_each_host() -> None:
    step = TupleStep({"id": "a"})
    t = step.tuple()
    t["id"] = "b"
    assert step.tuple() == {"id": "a"} and step.id == "a"


@pytest.mark.parametrize(("steps", "fields", "message"), [
    ([{"at": 2.0}, {"at": 1.0}], {}, "step 1: time cannot go backwards"),
    ([{"restart": True}, {"tuple": {"id": "a"}}], {}, "step 1: the PE is stopped by the restart step 0"),
    ([{"restart": True}, {"at": 1.0}, {"reset": None}, {"tuple": {"id": "a"}}], {}, None),
    ([{"checkpoint": "c1"}, {"reset": "c2"}], {}, "step 1: no checkpoint named 'c2' was taken before; "
                                                  "taken so far: ['c1']"),
    ([{"reset": "c1"}, {"checkpoint": "c1"}], {}, "step 0: no checkpoint named 'c1'"),
    ([{"restart": "yes"}], {}, 'step 0: a restart step is {"restart": true}'),
    ([{"checkpoint": {"n": 1}}], {}, "step 0: checkpoint takes a checkpoint name"),
    ([{"tuple": [1, 2]}], {}, "step 0: 'tuple' must be an object of attributes"),
    ([{"tuple": {"id": "a"}}], {"window": "timeInterval, intervalDuration(1.0)"},
     "step 0: a tuple for a timeInterval window needs 'event_time'"),
    ([{"evict_partition": "x"}], {"window": "timeInterval, intervalDuration(1.0)"},
     "step 0: timeInterval windows have no evict_partition"),
    ([{"evict_partition": ["x"]}], {"window": "tumbling, count(2), partitioned", "partition_by": "k"},
     "step 0: a partition key is a string, number, boolean or null"),
    ([{"at": float("nan")}], {}, "step 0: at: expected a finite number of seconds"),
    ([{"at": True}], {}, "step 0: at: expected seconds as a number"),
    ([{"at": 1e300}], {}, "step 0: at: 1e+300 seconds is beyond the clock's range (int64 "
                          "nanoseconds: at most 9223372036 seconds)"),
    ("steps", {}, "'steps' must be a list"),
    ([], {"window": "tumbling, count(2), partitioned"}, "a partitioned window needs 'partition_by'"),
    ([], {"runtime": "python"}, "'runtime' is one of any, java, cpp"),
    ([], {"order": "sorted"}, "'order' is \"listed\" or \"by_key\""),
    ([], {"window": 3}, "'window' must be the SPL clause text"),
])
def test_a_bad_case_is_refused_before_any_host_runs_naming_case_and_step(
        steps: Any, fields: dict[str, Any], message: str | None) -> None:
    raw = raw_case(steps, **fields)
    if message is None:
        parse_case(raw)
        return
    with pytest.raises(CaseError) as err:
        parse_case(raw)
    assert str(err.value).startswith("case c") and message in str(err.value)


# -- the interpreter ----------------------------------------------------------------------------

class FakeHost:
    """Records what the interpreter asks, and raises a window event wherever a test says."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.log = EventLog()
        self.window: StreamWindow[dict[str, Any]] = StreamWindow("tumbling, count(9)")
        self.raise_on: set[str] = set()
        self.now = 0

    def _did(self, *call: Any) -> None:
        self.calls.append(call)
        if call[0] in self.raise_on:
            self.log.record(StreamWindowEvent(self.window, EventType.TRIGGER, None, [{"id": call[0]}]),
                            self.now)

    def start(self, log: EventLog) -> None:
        self.log = log
        self._did("start")

    def insert(self, step: TupleStep) -> None:
        if step.id == "bad":
            raise WindowTupleError("the tuple has no attribute 'k'")
        self._did("insert", step.id)

    def advance(self, now: int) -> None:
        self.now = now
        self._did("advance", now)

    def punctuate(self, kind: Literal["window", "final"]) -> None:
        self._did("punctuate", kind)

    def watermark(self, value: int) -> None:
        self._did("watermark", value)

    def evict_partition(self, partition: Hashable) -> None:
        self._did("evict_partition", partition)

    def checkpoint(self) -> object:
        self._did("checkpoint")
        return f"state{len(self.calls)}"

    def stop(self) -> None:
        self._did("stop")

    def new_instance(self) -> None:
        self._did("new_instance")

    def reset(self, state: object | None) -> None:
        self._did("reset", state)


def test_the_interpreter_tells_the_host_each_step_and_handles_restarts_itself() -> None:
    case = parse_case(raw_case([{"tuple": {"id": "a"}}, {"checkpoint": "c1"}, {"at": 1.0},
                                {"restart": True}, {"at": 4.0}, {"reset": "c1"}, {"reset": None},
                                {"tuple": {"id": "b"}}]))
    host = FakeHost()
    host.raise_on = {"start", "insert", "advance", "new_instance", "reset"}
    events = replay(case, host)
    assert host.calls == [("start",), ("insert", "a"), ("checkpoint",), ("advance", 1_000_000_000),
                          ("stop",), ("advance", 4_000_000_000), ("new_instance",), ("reset", "state3"),
                          ("reset", None), ("insert", "b")]
    # Muted from the restart to the reset: the stopped PE's timers, the new PE's start-up.
    assert [(e.tuples, e.step, e.at) for e in events] == [
        (("start",), -1, 0.0), (("insert",), 0, 0.0), (("advance",), 2, 1.0), (("reset",), 5, 4.0),
        (("reset",), 6, 4.0), (("insert",), 7, 4.0)]


def test_what_a_host_raises_after_the_last_step_is_not_recorded() -> None:
    host = FakeHost()
    case = parse_case(raw_case([{"tuple": {"id": "a"}}]))
    run = Replay(case, host)
    for _ in run.run():
        pass
    host.raise_on = {"end"}
    host._did("end")  # a runtime's own final punctuation when its source ends
    assert [e.tuples for e in run.events] == []


def test_a_window_refusing_a_step_is_a_case_error_naming_the_step() -> None:
    case = parse_case(raw_case([{"tuple": {"id": "a"}}, {"tuple": {"id": "bad"}}]))
    with pytest.raises(CaseError, match=r"^case c, step 1: the tuple has no attribute 'k'$"):
        replay(case, FakeHost())


# -- events ---------------------------------------------------------------------------------------

def test_an_event_prints_every_field_the_format_names() -> None:
    event = Event("TRIGGER", "p", ("a",), 3, 2.5, (0.0, 10.0), 1, "on_time")
    assert event.as_json() == {"event": "TRIGGER", "partition": "p", "tuples": ["a"], "step": 3,
                               "pane": [0.0, 10.0], "pane_timing": "on_time", "pane_index": 1, "at": 2.5}
    assert Event.from_json(event.as_json()) == event
    assert "step" not in event.as_json(step=False)


def test_only_sliding_evictions_of_cases_without_steps_print_no_step() -> None:
    events = [Event("INSERTION", None, ("a",), 0, 0.0), Event("EVICTION", None, ("a",), 1, 1.0)]
    sliding = parse_case(raw_case([], window="sliding, time(1.0)", expect=[]))
    tumbling = parse_case(raw_case([], window="tumbling, time(1.0)", expect=[]))
    with_steps = parse_case(raw_case([], window="sliding, time(1.0)",
                                     expect=[{"event": "INSERTION", "partition": None, "tuples": ["a"],
                                              "step": 0}]))
    assert ["step" in r for r in trace_records(sliding, events)] == [True, False]
    assert ["step" in r for r in trace_records(tumbling, events)] == [True, True]
    assert ["step" in r for r in trace_records(with_steps, events)] == [True, True]


def test_the_window_host_stamps_timer_events_with_their_due_time() -> None:
    case = parse_case(raw_case([{"at": 0.5}, {"tuple": {"id": "a"}}, {"at": 7.0}],
                               window="tumbling, time(2.0)"))
    events = replay(case, WindowHost(case))
    assert [(e.event, e.tuples, e.step, e.at) for e in events] == [
        ("INSERTION", ("a",), 1, 0.5), ("EVICTION", ("a",), 2, 2.0), ("EVICTION", (), 2, 4.0),
        ("EVICTION", (), 2, 6.0)]
