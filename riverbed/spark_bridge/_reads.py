"""File sources read by Spark's tasks in parallel, in parts that keep the source's order.

A `FileSource` of one file, or a `DirectoryScan` whose file names feed one
`FileSource` reading each file, produces rows that depend on nothing but the
bytes of the files: they need no feeder process. At deployment the input is
cut into parts (`plan_parts`): line-aligned byte ranges of a file, or one
part per scanned file. Their descriptions are published as Parquet files
(`publish_parts`), with what each file was when it was cut (its size, the
bytes before each cut: a restart from a file changed since is refused,
`changed_since_planned`), that Spark's file source reads, a micro-batch at a time;
``repartition`` spreads a batch's parts over the tasks, and each task reads
its parts (`part_reader`) with the operator's own code: a copy of the
`FileSource` restored to the start of its range (the runtime's replay path),
or the scan's reader hosted with one file name fed to it.

Order. Part ``k``'s rows are numbered from ``k << 40``, so sorting by order
key (as every keyed group and the driver stage do) puts every row of a part
after every row of the parts before it, and the rows of one part in the
order the operator made them: each key sees its tuples in the order
``riverbed run`` submits them. A part's tuples are stamped with the time the
runtime stamps them (a file source submits a whole file at its start time).
Only the last range of a file keeps the window mark and final its read ends
with; a scan's own final is a part of its own, after every file.

Exactness limits (`read_plan` says which apply, `riverbed spark explain` shows
it): a file is cut into ranges only where reading a range alone gives the
same records and times as reading the file through: no delay field (each
tuple's time depends on those before it), no tuple numbers, no event time
(watermarks follow the maximum so far), a text encoding and line marker that
a byte search finds exactly, and, for csv, no quote character in the file (a
quoted field may span lines). Otherwise the file is one part, read whole by
one task: on the executors, but not in parallel. A source that is not a file
read (a simulated source runs its own code on its own clock), or one of
several sources (the feeder merges them by stamped time), stays in the
feeder.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from ..graph import FrozenGraph, OperatorDef
from ._rows import KIND_FINAL, KIND_TUPLE, KIND_WATERMARK, KIND_WINDOW, decode, encode

__all__ = [
    "PART_DDL",
    "PartReadError",
    "ReadPlan",
    "changed_since_planned",
    "part_reader",
    "parts_published",
    "plan_parts",
    "publish_parts",
    "read_log",
    "read_plan",
    "write_batch_file",
]

PART_DDL = "part LONG, kind INT, time LONG, value LONG, data BINARY"
PART_BITS = 40  # part k's rows are numbered from k << PART_BITS
_RANGE, _FILE, _CONTROL = 0, 1, 2  # what a part is: a byte range, a scanned file, a control item
_EXACT_ENCODINGS = frozenset({"utf-8", "ascii", "latin-1", "iso8859-1", "cp1252"})
_SAMPLE = 1 << 20  # bytes looked at to estimate a file's record size
_MIN_RANGE = 4096
_COMPLETE = "_complete"
_CHECKED_BYTES = 4096  # bytes before a range's start whose digest a restart compares (as FileSource)


class PartReadError(RuntimeError):
    """A part of a file source could not be read on Spark: names the source, the file and the
    byte range, and what went wrong."""


@dataclass(frozen=True)
class ReadPlan:
    """Source ``source`` read by Spark's tasks: its rows are stream ``stream`` (the source's own
    output, or the output of ``reader``, the FileSource reading each scanned file, which the
    parts host). ``ranges``: a file may be cut into byte ranges (else: a part per file), and
    ``why`` says how it is read (and why not in ranges, where it is not)."""

    source: str
    stream: tuple[str, int]
    reader: str | None
    ranges: bool
    why: str
    grouped: bool = False  # each key group reads the parts itself (`_group_reads`)


def read_plan(graph: FrozenGraph, name: str, *, only_source: bool) -> ReadPlan | str:
    """How source ``name`` is read on Spark's executors, or why it stays in the feeder."""
    from ..operators import DirectoryScan, FileSourceOfFile, FileSourceWithInput, ParquetSource

    odef = graph.operator(name)
    src = odef.operator
    if isinstance(src, ParquetSource):
        return ("a ParquetSource is read on the executors only by the key groups of the keyed "
                "stage it feeds, with event time (`_plan` decides that once the stages are known)")
    if isinstance(src, FileSourceOfFile):
        if not only_source:
            return _SHARED
        why = _no_ranges(odef)
        if why is None:
            return ReadPlan(name, (name, 0), None, True,
                            "file read by Spark's tasks in parallel: line-aligned byte ranges (a "
                            "csv file with quotes: whole), a range per task, each row numbered by "
                            "(range, position) so every key keeps the file's order")
        return ReadPlan(name, (name, 0), None, False,
                        f"file read by one Spark task (not cut into ranges: {why})")
    if isinstance(src, DirectoryScan):
        consumers = graph.consumers(name, 0)
        if len(consumers) != 1:
            return (f"its file names feed {len(consumers)} operators: only a single FileSource "
                    "reading each file is read by Spark's tasks")
        reader = graph.operator(consumers[0][0])
        if not isinstance(reader.operator, FileSourceWithInput):
            return (f"its file names feed {reader.name!r}, not a FileSource reading each file: "
                    "nothing to read in parallel")
        if len(reader.outputs) != 1 or reader.error_port is not None or reader.event_time is not None:
            return (f"its reader {reader.name!r} has status, bad-line or error ports, or event time: "
                    "those streams are made in one place")
        if odef.event_time is not None:
            return "event time on the scan's stream: its watermarks are made in one place"
        if not only_source:
            return _SHARED
        return ReadPlan(name, (reader.name, 0), reader.name, False,
                        f"directory scanned at deployment; each file it reports is read whole by "
                        f"{reader.name!r} in a Spark task, files in parallel, each row numbered "
                        "by (file, position)")
    return (f"{type(src).__name__} makes its items in its own code (run() or generate()), in order, "
            "on one clock: only one process can run it")


_SHARED = ("one of several sources: the feeder merges the sources' items into one stream by "
           "stamped time, so that a micro-batch holds every source's items up to one time")


def _no_ranges(odef: OperatorDef) -> str | None:
    """Why the file of FileSource ``odef`` cannot be cut into byte ranges (None: it can)."""
    import codecs

    src: Any = odef.operator
    if src.has_delay_field:
        return "a delay field: each tuple's time depends on the delays before it"
    if src.tuple_number_attribute is not None:
        return "tuple_number_attribute: each tuple's number depends on the tuples before it"
    if odef.event_time is not None:
        return "event time: each watermark depends on the tuples before it"
    if codecs.lookup(src.encoding).name not in _EXACT_ENCODINGS:
        return f"encoding {src.encoding!r}: a byte search may find a line end inside a character"
    marker = src.eol_marker
    if len(marker) == 2 and marker[0] == marker[1]:
        return f"line marker {marker!r} overlaps itself: where a line starts depends on the lines before"
    return None


# ------------------------------------------------------------------ parts (at deployment)


@dataclass(frozen=True)
class Part:
    """One part: ``kind`` (a range, a scanned file, a control item), the stamped ``time``, a
    watermark's ``value``, and ``data``: [path, start, end, last] of a range, the scan's tuple
    of a file, nothing for a control item."""

    kind: int
    time: int
    value: int
    data: Any


def plan_parts(graph: FrozenGraph, rp: ReadPlan, *, records: int, tasks: int) -> list[Part]:
    """The parts of ``rp``'s input: ranges of about ``records`` / ``tasks`` records, or a part
    per scanned file (the directory is scanned now, by a copy of the scan on a virtual clock)."""
    if rp.reader is not None:
        return _scan_parts(graph, rp.source)
    src: Any = graph.operator(rp.source).operator
    path = src.file
    start_ns = round(src.init_delay * 1_000_000_000)
    try:
        size = os.path.getsize(path)
    except OSError:  # the task's read reports it (or skips it: ignore_open_errors), as the runtime does
        return [Part(_RANGE, start_ns, 0, [path, 0, -1, True])]
    marker = src.eol_marker.encode(src.encoding)
    cut = rp.ranges and size > _MIN_RANGE and not (src.format == "csv" and _has_quote(path))
    if not cut:
        return [Part(_RANGE, start_ns, 0, [path, 0, size, True])]
    with open(path, "rb") as f:
        sample = f.read(_SAMPLE)
    per_record = max(1.0, len(sample) / max(1, sample.count(marker)))
    step = max(_MIN_RANGE, int(per_record * max(1, records // max(1, tasks))))
    bounds = [0]
    with open(path, "rb") as f:
        while bounds[-1] + step < size:
            nxt = _line_start(f, bounds[-1] + step, marker)
            if nxt >= size:
                break
            bounds.append(nxt)
    bounds.append(size)
    return [Part(_RANGE, start_ns, 0, [path, a, b, b == size]) for a, b in itertools.pairwise(bounds)]


def _line_start(f: BinaryIO, at: int, marker: bytes) -> int:
    """The first line start at or after byte ``at`` (the end of the file if there is none)."""
    pos = max(0, at - len(marker))
    f.seek(pos)
    buf = b""
    while True:
        chunk = f.read(1 << 16)
        if not chunk:
            return pos + len(buf)
        buf += chunk
        i = buf.find(marker)
        if i >= 0:
            return pos + i + len(marker)
        keep = len(marker) - 1
        pos += len(buf) - keep
        buf = buf[len(buf) - keep:] if keep else b""


def _has_quote(path: str) -> bool:
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            if b'"' in chunk:
                return True
    return False


def _scan_parts(graph: FrozenGraph, name: str) -> list[Part]:
    from ..graph import FrozenGraph as Frozen
    from ._source import SourceItems

    odef = graph.operator(name)
    alone = Frozen(graph.name, (dataclasses.replace(odef, operator=copy.deepcopy(odef.operator)),),
                   graph.params)
    parts = []
    for kind, at, value, tup in SourceItems(alone, name):
        if kind == KIND_TUPLE:
            parts.append(Part(_FILE, at, 0, tup))
        else:
            parts.append(Part(_CONTROL, at, value, kind))
    return parts


def parts_published(directory: str) -> bool:
    """Whether the parts were published under ``directory`` (by an earlier run of the query)."""
    return os.path.exists(os.path.join(directory, _COMPLETE))


def publish_parts(directory: str, parts: list[Part], per_batch: int) -> None:
    """The parts' descriptions as Parquet files of ``per_batch`` parts each, in order (one
    micro-batch each). Written once: a restart from the same checkpoint reads the same files
    (its offset log names those it took)."""
    import pyarrow as pa  # type: ignore[import-untyped]

    if os.path.exists(os.path.join(directory, _COMPLETE)):
        return
    os.makedirs(directory, exist_ok=True)
    base_ms = time.time_ns() // 1_000_000 - len(parts) - 1
    for n, first in enumerate(range(0, len(parts), per_batch)):
        chunk = parts[first:first + per_batch]
        table = pa.table({
            "part": pa.array(range(first, first + len(chunk)), pa.int64()),
            "kind": pa.array([p.kind for p in chunk], pa.int32()),
            "time": pa.array([p.time for p in chunk], pa.int64()),
            "value": pa.array([p.value for p in chunk], pa.int64()),
            "data": pa.array([encode(p.data) for p in chunk], pa.binary())})
        write_batch_file(directory, n, base_ms, table)
    with open(os.path.join(directory, _COMPLETE), "w") as f:
        json.dump({"parts": len(parts), "per_batch": per_batch, "files": _fingerprints(parts)}, f)


def write_batch_file(directory: str, n: int, base_ms: int, table: Any) -> None:
    """Micro-batch ``n``'s rows, ``table``, as ``directory``'s n-th Parquet file, whole or not
    at all, its modification time ``base_ms + n`` ms: Spark's file source takes files in
    modification-time order, one a micro-batch."""
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    path = os.path.join(directory, f"{n:012d}.parquet")
    pq.write_table(table, f"{path}.tmp", compression="none")
    ns = (base_ms + n) * 1_000_000
    os.utime(f"{path}.tmp", ns=(ns, ns))
    os.replace(f"{path}.tmp", path)


def _fingerprints(parts: list[Part]) -> dict[str, Any]:
    """What the ranges were cut from, per file: its size and, at each range start after the
    first, a digest of the bytes just before it (the line end the cut was put after)."""
    files: dict[str, Any] = {}
    for part in parts:
        if part.kind != _RANGE:
            continue
        path, start = part.data[0], part.data[1]
        entry = files.setdefault(path, {"size": _size(path), "starts": []})
        if start > 0 and entry["size"] >= 0:
            entry["starts"].append([start, _digest_before(path, start)])
    return files


def _digest_before(path: str, end: int) -> str | None:
    import hashlib

    start = max(0, end - _CHECKED_BYTES)
    try:
        with open(path, "rb") as f:
            f.seek(start)
            return hashlib.sha256(f.read(end - start)).hexdigest()
    except OSError:
        return None


def changed_since_planned(directory: str) -> str | None:
    """Why a file the published parts under ``directory`` were cut from is not the one they
    were cut from (None: each is, as far as its size and the bytes before each range start
    tell). The parts are planned once, by the first run; a restart reads the remaining ones
    as byte ranges of the file as it is then, so a file replaced or rewritten since would
    mix two files' records (or cut a line in two), where `riverbed run` refuses to resume
    a FileSource whose file changed before its offset. A file gone is not refused here: its
    read says so (or skips it, ``ignore_open_errors``), as in the runtime."""
    try:
        with open(os.path.join(directory, _COMPLETE)) as f:
            files = json.load(f).get("files", {})
    except (OSError, ValueError):
        return None
    for path, entry in files.items():
        size = _size(path)
        if entry["size"] < 0 or size < 0:
            continue
        if size != entry["size"]:
            return (f"cannot resume {path!r}: it held {entry['size']} bytes when the checkpoint cut "
                    f"it into byte ranges, and it holds {size} now: it was replaced or rewritten. "
                    "Put that file back to go on, or give the job a new checkpoint directory to "
                    "read the new one")
        for start, digest in entry["starts"]:
            if _digest_before(path, start) != digest:
                return (f"cannot resume {path!r} at byte {start}: the file is not the one the "
                        "checkpoint read (the bytes before that offset differ): it was replaced or "
                        "rewritten. Put that file back to go on, or give the job a new checkpoint "
                        "directory to read the new one")
    return None


# ------------------------------------------------------------------ reading a part (in a task)


Items = Iterator[tuple[int, int, int, Any]]


def part_items(graph: FrozenGraph, rp: ReadPlan, part: Part) -> Items:
    """The items ``(kind, time, value, tuple or tuples)`` of one part, in the order the runtime
    makes them."""
    if part.kind == _CONTROL:
        yield int(part.data), part.time, part.value, None
    elif part.kind == _FILE:
        yield from _file_items(graph, rp, part.time, part.data)
    else:
        yield from _range_items(graph, rp.source, part.data)


def _file_items(graph: FrozenGraph, rp: ReadPlan, at: int, tup: Any) -> Items:
    from ..core import SyncGraph
    from ._source import exit_items

    assert rp.reader is not None
    host = SyncGraph(graph, [rp.reader], now=at)
    host.feed(rp.source, 0, [tup])
    yield from exit_items(host)


def _range_items(graph: FrozenGraph, name: str, data: list[Any]) -> Items:
    """A FileSource's items for bytes [start, end) of its file: a copy of the operator restored
    to the range's start (in a file holding the range alone), its window mark and final kept
    only for the last range. A range from 0 to the end is the file itself, read as it is.
    ``data`` is [path, start, end, last]."""
    from ..graph import FrozenGraph as Frozen
    from ._source import SourceItems

    path, start, end, last = data

    odef = graph.operator(name)
    whole = start == 0 and (end < 0 or end == _size(path))
    op: Any = copy.copy(odef.operator)
    fd = -1
    if not whole:
        fd = _range_file(path, start, end)
        view = f"/proc/self/fd/{fd}"
        op.file = view
        # Offset 1 past a filler byte: the header lines are skipped only in the first range.
        op.restore({"file": view, "offset": 0 if start == 0 else 1, "line": 0, "tuples": 0,
                    "done": False})
    attribute = op.file_name_attribute
    alone = Frozen(graph.name, (dataclasses.replace(odef, operator=op),), graph.params)
    try:
        for item in SourceItems(alone, name):
            kind = item[0]
            if kind == KIND_TUPLE:
                if attribute is not None and not whole:
                    item[3][attribute] = path
                yield item
            elif last or kind not in (KIND_WINDOW, KIND_FINAL, KIND_WATERMARK):
                yield item
    except Exception as exc:
        if whole:
            raise
        raise _range_error(name, path, start, end, exc) from exc
    finally:
        if fd >= 0:
            os.close(fd)


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return -1


def _range_file(path: str, start: int, end: int) -> int:
    """An anonymous file holding bytes [start, end) of ``path`` (after a filler byte unless
    ``start`` is 0)."""
    make = getattr(os, "memfd_create", None)
    if make is not None:
        fd = int(make("riverbed-range"))
    else:  # pragma: no cover - not Linux
        import tempfile

        fd, scratch = tempfile.mkstemp(prefix="riverbed-range-")
        os.unlink(scratch)
    with open(path, "rb") as f:
        f.seek(start)
        data = f.read(end - start)
    os.write(fd, (b"\0" if start else b"") + data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _range_error(name: str, path: str, start: int, end: int, exc: BaseException) -> BaseException:
    """The error of a range's read as the runtime's read of the whole file would raise it: a
    record error names the file and its line in the file (not in the range)."""
    from ..core import JobError, OperatorError
    from ..operators import FileFormatError

    before: list[int] = []

    def fixed(e: BaseException) -> BaseException | None:
        if isinstance(e, FileFormatError):
            if not before:
                with open(path, "rb") as f:
                    before.append(f.read(start).count(b"\n"))
            return FileFormatError(e.operator, path, before[0] + e.line, e.reason)
        if isinstance(e, OperatorError):
            cause = fixed(e.cause)
            return None if cause is None else OperatorError(e.operator, e.port, e.tuple, cause)
        if isinstance(e, JobError):
            errors = [fixed(x) for x in e.errors]
            if any(x is not None for x in errors):
                return JobError(e.job, [x or y for x, y in zip(errors, e.errors, strict=True)])
        return None

    return fixed(exc) or PartReadError(f"source {name!r}: reading bytes {start}..{end} of {path!r} "
                                       f"on Spark failed: {exc}")


def read_log(spark: Any) -> Any:
    """A Spark accumulator gathering which task read each part: ``(part, stage, partition,
    worker pid)`` (`Deployment.read_tasks`). Spark's own metrics count a stage's tasks, not
    what each read; this shows a file's parts going to several tasks of one stage."""
    from ._metrics import list_accumulator

    return list_accumulator(spark)


def part_reader(graph: FrozenGraph, rp: ReadPlan, index: int, route: Any = None,
                log: Any = None) -> Callable[[Any], Any]:
    """The mapInPandas function of ``rp``'s parts: each part's rows (plain, or routed to key
    groups with ``route``, see `_source.item_rows`), numbered from ``part << PART_BITS``; each
    part read is added to ``log`` (`read_log`)."""
    from ._keyed import ROUTED_DDL
    from ._rows import ROW_DDL
    from ._source import item_rows

    ddl = ROW_DDL if route is None else ROUTED_DDL
    columns = [c.strip().split()[0] for c in ddl.split(",")]

    def read(batches: Iterator[Any]) -> Iterator[Any]:
        import pandas as pd  # type: ignore[import-untyped]

        for pdf in batches:
            for part, kind, at, value, data in zip(pdf["part"], pdf["kind"], pdf["time"], pdf["value"],
                                                   pdf["data"], strict=True):
                if log is not None:
                    from pyspark import TaskContext

                    task = TaskContext.get()
                    if task is not None:
                        log.add([(int(part), task.stageId(), task.partitionId(), os.getpid())])
                items = part_items(graph, rp, Part(int(kind), int(at), int(value), decode(data)))
                rows = item_rows(items, index, route=route, seq0=int(part) << PART_BITS)
                chunk: list[tuple[Any, ...]] = []
                for row in rows:
                    chunk.append(row)
                    if len(chunk) >= 8192:
                        yield pd.DataFrame(chunk, columns=columns)
                        chunk = []
                if chunk:
                    yield pd.DataFrame(chunk, columns=columns)

    return read
