"""A riverbed source as a Spark streaming source (PySpark's Python Data Source API).

The source operator runs in the driver's reader process, inside a one-source
job on a virtual clock: a simulated or file source's own pacing
(``sleep_until``) becomes the time stamped on its items, and its watermarks
(SPL E26, lag and minimum gap) are computed by the runtime's own code. What
it emits is served to Spark in micro-batches whose offsets count items, so a
batch holds the same items, with the same times, every time it is read.

After a restart the reader has no cache: a replayed batch is produced again
by running a fresh copy of the source from the start and skipping what came
before, which is exact because a source the bridge accepts is deterministic
(the plan refuses sources that wait on the outside world).
"""

from __future__ import annotations

import base64
import itertools
import queue
import threading
from collections.abc import Iterator
from typing import Any

from ..graph import Connection, FrozenGraph, InputPort, Operator, OperatorDef, Punct
from ..runtime import Job, VirtualClock, run_virtual
from ._rows import KIND_FINAL, KIND_TIME, KIND_TUPLE, KIND_WATERMARK, KIND_WINDOW, ROW_DDL, encode, source_ord

__all__ = ["SOURCE_FORMAT", "SourceItems", "dump_payload", "load_payload", "source_rows"]

SOURCE_FORMAT = "riverbed_source"
_END = object()


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


def source_rows(graph: FrozenGraph, name: str, index: int, *,
                time_mark_ns: int = 1_000_000_000) -> Iterator[Row]:
    """Source ``name``'s items as rows (see `_rows`), numbered from 0.

    A time mark first (every key group starts, and activates its windows, at
    the source's start time), then one whenever the stamped time moved on by
    ``time_mark_ns`` since the last: a key group whose keys are quiet still
    sees time pass, so its time-policy windows fire no later than that.
    """
    items = iter(SourceItems(graph, name))
    first = next(items, None)
    if first is None:
        return
    seq = 0
    mark = first[1]
    yield source_ord(mark, index, seq), KIND_TIME, mark, 0, None
    for kind, time, value, tup in itertools.chain([first], items):
        seq += 1
        if time - mark >= time_mark_ns:
            mark = time
            yield source_ord(time, index, seq), KIND_TIME, time, 0, None
            seq += 1
        data = encode(tup) if kind == KIND_TUPLE else None
        yield source_ord(time, index, seq), kind, time, value, data


def register(spark: Any) -> None:
    """Register the data source with a session (once per session is enough)."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import ReadAllAvailable, SupportsTriggerAvailableNow

    class _Partition(InputPartition):
        def __init__(self, start: int, end: int, rows: list[Any] | None) -> None:
            super().__init__(None)
            self.start, self.end, self.rows = start, end, rows

    class _Reader(DataSourceStreamReader, SupportsTriggerAvailableNow):
        def __init__(self, options: dict[str, str]) -> None:
            self.options = options
            self._rows: Iterator[Any] | None = None  # created lazily, in the driver
            self._cache: dict[int, Any] = {}
            self._read = 0  # rows pulled from the source so far
            self._done = False
            self._target: int | None = None
            lowered = {k.lower(): v for k, v in options.items()}  # Spark may lower-case option names
            self._max = int(lowered.get("maxrecordsperbatch", "100000"))

        def __getstate__(self) -> dict[str, Any]:
            return {"options": self.options, "_rows": None, "_cache": {}, "_read": 0, "_done": False,
                    "_target": None, "_max": self._max}

        def _produce(self) -> Iterator[Any]:
            """The rows from the start: the source's, or a fixed list (``rows``: the trace host)."""
            if "rows" in self.options:
                return iter(load_payload(self.options["rows"]))
            graph, name, index = load_payload(self.options["payload"])
            return source_rows(graph, name, index)

        def _pull(self, upto: int) -> None:
            if self._rows is None:
                self._rows = self._produce()
            while self._read < upto and not self._done:
                row = next(self._rows, None)
                if row is None:
                    self._done = True
                    break
                self._cache[self._read] = row
                self._read += 1

        def initialOffset(self) -> dict[str, int]:
            return {"n": 0}

        def getDefaultReadLimit(self) -> Any:
            from pyspark.sql.streaming.datasource import ReadMaxRows

            return ReadMaxRows(self._max)

        def prepareForTriggerAvailableNow(self) -> None:
            self._pull(1 << 62)
            self._target = self._read

        def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:
            begin = int(start["n"])
            want = 1 << 62 if isinstance(limit, ReadAllAvailable) else begin + int(limit.max_rows)
            if self._target is not None:
                want = min(want, self._target)
            self._pull(max(want, begin))
            return {"n": max(begin, min(want, self._read))}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[Any]:
            lo, hi = int(start["n"]), int(end["n"])
            if lo >= hi:
                return []
            if lo in self._cache and hi - 1 in self._cache:
                rows = [self._cache[i] for i in range(lo, hi)]
            else:
                rows = None  # a replay after a restart: produced again where it is read
            return [_Partition(lo, hi, rows)]

        def read(self, partition: Any) -> Iterator[Any]:
            if partition.rows is not None:
                yield from partition.rows
                return
            yield from itertools.islice(self._produce(), partition.start, partition.end)

        def commit(self, end: dict[str, int]) -> None:
            done = int(end["n"])
            for i in [k for k in self._cache if k < done]:
                del self._cache[i]

    class RiverbedSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return SOURCE_FORMAT

        def schema(self) -> str:
            return str(self.options.get("ddl", ROW_DDL))

        def streamReader(self, schema: Any) -> Any:
            return _Reader(dict(self.options))

    spark.dataSource.register(RiverbedSource)
