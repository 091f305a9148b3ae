"""One output port of an operator core: the tuples submitted since the last hand-over, and the
entries (batches and control items) waiting for the host to deliver them, in order.

A declared schema is checked once per batch, when the buffer is sealed (before a control item
or a hand-over): one generated loop instead of a call per submitted tuple. An invalid tuple is
taken out and handed to ``on_invalid``, which raises or routes it to the error port.

Window marks and watermarks travel inside the batch they interrupt (`mark`): an operator
that submits a result and a window mark per trigger (Aggregate, Join) hands over one
`MarkedBatch` per flush, not a batch of one tuple and a separate control item each, which
cost a hand-over and a handler call apiece downstream. Final punctuation and checkpoint
barriers stay control items of their own (`control`), between batches.

The core never delivers anything itself: a host takes ``pending`` (`take`) and sends each
entry wherever that port leads (an inbox, another core, a Spark row, a file).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..graph import Punct, Schema, Watermark
from ._metrics import OutputPortMetrics

__all__ = ["MarkedBatch", "OutputPort", "control_positions", "split_marked"]


class MarkedBatch(list[Any]):
    """A batch whose tuples are interleaved with window marks (`Punct.WINDOW`) and watermarks,
    in the order they were submitted; ``tuples`` counts the tuples among them and
    ``window_marks`` the window marks (counted here when not given). ``controls``, when known,
    are the indices of the marks and watermarks, in order: a receiver that handles runs of
    tuples slices at them instead of testing every item (None: walk the batch)."""

    __slots__ = ("controls", "tuples", "window_marks")

    def __init__(self, items: list[Any], tuples: int, window_marks: int | None = None,
                 controls: list[int] | None = None) -> None:
        super().__init__(items)
        self.tuples = tuples
        self.window_marks = (sum(1 for item in items if item is Punct.WINDOW)
                             if window_marks is None else window_marks)
        self.controls = controls


def control_positions(items: list[Any]) -> list[int]:
    """The indices of the window marks and watermarks among ``items``, found by a walk: a
    marked batch's ``controls`` when it came without them."""
    return [i for i, x in enumerate(items) if x is Punct.WINDOW or type(x) is Watermark]


def split_marked(batch: MarkedBatch) -> list[Any]:
    """A marked batch as plain entries: runs of tuples as lists, marks and watermarks alone."""
    out: list[Any] = []
    run: list[Any] = []
    for item in batch:
        if item is Punct.WINDOW or type(item) is Watermark:
            if run:
                out.append(run)
                run = []
            out.append(item)
        else:
            run.append(item)
    if run:
        out.append(run)
    return out


class OutputPort:
    """``buf`` takes submitted tuples (hosts bind ``buf.append`` once: it lives as long as the
    port); ``pending`` holds sealed batches (lists) and control items, in order."""

    __slots__ = ("at", "buf", "first_invalid", "metrics", "on_invalid", "pending", "validate",
                 "watermarks")

    def __init__(self, schema: Schema | None, metrics: OutputPortMetrics,
                 on_invalid: Callable[[Any, str], None]) -> None:
        self.buf: list[Any] = []
        # The indices in ``buf`` of its window marks and watermarks, and how many of them are
        # watermarks: a window mark (one after each Aggregate result) costs an append, no count.
        self.at: list[int] = []
        self.watermarks = 0
        self.pending: list[Any] = []
        self.validate = schema.validator() if schema is not None else None
        self.first_invalid = schema.batch_checker() if schema is not None else None
        self.on_invalid = on_invalid
        self.metrics = metrics

    def seal(self) -> None:
        """Close the current batch: check it against the schema and queue it."""
        buf = self.buf
        if self.at:
            self._seal_marked()
            return
        check = self.first_invalid
        if check is not None:
            i = check(buf)
            if i >= 0:
                self._drop_invalid(i)
        self.pending.append(buf.copy())
        buf.clear()

    def _seal_marked(self) -> None:
        """Seal a batch holding marks: the tuples are checked together (one generated loop);
        only when one is invalid is each run of tuples checked on its own."""
        buf = self.buf
        at = self.at
        check = self.first_invalid
        if check is None or self._runs_valid(check):
            self.pending.append(MarkedBatch(buf.copy(), len(buf) - len(at),
                                            len(at) - self.watermarks, at.copy()))
            buf.clear()
            at.clear()
            self.watermarks = 0
            return
        items: list[Any] = []
        controls: list[int] = []
        tuples = 0
        try:
            for entry in split_marked(MarkedBatch(buf, 0)):
                if type(entry) is list:
                    self.buf = entry
                    try:
                        check = self.first_invalid
                        if check is not None:
                            i = check(entry)
                            if i >= 0:
                                self._drop_invalid(i)
                    finally:  # (a violation that fails the operator: what came before it)
                        items.extend(self.buf)
                        tuples += len(self.buf)
                else:
                    controls.append(len(items))
                    items.append(entry)
        finally:
            window_marks = sum(items[c] is Punct.WINDOW for c in controls)
            buf.clear()
            at.clear()
            self.buf = buf  # the same list: hosts hold its bound ``append``
            self.pending.append(MarkedBatch(items, tuples, window_marks, controls))
            self.watermarks = 0

    def _runs_valid(self, check: Callable[[list[Any]], int]) -> bool:
        """Every tuple of the marked buffer is valid: with few marks, each run between them is
        checked as a slice; with many, the tuples are gathered first."""
        buf, at = self.buf, self.at
        if len(at) * 8 >= len(buf):
            return check([x for x in buf if x is not Punct.WINDOW and type(x) is not Watermark]) < 0
        start = 0
        for i in at:
            if i > start and check(buf[start:i]) >= 0:
                return False
            start = i + 1
        return start >= len(buf) or check(buf[start:]) < 0

    def position(self) -> tuple[int, int, int, int]:
        """Where the port stands now, for `rewind`."""
        return len(self.buf), len(self.at), self.watermarks, len(self.pending)

    def rewind(self, position: tuple[int, int, int, int]) -> None:
        """Take back what was submitted since `position` (a failed window event's partial
        output); nothing if a batch was sealed since: it is out of reach."""
        n_buf, n_at, watermarks, n_pending = position
        if len(self.pending) == n_pending and len(self.buf) >= n_buf:
            del self.buf[n_buf:]
            del self.at[n_at:]
            self.watermarks = watermarks

    def reset(self) -> None:
        """Drop what was submitted and not handed over."""
        self.buf.clear()
        self.at.clear()
        self.watermarks = 0
        self.pending.clear()

    def _drop_invalid(self, first: int) -> None:
        buf, check, validate = self.buf, self.first_invalid, self.validate
        assert check is not None and validate is not None
        good: list[Any] = buf[:first]
        rest = buf[first:]
        while rest:
            i = check(rest)
            if i < 0:
                good.extend(rest)
                break
            good.extend(rest[:i])
            try:
                self.on_invalid(rest[i], validate(rest[i]) or "invalid")
            except BaseException:  # it fails the operator: what came before it stays to send
                buf[:] = good
                raise
            rest = rest[i + 1:]
        buf[:] = good

    def control(self, item: Any) -> None:
        """Queue a control item (final punctuation, a barrier) after what was submitted."""
        if self.buf:
            self.seal()
        self.pending.append(item)

    def mark(self, item: Any) -> None:
        """A window mark or watermark, in line with the tuples around it (`MarkedBatch`)."""
        self.at.append(len(self.buf))
        self.buf.append(item)
        if item is not Punct.WINDOW:
            self.watermarks += 1

    def mark_watermarks(self, items: list[Any]) -> None:
        """`mark` for each of ``items`` (watermarks, one after the other), in one step."""
        start = len(self.buf)
        self.at.extend(range(start, start + len(items)))
        self.buf.extend(items)
        self.watermarks += len(items)

    @property
    def has_output(self) -> bool:
        return bool(self.buf or self.pending)

    def take(self) -> list[Any]:
        """Everything to deliver, in order (the buffer sealed first); the port is then empty.
        The host counts what it delivered with `count_delivered`."""
        if self.buf:
            self.seal()
        pending, self.pending = self.pending, []
        return pending

    def count_delivered(self, entry: Any) -> None:
        """The host delivered ``entry`` (a batch or a control item): count it in the metrics."""
        m = self.metrics
        if type(entry) is list:
            m.tuples_submitted += len(entry)
        elif type(entry) is MarkedBatch:
            m.tuples_submitted += entry.tuples
            m.window_puncts_submitted += entry.window_marks
            m.watermarks_submitted += len(entry) - entry.tuples - entry.window_marks
        elif entry is Punct.WINDOW:
            m.window_puncts_submitted += 1
        elif entry is Punct.FINAL:
            m.final_puncts_submitted += 1
        elif type(entry) is Watermark:
            m.watermarks_submitted += 1
