"""`riverbed demo --window CLAUSE`: an SPL window over generated readings, no graph to write."""

from __future__ import annotations

import pytest

from riverbed.cli import main


def test_the_default_window_runs_and_counts_its_events(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1].startswith("riverbed demo: done: INSERTION=60, ")


@pytest.mark.parametrize(("clause", "message"), [
    ("tumbling, delta(foo, 5)", "eviction policy delta(foo, 5): the tuple has no attribute 'foo'"),
    ("sliding, count(3), delta(sensor, 1)", "a delta policy needs a numeric or timestamp attribute"),
    ("tumbling, cuont(3)", "cuont"),
])
def test_a_clause_the_readings_cannot_take_is_one_line_and_exit_2(
        clause: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--window", clause]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and message in err
    if "foo" in clause:
        assert err.strip().endswith("the demo's readings have rstring sensor, float64 temp, int64 seq")
