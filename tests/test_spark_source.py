"""The bridge's streaming reader driven as Spark drives it, without Spark.

Spark asks for offsets, plans partitions, reads them (in another process:
here another reader object), and commits. What a batch holds must not
depend on whether it was spooled ahead by the prefetch thread, spooled when
planned, or read again after a restart.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

from pyspark.sql.streaming.datasource import ReadMaxRows

from riverbed.graph import Graph, Operator
from riverbed.spark_bridge._source import dump_payload, register, source_rows
from riverbed.testing import ListSource


class _Nothing(Operator):
    def on_tuple(self, tup: Any, port: int) -> None:
        pass


class _Registry:
    """Stands in for ``spark.dataSource``: keeps the registered class."""

    def __init__(self) -> None:
        self.source: Any = None

    def register(self, cls: Any) -> None:
        self.source = cls


class _Spark:
    def __init__(self) -> None:
        self.dataSource = _Registry()


def _reader(options: dict[str, str]) -> Any:
    spark = _Spark()
    register(spark)
    return spark.dataSource.source(options).streamReader(None)


def _options(spool: Path) -> tuple[dict[str, str], list[Any]]:
    g = Graph("src")
    s = g.source("src", ListSource([{"k": i % 4, "v": i} for i in range(500)]))
    g.sink("sink", _Nothing(), [s])
    frozen = g.freeze()
    payload = dump_payload((frozen, "src", 0, None))
    rows = list(source_rows(frozen, "src", 0))
    return {"payload": payload, "spool": str(spool),
            "maxRecordsPerBatch": "100", "firstRecordsPerBatch": "20"}, rows


def _rows_of(reader: Any, partitions: list[Any]) -> list[Any]:
    out = []
    for p in partitions:
        for batch in reader.read(p):
            out.extend(tuple(r.values()) for r in batch.to_pylist())
    return out


def test_batches_are_the_same_spooled_ahead_when_planned_or_after_a_restart(tmp_path: Path) -> None:
    options, rows = _options(tmp_path / "spool")
    reader, executor = _reader(options), _reader(options)  # Spark reads in another process
    start = reader.initialOffset()
    seen: list[Any] = []
    cuts = []
    while True:
        end = reader.latestOffset(start, ReadMaxRows(100))
        if end == start:
            break
        if reader._ahead is not None:
            reader._ahead.join()  # let the prefetch thread spool the next batch ahead
        name = f"{start['n']:020d}-{end['n']:020d}.arrow"
        assert (tmp_path / "spool" / name).exists()  # spooled ahead, before Spark planned it
        parts = reader.partitions(start, end)
        seen += _rows_of(executor, parts)
        cuts.append((start["n"], end["n"]))
        start = end
    assert cuts[0] == (0, 20) and all(hi - lo == 100 for lo, hi in cuts[1:-1])  # a smaller first
    assert seen == [tuple(r) for r in rows]
    spooled = sorted(os.listdir(tmp_path / "spool"))
    assert len(spooled) >= len(cuts)  # every batch spooled (some ahead, by the prefetch thread)
    # A restarted reader (no cache) gives a batch Spark asks for again from the spool.
    again = _reader(options)
    lo, hi = cuts[2]
    assert _rows_of(again, again.partitions({"n": lo}, {"n": hi})) == [tuple(r) for r in rows[lo:hi]]
    # Committed batches' spool files go; a batch cut differently is produced again, the same.
    reader.commit({"n": cuts[3][1]})
    assert all(int(name.split("-")[1].split(".")[0]) > cuts[3][1]
               for name in os.listdir(tmp_path / "spool") if name.endswith(".arrow"))
    odd = (cuts[4][0] + 7, cuts[4][1] + 13)
    fresh = _reader(options)
    got = _rows_of(fresh, fresh.partitions({"n": odd[0]}, {"n": odd[1]}))
    assert got == [tuple(r) for r in itertools.islice(rows, *odd)]


def test_the_processes_spark_starts_for_the_source_import_only_what_the_reader_needs() -> None:
    # Spark starts a fresh Python process to plan the source and another to run its reader, at
    # every query start; both unpickle the source and so import the bridge. Logging, the status
    # view, the metrics exporter, the checkpoint store and the deployment code are not needed.
    import subprocess
    import sys

    code = ("import sys, riverbed.spark_bridge._source, riverbed.spark_bridge._keyed\n"
            "print(' '.join(sorted(m for m in ('structlog', 'rich', 'prometheus_client', 'rocksdict',"
            " 'riverbed.spark_bridge._deploy', 'riverbed.runtime._logging') if m in sys.modules)))\n")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == ""
