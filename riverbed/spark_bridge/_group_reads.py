"""An event-time ParquetSource read by each key group in its own task: no feeder, no shuffle.

Why. An event-time source stays in one place (the feeder) because each watermark
depends on the maximum event time of everything before it; the feeder then turns
every row into a tuple, routes it, packs it, writes it, and Spark shuffles it to its
key group, which unpacks it again. For W2 that was half the bridge's Python work.
Parquet is columnar: the event times of a whole file are one column, cheap to read
apart. So at deployment the planner reads only the event-time column of every file
(in order), works out where the source's watermarks go exactly as the runtime's
core places them (`watermark_rows`: E29, the lag and the minimum gap), and
publishes one row per (part, key group): the part's file, row groups and
watermarks. Each key group's task reads the part's columns itself, keeps its own
keys' rows (a filter over whole columns), and feeds its window the same tuples,
watermarks and window marks, in the same order, the feeder would have sent it.

Order keys. Item ``k`` of the source's stream (its tuples and per-file window marks,
counted from 0) has sequence number ``2k + 1``; a watermark placed after tuple
``k`` has ``2k + 2``; the stream's first time mark 0 and its end (the maximum
watermark, then final) ``2K + 1`` and ``2K + 2``. Every group numbers every item
the same way, so the driver stage merges the groups' output as it merges the
feeder's.

Where it applies (`group_read_plan` says why not otherwise, and the source stays
in the feeder): the graph's only source is a `ParquetSource` with event time (not
manual watermarks) feeding the first keyed stage directly, whose windows are all
timeInterval; its partition key is an attribute of integer or string type; the
files hold no nulls and their columns fit the declared schema exactly (so no
tuple the runtime would refuse reaches a window here).
"""

from __future__ import annotations

import json
import os
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..graph import FrozenGraph, Punct, Watermark
from ..windows import EVENT_TIME_MAX, TimeIntervalSpec
from ._reads import _COMPLETE, _digest_before, parts_published, write_batch_file
from ._rows import KIND_FINAL, KIND_TIME, KIND_WATERMARK, decode, encode, source_ord

__all__ = ["KIND_READ", "GroupReader", "changed_since_planned", "group_read_plan", "key_groups",
           "publish_group_parts", "reader_of", "watermark_rows"]

KIND_READ = 7  # a row naming a part of a ParquetSource that the key group reads itself

# Arrow types whose every value passes the schema check of these SPL types.
_FITS = {"int8": {"int8", "int16", "int32", "int64"}, "int16": {"int16", "int32", "int64"},
         "int32": {"int32", "int64"}, "int64": {"int64", "timestamp"},
         "uint8": {"uint8", "uint16", "uint32", "uint64", "int16", "int32", "int64"},
         "uint16": {"uint16", "uint32", "uint64", "int32", "int64"},
         "uint32": {"uint32", "uint64", "int64"}, "uint64": {"uint64"},
         "float": {"float32"}, "double": {"float64"}, "bool": {"boolean"},
         "string": {"rstring", "ustring"}, "large_string": {"rstring", "ustring"},
         "binary": {"blob"}, "large_binary": {"blob"}}
_INTS = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32"})
_KEY_TYPES = _INTS | {"string", "large_string"}
_LIMIT = (-(1 << 61), 1 << 61)


@dataclass(frozen=True)
class GroupReader:
    """What a key group needs to read its share of a part (pickled into its task): the source's
    index, its partition key, the number of groups and their labels, the columns read."""

    source: str
    index: int
    key: str
    labels: tuple[int, ...]
    columns: tuple[str, ...]
    event_time: str

    def part(self, data: bytes, label: int, at: int) -> tuple[list[Any], list[int], dict[int, bytes], bytes]:
        """The items of part ``data`` for group ``label``, stamped ``at``: (batch, positions of
        its control items, the order key of each control item and of each run's last tuple,
        the order key of the part's last item)."""
        import numpy as np
        import pyarrow.parquet as pq  # type: ignore[import-untyped]

        from ..operators import ParquetSource  # (not at import: the feeder's process needs none of it)

        path, row_groups, pos0, n, after, values, ends_file, crc = decode(data)
        table = pq.ParquetFile(path).read_row_groups(row_groups, columns=list(self.columns))
        if table.num_rows != n or _times_crc(table.column(self.event_time).to_numpy()) != crc:
            raise RuntimeError(f"source {self.source!r}: {path!r} row groups {row_groups} are not "
                               f"what was planned ({n} rows then, {table.num_rows} now, or other "
                               "event times): the file changed under the query")
        groups = len(self.labels)
        mine = np.flatnonzero(key_groups(table.column(self.key), groups) == self.labels.index(label)) \
            if groups > 1 else np.arange(n)
        rows = ParquetSource.tuples_of(table.take(mine) if groups > 1 else table)
        wm_after = np.frombuffer(after, dtype="<i8")
        cuts = np.searchsorted(mine, wm_after, side="right").tolist()  # my tuples before each
        mine_list = mine.tolist()
        index = self.index
        batch: list[Any] = []
        controls: list[int] = []
        causes: dict[int, bytes] = {}
        done = 0
        new, set_value = object.__new__, _SET_VALUE
        for cut, row, value in zip(cuts, wm_after.tolist(), np.frombuffer(values, dtype="<i8").tolist(),
                                   strict=True):
            if cut > done:
                batch += rows[done:cut]
                causes[len(batch) - 1] = source_ord(at, index, 2 * (pos0 + mine_list[cut - 1]) + 1)
                done = cut
            controls.append(len(batch))
            causes[len(batch)] = source_ord(at, index, 2 * (pos0 + row) + 2)
            mark = new(Watermark)
            set_value(mark, value)
            batch.append(mark)
        if done < len(rows):
            batch += rows[done:]
            causes[len(batch) - 1] = source_ord(at, index, 2 * (pos0 + mine_list[-1]) + 1)
        last = source_ord(at, index, 2 * (pos0 + n - 1) + (2 if len(wm_after) and wm_after[-1] == n - 1
                                                          else 1)) if n else b""
        if ends_file:  # the file's window mark, item pos0 + n
            controls.append(len(batch))
            last = causes[len(batch)] = source_ord(at, index, 2 * (pos0 + n) + 1)
            batch.append(Punct.WINDOW)
        return batch, controls, causes, last


_SET_VALUE = Watermark.__dict__["value"].__set__


def key_groups(column: Any, groups: int) -> Any:
    """Each row's key group (`_keyed.group_of`) for a column of int or string keys, as a numpy
    array: ints modulo the groups (Python's modulo, as numpy's), strings by their encoding's
    crc32, worked out once per distinct key."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    if pa.types.is_integer(column.type):
        return np.mod(column.to_numpy(), groups)
    uniq = pc.unique(column)
    of = np.array([zlib.crc32(encode(k)) % groups for k in uniq.to_pylist()], dtype=np.int64)
    return of[pc.index_in(column, uniq).to_numpy()]


def watermark_rows(times: Any, state: tuple[int | None, int | None], lag: int, gap: int
                   ) -> tuple[list[int], list[int], tuple[int | None, int | None]]:
    """Where an event-time source sends its watermarks among tuples with event times ``times``
    (a numpy int64 array), given ``state`` = (its watermark, the last it sent) before them: the
    index of the tuple each follows, their values, and the state after. The runtime's rule
    (`core._submit._emit_timed`, E29): each tuple moves the watermark to the running maximum
    less the lag; one is sent after the first tuple that takes it a minimum gap past the last
    one sent. Tested against the core itself."""
    import numpy as np

    after: list[int] = []
    values: list[int] = []
    watermark, last = state
    n = len(times)
    if not n:
        return after, values, state
    top = np.maximum.accumulate(times)
    start = 0
    while True:
        if last is None and watermark is None:
            i = 0
        else:
            need = watermark + 1 if last is None else last + gap  # type: ignore[operator]
            if watermark is not None and need <= watermark:
                need = watermark + 1
            i = start + int(np.searchsorted(top[start:], need + lag, side="left"))
            if i >= n:
                break
        start = i + 1
        watermark = int(top[i]) - lag
        if last is None or watermark > last:
            after.append(i)
            values.append(watermark)
            last = watermark
        if start >= n:
            break
    candidate = int(top[-1]) - lag
    if watermark is None or candidate > watermark:
        watermark = candidate
    return after, values, (watermark, last)


def group_read_plan(graph: FrozenGraph, source: str, keyed: str, *, pre_chain: bool,
                    join: bool) -> str | None:
    """Why source ``source`` cannot be read by the key groups of ``keyed`` (None: it can)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ..operators import ParquetSource

    odef = graph.operator(source)
    src = odef.operator
    if not isinstance(src, ParquetSource):
        return "not a ParquetSource"
    et = odef.event_time
    if et is None or et.manual:
        return "no event time (a ParquetSource without it is read in the feeder)" if et is None \
            else "manual watermarks"
    if pre_chain or join:
        return "operators between it and the keyed stage (they run where the source's rows are)"
    inp = graph.operator(keyed).inputs[0]
    if not all(isinstance(i.window, TimeIntervalSpec) for i in graph.operator(keyed).inputs if i.windowed):
        return f"{keyed!r} has a window that is not timeInterval"
    if not isinstance(inp.partition_by, str):
        return f"{keyed!r} is partitioned by a function (a key column is needed)"
    schema = graph.stream_schema(source, 0)
    try:
        files = src.files()
    except Exception as exc:
        return f"its files cannot be listed ({exc})"
    if not files:
        return "no files"
    names: list[str] | None = None
    for path in files:
        try:
            meta = pq.ParquetFile(path)
        except Exception as exc:
            return f"{path!r} cannot be read as Parquet ({exc})"
        arrow = meta.schema_arrow
        cols = list(src.columns) if src.columns is not None else list(arrow.names)
        if names is None:
            names = cols
        elif cols != names:
            return f"{path!r} has other columns than {files[0]!r}"
        for c in cols:
            if c not in arrow.names:
                return f"{path!r} has no column {c!r}"
            kind = str(arrow.field(c).type)
            if schema is not None and schema.type_of(c) not in _FITS.get(kind, ()):
                return (f"column {c!r} of {path!r} is {kind}, not a type that always fits "
                        f"{schema.type_of(c)!r}")
            if c == et.attribute and not pa.types.is_integer(arrow.field(c).type):
                return f"event-time column {c!r} of {path!r} is {kind}, not an integer"
            if c == inp.partition_by and kind not in _KEY_TYPES:
                return f"key column {c!r} of {path!r} is {kind} (an integer or a string is needed)"
        md = meta.metadata
        for rg in range(md.num_row_groups):
            if not md.row_group(rg).num_rows:
                continue  # (an empty file's one row group records no statistics)
            for j in range(md.num_columns):
                col = md.row_group(rg).column(j)
                stats = col.statistics
                if col.path_in_schema not in cols:
                    continue
                if stats is None or not stats.has_null_count or stats.null_count:
                    return f"{path!r} may hold nulls in column {col.path_in_schema!r}"
                if col.path_in_schema == et.attribute and (
                        not stats.has_min_max or not _LIMIT[0] <= stats.min <= stats.max <= _LIMIT[1]):
                    # (the planned watermarks' sums stay in int64: none near its limits)
                    return f"{path!r}: event times near the int64 limits, or not recorded"
    assert names is not None
    if schema is not None and list(schema.names) != names:
        return f"its declared schema's attributes {list(schema.names)} are not the files' columns {names}"
    if et.attribute not in names or inp.partition_by not in names:
        return "the event-time or key attribute is not a column of its files"
    return None


def reader_of(graph: FrozenGraph, source: str, keyed: str, labels: Sequence[int]) -> GroupReader:
    src: Any = graph.operator(source).operator
    files = src.files()
    import pyarrow.parquet as pq

    cols = src.columns if src.columns is not None else pq.ParquetFile(files[0]).schema_arrow.names
    key = graph.operator(keyed).inputs[0].partition_by
    assert isinstance(key, str)
    et = graph.operator(source).event_time
    assert et is not None
    return GroupReader(source, 0, key, tuple(labels), tuple(cols), et.attribute)


def publish_group_parts(directory: str, graph: FrozenGraph, source: str, labels: Sequence[int], *,
                        index: int, max_rows: int) -> None:
    """The source's parts, one spool file per micro-batch holding a row per key group for each
    part (its file, row groups, first stream position, rows, watermarks), the stream's start
    time mark first and its end (the maximum watermark, final) last. Written once; a restart
    reads the same files (Spark's offset log names those it took)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    if parts_published(directory):
        return
    odef = graph.operator(source)
    src: Any = odef.operator
    et = odef.event_time
    assert et is not None
    lag, gap = et.ticks(et.lag_ns), et.ticks(et.minimum_gap_ns)
    state: tuple[int | None, int | None] = (None, None)
    batches: list[list[tuple[Any, ...]]] = []  # a micro-batch's rows, about max_rows source rows
    filled = 0
    pos = 0  # stream position of the next item
    start_row = [(source_ord(0, index, 0), KIND_TIME, 0, 0, None)]
    fingerprints: dict[str, Any] = {}
    for path in map(os.path.abspath, src.files()):  # (the executors' working directory may differ)
        pf = pq.ParquetFile(path)
        md = pf.metadata
        size = os.path.getsize(path)  # and its footer's digest: its last bytes, where it ends
        fingerprints[path] = {"size": size, "tail": _digest_before(path, size)}
        cut: list[list[int]] = [[]]
        rows_in: list[int] = [0]
        for rg in range(md.num_row_groups):
            if rows_in[-1] and rows_in[-1] + md.row_group(rg).num_rows > max_rows:
                cut.append([])
                rows_in.append(0)
            cut[-1].append(rg)
            rows_in[-1] += md.row_group(rg).num_rows
        for k, (rgs, n) in enumerate(zip(cut, rows_in, strict=True)):
            times = pf.read_row_groups(rgs, columns=[et.attribute]).column(0).to_numpy() if n \
                else np.empty(0, dtype=np.int64)
            after, values, state = watermark_rows(times.astype(np.int64), state, lag, gap)
            ends = k == len(cut) - 1
            data = encode([path, rgs, pos, n, np.asarray(after, dtype="<i8").tobytes(),
                           np.asarray(values, dtype="<i8").tobytes(), ends, _times_crc(times)])
            row = (source_ord(0, index, 2 * pos + 1), KIND_READ, 0, 0, data)
            if batches and filled + n <= max_rows:  # small files share a micro-batch
                batches[-1].append(row)
                filled += n
            else:
                batches.append([row])
                filled = n
            pos += n + (1 if ends else 0)
    batches[0][:0] = start_row
    batches[-1] += [(source_ord(0, index, 2 * pos + 1), KIND_WATERMARK, 0, EVENT_TIME_MAX, None),
                    (source_ord(0, index, 2 * pos + 2), KIND_FINAL, 0, 0, None)]
    os.makedirs(directory, exist_ok=True)
    base_ms = time.time_ns() // 1_000_000 - len(batches) - 1
    for n, rows in enumerate(batches):
        copies = [(*row, label) for row in rows for label in labels]
        table = pa.table({
            "ord": pa.array([r[0] for r in copies], pa.binary()),
            "kind": pa.array([r[1] for r in copies], pa.int32()),
            "time": pa.array([r[2] for r in copies], pa.int64()),
            "value": pa.array([r[3] for r in copies], pa.int64()),
            "data": pa.array([r[4] for r in copies], pa.binary()),
            "grp": pa.array([r[5] for r in copies], pa.int32())})
        write_batch_file(directory, n, base_ms, table)
    with open(os.path.join(directory, _COMPLETE), "w") as f:
        json.dump({"batches": len(batches), "files": fingerprints}, f)


def _times_crc(times: Any) -> int:
    """A CRC of a part's event times as planned: a file rewritten under the query with the same
    size and footer, but other times, would put the planned watermarks after other rows."""
    import numpy as np

    return zlib.crc32(np.ascontiguousarray(times, dtype="<i8").tobytes())


def changed_since_planned(directory: str, listed: Sequence[str]) -> str | None:
    """Why the parts under ``directory`` do not fit the source's files now, ``listed`` (None:
    they do): a planned file whose size or footer differs (a restart would read other rows
    under the planned watermarks), or a file that was not there when the parts were planned
    (it would never be read: the runtime, which lists the files when reading starts, would)."""
    try:
        with open(os.path.join(directory, _COMPLETE)) as f:
            files = json.load(f).get("files", {})
    except (OSError, ValueError):
        return None
    new = [path for path in map(os.path.abspath, listed) if path not in files]
    if new:
        names = ", ".join(repr(p) for p in new[:3]) + (f" and {len(new) - 3} more" if len(new) > 3 else "")
        return (f"cannot resume: {names} appeared since the checkpoint planned its reads (the files "
                "are planned once, when the query first runs, and these would never be read). "
                "Move them out to go on, or give the job a new checkpoint directory to read them")
    for path, entry in files.items():
        try:
            size = os.path.getsize(path)
            same = size == entry["size"] and _digest_before(path, size) == entry["tail"]
        except OSError:
            return f"cannot resume: {path!r}, planned when the checkpoint began, is gone"
        if not same:
            return (f"cannot resume {path!r}: it is not the file the checkpoint planned its reads "
                    "from (its size or footer differ): it was replaced or rewritten. Put that file "
                    "back to go on, or give the job a new checkpoint directory to read the new one")
    return None
