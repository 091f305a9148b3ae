"""Every public trace case, replayed on the window library in each flavor it applies to."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from riverbed.trace import load_cases, run_case
from tests.trace_compare import mismatch

CASES_DIR = Path(__file__).parent / "conformance" / "cases"


def _cases() -> list[tuple[str, dict[str, Any]]]:
    return [(f.stem, case) for f in sorted(CASES_DIR.glob("*.json")) for case in load_cases(f)]


def _is_time_interval(case: dict[str, Any]) -> bool:
    return str(case.get("window", "")).strip().startswith("timeInterval")


def _selected(flavor: str) -> list[Any]:
    """The cases of a flavor; timeInterval windows exist in IBM's C++ runtime only and
    behave the same in both of our flavors, so their cases apply to both."""
    return [pytest.param(case, id=stem) for stem, case in _cases()
            if _is_time_interval(case) or case.get("runtime", "any") in ("any", flavor)]


def test_the_public_cases_are_all_here() -> None:
    assert len(_cases()) == 113


@pytest.mark.parametrize("case", _selected("java"))
def test_java_flavor(case: dict[str, Any]) -> None:
    why = mismatch(case, run_case(case, "java"))
    assert why is None, why


@pytest.mark.parametrize("case", _selected("cpp"))
def test_cpp_flavor(case: dict[str, Any]) -> None:
    why = mismatch(case, run_case(case, "cpp"))
    assert why is None, why


def test_every_flavor_runs_the_time_interval_cases() -> None:
    assert sum(_is_time_interval(p.values[0]) for p in _selected("java")) == 24
    assert sum(_is_time_interval(p.values[0]) for p in _selected("cpp")) == 24


def test_the_checker_rejects_a_wrong_trace() -> None:
    case = next(c for stem, c in _cases() if stem == "A-tumbling-count4-seed-walkthrough")
    events = run_case(case, "java")
    assert mismatch(case, events) is None
    assert mismatch(case, events[:-1]) is not None
    swapped = [events[1], events[0], *events[2:]]
    assert mismatch(case, swapped) is not None


def _trace_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "riverbed", "trace", *args],
                          capture_output=True, text=True, timeout=60, check=False)


def test_cli_prints_one_json_event_per_line() -> None:
    path = CASES_DIR / "A-sliding-count3-seed-walkthrough.json"
    result = _trace_cli("--flavor", "java", str(path))
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    case = json.loads(path.read_text())
    assert mismatch(case, events) is None


def test_cli_out_dir_writes_one_file_per_case(tmp_path: Path) -> None:
    paths = [CASES_DIR / "A-tumbling-count1.json", CASES_DIR / "A-sliding-count1.json"]
    out = tmp_path / "out"
    out.mkdir()
    result = _trace_cli("--out", str(out), *map(str, paths))
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["A-sliding-count1.jsonl", "A-tumbling-count1.jsonl"]


@pytest.mark.parametrize(("step", "message"), [
    ({"flood": 1}, "unknown step"),
    ({"watermark": 3.0}, "watermarks drive timeInterval windows only"),
    ({"tuple": {"id": "a"}, "event_time": 1.0}, "event_time need a timeInterval window"),
    ({"punct": "weird"}, "punct must be 'window' or 'final'"),
    ({"reset": "nope"}, "no checkpoint named 'nope'"),
])
def test_cli_reports_bad_steps_without_a_traceback(tmp_path: Path, step: dict[str, Any],
                                                    message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"window": "tumbling, count(2)", "steps": [step], "expect": []}))
    result = _trace_cli(str(path))
    assert result.returncode == 1
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_reports_a_bad_clause_pointing_at_it(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"window": "sliding, cnt(3)", "steps": [], "expect": []}))
    result = _trace_cli(str(path))
    assert result.returncode == 1
    assert "cnt(3)" in result.stderr
    assert "^^^" in result.stderr
    assert "Traceback" not in result.stderr
