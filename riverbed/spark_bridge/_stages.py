"""Chained keyed stages: a stage's key groups hand their output to the next stage's groups.

A keyed stage ends where the next windowed operator is keyed differently
(another partition attribute, or a window that needs one group). Each group
of the ending stage sorts its output into one bundle per group of the next
stage: a tuple goes to the group of its key under the next stage's window,
every control item (window mark, watermark, final) to every group, and each
bundle closes with a time mark at the last item the group handled, so every
group of the next stage runs, and sees time pass, in every micro-batch.

A later stage's group receives bundles from every group of the stage before:
those are parallel channels of one stream. It sorts their items by order
key, then channel (the order the runtime produced them in, as the driver
stage does), and merges the channels' control items as the driver stage does
(`ChannelMerge`: final once every channel sent it, a watermark when the
minimum moves, a copied window mark once every channel sent its n-th). Its
state is its host's snapshot and the merge's, one value per group.

Spark allows one ``applyInPandasWithState`` per query, so the later stages
run in ``transformWithStateInPandas`` (one value state per group, no timers:
time travels as rows, as in the first stage).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..checkpoint import decode_value, encode_value
from ..core import SyncGraph
from ..graph import Punct, Watermark
from ..windows import TimeIntervalWindow
from ._driver import ChannelMerge
from ._keyed import KEYED_OUT_COLUMNS, Hosted, group_of, rows_of
from ._rows import (
    KIND_BUNDLE,
    KIND_FINAL,
    KIND_TIME,
    KIND_TUPLE,
    KIND_WATERMARK,
    KIND_WINDOW,
    decode,
    derived_ord,
    encode,
    item_of,
    source_ord,
)
from ._runs import FillSplitter, feed_cut, ignores_marks

__all__ = [
    "JOIN_ROUTED_DDL",
    "NextStage",
    "host_joined_group",
    "host_merged_group",
    "joined_group_function",
    "make_join_router",
    "next_stage_rows",
    "stage_processor",
]

_LAST = 0xFFFFFFFF  # the index of a stage's closing time mark: after all it derived from its cause


@dataclass(frozen=True)
class NextStage:
    """How a stage's output reaches the next stage's groups: the next window's partition key
    (an attribute, a function, or None: one group), its number of groups and their labels."""

    key: str | Callable[[Any], Any] | None
    groups: int
    labels: tuple[int, ...]

    def label_of(self, tup: Any) -> int:
        """A tuple's group label; one without a usable key goes to the first group, where its
        window raises (or routes it to the error port) as in the runtime."""
        key = self.key
        if key is None or self.groups == 1:
            return self.labels[0]
        try:
            k = tup[key] if isinstance(key, str) else key(tup)
            return self.labels[group_of(k, self.groups)]
        except (KeyError, TypeError, IndexError):
            return self.labels[0]


def next_stage_rows(out: list[tuple[Any, ...]], chan: int, nxt: NextStage,
                    tail: tuple[bytes, int] | None) -> list[tuple[Any, ...]]:
    """A group's output rows ``(ord, kind, time, value, tuple, port, group)`` as one bundle row
    per group of the next stage (columns `KEYED_OUT_COLUMNS`, ``stream`` naming the destination
    label, ``chan`` this group). ``tail`` is (ord, time) of the last item the group handled:
    each bundle closes with a time mark there."""
    bundles: dict[int, list[list[Any]]] = {label: [] for label in nxt.labels}
    for o, k, t, v, d, p, _g in out:
        if k == KIND_TUPLE:
            bundles[nxt.label_of(d)].append([o, k, t, v, d, p])
        else:
            for items in bundles.values():
                items.append([o, k, t, v, None, p])
    if tail is not None:
        mark = [derived_ord(tail[0], _LAST), KIND_TIME, tail[1], 0, None, 0]
        for items in bundles.values():
            items.append(mark)
    return [(items[0][0], KIND_BUNDLE, items[0][2], 0, encode(items), label, chan)
            for label, items in bundles.items() if items]


def host_merged_group(hosted: Hosted, key: tuple[Any, ...], rows: Sequence[tuple[Any, ...]],
                      stored: bytes | None) -> tuple[list[tuple[Any, ...]], bytes, tuple[bytes, int] | None]:
    """One group of a later stage, one micro-batch: ``rows`` are ``(ord, kind, time, value, data,
    chan)`` bundles from the stage before. Returns the output rows as `host_group` does, the new
    state and (ord, time) of the last item handled."""
    graph, members = hosted.graph, list(hosted.members)
    op, port = hosted.entry
    group = int(key[-1])
    extra = tuple(key[:-1])
    label = f"{members[0]}/{group}"
    guard, guarded = hosted.guard(group)
    items: list[tuple[Any, ...]] = []
    for _ord, kind, _time, _value, data, chan in rows:
        if int(kind) != KIND_BUNDLE:
            raise ValueError(f"{label}: a row of kind {kind} from the stage before; expected bundles")
        c = int(chan)
        items.extend((o, c, k, t, v, d) for o, k, t, v, d, _p in decode(data))
    items.sort(key=_ord_chan)
    merge = ChannelMerge(hosted.channels, copied_marks=hosted.copied_marks)
    out: list[tuple[Any, ...]] = []

    def taken(cause: bytes, at: int) -> None:
        rows_of(out, host.take_exits(), cause, at, (group, *extra))

    if stored is not None:
        state = decode_value(stored, checkpoint_id=0, key=label)
        merge.restore(state["merge"])
        host = SyncGraph(graph, members, state=state["host"], guard=guard, guarded=guarded)
    else:
        host = SyncGraph(graph, members, now=int(items[0][3]) if items else 0, guard=guard,
                         guarded=guarded)
        taken(b"", host.clock.now())

    def advance(at: int) -> None:
        host.advance(at, lambda when: taken(source_ord(when, 0, 0), when))

    # Tuples into timeInterval windows raise nothing until a watermark: a run of them with one
    # stamped time goes in as one batch (as in `host_group`); any other window takes them one by
    # one, so that what each raises is ordered after its own tuple.
    runner = host.core(members[0])
    batchable = bool(runner.windows) and all(isinstance(w, TimeIntervalWindow) for w in runner.windows)
    # A tumbling count window takes runs too, cut before each tuple filling its partition (`_runs`).
    splitter = None if batchable else FillSplitter.of(graph, host, members[0], members[1:])
    # The stage before makes a window mark after each of its outputs (an Aggregate does), so
    # a mark follows every tuple; where the head ignores marks, they do not end a run.
    deaf = splitter is not None and ignores_marks(graph.operator(members[0]))
    run: list[Any] = []
    ords: list[bytes] = []
    run_at, run_ord = 0, b""

    def feed_run() -> None:
        advance(run_at)
        if splitter is not None:
            feed_cut(host, (op, port), splitter, run, ord_of=ords.__getitem__,
                     taken=lambda cause: taken(cause, run_at), where=label)
            return
        host.feed(op, port, run)
        taken(run_ord, run_at)

    for o, chan, kind, at, value, data in items:
        if kind == KIND_TUPLE and not batchable and splitter is None:
            advance(at)
            host.feed(op, port, [data])
            taken(o, at)
            continue
        if kind == KIND_TUPLE:
            if run and at == run_at:
                run.append(data)
                ords.append(o)
                run_ord = o
                continue
            if run:
                feed_run()
            run, run_at, run_ord = [data], at, o
            ords = [o]
            continue
        if run and at == run_at and (kind == KIND_TIME or (kind == KIND_WINDOW and deaf)):
            if kind == KIND_WINDOW:
                merge.window(chan)  # counted; the head would ignore it: the run goes on
            continue
        if run:
            feed_run()
            run = []
        if splitter is not None:
            splitter.forget()
        advance(at)
        if kind == KIND_WATERMARK:
            low = merge.watermark(chan, value)
            if low is not None:
                host.feed(op, port, Watermark(low))
        elif kind == KIND_FINAL:
            if merge.final(chan):
                host.feed(op, port, Punct.FINAL)
        elif kind == KIND_WINDOW:
            if merge.window(chan):
                host.feed(op, port, Punct.WINDOW)
        elif kind != KIND_TIME:
            raise ValueError(f"{label}: an item of unknown kind {kind} from the stage before")
        taken(o, at)
    if run:
        feed_run()
    tail = (items[-1][0], int(items[-1][3])) if items else None
    new = encode_value({"host": host.state(), "merge": merge.state()}, checkpoint_id=0, key=label)
    return out, new, tail


def _ord_chan(item: tuple[Any, ...]) -> tuple[bytes, int]:
    return item[0], item[1]


def stage_rows(hosted: Hosted, nxt: NextStage | None, key: tuple[Any, ...], frames: Iterator[Any],
               stored: bytes | None) -> tuple[list[tuple[Any, ...]], bytes]:
    """A later stage's group over Spark's frames: its output rows (bundled for the next stage,
    or for the driver stage) and its new state."""
    import pandas as pd  # type: ignore[import-untyped]

    from ._keyed import bundle_rows

    frame = pd.concat(list(frames), ignore_index=True)
    rows = list(zip(*(frame[c].tolist() for c in ("ord", "kind", "time", "value", "data", "chan")),
                    strict=True))
    gc.disable()  # see `group_function`: decoding makes objects by the hundred thousand
    try:
        out, new, tail = host_merged_group(hosted, key, rows, stored)
    finally:
        gc.enable()
    group = int(key[-1])
    return (next_stage_rows(out, group, nxt, tail) if nxt is not None
            else bundle_rows(out, group)), new


def stage_processor(hosted: Hosted, nxt: NextStage | None, *, stage: int = 2, log: Any = None) -> Any:
    """The ``transformWithStateInPandas`` processor of a later stage (output columns
    `KEYED_OUT_COLUMNS`; the group's state is one binary value); each group's task is reported
    to ``log`` (`_metrics.list_accumulator`) as keyed stage ``stage``."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor
    from pyspark.sql.types import BinaryType, StructField, StructType

    class StageProcessor(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.state = handle.getValueState("host", StructType([StructField("host", BinaryType())]))

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
            import time

            import pandas as pd

            from ._metrics import record_task

            started = time.time_ns()
            stored = self.state.get()[0] if self.state.exists() else None
            out, new = stage_rows(hosted, nxt, tuple(key), rows, stored)
            self.state.update((new,))
            record_task(log, stage, int(tuple(key)[-1]), started)
            yield pd.DataFrame(out, columns=list(KEYED_OUT_COLUMNS))

        def close(self) -> None:
            pass

    return StageProcessor()


# ------------------------------------------------------------------ a Join keyed by its equality keys

JOIN_ROUTED_DDL = "ord BINARY, kind INT, time LONG, value LONG, data BINARY, stream INT, grp INT"


def make_join_router(keys: Sequence[Callable[[Any], Any]], labels: Sequence[int]) -> Any:
    """The mapInPandas function ahead of a keyed Join: the sources' rows (one stream in order,
    ``stream`` naming the source) each to a key group, a tuple by the equality key of the side
    its source feeds (``keys[stream]``), every other row to every group; each task ends with a
    time mark to every group, so every group runs in every micro-batch."""
    spread = list(labels)
    groups = len(spread)
    columns = ["ord", "kind", "time", "value", "data", "stream", "grp"]

    def route(batches: Iterator[Any]) -> Iterator[Any]:
        import pandas as pd

        last: tuple[bytes, int, int] | None = None
        for pdf in batches:
            out: list[tuple[Any, ...]] = []
            for o, kind, at, value, data, stream in zip(pdf["ord"], pdf["kind"], pdf["time"],
                                                        pdf["value"], pdf["data"], pdf["stream"],
                                                        strict=True):
                row = (o, int(kind), int(at), int(value), data, int(stream))
                if row[1] == KIND_TUPLE:
                    try:
                        label = spread[group_of(keys[row[5]](decode(data)), groups)]
                    except (KeyError, TypeError, IndexError):
                        label = spread[0]  # no usable key: the Join raises (or routes it) there
                    out.append((*row, label))
                else:
                    out.extend((*row, label) for label in spread)
                last = (o, row[2], row[5])
            yield pd.DataFrame(out, columns=columns)
        if last is not None:
            yield pd.DataFrame([(last[0], KIND_TIME, last[1], 0, None, last[2], label) for label in spread],
                               columns=columns)

    return route


def host_joined_group(hosted: Hosted, key: tuple[Any, ...], rows: Sequence[tuple[Any, ...]],
                      stored: bytes | None) -> tuple[list[tuple[Any, ...]], bytes, tuple[bytes, int] | None]:
    """One group of a keyed Join, one micro-batch: ``rows`` are ``(ord, kind, time, value, data,
    stream)``, in any order; each item enters at ``hosted.entries[stream]``. Returns what
    `host_merged_group` returns."""
    graph, members, entries = hosted.graph, list(hosted.members), hosted.entries
    group = int(key[-1])
    extra = tuple(key[:-1])
    label = f"{members[0]}/{group}"
    ordered = sorted(rows, key=_first)
    out: list[tuple[Any, ...]] = []

    def taken(cause: bytes, at: int) -> None:
        rows_of(out, host.take_exits(), cause, at, (group, *extra))

    if stored is not None:
        host = SyncGraph(graph, members, state=decode_value(stored, checkpoint_id=0, key=label))
    else:
        host = SyncGraph(graph, members, now=int(ordered[0][2]) if ordered else 0)
        taken(b"", host.clock.now())
    for o, kind_, time_, value, data, stream in ordered:
        kind, at = int(kind_), int(time_)
        host.advance(at, lambda when: taken(source_ord(when, 0, 0), when))
        op, port = entries[int(stream)]
        if kind == KIND_TUPLE:
            host.feed(op, port, [decode(data)])
        elif kind != KIND_TIME:
            host.feed(op, port, item_of(kind, int(value), None))
        taken(o, at)
    tail = (ordered[-1][0], int(ordered[-1][2])) if ordered else None
    return out, encode_value(host.state(), checkpoint_id=0, key=label), tail


def _first(row: tuple[Any, ...]) -> Any:
    return row[0]


def joined_group_function(hosted: Hosted, nxt: NextStage | None, log: Any = None) -> Any:
    """The ``applyInPandasWithState`` function of a keyed Join's groups (output as the first
    stage's: bundles for the driver stage, or for the next stage; tasks reported to ``log``)."""

    def run(key: tuple[Any, ...], frames: Iterator[Any], state: Any) -> Iterator[Any]:
        import time

        import pandas as pd

        from ._keyed import bundle_rows
        from ._metrics import record_task

        started = time.time_ns()
        frame = pd.concat(list(frames), ignore_index=True)
        rows = list(zip(*(frame[c].tolist() for c in ("ord", "kind", "time", "value", "data", "stream")),
                        strict=True))
        stored = state.get[0] if state.exists else None
        gc.disable()
        try:
            out, new, tail = host_joined_group(hosted, tuple(key), rows, stored)
        finally:
            gc.enable()
        state.update((new,))
        group = int(key[-1])
        bundles = next_stage_rows(out, group, nxt, tail) if nxt is not None else bundle_rows(out, group)
        record_task(log, 1, group, started)
        yield pd.DataFrame(bundles, columns=list(KEYED_OUT_COLUMNS))

    return run
