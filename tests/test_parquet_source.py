"""ParquetSource on the runtime: rows in file and name order, a window mark per file, and a
snapshot taken between any two items that resumes with the next one."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from riverbed.graph import Graph, Punct, Schema
from riverbed.operators import OperatorParameterError, ParquetSource, ParquetSourceError
from riverbed.runtime import VirtualClock, run_graph
from riverbed.testing import ListSink


def _write(path: Path, rows: list[tuple[Any, ...]], *, row_group_size: int | None = None) -> Path:
    table = pa.table({"k": [r[0] for r in rows], "v": [r[1] for r in rows], "ts": [r[2] for r in rows]},
                     schema=pa.schema([("k", pa.string()), ("v", pa.float64()), ("ts", pa.int64())]))
    pq.write_table(table, path, row_group_size=row_group_size)
    return path


def _dataset(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    d.mkdir()
    _write(d / "b.parquet", [(f"k{i % 3}", i / 2, 1000 + i) for i in range(7)], row_group_size=3)
    _write(d / "a.parquet", [("x", 0.5, 10), ("y", 1.5, 20)])
    _write(d / "c.parquet", [])
    (d / "notes.txt").write_text("not parquet")
    return d


def _expected(d: Path) -> list[Any]:
    a = [{"k": "x", "v": 0.5, "ts": 10}, {"k": "y", "v": 1.5, "ts": 20}]
    b = [{"k": f"k{i % 3}", "v": i / 2, "ts": 1000 + i} for i in range(7)]
    return [*a, Punct.WINDOW, *b, Punct.WINDOW, Punct.WINDOW]


def test_a_directorys_matching_files_in_name_order_each_followed_by_a_window_mark(tmp_path: Path) -> None:
    d = _dataset(tmp_path)
    src = ParquetSource(d, batch_rows=2)
    assert [Path(f).name for f in src.files()] == ["a.parquet", "b.parquet", "c.parquet"]
    assert list(src.generate()) == _expected(d)
    one = ParquetSource(d / "a.parquet", columns=["ts", "k"])
    assert list(one.generate()) == [{"ts": 10, "k": "x"}, {"ts": 20, "k": "y"}, Punct.WINDOW]


def test_a_snapshot_between_any_two_items_resumes_with_the_next_one(tmp_path: Path) -> None:
    d = _dataset(tmp_path)
    whole = _expected(d)
    for k in range(len(whole) + 1):
        first = ParquetSource(d, batch_rows=2)
        items = first.generate()
        taken = list(itertools.islice(items, k))
        state = first.snapshot()
        second = ParquetSource(d, batch_rows=3)
        second.restore(state)
        assert second.snapshot() == state  # restored, not started: the same position
        assert taken + list(second.generate()) == whole, k


def test_a_job_reads_it_with_event_time_and_its_watermarks(tmp_path: Path) -> None:
    d = _dataset(tmp_path)
    g = Graph("pq")
    src = g.source("src", ParquetSource(d), schema=Schema(k="rstring", v="float64", ts="int64"),
                   event_time="ts", resolution="ms")
    sink = ListSink()
    g.sink("out", sink, [src])
    run_graph(g, clock=VirtualClock())
    assert [t for t in sink.items if type(t) is dict] == [t for t in _expected(d) if type(t) is dict]
    assert sink.items.count(Punct.WINDOW) == 3


def test_a_restore_refuses_a_file_that_changed_or_is_gone(tmp_path: Path) -> None:
    """In restore() itself, before anything runs: the runtime takes a refusal there as
    `RestoreRefused` (exit 2, not retried); found when reading began, the job was retried and
    its region reset again and again (a review)."""
    d = _dataset(tmp_path)
    src = ParquetSource(d)
    items = src.generate()
    list(itertools.islice(items, 5))  # into b.parquet
    state = src.snapshot()
    assert state["file"].endswith("b.parquet") and state["row"] == 2
    original = (d / "b.parquet").read_bytes()
    _write(d / "b.parquet", [("z", 1.0, 1)] * 9)
    with pytest.raises(ParquetSourceError, match="replaced or rewritten"):
        ParquetSource(d).restore(state)
    # the same size, another footer (values swapped: a same-size rewrite)
    swapped = original.replace(b"k0", b"k9")
    assert len(swapped) == len(original) and swapped != original
    (d / "b.parquet").write_bytes(swapped)
    with pytest.raises(ParquetSourceError, match="replaced or rewritten"):
        ParquetSource(d).restore(state)
    (d / "b.parquet").write_bytes(original)
    ParquetSource(d).restore(state)  # put back: resumes
    (d / "b.parquet").unlink()
    with pytest.raises(ParquetSourceError, match="no longer there"):
        ParquetSource(d).restore(state)
    with pytest.raises(ParquetSourceError, match="expected the dict"):
        ParquetSource(d).restore({"offset": 3})


def test_a_file_read_out_and_then_deleted_does_not_stop_a_restart(tmp_path: Path) -> None:
    """Jobs that remove what they consumed: the checkpoint's file, read out (its window mark
    sent), is gone at the restart; reading goes on with the files after it."""
    d = _dataset(tmp_path)
    src = ParquetSource(d)
    items = src.generate()
    list(itertools.islice(items, 3))  # a.parquet's two rows and its window mark
    state = src.snapshot()
    assert state["file"].endswith("a.parquet") and state["done"]
    (d / "a.parquet").unlink()
    again = ParquetSource(d)
    again.restore(state)
    assert list(again.generate()) == _expected(d)[3:]


@pytest.mark.parametrize(("params", "message"), [
    ({"pattern": "("}, "not a valid regular expression"),
    ({"columns": "ts"}, "expected a list of column names"),
    ({"batch_rows": 0}, "expected an int > 0"),
])
def test_bad_parameters_are_refused_naming_them(tmp_path: Path, params: dict[str, Any], message: str) -> None:
    with pytest.raises(OperatorParameterError, match=message):
        ParquetSource(tmp_path, **params)


def test_a_file_that_does_not_decode_is_named(tmp_path: Path) -> None:
    d = _dataset(tmp_path)
    (d / "b.parquet").write_bytes((d / "b.parquet").read_bytes()[:-100])  # cut short
    with pytest.raises(ParquetSourceError, match=r"cannot read '.*b\.parquet'"):
        list(ParquetSource(d).generate())


def test_a_directory_of_directories_only_is_refused_not_read_as_empty(tmp_path: Path) -> None:
    """A partitioned dataset (``day=a/``): its files are below the directory given, and it read
    nothing, exit 0. An empty directory stays an empty source."""
    (tmp_path / "day=a").mkdir()
    _write(tmp_path / "day=a" / "x.parquet", [("x", 0.5, 10)])
    with pytest.raises(ParquetSourceError, match="only directories"):
        list(ParquetSource(tmp_path).generate())
    (tmp_path / "empty").mkdir()
    assert list(ParquetSource(tmp_path / "empty").generate()) == []
