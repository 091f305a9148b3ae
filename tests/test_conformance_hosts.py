"""The conformance cases on the other hosts: a one-operator job in the asyncio runtime, and the
Spark bridge's keyed stage hosted without Spark (`replay_locally`: the rows cut into
micro-batches, each key group's state through the state store's encoding). The hosts must not
only pass the cases but agree with the window library on every event, step and clock time
(the Spark stage per key: it has no order across key groups). Spark itself runs the cases in
tests/spark."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from riverbed.conformance import Case, CaseError, Event, WindowHost, replay, trace_records
from riverbed.runtime import replay_in_runtime
from riverbed.spark_bridge import plan
from riverbed.spark_bridge._trace import replay_locally
from tests.test_conformance import CASES_DIR, EXTRA_DIR, selected
from tests.trace_compare import mismatch

FLAVORS = ["java", "cpp"]


def _cases(folder: Any, flavor: str) -> list[Case]:
    return [p.values[0] for p in selected(folder, flavor)]


def _failures(cases: list[Case], results: list[list[Event]], **override: Any) -> dict[str, str]:
    return {c.name: why for c, events in zip(cases, results, strict=True)
            if (why := mismatch({**c.raw, **override}, trace_records(c, events))) is not None}


def _by_key(events: list[Event]) -> dict[tuple[str, str], list[Event]]:
    keys: dict[tuple[str, str], list[Event]] = defaultdict(list)
    for e in events:
        keys[repr(e.pane), repr(e.partition)].append(e)
    return dict(keys)


@pytest.mark.parametrize("flavor", FLAVORS)
def test_every_public_case_in_the_runtime(flavor: str) -> None:
    cases = _cases(CASES_DIR, flavor)
    assert len(cases) == {"java": 100, "cpp": 74}[flavor]
    failures = _failures(cases, [replay_in_runtime(c, flavor) for c in cases])
    assert not failures, failures


@pytest.mark.parametrize("folder", [CASES_DIR, EXTRA_DIR], ids=["public", "extra"])
@pytest.mark.parametrize("flavor", FLAVORS)
def test_the_runtime_raises_what_the_window_library_raises_at_the_same_steps_and_times(
        folder: Any, flavor: str) -> None:
    for case in _cases(folder, flavor):
        assert replay_in_runtime(case, flavor) == replay(case, WindowHost(case, flavor)), case.name


@pytest.mark.parametrize("flavor", FLAVORS)
def test_the_extra_cases_in_the_runtime(flavor: str) -> None:
    cases = _cases(EXTRA_DIR, flavor)
    failures = _failures(cases, [replay_in_runtime(c, flavor) for c in cases])
    assert not failures, failures


@pytest.mark.parametrize("rows_per_batch", [1, 7])
@pytest.mark.parametrize("folder", [CASES_DIR, EXTRA_DIR], ids=["public", "extra"])
@pytest.mark.parametrize("flavor", FLAVORS)
def test_the_spark_stage_raises_per_key_what_the_window_library_raises(
        folder: Any, flavor: str, rows_per_batch: int) -> None:
    cases = _cases(folder, flavor)
    results = replay_locally([(c, flavor) for c in cases], rows_per_batch=rows_per_batch)
    for case, events in zip(cases, results, strict=True):
        assert _by_key(events) == _by_key(replay(case, WindowHost(case, flavor))), case.name


@pytest.mark.parametrize("flavor", FLAVORS)
def test_the_extra_cases_in_the_spark_stage(flavor: str) -> None:
    """X-evict-partition-stops-timer: the PARTITION_EVICTION was raised at the evicted
    partition's last tuple's time; X-ckpt-reset-to-initial-rearms-at-reset: the window restarted
    its timer from that time too (a command acted on a window whose clock lagged its key
    group's); X-tumbling-punct-partitioned-cpp: each key group without tuples raised its own
    EMPTY_WINDOW_PUNCT."""
    cases = _cases(EXTRA_DIR, flavor)
    failures = _failures(cases, replay_locally([(c, flavor) for c in cases], rows_per_batch=3),
                         order="by_key")
    assert not failures, failures


@pytest.mark.parametrize(("flavor", "groups"), [("cpp", 1), ("java", 2)])
def test_a_cpp_punct_window_runs_in_one_key_group(flavor: str, groups: int) -> None:
    from riverbed.graph import Graph
    from riverbed.operators import Aggregate, Count
    from riverbed.testing import ListSink, ListSource

    g = Graph("g")
    s = g.source("src", ListSource([]))
    agg = g.operator("agg", Aggregate({"n": Count()}), [
        s.window("tumbling, punct(), partitioned", partition_by="k", flavor=flavor)])
    g.sink("sink", ListSink(), [agg])
    p = plan(g.freeze(), "keyed", groups=2)
    assert p.groups == groups
    assert ("empty-window event: one key group" in p.notes["agg"]) is (groups == 1)


def test_the_spark_stage_reports_a_window_the_flavor_cannot_build_before_any_query() -> None:
    case = next(c for c in _cases(CASES_DIR, "cpp") if c.name == "sliding-count0-cpp")
    with pytest.raises(CaseError, match=r"^case sliding-count0-cpp: sliding, count\(0\): IBM's Java"):
        replay_locally([(case, "java")])
