"""The RocksDB checkpoint store, on rocksdict 0.3.29 (RocksDB 9.8.4) in raw mode.

rocksdict is a thin binding, and its traps decide most of this module (see
also shared/notes/dependencies.md, section 3):

* By default it pickles values and type-tags keys. ``Options(raw_mode=True)``
  makes it store our bytes as they are.
* Every RocksDB failure is a bare ``Exception`` whose message starts with the
  status ("IO error: ...", "Corruption: ..."); `_map_error` turns each into a
  `StoreLocked`, `StoreIOError`, `StoreClosed` or `CheckpointCorrupt`.
* An iterator over a damaged block **stops early without raising**; only its
  ``status()`` raises afterwards. Every scan here ends with ``status()``.
* An iterator that is still referenced keeps the database open, and its LOCK
  held, after ``close()``. So iterators never outlive the call that made them
  (``del`` in ``finally``, also so that a raised error's traceback holds none).
* ``ReadOptions.set_iterate_lower_bound`` sets an *upper* bound in 0.3.29; only
  ``set_iterate_upper_bound`` is used. The bound keeps a scan of one
  checkpoint from reading the next one's blocks (which may be the damaged ones).

* Once a background compaction meets a damaged table file, RocksDB refuses
  every write with that "Corruption" (a *background error*) until the
  database is reopened, and it compacts again at every open. A damaged old
  table would then fail every save of every run. A write that fails so is
  retried once on the database reopened with automatic compaction off (a
  write cannot be corrupt itself); the damage is reported as a
  `StoreWarning` that names the file and ``riverbed checkpoints repair``.
* When CURRENT (the pointer to the live MANIFEST) is missing, a read-write
  open with ``create_if_missing`` writes a *new, empty* MANIFEST and CURRENT
  before it fails ("wal_dir contains existing log file"), after which every
  old table file is orphaned. The store checks for CURRENT itself first.
* Opening an existing database, rocksdict takes the column family's options
  (compaction among them) from the OPTIONS file RocksDB wrote in the last
  session, not from ``options``, unless ``column_families`` names them.
* Paths go to Rust as str: one holding bytes that are not UTF-8 (lone
  surrogates in Python) cannot be opened at all.

Each save is one ``WriteBatch`` written with ``sync=True``: all of a
checkpoint's records, its manifest and the retention deletions become durable
together, or not at all. The store's directory is created owner-only
(0700), since checkpoints hold the job's data; RocksDB creates the files
inside it with the process umask. `RocksDBStore.repair` (``riverbed
checkpoints repair DIR``) rebuilds a damaged store with RocksDB's repair.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

from rocksdict import (
    AccessType,
    DbClosedError,
    Options,
    Rdict,
    RdictIter,
    ReadOptions,
    WriteBatch,
    WriteOptions,
)

from ._errors import (
    CheckpointCorrupt,
    CheckpointError,
    StoreClosed,
    StoreError,
    StoreFull,
    StoreIOError,
    StoreLocked,
)
from ._layout import id_of
from ._ledger import LEDGER_FILE, Ledger
from ._store import CheckpointInfo, CheckpointStore, Ranges, Records, StoreWarning, WarningHook

__all__ = ["RepairReport", "RocksDBStore"]

_INFO_LOGS_KEPT: Final = 2  # RocksDB keeps 1000 by default, and each open rotates one
_DIR_MODE: Final = 0o700
_LEDGER_MODE: Final = 0o600
_ENGINE_FILE = re.compile(r"^(\d+\.(sst|log)|MANIFEST-\d+)$")
_FIRST_MANIFEST = "MANIFEST-000001"  # what RocksDB writes first when it creates a database
# What else a store's directory can hold without CURRENT: what RocksDB (and rocksdict) write
# around creating a database, before CURRENT, the ledger and its temporary, repair's lost/.
# (and lost+found, which the root of a file system's own volume holds and no one can empty)
_STORE_FILE = re.compile(r"^(LOCK|IDENTITY|LOG(\.old\.\d+)?|OPTIONS-\d+(\.dbtmp)?|\d+\.dbtmp"
                         r"|rocksdict-config\.json|lost|lost\+found|" + re.escape(LEDGER_FILE)
                         + r"(\.tmp)?)$")
_TABLE_IN_MESSAGE = re.compile(r"in (\S+\.sst)\b")


def _make_owner_only(path: str) -> None:
    """Create ``path`` and each missing directory above it owner-only (`os.makedirs` gives the
    ones above the default mode; RocksDB, left to create them, did the same for the store)."""
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        _make_owner_only(parent)
    os.mkdir(path, _DIR_MODE)


def _repair_advice(path: str) -> str:
    return (f"run `riverbed checkpoints repair {path}` (it rebuilds the store from its files and moves a "
            "damaged table file, with every checkpoint in it, to the lost/ subdirectory; `riverbed "
            "checkpoints list` shows what is left), restore the directory from a backup, or start "
            "without checkpoints")


def _map_error(exc: Exception, where: str, action: str, path: str = "DIR") -> CheckpointError:
    """Our error for a rocksdict exception raised while ``action`` on the store ``where`` (at ``path``)."""
    text = str(exc)
    if isinstance(exc, DbClosedError):
        return StoreClosed(f"{where} was closed while {action}; open a new store")
    if text.startswith("IO error") and ("/LOCK:" in text or "lock file" in text or "lock hold" in text):
        return StoreLocked(
            f"{where} is already opened by another process (or by another store in this process): "
            f"RocksDB could not take its LOCK file ({text}); stop the other job or close the other "
            "store first, or give this job a directory of its own")
    if text.startswith("Corruption"):
        return CheckpointCorrupt(f"{where} is damaged: RocksDB reported {text!r} while {action}; "
                                 f"{_repair_advice(path)}")
    if isinstance(exc, UnicodeError):
        return StoreIOError(
            f"{where}: the path holds bytes that are not UTF-8 ({exc}), and RocksDB's Python binding "
            "takes only text paths: rename the directory, or give the checkpoints another one")
    if text.startswith("IO error") and "MANIFEST" in text and "No such file" in text:
        # (a CURRENT naming a MANIFEST that is gone: repair rebuilds both)
        return CheckpointCorrupt(f"{where} is damaged: RocksDB reported {text!r} while {action}; "
                                 f"{_repair_advice(path)}")
    if "No space left on device" in text or "File too large" in text:
        return StoreFull(
            f"{where}: the disk is full, or a file-size limit was reached ({text}), while {action}; "
            "free space and reopen the store: the checkpoints saved before are intact")
    return StoreIOError(f"{where}: RocksDB failed while {action}: {text}")


@dataclass(frozen=True, slots=True)
class RepairReport:
    """What `RocksDBStore.repair` did: the checkpoints before and after, and the files it set aside.

    ``before`` is None when the store could not even be opened before the
    repair (``before_error`` says why, e.g. a missing CURRENT file).
    ``damaged_tables`` are the table files RocksDB could not read and moved
    into ``lost/``; ``archived`` the other files it moved there as a matter of
    course (the MANIFEST it replaced, the logs it turned into tables).
    ``dropped`` are the checkpoints listed before that are gone after.
    """

    path: str
    before: builtins.list[CheckpointInfo] | None
    before_error: str | None
    after: builtins.list[CheckpointInfo]
    damaged_tables: builtins.list[str]
    archived: builtins.list[str]
    warnings: builtins.list[StoreWarning]

    @property
    def dropped(self) -> builtins.list[int]:
        after = {i.id for i in self.after if i.status != "missing"}
        return [i.id for i in self.before or () if i.status != "missing" and i.id not in after]


FLUSH_EVERY = 200  # saves that drop old checkpoints between two memtable flushes


class RocksDBStore(CheckpointStore):
    """Checkpoints in a RocksDB directory that this store opens exclusively.

    ``path`` is created (owner-only) if missing. A second read-write store on
    the same directory, from this process or another, raises `StoreLocked`.
    ``read_only=True`` opens it without the lock, next to a running writer
    (for inspection: `list`, `load`, `latest_good`); it sees what was saved
    up to the open, and `save`/`delete` raise `StoreError`. `close` flushes
    the memtable into a table file and releases the directory.

    Next to RocksDB's files the store keeps ``riverbed-committed.json``, its
    record of the checkpoints it committed (`riverbed.checkpoint._ledger`),
    so that a store that lost its newest writes says so (`lost`).
    """

    def __init__(self, path: str | os.PathLike[str], *, keep_last: int = 3, read_only: bool = False,
                 on_warning: WarningHook | None = None) -> None:
        super().__init__(keep_last=keep_last, on_warning=on_warning)
        self._path = os.fspath(path)
        self._read_only = read_only
        self._compacting = True
        self._unflushed = 0  # saves that dropped old checkpoints since the memtable was flushed
        self._closed = True  # until the database is open
        self._check_directory()
        self._db = self._open(auto_compactions=True)
        self._closed = False
        self._identity = _identity(self._path)  # checked at each write: still the directory?
        self._sync = WriteOptions()
        self._sync.sync = True
        try:
            self._open_ledger()
        except BaseException:
            self.close()  # release the lock: nobody else will
            raise

    @property
    def path(self) -> str:
        return self._path

    @staticmethod
    def layout(path: str | os.PathLike[str]) -> tuple[Literal["store", "regions", "none"], list[str]]:
        """What directory ``path`` holds, seen from its file names alone (nothing is opened or
        written): ``("store", [])``, a store or what is left of one (RocksDB's files);
        ``("regions", names)``, one store per declared consistent region, each in a directory
        of its own (what ``riverbed run --checkpoint-dir`` makes for a graph that declares
        regions); ``("none", [])``, neither."""
        names = _listdir(os.fspath(path))
        if "CURRENT" in names or any(_ENGINE_FILE.match(n) for n in names):
            return "store", []
        regions = sorted(n for n in names if os.path.isdir(os.path.join(path, n))
                         and RocksDBStore.layout(os.path.join(path, n))[0] == "store")
        return ("regions", regions) if regions else ("none", [])

    @staticmethod
    def foreign(names: Iterable[str]) -> str | None:
        """Those of ``names`` (a directory's entries) that neither a store nor its making
        leaves, as a message lists them (the first five, then how many more), or None: a
        directory holding them is the user's, not a checkpoint directory."""
        found = sorted(n for n in names if not _STORE_FILE.match(n) and not _ENGINE_FILE.match(n))
        if not found:
            return None
        return ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")

    @classmethod
    def repair(cls, path: str | os.PathLike[str]) -> RepairReport:
        """Rebuild a damaged store with RocksDB's repair; what it held before and after.

        RocksDB's repair rebuilds the MANIFEST and CURRENT from the table and
        log files it finds and moves what it cannot read into ``lost/``. A
        damaged table file goes there whole, with every checkpoint it holds
        (its intact blocks included). The store must not be open anywhere
        (`StoreLocked` otherwise). The record of committed ids is rewritten to
        what is left, so the next job does not report the dropped checkpoints
        as lost again: this report is where they are reported.
        """
        where = os.fspath(path)
        if not os.path.isdir(where):
            raise StoreIOError(f"{where}: no such checkpoint directory; nothing to repair")
        before: builtins.list[CheckpointInfo] | None = None
        before_error: str | None = None
        notes: builtins.list[StoreWarning] = []
        try:
            with cls(where, read_only=True, on_warning=notes.append) as store:
                before = store.list()
        except CheckpointError as exc:
            before_error = str(exc)
        notes.clear()  # the report's before/after say it better than the warnings of the first open
        lost_dir = os.path.join(where, "lost")
        set_aside = set(_listdir(lost_dir))
        try:
            Rdict.repair(where, Options(raw_mode=True))
        except Exception as exc:
            raise _map_error(exc, f"the RocksDB checkpoint store at {where}", "repairing it", where) from exc
        with cls(where, on_warning=notes.append) as store:
            after = store.list()
            present = [i.id for i in reversed(after) if i.status != "missing"]
            newest = max([*present, *([store._ledger.newest] if store._ledger else [])], default=None)
            if newest is not None:
                store._record(Ledger(newest, tuple(present)))
        moved = sorted(set(_listdir(lost_dir)) - set_aside)
        tables = [name for name in moved if name.endswith(".sst")]
        kept_notes = [n for n in notes if n.kind != "lost"]  # the dropped ones are in the report
        return RepairReport(where, before, before_error, [i for i in after if i.status != "missing"],
                            tables, [name for name in moved if name not in tables], kept_notes)

    # ------------------------------------------------------------ opening

    def _check_directory(self) -> None:
        """Refuse what RocksDB would get wrong; create a missing directory owner-only."""
        try:
            os.fsencode(self._path).decode("utf-8")
        except UnicodeError as exc:
            raise _map_error(exc, self._describe(), "opening it") from None
        try:
            names = os.listdir(self._path)
        except FileNotFoundError:
            if not self._read_only:
                with contextlib.suppress(OSError):  # a bad path is left to RocksDB to report
                    _make_owner_only(self._path)
            return
        except OSError:
            if os.path.isfile(self._path):
                raise StoreIOError(f"{self._path}: is a file, not a directory; a checkpoint store "
                                   "is a directory of its own (give a path that does not exist yet, "
                                   "or a directory)") from None
            return  # not a directory, not readable: RocksDB reports it
        if "CURRENT" in names:
            return
        engine = [n for n in names if _ENGINE_FILE.match(n)]
        if engine == [_FIRST_MANIFEST]:
            # RocksDB creating the store writes its first MANIFEST, then CURRENT: a process
            # killed between the two leaves this. No checkpoint can be in it (a save needs an
            # open database, and opening needs CURRENT, after which RocksDB writes a new
            # MANIFEST and a log file), so the open below creates the store again over it.
            return
        if engine:
            raise CheckpointCorrupt(
                f"{self._describe()} holds RocksDB table and log files but no CURRENT file (it names the "
                "live MANIFEST, the list of table files): it was deleted or lost. Opening the store now "
                "would start an empty one and orphan every checkpoint in those files; "
                + _repair_advice(self._path))
        foreign = RocksDBStore.foreign(names)
        if foreign is not None and not self._read_only:
            # RocksDB would create its files among the user's (and a later `rm -r` of the
            # checkpoint directory would take theirs too).
            raise StoreIOError(
                f"{self._path}: holds files that are not a checkpoint store's ({foreign}) and no store; "
                "a checkpoint store is a directory of its own: give a path that does not exist yet, or an "
                "empty directory")

    def _open(self, *, auto_compactions: bool) -> Rdict:
        options = Options(raw_mode=True)
        options.create_if_missing(not self._read_only)
        options.set_keep_log_file_num(_INFO_LOGS_KEPT)
        options.set_disable_auto_compactions(not auto_compactions)
        access = (AccessType.read_only(error_if_log_file_exist=False) if self._read_only
                  else AccessType.read_write())
        try:
            # The column family's options must be given: otherwise rocksdict takes them from the
            # OPTIONS file of the last session, which may have had compaction off.
            return Rdict(self._path, options=options, column_families={"default": options},
                         access_type=access)
        except Exception as exc:  # rocksdict raises bare Exceptions
            raise _map_error(exc, self._describe(), "opening it", self._path) from exc

    def _reopen_without_compaction(self, cause: Exception) -> None:
        """Clear a background error by reopening, with automatic compaction off from now on."""
        with contextlib.suppress(Exception):  # it reports the background error again while closing
            self._db.close()
        try:
            self._db = self._open(auto_compactions=False)
        except CheckpointError:
            self._closed = True
            raise
        self._compacting = False
        self._warn(StoreWarning("damaged", self._damaged_table_message(
            str(cause), "RocksDB's background compaction could not read it, and RocksDB then refuses every "
            "write until the store is reopened. The store reopened it with automatic compaction off for "
            "this run, so checkpoints go on being saved (the space of deleted checkpoints is reclaimed only "
            "once compaction runs again)")))

    def _damaged_table_message(self, text: str, what_happened: str) -> str:
        found = _TABLE_IN_MESSAGE.search(text)
        table = os.path.basename(found.group(1)) if found else None
        held = ""
        if table is not None:
            ids = sorted({cid for f in self._live_files() if os.path.basename(str(f.get("name"))) == table
                          for cid in _ids_of(f)})
            if ids:
                held = f" (it holds checkpoint{'s' if len(ids) > 1 else ''} {' to '.join(map(str, ids))})"
        name = f"the table file {table}{held}" if table else "a table file"
        return (f"{self._describe()}: {name} is damaged ({text}). {what_happened}. To remove the damage, "
                + _repair_advice(self._path))

    def _live_files(self) -> builtins.list[dict[str, object]]:
        try:
            files: builtins.list[dict[str, object]] = self._db.live_files()
        except Exception:
            return []
        return files

    # --------------------------------------------------------- primitives

    def _scan(self, lo: bytes, hi: bytes) -> builtins.list[tuple[bytes, bytes]]:
        out: builtins.list[tuple[bytes, bytes]] = []
        try:
            bounded = ReadOptions()
            bounded.set_iterate_upper_bound(hi)
            it: RdictIter = self._db.iter(bounded)
            try:
                it.seek(lo)
                while it.valid():
                    out.append((it.key(), it.value()))
                    it.next()
                it.status()  # the loop also ends, silently, at a damaged block
            finally:
                del it
        except Exception as exc:
            raise _map_error(exc, self._describe(), "reading records", self._path) from exc
        return out

    def _last_key_below(self, bound: bytes, floor: bytes) -> bytes | None:
        key: bytes | None = None
        try:
            it: RdictIter = self._db.iter()
            try:
                it.seek_for_prev(bound)
                if it.valid() and it.key() == bound:
                    it.prev()
                if it.valid():
                    key = it.key()
                it.status()
            finally:
                del it
        except Exception as exc:
            raise _map_error(exc, self._describe(), "looking up checkpoint ids", self._path) from exc
        return key if key is not None and key >= floor else None

    def _table_ids(self) -> builtins.list[int]:
        return [cid for f in self._live_files() for cid in _ids_of(f)]

    def _write(self, puts: Records, delete_ranges: Ranges) -> None:
        if self._read_only:
            raise StoreError(f"{self._describe()} was opened read_only=True: it cannot save or delete; "
                             "open it without read_only (only one process can)")
        if _identity(self._path) != self._identity:
            # RocksDB goes on writing to the files it has open, whose names are gone: a save
            # "committed" there is lost at the next start (which finds no checkpoint), and
            # what the commit tells the operators (an MQTT message acknowledged) with it.
            raise StoreIOError(f"{self._describe()}: the directory was removed or replaced while the "
                               "store was open; no checkpoint can be saved there any more (restart the "
                               "job: it resumes from what the directory holds now)")
        try:
            self._db.write(_batch(puts, delete_ranges), self._sync)
        except Exception as exc:
            error = _map_error(exc, self._describe(), f"writing {len(puts)} record(s)", self._path)
            if not isinstance(error, CheckpointCorrupt) or not self._compacting:
                raise error from exc
            cause = exc
        else:
            if delete_ranges:  # (after the write: it committed, whatever the flush does)
                self._flush_now_and_then()
            return
        # A write cannot be corrupt itself: this is RocksDB's background error, set when a compaction
        # read a damaged table file. The write was refused before it reached the log.
        self._reopen_without_compaction(cause)
        try:
            self._db.write(_batch(puts, delete_ranges), self._sync)
        except Exception as exc:
            raise _map_error(exc, self._describe(), f"writing {len(puts)} record(s)", self._path) from exc

    def _flush_now_and_then(self) -> None:
        """Write the memtable out every `FLUSH_EVERY` saves that dropped old checkpoints. Small
        states never fill RocksDB's 64 MB write buffer, so each save's range deletion stayed
        in it, and every new iterator (three a save) walked all of them: a save took 0.5 ms at
        first, 23 ms after 2,000 checkpoints and 115 ms after 4,000, memory growing 40 MB a
        thousand (a review). Flushed, the tombstones go to a table file that compactions drop:
        0.6 ms a save through 4,000."""
        self._unflushed += 1
        if self._unflushed >= FLUSH_EVERY:
            self._unflushed = 0
            try:
                self._db.flush()
            except Exception as exc:  # the save committed (its log): a warning, not a failure
                error = _map_error(exc, self._describe(), "writing its memtable out", self._path)
                self._warn(StoreWarning("flush", f"{error}; the checkpoints saved so far are safe "
                                                 "in RocksDB's log, but RocksDB may refuse the next "
                                                 "saves until the cause is fixed"))

    def _close(self) -> None:
        error: Exception | None = None
        if not self._read_only:
            try:
                self._db.flush()
            except Exception as exc:
                error = exc
        try:
            self._db.close()  # RocksDB closes even when this raises (e.g. on a full disk)
        except Exception as exc:
            error = error or exc
        if error is None:
            return
        mapped = _map_error(error, self._describe(), "closing it", self._path)
        if isinstance(mapped, CheckpointCorrupt):
            # A compaction met a damaged table file. Every save was synced to the log, which the next
            # open replays: closing loses nothing, so this is worth a warning, not a failed job.
            self._warn(StoreWarning("damaged", self._damaged_table_message(
                str(error), "RocksDB's background compaction could not read it while the store was closing; "
                "every checkpoint saved is in RocksDB's log and is recovered at the next open")))
            return
        raise mapped from error

    def _describe(self) -> str:
        return f"the RocksDB checkpoint store at {self._path}"

    # ----------------------------------------------------------- ledger

    def _ledger_path(self) -> str:
        return os.path.join(self._path, LEDGER_FILE)

    def _describe_ledger(self) -> str:
        return f"its record of committed checkpoints ({self._ledger_path()})"

    def _how_lost(self) -> str:
        return "RocksDB drops its newest writes without a word when its log (*.log) is damaged or removed"

    def _read_ledger(self) -> bytes | None:
        try:
            with open(self._ledger_path(), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def _write_ledger(self, data: bytes) -> None:
        if self._read_only:
            return
        final = self._ledger_path()
        temporary = final + ".tmp"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, _LEDGER_MODE)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, final)
        directory = os.open(self._path, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


def _batch(puts: Records, delete_ranges: Ranges) -> WriteBatch:
    batch = WriteBatch(raw_mode=True)
    for lo, hi in delete_ranges:
        batch.delete_range(lo, hi)
    for key, value in puts:
        batch.put(key, value)
    return batch


def _ids_of(table: dict[str, object]) -> builtins.list[int]:
    """The checkpoint ids of a table file's first and last keys (what `Rdict.live_files` tells)."""
    keys = (table.get("start_key"), table.get("end_key"))
    return [cid for key in keys if isinstance(key, bytes) and (cid := id_of(key)) is not None]


def _listdir(directory: str) -> builtins.list[str]:
    try:
        return os.listdir(directory)
    except OSError:
        return []


def _identity(path: str) -> tuple[int, int] | None:
    """The directory's device and inode (None: it is gone)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino
