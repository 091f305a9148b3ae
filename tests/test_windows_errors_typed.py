"""Misuse of a window's API raises a `WindowError` subclass that says what was wrong."""

from __future__ import annotations

import re
from typing import Any

import pytest

from riverbed.windows import (
    PunctuationError,
    StreamWindow,
    TimeIntervalSpec,
    TimeIntervalWindow,
    WindowClauseError,
    parse_window_clause,
)


@pytest.mark.parametrize("spec", [123, None, ["tumbling, count(2)"]])
def test_a_window_that_is_neither_a_clause_nor_a_spec_is_refused_saying_so(spec: Any) -> None:
    with pytest.raises(WindowClauseError, match=r"a window is an SPL clause .* or a WindowSpec, got"):
        StreamWindow(spec)


def test_a_time_interval_spec_is_sent_to_its_own_class() -> None:
    spec = parse_window_clause("timeInterval, intervalDuration(10)")
    assert isinstance(spec, TimeIntervalSpec)
    with pytest.raises(WindowClauseError, match="build it with TimeIntervalWindow"):
        StreamWindow(spec)  # type: ignore[arg-type]


@pytest.mark.parametrize("window", [StreamWindow("tumbling, punct()"),
                                    TimeIntervalWindow("timeInterval, intervalDuration(1)")])
def test_an_unknown_punctuation_is_a_punctuation_error(window: Any) -> None:
    with pytest.raises(PunctuationError, match="unknown punctuation 'bogus'; expected 'window' or 'final'"):
        window.punctuate("bogus")
    assert issubclass(PunctuationError, ValueError)  # (what it was before)


@pytest.mark.parametrize(("clause", "what"), [
    ("sliding, time(1e300)", "time(1e+300): the duration"),
    ("tumbling, count(2), partitioned, partitionAge(1e12)", "partitionAge(1000000000000.0): the age"),
])
def test_a_duration_beyond_the_clock_is_a_clause_error(clause: str, what: str) -> None:
    """The clock counts int64 nanoseconds: a longer duration failed the job later with
    "int too large to convert to float" and no operator named."""
    with pytest.raises(WindowClauseError, match=rf"{re.escape(what)} is beyond the clock's range "
                                                r"\(at most 9223372036 seconds, about 292 years\)"):
        parse_window_clause(clause)
    assert parse_window_clause("sliding, time(9223372036)") is not None


def test_a_sliding_time_snapshot_without_arrival_times_is_refused() -> None:
    """Its tuples would never leave (each leaves by its arrival time)."""
    from riverbed.windows import SnapshotError

    window: StreamWindow[Any] = StreamWindow("sliding, time(2)")
    window.activate(0)
    window.insert({"a": 1})
    window.insert({"a": 2})
    snapshot = window.snapshot()
    snapshot["partitions"][0]["arrivals"] = []
    with pytest.raises(SnapshotError, match=r"partition #0: 0 arrival times for 2 tuples"):
        StreamWindow("sliding, time(2)").restore(snapshot)
