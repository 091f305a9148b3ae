"""The driver stage one micro-batch behind Spark: its batches logged first, then run in a thread.

Spark runs micro-batches one after another, and ``foreachBatch`` is the last
step of each: while the driver stage feeds a batch to the sinks, both cores
would wait for it. Here ``foreachBatch`` only fetches the batch's rows and
writes them to a log under the checkpoint directory (an Arrow file, synced);
a thread runs the logged batches through the stage in order, and Spark
starts the next batch meanwhile.

Exactly once is kept: a batch is durable before Spark may commit it, the
stage still stores its state with each batch id, and on start the logged
batches after the stored id run again before any new one. At most
``depth`` batches wait in memory; beyond that ``foreachBatch`` waits (a slow
sink slows the query down instead of filling the driver). An error in the
stage fails the next ``foreachBatch`` call, so the query stops with it, and
`drain` raises it.
"""

from __future__ import annotations

import os
import queue
import threading
from typing import Any

from ._driver import DriverStage, sorted_rows

__all__ = ["PipelinedStage"]

_LOG_SUFFIX = ".arrow"


class PipelinedStage:
    """``foreachBatch`` for ``stage``: log the batch (in ``log_dir``, if given), hand it over."""

    def __init__(self, stage: DriverStage, log_dir: str | None, *, depth: int = 2) -> None:
        self.stage = stage
        self.log_dir = log_dir
        self.accepted = stage.last_batch  # the last batch logged or run
        self._queue: queue.Queue[tuple[int, Any] | None] = queue.Queue(maxsize=depth)
        self._failed: BaseException | None = None
        self._idle = threading.Condition()
        self._pending = 0
        if log_dir is not None:
            os.makedirs(log_dir, exist_ok=True)
            try:
                self._replay(log_dir)
            except BaseException:  # the store closes, so the next deployment can open it
                stage.close()
                raise
        self._thread = threading.Thread(target=self._run, name="riverbed-driver-stage", daemon=True)
        self._thread.start()

    def _replay(self, log_dir: str) -> None:
        """Batches logged but not stored by the stage when the last run ended run first."""
        import pyarrow as pa  # type: ignore[import-untyped]

        for name in sorted(os.listdir(log_dir)):
            path = os.path.join(log_dir, name)
            if not name.endswith(_LOG_SUFFIX):
                os.unlink(path)  # a log write cut short: Spark did not commit that batch
                continue
            batch_id = int(name[:-len(_LOG_SUFFIX)])
            if batch_id > self.stage.last_batch:
                with pa.OSFile(path, "rb") as f:
                    table = pa.ipc.open_file(f).read_all()
                self.stage.process_rows(sorted_rows(table), batch_id)
                self.accepted = batch_id
            os.unlink(path)

    def process(self, batch: Any, batch_id: int) -> None:
        """``foreachBatch``: fetch the rows, make them durable, queue them for the stage."""
        self._raise_failed()
        table = batch.toArrow()  # run even when delivered again: see `DriverStage.process`
        if batch_id <= self.accepted:
            return  # delivered again after a restart: logged or stored already
        if self.log_dir is not None:
            _write_log(os.path.join(self.log_dir, f"{batch_id:020d}{_LOG_SUFFIX}"), table)
        with self._idle:
            self._pending += 1
        self._queue.put((batch_id, table))
        self.accepted = batch_id
        self._raise_failed()

    def _run(self) -> None:
        while True:
            entry = self._queue.get()
            if entry is None:
                return
            batch_id, table = entry
            try:
                if self._failed is None:
                    self.stage.process_rows(sorted_rows(table), batch_id)
                    if self.log_dir is not None:
                        os.unlink(os.path.join(self.log_dir, f"{batch_id:020d}{_LOG_SUFFIX}"))
            except BaseException as exc:  # kept, and raised in Spark's next call and by drain()
                self._failed = exc
            finally:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()

    def _raise_failed(self) -> None:
        if self._failed is not None:
            raise RuntimeError(f"the driver stage failed: {self._failed}") from self._failed

    def drain(self) -> None:
        """Wait until every queued batch ran; raise the stage's error, if any."""
        with self._idle:
            self._idle.wait_for(lambda: self._pending == 0)
        self._raise_failed()

    def close(self) -> None:
        """Drain, stop the thread and close the stage (a failed batch stays logged)."""
        try:
            self.drain()
        finally:
            self._queue.put(None)
            self._thread.join()
            self.stage.close()


def _write_log(path: str, table: Any) -> None:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write(table)
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        f.write(sink.getvalue())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
