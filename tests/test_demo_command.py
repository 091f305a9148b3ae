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


@pytest.mark.parametrize(("args", "message"), [
    (["--sensors", "0"], "expected at least one sensor"),
    (["--readings", "-5"], "no negative number of readings"),
    (["--window", "timeInterval, intervalDuration(10)"], "e.g. --window 'tumbling, time(2)"),
])
def test_what_the_demo_cannot_run_is_one_line_and_exit_2(
        args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", *args]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and message in err and len(err.strip().splitlines()) == 1


def test_a_reader_that_stops_early_ends_the_demo_quietly() -> None:
    import subprocess
    import sys

    demo = subprocess.Popen([sys.executable, "-m", "riverbed", "demo", "--readings", "20000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert demo.stdout is not None and demo.stderr is not None
    demo.stdout.readline()  # as `| head -1` does, then it goes away
    demo.stdout.close()
    err = demo.stderr.read().decode()
    assert demo.wait(timeout=60) == 1
    assert "Traceback" not in err and "BrokenPipe" not in err, err
