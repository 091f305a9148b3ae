"""FileSource, FileSink and DirectoryScan: formats, punctuation at file boundaries, bad records,
rotation, replay from an offset, exactly-once (transactional) output, and the example graph.

Graphs run in the real runtime on the virtual clock; files live in pytest's tmp_path. A few
tests drive one operator's handlers by hand (with a small recording context) where they play
the runtime's checkpoint protocol step by step: drain() and snapshot() at a barrier,
on_checkpoint_committed(id) after the store commit, restore(state) in a restarted instance.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from riverbed.checkpoint import MemoryStore
from riverbed.graph import Graph, Operator, Punct, Schema
from riverbed.operators._files import (
    DirectoryScan,
    FileFormatError,
    FileSink,
    FileSinkError,
    FileSource,
    FileSourceError,
    FileSourceOfFile,
    FileSourceWithInput,
    parse_timestamp,
)
from riverbed.operators._params import OperatorParameterError
from riverbed.run import load_graph
from riverbed.runtime import Job, JobError, VirtualClock, run_graph
from riverbed.testing import ListSink, ListSource, at, run_operator, run_until_crash

S = 1_000_000_000
W, F = Punct.WINDOW, Punct.FINAL
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "per_file_totals.py"


def write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode("utf-8"))
    return path


def read_source(source: FileSourceOfFile, schema: Schema | None = None) -> list[Any]:
    """Run a file-form FileSource into a ListSink; its items (tuples and marks)."""
    g = Graph("read")
    stream = g.source("src", source, schema=schema)
    sink = ListSink()
    g.sink("out", sink, [stream])
    run_graph(g, clock=VirtualClock())
    return sink.items


def ts(year: int, month: int, day: int, hour: int = 0, minute: int = 0, ns: int = 0) -> int:
    return int(datetime(year, month, day, hour, minute, tzinfo=UTC).timestamp()) * S + ns


# ------------------------------------------------------------------------------------ formats

ROW = Schema(name="rstring", n="int64", x="float64", ok="boolean", at="timestamp",
             xs="list<int64>", m="map<rstring,float64>", tags="set<rstring>")


def test_csv_reads_every_type_with_header_comments_quotes_and_a_mark_after_the_file(
        tmp_path: Path) -> None:
    f = write(tmp_path / "rows.csv",
              "name,n,x,ok,at,xs,m,tags\n"
              "# a comment line between records\n"
              '"Smith, J",40,1.5,true,2024-05-01T12:30:00.25Z,"[1,2]","{""a"":1.5}","[""b""]"\n'
              "\n"
              'Mary,-3,-inf,FALSE,1714566600000000007,[],{},[]\n'
              '"two\nlines",0,2,true,2024-05-01T14:30:00+02:00,[3],"{""k"":2}",[]\n')
    items = read_source(FileSource(file=str(f), has_header=True), ROW)
    assert items == [
        {"name": "Smith, J", "n": 40, "x": 1.5, "ok": True, "at": ts(2024, 5, 1, 12, 30, ns=250_000_000),
         "xs": [1, 2], "m": {"a": 1.5}, "tags": {"b"}},
        {"name": "Mary", "n": -3, "x": float("-inf"), "ok": False, "at": 1714566600000000007,
         "xs": [], "m": {}, "tags": set()},
        {"name": "two\nlines", "n": 0, "x": 2.0, "ok": True, "at": ts(2024, 5, 1, 12, 30),
         "xs": [3], "m": {"k": 2.0}, "tags": set()},
        W, F,
    ]


def test_csv_separator_default_tuple_and_extra_values(tmp_path: Path) -> None:
    f = write(tmp_path / "p.csv", "a|1|x\n|| \nb|2|y|extra\n")
    schema = Schema(s="rstring", n="int64", t="rstring")
    items = read_source(FileSource(file=str(f), separator="|", default_tuple={"s": "none", "n": -1},
                                   ignore_extra_csv_values=True), schema)
    assert items == [{"s": "a", "n": 1, "t": "x"}, {"s": "none", "n": -1, "t": " "},
                     {"s": "b", "n": 2, "t": "y"}, W, F]


def test_the_schema_comes_from_the_graph_or_the_parameter_and_csv_needs_one(tmp_path: Path) -> None:
    f = write(tmp_path / "a.csv", "1\n")
    assert read_source(FileSource(file=str(f), schema={"n": "int64"})) == [{"n": 1}, W, F]
    with pytest.raises(JobError, match="the csv format needs a schema"):
        read_source(FileSource(file=str(f)))
    with pytest.raises(JobError, match="differs from the schema the graph declares"):
        read_source(FileSource(file=str(f), schema={"n": "int64"}), Schema(m="int64"))


def test_json_lines_with_and_without_a_schema(tmp_path: Path) -> None:
    f = write(tmp_path / "e.jsonl",
              '{"id": 1, "at": "2024-05-01T12:30:00Z", "tags": ["a", "b"], "m": {"7": true}}\n'
              "\n"
              '{"id": 2, "at": 5, "tags": [], "m": {}}\n')
    schema = Schema(id="int64", at="timestamp", tags="set<rstring>", m="map<int32,boolean>")
    assert read_source(FileSource(file=str(f), format="json"), schema) == [
        {"id": 1, "at": ts(2024, 5, 1, 12, 30), "tags": {"a", "b"}, "m": {7: True}},
        {"id": 2, "at": 5, "tags": set(), "m": {}}, W, F]
    assert read_source(FileSource(file=str(f), format="json")) == [
        {"id": 1, "at": "2024-05-01T12:30:00Z", "tags": ["a", "b"], "m": {"7": True}},
        {"id": 2, "at": 5, "tags": [], "m": {}}, W, F]


def test_line_format_keeps_empty_lines_and_takes_the_eol_marker(tmp_path: Path) -> None:
    f = tmp_path / "l.txt"
    f.write_bytes(b"one\r\n\r\nthree\nstill three\r\nlast")
    assert read_source(FileSource(file=str(f), format="line", eol_marker="\r\n")) == [
        {"line": "one"}, {"line": ""}, {"line": "three\nstill three"}, {"line": "last"}, W, F]
    assert read_source(FileSource(file=str(f), format="line", file_name_attribute="src",
                                  tuple_number_attribute="no"),
                       Schema(src="rstring", text="rstring", no="int64"))[:2] == [
        {"src": str(f), "text": "one\r", "no": 0}, {"src": str(f), "text": "\r", "no": 1}]


def test_parse_timestamp_accepts_integer_ns_and_iso_8601() -> None:
    assert parse_timestamp("123") == 123
    assert parse_timestamp("1970-01-01T00:00:01.000000001Z") == S + 1
    assert parse_timestamp("1970-01-01 01:00:00+01:00") == 0
    assert parse_timestamp("1970-01-01T00:00:00-0030") == 1800 * S
    assert parse_timestamp("1970-01-02") == 86400 * S
    assert parse_timestamp("1969-12-31T23:59:59.5") == -S // 2
    for bad in ("12.5", "2024-13-01", "yesterday"):
        with pytest.raises(ValueError, match="timestamp"):
            parse_timestamp(bad)


def test_what_file_sink_writes_file_source_reads_back_unchanged(tmp_path: Path) -> None:
    schema = Schema(name="rstring", n="uint8", x="float64", ok="boolean", at="timestamp",
                    d="decimal64", b="blob", xs="list<list<int64>>", m="map<int64,rstring>",
                    tags="set<rstring>")
    rows = [{"name": 'say "hi", then\nleave', "n": 255, "x": 0.1, "ok": False, "at": -5,
             "d": Decimal("1.25"), "b": b"\x00\xff", "xs": [[1], []], "m": {3: "c,d"},
             "tags": {"z", "a"}},
            {"name": "", "n": 0, "x": 1e300, "ok": True, "at": 7, "d": Decimal(0), "b": b"",
             "xs": [], "m": {}, "tags": set()}]
    for fmt in ("csv", "json"):
        out = tmp_path / f"rt.{fmt}"
        g = Graph("write")
        g.sink("sink", FileSink(str(out), format=fmt), [g.source("src", ListSource(rows), schema=schema)])
        run_graph(g, clock=VirtualClock())
        default = {"name": "<empty>"} if fmt == "csv" else None
        back = read_source(FileSource(file=str(out), format=fmt, default_tuple=default), schema)
        expected = [dict(rows[0]), {**rows[1], "name": "<empty>"} if fmt == "csv" else rows[1]]
        assert back == [*expected, W, F], fmt


# ------------------------------------------------------------------------------------ bad records


def test_strict_parsing_stops_the_job_naming_the_file_and_the_line(tmp_path: Path) -> None:
    f = write(tmp_path / "bad.csv", "1,a\n2,b\n\nthree,c\n4,d\n")
    with pytest.raises(JobError) as info:
        read_source(FileSource(file=str(f)), Schema(n="int64", s="rstring"))
    message = str(info.value)
    cause = info.value.errors[0].cause  # type: ignore[attr-defined]
    assert isinstance(cause, FileFormatError) and (cause.line, cause.path) == (4, str(f))
    assert "bad.csv, line 4: attribute 'n': 'three' is not an integer (int64)" in message
    assert "operator 'src'" in message


def test_permissive_parsing_skips_counts_and_keeps_going(tmp_path: Path) -> None:
    f = write(tmp_path / "bad.csv", '1,a\nx,b\n2\n"unclosed,c\n')
    src = FileSource(file=str(f), parsing="permissive")
    assert read_source(src, Schema(n="int64", s="rstring")) == [{"n": 1, "s": "a"}, W, F]
    assert src.invalid_tuples == 3
    j = write(tmp_path / "bad.jsonl", '{"n": 1}\n{"n": "one"}\n[1]\n{"n": 2, "extra": 0}\n{"n": 3}\n')
    src = FileSource(file=str(j), format="json", parsing="permissive")
    assert read_source(src, Schema(n="int64")) == [{"n": 1}, {"n": 3}, W, F]
    assert src.invalid_tuples == 3


def test_input_port_form_routes_a_strict_error_to_the_error_port_and_reads_the_next_file(
        tmp_path: Path) -> None:
    good = write(tmp_path / "good.csv", "1\n2\n")
    bad = write(tmp_path / "bad.csv", "3\nfour\n5\n")
    g = Graph("files")
    names = g.source("names", ListSource([{"path": str(bad)}, {"path": str(good)}]))
    data, errors = g.operator("read", FileSource(), [names], [Schema(n="int64")], error_port=True)
    out, err = ListSink(), ListSink()
    g.sink("out", out, [data])
    g.sink("err", err, [errors])
    run_graph(g, clock=VirtualClock())
    assert out.items == [{"n": 3}, W, {"n": 1}, {"n": 2}, W, F]
    [routed] = err.tuples
    assert routed["tuple"] == {"path": str(bad)}
    assert "bad.csv, line 2: attribute 'n': 'four' is not an integer" in routed["error"]


def test_input_port_form_permissive_sends_bad_lines_and_file_status_to_their_ports(
        tmp_path: Path) -> None:
    a = write(tmp_path / "a.csv", "1\nfour\n5\n")
    missing = tmp_path / "missing.csv"
    g = Graph("files")
    names = g.source("names", ListSource([{"f": str(a), "other": 0}, {"f": str(missing), "other": 1}]))
    src = FileSource(parsing="permissive", file_attribute="f", bad_line_port=1, status_port=2,
                     ignore_open_errors=True)
    data, bad, status = g.operator("read", src, [names], [Schema(n="int64"), None, None])
    sinks = [ListSink() for _ in range(3)]
    for stream, sink, name in zip((data, bad, status), sinks, ("out", "bad", "status"), strict=True):
        g.sink(name, sink, [stream])
    run_graph(g, clock=VirtualClock())
    assert sinks[0].items == [{"n": 1}, {"n": 5}, W, F]
    assert sinks[1].items == [{"file": str(a), "line": 2, "text": "four",
                               "error": "attribute 'n': 'four' is not an integer (int64)"}, F]
    assert sinks[2].items == [{"file": str(a), "error": 0}, {"file": str(missing), "error": 2}, F]
    assert src.invalid_tuples == 1


def test_an_unopenable_file_stops_the_job_unless_open_errors_are_ignored(tmp_path: Path) -> None:
    with pytest.raises(JobError, match=r"cannot open '.*nope\.csv': No such file"):
        read_source(FileSource(file=str(tmp_path / "nope.csv")), Schema(n="int64"))
    src = FileSource(file=str(tmp_path / "nope.csv"), ignore_open_errors=True)
    assert read_source(src, Schema(n="int64")) == [F]


# ------------------------------------------------------------------------------------ FileSource


def test_input_port_form_marks_each_file_and_ignores_incoming_marks(tmp_path: Path) -> None:
    a = write(tmp_path / "a.txt", "a1\na2\n")
    b = write(tmp_path / "b.txt", "")
    out = run_operator(FileSource(format="line"), [{"p": str(a)}, W, {"p": str(b)}, {"p": str(a)}])
    assert out.items == [{"line": "a1"}, {"line": "a2"}, W, W, {"line": "a1"}, {"line": "a2"}, W, F]


def test_files_are_deleted_or_moved_after_they_were_read(tmp_path: Path) -> None:
    a = write(tmp_path / "a.txt", "x\n")
    assert read_source(FileSource(file=str(a), format="line", delete_file=True)) == [{"line": "x"}, W, F]
    assert not a.exists()
    done = tmp_path / "done"
    done.mkdir()
    b = write(tmp_path / "b.txt", "y\n")
    write(done / "b.txt", "old")
    out = run_operator(FileSource(format="line", move_file_to_directory=str(done)), [{"p": str(b)}])
    assert out.items == [{"line": "y"}, W, F]
    assert not b.exists() and (done / "b.txt").read_text() == "y\n"


def test_parameters_are_checked_and_spl_spellings_accepted(tmp_path: Path) -> None:
    assert isinstance(FileSource(file="x"), FileSourceOfFile)
    assert isinstance(FileSource(), FileSourceWithInput)
    assert FileSource(file="x", hasHeaderLine=3).has_header == 3
    assert FileSource(file="x", ignoreExtraCSVValues=True).ignore_extra_csv_values
    cases: list[tuple[Callable[[], Any], str]] = [
        (lambda: FileSource(file="x", format="xml"), "format='xml': expected one of csv, json, line"),
        (lambda: FileSource(file="x", parsing="fast"), "expected 'strict' or 'permissive'"),
        (lambda: FileSource(hot_file=True), "hot_file needs the file= form"),
        (lambda: FileSource(file="x", status_port=1), "status_port needs the input-port form"),
        (lambda: FileSource(file="x", hot_file=True, delete_file=True), "cannot be deleted or moved"),
        (lambda: FileSource(file="x", format="json", has_header=True), "has_header applies to the csv"),
        (lambda: FileSource(file="x", headerLines=1), "unknown parameter .headerLines."),
        (lambda: FileSource(file="x", has_header=True, hasHeaderLine=True), "given twice"),
        (lambda: FileSource(bad_line_port=0), "expected an output port number >= 1"),
        (lambda: FileSource(file="x", encoding="nope"), "not a known text encoding"),
    ]
    for make, message in cases:
        with pytest.raises(OperatorParameterError, match=message):
            make()
    with pytest.raises(JobError, match="the line format needs exactly one rstring attribute"):
        read_source(FileSource(file="x", format="line"), Schema(a="rstring", b="rstring"))
    with pytest.raises(JobError, match="is not an existing directory"):
        read_source(FileSource(file="x", format="line", move_file_to_directory=str(tmp_path / "no")))


# ------------------------------------------------------------------------------------ replay


class Recorder(Operator):
    """A sink whose output is its state, so a restore rewinds it to the checkpoint."""

    def __init__(self) -> None:
        self.rows: list[Any] = []

    def on_tuple(self, tup: Any, port: int) -> None:
        self.rows.append(tup)

    def on_punct(self, punct: Punct, port: int) -> None:
        self.rows.append(punct.value)

    def snapshot(self) -> Any:
        return list(self.rows)

    def restore(self, state: Any) -> None:
        self.rows = list(state)



def paced_file(path: Path, n: int) -> Path:
    """A csv file with a delay field: record i waits 0.1 s, so n records take n/10 s."""
    return write(path, "# delay, seq, text\n" + "".join(f'0.1,{i},"row, {i}"\n' for i in range(n)))


PACED = Schema(seq="int64", text="rstring")


def test_has_delay_field_paces_the_records_on_the_clock(tmp_path: Path) -> None:
    f = paced_file(tmp_path / "p.csv", 3)
    g = Graph("paced")
    sink = ListSink()
    g.sink("out", sink, [g.source("src", FileSource(file=str(f), has_delay_field=True,
                                                    init_delay=1.0), schema=PACED)])
    run_graph(g, clock=VirtualClock())
    assert sink.items == [{"seq": 0, "text": "row, 0"}, {"seq": 1, "text": "row, 1"},
                          {"seq": 2, "text": "row, 2"}, W, F]
    assert sink.times == [round(1.1 * S), round(1.2 * S), round(1.3 * S), round(1.3 * S), round(1.3 * S)]


def test_restore_mid_file_continues_with_the_next_record(tmp_path: Path) -> None:
    f = write(tmp_path / "r.csv", "h\n1\n2\n# c\n3\n4\n")
    first = FileSource(file=str(f), has_header=True)
    # Take the state as the runtime would after the second record was submitted.
    items = read_source(first, Schema(n="int64"))
    assert items == [{"n": 1}, {"n": 2}, {"n": 3}, {"n": 4}, W, F]
    assert first.snapshot() == {"file": str(f), "offset": len(b"h\n1\n2\n# c\n3\n4\n"), "line": 6,
                                "tuples": 4, "done": True, "before": b"h\n1\n2\n# c\n3\n4\n",
                                "began": 0, "paced_at": None}
    resumed = FileSource(file=str(f), has_header=True)
    resumed.restore({"file": str(f), "offset": len(b"h\n1\n2\n"), "line": 3, "tuples": 2, "done": False})
    assert read_source(resumed, Schema(n="int64")) == [{"n": 3}, {"n": 4}, W, F]
    finished = FileSource(file=str(f), has_header=True)
    finished.restore(first.snapshot())
    assert read_source(finished, Schema(n="int64")) == [F]
    with pytest.raises(FileSourceError, match="the checkpoint is of file"):
        FileSource(file="other.csv").restore(first.snapshot())


def test_a_file_replaced_under_its_name_is_not_resumed_at_the_old_offset(tmp_path: Path) -> None:
    """A daily file replaced under one name was resumed at the old byte offset: 10,642 records
    of the new file skipped and one parsed from the tail of a line, exit 0 (a review). The
    checkpoint keeps the bytes before its offset; a file that no longer holds them is refused,
    one that grew (appended to) resumes, and a tailed (hot) file starts the new one over."""
    f = write(tmp_path / "day.csv", "".join(f"{i},a\n" for i in range(100)))
    first = FileSource(file=str(f))
    read_source(first, Schema(n="int64", t="rstring"))
    state = first.snapshot()
    assert len(state["before"]) == 64 and state["offset"] == f.stat().st_size
    row = Schema(n="int64", t="rstring")
    with open(f, "a") as grown:
        grown.write("100,a\n")  # appended to: the same file, resumed after what was read
    state["done"] = False
    resumed = FileSource(file=str(f))
    resumed.restore(state)
    assert read_source(resumed, row) == [{"n": 100, "t": "a"}, W, F]
    write(f, "".join(f"{1_000_000 + i},b\n" for i in range(200)))  # another file, same name
    replaced = FileSource(file=str(f))
    with pytest.raises(FileSourceError, match=r"cannot resume .*day.csv. at byte 490: the file is "
                                              r"not the one the checkpoint read"):
        replaced.restore(state)  # (a restart is refused before it runs: test_restore_refused)
    tailed = FileSource(file=str(f), hot_file=True)
    tailed.restore(state)
    g = Graph("tail")
    sink = ListSink()
    g.sink("out", sink, [g.source("src", tailed, schema=row)])
    assert run_until_crash(Job(g, clock=VirtualClock()), None, [(2.5, lambda job: job.stop())])
    rows = [t for t in sink.items if isinstance(t, dict)]
    assert sink.items[0] == W and len(rows) == 200 and rows[0] == {"n": 1_000_000, "t": "b"}
    older = dict(state)
    del older["before"]  # a checkpoint of an older riverbed: nothing to check, resumed as before
    FileSource(file=str(f)).restore(older)


def build_replay(src_path: Path, out: Operator) -> Graph:
    g = Graph("replay")
    rows = g.source("src", FileSource(file=str(src_path), has_delay_field=True), schema=PACED)
    g.sink("out", out, [rows])
    return g


@pytest.mark.parametrize("crash", [3, 7, 15, 22, 31, 38])
def test_a_crash_then_restart_neither_loses_nor_repeats_a_record(tmp_path: Path, crash: int) -> None:
    f = paced_file(tmp_path / "in.csv", 40)
    reference = Recorder()
    assert run_until_crash(Job(build_replay(f, reference), clock=VirtualClock()), None)
    store = MemoryStore()
    first = Recorder()
    job = Job(build_replay(f, first), clock=VirtualClock(), checkpoints=store, checkpoint_period=0.25)
    assert not run_until_crash(job, crash * S // 10 + S // 20)
    restored = store.latest_good()
    assert restored is not None and 0 < restored.states["src"]["operator"]["offset"] < f.stat().st_size
    second = Recorder()
    restart = Job(build_replay(f, second), clock=VirtualClock(), checkpoints=store, checkpoint_period=0.25)
    assert run_until_crash(restart, None)
    assert second.rows == reference.rows


def test_a_hot_file_is_tailed_restarted_when_it_shrinks_and_marked_at_stop(tmp_path: Path) -> None:
    f = write(tmp_path / "hot.txt", "a\nb\n")
    g = Graph("hot")
    sink = ListSink()
    g.sink("out", sink, [g.source("src", FileSource(file=str(f), format="line", hot_file=True))])

    def append(text: str) -> Callable[[Job], None]:
        def act(job: Job) -> None:
            with f.open("ab") as h:
                h.write(text.encode())
        return act

    actions = [(2.5, append("c\npart")), (4.5, append("ial\n")), (6.5, lambda job: write(f, "new\n")),
               (8.5, lambda job: job.stop())]
    assert run_until_crash(Job(g, clock=VirtualClock()), None, actions)
    lines = [x if isinstance(x, Punct) else x["line"] for x in sink.items]
    assert lines == ["a", "b", "c", "partial", W, "new", W, F]
    assert sink.times == [0, 0, 3 * S, 5 * S, 7 * S, 7 * S, round(8.5 * S), round(8.5 * S)]


# ------------------------------------------------------------------------------------ FileSink


def sink_graph(sink: FileSink, items: list[Any], *, notify: bool = False) -> ListSink:
    g = Graph("sink")
    src = g.source("src", ListSource(items))
    seen = ListSink()
    if notify:
        g.sink("closed", seen, [g.operator("fs", sink, [src], [None])])
    else:
        g.sink("fs", sink, [src])
    run_graph(g, clock=VirtualClock())
    return seen


def test_close_mode_punct_rotates_on_marks_writes_them_and_reports_closed_files(tmp_path: Path) -> None:
    name = str(tmp_path / "out-{id}.csv")
    items = [{"a": 1, "s": "x"}, W, W, {"a": 2, "s": 'q"q'}, {"a": 3, "s": "z"}, W]
    closed = sink_graph(FileSink(name, close_mode="punct", write_punctuations=True, closed_files_port=0),
                        items, notify=True)
    assert (tmp_path / "out-0.csv").read_text() == '1,"x"\nPunctuation received: WindowMarker\n'
    assert (tmp_path / "out-1.csv").read_text() == \
        '2,"q""q"\n3,"z"\nPunctuation received: WindowMarker\n'
    assert sorted(os.listdir(tmp_path)) == ["out-0.csv", "out-1.csv"]
    assert closed.items == [{"file": str(tmp_path / "out-0.csv")}, {"file": str(tmp_path / "out-1.csv")}, F]


def test_close_mode_count_size_and_time(tmp_path: Path) -> None:
    rows = [{"v": i} for i in range(5)]
    sink_graph(FileSink(str(tmp_path / "c{id}.csv"), close_mode="count", tuples_per_file=2), rows)
    assert [(tmp_path / f"c{i}.csv").read_text() for i in range(3)] == ["0\n1\n", "2\n3\n", "4\n"]
    sink_graph(FileSink(str(tmp_path / "s{id}.csv"), close_mode="size", bytesPerFile=5), rows)
    assert [(tmp_path / f"s{i}.csv").read_text() for i in range(2)] == ["0\n1\n2\n", "3\n4\n"]
    timed = [{"v": 0}, at(1.0), {"v": 1}, at(2.0), {"v": 2}, at(2.5), {"v": 3}, at(9.0), W]
    sink_graph(FileSink(str(tmp_path / "t{id}.csv"), close_mode="time", time_per_file=2.0,
                        write_punctuations=True), timed)
    assert [(tmp_path / f"t{i}.csv").read_text() for i in range(2)] == ["0\n1\n", "2\n3\n"]
    assert not (tmp_path / "t2.csv").exists()  # the late mark found no open file: dropped


def test_formats_quoting_suppress_append_and_an_empty_input(tmp_path: Path) -> None:
    rows = [{"k": "a,b", "v": 1.5, "ok": True, "xs": [1, 2], "drop": 0}]
    sink_graph(FileSink(str(tmp_path / "q.csv"), quote_strings=False, separator=";", suppress=["drop"]),
               rows)
    assert (tmp_path / "q.csv").read_text() == 'a,b;1.5;true;[1,2]\n'
    sink_graph(FileSink(str(tmp_path / "q.jsonl"), format="json"), rows)
    assert (tmp_path / "q.jsonl").read_text() == '{"k":"a,b","v":1.5,"ok":true,"xs":[1,2],"drop":0}\n'
    write(tmp_path / "l.txt", "old\n")
    sink_graph(FileSink(str(tmp_path / "l.txt"), format="line", append=True, eol_marker="\r\n"),
               [{"line": "new"}])
    assert (tmp_path / "l.txt").read_bytes() == b"old\nnew\r\n"
    sink_graph(FileSink(str(tmp_path / "empty.csv")), [])
    assert (tmp_path / "empty.csv").read_text() == ""
    with pytest.raises(JobError, match="the line format writes tuples of one rstring attribute"):
        sink_graph(FileSink(str(tmp_path / "x.txt"), format="line"), [{"a": "1", "b": "2"}])


def test_csv_columns_follow_the_declared_schema_so_the_file_reads_back(tmp_path: Path) -> None:
    # An Aggregate builds its tuples with the copied attributes first; SPL writes a tuple in
    # its type's order, and a file in dict order failed to read back with the same schema.
    from riverbed.operators import Aggregate, Average, Count
    out = Schema(sensor="rstring", avg="float64", n="int64", seq="int64")
    g = Graph("order")
    src = g.source("src", ListSource([{"sensor": "s0", "temp": float(i), "seq": i} for i in range(4)]),
                   schema=Schema(sensor="rstring", temp="float64", seq="int64"))
    agg = g.operator("agg", Aggregate({"avg": Average("temp"), "n": Count()}, copy=("sensor", "seq")),
                     [src.window("tumbling, count(4)")], [out])
    g.sink("file", FileSink(str(tmp_path / "o.csv"), suppress=["seq"]), [agg])
    g.sink("all", FileSink(str(tmp_path / "all.csv")), [agg])
    run_graph(g, clock=VirtualClock())
    assert (tmp_path / "o.csv").read_text() == '"s0",1.5,4\n'
    assert (tmp_path / "all.csv").read_text() == '"s0",1.5,4,3\n'
    back = read_source(FileSource(str(tmp_path / "all.csv")), out)
    assert back == [{"sensor": "s0", "avg": 1.5, "n": 4, "seq": 3}, W, F]


def test_sink_parameters_are_checked(tmp_path: Path) -> None:
    cases: list[tuple[Callable[[], Any], str]] = [
        (lambda: FileSink("f", close_mode="dynamic"),  # type: ignore[arg-type]
         "close_mode='dynamic': expected one of never"),
        (lambda: FileSink("f", close_mode="count"), "needs tuples_per_file > 0"),
        (lambda: FileSink("f", tuples_per_file=3), "tuples_per_file applies to close_mode='count'"),
        (lambda: FileSink("f-{date}"), "unknown modifier"),
        (lambda: FileSink("f", format="json", write_punctuations=True), "csv and line formats"),
        (lambda: FileSink("f", close_mode="punct", transactional=True), "needs {id} in the file name"),
        (lambda: FileSink("f", closeMode="never", flushOnPunctuation=False, quoteStrings=True,
                          bogus=1), "unknown parameter 'bogus'"),
    ]
    for make, message in cases:
        with pytest.raises(OperatorParameterError, match=message):
            make()
    with pytest.raises(JobError, match="does not exist"):
        sink_graph(FileSink(str(tmp_path / "no" / "f.csv")), [{"a": 1}])


class Ctx:
    """A recording operator context, for driving one operator's handlers by hand."""

    name, job, watermark = "fs", "test", None

    def __init__(self) -> None:
        self.time = 0
        self.submitted: list[tuple[int, Any]] = []

    def now(self) -> int:
        return self.time

    def submit(self, tup: Any, port: int = 0) -> None:
        self.submitted.append((port, tup))

    def submit_punct(self, punct: Punct = Punct.WINDOW, port: int = 0) -> None:
        self.submitted.append((port, punct))

    def window(self, port: int = 0) -> Any:
        raise ValueError("not windowed")


def started(op: FileSink) -> FileSink:
    op.context = Ctx()
    op.setup()
    return op


def test_plain_restore_cuts_the_file_back_to_the_checkpoint(tmp_path: Path) -> None:
    out = tmp_path / "p.csv"
    sink = started(FileSink(str(out)))
    for v in (1, 2):
        sink.on_tuple({"v": v}, 0)
    sink.drain()
    state = sink.snapshot()
    sink.on_tuple({"v": 3}, 0)
    sink.drain()
    assert out.read_text() == "1\n2\n3\n"
    again = started(FileSink(str(out)))
    again.restore(state)
    again.on_tuple({"v": 30}, 0)
    again.on_punct(F, 0)
    assert out.read_text() == "1\n2\n30\n"
    with pytest.raises(FileSinkError, match="cannot restore from"):
        again.restore({"id": 0})


def test_flush_on_punctuation_and_flush_every_n_tuples(tmp_path: Path) -> None:
    out = tmp_path / "f.csv"
    sink = started(FileSink(str(out)))
    sink.on_tuple({"v": 1}, 0)
    assert out.read_text() == ""  # still in the write buffer
    sink.on_punct(W, 0)
    assert out.read_text() == "1\n"
    quiet = started(FileSink(str(out), flush_on_punctuation=False, flush=2))
    quiet.on_tuple({"v": 1}, 0)
    quiet.on_punct(W, 0)
    assert out.read_text() == ""
    quiet.on_tuple({"v": 2}, 0)
    assert out.read_text() == "1\n2\n"


def test_checkpoint_guarantees_follow_the_configuration(tmp_path: Path) -> None:
    assert FileSink("f", transactional=True).transactional
    assert not FileSink("f").transactional
    assert FileSource(file="f").replayable
    assert not FileSource(file="f", delete_file=True).replayable
    assert DirectoryScan(".").replayable
    assert not DirectoryScan(".", move_to_directory="x").replayable
    g = Graph("guarantee")
    rows = g.source("src", FileSource(file="in.csv"), schema=PACED)
    g.sink("out", FileSink("out.csv", transactional=True), [rows])
    assert g.freeze().guarantee() == ("exactly-once", [])


def visible(path: Path) -> str | None:
    return path.read_text() if path.exists() else None


def pending(directory: Path) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.endswith(".pending"))


def test_transactional_output_becomes_visible_at_commit_and_restore_cuts_the_pending_tail(
        tmp_path: Path) -> None:
    out = tmp_path / "t.csv"
    sink = started(FileSink(str(out), transactional=True))
    sink.on_tuple({"v": 1}, 0)
    sink.on_tuple({"v": 2}, 0)
    sink.drain()
    state1 = sink.snapshot()  # barrier of checkpoint 1
    sink.on_tuple({"v": 3}, 0)
    assert visible(out) is None  # nothing committed yet
    sink.on_checkpoint_committed(1)
    assert visible(out) == "1\n2\n"  # 3 followed the barrier: not yet
    sink.on_tuple({"v": 4}, 0)
    sink.drain()
    state2 = sink.snapshot()  # barrier of checkpoint 2
    sink.on_tuple({"v": 5}, 0)
    sink.drain()
    assert visible(out) == "1\n2\n"
    assert state2["files"] == [[str(out), len("1\n2\n3\n4\n"), False]]
    # Crash before commit 2 was applied, though the store had it: restore rolls it forward.
    crashed_dir = sorted(os.listdir(tmp_path))
    assert crashed_dir == [".t.csv.4.pending", ".t.csv.8.pending", "t.csv"]  # 0..4 was committed
    restarted = started(FileSink(str(out), transactional=True))
    restarted.restore(state2)
    assert visible(out) == "1\n2\n3\n4\n"  # exactly checkpoint 2's output; 5 is gone
    assert pending(tmp_path) == [".t.csv.8.pending"]  # the new, empty pending file
    restarted.on_tuple({"v": 50}, 0)
    restarted.on_punct(F, 0)  # final commits everything
    assert visible(out) == "1\n2\n3\n4\n50\n"
    assert pending(tmp_path) == []
    # Restoring an older checkpoint cuts the visible file back to it.
    older = started(FileSink(str(out), transactional=True))
    older.restore(state1)
    assert visible(out) == "1\n2\n"


def test_transactional_restore_finishes_a_commit_a_crash_interrupted(tmp_path: Path) -> None:
    out = tmp_path / "t.csv"
    sink = started(FileSink(str(out), transactional=True))
    sink.on_tuple({"v": 1}, 0)
    sink.drain()
    sink.snapshot()
    sink.on_checkpoint_committed(1)
    sink.on_tuple({"v": 22}, 0)
    sink.on_tuple({"v": 333}, 0)
    sink.drain()
    state = sink.snapshot()
    # A crash in the middle of commit 2: half of its bytes reached the visible file.
    with out.open("ab") as h:
        h.write(b"22\n3")
    restarted = started(FileSink(str(out), transactional=True))
    restarted.restore(state)
    assert visible(out) == "1\n22\n333\n"
    assert pending(tmp_path) == [".t.csv.9.pending"]


def test_transactional_rotation_commits_whole_files_and_announces_them_after_commit(
        tmp_path: Path) -> None:
    name = str(tmp_path / "r{id}.csv")
    sink = started(FileSink(name, transactional=True, close_mode="count", tuples_per_file=2,
                            closed_files_port=0))
    ctx: Ctx = sink.context  # type: ignore[assignment]
    for v in range(3):
        sink.on_tuple({"v": v}, 0)
    sink.drain()
    state = sink.snapshot()
    assert state["files"] == [[str(tmp_path / "r0.csv"), 4, True], [str(tmp_path / "r1.csv"), 2, False]]
    sink.on_tuple({"v": 3}, 0)  # closes r1 after the barrier
    sink.on_tuple({"v": 4}, 0)  # opens r2
    assert sorted(n for n in os.listdir(tmp_path) if not n.startswith(".")) == []
    assert ctx.submitted == []
    sink.on_checkpoint_committed(1)
    assert visible(tmp_path / "r0.csv") == "0\n1\n"
    assert visible(tmp_path / "r1.csv") == "2\n"
    assert visible(tmp_path / "r2.csv") is None
    assert ctx.submitted == [(0, {"file": str(tmp_path / "r0.csv")})]
    # A restart from checkpoint 1: r1 continues, r2 (begun after the barrier) never existed.
    again = started(FileSink(name, transactional=True, close_mode="count", tuples_per_file=2,
                             closed_files_port=0))
    again.restore(state)
    assert pending(tmp_path) == [".r1.csv.2.pending"]
    again.on_tuple({"v": 3}, 0)
    again.on_tuple({"v": 4}, 0)
    again.on_punct(F, 0)
    assert [visible(tmp_path / f"r{i}.csv") for i in range(3)] == ["0\n1\n", "2\n3\n", "4\n"]
    # r0's notice followed barrier 1 (it came with commit 1), so the restore sends it again.
    assert again.context.submitted == [  # type: ignore[attr-defined]
        (0, {"file": str(tmp_path / f"r{i}.csv")}) for i in range(3)]
    assert pending(tmp_path) == []


def test_a_plain_restore_with_another_file_name_completes_the_old_file_and_writes_the_new(
        tmp_path: Path) -> None:
    old, new = tmp_path / "out_a.csv", tmp_path / "out_b.csv"
    sink = started(FileSink(str(old)))
    for v in (1, 2):
        sink.on_tuple({"v": v}, 0)
    sink.drain()
    state = sink.snapshot()
    sink.on_tuple({"v": 3}, 0)  # after the checkpoint: replayed after the restart
    sink.drain()
    again = started(FileSink(str(new), closed_files_port=0))
    again.restore(state)  # before: it reopened out_a.csv and wrote on there; out_b.csv never existed
    assert old.read_text() == "1\n2\n"  # as the checkpoint left it, and closed
    assert again.context.submitted == [(0, {"file": str(old)})]  # type: ignore[attr-defined]
    again.on_tuple({"v": 3}, 0)
    again.on_punct(F, 0)
    assert (old.read_text(), new.read_text()) == ("1\n2\n", "3\n")
    quiet = started(FileSink(str(tmp_path / "out_c.csv")))
    quiet.restore(state)
    quiet.on_punct(F, 0)  # nothing more arrives: the new file still exists, empty
    assert (tmp_path / "out_c.csv").read_text() == ""


def test_a_transactional_restore_with_another_file_name_commits_the_old_file_to_the_checkpoint(
        tmp_path: Path) -> None:
    old, new = tmp_path / "t_a.csv", tmp_path / "t_b.csv"
    sink = started(FileSink(str(old), transactional=True))
    sink.on_tuple({"v": 1}, 0)
    sink.on_tuple({"v": 2}, 0)
    sink.drain()
    state = sink.snapshot()  # the barrier; the store commits, then the job dies before the sink hears
    sink.on_tuple({"v": 3}, 0)
    sink.drain()
    assert visible(old) is None and pending(tmp_path) == [".t_a.csv.0.pending", ".t_a.csv.4.pending"]
    again = started(FileSink(str(new), transactional=True, closed_files_port=0))
    again.restore(state)
    assert visible(old) == "1\n2\n"  # the commit finished in the old file; 3 followed the barrier
    assert pending(tmp_path) == []  # nothing left to be applied, to the old file or the new
    assert again.context.submitted == [(0, {"file": str(old)})]  # type: ignore[attr-defined]
    again.on_tuple({"v": 3}, 0)  # the replay goes to the new name
    again.on_punct(F, 0)
    assert (visible(old), visible(new)) == ("1\n2\n", "3\n")
    assert pending(tmp_path) == []


def test_a_renamed_rotating_sink_drops_what_the_old_names_began_after_the_barrier(tmp_path: Path) -> None:
    sink = started(FileSink(str(tmp_path / "r{id}.csv"), transactional=True, close_mode="count",
                            tuples_per_file=2))
    for v in (0, 1):
        sink.on_tuple({"v": v}, 0)  # r0 is complete: between files at the barrier
    sink.drain()
    state = sink.snapshot()
    sink.on_tuple({"v": 2}, 0)  # begins r1 after the barrier
    assert pending(tmp_path) == [".r0.csv.0.pending", ".r1.csv.0.pending"]
    again = started(FileSink(str(tmp_path / "n{id}.csv"), transactional=True, close_mode="count",
                             tuples_per_file=2))
    again.restore(state)
    assert pending(tmp_path) == []  # r1's pending file would never be committed nor removed
    again.on_tuple({"v": 2}, 0)
    again.on_punct(F, 0)
    assert sorted(n for n in os.listdir(tmp_path)) == ["n1.csv", "r0.csv"]
    assert (visible(tmp_path / "r0.csv"), visible(tmp_path / "n1.csv")) == ("0\n1\n", "2\n")


def test_a_restore_with_another_spelling_of_the_same_file_changes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "t.csv"
    sink = started(FileSink(str(out), transactional=True))
    sink.on_tuple({"v": 1}, 0)
    sink.drain()
    state = sink.snapshot()
    sink.on_checkpoint_committed(1)
    older = {k: v for k, v in state.items() if k != "file"}  # a checkpoint from before "file" was kept
    for spelling, saved in ((os.path.join(tmp_path, "sub", "..", "t.csv"), state), (str(out), older)):
        again = started(FileSink(spelling, transactional=True, closed_files_port=0))
        again.restore(saved)
        again.on_tuple({"v": 2}, 0)
        again.on_punct(F, 0)
        assert visible(out) == "1\n2\n"
        assert again.context.submitted == [(0, {"file": str(out)})]  # type: ignore[attr-defined]
        assert sorted(os.listdir(tmp_path)) == ["t.csv"]


def test_pending_files_are_owner_only_and_file_mode_sets_the_outputs(tmp_path: Path) -> None:
    def mode(path: Path) -> int:
        return path.stat().st_mode & 0o777

    previous = os.umask(0o022)
    try:
        sink = started(FileSink(str(tmp_path / "t.csv"), transactional=True))
        sink.on_tuple({"v": 1}, 0)
        (segment,) = [tmp_path / n for n in pending(tmp_path)]
        assert mode(segment) == 0o600  # was 0o644: uncommitted output readable by everyone
        sink.drain()
        sink.snapshot()
        sink.on_checkpoint_committed(1)
        assert mode(tmp_path / "t.csv") == 0o644  # outputs: as any program creates files
        (tmp_path / ".t2.csv.0.pending").write_text("stale")  # a crash's leftover, world-readable
        private = started(FileSink(str(tmp_path / "t2.csv"), transactional=True, file_mode=0o640))
        private.on_tuple({"v": 1}, 0)
        assert [mode(tmp_path / n) for n in pending(tmp_path)] == [0o600, 0o600]
        private.on_punct(F, 0)
        assert mode(tmp_path / "t2.csv") == 0o640
        plain = started(FileSink(str(tmp_path / "p{id}.csv"), close_mode="count", tuples_per_file=1,
                                 fileMode=0o600))
        plain.on_tuple({"v": 1}, 0)
        plain.on_tuple({"v": 2}, 0)
        assert [mode(tmp_path / f"p{i}.csv") for i in (0, 1)] == [0o600, 0o600]
    finally:
        os.umask(previous)
    for bad in (-1, 0o1000, "640", 6.4):
        with pytest.raises(OperatorParameterError, match=r"file_mode=.*expected permission bits"):
            FileSink("f", file_mode=bad)  # type: ignore[arg-type]


def build_exactly_once(src_path: Path, out_path: Path) -> Graph:
    g = Graph("exactly_once")
    rows = g.source("src", FileSource(file=str(src_path), has_delay_field=True), schema=PACED)
    g.sink("out", FileSink(str(out_path), transactional=True), [rows])
    return g


@pytest.mark.parametrize("crash", [2, 9, 16, 27, 35])
def test_file_source_to_transactional_file_sink_is_exactly_once_across_a_crash(
        tmp_path: Path, crash: int) -> None:
    src = paced_file(tmp_path / "in.csv", 40)
    reference = tmp_path / "reference.csv"
    assert run_until_crash(Job(build_exactly_once(src, reference), clock=VirtualClock()), None)
    expected = reference.read_text()
    assert expected.count("\n") == 40
    out = tmp_path / "out.csv"
    store = MemoryStore()
    job = Job(build_exactly_once(src, out), clock=VirtualClock(), checkpoints=store, checkpoint_period=0.3)
    assert not run_until_crash(job, crash * S // 10 + S // 20)
    seen = visible(out) or ""
    assert expected.startswith(seen) and seen.count("\n") < 40  # only committed, whole records
    restart = Job(build_exactly_once(src, out), clock=VirtualClock(), checkpoints=store,
                  checkpoint_period=0.3)
    assert run_until_crash(restart, None)
    assert visible(out) == expected
    assert pending(tmp_path) == []


# ------------------------------------------------------------------------------------ DirectoryScan


def scan_job(scan: DirectoryScan, actions: list[tuple[float, Callable[[Job], None]]],
             restore: MemoryStore | None = None) -> ListSink:
    g = Graph("scan")
    sink = ListSink()
    g.sink("out", sink, [g.source("dir", scan)])
    job = Job(g, clock=VirtualClock(), checkpoints=restore)
    assert run_until_crash(job, None, actions)
    return sink


def test_directory_scan_reports_each_file_once_per_scan_in_order(tmp_path: Path) -> None:
    d = tmp_path / "in"
    d.mkdir()
    (d / "sub").mkdir()
    for name, mtime in (("b.csv", 30), ("a.csv", 20), ("c.csv", 10), (".hidden.csv", 5), ("x.txt", 1)):
        write(d / name, name)
        os.utime(d / name, ns=(mtime * S, mtime * S))

    def p(name: str) -> dict[str, str]:
        return {"path": str(d / name)}

    def later(job: Job) -> None:
        write(d / "d.csv", "new")
        os.unlink(d / "a.csv")

    sink = scan_job(DirectoryScan(str(d), pattern=r"\.csv$", sleep_time=2.0, ignore_dot_files=True),
                    [(3.0, later), (5.0, lambda job: job.stop())])
    assert sink.items == [p("c.csv"), p("a.csv"), p("b.csv"), p("d.csv"), F]  # by date, then new
    assert sink.times == [0, 0, 0, 4 * S, 5 * S]
    by_name = scan_job(DirectoryScan(str(d), sort_by="name", order="descending", scans=1, initDelay=1.5),
                       [])
    assert by_name.items == [p("x.txt"), p("d.csv"), p("c.csv"), p("b.csv"), p(".hidden.csv"), F]
    assert by_name.times[0] == round(1.5 * S)


def test_directory_scan_ignores_existing_files_moves_and_reports_re_created_files(tmp_path: Path) -> None:
    d, moved = tmp_path / "in", tmp_path / "moved"
    d.mkdir()
    moved.mkdir()
    write(d / "old.csv", "")

    def add(name: str) -> Callable[[Job], None]:
        def act(job: Job) -> None:
            write(d / name, name)
        return act

    sink = scan_job(DirectoryScan(str(d), sleep_time=1.0, ignore_existing_files_at_startup=True,
                                  move_to_directory=str(moved), scans=4),
                    [(0.5, add("new.csv")), (1.5, add("new.csv"))])
    assert sink.items == [{"path": str(moved / "new.csv")}, {"path": str(moved / "new.csv")}, F]
    assert os.listdir(d) == ["old.csv"]

    again = scan_job(DirectoryScan(str(d), sleep_time=1.0, scans=3),
                     [(0.5, lambda job: os.unlink(d / "old.csv")), (1.5, add("old.csv"))])
    assert again.items == [{"path": str(d / "old.csv")}, {"path": str(d / "old.csv")}, F]


def test_directory_scan_state_keeps_reported_files_across_a_restore(tmp_path: Path) -> None:
    d = tmp_path / "in"
    d.mkdir()
    write(d / "a", "")
    write(d / "b", "")
    first = DirectoryScan(str(d), sort_by="name", scans=1)
    assert scan_job(first, []).tuples == [{"path": str(d / "a")}, {"path": str(d / "b")}]
    state = first.snapshot()
    assert sorted(name for name, _ in state["seen"]) == ["a", "b"] and state["scans"] == 1
    write(d / "c", "")
    resumed = DirectoryScan(str(d), sort_by="name", scans=2, ignore_existing_files_at_startup=True)
    resumed.restore(state)
    assert scan_job(resumed, []).tuples == [{"path": str(d / "c")}]
    g = Graph("missing")
    g.sink("out", ListSink(), [g.source("dir", DirectoryScan(str(tmp_path / "nope"), scans=1))])
    with pytest.raises(JobError, match=r"directory='.*nope' is not an existing directory"):
        run_graph(g, clock=VirtualClock())
    with pytest.raises(OperatorParameterError, match="not a valid regular expression"):
        DirectoryScan(str(d), pattern="(")


# ------------------------------------------------------------------------------------ the example


def test_the_per_file_totals_example_writes_one_line_per_file(tmp_path: Path) -> None:
    sales = tmp_path / "sales"
    sales.mkdir()
    write(sales / "2024-05-01.csv", "item,qty,amount\napple,2,1.50\npear,1,0.75\n")
    write(sales / "2024-05-02.csv", "item,qty,amount\n")  # no sales that day: no line
    write(sales / "2024-05-03.csv", "item,qty,amount\nfig,10,3.25\n# refund below\nfig,-1,-0.33\n")
    write(sales / "notes.txt", "not a csv file")
    out = tmp_path / "totals.csv"
    graph = load_graph(EXAMPLE, {"input": str(sales), "out": str(out)})
    metrics = run_graph(graph, clock=VirtualClock())
    assert out.read_text() == (f'"{sales / "2024-05-01.csv"}",2,3,2.25\n'
                               f'"{sales / "2024-05-03.csv"}",2,9,2.92\n')
    read = metrics.operators["read"].outputs[0]
    assert (read.tuples_submitted, read.window_puncts_submitted) == (4, 3)  # a mark per file
