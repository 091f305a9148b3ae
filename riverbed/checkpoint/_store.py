"""The checkpoint store: save every operator's state of one checkpoint atomically, load the newest good one.

A job checkpoints by handing the store a mapping ``operator key -> plain
data`` (``"op"``, ``"op/window/0"``, ...) under an increasing id. The store
keeps the last ``keep_last`` checkpoints and, on restart, gives back the
newest one that still validates, skipping (and reporting) any whose bytes were
damaged. Restoring an old checkpoint is always better than restoring a wrong one.

`CheckpointStore` holds all of that logic once, on top of four primitives of
a sorted byte-key store (range scan, "last key below", atomic batch write,
close). `MemoryStore` implements them with a dict, for tests (its ``records``
are the raw bytes, so tests can damage them); `RocksDBStore` with RocksDB.
Both run the very same encoding and validation.

Why a manifest per checkpoint: the records of one checkpoint and its
manifest go in one atomic, synced batch, so a reader either sees all of them
or none. A checkpoint whose manifest is missing can then only come from
damage, and is reported as incomplete rather than restored partially. The
manifest also lists each record's size and digest, so a record swapped in
from another checkpoint, or lost, is caught even though each record checks
its own digest.

Why a record of committed ids besides the store (`_ledger`): a storage engine
that loses its newest writes (RocksDB with a damaged log) opens without a
word. The store compares that record with what it holds on open, and
reports committed checkpoints that are gone as a `StoreWarning` ("lost"),
together with anything else it noticed and survived (a damaged table file,
an unreadable record): to ``on_warning`` when given, else on the
``riverbed.checkpoint`` logger; `CheckpointStore.warnings` keeps them all.

Stores are not thread-safe: one job, one thread (the asyncio loop) uses a store.
"""

from __future__ import annotations

import builtins
import itertools
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, Self

from ._codec import (
    INT_MAX,
    INT_MIN,
    KIND_MANIFEST,
    KIND_STATE,
    RecordHeader,
    decode_record,
    decode_value,
    encode_record,
    encode_value,
    record_digest,
    short_repr,
)
from ._errors import (
    CheckpointCorrupt,
    CheckpointEncodeError,
    CheckpointError,
    CheckpointForeign,
    CheckpointIdError,
    CheckpointNotFound,
    CheckpointVersionError,
    StoreClosed,
)
from ._layout import (
    ID_MAX,
    NAMESPACE,
    NAMESPACE_END,
    checkpoint_range,
    id_of,
    id_prefix,
    manifest_key,
    parse_suffix,
    state_key,
)
from ._ledger import Ledger, decode_ledger, encode_ledger

__all__ = ["Checkpoint", "CheckpointInfo", "CheckpointStore", "MemoryStore", "SkipHook", "StoreWarning",
           "WarningHook"]

_log = logging.getLogger("riverbed.checkpoint")

Records = Sequence[tuple[bytes, bytes]]
Ranges = Sequence[tuple[bytes, bytes]]
SkipHook = Callable[[int, CheckpointError], None]
"""Called by `CheckpointStore.latest_good` with the id and the reason of each checkpoint it skips."""

WarningKind = Literal["lost", "damaged", "ledger", "flush"]


@dataclass(frozen=True, slots=True)
class StoreWarning:
    """Something a store noticed and worked around, which the job should log.

    ``kind`` is ``"lost"`` (checkpoints the store had committed are gone:
    ``checkpoint_ids`` lists them), ``"damaged"`` (a damaged part of the
    store was stepped over: a table file that compaction cannot read, ids that
    a scan could not reach; every checkpoint saved since is still safe) or
    ``"ledger"`` (the record of committed checkpoints could not be read or
    written, so losses may go unnoticed) or ``"flush"`` (RocksDB's memtable
    could not be written out: every save stays safe in its log, but saves
    slow down until a flush succeeds). ``message`` says what happened,
    what it costs and what to do.
    """

    kind: WarningKind
    message: str
    checkpoint_ids: tuple[int, ...] = ()


WarningHook = Callable[[StoreWarning], None]
"""Called with each `StoreWarning` as the store notices it (from the constructor on)."""

_UNUSABLE = (CheckpointCorrupt, CheckpointForeign, CheckpointVersionError)
_MANIFEST_NAME = "(manifest)"


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """One loaded checkpoint: every operator's state, decoded, in the order they were saved."""

    id: int
    job: str
    time_ns: int
    states: dict[str, Any] = field(repr=False)


@dataclass(frozen=True, slots=True)
class CheckpointInfo:
    """What `CheckpointStore.list` tells about one stored checkpoint, without decoding its states.

    ``sizes`` are the stored bytes of each state record (header and checksum
    included); ``total_bytes`` adds the manifest. ``status`` is ``"ok"`` when
    every record's checksum, header and manifest entry check out,
    ``"corrupt"`` with the ``reason`` (the message `load` would raise) when
    not, and ``"missing"`` for a checkpoint the store committed but no longer
    holds (see `CheckpointStore.lost`). ``job`` and ``time_ns`` are None when
    the manifest itself is unreadable.
    """

    id: int
    job: str | None
    time_ns: int | None
    sizes: dict[str, int]
    total_bytes: int
    status: Literal["ok", "corrupt", "missing"]
    reason: str | None = None


def _check_id(checkpoint_id: object, what: str) -> int:
    if type(checkpoint_id) is not int or not 0 <= checkpoint_id <= ID_MAX:
        raise CheckpointIdError(f"{what}: the checkpoint id must be an int in 0 .. 2**64-1, "
                                f"got {checkpoint_id!r}")
    return checkpoint_id


class CheckpointStore(ABC):
    """Checkpoints of one job: atomic `save`, validating `load`, `latest_good`, retention.

    Ids are ints in 0 .. 2**64-1 and must increase from one `save` to the
    next; after a save only the newest ``keep_last`` checkpoints remain (the
    older ones are deleted in the same atomic batch). A store is a context
    manager; use after `close` raises `StoreClosed`. ``on_warning`` receives
    each `StoreWarning` (see `warnings`); without it they are logged.
    """

    def __init__(self, *, keep_last: int, on_warning: WarningHook | None = None) -> None:
        if type(keep_last) is not int or keep_last < 1:
            raise ValueError(f"keep_last={keep_last!r}: a store must keep at least the last checkpoint "
                             "(an int >= 1)")
        self._keep_last = keep_last
        self._closed = False
        self._on_warning = on_warning
        self._warnings: builtins.list[StoreWarning] = []
        self._ledger: Ledger | None = None
        self._ledger_failure: str | None = None  # the last failure to write it, told once
        self._lost: tuple[int, ...] = ()

    @property
    def keep_last(self) -> int:
        """How many checkpoints a `save` leaves in the store (the newest ones)."""
        return self._keep_last

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def warnings(self) -> tuple[StoreWarning, ...]:
        """Everything the store noticed and worked around since it was opened, oldest first."""
        return tuple(self._warnings)

    @property
    def lost(self) -> tuple[int, ...]:
        """Ids of checkpoints this store had committed that were gone when it was opened.

        Found by comparing the store with its own record of committed ids
        (`_ledger`); each open that finds some also issues a ``"lost"``
        `StoreWarning`. Empty when nothing is missing, or when the store has
        no such record yet (a store written by an older riverbed).
        """
        return self._lost

    # ------------------------------------------------------------ public API

    def save(self, checkpoint_id: int, states: Mapping[str, Any], *, job: str, time_ns: int) -> None:
        """Store every operator's state of one checkpoint in one atomic, durable write.

        ``states`` maps operator keys (str) to plain data (see
        `riverbed.checkpoint._codec`). Everything is encoded before anything is
        written: a state that cannot be encoded raises `CheckpointEncodeError`
        and the store is unchanged; so is it when the write fails
        (`StoreIOError`). ``time_ns`` is the checkpoint's time as the job's
        clock gave it (the store reads no clock). Raises `CheckpointIdError`
        unless ``checkpoint_id`` is greater than every id in the store.
        """
        self._check_open("save")
        cid = _check_id(checkpoint_id, "save()")
        if not isinstance(job, str):
            raise TypeError(f"save({cid}): job must be a str (the job's name), got {job!r}")
        if not _is_utf8(job):
            raise ValueError(f"save({cid}): job {job!r} is not valid Unicode (it holds a lone surrogate)")
        if type(time_ns) is not int:
            raise TypeError(f"save({cid}): time_ns must be an int (nanoseconds from the job's clock), "
                            f"got {time_ns!r}")
        if not INT_MIN <= time_ns <= INT_MAX:
            raise ValueError(f"save({cid}): time_ns={time_ns} does not fit in 64 bits; pass nanoseconds "
                             "from the job's clock")
        recent, damage = self._scan_ids(self._keep_last)
        if damage is not None and not recent:
            raise damage  # damage hides even the newest id: no way to check that ids increase
        if recent and cid <= recent[0]:
            raise CheckpointIdError(
                f"save({cid}): checkpoint ids must increase, and the store already holds checkpoint "
                f"{recent[0]}; use an id above {recent[0]} (after a restore from checkpoint n, continue "
                "from the newest id in the store, not from n)", checkpoint_id=cid)
        puts: list[tuple[bytes, bytes]] = []
        listing: list[list[Any]] = []
        for key, value in states.items():
            if not isinstance(key, str) or not key or not _is_utf8(key):
                raise CheckpointEncodeError(f"checkpoint {cid}: the state key {key!r} must be a non-empty "
                                            "str of valid Unicode, like 'op' or 'op/window/0'",
                                            checkpoint_id=cid)
            payload = encode_value(value, checkpoint_id=cid, key=key)
            record = encode_record(RecordHeader(KIND_STATE, cid, job, time_ns, key), payload)
            puts.append((state_key(cid, key), record))
            listing.append([key, len(record), record_digest(record)])
        manifest_payload = encode_value({"states": listing}, checkpoint_id=cid, key=_MANIFEST_NAME)
        manifest = encode_record(RecordHeader(KIND_MANIFEST, cid, job, time_ns, ""), manifest_payload)
        puts.insert(0, (manifest_key(cid), manifest))
        deletes: list[tuple[bytes, bytes]] = []
        kept = recent[:self._keep_last - 1]
        if len(recent) >= self._keep_last:
            deletes.append((NAMESPACE, id_prefix(kept[-1] if kept else cid)))
        self._write(puts, deletes)
        newest = max(cid, self._ledger.newest) if self._ledger is not None else cid
        self._record(Ledger(newest, (cid, *kept)))

    def load(self, checkpoint_id: int) -> Checkpoint:
        """Read, validate and decode one checkpoint.

        Raises `CheckpointNotFound` if the store has no record of that id,
        `CheckpointCorrupt` / `CheckpointForeign` / `CheckpointVersionError`
        if any of its records does not validate (never a partial result).
        """
        self._check_open("load")
        cid = _check_id(checkpoint_id, "load()")
        records = self._read(cid)
        if not records:
            raise CheckpointNotFound(f"checkpoint {cid} is not in {self._describe()}; list() shows the "
                                     f"ones there (the last {self._keep_last} are kept)", checkpoint_id=cid)
        manifest, payloads = self._verify(cid, records)
        states = {key: decode_value(payload, checkpoint_id=cid, key=key) for key, payload in payloads.items()}
        return Checkpoint(cid, manifest.job, manifest.time_ns, states)

    def latest_good(self, on_skip: SkipHook | None = None) -> Checkpoint | None:
        """The newest checkpoint that loads and validates, or None if there is none.

        Each newer checkpoint that fails validation (corrupt, incomplete,
        foreign or of an unsupported version) is skipped and reported: to
        ``on_skip(id, error)`` when given, else as a warning on the
        ``riverbed.checkpoint`` logger. A failure of the store itself
        (`StoreError`, or damage that stops the scan of ids) is raised.
        """
        self._check_open("latest_good")
        for cid in self._ids_desc():
            try:
                return self.load(cid)
            except _UNUSABLE as exc:
                if on_skip is not None:
                    on_skip(cid, exc)
                else:
                    _log.warning("skipping checkpoint %d of %s: %s", cid, self._describe(), exc)
        return None

    def list(self) -> builtins.list[CheckpointInfo]:
        """Every checkpoint in the store, oldest first, with sizes and status (states are not decoded).

        Damaged checkpoints are listed as ``"corrupt"``, committed ones that are
        gone as ``"missing"``. Damage that hides the ids below some point is
        stepped over with the ids known otherwise; whatever stays hidden is
        reported as a ``"damaged"`` `StoreWarning`, not raised.
        """
        self._check_open("list")
        infos: dict[int, CheckpointInfo] = {}
        try:
            for cid in self._ids_desc():
                infos[cid] = self._info(cid)
        except CheckpointCorrupt as exc:
            if exc.checkpoint_id is not None:
                raise
            # With a record of the committed ids, every id it keeps was tried (listed, or missing
            # below): what lies below them was deleted by retention. Without it, there is no telling.
            if self._ledger is None or not infos:
                lowest = min(infos, default=None)
                where = "any checkpoint" if lowest is None else f"the checkpoints below {lowest}"
                self._warn(StoreWarning("damaged", f"{where} of {self._describe()} cannot be listed: {exc}"))
        for cid in self._lost:
            if cid not in infos and not self._present(cid):
                infos[cid] = CheckpointInfo(cid, None, None, {}, 0, "missing", self._lost_reason())
        return [infos[cid] for cid in sorted(infos)]

    def delete(self, checkpoint_id: int) -> None:
        """Delete one checkpoint's records (atomically); `CheckpointNotFound` if it has none."""
        self._check_open("delete")
        cid = _check_id(checkpoint_id, "delete()")
        lo, hi = checkpoint_range(cid)
        if self._last_key_below(hi, lo) is None:
            raise CheckpointNotFound(f"delete({cid}): checkpoint {cid} is not in {self._describe()}",
                                     checkpoint_id=cid)
        self._write([], [(lo, hi)])
        if self._ledger is not None:
            self._record(Ledger(self._ledger.newest, tuple(k for k in self._ledger.kept if k != cid)))

    def close(self) -> None:
        """Release the store (for RocksDB: flush and unlock the directory). Closing twice is a no-op."""
        if not self._closed:
            self._closed = True
            self._close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # ------------------------------------------------- backend primitives

    @abstractmethod
    def _scan(self, lo: bytes, hi: bytes) -> builtins.list[tuple[bytes, bytes]]:
        """Every (key, value) with lo <= key < hi, in key order; raise rather than return fewer."""

    @abstractmethod
    def _last_key_below(self, bound: bytes, floor: bytes) -> bytes | None:
        """The greatest key k with floor <= k < bound, or None."""

    @abstractmethod
    def _write(self, puts: Records, delete_ranges: Ranges) -> None:
        """Apply the range deletions [lo, hi) then the puts, atomically and durably."""

    @abstractmethod
    def _close(self) -> None: ...

    @abstractmethod
    def _describe(self) -> str:
        """The store, for messages, e.g. "the RocksDB checkpoint store at /var/ckpt"."""

    @abstractmethod
    def _read_ledger(self) -> bytes | None:
        """The stored record of committed ids (`_ledger`), or None if there is none."""

    @abstractmethod
    def _write_ledger(self, data: bytes) -> None:
        """Replace the record of committed ids, atomically and durably (OSError on failure)."""

    def _describe_ledger(self) -> str:
        return "its record of committed checkpoints"

    def _how_lost(self) -> str:
        """How committed checkpoints can vanish from this backend, for the "lost" warning."""
        return "Their records were removed behind the store's back"

    def _table_ids(self) -> builtins.list[int]:
        """Checkpoint ids the backend knows from elsewhere than a scan (RocksDB: table file key ranges)."""
        return []

    # ------------------------------------------------------------ helpers

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise StoreClosed(f"{what}(): {self._describe()} is closed; open a new store")

    def _ids_desc(self) -> Iterator[int]:
        """Every checkpoint id in the store, newest first.

        Damage that stops the scan (a table block RocksDB cannot read) hides
        the ids below it; the scan then goes on from the next id known
        otherwise (the ledger, the table files' key ranges) that still has
        records, and raises the damage (`CheckpointCorrupt`, id None) only
        when no such id is left.
        """
        bound = NAMESPACE_END
        known: builtins.list[int] | None = None
        while True:
            try:
                key = self._last_key_below(bound, NAMESPACE)
            except CheckpointCorrupt as exc:
                if exc.checkpoint_id is not None:
                    raise
                if known is None:
                    ledger = [self._ledger.newest, *self._ledger.kept] if self._ledger is not None else []
                    known = sorted(set(ledger) | set(self._table_ids()), reverse=True)
                below = bound
                found = next((c for c in known if id_prefix(c) < below and self._present(c)), None)
                if found is None:
                    raise
                key = id_prefix(found) + b"/"
            if key is None:
                return
            cid = id_of(key)
            if cid is None:
                raise CheckpointForeign(
                    f"{self._describe()} holds the key {key!r}, which is in the checkpoint namespace "
                    f"{NAMESPACE!r} but not of its layout: another program writes into this store; "
                    "give the checkpoints a directory of their own", checkpoint_id=None)
            yield cid
            bound = id_prefix(cid)

    def _scan_ids(self, n: int) -> tuple[builtins.list[int], CheckpointCorrupt | None]:
        """The newest ``n`` ids, as far as the scan gets, and the damage that stopped it (or None)."""
        ids: builtins.list[int] = []
        try:
            ids.extend(itertools.islice(self._ids_desc(), n))
        except CheckpointCorrupt as exc:
            if exc.checkpoint_id is not None:
                raise
            return ids, exc
        return ids, None

    def _present(self, cid: int) -> bool:
        """Whether the store holds any record of ``cid`` (a damaged one counts)."""
        lo, hi = checkpoint_range(cid)
        try:
            return self._last_key_below(hi, lo) is not None
        except CheckpointCorrupt:
            return True

    def held_ids(self) -> builtins.list[int]:
        """The ids of the checkpoints the store holds (damaged ones too), oldest first: those a
        later save may delete, which a job restarting tells its operators of when it does
        (`Operator.retire_checkpoint`), as it does for the ones it took itself."""
        self._check_open("held_ids")
        ids, _ = self._scan_ids(self._keep_last)
        return sorted(ids)

    def newest_id(self) -> int | None:
        """The highest id this store holds or committed: the next save must be above.

        Damaged checkpoints count, and so do committed ones that were lost
        (`lost`): a job restored from an older checkpoint continues its
        numbering from here, so an id never names two different checkpoints.
        """
        self._check_open("newest_id")
        ids, damage = self._scan_ids(1)
        candidates = ids + ([self._ledger.newest] if self._ledger is not None else [])
        if not candidates and damage is not None:
            raise damage
        return max(candidates, default=None)

    # ------------------------------------------------- ledger and warnings

    def _warn(self, warning: StoreWarning) -> None:
        self._warnings.append(warning)
        if self._on_warning is not None:
            self._on_warning(warning)
        else:
            _log.warning("%s", warning.message)

    def _open_ledger(self) -> None:
        """Read the record of committed ids and report committed checkpoints that are gone.

        Backends call this at the end of their constructor, once they can read.
        """
        try:
            data = self._read_ledger()
            self._ledger = None if data is None else decode_ledger(data)
        except (OSError, ValueError) as exc:
            self._warn(StoreWarning("ledger", f"{self._describe()}: {self._describe_ledger()} cannot be read "
                                              f"({exc}); a loss of the newest checkpoints would go unnoticed "
                                              "until the next save rewrites it"))
            return
        if self._ledger is None:
            return
        missing = [c for c in self._ledger.kept if not self._present(c)]
        if missing:
            # One the store dropped by retention after the record was last written (a failed
            # write of it, a process killed between the save and it) is no loss: ``keep_last``
            # newer ones are there.
            held = self.held_ids()
            missing = [c for c in missing if sum(1 for h in held if h > c) < self._keep_last]
        self._lost = tuple(sorted(missing))
        if self._lost:
            self._warn(StoreWarning("lost", self._lost_reason(), self._lost))

    def _lost_reason(self) -> str:
        ids = ", ".join(map(str, self._lost))
        return (f"checkpoint(s) {ids} of {self._describe()} are gone: they were saved "
                f"({self._describe_ledger()} lists them) but the store no longer holds them. "
                f"{self._how_lost()}; the job resumes from the newest checkpoint that is left and replays "
                "from there. Check the disk, and restore the directory from a backup if you have one")

    def _record(self, ledger: Ledger) -> None:
        """Write the record of committed ids after a save or delete; a failure is only a warning."""
        self._ledger = ledger
        try:
            self._write_ledger(encode_ledger(ledger))
        except OSError as exc:
            text = str(exc)
            if text == self._ledger_failure:
                return  # told once until it changes or a write succeeds (not at every save)
            self._ledger_failure = text
            self._warn(StoreWarning("ledger", f"{self._describe()}: cannot write {self._describe_ledger()} "
                                              f"({exc}); checkpoint {ledger.newest} is saved, but a later "
                                              "loss of it would go unnoticed (said once while it keeps "
                                              "failing alike)"))
        else:
            self._ledger_failure = None

    def _read(self, cid: int) -> builtins.list[tuple[bytes, bytes]]:
        try:
            return self._scan(*checkpoint_range(cid))
        except CheckpointCorrupt as exc:
            if exc.checkpoint_id is not None:
                raise
            raise CheckpointCorrupt(f"checkpoint {cid}: reading its records failed: {exc}",
                                    checkpoint_id=cid) from exc

    def _verify(self, cid: int, records: Sequence[tuple[bytes, bytes]]
                ) -> tuple[RecordHeader, dict[str, bytes]]:
        """The manifest's header and each state's payload, in manifest order; raises if anything is off."""
        where = f"checkpoint {cid}"
        manifest_raw: bytes | None = None
        raw_states: dict[str, bytes] = {}
        for stored_key, value in records:
            parsed = parse_suffix(stored_key)
            if parsed is None:
                raise CheckpointForeign(f"{where}: the store holds the key {stored_key!r} among its records, "
                                        "which is not of the checkpoint layout: another program writes "
                                        "into this store", checkpoint_id=cid)
            is_manifest, name = parsed
            if is_manifest:
                manifest_raw = value
                continue
            try:
                raw_states[name.decode("utf-8")] = value
            except UnicodeDecodeError as exc:
                raise CheckpointCorrupt(f"{where}: the record key {stored_key!r} is not UTF-8: the key was "
                                        "damaged", checkpoint_id=cid) from exc
        if manifest_raw is None:
            raise CheckpointCorrupt(
                f"{where} is incomplete: {len(raw_states)} state record(s) but no manifest (a save writes "
                "both in one batch, so the manifest was lost); restore an older checkpoint",
                checkpoint_id=cid)
        at = f"{where}, manifest"
        manifest, payload = decode_record(manifest_raw, checkpoint_id=cid, where=at)
        _check_header(manifest, kind=KIND_MANIFEST, cid=cid, key="", manifest=None, where=at)
        listing = _parse_listing(decode_value(payload, checkpoint_id=cid, key=_MANIFEST_NAME), cid)
        missing = [k for k in listing if k not in raw_states]
        extra = [k for k in raw_states if k not in listing]
        if missing or extra:
            raise CheckpointCorrupt(
                f"{where}: its records do not match its manifest (missing: {missing or 'none'}; not listed: "
                f"{extra or 'none'}): records were lost or added after the save; restore an older checkpoint",
                checkpoint_id=cid)
        payloads: dict[str, bytes] = {}
        for key, (size, digest) in listing.items():
            raw = raw_states[key]
            at = f"{where}, record {key!r}"
            header, payloads[key] = decode_record(raw, checkpoint_id=cid, where=at)
            _check_header(header, kind=KIND_STATE, cid=cid, key=key, manifest=manifest, where=at)
            if len(raw) != size or record_digest(raw) != digest:
                raise CheckpointCorrupt(
                    f"{at}: the record is intact but not the one the manifest lists ({len(raw)} bytes, "
                    f"digest {record_digest(raw).hex()}; the manifest says {size} bytes, digest "
                    f"{digest.hex()}): it was replaced after the save; restore an older checkpoint",
                    checkpoint_id=cid)
        return manifest, payloads

    def _info(self, cid: int) -> CheckpointInfo:
        try:
            records = self._read(cid)
        except CheckpointCorrupt as exc:
            return CheckpointInfo(cid, None, None, {}, 0, "corrupt", str(exc))
        sizes: dict[str, int] = {}
        manifest_raw = b""
        for key, value in records:
            parsed = parse_suffix(key)
            if parsed is not None and not parsed[0]:
                sizes[parsed[1].decode("utf-8", "backslashreplace")] = len(value)
            elif parsed is not None:
                manifest_raw = value
        total = sum(len(value) for _, value in records)
        try:
            manifest, _ = self._verify(cid, records)
        except _UNUSABLE as exc:
            job: str | None = None
            time_ns: int | None = None
            try:
                header, _ = decode_record(manifest_raw, checkpoint_id=cid, where="")
                job, time_ns = header.job, header.time_ns
            except CheckpointError:
                pass
            return CheckpointInfo(cid, job, time_ns, sizes, total, "corrupt", str(exc))
        return CheckpointInfo(cid, manifest.job, manifest.time_ns, sizes, total, "ok")


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_header(header: RecordHeader, *, kind: str, cid: int, key: str, manifest: RecordHeader | None,
                  where: str) -> None:
    expected = [("kind", kind, header.kind), ("checkpoint id", cid, header.checkpoint_id),
                ("key", key, header.key)]
    if manifest is not None:
        expected += [("job", manifest.job, header.job), ("time_ns", manifest.time_ns, header.time_ns)]
    for name, want, got in expected:
        if want != got:
            raise CheckpointCorrupt(
                f"{where}: the record says its {name} is {got!r}, but it is stored as {want!r}: a record "
                "of another checkpoint or store was copied here; restore an older checkpoint",
                checkpoint_id=cid)


def _parse_listing(listing: Any, cid: int) -> dict[str, tuple[int, bytes]]:
    entries = listing.get("states") if isinstance(listing, dict) else None
    if not isinstance(entries, builtins.list):
        raise CheckpointCorrupt(f"checkpoint {cid}, manifest: expected a map with a 'states' list, got "
                                f"{short_repr(listing)}; restore an older checkpoint", checkpoint_id=cid)
    out: dict[str, tuple[int, bytes]] = {}
    for entry in entries:
        if (not isinstance(entry, builtins.list) or len(entry) != 3 or not isinstance(entry[0], str)
                or type(entry[1]) is not int or not isinstance(entry[2], bytes)):
            raise CheckpointCorrupt(f"checkpoint {cid}, manifest: bad entry {short_repr(entry)}; expected "
                                    "[key, size, digest]; restore an older checkpoint", checkpoint_id=cid)
        out[entry[0]] = (entry[1], entry[2])
    return out


class MemoryStore(CheckpointStore):
    """A checkpoint store in a dict: same encoding, validation and errors as `RocksDBStore`.

    ``records`` is the raw key/value space (bytes to bytes). Pass your own
    mapping to share it between stores (a "reopen") or to damage it in tests;
    ``ledger`` likewise holds the record of committed ids (under
    ``"committed"``), which stands in for the file a `RocksDBStore` keeps.
    """

    def __init__(self, records: MutableMapping[bytes, bytes] | None = None, *, keep_last: int = 3,
                 ledger: MutableMapping[str, bytes] | None = None,
                 on_warning: WarningHook | None = None) -> None:
        super().__init__(keep_last=keep_last, on_warning=on_warning)
        self._records: MutableMapping[bytes, bytes] = {} if records is None else records
        self._ledger_bytes: MutableMapping[str, bytes] = {} if ledger is None else ledger
        self._open_ledger()

    @property
    def records(self) -> MutableMapping[bytes, bytes]:
        """The raw stored bytes; writing here bypasses every check (for tests of damage)."""
        return self._records

    def _scan(self, lo: bytes, hi: bytes) -> builtins.list[tuple[bytes, bytes]]:
        return [(k, self._records[k]) for k in sorted(self._records) if lo <= k < hi]

    def _last_key_below(self, bound: bytes, floor: bytes) -> bytes | None:
        return max((k for k in self._records if floor <= k < bound), default=None)

    def _write(self, puts: Records, delete_ranges: Ranges) -> None:
        for lo, hi in delete_ranges:
            for k in [k for k in self._records if lo <= k < hi]:
                del self._records[k]
        for k, v in puts:
            self._records[k] = v

    def _close(self) -> None:
        pass

    def _describe(self) -> str:
        return "the in-memory checkpoint store"

    def _read_ledger(self) -> bytes | None:
        return self._ledger_bytes.get("committed")

    def _write_ledger(self, data: bytes) -> None:
        self._ledger_bytes["committed"] = data
