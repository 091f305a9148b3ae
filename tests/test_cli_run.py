"""`riverbed run` as users run it: a subprocess, real signals, exit codes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _riverbed(*args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, "-m", "riverbed", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _log_lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_sigterm_stops_the_job_cleanly_and_sinks_flush(tmp_path: Path) -> None:
    out = tmp_path / "alerts.jsonl"
    proc = _riverbed("run", "examples/sensors.py", "-p", "seconds=600", "-p", f"out={out}",
                     "--no-status", "--log-format", "json")
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:  # wait for the job to run: read its log, no sleeping
        seen.append(line)
        if '"job started"' in line:
            break
    proc.send_signal(signal.SIGTERM)
    _, rest = proc.communicate(timeout=60)
    logs = _log_lines("".join(seen) + rest)
    assert proc.returncode == 0, rest
    events = [entry["event"] for entry in logs]
    assert "stopping" in events
    finished = [entry for entry in logs if entry["event"] == "job finished"]
    assert finished and finished[0]["stopped"] is True
    for line in out.read_text().splitlines():  # the sink closed its file: every line is whole
        json.loads(line)


def _script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "graph.py"
    path.write_text("from riverbed.graph import Graph, Operator, Source\n" + body)
    return str(path)


def test_an_invalid_graph_exits_2_naming_operator_and_rule(tmp_path: Path) -> None:
    script = _script(tmp_path, """
class S(Source):
    def generate(self):
        return iter([])
class W(Operator):
    pass
g = Graph("bad")
s = g.source("src", S())
g.sink("win", W(), [s.window("sliding, count(3), partitioned")])
graph = g
""")
    proc = _riverbed("run", script, "--no-status")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "operator 'win': input port 0: the window is partitioned" in err
    assert "[partition-key]" in err


def test_the_standard_operators_port_rules_are_listed_by_run_and_graph(tmp_path: Path) -> None:
    """Operators' own rules (a window Aggregate needs, Sort's port counts, Barrier's inputs)
    are the graph's: every one is listed and the job never starts, not just the first at set-up."""
    script = _script(tmp_path, """
from riverbed.graph import Schema
from riverbed.operators import Aggregate, Barrier, Count, Sort
class S(Source):
    def generate(self):
        return iter([])
g = Graph("misfits")
s = g.source("src", S(), schema=Schema(k="rstring", v="int64"))
g.operator("agg", Aggregate({"n": Count()}, group_by="site"), [s])
g.operator("sort", Sort(sort_by="v"), [s.window("tumbling, count(2)"), s])
g.operator("bar", Barrier(), [s])
graph = g
""")
    for command in ("run", "graph"):
        proc = _riverbed(command, script, *(("--no-status",) if command == "run" else ()))
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 2, (command, out, err)
        assert "operator 'agg': input port 0 must be windowed" in err
        assert "operator 'agg': group_by reads attribute 'site'" in err
        assert "operator 'sort': has one input and one output port, the graph gives it 2 and 1" in err
        assert "operator 'bar': has 1 input port; Barrier takes at least 2 [operator]" in err
        assert "job started" not in err


def test_a_failing_operator_exits_1_naming_it(tmp_path: Path) -> None:
    script = _script(tmp_path, """
class S(Source):
    def generate(self):
        return iter([{"v": 1}, {"v": 0}])
class Div(Operator):
    def on_tuple(self, t, port):
        self.submit({"r": 1 / t["v"]})
def build(params):
    g = Graph("div")
    s = g.source("src", S())
    d = g.operator("divide", Div(), [s])
    g.sink("sink", Div(), [d])
    return g
""")
    proc = _riverbed("run", script, "--no-status", "--log-format", "json")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert "operator 'divide', input port 0: ZeroDivisionError" in err
    assert "{'v': 0}" in err


def test_params_reach_build_and_a_script_without_build_refuses_them(tmp_path: Path) -> None:
    script = _script(tmp_path, """
graph = 42
""")
    proc = _riverbed("run", script, "-p", "n=3", "--no-status")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "--param given but the script has no build(params)" in err


def test_a_script_imports_a_module_kept_beside_it(tmp_path: Path) -> None:
    # As `python graph.py` would: the script's directory comes first on the path.
    (tmp_path / "graph_helpers.py").write_text("ROWS = [{'v': 1}, {'v': 2}]\n")
    script = _script(tmp_path, """
from graph_helpers import ROWS
from riverbed import Graph
from riverbed.testing import ListSource
from riverbed.operators import FileSink

def build(params):
    g = Graph("beside")
    g.sink("out", FileSink(params["out"], format="json"), [g.source("src", ListSource(ROWS))])
    return g
""")
    out = tmp_path / "out.jsonl"
    proc = _riverbed("run", script, "-p", f"out={out}", "--no-status")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.read_text() == '{"v":1}\n{"v":2}\n'
    # The processes a job starts import it too (Spark's Python workers unpickle its functions).
    child = subprocess.run([sys.executable, "-c", f"""
import os, subprocess, sys
from riverbed.run import load_script
load_script({script!r}, {{"out": {str(out)!r}}})
subprocess.run([sys.executable, "-c", "import graph_helpers"], check=True)
"""], check=False, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert child.returncode == 0, child.stderr


def test_checkpoint_dir_resumes_from_the_last_good_checkpoint_and_lists_it(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    args = ("run", "examples/sensors.py", "-p", "seconds=1", "-p", "sensors=20", "-p",
            f"out={tmp_path / 'a.jsonl'}", "--checkpoint-dir", str(ckpt), "--checkpoint-period",
            "200ms", "--no-status", "--log-format", "json")
    first = _riverbed(*args)
    _, err = first.communicate(timeout=60)
    assert first.returncode == 0, err
    done = next(e for e in _log_lines(err) if e["event"] == "job finished")
    assert done["restored_from"] is None and isinstance(done["last_checkpoint"], int)
    listing = _riverbed("checkpoints", "list", str(ckpt))
    out, _ = listing.communicate(timeout=60)
    assert listing.returncode == 0
    assert f"{done['last_checkpoint']:>8}  sensors" in out and out.rstrip().endswith("ok")
    second = _riverbed(*args)
    _, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    again = next(e for e in _log_lines(err) if e["event"] == "job finished")
    assert again["restored_from"] == done["last_checkpoint"]


def test_json_logs_off_a_terminal_stay_json_lines_with_the_status_view(tmp_path: Path) -> None:
    # The status view printed plain text lines between the JSON log lines of a pipe.
    proc = _riverbed("run", "examples/sensors.py", "--virtual-clock", "-p", "seconds=2",
                     "-p", f"out={tmp_path / 'alerts.jsonl'}", "--log-format", "json",
                     "--status-interval", "0.5")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    events = [json.loads(line) for line in err.splitlines()]  # every line is a JSON object
    status = [e for e in events if e["event"] == "status"]
    assert status and any("sensors" in line for line in status[-1]["lines"])


def test_sigterm_to_the_whole_process_group_drains_a_parallel_region(tmp_path: Path) -> None:
    """systemd, `timeout` and `kill -- -PGID` signal every process of the job's group: the
    workers must leave the stop to the job (they died of it, and the job failed undrained)."""
    out = tmp_path / "panes.csv"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "riverbed", "run", "examples/parallel_panes.py",
                             "-p", "width=2", "-p", "sensors=20", "-p", "seconds=600", "-p",
                             f"out={out}", "--no-status", "--log-format", "json"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:  # wait for both workers to run
        seen.append(line)
        if sum('"channel_started"' in s for s in seen) == 2:
            break
    os.killpg(proc.pid, signal.SIGTERM)
    _, rest = proc.communicate(timeout=120)
    logs = _log_lines("".join(seen) + rest)
    assert proc.returncode == 0, rest
    ended = [e for e in logs if e["event"] == "channel_ended"]
    assert len(ended) == 2 and all(e["finished"] for e in ended), ended
    assert [e["stopped"] for e in logs if e["event"] == "job finished"] == [True]
    rows = out.read_text().splitlines()
    assert rows and all(len(row.split(",")) == 5 for row in rows)  # every pane written whole


def test_ctrl_c_at_a_terminal_stops_a_supervised_job_cleanly(tmp_path: Path) -> None:
    """A terminal's Ctrl-C goes to its whole foreground group: with --restarts, the child got it
    from the terminal and again from the supervisor, and aborted (exit 3)."""
    out = tmp_path / "alerts.jsonl"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "riverbed", "run", "examples/sensors.py", "-p",
                             "seconds=600", "-p", f"out={out}", "--no-status", "--log-format",
                             "json", "--restarts", "3"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:  # the child's job runs
        seen.append(line)
        if '"job started"' in line:
            break
    os.killpg(proc.pid, signal.SIGINT)  # what the terminal does
    _, rest = proc.communicate(timeout=120)
    events = [e["event"] for e in _log_lines("".join(seen) + rest)]
    assert proc.returncode == 0, rest
    assert "stopping" in events and "aborting" not in events


def test_with_json_logs_a_failure_is_a_json_line_too(tmp_path: Path) -> None:
    script = _script(tmp_path, """
class S(Source):
    def generate(self):
        return iter([{"v": 1}])
class Boom(Operator):
    def on_tuple(self, t, port):
        raise ValueError("boom\\nsecond line")
g = Graph("fail")
g.sink("boom", Boom(), [g.source("s", S())])
graph = g
""")
    proc = _riverbed("run", script, "--no-status", "--log-format", "json")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    lines = err.splitlines()
    assert lines and all(line.startswith("{") for line in lines), err
    failure = _log_lines(err)[-1]
    assert (failure["event"], failure["level"]) == ("riverbed run", "error")
    assert failure["message"] == ("job 'fail' failed:\n  operator 'boom', input port 0: ValueError: "
                                  "boom\nsecond line on tuple {'v': 1}")


def test_with_json_logs_warnings_library_logs_and_thread_failures_are_json_lines(
        tmp_path: Path) -> None:
    """Python warnings, a library's stdlib logging and an exception ending a thread printed
    plain text among the JSON lines (a review)."""
    script = _script(tmp_path, """
import logging, threading, warnings
warnings.warn("at import")
class S(Source):
    def generate(self):
        return iter([{"v": 1}])
class Noisy(Operator):
    def on_tuple(self, t, port):
        warnings.warn("a user warning")
        logging.getLogger("somelib").warning("a library says %s", "hi")
        thread = threading.Thread(target=lambda: 1 / 0, name="helper")
        thread.start()
        thread.join()
g = Graph("noisy")
g.sink("noisy", Noisy(), [g.source("s", S())])
graph = g
""")
    proc = _riverbed("run", script, "--no-status", "--log-format", "json")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    events = [json.loads(line) for line in err.splitlines()]  # every line is a JSON object
    warned = [e["event"] for e in events if e.get("logger") == "py.warnings"]
    assert any("at import" in w for w in warned) and any("a user warning" in w for w in warned)
    assert {"logger": "somelib", "event": "a library says hi", "level": "warning"}.items() <= \
        next(e for e in events if e.get("logger") == "somelib").items()
    failed = next(e for e in events if e["event"] == "thread failed")
    assert failed["thread"] == "helper" and failed["exception"][0]["exc_type"] == "ZeroDivisionError"


@pytest.mark.parametrize("log_format", ["console", "json"])
def test_a_second_signal_while_build_hangs_aborts_the_command(tmp_path: Path, log_format: str) -> None:
    """A ``build()`` waiting on a network or a database: the first signal is kept for the job
    (it stops it as it starts), the second ends the command there and then (exit 3), saying
    so as a JSON line with --log-format json (it was plain text there)."""
    script = _script(tmp_path, (
        "import sys, time\n"
        "def build(params):\n"
        "    print('building', flush=True)\n"
        "    time.sleep(120)\n"
        "    g = Graph('late')\n"
        "    return g\n"))
    proc = _riverbed("run", script, "--no-status", "--log-format", log_format)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "building"  # in build(): no sleeping to get there
    proc.send_signal(signal.SIGINT)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, err
    assert "aborted by a second signal" in err and "Traceback" not in err
    if log_format == "json":
        events = [json.loads(line) for line in err.splitlines()]  # every line is a JSON object
        assert any("aborted by a second signal" in e.get("message", "") for e in events)


def test_another_graphs_checkpoint_of_the_same_job_name_is_refused_in_one_line(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"

    def graph(source: str) -> str:
        path = tmp_path / f"{source}.py"
        path.write_text(
            "from riverbed.graph import Graph, Operator, Source\n"
            "class Items(Source):\n"
            "    replayable = True\n"
            "    def __init__(self): self.i = 0\n"
            "    def generate(self):\n"
            "        while True:\n"
            "            self.i += 1\n"
            "            yield {'i': self.i}\n"
            "    def snapshot(self): return self.i\n"
            "    def restore(self, state): self.i = state\n"
            "class Drop(Operator):\n"
            "    def on_tuple(self, tup, port): pass\n"
            "def build(params):\n"
            "    g = Graph('same')\n"
            f"    g.sink('out', Drop(), [g.source({source!r}, Items())])\n"
            "    return g\n")
        return str(path)

    first = _riverbed("run", graph("a"), "--checkpoint-dir", str(ckpt), "--no-status",
                      "--log-format", "json")
    assert first.stderr is not None
    for line in first.stderr:  # wait for the job to run: read its log, no sleeping
        if '"job started"' in line:
            break
    first.send_signal(signal.SIGTERM)  # a stop suspends it: a checkpoint of graph a
    _, err = first.communicate(timeout=60)
    assert first.returncode == 0, err
    stopping = next(e for e in _log_lines(err) if e["event"] == "stopping")
    assert str(stopping["hint"]).startswith("a checkpoint, then every operator ends where it is")
    second = _riverbed("run", graph("b"), "--checkpoint-dir", str(ckpt), "--no-status",
                       "--restarts", "2")
    _, err = second.communicate(timeout=60)
    # Refused before anything ran, once (not restarted): it was exit 1 blaming operator 'b'.
    assert second.returncode == 2, err
    assert "no state for operator(s) b" in err and "different graph" in err
    assert "Traceback" not in err and err.count("different graph") == 1


def test_a_misspelled_parameter_is_named_with_the_one_build_asked_for(tmp_path: Path) -> None:
    out = tmp_path / "a.jsonl"
    proc = _riverbed("run", "examples/sensors.py", "-p", "sensor=5", "-p", "seconds=0.2",
                     "-p", "secnds=2", "-p", f"out={out}", "-p", "nothing_like_it=1",
                     "--no-status", "--log-format", "json")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    said = [e["message"] for e in _log_lines(err) if e["event"] == "parameter"]
    assert said == [
        "-p sensor=5: build() never read 'sensor'; did you mean 'sensors' (it used its "
        "default)?",
        "-p secnds=2: build() never read 'secnds'; did you mean 'seconds'?"]


def test_a_misspelled_parameter_is_named_when_build_merges_defaults(tmp_path: Path) -> None:
    # `defaults | params` (the parallel_panes and MQTT examples) bypassed get(): no warning,
    # and the default ran silently.
    from riverbed.run import ScriptError, load_script
    script = _script(tmp_path, """
from riverbed.testing import ListSource, ListSink

def build(params):
    p = {"sensors": 100, "seconds": 30} | params
    g = Graph("merged")
    g.sink("out", ListSink(), [g.source("src", ListSource([{"n": int(p["sensors"])}]))])
    return g
""")
    said: list[str] = []
    load_script(script, {"sensor": 5, "seconds": 2}, warn=said.append)
    assert said == ["-p sensor=5: build() never read 'sensor'; did you mean 'sensors' (it used its "
                    "default)?"]
    # A failure after the merge is not blamed on the last -p merged (it has nothing to do with it).
    failing = _script(tmp_path, """
def build(params):
    p = {"sensors": 100, "seconds": 30} | params
    raise ValueError("need at least one sensor")
""")
    with pytest.raises(ScriptError) as info:
        load_script(failing, {"sensors": -5, "seconds": 2})
    assert "parameter -p" not in str(info.value)


def test_a_misspelled_parameter_is_named_when_build_unpacks_params(tmp_path: Path) -> None:
    # `{**defaults, **params}` reads the -p values without asking for a name: the misspelled
    # one ran its default silently. A -p the script mentions (read by unpacking, or later) and
    # one close to nothing it mentions are left alone.
    from riverbed.run import load_script
    script = _script(tmp_path, """
from riverbed.testing import ListSource, ListSink

def build(params):
    p = {**{"sensors": 100, "seconds": 30, "label": "x"}, **params}
    g = Graph("unpacked")
    g.sink("out", ListSink(), [g.source("src", ListSource([{"n": int(p["sensors"])}]))])
    return g
""")
    said: list[str] = []
    load_script(script, {"sensor": 5, "seconds": 2, "label": "y", "nothing_like_it": 1},
                warn=said.append)
    assert said == ["-p sensor=5: the script never mentions 'sensor'; did you mean 'sensors'?"]


def test_a_misspelled_width_of_a_region_reading_the_graphs_params_is_named(tmp_path: Path) -> None:
    # Graph(params=...) kept a copy: the region's read of "width" was not seen, and -p widht=1
    # ran at the CPU count without a word (a README review).
    from riverbed.run import load_script
    script = _script(tmp_path, """
from riverbed.testing import ListSource, ListSink
from riverbed.operators import Functor

def build(params):
    g = Graph("widths", params=params)
    src = g.source("src", ListSource([{"k": 1}]))
    with g.parallel(partition_by="k"):
        f = g.operator("f", Functor(), [src])
    g.sink("out", ListSink(), [f])
    return g
""")
    said: list[str] = []
    load_script(script, {"widht": 1}, warn=said.append)
    assert said == ["-p widht=1: build() never read 'widht'; did you mean 'width' (it used its "
                    "default)?"]


def test_ctrl_c_while_riverbed_graph_loads_a_script_is_one_line(tmp_path: Path) -> None:
    script = _script(tmp_path, (
        "import time\n"
        "def build(params):\n"
        "    print('building', flush=True)\n"
        "    time.sleep(120)\n"
        "    return Graph('late')\n"))
    proc = _riverbed("graph", script)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "building"  # in build(): no sleeping to get there
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.strip() == "riverbed: interrupted"


def test_linger_keeps_the_metrics_up_with_the_final_counts_until_a_signal(tmp_path: Path) -> None:
    """A job that ends between two scrapes took its endpoint with it: Prometheus never saw its
    last counts. ``--linger`` serves them after the job finished; a signal ends the wait."""
    import urllib.request

    out = tmp_path / "alerts.jsonl"
    proc = _riverbed("run", "examples/sensors.py", "--virtual-clock", "-p", "seconds=2",
                     "-p", f"out={out}", "--metrics-port", "0", "--linger", "600",
                     "--log-format", "json", "--no-status")
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:  # until the job finished and the wait began: no sleeping
        seen.append(line)
        if '"serving the final counts"' in line:
            break
    logs = _log_lines("".join(seen))
    (url,) = [entry["url"] for entry in logs if entry["event"] == "metrics"]
    assert [entry["event"] for entry in logs][-2:] == ["job finished", "serving the final counts"]
    with urllib.request.urlopen(str(url), timeout=10) as response:
        text = response.read().decode()
    written = len(out.read_text().splitlines())
    assert written > 0
    assert (f'riverbed_tuples_processed_total{{job="sensors",operator="file",port="0"}} '
            f"{float(written)}") in text
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=60)
    assert proc.returncode == 0, rest


def test_a_virtual_clock_job_restores_its_time_windows_from_a_checkpoint(tmp_path: Path) -> None:
    """The virtual clock started at 0 on every run, before the time of the checkpoint it
    restored: every time window refused its snapshot (SnapshotError) and the restart failed. It
    now resumes at the checkpoint's time."""
    script = _script(tmp_path, """
from riverbed.graph import Schema
from riverbed.operators import Aggregate, Beacon, Count, FileSink
def build(params):
    g = Graph("paced")
    src = g.source("beacon", Beacon(iterations=3000, period=0.001,
                                    output={"sensor": lambda i: i % 3}), schema=Schema(sensor="int64"))
    panes = g.operator("panes", Aggregate({"n": Count()}, copy=("sensor",)),
                       [src.window("tumbling, time(1), partitioned", partition_by="sensor")],
                       [Schema(sensor="int64", n="int64")])
    g.sink("out", FileSink(params["out"], format="csv", transactional=True), [panes])
    return g
""")
    out, ckpt = tmp_path / "panes.csv", tmp_path / "ckpt"
    args = ("run", script, "-p", f"out={out}", "--virtual-clock", "--checkpoint-dir", str(ckpt),
            "--checkpoint-period", "0.5s", "--no-status", "--log-format", "json")
    written = []
    for attempt in ("first", "restart"):
        proc = _riverbed(*args)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, (attempt, err)
        written.append(out.read_text())
    done = next(e for e in _log_lines(err) if e["event"] == "job finished")
    assert isinstance(done["restored_from"], int)
    assert written[0].splitlines()[:3] == ["0,334", "1,334", "2,334"]  # the first 1 s pane
    assert written[1] == written[0]  # the restart continued from the end: nothing twice


def test_a_checkpoint_directory_of_other_regions_is_refused(tmp_path: Path) -> None:
    """A renamed region, or a switch between the job's own region and declared ones, started
    over with exit 0 beside the old checkpoints, and two such runs could share the directory at
    once (a review). And --checkpoint-dir '' made the working directory the store."""
    script = _script(tmp_path, """
class S(Source):
    replayable = True
    def __init__(self): self.at = 0
    def generate(self):
        while self.at < 100:
            self.at += 1
            yield {"v": self.at}
    def snapshot(self): return self.at
    def restore(self, state): self.at = state
class Drop(Operator):
    def on_tuple(self, t, port): pass
def build(params):
    g = Graph("layout", params)
    src = g.source("s", S())
    g.sink("out", Drop(), [src])
    if params.get("region"):
        g.consistent_region(src, name=params["region"], period=1.0)
    return g
""")
    ck = str(tmp_path / "ck")

    def run(*args: str) -> tuple[int, str]:
        proc = _riverbed("run", script, "--no-status", "--log-format", "json", "--checkpoint-dir",
                         *args)
        _, err = proc.communicate(timeout=60)
        return proc.returncode, err

    assert run(ck, "-p", "region=main")[0] == 0
    code, err = run(ck, "-p", "region=primary")
    assert code == 2 and "region(s) 'main', which this graph does not declare" in err, err
    code, err = run(ck)
    assert code == 2 and "this graph declares none" in err, err
    assert run(ck, "-p", "region=main")[0] == 0  # as it was: goes on
    job_wide = str(tmp_path / "job")
    assert run(job_wide)[0] == 0
    code, err = run(job_wide, "-p", "region=main")
    assert code == 2 and "the checkpoints of the job's own region" in err, err
    code, err = run("")
    assert code == 2 and "expected a directory for the checkpoints" in err, err


def test_a_supervised_job_stops_when_its_supervisor_is_killed(tmp_path: Path) -> None:
    """The child runs in a process group of its own: a SIGKILL of the supervisor left it
    running, holding the checkpoint store's lock, and a new supervisor was refused (a review)."""
    proc = _riverbed("run", "examples/sensors.py", "-p", "seconds=600", "-p",
                     f"out={tmp_path / 'a.jsonl'}", "--no-status", "--log-format", "json",
                     "--restarts", "2", "--checkpoint-dir", str(tmp_path / "ck"))
    assert proc.stderr is not None
    child = None
    for line in proc.stderr:
        if '"job process started"' in line:
            child = json.loads(line)["pid"]
        if child is not None and '"job started"' in line:
            break
    assert isinstance(child, int)
    proc.kill()
    proc.wait()

    def gone() -> bool:
        try:
            with open(f"/proc/{child}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # ended, not reaped yet
        except FileNotFoundError:
            return True

    deadline = time.monotonic() + 60
    while not gone():
        assert time.monotonic() < deadline, "the job process outlived its supervisor"
        time.sleep(0.05)  # another process's end: nothing here to await


def test_the_supervisors_pid_is_not_passed_on_to_what_the_job_starts() -> None:
    """A `riverbed run` that a supervised job started took its own parent for a supervisor gone
    and stopped at once, exit 0 (a review): the variable is read once and removed."""
    code = ("import os; from riverbed.supervise import SUPERVISOR_ENV, follow_supervisor; "
            "follow_supervisor(); print(os.environ.get(SUPERVISOR_ENV))")
    env = dict(os.environ, RIVERBED_SUPERVISOR=str(os.getpid()))  # this process: its parent
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60, check=True)
    assert done.stdout.strip() == "None"


def test_a_full_disk_at_the_store_s_open_is_a_failure_restarts_retry(tmp_path: Path) -> None:
    # It exited 2 ("invalid"), which --restarts never retries, while a full disk in the middle
    # of a run exits 1 and is retried. A file-size limit stands in for the full disk.
    import resource

    script = _script(tmp_path, """
from riverbed.operators import Beacon
from riverbed.testing import ListSink

def build(params):
    g = Graph("tiny", params)
    g.sink("out", ListSink(), [g.source("b", Beacon(iterations=3))])
    return g
""")

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))

    def run(directory: Path, limit: Callable[[], None] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "riverbed", "run", script, "--checkpoint-dir",
                               str(directory), "--no-status"], cwd=ROOT, capture_output=True,
                              text=True, timeout=120, preexec_fn=limit, check=False)

    done = run(tmp_path / "ck", small_files)
    assert done.returncode == 1, done.stderr
    assert "the disk is full, or a file-size limit was reached" in done.stderr
    assert run(tmp_path / "ck").returncode == 0  # with room, the same directory works
    (tmp_path / "file").write_text("")
    refused = run(tmp_path / "file")
    assert refused.returncode == 2 and "is a file, not a directory" in refused.stderr


def test_late_tuples_dropped_are_named_with_their_operator_when_the_job_ends(tmp_path: Path) -> None:
    script = _script(tmp_path, """
from riverbed.graph import Schema
from riverbed.operators import Aggregate, Count
from riverbed.testing import ListSink

S = 1_000_000_000

class Readings(Source):
    def generate(self):
        for t in (100, 101, 5_000_000_000, 102, 103):  # one far-future time: the rest is late
            yield {"ts": t * S}

def build(params):
    g = Graph("late", params)
    src = g.source("src", Readings(), schema=Schema(ts="timestamp"), event_time="ts")
    panes = g.operator("panes", Aggregate({"n": Count()}),
                       [src.window("timeInterval, intervalDuration(10)")])
    g.sink("out", ListSink(), [panes])
    return g
""")
    done = subprocess.run([sys.executable, "-m", "riverbed", "run", script, "--virtual-clock",
                           "--no-status", "--log-format", "json"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    late = [e for e in _log_lines(done.stderr) if e["event"] == "late tuples dropped"]
    assert [(e["operator"], e["tuples"]) for e in late] == [("panes", 2)]
