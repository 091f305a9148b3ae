"""A ParquetSource read by the key groups themselves (`_group_reads`), without Spark: the planned
watermarks are the core's own, each group's share of a part is its keys' rows with every
watermark and mark in place, and the plan says where the shortcut does not apply and why."""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from riverbed.graph import FrozenGraph, Graph, Punct, Schema, Source, Watermark
from riverbed.operators import Aggregate, Count, Filter, ParquetSource
from riverbed.spark_bridge import plan
from riverbed.spark_bridge._group_reads import (
    GroupReader,
    _times_crc,
    group_read_plan,
    key_groups,
    watermark_rows,
)
from riverbed.spark_bridge._keyed import group_of
from riverbed.spark_bridge._rows import KIND_WATERMARK, decode
from riverbed.spark_bridge._source import CHECKED, TUPLES, generated_items
from riverbed.testing import ListSink

ROW = Schema(k="int64", v="float64", ts="int64")


class _Rows(Source):
    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows

    def generate(self) -> Any:
        yield from self.rows


def _core_watermarks(times: list[int], lag: float, gap: float, chunk: int) -> tuple[list[int], list[int]]:
    """Where the runtime's core puts an event-time source's watermarks: (index of the tuple each
    follows, value), the end's maximum watermark left out."""
    g = Graph("wm")
    src = g.source("src", _Rows([{"k": 0, "v": 0.0, "ts": t} for t in times]), schema=ROW,
                   event_time="ts", resolution="ms", lag=lag, minimum_gap=gap)
    g.sink("out", ListSink(), [src])  # (the feeder's host reports what leaves for consumers)
    after: list[int] = []
    values: list[int] = []
    seen = 0
    for kind, _at, value, payload in generated_items(g.freeze(), "src", chunk=chunk):
        if kind in (TUPLES, CHECKED):
            seen += len(payload)
        elif kind == KIND_WATERMARK and value < 2**63 - 1:
            after.append(seen - 1)
            values.append(value)
    return after, values


@pytest.mark.parametrize("seed", range(40))
def test_the_planned_watermarks_are_where_the_core_puts_them(seed: int) -> None:
    rnd = random.Random(seed)
    n = rnd.choice([1, 5, 300, 2000])
    t, times = rnd.randint(-50, 50), []
    for _ in range(n):
        t += rnd.choice([0, 0, 1, 2, 7, 40, 250])
        times.append(t - (rnd.randint(0, 500) if rnd.random() < 0.1 else 0))  # some late
    lag, gap = rnd.choice([0.0, 0.005, 0.3]), rnd.choice([0.0, 0.001, 0.01, 0.1, 1.0])
    want = _core_watermarks(times, lag, gap, chunk=rnd.choice([1, 7, 4096]))
    # planned file by file, the state carried from one to the next
    cuts = sorted({0, n, *(rnd.randint(0, n) for _ in range(3))})
    state: tuple[int | None, int | None] = (None, None)
    after: list[int] = []
    values: list[int] = []
    for a, b in itertools.pairwise(cuts):
        got_after, got_values, state = watermark_rows(np.array(times[a:b], dtype=np.int64), state,
                                                      round(lag * 1000), round(gap * 1000))
        after += [a + i for i in got_after]
        values += got_values
    assert (after, values) == want


def _part(tmp_path: Path, keys: list[Any], key_type: Any) -> tuple[str, list[int]]:
    n = len(keys)
    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"k": pa.array(keys, key_type), "v": [float(i) for i in range(n)],
                             "ts": list(range(n))}), path, row_group_size=7)
    return str(path), list(range(pq.ParquetFile(path).metadata.num_row_groups))


@pytest.mark.parametrize(("keys", "key_type"), [
    ([i * 7 % 13 - 3 for i in range(50)], pa.int64()),
    ([f"s{i % 9}" for i in range(50)], pa.string()),
])
def test_each_group_gets_its_keys_rows_and_every_watermark_and_the_files_mark(
        tmp_path: Path, keys: list[Any], key_type: Any) -> None:
    path, row_groups = _part(tmp_path, keys, key_type)
    labels = (5, 2, 9)
    assert key_groups(pq.read_table(path).column("k"), 3).tolist() == [group_of(k, 3) for k in keys]
    after, values = [0, 4, 5, 30, 49], [10, 20, 30, 40, 50]
    data = _encode_part(path, row_groups, 100, 50, after, values, True)
    reader = GroupReader("src", 0, "k", labels, ("k", "v", "ts"), "ts")
    seen: list[Any] = []
    for g, label in enumerate(labels):
        batch, controls, causes, last = reader.part(data, label, 0)
        assert [i for i, x in enumerate(batch) if type(x) is not dict] == controls
        assert [x.value for x in batch if type(x) is Watermark] == values
        assert batch[-1] is Punct.WINDOW and causes[len(batch) - 1] == last
        rows = [x for x in batch if type(x) is dict]
        assert all(group_of(r["k"], 3) == g for r in rows)
        assert [r["ts"] for r in rows] == sorted(r["ts"] for r in rows)
        for i, x in enumerate(batch):  # before each watermark: my rows at or before its tuple
            if type(x) is Watermark:
                j = after[values.index(x.value)]
                assert [r for r in batch[:i] if type(r) is dict] == [r for r in rows if r["ts"] <= j]
        seen += rows
    assert sorted(r["ts"] for r in seen) == list(range(50))
    # the file rewritten under the query (other event times): the group says so, naming it
    pq.write_table(pa.table({"k": pa.array(keys, key_type), "v": [0.0] * 50, "ts": [7] * 50}), path,
                   row_group_size=7)
    with pytest.raises(RuntimeError, match="other event times"):
        reader.part(data, labels[0], 0)
    assert all(r == {"k": keys[r["ts"]], "v": float(r["ts"]), "ts": r["ts"]} for r in seen)


def _encode_part(path: str, row_groups: list[int], pos0: int, n: int, after: list[int],
                 values: list[int], ends: bool) -> bytes:
    from riverbed.spark_bridge._rows import encode

    times = pq.read_table(path).column("ts").to_numpy()
    return encode([path, row_groups, pos0, n, np.asarray(after, dtype="<i8").tobytes(),
                   np.asarray(values, dtype="<i8").tobytes(), ends, _times_crc(times)])


def _graph(tmp_path: Path, *, table: Any = None, schema: Schema | None = ROW, key: Any = "k",
           clause: str = "timeInterval, intervalDuration(1), partitioned", chain: bool = False,
           manual: bool = False) -> FrozenGraph:
    d = tmp_path / "data"
    d.mkdir(exist_ok=True)
    pq.write_table(table if table is not None else
                   pa.table({"k": [1, 2, 3], "v": [0.5, 1.5, 2.5], "ts": [10, 20, 30]}), d / "a.parquet")
    g = Graph("gr")
    src = g.source("src", ParquetSource(d), schema=schema, event_time="ts", resolution="ms",
                   manual_watermarks=manual)
    into = g.operator("keep", Filter(lambda t: True), [src]) if chain else src
    g.operator("agg", Aggregate({"n": Count()}), [into.window(clause, partition_by=key)])
    return g.freeze()


def test_an_eligible_parquet_source_is_read_by_the_key_groups(tmp_path: Path) -> None:
    p = plan(_graph(tmp_path), "keyed", groups=2)
    assert p.where("src") == "parallel read" and p.reads["src"].grouped and "src" not in p.feeder
    assert "read by each key group" in p.explain()


@pytest.mark.parametrize(("kw", "why"), [
    ({"table": pa.table({"k": [1, None], "v": [0.5, 1.5], "ts": [10, 20]})}, "may hold nulls"),
    ({"table": pa.table({"k": [1.5, 2.5], "v": [0.5, 1.5], "ts": [10, 20]}),
      "schema": Schema(k="float64", v="float64", ts="int64")}, "key column 'k'"),
    ({"schema": Schema(k="int32", v="float64", ts="int64")}, "not a type that always fits"),
    ({"schema": Schema(v="float64", k="int64", ts="int64")}, "are not the files' columns"),
    ({"key": lambda t: t["k"]}, "partitioned by a function"),
    ({"clause": "sliding, count(3), count(1), partitioned"}, "not timeInterval"),
    ({"chain": True}, "operators between it"),
    ({"manual": True}, "manual watermarks"),
    ({"table": pa.table({"k": [1], "v": [0.5], "ts": [2**62]})}, "near the int64 limits"),
])
def test_where_the_groups_cannot_read_it_the_source_stays_in_the_feeder_saying_why(
        tmp_path: Path, kw: dict[str, Any], why: str) -> None:
    graph = _graph(tmp_path, **kw)
    p = plan(graph, "auto", groups=2)
    assert p.where("src") == "feeder"
    assert why in p.notes["src"]
    assert why in (group_read_plan(graph, "src", "agg", pre_chain=bool(p.pre_chain),
                                   join=False) or "")


def _counts(d: Path) -> FrozenGraph:
    """Counts per key and 1 s pane of the ParquetSource of directory ``d``."""
    g = Graph("gr")
    src = g.source("src", ParquetSource(d), schema=ROW, event_time="ts", resolution="ms")
    g.operator("agg", Aggregate({"n": Count()}),
               [src.window("timeInterval, intervalDuration(1), partitioned", partition_by="k")])
    return g.freeze()


def test_the_published_parts_plan_the_watermarks_of_the_whole_stream(tmp_path: Path) -> None:
    from riverbed.spark_bridge._group_reads import publish_group_parts

    d = tmp_path / "data"
    d.mkdir()
    rnd = random.Random(3)
    times, t = [], 0
    for _ in range(900):
        t += rnd.randint(0, 30)
        times.append(t)
    for f in range(3):
        chunk = times[f * 300:(f + 1) * 300]
        pq.write_table(pa.table({"k": [i % 5 for i in range(300)], "v": [0.0] * 300, "ts": chunk}),
                       d / f"f{f}.parquet", row_group_size=50)
    out = tmp_path / "parts"
    publish_group_parts(str(out), _counts(d), "src", [4, 7], index=0, max_rows=120)
    rows = pq.read_table(out).to_pylist()
    parts = [decode(r["data"]) for r in rows if r["kind"] == 7 and r["grp"] == 4]
    assert sum(p[3] for p in parts) == 900 and len(parts) == 9  # 3 files, 3 parts each
    got = [p[2] + a for p in parts for a in np.frombuffer(p[4], dtype="<i8").tolist()]
    files_before = [sum(1 for q in parts[:i] if q[6]) for i in range(len(parts))]
    want_after, _ = _core_watermarks(times, 0.0, 0.1, chunk=4096)
    # a part's first stream position counts the window marks of the files before it
    assert [a - files_before[i] for i, p in enumerate(parts)
            for a in [p[2] + x for x in np.frombuffer(p[4], dtype="<i8").tolist()]] == want_after
    assert len(got) == len(want_after)
    assert {r["grp"] for r in rows} == {4, 7}


def test_small_files_share_a_micro_batch(tmp_path: Path) -> None:
    from riverbed.spark_bridge._group_reads import publish_group_parts

    d = tmp_path / "data"
    d.mkdir()
    for f in range(5):
        pq.write_table(pa.table({"k": [1, 2], "v": [0.0, 1.0], "ts": [f * 10, f * 10 + 1]}),
                       d / f"f{f}.parquet")
    out = tmp_path / "parts"
    publish_group_parts(str(out), _counts(d), "src", [0, 1], index=0, max_rows=5)
    spool = sorted(p.name for p in out.iterdir() if p.suffix == ".parquet")
    assert len(spool) == 3  # 2 + 2 rows, 2 + 2, 2 (and the end): not a micro-batch a file
    kinds = [pq.read_table(out / name).column("kind").to_pylist() for name in spool]
    assert kinds[0][:2] == [4, 4] and kinds[-1][-4:] == [3, 3, 2, 2]  # start mark, end: max wm, final
