"""FileSink (SPL ``spl.adapter::FileSink``): tuples written to files, rotated by a close mode.

Each tuple becomes one record (csv, JSON lines or a line; `formats`).
The file name may hold modifiers: ``{id}`` (0 for the first file the sink
opens, 1 for the next...), ``{channel}`` (the parallel-region channel, 0
outside a region: in a region of width 2 or more the name must hold it, or
the channels would write one file), ``{localtime:%Y%m%d}`` and
``{gmtime:%H%M%S}`` (the job's clock, formatted by ``strftime``). ``close_mode`` says when the
current file is closed and the next one starts:

``never`` (default)  one file for the whole run
``punct``            on each window or final mark
``count``            after ``tuples_per_file`` tuples
``size``             once the file holds ``bytes_per_file`` bytes or more
``time``             once ``time_per_file`` seconds (job clock) have passed
                     since the file was opened; checked when a tuple or mark
                     arrives (riverbed gives operators no timers of their own),
                     so a quiet stream keeps its file open

The first file is created when the first tuple or mark arrives, or at the end
(so an empty input still gives an empty file); after a close the next file is
created by the next tuple, and marks arriving while no file is open are
dropped, as SPL's FileSink logs and drops them. Nothing is created in
`setup`: a restarted job restores before it writes anything.

Punctuation (SPL ``Free``): marks are consumed: they flush the file
(``flush_on_punctuation``, default true), close it (``close_mode="punct"``),
and with ``write_punctuations`` are written as the lines
``Punctuation received: WindowMarker`` / ``...FinalMarker`` (csv and line
formats, as SPL writes them). The sink emits no marks; with
``closed_files_port=N`` it submits ``{"file": path}`` on output port N each
time a file is complete (after moving it, the moved path). Final closes the
file.

Checkpoints, two ways:

* Plain (default): `drain` flushes and fsyncs; the snapshot holds the open
  file and its length; `restore` reopens that file and cuts it back to the
  length (``truncate_on_reset``, SPL's default), so replayed tuples are not
  written twice. Readers may see data that a restore later cuts off.
* ``transactional=True``, exactly-once: readers see only committed output.
  Bytes go to hidden pending files beside each output file
  (``.<name>.<offset>.pending``, one per checkpoint interval); the visible
  file gets them when the checkpoint whose barrier followed them is committed
  (`on_checkpoint_committed`: append, fsync, then delete the pending file).
  The snapshot holds, per file, its length at the barrier; `restore` makes
  each visible file exactly that long, finishing a commit a crash
  interrupted (from the pending files) or cutting off anything later, and
  deletes the pending tail written after the barrier. A final mark commits
  everything: a job that drained completely is not replayed. File-closed
  notifications follow the commit that makes the closed file visible (and a
  restore sends them again for the closed files it commits: the notices
  came after the checkpoint's barrier, so the checkpoint does not hold them).

A restart with another ``file`` (say ``-p out=out_b.csv`` after a run that
wrote ``out_a.csv``) honours the new name: the file the checkpoint was
writing is completed exactly as the checkpoint left it (plain mode: cut back
to its length; transactional: its commit finished from the pending files,
the tail written after the barrier dropped) and then closed, announced and,
in plain mode, moved like any closed file; the replayed and new output goes
to the new name. So every tuple is written once, in the old file if the
checkpoint covers it, else in the new one. A new name that is the same file
as the old one (``./out.csv`` for ``out.csv``) changes nothing.

Permissions: the hidden pending files hold output nobody should read
before it is committed, so they are always created owner-only (0600).
Output files are created as any program creates files (0666 minus the
umask, typically 0644), since other users' programs commonly read them;
``file_mode=0o640`` (or any mode) sets the permission bits of every file the
sink writes instead.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, BinaryIO, Literal

from ..graph import Operator, Punct
from ..runtime import get_logger
from ._file_common import bytes_before, move_into, require, with_spl_names
from .formats import (
    FINAL_MARKER_TEXT,
    FORMATS,
    WINDOW_MARKER_TEXT,
    Format,
    render_csv,
    render_json,
)

__all__ = ["CloseMode", "FileSink", "FileSinkError"]

CloseMode = Literal["never", "punct", "count", "size", "time"]
_CLOSE_MODES: tuple[CloseMode, ...] = ("never", "punct", "count", "size", "time")
_NS = 1_000_000_000
_CHANNEL = "{channel}"
_MODIFIER = re.compile(r"\{(id|localtime:[^{}]*|gmtime:[^{}]*)\}")
_PENDING_MODE = 0o600  # uncommitted output: owner-only, whatever file_mode says


class FileSinkError(RuntimeError):
    """A file cannot be written, committed or restored; the message names the operator and file."""


@dataclass
class _OutFile:
    """The open output file (plain mode) or the file being written (transactional mode)."""

    path: str
    length: int  # bytes in the file (transactional: once everything written is committed)
    opened_at: int
    tuples: int = 0
    handle: BinaryIO | None = None  # plain: the file; transactional: the current pending file
    segment_origin: int = 0  # transactional: offset of the current pending file's first byte
    segments: list[tuple[int, str]] = field(default_factory=list)  # (origin, pending path)
    closed: bool = False


class FileSink(Operator):
    """Writes tuples to files (SPL FileSink): formats, rotation, plain or exactly-once checkpoints.

    Window modes: none (the input port is not windowed). Punctuation: marks
    are consumed (flush, close, optionally written); none is emitted (Free);
    final closes the file (and commits it, transactional). See the module
    docstring for modifiers, close modes and checkpoints.

    Parameters (SPL spellings such as ``closeMode`` are accepted too):
    ``file`` (with modifiers), ``format`` (``"csv"``, ``"json"``, ``"line"``),
    ``separator`` and ``quote_strings`` (csv; strings are quoted by default),
    ``encoding``, ``eol_marker`` (line format), ``suppress`` (attributes not
    written), ``flush`` (flush every N tuples; 0: never),
    ``flush_on_punctuation``, ``close_mode`` with ``tuples_per_file`` /
    ``bytes_per_file`` / ``time_per_file`` (seconds), ``write_punctuations``,
    ``append`` (keep what a file held), ``move_file_to_directory`` (after a
    file is closed; plain mode), ``transactional``, ``truncate_on_reset``
    (plain mode), ``closed_files_port``, ``file_mode`` (permission bits of the
    output files, e.g. ``0o640``; default: 0666 minus the umask).
    """

    window_punctuation = "free"

    def __init__(self, file: str | os.PathLike[str], *, format: Format = "csv", separator: str = ",",
                 quote_strings: bool = True, encoding: str = "utf-8", eol_marker: str = "\n",
                 suppress: Iterable[str] = (), flush: int = 0, flush_on_punctuation: bool = True,
                 close_mode: CloseMode = "never", tuples_per_file: int | None = None,
                 bytes_per_file: int | None = None, time_per_file: float | None = None,
                 write_punctuations: bool = False, append: bool = False,
                 move_file_to_directory: str | os.PathLike[str] | None = None,
                 transactional: bool = False, truncate_on_reset: bool = True,
                 closed_files_port: int | None = None, file_mode: int | None = None, **spl: Any) -> None:
        given = {k: v for k, v in locals().items() if k not in ("self", "spl", "__class__")}
        p = with_spl_names("FileSink", FileSink.__init__, given, spl)
        op = "FileSink"
        self.file: str = os.fspath(p["file"])
        rest = _MODIFIER.sub("", self.file.replace(_CHANNEL, ""))
        require("{" not in rest and "}" not in rest, op,
                f"file={self.file!r}: unknown modifier; the modifiers are {{id}}, {{channel}}, "
                "{localtime:<strftime>} and {gmtime:<strftime>}")
        fmt = p["format"]
        require(fmt in FORMATS, op, f"format={fmt!r}: expected one of {', '.join(FORMATS)}")
        sep = p["separator"]
        require(isinstance(sep, str) and len(sep) == 1 and sep not in "\"\r\n", op,
                f"separator={sep!r}: expected one character other than a quote or a line break")
        require(sep == "," or fmt == "csv", op, "separator applies to the csv format only")
        try:
            "".encode(p["encoding"])
        except (LookupError, TypeError):
            require(False, op, f"encoding={p['encoding']!r} is not a known text encoding")
        eol = p["eol_marker"]
        require(isinstance(eol, str) and 1 <= len(eol) <= 2, op,
                f"eol_marker={eol!r}: expected one or two characters, such as '\\n' or '\\r\\n'")
        require(eol == "\n" or fmt == "line", op, "eol_marker applies to the line format only")
        mode = p["close_mode"]
        require(mode in _CLOSE_MODES, op, f"close_mode={mode!r}: expected one of "
                                          f"{', '.join(_CLOSE_MODES)} (dynamic file names are not "
                                          "supported)")
        for name, needed_by, kind in (("tuples_per_file", "count", int), ("bytes_per_file", "size", int),
                                      ("time_per_file", "time", float)):
            v = p[name]
            if mode == needed_by:
                ok = isinstance(v, (int, float) if kind is float else int) and not isinstance(v, bool) \
                    and v > 0
                require(ok, op, f"close_mode={mode!r} needs {name} > 0, got {v!r}")
            else:
                require(v is None, op, f"{name} applies to close_mode={needed_by!r} only")
        flush_every = p["flush"]
        require(type(flush_every) is int and flush_every >= 0, op,
                f"flush={flush_every!r}: expected a number of tuples >= 0 (0: no flushing by count)")
        require(not p["write_punctuations"] or fmt in ("csv", "line"), op,
                "write_punctuations applies to the csv and line formats")
        port = p["closed_files_port"]
        require(port is None or (type(port) is int and port >= 0), op,
                f"closed_files_port={port!r}: expected an output port number")
        require(not (p["transactional"] and p["move_file_to_directory"] is not None), op,
                "move_file_to_directory is not supported with transactional=True")
        require(not p["transactional"] or mode == "never" or "{id}" in self.file, op,
                f"transactional=True with close_mode={mode!r} needs {{id}} in the file name, so that "
                f"each file has its own name until it is committed (file={self.file!r})")
        suppress = p["suppress"]
        require(not isinstance(suppress, str), op, "suppress: expected a list of attribute names")
        file_mode = p["file_mode"]
        require(file_mode is None or (type(file_mode) is int and 0 <= file_mode <= 0o777), op,
                f"file_mode={file_mode!r}: expected permission bits such as 0o640 (an int in 0 .. 0o777), "
                "or None for 0666 minus the umask")
        self.format: Format = fmt
        self.separator: str = sep
        self.quote_strings = bool(p["quote_strings"])
        self.encoding: str = p["encoding"]
        self.eol_marker: str = eol
        self.suppress = frozenset(suppress)
        self.flush_every: int = flush_every
        self.flush_on_punctuation = bool(p["flush_on_punctuation"])
        self.close_mode: CloseMode = mode
        self.tuples_per_file: int | None = p["tuples_per_file"]
        self.bytes_per_file: int | None = p["bytes_per_file"]
        tpf = p["time_per_file"]
        self.time_per_file_ns = None if tpf is None else round(tpf * _NS)
        self.write_punctuations = bool(p["write_punctuations"])
        self.append = bool(p["append"])
        move = p["move_file_to_directory"]
        self.move_file_to_directory = None if move is None else os.fspath(move)
        # `Operator.transactional` tells the graph (FrozenGraph.guarantee) what the class promises;
        # this sink promises exactly-once output only when configured so: the instance says it.
        vars(self)["transactional"] = bool(p["transactional"])
        self.truncate_on_reset = bool(p["truncate_on_reset"])
        self.closed_files_port: int | None = port
        self.file_mode: int | None = file_mode
        self._eol: bytes = eol.encode(self.encoding)
        # csv: the declared schema's attributes, in its order (`on_ports_ready`); None: the
        # tuple's own order (no schema declared)
        self._columns: list[str] | None = None
        self._next_id = 0
        self._file: _OutFile | None = None
        self._between_files = False  # a file was closed; the next tuple opens the next one
        self._uncommitted: list[_OutFile] = []  # transactional: files with pending bytes
        self._point: list[tuple[str, int, bool]] | None = None  # the latest barrier's lengths
        self.files_opened = 0
        self.tuples_written = 0

    # ----------------------------------------------------------------- handlers

    @property
    def _op(self) -> str:
        ctx = getattr(self, "context", None)
        return f"FileSink {ctx.name!r}" if ctx is not None else "FileSink"

    def check_parallel(self, width: int) -> Iterable[str]:
        if width > 1 and _CHANNEL not in self.file:
            yield (f"file={self.file!r}: its {width} channels would all write this one file, "
                   "over each other; put {channel} in the file name (SPL: getChannel()), or run "
                   "the sink after the region")
        elif width > 1 and self.move_file_to_directory is not None \
                and _CHANNEL not in os.path.basename(self.file):
            yield (f"file={self.file!r} with move_file_to_directory: its {width} channels' files "
                   "have one name there, and each move would replace the last; put {channel} in "
                   "the file's own name, not only in its directory")

    @property
    def _template(self) -> str:
        """The file name with ``{channel}`` given (SPL ``getChannel()``): each channel of a
        parallel region writes, commits and cleans up files of its own."""
        channel: int = getattr(getattr(self, "context", None), "channel", 0)  # (0 before setup)
        return self.file.replace(_CHANNEL, str(channel))

    def setup(self) -> None:
        if self.move_file_to_directory is not None and not os.path.isdir(self.move_file_to_directory):
            raise FileSinkError(f"{self._op}: move_file_to_directory={self.move_file_to_directory!r} "
                                "is not an existing directory")

    def on_ports_ready(self) -> None:
        # SPL writes a tuple's attributes in its type's order. A dict keeps the order its
        # operator built it in (an Aggregate's copied attributes first, a Join's right side
        # first), so a file written in that order could not be read back with the schema.
        schema = self.context.input_schema(0)
        if self.format == "csv" and schema is not None:
            self._columns = [n for n in schema.names if n not in self.suppress]

    def on_tuple(self, tup: Any, port: int) -> None:
        self._close_if_expired()
        f = self._file or self._open_next()
        self._write(f, self._render(tup))
        f.tuples += 1
        self.tuples_written += 1
        if self.flush_every and f.tuples % self.flush_every == 0:
            self._flush(f)
        if (self.close_mode == "count" and f.tuples >= (self.tuples_per_file or 0)) or \
                (self.close_mode == "size" and f.length >= (self.bytes_per_file or 0)):
            self._close()

    def on_punct(self, punct: Punct, port: int) -> None:
        self._close_if_expired()
        f = self._file
        if f is None and not self._between_files:
            f = self._open_next()  # the first file exists once anything arrived
        if punct is Punct.FINAL:
            if f is not None:
                if self.write_punctuations:
                    self._write(f, FINAL_MARKER_TEXT.encode(self.encoding) + self._eol)
                self._close()
            if self.transactional:
                self._point = [(u.path, u.length, u.closed) for u in self._uncommitted]
                self._apply_point()
            return
        if f is None:
            return  # between files: SPL drops the mark, there is no file to write it to
        if self.write_punctuations:
            self._write(f, WINDOW_MARKER_TEXT.encode(self.encoding) + self._eol)
        if self.close_mode == "punct":
            self._close()
        elif self.flush_on_punctuation:
            self._flush(f)

    def on_shutdown(self) -> None:
        f = self._file
        if f is not None and f.handle is not None:
            f.handle.close()
            f.handle = None

    # ----------------------------------------------------------------- files

    def _name(self, file_id: int) -> str:
        now = self.context.now()

        def expand(m: re.Match[str]) -> str:
            key = m.group(1)
            if key == "id":
                return str(file_id)
            kind, fmt = key.split(":", 1)
            moment = datetime.fromtimestamp(now / _NS, tz=UTC)
            return (moment.astimezone() if kind == "localtime" else moment).strftime(fmt)

        return _MODIFIER.sub(expand, self._template)

    def _open_next(self) -> _OutFile:
        path = self._name(self._next_id)
        self._next_id += 1
        parent = os.path.dirname(path) or "."
        if not os.path.isdir(parent):
            raise FileSinkError(f"{self._op}: cannot create {path!r}: directory {parent!r} does not "
                                "exist (FileSink creates only the file)")
        length = os.path.getsize(path) if self.append and os.path.exists(path) else 0
        f = _OutFile(path, length, self.context.now())
        if self.transactional:
            if not self.append:
                _remove(path)
            for _origin, stale in _pending_files(path):
                _remove(stale)
            self._start_segment(f)
            self._uncommitted.append(f)
        else:
            f.handle = open(path, "ab" if self.append else "wb")  # noqa: SIM115 - closed in _close
            _set_mode(f.handle.fileno(), self.file_mode)
        self._file = f
        self._between_files = False
        self.files_opened += 1
        return f

    def _render(self, tup: Any) -> bytes:
        if type(tup) is not dict:
            raise FileSinkError(f"{self._op}: expected a dict tuple, got {type(tup).__name__}")
        text: str
        columns = self._columns  # (csv with a declared schema: its order, `suppress` taken out)
        if columns is None and self.suppress:
            tup = {k: v for k, v in tup.items() if k not in self.suppress}
        if columns is not None:
            try:
                values = [tup[n] for n in columns]
            except KeyError as exc:
                raise FileSinkError(f"{self._op}: the tuple has no attribute {exc.args[0]!r} of "
                                    f"its stream's schema: {tup!r}") from None
            text = render_csv(values, self.separator, self.quote_strings)
        elif self.format == "csv":
            text = render_csv(list(tup.values()), self.separator, self.quote_strings)
        elif self.format == "json":
            return render_json(tup) + self._eol
        else:
            if len(tup) != 1 or not isinstance(next(iter(tup.values())), str):
                raise FileSinkError(f"{self._op}: the line format writes tuples of one rstring "
                                    f"attribute, got {tup!r} (use suppress= to leave attributes out)")
            text = next(iter(tup.values()))
        return text.encode(self.encoding) + self._eol

    def _write(self, f: _OutFile, data: bytes) -> None:
        assert f.handle is not None
        f.handle.write(data)
        f.length += len(data)

    def _flush(self, f: _OutFile, durable: bool = False) -> None:
        if f.handle is not None:
            f.handle.flush()
            if durable:
                os.fsync(f.handle.fileno())

    def _close_if_expired(self) -> None:
        f = self._file
        if f is not None and self.close_mode == "time" and self.time_per_file_ns is not None \
                and self.context.now() - f.opened_at >= self.time_per_file_ns:
            self._close()

    def _close(self) -> None:
        """Close the current file; the next tuple opens the next one."""
        f = self._file
        assert f is not None
        self._file = None
        self._between_files = True
        assert f.handle is not None
        if self.transactional:
            self._flush(f, durable=True)
            f.handle.close()
            f.handle = None
            f.closed = True
            return  # visible, and announced, once committed
        f.handle.close()
        f.handle = None
        path = f.path
        if self.move_file_to_directory is not None:
            path = move_into(path, self.move_file_to_directory)
        self._announce(path)

    def _announce(self, path: str) -> None:
        if self.closed_files_port is not None:
            self.submit({"file": path}, self.closed_files_port)

    # ----------------------------------------------------------------- transactional

    def _start_segment(self, f: _OutFile) -> None:
        seg = _pending_path(f.path, f.length)
        fd = os.open(seg, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, _PENDING_MODE)
        _set_mode(fd, _PENDING_MODE)  # a stale file of that name keeps its mode through O_TRUNC
        f.handle = os.fdopen(fd, "wb")
        f.segment_origin = f.length
        f.segments.append((f.length, seg))

    def _apply_point(self) -> None:
        """Make the latest barrier's lengths visible; forget files that are then complete."""
        point, self._point = self._point, None
        if point is None:
            return
        by_path = {f.path: f for f in self._uncommitted}
        for path, length, closed in point:
            f = by_path.get(path)
            if f is None:
                continue
            if f.handle is not None:
                f.handle.flush()
            _roll_forward(self._op, path, length, f.segments, self.file_mode)
            current = f.segments[-1][1] if f.handle is not None else None
            keep = []
            for origin, seg in f.segments:
                if seg != current and origin + os.path.getsize(seg) <= length:
                    _remove(seg)
                else:
                    keep.append((origin, seg))
            f.segments = keep
            if closed and f.length == length:
                self._uncommitted.remove(f)
                self._announce(path)

    def on_checkpoint_committed(self, checkpoint_id: int) -> None:
        """The checkpoint of the latest snapshot is stored: make what preceded its barrier visible."""
        if self.transactional:
            self._apply_point()

    # ----------------------------------------------------------------- state

    def drain(self) -> None:
        if self._file is not None:
            self._flush(self._file, durable=True)

    def snapshot(self) -> Any:
        f = self._file
        state: dict[str, Any] = {
            "file": self._template, "id": self._next_id, "between_files": self._between_files,
            "current": None if f is None else f.path, "length": 0 if f is None else f.length,
            "tuples": 0 if f is None else f.tuples, "opened_at": 0 if f is None else f.opened_at,
        }
        if not self.transactional:
            if f is not None and self.move_file_to_directory is not None and f.length:
                # The file may be closed and moved before the next checkpoint: a restore takes
                # the moved copy back only if it still holds these bytes before the offset (a
                # later file of the same name may have been moved over it).
                self._flush(f)
                state["before"] = bytes_before(f.path, f.length)
            return state
        if f is not None and f.handle is not None and f.length > f.segment_origin:
            # What follows the barrier goes to a new pending file, committed by the next checkpoint.
            self._flush(f, durable=True)
            f.handle.close()
            self._start_segment(f)
        self._point = [(u.path, u.length, u.closed) for u in self._uncommitted]
        state["files"] = [list(entry) for entry in self._point]
        return state

    def restore(self, state: Any) -> None:
        try:
            next_id, current, length = state["id"], state["current"], state["length"]
            tuples, opened_at, between = state["tuples"], state["opened_at"], state["between_files"]
            files = [(str(p), int(n), bool(c)) for p, n, c in state["files"]] if self.transactional \
                else []
        except (KeyError, TypeError, ValueError):
            raise FileSinkError(f"{self._op}: cannot restore from {state!r}: expected the dict "
                                f"snapshot() returns (transactional={self.transactional})") from None
        self.on_shutdown()
        self._file, self._uncommitted, self._point = None, [], None
        self._next_id, self._between_files = next_id, between
        renamed = current is not None and self._renamed(current, state.get("file"), next_id)
        if renamed:
            assert current is not None
            self._log_renamed(current, state.get("file"))
        if self.transactional:
            old = state.get("file")
            changed = old if isinstance(old, str) and old != self._template else None
            self._restore_transactional(files, current, tuples, opened_at, renamed=renamed,
                                        old_template=changed)
            return
        if current is None:
            return
        moved = self._moved_copy(current, length, state.get("before"))
        if moved is not None:
            # Closed and moved after the checkpoint: taken back to go on where it stood (a new
            # empty file cut to the checkpoint's length was zeros, then moved over the good copy).
            move_into(moved, os.path.dirname(os.path.abspath(current)))
        if length and not os.path.exists(current):
            # Gone since the checkpoint (a consumer of the closed files took it): what follows
            # the checkpoint goes to a new file of that name, from its start, not after `length`
            # bytes of zeros (at least once, as a plain sink is).
            get_logger(self.context.job, self.context.name).warning(
                "output file gone since the checkpoint", file=current, checkpoint_length=length,
                action="the output after the checkpoint is written again, to a new file")
            length = 0
        fd = os.open(current, os.O_RDWR | os.O_CREAT, 0o666)
        _set_mode(fd, self.file_mode)
        handle = os.fdopen(fd, "r+b")
        if self.truncate_on_reset:
            handle.truncate(length)
        else:
            length = handle.seek(0, os.SEEK_END)
        handle.seek(length)
        self._file = _OutFile(current, length, opened_at, tuples, handle)
        if renamed:
            self._close()  # complete as the checkpoint left it; the next tuple opens the new name
            self._between_files = False  # ...and so does a mark or the end: the new file always exists

    def _moved_copy(self, current: str, length: int, before: Any) -> str | None:
        """Where ``current`` went if it was closed and moved (``move_file_to_directory``) and is
        not at its own name any more, the same file (it holds ``before`` just before
        ``length``); None otherwise."""
        if self.move_file_to_directory is None or os.path.exists(current) \
                or not isinstance(before, bytes):
            return None
        moved = os.path.join(self.move_file_to_directory, os.path.basename(current))
        return moved if bytes_before(moved, length) == before else None

    def _renamed(self, current: str, template: Any, next_id: int) -> bool:
        """Whether ``file`` changed since the checkpoint, so that output moves to a new file."""
        if template == self._template:
            return False
        if template is None and re.fullmatch(_template_regex(self._template), current):
            return False  # a checkpoint from before the template was stored: its file fits this one
        candidate = self._name(max(next_id - 1, 0))
        if os.path.abspath(candidate) == os.path.abspath(current):
            return False
        with contextlib.suppress(OSError):
            if os.path.samefile(candidate, current):
                return False  # another name of the same file: nothing moves
        return True

    def _log_renamed(self, current: str, template: Any) -> None:
        was = f"file={template!r}" if isinstance(template, str) else "another file="
        get_logger(self.context.job, self.context.name).warning(
            "output file changed since the checkpoint", checkpoint_file=current, file=self.file,
            action=f"the checkpoint was taken with {was}: {current!r} is completed as the checkpoint "
                   f"left it and closed; the output from the checkpoint on goes to file={self.file!r}")

    def _restore_transactional(self, files: list[tuple[str, int, bool]], current: str | None,
                               tuples: int, opened_at: int, *, renamed: bool,
                               old_template: str | None) -> None:
        """Commit each file to its length at the barrier. When ``renamed``, the output moves to a
        new name and nothing is reopened; ``old_template`` is the ``file`` of the checkpoint when
        it differs (its pending files begun after the barrier are stray too)."""
        known = {path for path, _, _ in files}
        for path, length, closed in files:
            pending = _pending_files(path)
            _roll_forward(self._op, path, length, pending, self.file_mode)
            for _origin, seg in pending:
                _remove(seg)  # committed now, or written after the barrier: gone either way
            if closed or (renamed and path == current):
                self._announce(path)  # its commit's notification was not kept by the checkpoint
        for stale in self._stray_pending(known):
            _remove(stale)  # files begun after the barrier
        if old_template is not None:
            for stale in self._stray_pending(known, *os.path.split(old_template)):
                _remove(stale)  # files the old name began after the barrier
        if renamed:
            self._between_files = False  # the new name's file exists once anything arrives
        elif current is not None:
            length = next(n for path, n, _ in files if path == current)
            f = _OutFile(current, length, opened_at, tuples)
            self._start_segment(f)
            self._uncommitted.append(f)
            self._file = f

    def _stray_pending(self, known: set[str], directory: str | None = None,
                       base: str | None = None) -> list[str]:
        """Pending files of this sink's file names (or of ``directory``/``base``, a template) that
        belong to none of ``known``."""
        if directory is None or base is None:
            directory, base = os.path.split(self._template)
        if _MODIFIER.search(directory):
            return []
        pattern = re.compile(r"^\." + _template_regex(base) + r"\.\d+\.pending$")
        try:
            names = os.listdir(directory or ".")
        except FileNotFoundError:
            return []
        out = []
        for name in names:
            if pattern.match(name):
                owner = os.path.join(directory, name[1:name.rindex(".", 0, name.rindex("."))])
                if owner not in known:
                    out.append(os.path.join(directory, name))
        return out


def _template_regex(template: str) -> str:
    parts, last = [], 0
    for m in _MODIFIER.finditer(template):
        parts.append(re.escape(template[last:m.start()]))
        parts.append(r"\d+" if m.group(1) == "id" else ".+?")
        last = m.end()
    parts.append(re.escape(template[last:]))
    return "".join(parts)


def _pending_path(path: str, origin: int) -> str:
    directory, base = os.path.split(path)
    return os.path.join(directory, f".{base}.{origin}.pending")


def _pending_files(path: str) -> list[tuple[int, str]]:
    """The pending files of an output file on disk, as (origin, path), in order."""
    directory, base = os.path.split(path)
    pattern = re.compile(r"^\." + re.escape(base) + r"\.(\d+)\.pending$")
    try:
        names = os.listdir(directory or ".")
    except FileNotFoundError:
        return []
    found = [(int(m.group(1)), os.path.join(directory, n)) for n in names if (m := pattern.match(n))]
    return sorted(found)


def _roll_forward(op: str, path: str, target: int, segments: list[tuple[int, str]],
                  mode: int | None) -> None:
    """Make the visible file exactly ``target`` bytes: what it holds, continued from the pending
    files (each starting at its origin offset), or cut back; then fsync it."""
    existed = os.path.exists(path)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    _set_mode(fd, mode)
    with os.fdopen(fd, "r+b") as out:
        have = out.seek(0, os.SEEK_END)
        if have > target:
            out.truncate(target)
            have = target
        for origin, seg in sorted(segments):
            if have >= target:
                break
            size = os.path.getsize(seg)
            if origin + size <= have:
                continue
            if origin > have:
                break
            with open(seg, "rb") as src:
                src.seek(have - origin)
                remaining = min(target, origin + size) - have
                while remaining > 0:
                    chunk = src.read(min(1 << 20, remaining))
                    if not chunk:
                        break
                    out.write(chunk)
                    have += len(chunk)
                    remaining -= len(chunk)
        if have < target:
            raise FileSinkError(f"{op}: cannot commit {path!r} to {target} bytes: the pending data "
                                f"from byte {have} is missing")
        out.flush()
        os.fsync(out.fileno())
    if not existed:
        _fsync_directory(os.path.dirname(path) or ".")


def _fsync_directory(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _set_mode(fd: int, mode: int | None) -> None:
    """Give an open file the permission bits ``mode`` (None: leave what creating it gave)."""
    if mode is not None:
        os.fchmod(fd, mode)


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
