"""The driver stage: operators hosted in the Spark driver, fed one micro-batch at a time.

Spark delivers a ``foreachBatch`` batch at least once: after a crash the
last batch is delivered again. The stage stores its whole state (operators,
windows, watermarks, the stamped clock) in a riverbed checkpoint store under
the query's checkpoint directory, with the batch id, before it lets
transactional sinks publish; a batch at or below the stored id is skipped.
So output is exactly once for transactional sinks (FileSink) and the
windows resume where the last stored batch left them.

Rows come from several streams (a source, or a keyed stage's output port)
and, after a keyed stage, from several key groups. A group is a parallel
channel of the same stream: final goes on once every group sent it, a
watermark once the minimum over the groups moves (SPL's merge of parallel
channels, E30), and the n-th window mark once every group sent its n-th
(each group forwards the marks copied to it).

A Spark stream standing in for a source (`SparkInput`) is submitted in the
order of its ``order_by`` column, each row at the time of its
``time_column``, kept from going backwards: a row stamped earlier than a row
before it in that order is submitted at the later time (`DriverStage.in_input_order`),
as a source's virtual clock never goes back. Sorted by stamped time, the rows
of a file whose times jitter against its sequence reached the windows out of
order (a review's count(4) windows differed from the first line on).
"""

from __future__ import annotations

import operator
import os
from collections.abc import Mapping, Sequence
from typing import Any

from ..checkpoint import RocksDBStore
from ..core import SyncGraph
from ..graph import FrozenGraph, Punct, Watermark
from ._rows import (
    KIND_BUNDLE,
    KIND_FINAL,
    KIND_TIME,
    KIND_TUPLE,
    KIND_WATERMARK,
    KIND_WINDOW,
    channels_apart,
    decode,
    restamped,
)

__all__ = ["ChannelMerge", "DriverStage", "sorted_rows"]


class ChannelMerge:
    """Merges the control items of one stream arriving over ``channels`` parallel groups."""

    def __init__(self, channels: int, *, copied_marks: bool = True) -> None:
        self.channels = channels
        # True: every window mark on this stream is a copy made for each group (the operators
        # upstream all preserve marks), merged by count; False: groups make their own marks
        # (an operator that generates them per partition), each of which goes on.
        self.copied_marks = copied_marks
        self.finals: set[int] = set()
        self.marks: dict[int, int] = {}
        self.sent: int | None = None
        self.windows: dict[int, int] = {}  # window marks received per channel
        self.windows_sent = 0

    def final(self, chan: int) -> bool:
        self.finals.add(chan)
        return self.ended

    @property
    def ended(self) -> bool:
        """Every group sent final: the stream is over."""
        return len(self.finals) == self.channels

    def window(self, chan: int) -> bool:
        """A window mark: every group forwards each mark of the stream it was copied from, so
        the n-th mark goes on once every group has sent its n-th."""
        if not self.copied_marks:
            return True
        self.windows[chan] = self.windows.get(chan, 0) + 1
        if len(self.windows) < self.channels:
            return False
        low = min(self.windows.values())
        if low <= self.windows_sent:
            return False
        self.windows_sent = low
        return True

    def watermark(self, chan: int, value: int) -> int | None:
        if value <= self.marks.get(chan, -(1 << 63)):
            return None
        self.marks[chan] = value
        if len(self.marks) < self.channels:
            return None
        low = min(self.marks.values())
        if self.sent is not None and low <= self.sent:
            return None
        self.sent = low
        return low

    def state(self) -> dict[str, Any]:
        return {"finals": sorted(self.finals), "marks": [[k, v] for k, v in self.marks.items()],
                "sent": self.sent, "windows": [[k, v] for k, v in self.windows.items()],
                "windows_sent": self.windows_sent}

    def restore(self, state: Mapping[str, Any]) -> None:
        self.finals = set(state["finals"])
        self.marks = {int(k): int(v) for k, v in state["marks"]}
        self.sent = state["sent"]
        self.windows = {int(k): int(v) for k, v in state["windows"]}
        self.windows_sent = int(state["windows_sent"])


class DriverStage:
    """Hosts ``members`` of ``graph`` in the driver; ``streams[i]`` is the (operator, port)
    that rows with ``stream == i`` belong to, arriving over ``channels[i]`` groups."""

    def __init__(self, graph: FrozenGraph, members: Sequence[str], streams: Sequence[tuple[str, int]],
                 channels: Sequence[int], *, state_dir: str | None,
                 emitted: set[str] | frozenset[str] = frozenset(),
                 copied_marks: bool = True) -> None:
        self.graph = graph
        self.members = list(members)
        self.streams = list(streams)
        self.merges = [ChannelMerge(c, copied_marks=copied_marks) for c in channels]
        self.emitted = emitted  # sources whose stream Spark reads: rows are their submissions
        # The streams of those sources, and the latest time each stamped (`in_input_order`).
        self.inputs = frozenset(i for i, (op, _) in enumerate(self.streams) if op in emitted)
        self.stamps: dict[int, int] = {}
        self.host: SyncGraph | None = None
        self.store = RocksDBStore(state_dir) if state_dir is not None else None
        self.last_batch = -1
        self.batches = 0
        self.rows = 0
        if self.store is not None:
            stored = self.store.latest_good()
            if stored is not None:
                state = stored.states["stage"]
                self.host = SyncGraph(graph, self.members, state=state["host"])
                for merge, s in zip(self.merges, state["merges"], strict=True):
                    merge.restore(s)
                self.stamps = {int(k): int(v) for k, v in state.get("stamps", ())}
                self.last_batch = stored.id - 1

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None

    def process(self, batch: Any, batch_id: int) -> None:
        """``foreachBatch``: the batch's rows in order through the hosted operators."""
        # The batch runs even when it is delivered again after a restart and its effects are
        # stored already: Spark fails the query unless every stateful partition of the batch
        # commits (the key groups recompute the same state from the same stored version).
        table = batch.toArrow()
        if batch_id <= self.last_batch:
            return
        self.process_rows(sorted_rows(table), batch_id)

    def in_input_order(self, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """``rows`` (sorted) with each `SparkInput` stream's rows in its ``order_by`` order,
        each stamped with the latest time so far along that order (across batches: kept
        in ``stamps``, stored with the stage), then sorted again by the new order keys.

        A SparkInput's order key is (time, source, ``order_by`` value, record index), made in
        Spark's tasks, which see only their share of the rows: the time cannot be made
        non-decreasing there. Here, with the whole batch, it can."""
        mine = [r for r in rows if r[6] in self.inputs]
        if not mine:
            return rows
        mine.sort(key=_input_key)
        stamps = self.stamps
        out = [r for r in rows if r[6] not in self.inputs]
        for r in mine:
            last = stamps.get(r[6])
            if last is None or r[3] > last:
                stamps[r[6]] = r[3]
                out.append(r)
            else:
                out.append((restamped(r[0], last), r[1], r[2], last, *r[4:]))
        out.sort(key=_ORD_CHAN)
        channels_apart(out, 1)
        return out

    def process_rows(self, rows: list[tuple[Any, ...]], batch_id: int) -> None:
        if self.inputs:
            rows = self.in_input_order(rows)
        host = self.host
        if host is None:
            first = rows[0][3] if rows else 0  # the first row's stamped time
            host = self.host = SyncGraph(self.graph, self.members, now=first)
        run: list[Any] = []  # consecutive tuples of one stream with one stamped time
        run_of = (-1, 0)  # their (stream, time)
        ended = False  # a stream's final came in this batch

        def feed_run() -> None:
            stream, time = run_of
            host.advance(time)
            op, port = self.streams[stream]
            if op in self.emitted:
                host.emit(op, run)  # the source submits them: schema, watermarks
            else:
                host.feed(op, port, run)

        for _ord, chan, kind, time, value, data, stream in rows:
            if kind == KIND_TUPLE:
                if run and run_of == (stream, time):
                    run.append(data)
                    continue
                if run:
                    feed_run()
                run, run_of = [data], (stream, time)
                continue
            if run:
                feed_run()
                run = []
            host.advance(time)
            op, port = self.streams[stream]
            if kind == KIND_WATERMARK:
                low = self.merges[stream].watermark(chan, value)
                if low is not None:
                    host.feed(op, port, Watermark(low))
            elif kind == KIND_FINAL:
                if self.merges[stream].final(chan):
                    host.feed(op, port, Punct.FINAL)
                    ended = True
            elif kind == KIND_WINDOW:
                if self.merges[stream].window(chan):
                    host.feed(op, port, Punct.WINDOW)
            elif kind != KIND_TIME:
                raise ValueError(f"row of unknown kind {kind} in stream {op}.out[{port}]")
        if run:
            feed_run()
        if ended and all(m.ended for m in self.merges):
            host.run_out()  # the input is over: what Delay or Throttle still hold comes out now
        host.take_exits()  # the driver stage ends the graph: nothing leaves it
        self.rows += len(rows)
        self.batches += 1
        if self.store is not None:
            state = {"host": host.state(drain_operators=True), "merges": [m.state() for m in self.merges],
                     "stamps": [[k, v] for k, v in self.stamps.items()]}
            self.store.save(batch_id + 1, {"stage": state}, job=self.graph.name, time_ns=host.clock.now())
        host.committed(batch_id + 1)
        self.last_batch = batch_id

    def operator(self, name: str) -> Any:
        if self.host is None:
            raise LookupError("no batch has run yet")
        return self.host.core(name).op


_ORD_CHAN = operator.itemgetter(0, 1)  # a row's order key, then its group (C: no call a row)


def sorted_rows(table: Any) -> list[tuple[Any, ...]]:
    """A batch's rows (bundles opened, tuples decoded) in order: by ord, then group."""
    cols = {name: table.column(name).to_pylist() for name in table.column_names}
    n = table.num_rows
    chan = cols.get("chan", [0] * n)
    rows: list[tuple[Any, ...]] = []
    for row in zip(cols["ord"], chan, cols["kind"], cols["time"], cols["value"], cols["data"],
                   cols["stream"], strict=True):
        if row[2] == KIND_BUNDLE:  # a key group's output of one micro-batch, tuples decoded already
            rows.extend((o, row[1], k, t, v, d, p) for o, k, t, v, d, p in decode(row[5]))
        elif row[2] == KIND_TUPLE:
            rows.append((*row[:5], decode(row[5]), row[6]))
        else:
            rows.append(row)
    rows.sort(key=_ORD_CHAN)
    channels_apart(rows, 1)
    return rows


def _input_key(row: tuple[Any, ...]) -> tuple[int, bytes, bytes]:
    """A SparkInput row's place in its stream: its ``order_by`` value and record index (the
    order key after its time), then its time (rows of one ``order_by`` value)."""
    return row[6], row[0][_TIME_BYTES:], row[0][:_TIME_BYTES]


_TIME_BYTES = 8  # the stamped time at the head of an order key (`_rows.source_ord`)


def stage_dir(checkpoint: str | None) -> str | None:
    return None if checkpoint is None else os.path.join(checkpoint, "riverbed-driver")


def log_dir(checkpoint: str) -> str:
    """Where `PipelinedStage` logs the batches the stage has not stored yet."""
    return os.path.join(checkpoint, "riverbed-driver-log")
