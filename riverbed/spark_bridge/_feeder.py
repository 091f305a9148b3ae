"""A graph source fed to Spark through Spark's own file source.

A process of its own runs the source (`source_rows`) and publishes its rows
as numbered Parquet files in a spool directory under the checkpoint; the
query reads that directory with ``maxFilesPerTrigger=1``, so each file is one
micro-batch. Spark's offset log records which file each batch read, so a
replayed batch reads the same rows, and ``cleanSource=delete`` removes a
file once the batch after it is planned.

Why not a Python data source: Spark starts a fresh Python process for one at
every query start (0.8 s here before the first trigger) and calls it across
a socket for every offset, plan and commit; its own file source costs the
query almost nothing to start and plan. Why a process and not a thread of
the driver: the source is busy Python, and in the driver it would hold the
GIL against the threads that answer Spark's calls (``foreachBatch``).

Publishing a file is ordered so that a crash can neither lose rows nor
repeat them: the data goes to a hidden file (Spark skips names starting
with a dot) and is synced; then ``_progress`` records the rows and files
published; then the file is renamed into view. A restart renames a file
left hidden, regenerates the source (which must be replayable, as for any
bridge source) and skips the rows already published. Spark takes files in
modification-time order (milliseconds), so each file's time is set one
millisecond past the last one's.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import json
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from multiprocessing.connection import Connection
from typing import Any

from ._forks import FeederProcess, cold_env, fork_feeder

__all__ = ["SourceFeeder", "SourceFeederError", "publish_rows"]

_PROGRESS = "_progress"
_SUFFIX = ".parquet"
_RECHECK_S = 0.02  # Spark deletes committed files on its own thread; no event says when
_STOP_GRACE_S = 5.0  # how long a stopped feeder may take to leave before it is killed


class SourceFeederError(RuntimeError):
    """The source failed in the feeder's process and its exception could not be sent back."""


class SourceFeeder:
    """Publishes sources' rows, ``first`` rows then ``size`` rows of each source a file, at
    most ``ahead`` files beyond the one Spark is reading; `finished` is set when every source
    has ended (or one failed: `error`).

    Each payload (`_source.dump_payload`) is ``(graph, name, index, route)``: the feeder's
    process builds the rows from it with `_source.source_rows`. With ``streams``, the rows of
    ``payloads[i]`` get a last column ``stream = streams[i]`` and the sources share each file
    (Spark would otherwise take each source's files as they happen to be ready): their rows
    merged into one stream by order key, each file the next ``size`` rows of it. So a
    micro-batch holds every source's rows up to one point of the stamped time, never a later
    stretch of one source before an earlier stretch of another (a file of ``size`` rows of
    each, as before, did that to sources of different rates).
    """

    def __init__(self, payloads: list[str], directory: str, ddl: str, *, first: int, size: int,
                 ahead: int = 2, name: str = "source", streams: list[int] | None = None) -> None:
        if streams is not None:
            assert len(streams) == len(payloads)
            ddl = f"{ddl}, stream INT"
        self.directory = directory
        self.ddl = ddl
        self.finished = threading.Event()
        self.error: BaseException | None = None
        self._config = (payloads, streams, directory, ddl, (first, size, ahead))
        self._name = name
        self._process: FeederProcess | None = None
        self._to: Connection | None = None
        self._lock = threading.Lock()
        self._stopped = False
        self._watch = threading.Thread(target=self._wait, name=f"riverbed-feeder-{name}-watch", daemon=True)

    def start(self) -> None:
        """Start the feeder's process: forked from the warm fork server (`_forks`), or a
        fresh interpreter running this module (not multiprocessing's spawn, which would run the
        user's main script again)."""
        os.makedirs(self.directory, exist_ok=True)
        down_r, down_w = os.pipe()  # to the feeder: its configuration, then "batch" and "stop"
        up_r, up_w = os.pipe()  # from the feeder: ("done", None) or ("error", ...)
        try:
            self._process = fork_feeder(down_r, up_w)  # warm: see `_forks`
            if self._process is None:
                self._process = subprocess.Popen(
                    [sys.executable, "-m", __name__, str(down_r), str(up_w)], pass_fds=(down_r, up_w),
                    env=cold_env(), stdin=subprocess.DEVNULL)
        finally:
            os.close(down_r)
            os.close(up_w)
        self._to = Connection(down_w, readable=False)
        self._from = Connection(up_r, writable=False)
        self._send(self._config)
        self._watch.start()

    def batch_done(self) -> None:
        """A micro-batch ran: Spark may delete a file (the feeder looks again at once)."""
        self._send("batch")

    def stop(self) -> None:
        """Stop publishing and wait for the feeder's process to leave (killed if it hangs in
        the source's own code)."""
        process = self._process
        if process is None:
            return
        self._stopped = True
        self._send("stop")
        try:
            process.wait(_STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        self._watch.join()
        if self._to is not None:
            self._to.close()

    def _send(self, message: Any) -> None:
        with self._lock, contextlib.suppress(OSError, ValueError):  # the process has left
            if self._to is not None:
                self._to.send(message)

    def _wait(self) -> None:
        try:
            status, detail = self._from.recv()
            if status == "error":
                self.error = _exception(detail)
        except (EOFError, OSError):  # the process died without a word
            assert self._process is not None
            code = self._process.wait()
            if code != 0 and not self._stopped:
                how = "without reporting" if code is None else f"with code {code}"  # None: forked
                self.error = SourceFeederError(f"the feeder process of source {self._name!r} "
                                               f"exited {how}")
        finally:
            self._from.close()
            self.finished.set()


def _exception(detail: tuple[bytes | None, str]) -> BaseException:
    pickled, text = detail
    if pickled is not None:
        try:
            exc = pickle.loads(pickled)
            if isinstance(exc, BaseException):
                return exc
        except Exception:
            pass  # not an exception this process can rebuild: the text says what happened
    return SourceFeederError(text)


# ------------------------------------------------------------------ the feeder's process


def _main(argv: list[str]) -> None:
    """The feeder's process: ``python -m riverbed.spark_bridge._feeder DOWN_FD UP_FD``.

    It leaves a stop to the driver, which sends "stop" (or goes: the pipe's end stops it too):
    a SIGTERM or Ctrl-C to the whole process group (``timeout``, systemd, a terminal) killed it
    mid-file, and the command reported a failed source instead of a stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    down = Connection(int(argv[0]), writable=False)
    up = Connection(int(argv[1]), readable=False)
    payloads, streams, directory, ddl, (first, size, ahead) = down.recv()
    try:
        _Publisher(directory, ddl, ahead, down).run(payloads, streams, first, size)
    except BaseException as exc:
        try:
            pickled: bytes | None = pickle.dumps(exc)
        except Exception:
            pickled = None
        up.send(("error", (pickled, "".join(traceback.format_exception(exc)))))
    else:
        up.send(("done", None))


def publish_rows(directory: str, ddl: str, rows: list[Any], size: int) -> int:
    """Publish a fixed list of rows at once, ``size`` rows a file (the trace host's cases:
    nothing to feed while the query runs, nothing to recover); returns the number of files."""
    os.makedirs(directory, exist_ok=True)
    publisher = _Publisher(directory, ddl, 0, None, durable=False)
    files = 0
    for start in range(0, len(rows), size):
        publisher._publish(rows[start:start + size], files, [start + size])
        files += 1
    return files


class _Publisher:
    def __init__(self, directory: str, ddl: str, ahead: int, conn: Connection | None, *,
                 durable: bool = True) -> None:
        self.directory, self.ddl, self.ahead, self.conn = directory, ddl, ahead, conn
        self.durable = durable
        self.stopping = False
        self.last_ms = 0

    def run(self, payloads: list[str], streams: list[int] | None, first: int, size: int) -> None:
        from ._source import load_payload, source_rows

        rows_done, files = self._recover(len(payloads))
        sources = []
        for payload, done in zip(payloads, rows_done, strict=True):
            graph, name, index, route = load_payload(payload)
            rows = source_rows(graph, name, index, route=route)
            for _ in itertools.islice(rows, done):
                pass  # published before the restart
            sources.append(rows)
        limit = size if files else first
        if streams is None:
            merged: Iterator[tuple[Any, ...]] = sources[0]
        else:  # one stream in order (each source's rows are in order already), each row tagged
            position = {stream: i for i, stream in enumerate(streams)}
            tagged = [_tagged(rows, stream) for rows, stream in zip(sources, streams, strict=True)]
            merged = heapq.merge(*tagged, key=_ord)
        while True:
            chunk = list(itertools.islice(merged, limit))
            if not chunk or not self._wait_for_room():
                return
            if streams is None:
                rows_done[0] += len(chunk)
            else:
                for row in chunk:
                    rows_done[position[row[-1]]] += 1
            self._publish(chunk, files, rows_done)
            files += 1
            limit = size

    def _recover(self, sources: int) -> tuple[list[int], int]:
        """Rows of each source and files published before a restart; a file left hidden is
        renamed now."""
        path = os.path.join(self.directory, _PROGRESS)
        for stale in os.listdir(self.directory):  # written but never recorded
            if stale.startswith(".") and stale.endswith(".tmp"):
                os.unlink(os.path.join(self.directory, stale))
        if not os.path.exists(path):
            return [0] * sources, 0
        with open(path) as f:
            progress = json.load(f)
        rows_done, files = [int(n) for n in progress["rows"]], int(progress["files"])
        if len(rows_done) != sources:
            raise ValueError(f"{self.directory} was written for {len(rows_done)} sources, "
                             f"the graph has {sources}: a checkpoint of another graph?")
        self.last_ms = int(progress["last_ms"])
        if files:
            name = _file_name(files - 1)
            hidden = os.path.join(self.directory, f".{name}")
            if os.path.exists(hidden):
                os.replace(hidden, os.path.join(self.directory, name))
        return rows_done, files

    def _visible(self) -> int:
        return sum(1 for n in os.listdir(self.directory) if n.endswith(_SUFFIX) and n[0] != ".")

    def _wait_for_room(self) -> bool:
        """Wait until at most ``ahead`` files wait beyond the one Spark reads (Spark deletes a
        batch's file once it plans the next batch); False once told to stop."""
        assert self.conn is not None
        while not self.stopping and self._visible() > self.ahead:
            if self.conn.poll(_RECHECK_S):
                self._read_messages()
        if self.conn.poll():
            self._read_messages()
        return not self.stopping

    def _read_messages(self) -> None:
        assert self.conn is not None
        try:
            while self.conn.poll():
                if self.conn.recv() == "stop":
                    self.stopping = True
        except (EOFError, OSError):  # the driver has gone
            self.stopping = True

    def _publish(self, chunk: list[Any], index: int, rows_done: list[int]) -> None:
        import pyarrow as pa  # type: ignore[import-untyped]
        import pyarrow.parquet as pq  # type: ignore[import-untyped]

        from ._source import arrow_batch

        name = _file_name(index)
        hidden = os.path.join(self.directory, f".{name}")
        scratch = f"{hidden}.tmp"
        pq.write_table(pa.Table.from_batches([arrow_batch(chunk, self.ddl)]), scratch,
                       compression="none")
        if self.durable:
            _sync(scratch)
        self.last_ms = max(time.time_ns() // 1_000_000, self.last_ms + 1)
        ns = self.last_ms * 1_000_000
        os.utime(scratch, ns=(ns, ns))
        os.replace(scratch, hidden)
        progress = os.path.join(self.directory, _PROGRESS)
        with open(f"{progress}.tmp", "w") as f:
            json.dump({"rows": rows_done, "files": index + 1, "last_ms": self.last_ms}, f)
            if self.durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(f"{progress}.tmp", progress)
        os.replace(hidden, os.path.join(self.directory, name))


def _tagged(rows: Iterator[tuple[Any, ...]], stream: int) -> Iterator[tuple[Any, ...]]:
    return ((*row, stream) for row in rows)


def _ord(row: tuple[Any, ...]) -> bytes:
    return row[0]  # type: ignore[no-any-return]


def _file_name(index: int) -> str:
    return f"{index:012d}{_SUFFIX}"


def _sync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


if __name__ == "__main__":
    _main(sys.argv[1:])
