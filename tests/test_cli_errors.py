"""`riverbed run` refuses what it cannot run with exit 2 and one line naming the culprit
(issue 16.6, 16.7, 16.9, 16.10, 16.11); in process, so each case costs milliseconds."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from riverbed.checkpoint import RocksDBStore
from riverbed.run import EXIT_INVALID, EXIT_OK, run
from riverbed.runtime import Job, RealClock

ROOT = Path(__file__).resolve().parent.parent
SENSORS = str(ROOT / "examples" / "sensors.py")


def _run(*args: str, **kwargs: Any) -> tuple[int, list[str]]:
    said: list[str] = []
    code = run(args[0], params=list(args[1:]), status=False, log_format="json",
               echo=said.append, **kwargs)
    return code, said


def _script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "graph.py"
    path.write_text("from riverbed import Graph, Source\n" + body)
    return str(path)


def test_a_missing_parameter_is_named_with_the_flag_to_pass(tmp_path: Path) -> None:
    script = _script(tmp_path, """
def build(params):
    out = params["out"]
    return Graph("g")
""")
    code, said = _run(script)
    assert code == EXIT_INVALID
    assert len(said) == 1 and "parameter 'out' is required: pass -p out=VALUE" in said[0]


def test_a_parameter_that_does_not_convert_is_named() -> None:
    code, said = _run(SENSORS, "seconds=abc")
    assert code == EXIT_INVALID and len(said) == 1
    assert "could not convert string to float: 'abc'" in said[0]
    assert "-p seconds='abc'" in said[0]


def test_any_other_build_failure_is_one_line_exit_2(tmp_path: Path) -> None:
    script = _script(tmp_path, "def build(params):\n    raise RuntimeError('no database')\n")
    code, said = _run(script)
    assert code == EXIT_INVALID and said == [f"riverbed run: {script}: build(params) failed: "
                                             "RuntimeError: no database (at graph.py:3, in build)"]


def test_a_failure_says_where_in_the_script_it_was_raised(tmp_path: Path) -> None:
    # A NameError in a helper said what, not where (only a SyntaxError had its line).
    script = _script(tmp_path, "def helper():\n    return Pas\n\n\ndef build(params):\n"
                               "    helper()\n")
    code, said = _run(script)
    assert code == EXIT_INVALID and said == [
        f"riverbed run: {script}: build(params) failed: NameError: name 'Pas' is not defined "
        "(at graph.py:3, in helper)"]
    script = _script(tmp_path, "import json\nSETTINGS = json.loads('{')\n")
    code, said = _run(script)
    assert code == EXIT_INVALID and len(said) == 1 and said[0].endswith("(at graph.py:3)")


def test_a_parameter_that_overflows_is_named(tmp_path: Path) -> None:
    script = _script(tmp_path, "def build(params):\n    n = int(params['n'])\n    return Graph('g')\n")
    code, said = _run(script, "n=1e400")
    assert code == EXIT_INVALID and len(said) == 1
    # (1e400 is beyond the float range: it stays the text given, as NaN does, not an infinity)
    assert "ValueError: invalid literal for int() with base 10: '1e400' (parameter -p n='1e400')" \
        in said[0], said


def test_a_mistake_on_another_line_than_the_last_parameter_read_is_not_blamed_on_it(
        tmp_path: Path) -> None:
    script = _script(tmp_path, "def build(params):\n    n = int(params['n'])\n"
                               "    g = Graph('g', params=params)\n"
                               "    g.sink('out', None, [], schema=n)\n")
    code, said = _run(script, "n=3")
    assert code == EXIT_INVALID and len(said) == 1
    assert "unexpected keyword argument 'schema'" in said[0] and "parameter -p" not in said[0]


def test_a_delta_on_an_attribute_the_schema_lacks_points_at_it(tmp_path: Path) -> None:
    script = _script(tmp_path, """
from riverbed import Operator, Schema
from riverbed.testing import ListSource

class Sink(Operator):
    def on_tuple(self, tup, port):
        pass

def build(params):
    g = Graph("wt")
    s = g.source("s", ListSource([]), schema=Schema(sensor="rstring", v="int64"))
    g.sink("snk", Sink(), [s.window("tumbling, delta(vv, 3)")])
    return g
""")
    code, said = _run(script)
    assert code == EXIT_INVALID
    assert ("eviction delta(vv, 3) uses 'vv', which is not in the schema tuple<rstring sensor, int64 "
            "v>\n    tumbling, delta(vv, 3)\n                    ^^ [unknown-attribute]") in said[0]


@pytest.mark.parametrize("period", ["inf", "1e-9", "0.00001", "nan", "-1s", "0"])
def test_checkpoint_periods_that_are_not_finite_or_too_small_are_refused(tmp_path: Path,
                                                                         period: str) -> None:
    code, said = _run(SENSORS, checkpoint_dir=str(tmp_path / "ck"), checkpoint_period=period)
    assert code == EXIT_INVALID
    assert f"period {period!r}: expected a finite period of at least 10 ms" in said[0]
    assert not (tmp_path / "ck").exists()


def test_the_job_refuses_a_period_below_the_floor_too() -> None:
    from riverbed.checkpoint import MemoryStore
    from riverbed.run import load_graph

    g = load_graph(SENSORS, {})
    with pytest.raises(ValueError, match=r"expected a finite number of seconds >= 0\.01"):
        Job(g, checkpoints=MemoryStore(), checkpoint_period=1e-9)
    with pytest.raises(ValueError, match="expected a finite number"):
        Job(g, checkpoints=MemoryStore(), checkpoint_period=float("inf"))


def test_metrics_port_and_status_interval_out_of_range_are_refused() -> None:
    code, said = _run(SENSORS, metrics_port=99999)
    assert code == EXIT_INVALID and "--metrics-port 99999: expected a TCP port, 0 to 65535" in said[0]
    code, said = _run(SENSORS, status_interval=0.0)
    assert code == EXIT_INVALID and "--status-interval 0: expected a number of seconds > 0" in said[0]
    code, said = _run(SENSORS, linger=-1.0)
    assert code == EXIT_INVALID and "--linger -1.0: expected seconds, 0 or more" in said[0]
    code, said = _run(SENSORS, linger=5.0)  # with nothing to keep serving it did nothing, silently
    assert code == EXIT_INVALID and "--linger 5: keeps --metrics-port or --console serving" in said[0]


def test_a_checkpoint_dir_alone_takes_checkpoints_at_the_default_period(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ck = tmp_path / "ck"
    code, _ = _run(SENSORS, "seconds=12", "sensors=3", f"out={tmp_path / 'a.jsonl'}",
                   virtual_clock=True, checkpoint_dir=str(ck))
    assert code == EXIT_OK
    logs = [json.loads(x) for x in capsys.readouterr().err.splitlines() if x.startswith("{")]
    info = next(e for e in logs if e["event"] == "checkpoints")
    assert info["period_s"] == 5.0 and info["period_default"] is True
    with RocksDBStore(ck, read_only=True) as store:
        assert len(store.list()) >= 2  # at 5 s and 10 s of the 12 s run (and the store keeps 3)


def test_a_checkpoint_of_another_job_is_refused_naming_both(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    code, _ = _run(SENSORS, "seconds=6", "sensors=3", f"out={tmp_path / 'a.jsonl'}",
                   virtual_clock=True, checkpoint_dir=str(ck), checkpoint_period="1s")
    assert code == EXIT_OK
    script = tmp_path / "renamed.py"
    script.write_text(Path(SENSORS).read_text().replace('Graph("sensors", params)',
                                                        'Graph("other", params)'))
    code, said = _run(str(script), "seconds=6", "sensors=3", f"out={tmp_path / 'b.jsonl'}",
                      virtual_clock=True, checkpoint_dir=str(ck), checkpoint_period="1s")
    assert code == EXIT_INVALID
    assert "was taken by job 'sensors', and this job is 'other'" in said[0]
    assert not (tmp_path / "b.jsonl").exists()


def test_a_store_that_fails_to_close_is_logged_and_the_job_still_exits_0(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from riverbed.checkpoint import CheckpointError

    real_close = RocksDBStore.close

    def failing_close(self: RocksDBStore) -> None:
        real_close(self)
        raise CheckpointError("IO error: No space left on device")

    monkeypatch.setattr(RocksDBStore, "close", failing_close)
    code, _ = _run(SENSORS, "seconds=2", "sensors=3", f"out={tmp_path / 'a.jsonl'}",
                   virtual_clock=True, checkpoint_dir=str(tmp_path / "ck"), checkpoint_period="1s")
    assert code == EXIT_OK
    logs = [json.loads(x) for x in capsys.readouterr().err.splitlines() if x.startswith("{")]
    failed = next(e for e in logs if e["event"] == "checkpoint store close failed")
    assert "No space left on device" in failed["error"]


def test_the_real_clock_yields_even_when_the_deadline_has_passed() -> None:
    """Issue 16.7: a loop sleeping until past deadlines must still let other tasks run."""

    async def main() -> int:
        clock = RealClock()
        other_ran_at: list[int] = []
        spins = 0

        async def spin() -> None:
            nonlocal spins
            for spins in range(1, 101):  # noqa: B007 - counted for the other task to read
                await clock.sleep_until(0)

        async def other() -> None:
            other_ran_at.append(spins)

        await asyncio.gather(spin(), other())
        return other_ran_at[0]

    assert asyncio.run(main()) < 100


def test_checkpoints_the_store_lost_are_logged_by_the_job(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 16.11: the store's record of committed checkpoints names ids RocksDB no longer
    has (as after a damaged log); the job logs them instead of restoring an older one silently."""
    ck = tmp_path / "ck"
    args = ("seconds=3", "sensors=3", f"out={tmp_path / 'a.jsonl'}")
    code, _ = _run(SENSORS, *args, virtual_clock=True, checkpoint_dir=str(ck), checkpoint_period="1s")
    assert code == EXIT_OK
    ledger = ck / "riverbed-committed.json"
    record = json.loads(ledger.read_text())
    newest = record["newest"]
    record["newest"], record["kept"] = newest + 2, [newest + 2, newest + 1, *record["kept"]]
    ledger.write_text(json.dumps(record))
    capsys.readouterr()
    code, _ = _run(SENSORS, *args, virtual_clock=True, checkpoint_dir=str(ck), checkpoint_period="1s")
    assert code == EXIT_OK
    logs = [json.loads(x) for x in capsys.readouterr().err.splitlines() if x.startswith("{")]
    lost = next(e for e in logs if e["event"] == "checkpoint store")
    assert lost["kind"] == "lost" and lost["checkpoints"] == [newest + 1, newest + 2]
    finished = next(e for e in logs if e["event"] == "job finished")
    assert finished["restored_from"] == newest


@pytest.mark.parametrize(("body", "message"), [
    ("x = 1\n", "the script defines neither build(params) nor a module-level 'graph'"),
    ("def build(params):\n    g = Graph('g')\n", "build(params) returned NoneType, not a riverbed "
                                                  "Graph (a missing 'return g'?)"),
    ("graph = 'g'\n", "its module-level 'graph' is a str, not a riverbed Graph"),
])
def test_a_script_without_a_graph_says_what_it_lacks(tmp_path: Path, body: str, message: str) -> None:
    code, said = _run(_script(tmp_path, body))
    assert code == EXIT_INVALID and len(said) == 1 and message in said[0], said


@pytest.mark.parametrize("given", [["--restart", "1"], ["--rest=2"], ["--checkpoint-d", "ck"]])
def test_a_shortened_option_is_refused_not_taken_for_the_long_one(
        given: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`--restart 1` was `--restarts 1`: the supervisor, which takes `--restarts` out of its
    child's arguments by name, left it in, and each child supervised again (a chain of
    processes without end, a review found). Nothing is started here even if that comes back:
    the supervisor and the job are stand-ins."""
    import riverbed.run
    import riverbed.supervise as supervise
    from riverbed.cli import _main

    monkeypatch.setattr(supervise, "supervise", lambda *a, **k: pytest.fail("it supervised"))
    monkeypatch.setattr(riverbed.run, "run", lambda *a, **k: pytest.fail("it ran the job"))
    with pytest.raises(SystemExit) as exit_:
        _main(["run", "graph.py", *given])
    assert exit_.value.code == 2


def test_a_job_process_a_supervisor_started_never_supervises(monkeypatch: pytest.MonkeyPatch) -> None:
    import riverbed.run
    import riverbed.supervise as supervise
    from riverbed.cli import _main

    supervised: list[Any] = []
    ran: list[str] = []
    def fake_supervise(*a: Any, **k: Any) -> int:
        supervised.append(a)
        return 0

    def fake_run(script: str, **k: Any) -> int:
        ran.append(script)
        return EXIT_OK

    monkeypatch.setattr(supervise, "supervise", fake_supervise)
    monkeypatch.setattr(riverbed.run, "run", fake_run)
    monkeypatch.setenv(supervise.SUPERVISOR_ENV, "1")
    assert _main(["run", "graph.py", "--restarts", "2"]) == EXIT_OK
    assert supervised == [] and ran == ["graph.py"]  # it ran the job itself


def test_nan_and_infinity_given_with_p_stay_text() -> None:
    """Python's JSON parser takes NaN and Infinity (not JSON): `-p seconds=NaN` became a float
    that no check up front refused; it failed the source at run time, exit 1."""
    from riverbed.run import parse_params

    assert parse_params(["a=NaN", "b=-Infinity", "c=[NaN]", "d=1.5", "e=[1, 2]", "f=1e999",
                         "g=[1e999]"]) == \
        {"a": "NaN", "b": "-Infinity", "c": "[NaN]", "d": 1.5, "e": [1, 2], "f": "1e999", "g": "[1e999]"}


def test_a_bad_value_merged_over_defaults_is_named(tmp_path: Path) -> None:
    """``defaults | params`` (the main job's and parallel_panes.py's way): a value that does not
    convert was not traced to its -p (it was for ``params["n"]``)."""
    script = tmp_path / "merged.py"
    script.write_text("from riverbed import Graph\n"
                      "def build(params):\n"
                      "    p = {'sensors': 4, 'seconds': 1} | params\n"
                      "    int(p['sensors'])\n"
                      "    return Graph('g')\n")
    lines: list[str] = []
    assert run(str(script), params=["sensors=abc"], echo=lines.append) == EXIT_INVALID
    assert "(parameter -p sensors='abc')" in lines[-1], lines
