"""The Spark bridge's hosting without Spark: plans, key-group hosting and the synchronous host.

`host_group` is what each key group runs inside applyInPandasWithState;
here micro-batches are cut at every size, and each group's state goes through
the same encoding as in Spark's state store between them.
"""

from __future__ import annotations

from typing import Any

import pytest

from riverbed.core import SyncGraph
from riverbed.graph import Graph, Operator, Punct, Source
from riverbed.mqtt import MQTTSource
from riverbed.operators import Aggregate, Count, DirectoryScan, Filter, Functor, Join, Sum
from riverbed.run import load_graph
from riverbed.runtime import Job, VirtualClock, run_virtual
from riverbed.spark_bridge import TranslationError
from riverbed.spark_bridge._plan import plan
from riverbed.spark_bridge._trace import run_cases_locally
from riverbed.testing import ListSink, ListSource
from tests.spark.test_bridge import _cases
from tests.trace_compare import mismatch


@pytest.mark.parametrize("rows_per_batch", [1, 3, 1000])
@pytest.mark.parametrize("flavor", ["java", "cpp"])
def test_every_case_hosted_per_key_group_across_micro_batches(flavor: str, rows_per_batch: int) -> None:
    cases = _cases(flavor)
    results = run_cases_locally(cases, flavor, rows_per_batch=rows_per_batch)
    failures = {c["name"]: why for c, ev in zip(cases, results, strict=True)
                if (why := mismatch(dict(c, order="by_key"), ev)) is not None}
    assert not failures, failures


def _graph(source: Source, *ops: tuple[str, Operator, str | None]) -> Graph:
    g = Graph("g")
    s = g.source("src", source)
    for name, op, clause in ops:
        port: Any = s.window(clause, partition_by="k" if "partitioned" in clause else None) if clause else s
        s = g.operator(name, op, [port])
    g.sink("sink", ListSink(), [s])
    return g


def test_sync_graph_gives_the_runtimes_items_marks_and_order() -> None:
    items: list[Any] = [{"k": i % 3, "v": i} for i in range(40)]
    items.insert(17, Punct.WINDOW)

    def graph() -> Any:
        return _graph(ListSource(items), ("f", Functor(output={"w": lambda t: t["v"] * 2}), None),
                      ("agg", Aggregate({"s": Sum("w"), "n": Count()}, copy=("k",)),
                       "sliding, count(4), count(2), partitioned")).freeze()

    clock = VirtualClock()
    job = Job(graph(), clock=clock)
    run_virtual(job.run(), clock)
    expected = job.runners["sink"].op.items  # type: ignore[attr-defined]
    host = SyncGraph(graph(), ["f", "agg", "sink"])
    for item in items:
        host.feed("src", 0, item if item is Punct.WINDOW else [item])
    host.feed("src", 0, Punct.FINAL)
    assert host.core("sink").op.items == expected  # type: ignore[attr-defined]
    assert host.finished


def test_sync_graph_state_round_trip_continues_exactly() -> None:
    g = _graph(ListSource([]), ("agg", Aggregate({"s": Sum("v")}, copy=("k",)),
                                "tumbling, count(3), partitioned")).freeze()
    whole = SyncGraph(g, ["agg", "sink"])
    split = SyncGraph(g, ["agg", "sink"])
    for i in range(20):
        whole.feed("src", 0, [{"k": i % 2, "v": i}])
        split.feed("src", 0, [{"k": i % 2, "v": i}])
        if i % 4 == 0:
            split = SyncGraph(g, ["agg", "sink"], state=split.state())
            split.core("sink").op.items = []  # type: ignore[attr-defined]
    a = [t for t in whole.core("sink").op.items if t != Punct.WINDOW]  # type: ignore[attr-defined]
    b = [t for t in split.core("sink").op.items if t != Punct.WINDOW]  # type: ignore[attr-defined]
    assert b == a[len(a) - len(b):] and b  # the last host's output is the tail of the whole output


def test_keyed_plan_routes_by_key_and_says_how() -> None:
    g = _graph(ListSource([]), ("f", Filter(lambda t: True), None),
               ("agg", Aggregate({"n": Count()}), "tumbling, count(2), partitioned"))
    p = plan(g.freeze(), groups=4)
    assert (p.mode, p.pre_chain, p.keyed, p.groups, p.driver) == ("keyed", ["f"], "agg", 4, ["sink"])
    text = p.explain()
    assert "groupBy(hash(k) mod 4).applyInPandasWithState" in text
    assert "runs in the source's task" in text


def test_explain_says_what_an_operator_in_a_key_group_is_trusted_with() -> None:
    """It called an operator with state in plain attributes "stateless" without a word on what
    that means there, and a window after a Functor "on the same key" (a review)."""
    window = "tumbling, count(2), partitioned"
    g = _graph(ListSource([]), ("agg", Aggregate({"n": Count()}, copy=("k",)), window),
               ("f", Filter(lambda t: True), None), ("again", Aggregate({"n": Count()}), window))
    notes = plan(g.freeze(), groups=2).notes
    assert "stateless (it snapshots nothing: state kept in plain attributes would start over in " \
           "each key group and micro-batch)" in notes["f"]
    assert "assuming the operators before it keep the key (checked as it runs" in notes["again"]
    assert "--mode driver" in notes["again"]


@pytest.mark.parametrize(("clause", "why"), [
    ("tumbling, count(2)", "unpartitioned window"),
    ("tumbling, count(2), partitioned, partitionCount(3)", "partition eviction counts across"),
])
def test_windows_that_need_every_partition_run_in_one_key_group(clause: str, why: str) -> None:
    p = plan(_graph(ListSource([]), ("agg", Aggregate({"n": Count()}), clause)).freeze(), groups=4)
    assert p.mode == "keyed" and p.groups == 1
    assert why in p.notes["agg"]


def test_every_refused_source_is_named_not_only_the_first(tmp_path: Any) -> None:
    # the message said "(and 1 more)" and hid the second
    g = Graph("two")
    a = g.source("broker", MQTTSource("127.0.0.1", 1, topics=["t/#"]))
    b = g.source("scan", DirectoryScan(str(tmp_path)))
    g.sink("sink", ListSink(), [a, b])
    with pytest.raises(TranslationError, match=r"operator 'broker': MQTTSource waits on a broker.*; "
                                               r"and operator 'scan': DirectoryScan without scans="):
        plan(g.freeze())


def test_untranslatable_constructs_are_refused_naming_the_operator(tmp_path: Any) -> None:
    g = Graph("mqtt")
    s = g.source("broker", MQTTSource("127.0.0.1", 1, topics=["t/#"]))
    g.sink("sink", ListSink(), [s])
    with pytest.raises(TranslationError, match=r"operator 'broker': MQTTSource waits on a broker"):
        plan(g.freeze())
    g = Graph("scan")
    s = g.source("scan", DirectoryScan(str(tmp_path)))
    g.sink("sink", ListSink(), [s])
    with pytest.raises(TranslationError, match=r"'scan': DirectoryScan without scans= polls forever"):
        plan(g.freeze())
    g = Graph("join")
    a = g.source("a", ListSource([]))
    b = g.source("b", ListSource([]))
    j = g.operator("j", Join(equality_lhs="k", equality_rhs="k"),
                   [a.window("sliding, count(2)"), b.window("sliding, count(2)")])
    g.sink("sink", ListSink(), [j])
    with pytest.raises(TranslationError, match=r"operator .j.: cannot run keyed: its port 0 window "):
        plan(g.freeze(), "keyed")
    assert plan(g.freeze()).mode == "driver"  # auto: the exact fallback


def test_spark_explain_needs_no_spark_and_refusals_exit_2(tmp_path: Any, capsys: Any) -> None:
    from riverbed.cli import main

    assert main(["spark", "explain", "examples/stock_moving_average.py"]) == 0
    out = capsys.readouterr().out
    assert "graph 'stocks': keyed mode" in out
    assert ("average [executors, stage 1]: keyed stage 1: groupBy(hash(sym) mod 2)"
            ".applyInPandasWithState") in out
    script = tmp_path / "loop.py"
    script.write_text(
        "from riverbed.graph import Graph\n"
        "from riverbed.operators import Functor, Union\n"
        "from riverbed.testing import ListSource\n"
        "g = Graph('loop')\n"
        "s = g.source('s', ListSource([]))\n"
        "f = g.operator('f', Union(), [s])\n"
        "h = g.operator('h', Functor(), [f])\n"
        "g.add_input('f', h.feedback())\n"
        "graph = g\n")
    assert main(["spark", "run", str(script)]) == 2
    assert "operator 'f': a feedback connection (a cycle) has no Spark translation" in capsys.readouterr().err


def test_operators_after_the_window_that_keep_its_key_share_its_groups() -> None:
    from riverbed.spark_bridge._keyed import Hosted, KeyGroupError, host_group
    from riverbed.spark_bridge._rows import KIND_TUPLE, encode, source_ord

    def graph(rekey: bool) -> Any:
        g = Graph("chain")
        s = g.source("src", ListSource([]))
        a = g.operator("a", Aggregate({"n": Count()}, copy=("k",)),
                       [s.window("tumbling, count(1), partitioned", partition_by="k")])
        f = g.operator("f", Functor(output={"k": (lambda t: t["k"] + 1) if rekey else (lambda t: t["k"])}),
                       [a])
        b = g.operator("b", Aggregate({"n": Sum("n")}, copy=("k",)),
                       [f.window("tumbling, count(2), partitioned", partition_by="k")])
        g.sink("sink", ListSink(), [b])
        return g.freeze()

    p = plan(graph(False), groups=2)
    assert (p.keyed, p.keyed_chain, p.driver) == ("a", ["f", "b"], ["sink"])
    rows = [(source_ord(0, 0, i), KIND_TUPLE, 0, 0, encode({"k": 2})) for i in range(4)]
    hosted = Hosted(graph(False), ("a", "f", "b"), ("src", 0), "k", (0, 1))
    out, _ = host_group(hosted, None, (0,), rows, None)  # k=2 is group 0
    assert [r[5] for r in out if r[1] == KIND_TUPLE] == [0, 0]  # two outputs of b, on its port 0
    rekeyed = Hosted(graph(True), ("a", "f", "b"), ("src", 0), "k", (0, 1))
    with pytest.raises(KeyGroupError, match=r"operator 'b': a tuple with k=3 reached it in another"):
        host_group(rekeyed, None, (0,), rows, None)


def test_a_source_that_also_feeds_other_operators_is_not_keyed() -> None:
    g = Graph("fork")
    s = g.source("src", ListSource([]))
    a = g.operator("agg", Aggregate({"n": Count()}), [s.window("tumbling, count(2), partitioned",
                                                               partition_by="k")])
    g.sink("sink", ListSink(), [a])
    g.sink("raw", ListSink(), [s])
    with pytest.raises(TranslationError, match=r"operator 'src': cannot run keyed: its stream also feeds"):
        plan(g.freeze(), "keyed")
    assert plan(g.freeze()).mode == "driver"


@pytest.mark.parametrize(("option", "message"), [
    (["--max-records", "-5"], "--max-records -5: expected a number of records >= 1"),
    (["--max-records", "0"], "--max-records 0: expected a number of records >= 1"),
    (["--trigger", "bogus"], "--trigger 'bogus': expected an interval such as '1 second'"),
    (["--trigger", "1second"], "--trigger '1second': expected an interval such as '1 second'"),
    (["--master", "foo"], "--master 'foo': expected local, local[N], local[*], yarn"),
])
def test_bad_spark_options_are_refused_before_spark_starts(option: list[str], message: str,
                                                          capsys: Any) -> None:
    """They hung (a negative --max-records), divided by zero, or failed in Spark with a trace."""
    from riverbed.cli import main

    assert main(["spark", "run", "examples/sensors.py", *option]) == 2
    assert message in capsys.readouterr().err


def test_a_spark_checkpoint_directory_belongs_to_one_job(tmp_path: Any) -> None:
    """Another job's directory restored that job's offsets: the run did nothing, exit 0."""
    from riverbed.spark_bridge._deploy import _claim
    from riverbed.spark_bridge._errors import TranslationError

    place = str(tmp_path / "ck")
    _claim(place, "sensors")
    _claim(place, "sensors")  # its own again: a restart
    with pytest.raises(TranslationError, match=r"the checkpoint '.*ck' was written by job 'sensors', "
                                               r"and this job is 'stocks'"):
        _claim(place, "stocks")


def test_a_checkpoint_is_resumed_only_by_the_plan_that_wrote_it(tmp_path: Any) -> None:
    """A restart with --mode driver on a keyed query's checkpoint crashed with a KeyError
    traceback (the driver read keyed state); the other way Spark refused with its own error."""
    from riverbed.spark_bridge._deploy import _same_plan

    place = str(tmp_path / "ck")
    frozen = _graph(ListSource([]), ("agg", Aggregate({"n": Count()}), "tumbling, count(2), partitioned")
                    ).freeze()
    keyed, driver = plan(frozen, "keyed", groups=2), plan(frozen, "driver", groups=2)
    _same_plan(place, keyed)
    _same_plan(place, keyed)  # its own again: a restart
    fewer = plan(frozen, "keyed", groups=2)
    fewer.driver = []  # a sink removed from the driver stage: its state is left, nothing breaks
    _same_plan(place, fewer)
    more = plan(frozen, "keyed", groups=2)
    more.driver = [*more.driver, "added"]  # one added there has no state to start from
    with pytest.raises(TranslationError, match="written by another plan"):
        _same_plan(place, more)
    with pytest.raises(TranslationError, match=r"written by another plan \(mode keyed; stage 1: .*\); "
                                               r"this deployment's is mode driver; driver: .*"
                                               r"the same --mode"):
        _same_plan(place, driver)


def test_another_jobs_or_plans_checkpoint_is_refused_before_spark_starts(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The refusal came after ~8 s of Spark starting up, and its log (a README review)."""
    from riverbed.spark_bridge import _session
    from riverbed.spark_bridge._cli import spark_command
    from riverbed.spark_bridge._deploy import _GROUPS_FILE, _claim, _same_plan, _write_record

    def no_spark(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("Spark was started")

    monkeypatch.setattr(_session, "spark_session", no_spark)
    place = str(tmp_path / "ck")
    _claim(place, "stocks")
    assert spark_command("run", "examples/sensors.py", checkpoint=place) == 2
    assert "was written by job 'stocks', and this job is 'sensors'" in capsys.readouterr().err
    other = str(tmp_path / "ck2")
    frozen = load_graph("examples/sensors.py", {})
    _same_plan(other, plan(frozen, "driver", groups=2))
    _claim(other, frozen.name)
    _write_record(other, _GROUPS_FILE, {"asked": 2})
    assert spark_command("run", "examples/sensors.py", checkpoint=other, mode="keyed") == 2
    assert "written by another plan (mode driver" in capsys.readouterr().err
    driver = str(tmp_path / "ck3")  # a driver-mode query records no key groups (a review)
    _same_plan(driver, plan(frozen, "driver", groups=2))
    _claim(driver, frozen.name)
    assert spark_command("run", "examples/sensors.py", checkpoint=driver, mode="keyed") == 2
    assert "written by another plan (mode driver" in capsys.readouterr().err


def test_after_a_stop_signal_only_a_jvm_gone_is_a_stop() -> None:
    """A signal to the process group ends Spark's JVM: what py4j then raises is a stop (exit 0);
    a query or driver stage that failed for its own reasons is still a failure (the first
    version took any failure after a signal for a stop, exit 0)."""
    from riverbed.spark_bridge._cli import _jvm_gone

    class Py4JNetworkError(Exception):
        pass

    wrapped = RuntimeError("An error occurred while calling o42.awaitTermination")
    wrapped.__cause__ = ConnectionRefusedError(111, "Connection refused")
    assert _jvm_gone(wrapped) and _jvm_gone(Py4JNetworkError("x")) and _jvm_gone(EOFError())
    assert _jvm_gone(RuntimeError("Answer from Java side is empty"))
    assert not _jvm_gone(RuntimeError("the driver stage failed: operator 'agg', input port 0: "
                                      "ZeroDivisionError: division by zero"))


def test_after_a_stop_signal_only_a_riverbed_error_is_a_failure() -> None:
    # Under load the group's SIGTERM reached processes Spark spawns for a batch: the query
    # failed ("Cannot run program chmod", Hadoop's "ExitCodeException exitCode=143") and the
    # stop ended with exit 1. A failure of the graph's own still fails.
    from riverbed.spark_bridge._cli import _riverbed_failure

    for spark_side in ('[STREAM_FAILED] Query terminated with exception: Cannot run program '
                       '"chmod": error=0, Failed to exec spawn helper: pid: 21570, signal: 15',
                       "[STREAM_FAILED] Query terminated with exception:  SQLSTATE: XXKST"):
        assert not _riverbed_failure(RuntimeError(spark_side))
    assert _riverbed_failure(RuntimeError(
        "Traceback (most recent call last):\nriverbed.core._errors.OperatorError: operator "
        "'agg', input port 0: ZeroDivisionError: division by zero"))


def test_a_checkpoint_routed_before_equal_keys_went_together_is_refused_where_keys_moved(
        tmp_path: Any) -> None:
    """Bringing 3 and 3.0 (True and 1, -0.0 and 0.0) into one key group moved float and bool
    keys to other groups: an older checkpoint's state for them would be in the wrong group. Int
    and string keys did not move: their checkpoints go on (and are marked)."""
    import json

    from riverbed.graph import Schema
    from riverbed.spark_bridge._deploy import _GROUPS_FILE, ROUTING, _key_groups, _routing_unchanged

    def frozen(key_type: str) -> Any:
        g = Graph("g")
        s = g.source("src", ListSource([]), schema=Schema(k=key_type, v="int64"))
        agg = g.operator("agg", Aggregate({"n": Count()}),
                         [s.window("tumbling, count(2), partitioned", partition_by="k")])
        g.sink("sink", ListSink(), [agg])
        return g.freeze()

    old = {"asked": 2, "groups": 2, "labels": [0, 1]}  # as riverbed wrote it before (no routing)
    for key_type, moved in (("int64", False), ("rstring", False), ("float64", True), ("boolean", True)):
        graph = frozen(key_type)
        unchanged = _routing_unchanged(graph, plan(graph, "keyed", groups=2))
        assert unchanged is not moved
        place = tmp_path / key_type
        place.mkdir()
        if moved:
            with pytest.raises(TranslationError, match="give it a new checkpoint directory"):
                _key_groups(str(place), dict(old), 2, 2, list, unchanged=unchanged)
        else:
            assert _key_groups(str(place), dict(old), 2, 2, list, unchanged=unchanged) == [0, 1]
            assert json.loads((place / _GROUPS_FILE).read_text())["routing"] == ROUTING
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert _key_groups(str(fresh), None, 2, 2, lambda: [1, 0], unchanged=False) == [1, 0]
    assert json.loads((fresh / _GROUPS_FILE).read_text())["routing"] == ROUTING


def test_a_failed_querys_message_is_the_riverbed_error_a_task_raised() -> None:
    """Spark wraps a task's Python traceback in its own message and stack trace: the command
    says what ``riverbed run`` says (operator, port, tuple), not Spark's first line."""
    from riverbed.spark_bridge._cli import failure_of

    spark = ("[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: Job aborted.\n"
             "Traceback (most recent call last):\n  File \"x.py\", line 3, in f\n"
             "riverbed.core._errors.OperatorError: operator 'agg', input port 0: "
             "ZeroDivisionError: division by zero on tuple {'v': 0}\n\tat org.apache.spark...")
    assert failure_of(spark) == ("operator 'agg', input port 0: ZeroDivisionError: division by "
                                 "zero on tuple {'v': 0}")
    assert failure_of("[INVALID] something Spark says\nat ...") == "[INVALID] something Spark says"
    # (Spark's ParseException puts its text on the next line: "operator 'out': ParseException: ")
    assert failure_of("riverbed.core._errors.OperatorError: operator 'out': ParseException: \n"
                      "[PARSE_SYNTAX_ERROR] Syntax error at or near 'x'.\nat ...") == (
        "operator 'out': ParseException: [PARSE_SYNTAX_ERROR] Syntax error at or near 'x'.")
    assert failure_of("Py4JJavaError:\n\n  Failed to find the data source: parqet\n") == (
        "Py4JJavaError: Failed to find the data source: parqet")
    # A source's failure comes as a JobError, its reasons on the lines after it: the command
    # printed "job 'bad' failed:" and nothing more (a review).
    source = ("Traceback (most recent call last):\n  File \"x.py\", line 3, in f\n"
              "riverbed.core._errors.JobError: job 'bad' failed:\n"
              "  operator 'read': FileFormatError: bad.csv, line 1501: 'oops' is not an integer\n"
              "  operator 'other': RuntimeError: source failed at 700\n\tat org.apache.spark...")
    assert failure_of(source) == ("job 'bad' failed:\n"
                                  "  operator 'read': FileFormatError: bad.csv, line 1501: 'oops' is "
                                  "not an integer\n  operator 'other': RuntimeError: source failed at 700")
    assert failure_of("riverbed.operators._file_reader.FileFormatError: bad.csv, line 2: x\n\tat y") \
        == "bad.csv, line 2: x"


def test_a_ctrl_c_while_spark_starts_is_one_line(monkeypatch: Any, capsys: Any) -> None:
    """It printed Python's KeyboardInterrupt traceback from inside the session start."""
    from riverbed.spark_bridge import _session
    from riverbed.spark_bridge._cli import spark_command

    def interrupted(master: str) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(_session, "spark_session", interrupted)
    assert spark_command("run", "examples/sensors.py") == 130
    err = capsys.readouterr().err
    assert err == "riverbed spark: interrupted while Spark started; nothing was deployed\n"


def test_a_java_error_whose_text_the_gone_jvm_cannot_give_is_a_stop() -> None:
    # py4j's Java errors ask the JVM for their text: with the JVM gone, str() raised
    # ConnectionRefusedError out of the stop's own handler (a traceback, exit 1).
    from riverbed.spark_bridge._cli import _jvm_gone, _riverbed_failure, _text

    class Py4JJavaError(Exception):
        def __str__(self) -> str:
            raise ConnectionRefusedError(111, "Connection refused")

    gone = Py4JJavaError()
    gone.__context__ = ConnectionRefusedError(111, "Connection refused")
    assert "Py4JJavaError" in _text(gone)
    assert _jvm_gone(gone) and not _riverbed_failure(gone)


def test_after_a_stop_signal_a_failure_of_the_graph_still_fails() -> None:
    # A driver-stage failure surfacing from the query's stop (RuntimeError from an
    # OperatorError, raised in this process) was read as Spark's side of the signal: exit 0.
    from riverbed.core import OperatorError
    from riverbed.spark_bridge._cli import _from_spark, _riverbed_failure

    failed = RuntimeError("the driver stage failed: operator 'sink', input port 0: ValueError")
    failed.__cause__ = OperatorError("sink", 0, {"a": 1}, ValueError("disk full"))
    assert _riverbed_failure(failed) and not _from_spark(failed)

    StreamingQueryException = type("StreamingQueryException", (Exception,),
                                   {"__module__": "pyspark.errors.exceptions.captured"})
    spark_side = StreamingQueryException("Query terminated with exception:  SQLSTATE: XXKST")
    assert _from_spark(spark_side) and not _riverbed_failure(spark_side)


def test_a_checkpoint_keyed_in_more_groups_than_a_one_group_stage_now_takes_says_why(
        tmp_path: Any) -> None:
    """A partitioned timeInterval window with discardAge is one key group since stop 43 (E18):
    the refusal of a checkpoint an older riverbed keyed in two said only '2 key groups; this
    deployment would use 1'."""
    from riverbed.graph import Graph, Schema
    from riverbed.operators import Aggregate, Count
    from riverbed.spark_bridge import TranslationError, plan
    from riverbed.spark_bridge._deploy import _key_groups, _one_group_why
    from riverbed.testing import ListSource

    g = Graph("late")
    src = g.source("src", ListSource([]), schema=Schema(k="int64", ts="int64"), event_time="ts")
    g.operator("agg", Aggregate({"n": Count()}), [src.window(
        "timeInterval, intervalDuration(1), discardAge(1), partitioned", partition_by="k")])
    p = plan(g.freeze(), "keyed", groups=2)
    assert p.groups == 1
    saved = {"asked": 2, "groups": 2, "labels": [0, 1], "routing": 2}
    with pytest.raises(TranslationError, match=r"would use 1 \('agg': keyed stage 1: .*E18"):
        _key_groups(str(tmp_path), saved, 2, 1, list, why=_one_group_why(p))
