"""Reading a file record by record while knowing the exact byte offset after each record.

FileSource is replayable: its checkpoint is (file, byte offset, line number)
of the end of the last record it submitted, and a restored FileSource seeks
there and continues with the next record. So the reader never hides read-ahead:
`LineReader` reads the file in chunks but reports the offset just after each
line it hands out, and `RecordCursor` reports the offset just after each
record (a csv record may span lines inside quotes).

A hot file (one still being appended to) may end in a partial line: the
reader then hands out nothing until the rest of the line arrives, instead of
taking the fragment for a record.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from .formats import RecordError

__all__ = ["LineReader", "Record", "RecordCursor"]

_CHUNK = 1 << 16


class LineReader:
    """The lines of a binary file split at ``marker``, each with the offset just after it."""

    def __init__(self, f: BinaryIO, marker: bytes, offset: int = 0) -> None:
        self._f = f
        self._marker = marker
        self.rewind(offset)

    def rewind(self, offset: int) -> None:
        """Continue reading at byte ``offset`` (forgetting anything read ahead)."""
        self._f.seek(offset)
        self._buf = b""
        self._pos = 0
        self.offset = offset  # just after the last line handed out

    def next_line(self, partial: bool) -> bytes | None:
        """The next line without its marker, or None when no complete line is there.

        At the end of the data, a last line without a marker is handed out only
        if ``partial`` (a finished file); a hot file waits for its marker.
        """
        marker = self._marker
        while True:
            i = self._buf.find(marker, self._pos)
            if i >= 0:
                line = self._buf[self._pos:i]
                end = i + len(marker)
                self.offset += end - self._pos
                self._pos = end
                return line
            chunk = self._f.read(_CHUNK)
            if chunk:
                self._buf = self._buf[self._pos:] + chunk
                self._pos = 0
                continue
            if partial and self._pos < len(self._buf):
                line = self._buf[self._pos:]
                self.offset += len(line)
                self._pos = len(self._buf)
                return line
            return None

    def shrunk(self) -> bool:
        """The file is now shorter than what was read of it (it was truncated or rewritten)."""
        return os.fstat(self._f.fileno()).st_size < self._f.tell()


@dataclass(frozen=True, slots=True)
class Record:
    """One record: the parsed value (or why it failed), its first line, and where it ends."""

    value: Any
    error: str | None
    line: int  # the record's first line (1-based)
    text: str  # the record's text, for error reports
    end_offset: int
    end_line: int


class _NeedMore(Exception):
    """A hot file ends inside a record: wait for more data."""


class RecordCursor:
    """Records of one file from a byte offset: csv rows (via `csv`), or single lines.

    ``parse_line`` turns a line's text into a value (json, line formats);
    ``parse_row`` turns csv fields into one (csv format, when ``separator``
    is given). ``skip_lines`` header lines are skipped when starting at
    offset 0. Errors in one record are reported in its `Record`; the cursor
    continues with the next.
    """

    def __init__(self, f: BinaryIO, *, marker: bytes, encoding: str, hot: bool,
                 offset: int = 0, line: int = 0, skip_lines: int = 0,
                 parse_line: Callable[[str], Any] | None = None,
                 parse_row: Callable[[list[str]], Any] | None = None,
                 separator: str | None = None, skip_blank: bool = True) -> None:
        self._lines = LineReader(f, marker, offset)
        self._encoding = encoding
        self._hot = hot
        self._parse_line = parse_line
        self._parse_row = parse_row
        self._separator = separator
        self._skip_blank = skip_blank
        self._header = skip_lines
        self.offset = offset  # just after the last record (or skipped line)
        self.line = line
        self._start_line = line
        self._at_start = True
        self._raw: list[str] = []
        self._reader: Iterator[list[str]] | None = None
        if offset == 0:
            self._skip = skip_lines
        else:
            self._skip = 0

    def restart(self) -> None:
        """Read the file again from its beginning (a hot file that was truncated)."""
        self._lines.rewind(0)
        self.offset = self.line = 0
        self._skip = self._header
        self._reader = None

    def shrunk(self) -> bool:
        return self._lines.shrunk()

    def complete(self) -> None:
        """The file grows no more (a tailed file was rotated away): what is left is read out,
        a last line without its end-of-line marker too."""
        self._hot = False

    def next(self) -> Record | None:
        """The next record, or None: the end of the file (or, for a hot file, of its data now)."""
        if self._separator is not None:
            return self._next_csv()
        while True:
            raw = self._lines.next_line(partial=not self._hot)
            if raw is None:
                return None
            self.line += 1
            try:
                text = raw.decode(self._encoding)
            except UnicodeDecodeError as exc:
                return self._done(None, f"not {self._encoding} text: {exc.reason}", repr(raw[:80]))
            if self._skip > 0:
                self._skip -= 1
                self.offset = self._lines.offset
                continue
            if self._skip_blank and not text.strip():
                self.offset = self._lines.offset
                continue
            assert self._parse_line is not None
            try:
                value = self._parse_line(text)
            except RecordError as exc:
                return self._done(None, str(exc), text)
            return self._done(value, None, text)

    def _done(self, value: Any, error: str | None, text: str) -> Record:
        first = self._start_line + 1 if self._separator is not None else self.line
        self.offset = self._lines.offset
        rec = Record(value, error, first, text, self.offset, self.line)
        self._start_line = self.line
        return rec

    # ----------------------------------------------------------------- csv

    def _pull(self) -> Iterator[str]:
        """Lines for `csv.reader`; skips header, blank and comment lines between records."""
        while True:
            raw = self._lines.next_line(partial=not self._hot)
            if raw is None:
                if self._hot:
                    raise _NeedMore
                return
            self.line += 1
            text = raw.decode(self._encoding)
            if self._at_start:
                if self._skip > 0 or not text.strip() or text.startswith("#"):
                    self._skip = max(0, self._skip - 1)
                    self.offset = self._lines.offset
                    self._start_line = self.line
                    continue
                self._at_start = False
            self._raw.append(text)
            yield text + "\n"

    def _next_csv(self) -> Record | None:
        self._at_start = True
        self._raw = []
        if self._reader is None:
            self._reader = csv.reader(self._pull(), delimiter=self._separator or ",", strict=True)
        try:
            row = next(self._reader)
        except StopIteration:
            self._reader = None
            return None
        except _NeedMore:
            # The data ends inside a record: read it again once more has arrived.
            self._lines.rewind(self.offset)
            self.line = self._start_line
            self._reader = None
            return None
        except UnicodeDecodeError as exc:
            self._reader = None
            return self._done(None, f"not {self._encoding} text: {exc.reason}", "")
        except csv.Error as exc:
            self._reader = None
            return self._done(None, f"csv: {exc}", "\n".join(self._raw))
        text = "\n".join(self._raw)
        assert self._parse_row is not None
        try:
            value = self._parse_row(row)
        except RecordError as exc:
            return self._done(None, str(exc), text)
        return self._done(value, None, text)
