"""The keyed stage: a windowed operator hosted per key group in Spark's stateful processing.

Each key group (a hash of the partition key, modulo the number of groups)
holds one instance of the operator with its windows, exactly as the runtime
would run it, but seeing only its keys' tuples. Its state is the runtime's
own snapshot (operator, windows, watermarks, ended connections, clock),
stored as one binary value per group in Spark's RocksDB state store, read
and written once per micro-batch (``applyInPandasWithState``; see
`group_function` for why not ``transformWithStateInPandas``).

Rows are sorted by their order key first: Spark does not keep per-key order
inside a micro-batch. Marks and watermarks reach every group (the routing
step copies them), so a group sees the whole stream's control items in order.
"""

from __future__ import annotations

import bisect
import functools
import gc
import numbers
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol

from ..checkpoint import decode_value, encode_value
from ..core import SyncGraph
from ..graph import FrozenGraph
from ..windows import TimeIntervalWindow
from ._group_reads import KIND_READ, GroupReader
from ._rows import (
    KIND_BUNDLE,
    KIND_COMMAND,
    KIND_TIME,
    KIND_TUPLE,
    decode,
    derived_ord,
    encode,
    item_of,
    kind_of,
    run_tuples,
    seq_at,
    source_ord,
    unpack_seqs,
)
from ._runs import FillSplitter, feed_cut

__all__ = [
    "KEYED_OUT_COLUMNS",
    "KEYED_OUT_DDL",
    "ROUTED_DDL",
    "STATE_DDL",
    "Hosted",
    "ItemHooks",
    "KeyGroupError",
    "feed_segments",
    "group_function",
    "group_of",
    "host_group",
    "make_router",
    "rows_of",
    "same_key",
    "spread_labels",
]

ROUTED_DDL = "ord BINARY, kind INT, time LONG, value LONG, data BINARY, grp INT"
KEYED_OUT_DDL = "ord BINARY, kind INT, time LONG, value LONG, data BINARY, stream INT, chan INT"
KEYED_OUT_COLUMNS = ("ord", "kind", "time", "value", "data", "stream", "chan")
STATE_DDL = "host BINARY"  # a key group's state: its host's snapshot


def spread_labels(spark: Any, groups: int) -> list[int]:
    """Values of the group column that Spark's shuffle puts into different partitions.

    ``groupBy`` places a key by a Murmur3 hash modulo the shuffle partitions;
    the plain numbers 0..G-1 can all land in one partition (0 and 1 do, with
    two), and then one task hosts every group while the other core idles.
    """
    partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
    if groups <= 1:
        return [0]
    known = _SPREAD.get((partitions, groups))
    if known is not None:  # Spark's hash is fixed: a Spark job at every deployment is not needed
        return list(known)
    rows = spark.range(0, 64 * groups).selectExpr(
        "cast(id as int) as g", f"pmod(hash(cast(id as int)), {partitions}) as p").collect()
    by_partition: dict[int, list[int]] = {}
    for r in rows:
        by_partition.setdefault(int(r["p"]), []).append(int(r["g"]))
    labels: list[int] = []
    while len(labels) < groups:  # round robin over the partitions
        for p in sorted(by_partition):
            if by_partition[p] and len(labels) < groups:
                labels.append(by_partition[p].pop(0))
    _SPREAD[(partitions, groups)] = tuple(labels)
    return labels


_SPREAD: dict[tuple[int, int], tuple[int, ...]] = {}  # (shuffle partitions, groups) -> labels


def _group_of_row(key_of: Callable[[Any], Any] | None, data: bytes, groups: int) -> int:
    """A routed tuple's group; one without a usable key goes to group 0, where its window raises
    (or routes it to the error port) as in the runtime."""
    if key_of is None:
        return 0
    try:
        return group_of(key_of(decode(data)), groups)
    except (KeyError, TypeError, IndexError):
        return 0


def group_of(key: Any, groups: int) -> int:
    """A key's group: stable across processes (Python's own str hash is salted per process;
    an int is its own stable hash), and one for keys Python finds equal (`same_key`)."""
    if type(key) is int:
        return key % groups
    if type(key) is not str:
        key = same_key(key)
        if type(key) is int:
            return key % groups
    return zlib.crc32(encode(key)) % groups


def same_key(key: Any) -> Any:
    """One form for each set of keys Python finds equal: the runtime's windows and Join index
    partition by ``==`` and hash, so 3, 3.0, True (for 1) and numpy's int64(3) are one
    partition there, and -0.0 is 0.0. Routed by their encodings they went to different key
    groups, and a keyed Join of an int64 key with a float64 one lost the matches (a review: 11
    of 20 pairs came out, exit 0). Integral numbers become ints, other reals the float equal
    to them where there is one; tuples and lists of keys are made so item by item. (`ROUTING`
    in `_deploy` marks the checkpoints routed so.)"""
    kind = type(key)
    if kind is float:
        return int(key) if key.is_integer() else key
    if kind is tuple or kind is list:
        return [same_key(k) for k in key]
    if kind is str or kind is bytes or not isinstance(key, (numbers.Real, Decimal)):
        return key
    number: Any = key  # (a Real converts with int() and float(); typeshed's Real does not say)
    try:
        whole = int(number)
        if whole == key:
            return whole
        near = float(number)
    except (TypeError, ValueError, OverflowError):  # nan, inf, a Real that will not convert
        return key
    return near if near == key else key


def make_router(graph: FrozenGraph, chain: list[str], entry: tuple[str, int], keyed: str, *,
                groups: int, labels: list[int] | None = None) -> Any:
    """The mapInPandas function: the stateless chain, then each row's key group."""
    inp = graph.operator(keyed).inputs[0]
    partition_by = inp.partition_by
    key_of = (lambda t: t[partition_by]) if isinstance(partition_by, str) else partition_by
    spread = labels or list(range(groups))

    def route(batches: Iterator[Any]) -> Iterator[Any]:
        import pandas as pd  # type: ignore[import-untyped]

        host: SyncGraph | None = None
        last: tuple[bytes, int] | None = None
        columns = ["ord", "kind", "time", "value", "data", "grp"]
        for pdf in batches:
            out: list[tuple[Any, ...]] = []
            for ord_, kind_, time_, value, data in zip(pdf["ord"], pdf["kind"], pdf["time"],
                                                       pdf["value"], pdf["data"], strict=True):
                kind, at = int(kind_), int(time_)
                produced: list[tuple[Any, ...]]
                if chain:
                    if host is None:
                        host = SyncGraph(graph, chain, now=at)
                    host.advance(at)
                    item = item_of(kind, int(value), data)
                    if item is not None:
                        host.feed(*entry, [item] if kind == KIND_TUPLE else item)
                    exits: list[tuple[Any, ...]] = []
                    rows_of(exits, host.take_exits(), ord_, at, ())
                    produced = [(o, k, t, v, None if d is None else encode(d))
                                for o, k, t, v, d, _p in exits]
                    if kind == KIND_TIME:
                        produced.append((ord_, KIND_TIME, at, 0, None))
                else:
                    produced = [(ord_, kind, at, int(value), data)]
                last = (ord_, at)
                for row in produced:
                    if row[1] == KIND_TUPLE:
                        out.append((*row, spread[_group_of_row(key_of, row[4], groups)]))
                    else:
                        out.extend((*row, label) for label in spread)
            yield pd.DataFrame(out, columns=columns)
        if last is not None:  # every group sees this task's time: its timers fire with the others'
            yield pd.DataFrame([(last[0], KIND_TIME, last[1], 0, None, label) for label in spread],
                               columns=columns)

    return route


class ItemHooks(Protocol):
    """What a special host (the trace) adds around each row of a key group."""

    def before(self, host: SyncGraph, kind: int) -> None: ...

    def command(self, host: SyncGraph, data: bytes) -> None: ...


@dataclass(frozen=True)
class Hosted:
    """What a key group hosts: ``members`` of ``graph`` (the windowed operator first, then
    those after it in the same group), fed by stream ``entry``. With ``key``, tuples reaching a
    later windowed member must still belong to this group (``labels[i]`` is group i's label).
    A later stage of a chain (`_stages`) takes its input over ``channels`` parallel groups of
    the stage before, whose window marks are copies (``copied_marks``) or their own events."""

    graph: FrozenGraph
    members: tuple[str, ...]
    entry: tuple[str, int]
    key: str | None = None
    labels: tuple[int, ...] = ()
    channels: int = 1
    copied_marks: bool = True
    entries: tuple[tuple[str, int], ...] = ()  # a keyed Join: stream i's items enter at entries[i]
    reads: GroupReader | None = None  # the group reads its source's parts itself (`_group_reads`)

    def guard(self, label: int) -> tuple[Callable[[str, list[Any]], None] | None, frozenset[str]]:
        key, labels = self.key, self.labels
        later = frozenset(m for m in self.members[1:] if self.graph.operator(m).inputs[0].windowed)
        if key is None or len(labels) < 2 or not later:
            return None, frozenset()
        groups = len(labels)

        def check(operator: str, tuples: list[Any]) -> None:
            for t in tuples:
                try:
                    k = t[key]
                except (KeyError, TypeError, IndexError):
                    continue  # no key: the window raises or routes it, as in the runtime
                if labels[group_of(k, groups)] != label:
                    raise KeyGroupError(
                        f"operator {operator!r}: a tuple with {key}={k!r} reached it in another "
                        f"key group than its key's: the operator before it changed the partition "
                        f"key; run this graph with mode='driver' (riverbed spark run --mode "
                        f"driver, with a new --checkpoint)")

        return check, later


class KeyGroupError(RuntimeError):
    """A keyed stage's tuple left its key group: the graph assumed a key that it does not keep."""


def host_group(hosted: Hosted, hooks: ItemHooks | None, key: tuple[Any, ...],
               rows: list[tuple[Any, ...]], stored: bytes | None, *,
               timer_order: bool = True,
               tail: list[tuple[bytes, int]] | None = None) -> tuple[list[tuple[Any, ...]], bytes]:
    """One key group's micro-batch: restore its host, run its rows in order, store it again.

    ``rows`` are ``(ord, kind, time, value, data)``, in any order. Returns
    the output rows ``(ord, kind, time, value, tuple, port, group, *key[:-1])``
    (tuples not encoded) and the new state. Kept apart from Spark so that it
    can be tested alone.

    What a timer raises is ordered by the timer's time (``timer_order``),
    before the items stamped with that time: where the runtime would have
    raised it, not after the next row that happened to reach this group. The
    trace host turns that off: it attributes events to the step that let time
    pass. ``tail`` (a list) gets (ord, time) of the last item handled.
    """
    graph, members, entry = hosted.graph, list(hosted.members), hosted.entry
    keyed = members[0]
    group = int(key[-1])
    extra = tuple(key[:-1])
    label = f"{keyed}/{group}"
    guard, guarded = hosted.guard(group)
    rows = sorted(rows, key=_first)  # in order already when they come from one source task: linear
    out: list[tuple[Any, ...]] = []
    if stored is not None:
        host = SyncGraph(graph, members, state=decode_value(stored, checkpoint_id=0, key=label),
                         guard=guard, guarded=guarded)
    else:
        host = SyncGraph(graph, members, now=int(rows[0][2]) if rows else 0, guard=guard,
                         guarded=guarded)
        rows_of(out, host.take_exits(), b"", host.clock.now(), (group, *extra))
    runner = host.core(keyed)
    # Tuples into timeInterval windows raise nothing until a watermark: a run of them with one
    # stamped time goes in as one batch (the window's inlined batch path). Into a tumbling count
    # window, a run goes in as batches cut before each tuple that fills its partition (`_runs`).
    batchable = hooks is None and bool(runner.windows) and all(
        isinstance(w, TimeIntervalWindow) for w in runner.windows)
    splitter = FillSplitter.of(graph, host, keyed, members[1:]) if hooks is None and not batchable else None

    cols = (group, *extra)

    def on_timer(when: int) -> None:
        if host.exits:
            rows_of(out, host.take_exits(), source_ord(when, 0, 0), when, cols)

    if hooks is None and splitter is None and timer_order:
        # A segment of rows with one stamped time goes in with one call (`SyncGraph.feed_marked`),
        # its runs and marks apart as below: runs whole into timeInterval windows, each tuple
        # alone into the others (a sliding window's every trigger ordered after its tuple).
        reads = hosted.reads
        last = feed_segments(host, entry, rows, runs=batchable, on_timer=on_timer,
                             emit=lambda exits, cause, at: rows_of(out, exits, cause, at, cols),
                             where=label,
                             read=None if reads is None else functools.partial(reads.part, label=group))
        if tail is not None and last is not None:
            tail.append(last)
        return out, encode_value(host.state(), checkpoint_id=0, key=label)
    items = expand(rows, runs=batchable or splitter is not None)
    timed = on_timer if timer_order else None

    def taken_at(at: int) -> Callable[[bytes], None]:
        return lambda cause: rows_of(out, host.take_exits(), cause, at, cols)

    # Most items (runs into a timeInterval window, watermarks that close no pane) send nothing
    # out: exit rows are made only when the host has exits.
    feed, source, port = host.feed, entry[0], entry[1]
    for it in items:
        ord_, kind, at = it[0], it[1], it[2]
        if kind == _RUN:
            host.advance(at, timed)
            if splitter is not None:
                feed_cut(host, entry, splitter, it[4], ord_of=functools.partial(run_ord, it),
                         taken=taken_at(at), where=label)
                continue
            feed(source, port, it[4])
            if host.exits:
                rows_of(out, host.take_exits(), ord_, at, cols)
            continue
        if splitter is not None:
            splitter.forget()
        if hooks is not None:
            hooks.before(host, KIND_TIME)
        host.advance(at, timed)
        if hooks is not None:
            hooks.before(host, kind)
        if kind == KIND_COMMAND:
            if hooks is None:
                raise ValueError(f"{label}: a command row, but this stage takes no commands")
            hooks.command(host, it[4])
        elif kind == KIND_TUPLE:
            feed(source, port, [it[4]])
        else:
            item = item_of(kind, it[3], None)
            if item is not None:
                feed(source, port, item)
        if host.exits:
            rows_of(out, host.take_exits(), ord_, at, cols)
    if tail is not None and items:
        tail.append((items[-1][0], int(items[-1][2])))
    return out, encode_value(host.state(), checkpoint_id=0, key=label)


def rows_of(out: list[tuple[Any, ...]], exits: list[tuple[str, int, Any]], cause: bytes, time: int,
            cols: tuple[Any, ...]) -> None:
    """Append what the host sent out while handling ``cause`` to ``out`` as output rows ``(ord,
    kind, time, value, tuple, port, *cols)`` (tuples not encoded yet), in the order sent, each
    ordered after ``cause`` (`derived_ord` with 0, 1, 2... in that order)."""
    n = len(out)
    for _op, port, entry in exits:
        if type(entry) is list:
            out.extend((derived_ord(cause, i), KIND_TUPLE, time, 0, tup, port, *cols)
                       for i, tup in enumerate(entry, len(out) - n))
        else:
            kind, value = kind_of(entry)
            out.append((derived_ord(cause, len(out) - n), kind, time, value, None, port, *cols))


Emit = Callable[[list[tuple[str, int, Any]], bytes, int], None]


def feed_segments(host: SyncGraph, entry: tuple[str, int], rows: list[tuple[Any, ...]], *, runs: bool,
                  on_timer: Callable[[int], None], emit: Emit, where: str,
                  read: Callable[..., Any] | None = None) -> tuple[bytes, int] | None:
    """Feed a group's rows (in order; bundles opened) on stream ``entry``, each segment of items
    with one stamped time in one `SyncGraph.feed_marked` call: runs of tuples as batches
    (``runs``; else each tuple alone), window marks, watermarks and final in their places.
    ``emit(exits, cause, time)`` gets what each run, tuple or mark sent out, with the order key
    of its cause (a run's: its last tuple's), as the item-at-a-time loop of `host_group` gives
    it; ``on_timer`` what each timer raised. Returns (ord, time) of the last item, or None.

    A time mark ends a segment (the host advances there, as before any item), and so does a
    bundle's start and end: the item-at-a-time loop fed a run of a bundle apart from the rows
    around it, and what a run raises is ordered after its own last tuple. A part the group reads
    itself (`_group_reads.KIND_READ`, with ``read``) is a segment of its own."""
    source, port = entry
    batch: list[Any] = []
    controls: list[int] = []
    causes: dict[int, Any] = {}  # position -> cause: an ord, or (source index, packed seqs) of a run
    lazy: list[tuple[int, int, bytes]] = []  # one by one: (first position, index, seqs) of each run
    seg_at: int | None = None
    last: tuple[Any, ...] | None = None

    def flush() -> None:
        nonlocal batch, controls, causes, lazy
        if not batch:
            return
        at = seg_at
        assert at is not None
        done = host.feed_marked(source, port, batch, controls, one_by_one=not runs,
                                on_timer=on_timer, at=at)
        for pos, exits in done:
            cause = causes.get(pos)
            if cause is None:  # one tuple of a bundle's run, fed alone
                k = bisect.bisect_right(lazy, pos, key=_first) - 1
                first, index, seqs = lazy[k]
                cause = source_ord(at, index, seq_at(seqs, pos - first))
            elif type(cause) is tuple:  # a whole run
                cause = source_ord(at, cause[0], seq_at(cause[1], -1))
            emit(exits, cause, at)
        batch, controls, causes, lazy = [], [], {}, []

    def move(at: int) -> None:  # a segment at another time starts: the host advances to it
        nonlocal seg_at
        flush()
        host.advance(at, on_timer)
        seg_at = at

    for ord_, kind_, time_, value, data in rows:
        kind = int(kind_)
        if kind == KIND_READ:
            if read is None:
                raise ValueError(f"{where}: a part to read, but this stage reads none")
            at = int(time_)
            if at != seg_at:
                move(at)
            flush()
            batch, controls, causes, last_ord = read(data, at=at)
            flush()
            if last_ord:
                last = (KIND_TUPLE, last_ord, at)
            continue
        if kind == KIND_BUNDLE:
            flush()
            index, entries = decode(data)
            for e in entries:
                k, at = e[0], e[1]
                if at != seg_at:
                    move(at)
                if k == KIND_TUPLE:
                    n = len(batch)
                    if runs:
                        if n and (not controls or controls[-1] != n - 1):
                            flush()  # a run right after a run: fed apart, as the loop did
                            n = 0
                        batch += run_tuples(e[3])
                        causes[len(batch) - 1] = (index, e[2])
                    else:
                        lazy.append((n, index, e[2]))
                        batch += run_tuples(e[3])
                    last = (KIND_BUNDLE, index, e)
                    continue
                last = (KIND_BUNDLE, index, e)
                item = item_of(k, e[2], None) if k != KIND_COMMAND else _command(where)
                if item is None:  # a time mark: the host advances there, as before any item
                    move(at)
                    continue
                causes[len(batch)] = source_ord(at, index, e[3])
                controls.append(len(batch))
                batch.append(item)
            flush()
            continue
        at = int(time_)
        last = (KIND_TUPLE, ord_, at)
        if at != seg_at:
            move(at)
        if kind == KIND_TUPLE:
            causes[len(batch)] = ord_
            batch.append(decode(data))
            continue
        item = item_of(kind, int(value), None) if kind != KIND_COMMAND else _command(where)
        if item is None:
            move(at)
            continue
        causes[len(batch)] = ord_
        controls.append(len(batch))
        batch.append(item)
    flush()
    if last is None:
        return None
    if last[0] != KIND_BUNDLE:
        return last[1], last[2]
    _, index, e = last
    seq = seq_at(e[2], -1) if e[0] == KIND_TUPLE else e[3]
    return source_ord(e[1], index, seq), int(e[1])


def _command(where: str) -> Any:
    raise ValueError(f"{where}: a command row, but this stage takes no commands")


_RUN = -1  # an item of `expand`: a list of tuples with one stamped time, fed as one batch


def expand(rows: list[tuple[Any, ...]], *, runs: bool = False) -> list[Sequence[Any]]:
    """Rows (in order; bundles opened) as items ``(ord, kind, time, value, data, ords)`` in
    order, with the tuple of a tuple item decoded. With ``runs``, consecutive tuples with one
    stamped time are one item of kind `_RUN` whose data is their list, whose ord is the last
    one's, and whose ``ords`` says each one's (`run_ord`); ``ords`` is None for other items."""
    items: list[Sequence[Any]] = []
    pending: list[Any] | None = None  # with runs: the open run of single tuple rows
    for ord_, kind_, time_, value, data in rows:
        kind = int(kind_)
        if kind == KIND_BUNDLE:
            pending = None
            index, entries = decode(data)
            for e in entries:
                if e[0] != KIND_TUPLE:
                    items.append((source_ord(e[1], index, e[3]), e[0], e[1], e[2], None, None))
                elif runs:
                    seqs = unpack_seqs(e[2])
                    items.append((source_ord(e[1], index, seqs[-1]), _RUN, e[1], 0, run_tuples(e[3]),
                                  (index, seqs)))
                else:
                    at = e[1]
                    items.extend((source_ord(at, index, seq), KIND_TUPLE, at, 0, tup, None)
                                 for seq, tup in zip(unpack_seqs(e[2]), run_tuples(e[3]), strict=True))
        elif kind == KIND_TUPLE:
            at = int(time_)
            if not runs:
                items.append((ord_, kind, at, int(value), decode(data), None))
                continue
            if pending is None or pending[2] != at:
                pending = [ord_, _RUN, at, 0, [], []]
                items.append(pending)
            pending[0] = ord_
            pending[4].append(decode(data))
            pending[5].append(ord_)
        else:
            pending = None
            items.append((ord_, kind, int(time_), int(value), data, None))
    return items


def run_ord(item: Sequence[Any], j: int) -> bytes:
    """The ord of tuple ``j`` of a `_RUN` item of `expand`."""
    ords = item[5]
    if type(ords) is list:
        return ords[j]  # type: ignore[no-any-return]
    index, seqs = ords
    return source_ord(item[2], index, seqs[j])


def bundle_rows(out: list[tuple[Any, ...]], group: int) -> list[tuple[Any, ...]]:
    """A group's output rows ``(ord, kind, time, value, tuple, port, chan)`` as one bundle row."""
    if not out:
        return []
    items = [[o, k, t, v, d, p] for o, k, t, v, d, p, _c in out]
    return [(out[0][0], KIND_BUNDLE, out[0][2], 0, encode(items), -1, group)]


def _first(row: tuple[Any, ...]) -> Any:
    return row[0]


def group_function(hosted: Callable[[tuple[Any, ...]], Hosted], hooks: ItemHooks | None = None,
                   key_columns: Sequence[str] = (), *, timer_order: bool = True,
                   bundle_output: bool = False, next_stage: Any = None, log: Any = None) -> Any:
    """The ``applyInPandasWithState`` function hosting one operator per key group (see `host_group`).

    ``hosted(key)`` names what a group hosts: the graph, the operator and the
    stream feeding it (one operator for a deployed graph; the trace host keys
    by case as well). The group number is the key's last column; the
    ``key_columns`` before it are copied into every output row.

    Why this API and not ``transformWithStateInPandas``: a group's state is one
    value and time travels as rows, so none of the newer API's timers, state
    variables or TTL are used, while its costs are: a Python process on the
    driver to plan every query (0.7 s a start here) and a socket round trip to
    the JVM for each state read and write.

    With ``next_stage`` (a `_stages.NextStage`), the output goes to the next keyed stage's
    groups instead, one bundle per group (`_stages.next_stage_rows`). Each group's task is
    reported to ``log`` (`_metrics.list_accumulator`) as stage 1.
    """

    columns = [*KEYED_OUT_COLUMNS, *key_columns]

    def run(key: tuple[Any, ...], frames: Iterator[Any], state: Any) -> Iterator[Any]:
        import time

        import pandas as pd

        from ._metrics import record_task

        started = time.time_ns()
        frame = pd.concat(list(frames), ignore_index=True)
        rows = list(zip(*(frame[c].tolist() for c in ("ord", "kind", "time", "value", "data")),
                        strict=True))
        stored = state.get[0] if state.exists else None
        # Decoding a bundle makes objects by the hundred thousand and keeps them all: every
        # pass of the cycle collector would walk them again. Cycles wait until the batch is done.
        gc.disable()
        tail: list[tuple[bytes, int]] = []
        read = time.time_ns()
        try:
            out, new = host_group(hosted(tuple(key)), hooks, tuple(key), rows, stored,
                                  timer_order=timer_order, tail=tail)
        finally:
            gc.enable()
        hosted_ns = time.time_ns() - read
        state.update((new,))
        if next_stage is not None:
            from ._stages import next_stage_rows

            out = next_stage_rows(out, int(key[-1]), next_stage, tail[-1] if tail else None)
        elif bundle_output:
            out = bundle_rows(out, int(key[-1]))
        else:
            out = [(o, k, t, v, None if d is None else encode(d), *rest) for o, k, t, v, d, *rest in out]
        record_task(log, 1, int(key[-1]), started, read_ns=read - started, hosted_ns=hosted_ns)
        yield pd.DataFrame(out, columns=columns)

    return run
