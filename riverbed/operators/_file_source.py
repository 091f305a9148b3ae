"""FileSource (SPL ``spl.adapter::FileSource``): the records of files as tuples, a window mark per file.

Two forms, chosen by ``file=``:

* ``FileSource(file="in.csv")`` is a source (``g.source``). It reads the file
  as fast as downstream takes it (or paced by a csv delay field), submits a
  window mark once the whole file was output (and moved or deleted, if asked),
  and ends: the runtime then sends final. With ``hot_file=True`` it tails
  the file instead: no end at end of file, a window mark whenever the file
  shrinks (it is read again from the start) or is replaced under its name (a
  rotation: once the old one is read out, the new one from its start), and
  one more when the job stops.
* ``FileSource()`` with an input port (``g.operator``): each input tuple
  names a file; the file is read whole, then a window mark follows. Final
  follows the input's final.

Punctuation (standard-operators.md §17): window marks are generated, one per
file; incoming window marks are ignored (input port Oblivious, output
Generating).

Bad records. ``parsing="strict"`` (SPL's default) stops: a `FileFormatError`
naming the operator, the file, the line and the rule is raised. In the
input-port form the file's group is first closed with its window mark, and if
the graph gave the operator ``error_port=True`` the runtime routes the error
(with the file-name tuple) there and the next file is read; otherwise the job
stops. ``parsing="permissive"`` skips bad records: each is counted
(``invalid_tuples``), logged with its file and line, and, in the input-port
form with ``bad_line_port=N``, submitted on output port N as
``{"file", "line", "text", "error"}``. (A source has a single output port, so
the file form can only log and count.)

Replay. The file form is replayable: `snapshot` holds the file, the byte
offset and line number just after the last submitted record, the number of
tuples submitted, and whether the end-of-file mark went out; `restore` makes
the next `run` continue with the next record, so a checkpointed job neither
loses nor repeats a record. The input-port form reads a file within one
handler call, so a checkpoint always falls between files and it has no state;
the file names are replayed by its upstream (IBM: "drain processing is
allowed only at file boundaries").
"""

from __future__ import annotations

import asyncio
import codecs
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO, Literal, overload

from ..graph import Operator, Punct, Schema, Source
from ..runtime import get_logger
from ._file_common import as_schema, bytes_before, declared_schema, move_into, require, with_spl_names
from ._file_reader import Record, RecordCursor
from .formats import FORMATS, FileFormatError, Format, csv_row_parser, json_record_parser

__all__ = ["FileSource", "FileSourceError", "FileSourceOfFile", "FileSourceWithInput"]

_NS = 1_000_000_000
_FLUSH_EVERY = 1024  # tuples between hand-overs downstream (and chances to take a checkpoint)
_RENAMED = {"has_header_line": "has_header", "ignore_extra_c_s_v_values": "ignore_extra_csv_values"}

Parsing = Literal["strict", "permissive"]


class FileSourceError(RuntimeError):
    """A file cannot be opened, moved or resumed; the message names the operator and the file."""


class _FileSourceBase(Operator):
    """Parameters and reading shared by both forms of `FileSource` (its ``__init__`` lives
    here so that type checkers take the form `FileSource.__new__` picks)."""

    def __init__(self, file: str | os.PathLike[str] | None = None, *, format: Format = "csv",
                 schema: Schema | Mapping[str, str] | None = None, parsing: Parsing = "strict",
                 has_header: bool | int = False, separator: str = ",", encoding: str = "utf-8",
                 eol_marker: str = "\n", default_tuple: Mapping[str, Any] | None = None,
                 ignore_extra_csv_values: bool = False, has_delay_field: bool = False,
                 hot_file: bool = False, poll_interval: float = 1.0, init_delay: float = 0.0,
                 delete_file: bool = False, move_file_to_directory: str | os.PathLike[str] | None = None,
                 ignore_open_errors: bool = False, file_attribute: str | None = None,
                 file_name_attribute: str | None = None, tuple_number_attribute: str | None = None,
                 status_port: int | None = None, bad_line_port: int | None = None,
                 **spl: Any) -> None:
        given = {k: v for k, v in locals().items() if k not in ("self", "spl", "__class__")}
        p = with_spl_names("FileSource", _FileSourceBase.__init__, given, spl, _RENAMED)
        op = "FileSource"
        self.file = None if p["file"] is None else os.fspath(p["file"])
        has_input = self.file is None
        fmt = p["format"]
        require(fmt in FORMATS, op, f"format={fmt!r}: expected one of {', '.join(FORMATS)}")
        require(p["parsing"] in ("strict", "permissive"), op,
                f"parsing={p['parsing']!r}: expected 'strict' or 'permissive'")
        header = p["has_header"]
        require(type(header) in (bool, int) and header >= 0, op,
                f"has_header={header!r}: expected True/False or a number of lines >= 0")
        require(not header or fmt == "csv", op, "has_header applies to the csv format only")
        sep = p["separator"]
        require(isinstance(sep, str) and len(sep) == 1 and sep not in "\"\r\n", op,
                f"separator={sep!r}: expected one character other than a quote or a line break")
        require(sep == "," or fmt == "csv", op, "separator applies to the csv format only")
        try:
            codecs.lookup(p["encoding"])
        except (LookupError, TypeError):
            require(False, op, f"encoding={p['encoding']!r} is not a known text encoding")
        eol = p["eol_marker"]
        require(isinstance(eol, str) and 1 <= len(eol) <= 2, op,
                f"eol_marker={eol!r}: expected one or two characters, such as '\\n' or '\\r\\n'")
        require(eol == "\n" or fmt == "line", op, "eol_marker applies to the line format only")
        require(p["default_tuple"] is None or (isinstance(p["default_tuple"], Mapping) and fmt != "line"),
                op, "default_tuple: expected a mapping of attribute values, for the csv or json format")
        require(not p["has_delay_field"] or fmt == "csv", op,
                "has_delay_field applies to the csv format only")
        require(not (p["delete_file"] and p["move_file_to_directory"] is not None), op,
                "give delete_file or move_file_to_directory, not both")
        require(not p["hot_file"] or not (p["delete_file"] or p["move_file_to_directory"] is not None),
                op, "a hot_file is never finished, so it cannot be deleted or moved")
        for name in ("poll_interval", "init_delay"):
            v = p[name]
            require(isinstance(v, (int, float)) and v >= 0 and (v > 0 or name != "poll_interval"), op,
                    f"{name}={v!r}: expected seconds " + (">= 0" if name == "init_delay" else "> 0"))
        if has_input:
            for name in ("hot_file", "has_delay_field"):
                require(not p[name], op, f"{name} needs the file= form: an operator with an input "
                                         "port reads each file within one call and cannot wait")
            require(not p["init_delay"], op, "init_delay needs the file= form")
        else:
            for name in ("file_attribute", "status_port", "bad_line_port"):
                require(p[name] is None, op, f"{name} needs the input-port form (no file=); a "
                                             "source has a single output port")
        for name in ("status_port", "bad_line_port"):
            v = p[name]
            require(v is None or (type(v) is int and v >= 1), op,
                    f"{name}={v!r}: expected an output port number >= 1 (port 0 carries the data)")
        self.format: Format = fmt
        self.schema = as_schema(op, p["schema"])
        self.parsing: Parsing = p["parsing"]
        self.has_header = int(header)
        self.separator: str = sep
        self.encoding: str = p["encoding"]
        self.eol_marker: str = eol
        self.default_tuple: Mapping[str, Any] | None = p["default_tuple"]
        self.ignore_extra_csv_values: bool = bool(p["ignore_extra_csv_values"])
        self.has_delay_field: bool = bool(p["has_delay_field"])
        self.hot_file: bool = bool(p["hot_file"])
        self.poll_interval: float = float(p["poll_interval"])
        self.init_delay: float = float(p["init_delay"])
        self.delete_file: bool = bool(p["delete_file"])
        move = p["move_file_to_directory"]
        self.move_file_to_directory = None if move is None else os.fspath(move)
        self.ignore_open_errors: bool = bool(p["ignore_open_errors"])
        self.file_attribute: str | None = p["file_attribute"]
        self.file_name_attribute: str | None = p["file_name_attribute"]
        self.tuple_number_attribute: str | None = p["tuple_number_attribute"]
        self.status_port: int | None = p["status_port"]
        self.bad_line_port: int | None = p["bad_line_port"]
        self.invalid_tuples = 0
        self.files_opened = 0

    # ----------------------------------------------------------------- set-up

    @property
    def _op(self) -> str:
        ctx = getattr(self, "context", None)
        return f"FileSource {ctx.name!r}" if ctx is not None else "FileSource"

    def setup(self) -> None:
        self._log = get_logger(self.context.job, self.context.name)
        declared = declared_schema(self.context, 0)
        schema = self.schema or declared
        op = self._op
        if self.schema is not None and declared is not None and self.schema != declared:
            raise FileSourceError(f"{op}: schema={self.schema} differs from the schema the graph "
                                  f"declares for output port 0, {declared}; give one of them")
        assigned = tuple(a for a in (self.file_name_attribute, self.tuple_number_attribute) if a)
        if schema is not None:
            for a in assigned:
                if schema.type_of(a) is None:
                    raise FileSourceError(f"{op}: attribute {a!r} set by the operator is not in the "
                                          f"schema {schema}")
        read = tuple(n for n in schema.names if n not in assigned) if schema is not None else ()
        self._order: tuple[str, ...] | None = schema.names if schema is not None and assigned else None
        if self.format == "csv":
            if schema is None:
                raise FileSourceError(f"{op}: the csv format needs a schema: give schema= or declare "
                                      "the output stream's schema in the graph")
            self._parse_row: Any = csv_row_parser(
                schema, read, default_tuple=self.default_tuple,
                ignore_extra=self.ignore_extra_csv_values, has_delay=self.has_delay_field)
            self._parse_line: Any = None
        elif self.format == "json":
            self._parse_row = None
            self._parse_line = json_record_parser(schema, read, self.default_tuple)
        else:
            if schema is None:
                name = "line"
            elif len(read) != 1 or schema.type_of(read[0]) not in ("rstring", "ustring"):
                raise FileSourceError(f"{op}: the line format needs exactly one rstring attribute "
                                      f"not set by the operator; the schema is {schema}")
            else:
                name = read[0]
            self._parse_row = None
            self._parse_line = lambda text: {name: text}
        if self.move_file_to_directory is not None and not Path(self.move_file_to_directory).is_dir():
            raise FileSourceError(f"{op}: move_file_to_directory={self.move_file_to_directory!r} is "
                                  "not an existing directory")

    # ----------------------------------------------------------------- reading

    def _cursor(self, f: BinaryIO, offset: int, line: int) -> RecordCursor:
        return RecordCursor(
            f, marker=self.eol_marker.encode(self.encoding), encoding=self.encoding, hot=self.hot_file,
            offset=offset, line=line, skip_lines=self.has_header,
            parse_line=self._parse_line, parse_row=self._parse_row,
            separator=self.separator if self.format == "csv" else None,
            skip_blank=self.format != "line")

    def _open(self, path: str) -> BinaryIO | None:
        """The file opened for reading; None (after reporting) if it cannot be and that is allowed."""
        try:
            f = open(path, "rb")  # noqa: SIM115 - the caller closes it
        except OSError as exc:
            self._report_status(path, exc.errno or -1)
            if self.ignore_open_errors:
                self._log.error("file cannot be opened", file=path, error=exc.strerror)
                return None
            raise FileSourceError(f"{self._op}: cannot open {path!r}: {exc.strerror}") from None
        self.files_opened += 1
        return f

    def _tuple(self, rec: Record, path: str, number: int) -> dict[str, Any]:
        tup: dict[str, Any] = rec.value[1] if self.format == "csv" else rec.value
        if self.file_name_attribute is not None:
            tup[self.file_name_attribute] = path
        if self.tuple_number_attribute is not None:
            tup[self.tuple_number_attribute] = number
        if self._order is not None:
            tup = {n: tup[n] for n in self._order}
        return tup

    def _bad(self, path: str, rec: Record) -> None:
        """A record that does not parse: stop (strict), or count, log and maybe route it."""
        assert rec.error is not None
        if self.parsing == "strict":
            raise FileFormatError(self._op, path, rec.line, rec.error)
        self.invalid_tuples += 1
        self._log.warning("bad record skipped", file=path, line=rec.line, error=rec.error)
        if self.bad_line_port is not None:
            self.submit({"file": path, "line": rec.line, "text": rec.text, "error": rec.error},
                        self.bad_line_port)

    def _finish_file(self, path: str) -> None:
        if self.delete_file:
            os.unlink(path)
        elif self.move_file_to_directory is not None:
            move_into(path, self.move_file_to_directory)
        self._report_status(path, 0)

    def _report_status(self, path: str, error: int) -> None:
        if self.status_port is not None:
            self.submit({"file": path, "error": error}, self.status_port)


class FileSource(_FileSourceBase):
    """Reads files as tuples (SPL FileSource); ``file=`` makes it a source, else it reads the files
    its input tuples name.

    ``FileSource(file=...)`` builds a `FileSourceOfFile` (a `Source`, for
    ``g.source``); ``FileSource()`` a `FileSourceWithInput` (for
    ``g.operator`` with one input port). Both are FileSource instances.

    Window modes: none (the input port is not windowed). Punctuation: one
    window mark after each file (Generating); incoming marks are ignored;
    final follows the end of the file (source form, not ``hot_file``) or the
    input's final. See the module docstring for bad records and replay.

    Parameters (SPL spellings such as ``hasHeaderLine`` are accepted too):

    ``format``: ``"csv"`` (needs a schema), ``"json"`` (JSON lines) or
    ``"line"`` (one rstring attribute per line). ``schema``: the tuples'
    schema; default: the schema the graph declares on output port 0.
    ``has_header``: csv header lines to skip (True = 1). ``separator``: the
    csv field separator. ``encoding``: the text encoding. ``eol_marker``:
    the line end of the ``line`` format (``"\\n"``, ``"\\r\\n"``, ``"\\r"``...).
    ``default_tuple``: values of empty csv fields / missing JSON attributes.
    ``ignore_extra_csv_values``: extra csv fields are dropped instead of
    being an error. ``has_delay_field``: each csv record starts with a delay
    in seconds, waited on the job's clock before the tuple is submitted.
    ``hot_file``, ``poll_interval`` (seconds between looks at a hot file's
    end), ``init_delay`` (seconds before reading starts), ``delete_file``,
    ``move_file_to_directory`` (after a file is read), ``ignore_open_errors``
    (skip a file that cannot be opened), ``file_attribute`` (the input
    attribute naming the file; default: the input tuple's only attribute),
    ``file_name_attribute``/``tuple_number_attribute`` (output attributes the
    operator sets to the file name and to the tuple's 0-based number in its
    file, SPL ``FileName()``/``TupleNumber()``; not read from the file),
    ``status_port`` (input-port form: output port receiving
    ``{"file", "error"}`` after each file, error 0, or the errno of a failed
    open), ``bad_line_port`` (see the module docstring).
    """

    window_punctuation = "generating"

    @overload
    def __new__(cls, file: str | os.PathLike[str], **params: Any) -> FileSourceOfFile: ...

    @overload
    def __new__(cls, file: None = None, **params: Any) -> FileSource: ...

    def __new__(cls, file: str | os.PathLike[str] | None = None, **params: Any) -> FileSource:
        form = cls
        if cls is FileSource:
            form = FileSourceOfFile if file is not None else FileSourceWithInput
        return super().__new__(form)


class FileSourceWithInput(FileSource):
    """The input-port form of `FileSource`: each input tuple names a file to read whole."""

    def on_tuple(self, tup: Any, port: int) -> None:
        path = self._path_of(tup)
        f = self._open(path)
        if f is None:
            return
        with f:
            cursor = self._cursor(f, 0, 0)
            number = 0
            try:
                while (rec := cursor.next()) is not None:
                    if rec.error is not None:
                        self._bad(path, rec)
                        continue
                    self.submit(self._tuple(rec, path, number))
                    number += 1
            except FileFormatError:
                self.submit_punct(Punct.WINDOW)  # the part that was read still ends its group
                raise
        self._finish_file(path)
        self.submit_punct(Punct.WINDOW)

    def _path_of(self, tup: Any) -> str:
        if not isinstance(tup, dict):
            raise FileSourceError(f"{self._op}: expected a dict tuple naming a file, got {tup!r}")
        if self.file_attribute is not None:
            if self.file_attribute not in tup:
                raise FileSourceError(f"{self._op}: the input tuple has no attribute "
                                      f"{self.file_attribute!r} (file_attribute): {tup!r}")
            value = tup[self.file_attribute]
        elif len(tup) == 1:
            value = next(iter(tup.values()))
        else:
            raise FileSourceError(f"{self._op}: the input tuple {tup!r} has several attributes; "
                                  "give file_attribute= to say which one names the file")
        if not isinstance(value, (str, os.PathLike)):
            raise FileSourceError(f"{self._op}: the file name {value!r} is not a string")
        return os.fspath(value)


class FileSourceOfFile(FileSource, Source):
    """The source form of `FileSource` (``file=``): reads one file (or tails it), replayably.

    Replayable unless the file is deleted or moved once read: a restore to a
    checkpoint taken before that could not find it again.
    """

    replayable = True

    def __init__(self, file: str | os.PathLike[str] | None = None, **params: Any) -> None:
        super().__init__(file, **params)
        if self.delete_file or self.move_file_to_directory is not None:
            vars(self)["replayable"] = False  # the instance's promise (FrozenGraph.guarantee)
        self._offset = 0  # just after the last submitted record
        self._line = 0
        self._tuples = 0
        self._done = False  # the end-of-file mark was submitted
        self._before: bytes | None = None  # restored: what the file held just before the offset
        # The clock times the reading keeps to, checkpointed so that a restart keeps them too
        # (it waited the init delay again, and a record's delay again from the restore: every
        # later tuple late): when the source began, and when the last record was submitted.
        self._began: int | None = None  # reading starts init_delay (as given now) after it
        self._paced_at: int | None = None

    def snapshot(self) -> Any:
        return {"file": self.file, "offset": self._offset, "line": self._line,
                "tuples": self._tuples, "done": self._done, "before": self._bytes_before(),
                "began": self._began, "paced_at": self._paced_at}

    def _bytes_before(self) -> bytes | None:
        """The last bytes before the offset: a restart checks that the file still holds them
        there. A file replaced under the same name (a daily file) resumed at the old offset:
        records skipped, and one cut mid-line, with exit 0 (a review). Read once a checkpoint,
        from a file of its own: nothing on the read path."""
        if not self._offset or self.file is None:
            return b""
        return bytes_before(self.file, self._offset)  # (None: gone, deleted once read)

    def restore(self, state: Any) -> None:
        try:
            file, offset, line = state["file"], state["offset"], state["line"]
            tuples, done = state["tuples"], state["done"]
        except (KeyError, TypeError):
            raise FileSourceError(f"{self._op}: cannot restore from {state!r}: expected the dict "
                                  "snapshot() returns") from None
        if file != self.file:
            raise FileSourceError(f"{self._op}: the checkpoint is of file {file!r}, this operator "
                                  f"reads {self.file!r}")
        self._offset, self._line, self._tuples, self._done = offset, line, tuples, bool(done)
        self._before = state.get("before")  # (None in a checkpoint of an older riverbed)
        self._began, self._paced_at = state.get("began"), state.get("paced_at")
        if self.file is not None and not self.hot_file and not self._done and self._offset:
            # Looked at now as well as when reading starts: a file replaced since the checkpoint
            # refuses the restart before anything runs (`riverbed run` exits 2), where a failure
            # once the job ran was retried, the region reset again and again.
            try:
                with open(self.file, "rb") as f:
                    problem = self._changed(f, self.file, self._before)
            except OSError:
                return  # (missing or unreadable: reading says so, or ignores it if told to)
            if problem is not None:
                raise FileSourceError(f"{self._op}: {problem}")

    def reset_to_initial_state(self) -> None:
        self._offset = self._line = self._tuples = 0
        self._done = False
        self._before = None
        self._began = self._paced_at = None

    def _holds(self, f: BinaryIO, before: bytes) -> bool:
        """Whether ``f`` holds ``before`` just before the offset (``f`` is left at its start)."""
        f.seek(self._offset - len(before))
        held = f.read(len(before))
        f.seek(0)
        return held == before

    async def run(self) -> None:
        ctx: Any = self.context
        assert self.file is not None
        path = self.file
        if self._done:
            return  # restored after the whole file had been output
        if self._began is None:
            self._began = ctx.now()
        start_at = self._began + round(self.init_delay * _NS)
        if start_at > ctx.now():
            await ctx.sleep_until(start_at)
        try:
            while (f := self._open(path)) is not None:
                with f:
                    if not await self._read(ctx, f, path):
                        return
                # A tailed file was replaced under its name (rotated): the new one, from its start.
                self._offset = self._line = self._tuples = 0
                self.submit_punct(Punct.WINDOW)
        except asyncio.CancelledError:
            if self.hot_file and ctx.stopping:
                self.submit_punct(Punct.WINDOW)  # IBM: a window mark, then final, at shutdown
            raise

    def _changed(self, f: BinaryIO, path: str, before: bytes | None) -> str | None:
        """Why ``f`` is not the file the restored offset was in (None: it is)."""
        if self._offset > os.fstat(f.fileno()).st_size:
            return f"cannot resume {path!r} at byte {self._offset}: the file is shorter now"
        if before and not self._holds(f, before):
            return (f"cannot resume {path!r} at byte {self._offset}: the file is not the one the "
                    "checkpoint read (the bytes before that offset differ): it was replaced or "
                    "rewritten. Put that file back to go on, or give the job a new checkpoint "
                    "directory to read the new one")
        return None

    async def _read(self, ctx: Any, f: BinaryIO, path: str) -> bool:
        """Read ``f`` from the offset; True when a tailed file was replaced under its name (a
        rotation: renamed, then made again) once everything it held was read."""
        before, self._before = self._before, None
        problem = self._changed(f, path, before)
        if problem is not None:
            if not self.hot_file:
                raise FileSourceError(f"{self._op}: {problem}")
            self._offset = self._line = self._tuples = 0  # a tail: a new file, from its start
            self.submit_punct(Punct.WINDOW)
        cursor = self._cursor(f, self._offset, self._line)
        unflushed = 0
        poll = round(self.poll_interval * _NS)
        awaited = True  # a stop is looked for after each wait, not at every record
        rotated = False  # the path names a new file: this one is read out, then the new one
        while True:
            if awaited:
                if ctx.stopping:
                    break
                awaited = False
            rec = cursor.next()
            if rec is None:
                if not self.hot_file:
                    break
                if rotated:
                    return True
                await ctx.sleep_until(ctx.now() + poll)
                awaited = True
                if cursor.shrunk():
                    cursor.restart()
                    self._offset = self._line = self._tuples = 0
                    self.submit_punct(Punct.WINDOW)
                elif _replaced(f, path):
                    rotated = True  # (what was written to it before the rename is read first)
                    cursor.complete()
                continue
            if rec.error is not None:
                self._bad(path, rec)
            else:
                tup = self._tuple(rec, path, self._tuples)
                if self.has_delay_field:
                    delay = rec.value[0]
                    if delay > 0:  # after the previous record's submission, restored or not
                        paced = self._paced_at
                        due = (ctx.now() if paced is None else paced) + round(delay * _NS)
                        if due > ctx.now():
                            await ctx.sleep_until(due)
                        awaited = True
                    self._paced_at = ctx.now()
                self.submit(tup)
                self._tuples += 1
            # What was submitted and where the reading stands change together: a checkpoint
            # (taken only while awaiting) sees both or neither.
            self._offset, self._line = rec.end_offset, rec.end_line
            unflushed += 1
            if unflushed >= _FLUSH_EVERY:
                unflushed = 0
                await ctx.flush()
                awaited = True
        if ctx.stopping:
            if self.hot_file:
                self.submit_punct(Punct.WINDOW)
            return False
        self._finish_file(path)
        self._done = True
        self.submit_punct(Punct.WINDOW)
        return False


def _replaced(f: BinaryIO, path: str) -> bool:
    """Whether ``path`` now names another file than the open ``f`` (``tail -F``'s test)."""
    try:
        now = os.stat(path)
    except OSError:
        return False  # renamed and not made again yet: the open one may still grow
    held = os.fstat(f.fileno())
    return (now.st_ino, now.st_dev) != (held.st_ino, held.st_dev)
