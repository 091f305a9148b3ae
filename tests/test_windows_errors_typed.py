"""Misuse of a window's API raises a `WindowError` subclass that says what was wrong."""

from __future__ import annotations

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
