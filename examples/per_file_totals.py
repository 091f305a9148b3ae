"""Example graph: one total per input file, from punctuation at file boundaries.

    riverbed run examples/per_file_totals.py -p input=examples/data/sales -p out=out/totals.csv

(``input`` defaults to ``examples/data/sales``: three small files, one of them empty.)

* ``scan``: DirectoryScan lists the ``*.csv`` files of ``input`` (by name; one
  scan, then it ends, so the job finishes when the files are done);
* ``read``: FileSource reads each file named by a scan tuple (csv with a
  header line: ``item,qty,amount``), adds the file name to every row, and
  submits a window mark after each file;
* ``totals``: a ``tumbling, punct()`` window holds exactly one file's rows;
  when the mark tumbles it, the operator submits the file's row count, total
  quantity and total amount (an empty file gives no line);
* ``file``: FileSink writes the totals as csv.

The window mark is what makes "per file" work: nothing in the rows says
where one file ends, the punctuation does.
"""

from __future__ import annotations

from typing import Any

from riverbed.graph import Graph, Operator, Punct, Schema
from riverbed.operators import DirectoryScan, FileSink, FileSource
from riverbed.windows import EventType, StreamWindowEvent

SALE = Schema(item="rstring", qty="int64", amount="float64", file="rstring")
TOTAL = Schema(file="rstring", rows="int64", qty="int64", amount="float64")


class FileTotals(Operator):
    """On each tumble of a punct() window: the totals of the file the window held."""

    window_punctuation = "generating"
    window_events = frozenset({EventType.EVICTION})

    def setup(self) -> None:
        spec = getattr(self.context.window(0), "spec", None)
        if spec is None or spec.clause() != "tumbling, punct()":
            raise ValueError(f"FileTotals {self.context.name!r}: expects a 'tumbling, punct()' "
                             f"window (one file per window), got {spec}")

    def on_window_event(self, event: StreamWindowEvent[Any], port: int) -> None:
        rows = event.tuples
        if event.type is EventType.EVICTION and rows:
            self.submit({"file": rows[0]["file"], "rows": len(rows),
                         "qty": sum(r["qty"] for r in rows),
                         "amount": round(sum(r["amount"] for r in rows), 2)})
            self.submit_punct(Punct.WINDOW)


def build(params: dict[str, Any]) -> Graph:
    g = Graph("per_file_totals", params)
    files = g.source("scan", DirectoryScan(str(params.get("input", "examples/data/sales")), pattern=r"\.csv$",
                                           sort_by="name", scans=1),
                     schema=Schema(path="rstring"))
    sales = g.operator("read", FileSource(format="csv", has_header=True, file_name_attribute="file"),
                       [files], [SALE])
    totals = g.operator("totals", FileTotals(), [sales.window("tumbling, punct()")], [TOTAL])
    g.sink("file", FileSink(str(params.get("out", "out/totals.csv")), format="csv"), [totals])
    return g
