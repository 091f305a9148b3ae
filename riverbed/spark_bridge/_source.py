"""A riverbed source's output as rows for Spark.

The source operator runs inside a one-source job on a virtual clock: a
simulated or file source's own pacing (``sleep_until``) becomes the time
stamped on its items, and its watermarks (SPL E26, lag and minimum gap) are
computed by the runtime's own code. `source_rows` turns what it emits into
rows (`_rows`), routed to key groups in bundles where the query is keyed;
`_feeder` publishes them for Spark's file source.

The rows are the same every time the source is run, because a source the
bridge accepts is deterministic (the plan refuses sources that wait on the
outside world): after a restart the feeder runs a fresh copy and skips what
it had published.
"""

from __future__ import annotations

import base64
import itertools
import operator
import queue
import threading
from array import array
from collections.abc import Callable, Iterator
from typing import Any

from ..core import MarkedBatch, SyncGraph, split_marked
from ..graph import Connection, FrozenGraph, InputPort, Operator, OperatorDef, Punct, Source
from ..runtime import Job, VirtualClock, run_virtual
from ._keyed import group_of
from ._rows import (
    KIND_BUNDLE,
    KIND_FINAL,
    KIND_TIME,
    KIND_TUPLE,
    KIND_WATERMARK,
    KIND_WINDOW,
    encode,
    kind_of,
    pack_run,
    pack_seqs,
    source_ord,
)

__all__ = ["SourceItems", "arrow_batch", "dump_payload", "exit_items", "item_rows", "load_payload",
           "source_rows"]

BUNDLE_ITEMS = 4096  # source items per round of bundles (one bundle row per key group a round)
_END = object()
# An item holding a list of tuples submitted at one time (generated sources hand over whole
# batches): ``(TUPLES, time, 0, [tuple, ...])``, the same as one KIND_TUPLE item per tuple.
TUPLES = _TUPLES = -1
# The same, for tuples the core checked against a schema of scalar attributes only
# (`scalar_schema`): routed into bundles, a run of them travels as one marshal string (`_rows.pack_run`).
CHECKED = _CHECKED = -2
_TUPLE_KINDS = (KIND_TUPLE, _TUPLES, _CHECKED)
# SPL types whose checked values msgpack, marshal and pickle give back alike (`_rows.pack_run`):
# ints of at most 64 bits, floats, bools, strings, blobs (not timestamps: any int is one).
_SCALAR_TYPES = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                           "float32", "float64", "boolean", "rstring", "ustring", "blob"})


def dump_payload(obj: Any) -> str:
    from pyspark import cloudpickle

    return base64.b64encode(cloudpickle.dumps(obj)).decode("ascii")  # type: ignore[no-untyped-call]


def load_payload(text: str) -> Any:
    import pickle

    return pickle.loads(base64.b64decode(text))


class _Capture(Operator):
    """The one sink of the source's job: hands every item, with its time, to the reader."""

    def __init__(self, out: queue.Queue[Any]) -> None:
        self.out = out

    def on_tuple(self, tup: Any, port: int) -> None:
        self.out.put((KIND_TUPLE, self.context.now(), 0, tup))

    def on_punct(self, punct: Punct, port: int) -> None:
        kind = KIND_WINDOW if punct is Punct.WINDOW else KIND_FINAL
        self.out.put((kind, self.context.now(), 0, None))

    def on_watermark(self, value: int) -> None:
        self.out.put((KIND_WATERMARK, self.context.now(), value, None))


class SourceItems:
    """Runs source ``name`` of ``graph`` in a thread on a virtual clock; yields its items.

    Items are ``(kind, time, value, tuple)``; the last is the final mark.
    The queue between the job and the reader is bounded: the job waits for
    the reader, so a long source is never held in memory whole.
    """

    def __init__(self, graph: FrozenGraph, name: str, *, buffer: int = 65536) -> None:
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=buffer)
        odef = graph.operator(name)
        capture = OperatorDef("__capture", _Capture(self._queue), "sink",
                              (InputPort((Connection(name, 0),)),), ())
        self._graph = FrozenGraph(graph.name, (odef, capture), graph.params)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"riverbed-source-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        clock = VirtualClock()
        try:
            run_virtual(Job(self._graph, clock=clock).run(), clock)
        except BaseException as exc:  # handed to the reader, which raises it in Spark
            self._error = exc
        self._queue.put(_END)

    def __iter__(self) -> Iterator[tuple[int, int, int, Any]]:
        while True:
            item = self._queue.get()
            if item is _END:
                if self._error is not None:
                    raise self._error
                return
            yield item


Row = tuple[bytes, int, int, int, bytes | None]


def scalar_schema(graph: FrozenGraph, name: str) -> bool:
    """Operator ``name`` declares its output port 0's schema, with scalar attributes only
    (`_SCALAR_TYPES`): the core checks every tuple it sends there, so each is a dict holding
    exactly those attributes, each of its declared type."""
    schema = graph.stream_schema(name, 0) if graph.operator(name).outputs else None
    return schema is not None and all(t.strip() in _SCALAR_TYPES for _, t in schema.attributes)


def generated_items(graph: FrozenGraph, name: str, chunk: int = 4096) -> Iterator[tuple[int, int, int, Any]]:
    """A ``generate()`` source driven synchronously (no job, no thread): its items at time 0,
    with the watermarks the runtime's own code derives from them, then final. Its port 0's
    tuples come as `CHECKED` lists where the core checks them (`scalar_schema`)."""
    host = SyncGraph(graph, [name])
    checked = 0 if scalar_schema(graph, name) else None
    # A marked batch (tuples with the watermarks and window marks submitted among them) leaves
    # whole and `exit_items` slices it where its marks are: splitting it in the host walks
    # every tuple (a third of the feeder's time in the core's emit, for an event-time source).
    host.split_marked_exits = False
    core = host.core(name)
    items = iter(core.guard(core.op.generate))  # type: ignore[attr-defined]
    ended = False
    while not ended:
        batch: list[Any] = []
        core.guard(core.pull_items, None, items, chunk, batch)  # names the source
        if not batch:
            break
        ended = host.emit(name, batch)  # as in the runtime: a final item ends the source
        yield from exit_items(host, checked)
    host.end(name)
    yield from exit_items(host, checked)


def exit_items(host: SyncGraph, checked: int | None = None) -> Iterator[tuple[int, int, int, Any]]:
    """What left ``host`` since it was last asked, as feeder items at the host's time; tuples
    sent on port ``checked`` come as `CHECKED` lists (the caller knows that port's schema holds
    scalar attributes only, `scalar_schema`)."""
    now = host.clock.now()
    for _op, port, entry in host.take_exits():
        if type(entry) is list:
            if entry:
                yield (_CHECKED if port == checked else _TUPLES), now, 0, entry
        elif type(entry) is MarkedBatch:
            yield from _marked_items(entry, now, _CHECKED if port == checked else _TUPLES)
        else:
            kind, value = kind_of(entry)
            yield kind, now, value, None


def _marked_items(batch: MarkedBatch, now: int, tuples: int = _TUPLES) -> Iterator[tuple[int, int, int, Any]]:
    """A marked batch as feeder items: each run of tuples between its marks as one list (cut at
    the marks' known positions, ``controls``) of kind ``tuples``, each mark alone."""
    controls = batch.controls
    if controls is None:  # positions unknown: walk it
        for entry in split_marked(batch):
            if type(entry) is list:
                yield tuples, now, 0, entry
            else:
                kind, value = kind_of(entry)
                yield kind, now, value, None
        return
    start = 0
    for i in controls:
        if i > start:
            yield tuples, now, 0, batch[start:i]
        kind, value = kind_of(batch[i])
        yield kind, now, value, None
        start = i + 1
    if start < len(batch):
        yield tuples, now, 0, batch[start:]


def _synchronous(src: Any) -> bool:
    return type(src).generate is not Source.generate and type(src).run is Source.run


Route = tuple[Callable[[Any], Any] | None, int, int, list[int]]


def route_of(graph: FrozenGraph, keyed: str, groups: int, bundle: int = 0,
             labels: list[int] | None = None) -> Route:
    """How a source routes rows straight to key groups (keyed mode without a stateless chain):
    the key function, the number of groups, the source items per round of bundles, and the
    value of the group column for each group (`spread_labels`)."""
    partition_by = graph.operator(keyed).inputs[0].partition_by
    bundle = bundle or BUNDLE_ITEMS
    labels = labels or list(range(groups))
    if partition_by is None or groups == 1:
        return None, groups, bundle, labels
    if isinstance(partition_by, str):
        return operator.itemgetter(partition_by), groups, bundle, labels
    return partition_by, groups, bundle, labels


def source_rows(graph: FrozenGraph, name: str, index: int, *, route: Route | None = None,
                time_mark_ns: int = 1_000_000_000) -> Iterator[tuple[Any, ...]]:
    """Source ``name``'s items as rows (see `_rows`), numbered from 0.

    A time mark first (every key group starts, and activates its windows, at
    the source's start time), then one whenever the stamped time moved on by
    ``time_mark_ns`` since the last: a key group whose keys are quiet still
    sees time pass, so its time-policy windows fire no later than that.
    With ``route`` (key function, groups) each row also names its key group,
    and marks are copied to every group, so no routing stage is needed.
    """
    src = graph.operator(name).operator
    items = generated_items(graph, name) if _synchronous(src) else iter(SourceItems(graph, name))
    yield from item_rows(items, index, route=route, time_mark_ns=time_mark_ns)


def item_rows(items: Iterator[tuple[int, int, int, Any]], index: int, *, route: Route | None = None,
              time_mark_ns: int = 1_000_000_000, seq0: int = 0) -> Iterator[tuple[Any, ...]]:
    """Items ``(kind, time, value, tuple)`` (or a list of tuples at one time, kind `TUPLES`) of
    source ``index`` as rows, as `source_rows` makes them, their sequence numbers counted from
    ``seq0``: a part of a source read apart from the rest (`_reads`) numbers its rows after
    the parts before it, so the rows of all parts sort in the source's order."""
    first = next(items, None)
    if first is None:
        return
    if route is None:
        yield from _plain_rows(first, items, index, time_mark_ns, seq0)
    else:
        yield from _routed_rows(first, items, index, time_mark_ns, key_of=route[0], groups=route[1],
                                bundle=route[2], labels=route[3], seq0=seq0)


# The time every source starts at: its feeder's clock (`generated_items`' host, `SourceItems`'
# VirtualClock) starts at 0, as `riverbed run --virtual-clock`'s does. The first time mark says
# so before the first item, which may come later (a paced source): a key group started at the
# first item's time put an unpartitioned time window's panes at [0.4, 1.4) instead of [0, 1).
# Only the source's own start (``seq0`` 0): a later part of a file read in ranges starts at its
# first item, or its rows, ordered by that mark, went ahead of the parts before it.
START_NS = 0


def _first_mark(first: Any, seq0: int) -> int:
    return START_NS if seq0 == 0 else int(first[1])


def _plain_rows(first: Any, items: Iterator[Any], index: int, time_mark_ns: int,
                seq0: int = 0) -> Iterator[Row]:
    seq = seq0
    mark = _first_mark(first, seq0)
    yield source_ord(mark, index, seq), KIND_TIME, mark, 0, None
    for kind, time, value, tup in _one_by_one(itertools.chain([first], items)):
        seq += 1
        if time - mark >= time_mark_ns:
            mark = time
            yield source_ord(time, index, seq), KIND_TIME, time, 0, None
            seq += 1
        data = encode(tup) if kind == KIND_TUPLE else None
        yield source_ord(time, index, seq), kind, time, value, data


def _one_by_one(items: Iterator[tuple[int, int, int, Any]]) -> Iterator[tuple[int, int, int, Any]]:
    for item in items:
        if item[0] == _TUPLES or item[0] == _CHECKED:
            time = item[1]
            for tup in item[3]:
                yield KIND_TUPLE, time, 0, tup
        else:
            yield item


def _routed_rows(first: Any, items: Iterator[Any], index: int, time_mark_ns: int, *,
                 key_of: Callable[[Any], Any] | None, groups: int, bundle: int,
                 labels: list[int], seq0: int = 0) -> Iterator[tuple[Any, ...]]:
    """Rows for key groups: every ``bundle`` source items, one bundle row per group holding,
    in order, its tuples and a copy of every mark (see `_rows.KIND_BUNDLE`).

    A group's tuples with one stamped time go into one run (one list of tuples, one array of
    sequence numbers): per tuple this costs two appends, not a sort key and a list, and the
    key group decodes them with as few objects. A run of `CHECKED` tuples only travels as a
    marshal string (`_rows.pack_run`).
    """
    entries: list[list[list[Any]]] = [[] for _ in range(groups)]
    # each group's open run: [KIND_TUPLE, time, seqs, tuples, checked] (`_bundles` drops the flag)
    runs: list[list[Any] | None] = [None] * groups
    seq = seq0  # a multiple of `bundle` (rounds end where they would from 0)
    mark = _first_mark(first, seq0)
    for lst in entries:
        lst.append([KIND_TIME, mark, 0, seq])
    for kind, time, value, payload in itertools.chain([first], items):
        if kind in _TUPLE_KINDS:
            tuples = (payload,) if kind == KIND_TUPLE else payload
            checked = kind == _CHECKED
            if time - mark >= time_mark_ns:  # before the first tuple (the others share its time)
                seq += 1
                mark = time
                for g, lst in enumerate(entries):
                    lst.append([KIND_TIME, time, 0, seq])
                    runs[g] = None
            n, pos = len(tuples), 0
            for g, run in enumerate(runs):  # a run holds tuples of one stamped time
                if run is not None:
                    if run[1] != time:
                        runs[g] = None
                    elif not checked:
                        run[4] = False  # unchecked tuples join it: it travels as msgpack
            while pos < n:
                take = min(n - pos, bundle - seq % bundle)  # up to the end of this round
                part = tuples[pos:pos + take] if pos or take < n else tuples
                for tup, g in zip(part, _groups(part, key_of, groups), strict=False):
                    seq += 1
                    run = runs[g]
                    if run is None:
                        run = runs[g] = [KIND_TUPLE, time, array("Q"), [], checked]
                        entries[g].append(run)
                    run[2].append(seq)
                    run[3].append(tup)
                pos += take
                if seq % bundle == 0:
                    yield from _bundles(entries, runs, labels, index, last=seq, time=time)
            continue
        seq += 1
        if time - mark >= time_mark_ns:
            mark = time
            for g, lst in enumerate(entries):
                lst.append([KIND_TIME, time, 0, seq])
                runs[g] = None
            seq += 1
        for g, lst in enumerate(entries):
            lst.append([kind, time, value, seq])
            runs[g] = None
        if seq % bundle == 0:
            yield from _bundles(entries, runs, labels, index, last=seq, time=time)
    if seq % bundle:
        yield from _bundles(entries, runs, labels, index, last=seq, time=time)


def _groups(tuples: Any, key_of: Callable[[Any], Any] | None, groups: int) -> Any:
    """Each tuple's key group (`group_of`, its int case inlined), in one comprehension where
    every key can be read; a tuple without a usable key goes to group 0, where its window raises
    (or routes it) as in the runtime. (Picking each group's share with `itertools.compress`
    masks, no Python code per tuple, cost as many instructions with two groups.)"""
    if key_of is None:
        return itertools.repeat(0)
    try:
        return [k % groups if type(k) is int else group_of(k, groups) for k in map(key_of, tuples)]
    except (KeyError, TypeError, IndexError):
        return [_group_or_0(tup, key_of, groups) for tup in tuples]


def _group_or_0(tup: Any, key_of: Callable[[Any], Any], groups: int) -> int:
    try:
        return group_of(key_of(tup), groups)
    except (KeyError, TypeError, IndexError):
        return 0


def _bundles(entries: list[list[list[Any]]], runs: list[list[Any] | None], labels: list[int],
             index: int, *, last: int, time: int) -> Iterator[tuple[Any, ...]]:
    """One bundle per group for the round that ended with item ``last``, each closed by a time
    mark at the round's time: every group gets a row every round, so micro-batches (cut by row
    count) hold the same rounds for every group, and a quiet group's timers fire with the others'."""
    for g, lst in enumerate(entries):
        lst.append([KIND_TIME, time, 0, last])
        head = lst[0]
        first_seq = head[2][0] if head[0] == KIND_TUPLE else head[3]
        for entry in lst:
            if entry[0] == KIND_TUPLE:
                entry[2] = pack_seqs(entry[2])
                if entry.pop():
                    entry[3] = pack_run(entry[3])
        yield source_ord(head[1], index, first_seq), KIND_BUNDLE, head[1], 0, encode([index, lst]), labels[g]
        lst.clear()
        runs[g] = None


_ARROW_TYPES = {"BINARY": "binary", "INT": "int32", "LONG": "int64"}


def arrow_batch(rows: list[tuple[Any, ...]], ddl: str) -> Any:
    """Rows as one Arrow record batch: Spark takes it without converting row by row."""
    import pyarrow as pa  # type: ignore[import-untyped]

    fields = [part.strip().split() for part in ddl.split(",")]
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(fields)
    arrays = [pa.array(col, type=getattr(pa, _ARROW_TYPES[t.upper()])())
              for col, (_, t) in zip(columns, fields, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, names=[n for n, _ in fields])
