"""Every public trace case, replayed on the window library in each flavor it applies to, and the
`riverbed trace` command line that prints them (FORMAT.md's contract)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from riverbed.conformance import Case, WindowHost, load_cases, parse_case, replay, trace_records
from tests.trace_compare import mismatch

CASES_DIR = Path(__file__).parent / "conformance" / "cases"
EXTRA_DIR = Path(__file__).parent / "conformance" / "extra"


def cases_of(folder: Path) -> list[Case]:
    return [parse_case(raw) for f in sorted(folder.glob("*.json")) for raw in load_cases(f)]


def selected(folder: Path, flavor: str) -> list[Any]:
    """The cases of a flavor: its own, the ``any`` ones and every timeInterval case (IBM has
    those in C++ only, and both of our flavors behave as C++ there)."""
    return [pytest.param(case, id=case.name) for case in cases_of(folder) if case.applies_to(flavor)]


def windows_records(case: Case, flavor: str) -> list[dict[str, Any]]:
    return trace_records(case, replay(case, WindowHost(case, flavor)))


def test_the_public_cases_are_all_here() -> None:
    assert len(cases_of(CASES_DIR)) == 113
    assert [len(selected(CASES_DIR, f)) for f in ("java", "cpp")] == [100, 74]


@pytest.mark.parametrize("flavor", ["java", "cpp"])
def test_every_flavor_runs_the_time_interval_cases(flavor: str) -> None:
    assert sum(p.values[0].time_interval for p in selected(CASES_DIR, flavor)) == 24


@pytest.mark.parametrize("case", selected(CASES_DIR, "java"))
def test_java_flavor(case: Case) -> None:
    why = mismatch(case.raw, windows_records(case, "java"))
    assert why is None, why


@pytest.mark.parametrize("case", selected(CASES_DIR, "cpp"))
def test_cpp_flavor(case: Case) -> None:
    why = mismatch(case.raw, windows_records(case, "cpp"))
    assert why is None, why


@pytest.mark.parametrize("flavor", ["java", "cpp"])
def test_the_extra_cases_hold_on_the_window_library(flavor: str) -> None:
    """Cases written from the spec for bugs one host had (tests/conformance/extra)."""
    cases = [p.values[0] for p in selected(EXTRA_DIR, flavor)]
    assert cases
    failures = {c.name: why for c in cases if (why := mismatch(c.raw, windows_records(c, flavor)))}
    assert not failures, failures


def test_the_checker_rejects_a_wrong_trace() -> None:
    case = next(c for c in cases_of(CASES_DIR) if c.name == "tumbling-count4-seed-walkthrough")
    events = windows_records(case, "java")
    assert mismatch(case.raw, events) is None
    assert mismatch(case.raw, events[:-1]) is not None
    assert mismatch(case.raw, [events[1], events[0], *events[2:]]) is not None


@pytest.mark.parametrize("flavor", ["java", "cpp"])
def test_every_event_carries_its_step_and_clock_time(flavor: str) -> None:
    """FORMAT.md: ``step`` and ``at`` on every printed event, whatever the case's own
    conventions (A cases name no steps; B cases give ``at`` on some events only). The one
    exception: EVICTIONs of sliding windows in cases that name no step (see `trace_records`)."""
    for param in selected(CASES_DIR, flavor):
        case: Case = param.values[0]
        for record in windows_records(case, flavor):
            assert isinstance(record["at"], float), (case.name, record)
            bare = case.sliding and not case.names_steps and record["event"] == "EVICTION"
            assert ("step" in record) is not bare, (case.name, record)


def test_an_activation_event_prints_step_minus_one_and_its_time() -> None:
    case = next(c for c in cases_of(CASES_DIR) if c.name == "sliding-time2-time1")
    assert not case.names_steps and case.raw["runtime"] == "any"
    first = windows_records(case, "java")[0]
    assert first == {"event": "INITIAL_FULL", "partition": None, "tuples": [], "step": -1, "at": 0.0}


def test_a_timer_event_prints_the_step_that_let_time_pass_and_its_own_time() -> None:
    case = next(c for c in cases_of(CASES_DIR) if c.name == "tumbling-time5-seed")
    evictions = [r for r in windows_records(case, "java") if r["event"] == "EVICTION"]
    steps = case.raw["steps"]
    for r in evictions:
        assert "at" in steps[r["step"]]  # an {"at": t} step fired it
        assert r["at"] <= steps[r["step"]]["at"] and r["at"] % 5.0 == 0.0  # at its due time


def _trace_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "riverbed", "trace", *args],
                          capture_output=True, text=True, timeout=60, check=False)


def test_cli_prints_one_json_event_per_line() -> None:
    path = CASES_DIR / "A-tumbling-count3-partitioned-seed.json"
    result = _trace_cli("--flavor", "java", str(path))
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    case = json.loads(path.read_text())
    assert mismatch(case, events) is None
    assert all(set(e) == {"event", "partition", "tuples", "step", "at"} for e in events)


def test_cli_replays_a_case_in_its_own_flavor_unless_told_and_then_says_so() -> None:
    # A "cpp" case was replayed with the java flavor, silently: 3 INSERTION events where the
    # case expects none (a README review).
    path = CASES_DIR / "A-tumbling-count0-cpp.json"
    case = json.loads(path.read_text())
    own = _trace_cli(str(path))
    assert own.returncode == 0 and own.stderr == "", own.stderr
    assert mismatch(case, [json.loads(line) for line in own.stdout.splitlines()]) is None
    told = _trace_cli("--flavor", "java", str(path))
    assert told.returncode == 0 and "is of the cpp runtime; replayed with --flavor java" in told.stderr
    assert told.stdout != own.stdout


def test_cli_out_dir_writes_one_file_per_case(tmp_path: Path) -> None:
    paths = [CASES_DIR / "A-tumbling-count1.json", CASES_DIR / "A-sliding-count1.json"]
    out = tmp_path / "out" / "new"  # made, as a missing directory (a traceback before)
    result = _trace_cli("--out", str(out), *map(str, paths))
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["A-sliding-count1.jsonl", "A-tumbling-count1.jsonl"]
    (tmp_path / "file").write_text("")
    result = _trace_cli("--out", str(tmp_path / "file"), *map(str, paths))
    assert result.returncode == 2 and "riverbed trace: --out" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(("step", "message"), [
    ({"flood": 1}, "step 0: unknown step"),
    ({"tuple": {"id": "a"}, "at": 1.0}, "step 0: unknown step"),
    ({"watermark": 3.0}, "step 0: watermarks drive timeInterval windows only"),
    ({"tuple": {"id": "a"}, "event_time": 1.0}, "step 0: tuples with event_time need a timeInterval window"),
    ({"punct": "weird"}, "step 0: punct must be 'window' or 'final'"),
    ({"reset": "nope"}, "step 0: no checkpoint named 'nope' was taken before"),
    ({"evict_partition": "x"}, "step 0: evict_partition needs a partitioned window"),
    ({"at": "soon"}, "step 0: at: expected seconds as a number"),
])
def test_cli_reports_bad_steps_without_a_traceback(tmp_path: Path, step: dict[str, Any],
                                                    message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"name": "bad", "window": "tumbling, count(2)", "steps": [step],
                                "expect": []}))
    result = _trace_cli(str(path))
    assert result.returncode == 1
    assert f"case bad, {message}" in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_cli_reports_a_bad_clause_pointing_at_it(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"window": "sliding, cnt(3)", "steps": [], "expect": []}))
    result = _trace_cli(str(path))
    assert result.returncode == 1
    assert "cnt(3)" in result.stderr
    assert "^^^" in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_reports_a_tuple_the_window_refuses_naming_its_step(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"name": "nokey", "window": "tumbling, count(2), partitioned",
                                "partition_by": "k", "steps": [{"tuple": {"id": "a"}}], "expect": []}))
    result = _trace_cli(str(path))
    assert result.returncode == 1
    assert "case nokey, step 0:" in result.stderr and "'k'" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("host", ["windows", "runtime"])
def test_cli_reports_a_window_the_flavor_cannot_build(host: str) -> None:
    result = _trace_cli("--host", host, "--flavor", "java", str(CASES_DIR / "A-sliding-count0-cpp.json"))
    assert result.returncode == 1
    assert "case sliding-count0-cpp: sliding, count(0): IBM's Java window fails" in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_exits_2_for_a_case_file_that_is_not_there(tmp_path: Path) -> None:
    # as `riverbed run` and `riverbed graph` do for a script that is not there (it was 1, a
    # case that failed)
    result = _trace_cli(str(tmp_path / "nosuch.json"))
    assert result.returncode == 2
    assert f"riverbed trace: {tmp_path / 'nosuch.json'}: no such case file" in result.stderr


def _case(name: str, steps: list[Any]) -> dict[str, Any]:
    return {"name": name, "window": "tumbling, count(2)", "steps": steps, "expect": []}


def test_cli_names_each_case_of_a_file_of_several_and_keeps_those_before_a_bad_one(
        tmp_path: Path) -> None:
    good = [{"tuple": {"id": "a"}}, {"tuple": {"id": "b"}}]
    path = tmp_path / "many.json"
    path.write_text(json.dumps([_case("one", good), _case("two", good)]))
    result = _trace_cli(str(path))
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert {e["case"] for e in events} == {"one", "two"} and events[0]["case"] == "one"
    bad = {**_case("two", [{"tuple": {"id": "a"}}]), "window": "tumbling, count(2), partitioned",
           "partition_by": "k"}  # (its tuple has no key: refused when replayed)
    path.write_text(json.dumps([_case("one", good), bad]))
    result = _trace_cli(str(path))
    assert result.returncode == 1
    assert f"{path}: case two, step 0:" in result.stderr, result.stderr
    assert result.stdout and all(json.loads(line)["case"] == "one" for line in result.stdout.splitlines())


def test_cli_refuses_two_inputs_that_would_write_one_out_file(tmp_path: Path) -> None:
    for d in ("d1", "d2"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "case.json").write_text(json.dumps(_case(d, [{"tuple": {"id": "a"}}])))
    out = tmp_path / "out"
    out.mkdir()
    result = _trace_cli("--out", str(out), str(tmp_path / "d1" / "case.json"),
                        str(tmp_path / "d2" / "case.json"))
    assert result.returncode == 2
    assert "would both write" in result.stderr and not list(out.iterdir())
