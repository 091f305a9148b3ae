"""The checkpoint store: round trips, atomic saves, retention, and every kind of damage on disk.

Most tests run against both backends (`MemoryStore` and `RocksDBStore`) through a
small `Backend` harness that can reopen a store and edit its raw bytes, so that
damage is done the way it happens: to stored bytes, between a close and an open.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import random
import shutil
import subprocess
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, MutableMapping
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgpack  # type: ignore[import-untyped]
import pytest
from rocksdict import Options, Rdict

import riverbed.checkpoint as ckpt
from riverbed.checkpoint import (
    Checkpoint,
    CheckpointCorrupt,
    CheckpointEncodeError,
    CheckpointError,
    CheckpointForeign,
    CheckpointIdError,
    CheckpointNotFound,
    CheckpointStore,
    CheckpointVersionError,
    MemoryStore,
    RocksDBStore,
    StoreClosed,
    StoreError,
    StoreFull,
    StoreIOError,
    StoreLocked,
)
from riverbed.checkpoint._codec import HEADER_SIZE, MAGIC, RecordHeader, encode_record
from riverbed.checkpoint._layout import NAMESPACE, id_prefix, manifest_key, state_key
from riverbed.windows import StreamWindow

REPO = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------ harness


class Backend(ABC):
    """Opens stores over one persistent key space and gives raw access to it between opens."""

    name = ""

    @abstractmethod
    def open(self, keep_last: int = 3) -> CheckpointStore: ...

    @abstractmethod
    def raw(self) -> contextlib.AbstractContextManager[MutableMapping[bytes, bytes]]: ...


class MemoryBackend(Backend):
    name = "memory"

    def __init__(self) -> None:
        self.records: dict[bytes, bytes] = {}

    def open(self, keep_last: int = 3) -> CheckpointStore:
        return MemoryStore(self.records, keep_last=keep_last)

    @contextlib.contextmanager
    def raw(self) -> Iterator[MutableMapping[bytes, bytes]]:
        yield self.records


class RawRocks(MutableMapping[bytes, bytes]):
    """A raw rocksdict opened behind the store's back (the store must be closed)."""

    def __init__(self, path: Path) -> None:
        self.db = Rdict(str(path), options=Options(raw_mode=True))

    def __getitem__(self, key: bytes) -> bytes:
        value = self.db[key]
        assert isinstance(value, bytes)
        return value

    def __setitem__(self, key: bytes, value: bytes) -> None:
        self.db[key] = value

    def __delitem__(self, key: bytes) -> None:
        del self.db[key]

    def __iter__(self) -> Iterator[bytes]:
        # A copy: a live rocksdict iterator would keep the database, and its LOCK, open after close().
        keys = [k for k in self.db.keys() if isinstance(k, bytes)]  # noqa: SIM118  Rdict has no __iter__
        return iter(keys)

    def __len__(self) -> int:
        return len(list(iter(self)))


class RocksBackend(Backend):
    name = "rocksdb"

    def __init__(self, path: Path) -> None:
        self.path = path

    def open(self, keep_last: int = 3) -> CheckpointStore:
        return RocksDBStore(self.path, keep_last=keep_last)

    @contextlib.contextmanager
    def raw(self) -> Iterator[MutableMapping[bytes, bytes]]:
        raw = RawRocks(self.path)
        try:
            yield raw
        finally:
            raw.db.close()


@pytest.fixture(params=["memory", "rocksdb"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return MemoryBackend() if request.param == "memory" else RocksBackend(tmp_path / "ckpt")


def states_of(n: int) -> dict[str, Any]:
    return {"src": {"offset": n * 10}, "op/window/0": {"tuples": [{"v": i} for i in range(n)]}, "sink": n}


def save_ids(backend: Backend, ids: list[int], keep_last: int = 10) -> None:
    with backend.open(keep_last) as store:
        for cid in ids:
            store.save(cid, states_of(cid), job="job", time_ns=cid * 1_000)


def ids_in(store: CheckpointStore) -> list[int]:
    return [info.id for info in store.list()]


class Skips:
    """An on_skip hook that records what it is told."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, CheckpointError]] = []

    def __call__(self, checkpoint_id: int, error: CheckpointError) -> None:
        self.calls.append((checkpoint_id, error))


# --------------------------------------------------------------- round trip

NESTED: dict[Any, Any] = {
    "str": "grüße ✓",
    "ints": [0, -1, 2**63 - 1, -(2**63), 2**64 - 1],
    "floats": [0.5, -1e300, float("inf")],
    "flags": [True, False, None],
    "bytes": b"\x00\xff riverbed",
    "decimals": [Decimal("1.20"), Decimal("-0.000"), Decimal("1E+3"), Decimal("-Infinity")],
    "tuple": (1, (2, "three")),
    "empty": [{}, [], "", b""],
    3: "int key",
    (1, "a"): "tuple key",
    "deep": {"a": {"b": {"c": [[[{"d": 1}]]]}}},
}
NESTED_BACK: dict[Any, Any] = NESTED  # a tuple comes back a tuple (extension type 4)


def test_nested_plain_data_round_trips(backend: Backend) -> None:
    with backend.open() as store:
        store.save(7, {"op/window/0": NESTED, "op": [1, 2], "empty": None}, job="j1", time_ns=-5)
    with backend.open() as store:
        got = store.load(7)
    assert got == Checkpoint(7, "j1", -5, {"op/window/0": NESTED_BACK, "op": [1, 2], "empty": None})
    assert list(got.states) == ["op/window/0", "op", "empty"], "states come back in the order saved"
    decimals = got.states["op/window/0"]["decimals"]
    assert [str(d) for d in decimals] == ["1.20", "-0.000", "1E+3", "-Infinity"], "exponents are kept"
    assert isinstance(next(k for k in got.states["op/window/0"] if isinstance(k, tuple)), tuple)


def test_a_window_snapshot_restores_into_a_fresh_window(backend: Backend) -> None:
    window: StreamWindow[dict[str, Any]] = StreamWindow("tumbling, count(4), partitioned", partition_by="k")
    window.insert_batch([{"k": i % 3, "v": float(i)} for i in range(10)])
    with backend.open() as store:
        store.save(1, {"op/window/0": window.checkpoint()}, job="j", time_ns=0)
        restored: StreamWindow[dict[str, Any]] = StreamWindow(window.spec.clause(), partition_by="k")
        restored.reset(store.load(1).states["op/window/0"])
    assert {k: restored.contents(k) for k in restored.partitions()} == {
        k: window.contents(k) for k in window.partitions()}


def test_sets_round_trip_as_sets_so_set_attributes_in_windows_checkpoint(backend: Backend) -> None:
    """Schemas have set<T>, and a window holds such tuples: every checkpoint of one failed ("a
    set is not plain data ... convert it in snapshot()", which the user cannot do; a review)."""
    window: StreamWindow[dict[str, Any]] = StreamWindow("tumbling, count(4)")
    window.insert_batch([{"tags": {i, (i, "x")}, "f": frozenset({i})} for i in range(3)])
    state = {"w": window.checkpoint(), "keys": {frozenset({1, 2}): {(1, "a")}}}
    with backend.open() as store:
        store.save(1, state, job="j", time_ns=0)
        got = store.load(1).states
    restored: StreamWindow[dict[str, Any]] = StreamWindow("tumbling, count(4)")
    restored.reset(got["w"])
    assert restored.contents(None) == [{"tags": {i, (i, "x")}, "f": {i}} for i in range(3)]
    assert got["keys"] == {frozenset({1, 2}): {(1, "a")}}


def test_ints_beyond_64_bits_and_undecodable_text_round_trip(backend: Backend) -> None:
    # A running total outgrows 64 bits; a file name read from a directory holds bytes FF FE that are
    # not UTF-8 (Python keeps them as lone surrogates). Operators hold both: checkpoints must too.
    name = os.fsdecode(b"in-\xff\xfe.csv")
    state = {"total": 2**70, "debt": -(2**70), "edges": [2**64, -(2**63) - 1, 2**64 - 1, -(2**63)],
             "file": name, (name, 2**80): [name], "nested": {"deep": [[2**100]]}}
    with backend.open() as store:
        store.save(1, {"op": state}, job="j", time_ns=0)
    with backend.open() as store:
        got = store.load(1).states["op"]
    assert got == {**state, "edges": state["edges"]}
    assert os.fsencode(got["file"]) == b"in-\xff\xfe.csv"
    assert type(got["total"]) is int


@pytest.mark.parametrize(("value", "match"), [
    ({"s": {object()}}, r"at \['s'\]\[0\]: a object is not plain data: use dict, list, tuple, set"),
    ({"t": datetime(2026, 1, 1, tzinfo=UTC)}, r"at \['t'\]: a datetime is not plain data.*int nanoseconds"),
    ({"o": object()}, r"at \['o'\]: a object is not plain data"),
    (lambda: 1, r"at the top level: a function is not plain data"),
])
def test_values_that_are_not_plain_data_are_refused_with_their_path(
        backend: Backend, value: Any, match: str) -> None:
    with backend.open() as store:
        store.save(1, states_of(1), job="j", time_ns=0)
        with pytest.raises(CheckpointEncodeError, match=r"checkpoint 2: state 'op': cannot encode the value "
                           + match):
            store.save(2, {"ok": 1, "op": value}, job="j", time_ns=0)
        assert ids_in(store) == [1]


def test_a_reference_cycle_is_refused(backend: Backend) -> None:
    loop: list[Any] = [1]
    loop.append({"again": loop})
    with backend.open() as store, pytest.raises(CheckpointEncodeError,
                                                match=r"at \[1\]\['again'\]: the data contains itself"):
        store.save(1, {"op": loop}, job="j", time_ns=0)


@pytest.mark.parametrize(("key", "match"), [(3, "the state key 3 must be a non-empty str"),
                                            ("", "the state key '' must be a non-empty str")])
def test_state_keys_must_be_non_empty_strings(backend: Backend, key: Any, match: str) -> None:
    with backend.open() as store, pytest.raises(CheckpointEncodeError, match=match):
        store.save(1, {key: 1}, job="j", time_ns=0)


# ------------------------------------------------------- atomicity and ids


def test_a_save_that_fails_midway_leaves_no_partial_checkpoint(backend: Backend) -> None:
    with backend.open() as store:
        store.save(1, states_of(1), job="j", time_ns=1)
        bad = {"a": {"fine": 1}, "b": [1, 2, 3], "c": {"not": {"plain": object()}}, "d": "never reached"}
        with pytest.raises(CheckpointEncodeError, match="checkpoint 2: state 'c'"):
            store.save(2, bad, job="j", time_ns=2)
    with backend.raw() as raw:
        assert not [k for k in raw if k.startswith(id_prefix(2))], "nothing of checkpoint 2 was written"
    with backend.open() as store:
        latest = store.latest_good()
        assert latest is not None
        assert latest.id == 1
        store.save(2, states_of(2), job="j", time_ns=2)  # the failed save did not use up the id
        assert ids_in(store) == [1, 2]


class FullDisk:
    """Stands in for the rocksdict database: reads pass through, writes fail as on a full disk."""

    def __init__(self, db: Any) -> None:
        self.db = db
        self.writes = 0

    def write(self, *args: Any) -> None:
        self.writes += 1
        # rocksdict raises exactly this: a bare Exception with RocksDB's status text
        raise Exception("IO error: No space left on device: While appending to file: /x/000009.log: "
                        "No space left on device")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


def test_disk_full_on_save_raises_store_io_error_and_keeps_the_last_good(tmp_path: Path) -> None:
    store = RocksDBStore(tmp_path / "ckpt")
    store.save(1, states_of(1), job="j", time_ns=1)
    real, store._db = store._db, FullDisk(store._db)  # type: ignore[assignment]
    with pytest.raises(StoreIOError, match=r"ckpt: the disk is full, or a file-size limit was "
                       r"reached \(IO error: No space left on device.*while writing 4 record\(s\); "
                       r"free space and reopen the store: the checkpoints saved before are intact"):
        store.save(2, states_of(2), job="j", time_ns=2)
    latest = store.latest_good()
    assert latest is not None
    assert latest.id == 1
    assert latest.states == states_of(1)
    store._db = real
    store.close()
    with RocksDBStore(tmp_path / "ckpt") as reopened:
        assert ids_in(reopened) == [1]


@contextlib.contextmanager
def tiny_filesystem(where: Path, size: str) -> Iterator[Path]:
    if os.name != "posix" or os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a real full disk needs a tmpfs mount, which needs root; the injected "
                    "disk-full test covers the same mapping")
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                             capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()}); the injected disk-full test "
                    "covers the same mapping")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_real_full_disk_raises_store_io_error_and_loses_no_saved_checkpoint(tmp_path: Path) -> None:
    with tiny_filesystem(tmp_path / "tiny", "8m") as fs:
        path = fs / "ckpt"
        store = RocksDBStore(path)
        store.save(1, states_of(1), job="j", time_ns=1)
        stat = os.statvfs(fs)
        (fs / "filler").write_bytes(bytes(stat.f_bavail * stat.f_frsize - 300_000))
        with pytest.raises(StoreIOError, match=r"the disk is full.*No space left on device"):
            store.save(2, {"op": random.Random(1).randbytes(1_000_000)}, job="j", time_ns=2)
        latest = store.latest_good()
        assert latest is not None
        assert latest.id == 1
        with contextlib.suppress(StoreIOError):  # RocksDB refuses to flush on a full disk, and closes anyway
            store.close()
        (fs / "filler").unlink()
        with RocksDBStore(path) as reopened:
            latest = reopened.latest_good()
            assert latest is not None
            assert (latest.id, latest.states) == (1, states_of(1))
            reopened.save(2, states_of(2), job="j", time_ns=2)
            assert ids_in(reopened) == [1, 2]


def test_ids_must_increase(backend: Backend) -> None:
    with backend.open() as store:
        store.save(5, states_of(1), job="j", time_ns=0)
    with backend.open() as store:  # the rule holds across a reopen: it reads the ids in the store
        for cid in (5, 3):
            with pytest.raises(CheckpointIdError, match=rf"save\({cid}\): checkpoint ids must increase, and "
                               "the store already holds checkpoint 5; use an id above 5"):
                store.save(cid, states_of(1), job="j", time_ns=0)
        store.save(6, states_of(1), job="j", time_ns=0)
        assert ids_in(store) == [5, 6]


@pytest.mark.parametrize("bad", [-1, 2**64, True, 1.0, "1"])
def test_ids_are_ints_of_64_bits(backend: Backend, bad: Any) -> None:
    with backend.open() as store:
        with pytest.raises(CheckpointIdError,
                           match=r"save\(\): the checkpoint id must be an int in 0 \.\. 2\*\*64-1"):
            store.save(bad, {}, job="j", time_ns=0)
        with pytest.raises(CheckpointIdError, match=r"load\(\): the checkpoint id must be an int"):
            store.load(bad)


@pytest.mark.parametrize(("job", "time_ns", "error", "match"), [
    (None, 0, TypeError, r"save\(1\): job must be a str"),
    ("\udc80", 0, ValueError, r"save\(1\): job '\\udc80' is not valid Unicode"),
    ("j", 1.5, TypeError, r"save\(1\): time_ns must be an int \(nanoseconds"),
    ("j", 2**64, ValueError, r"save\(1\): time_ns=18446744073709551616 does not fit in 64 bits"),
])
def test_job_and_time_are_checked(backend: Backend, job: Any, time_ns: Any, error: type[Exception],
                                  match: str) -> None:
    with backend.open() as store:
        with pytest.raises(error, match=match):
            store.save(1, {}, job=job, time_ns=time_ns)
        assert store.list() == []


def test_the_largest_id_works(backend: Backend) -> None:
    with backend.open() as store:
        store.save(0, {}, job="j", time_ns=0)
        store.save(2**64 - 1, {"op": 1}, job="j", time_ns=0)
        assert ids_in(store) == [0, 2**64 - 1]
        assert store.load(2**64 - 1).states == {"op": 1}


@pytest.mark.parametrize("keep_last", [1, 2, 3])
def test_retention_keeps_the_last_k(backend: Backend, keep_last: int) -> None:
    with backend.open(keep_last) as store:
        for cid in (1, 2, 4, 8, 9, 12):
            store.save(cid, states_of(cid), job="j", time_ns=cid)
        assert ids_in(store) == [1, 2, 4, 8, 9, 12][-keep_last:]
        with pytest.raises(CheckpointNotFound, match=r"checkpoint 1 is not in the .* store"):
            store.load(1)
    with backend.raw() as raw:
        assert len([k for k in raw if k.startswith(NAMESPACE)]) == 4 * keep_last, "no record left behind"


def test_keep_last_must_be_at_least_one() -> None:
    with pytest.raises(ValueError, match="keep_last=0: a store must keep at least the last checkpoint"):
        MemoryStore(keep_last=0)


def test_delete(backend: Backend) -> None:
    with backend.open() as store:
        save_ids_into(store, [1, 2, 3])
        store.delete(2)
        assert ids_in(store) == [1, 3]
        with pytest.raises(CheckpointNotFound, match=r"delete\(2\): checkpoint 2 is not in"):
            store.delete(2)


def save_ids_into(store: CheckpointStore, ids: list[int]) -> None:
    for cid in ids:
        store.save(cid, states_of(cid), job="job", time_ns=cid * 1_000)


def test_a_closed_store_refuses_every_call(backend: Backend) -> None:
    store = backend.open()
    with store:
        store.save(1, {}, job="j", time_ns=0)
    assert store.closed
    store.close()  # a second close is a no-op
    with pytest.raises(StoreClosed, match=r"latest_good\(\): the .* store.* is closed; open a new store"):
        store.latest_good()
    with pytest.raises(StoreClosed):
        store.save(2, {}, job="j", time_ns=0)


# ---------------------------------------------------------------- listing


def test_list_reports_sizes_per_key_and_total(backend: Backend) -> None:
    with backend.open() as store:
        store.save(1, {"small": 1, "big": "x" * 10_000}, job="j", time_ns=11)
        store.save(2, {}, job="j", time_ns=12)
    with backend.raw() as raw:
        sizes = {k: len(v) for k, v in raw.items()}
    with backend.open() as store:
        first, second = store.list()
    assert first.sizes == {"big": sizes[state_key(1, "big")], "small": sizes[state_key(1, "small")]}
    assert 10_000 < first.sizes["big"] < 10_200
    assert first.total_bytes == sum(first.sizes.values()) + sizes[manifest_key(1)]
    assert (first.id, first.job, first.time_ns, first.status, first.reason) == (1, "j", 11, "ok", None)
    assert (second.id, second.sizes, second.total_bytes) == (2, {}, sizes[manifest_key(2)])


# ----------------------------------------------------------------- damage


def flip_middle(value: bytes) -> bytes:
    i = len(value) // 2
    return value[:i] + bytes([value[i] ^ 0x40]) + value[i + 1:]


def copy_from_2(raw: MutableMapping[bytes, bytes], key: bytes) -> bytes:
    return raw[state_key(2, "op/window/0")]


Damage = Callable[[MutableMapping[bytes, bytes], bytes], bytes | None]

DAMAGE: list[tuple[str, bytes, Damage, type[CheckpointError], str]] = [
    ("flipped byte", state_key(3, "op/window/0"), lambda raw, k: flip_middle(raw[k]), CheckpointCorrupt,
     r"checkpoint 3, record 'op/window/0': checksum mismatch \(stored [0-9a-f]{32}, computed [0-9a-f]{32}.*"
     r"truncated or altered after it was written; this checkpoint cannot be used: restore an older one"),
    ("flipped manifest byte", manifest_key(3), lambda raw, k: flip_middle(raw[k]), CheckpointCorrupt,
     r"checkpoint 3, manifest: checksum mismatch"),
    ("truncated value", state_key(3, "src"), lambda raw, k: raw[k][:-7], CheckpointCorrupt,
     r"checkpoint 3, record 'src': checksum mismatch .* truncated or altered"),
    ("truncated to part of the header", state_key(3, "src"), lambda raw, k: raw[k][:10], CheckpointCorrupt,
     rf"checkpoint 3, record 'src': the record is 10 bytes, only part of the {HEADER_SIZE}-byte header"),
    ("emptied", state_key(3, "src"), lambda raw, k: b"", CheckpointCorrupt, "the record is 0 bytes"),
    ("lost manifest", manifest_key(3), lambda raw, k: None, CheckpointCorrupt,
     r"checkpoint 3 is incomplete: 3 state record\(s\) but no manifest"),
    ("lost record", state_key(3, "sink"), lambda raw, k: None, CheckpointCorrupt,
     r"checkpoint 3: its records do not match its manifest \(missing: \['sink'\]; not listed: none\)"),
    ("added record", state_key(3, "intruder"), copy_from_2, CheckpointCorrupt,
     r"checkpoint 3: its records do not match its manifest \(missing: none; not listed: \['intruder'\]\)"),
    ("record of another checkpoint", state_key(3, "op/window/0"), copy_from_2, CheckpointCorrupt,
     r"checkpoint 3, record 'op/window/0': the record says its checkpoint id is 2, but it is stored as 3"),
    ("foreign bytes", state_key(3, "sink"), lambda raw, k: b'{"sink": 3}', CheckpointForeign,
     r"checkpoint 3, record 'sink': the record does not start with the 'riverbed.checkpoint' magic "
     r"\(it starts with b'\{\"sink\": 3\}'\): it was not written by riverbed"),
    ("foreign msgpack", manifest_key(3), lambda raw, k: msgpack.packb({"format": "x"}), CheckpointForeign,
     r"checkpoint 3, manifest: the record does not start with the 'riverbed.checkpoint' magic"),
]


@pytest.mark.parametrize(("name", "key", "damage", "error", "match"), DAMAGE, ids=[d[0] for d in DAMAGE])
def test_damage_is_reported_and_latest_good_falls_back(
        backend: Backend, name: str, key: bytes, damage: Damage, error: type[CheckpointError],
        match: str) -> None:
    save_ids(backend, [1, 2, 3])
    with backend.raw() as raw:
        damaged = damage(raw, key)
        if damaged is None:
            del raw[key]
        else:
            raw[key] = damaged
    with backend.open() as store:
        with pytest.raises(error, match=match) as raised:
            store.load(3)
        assert raised.value.checkpoint_id == 3
        skips = Skips()
        latest = store.latest_good(on_skip=skips)
        assert latest is not None
        assert (latest.id, latest.states) == (2, states_of(2))
        assert [(cid, type(e)) for cid, e in skips.calls] == [(3, error)]
        assert str(skips.calls[0][1]) == str(raised.value)
        infos = store.list()
        assert [(i.id, i.status) for i in infos] == [(1, "ok"), (2, "ok"), (3, "corrupt")]
        assert infos[2].reason == str(raised.value)
        assert store.load(2).states == states_of(2), "the damage did not spread"


def test_a_newer_format_version_is_a_version_error(backend: Backend) -> None:
    save_ids(backend, [1, 2])
    header = RecordHeader("state", 2, "job", 2_000, "sink")
    record = encode_record(header, msgpack.packb(2))
    body = msgpack.unpackb(record[HEADER_SIZE:])
    body[0] = 2
    newer = msgpack.packb(body)
    with backend.raw() as raw:
        raw[state_key(2, "sink")] = MAGIC + hashlib.blake2b(newer, digest_size=16).digest() + newer
    with backend.open() as store:
        with pytest.raises(CheckpointVersionError,
                           match=r"checkpoint 2, record 'sink': format version 2 is not supported \(this "
                           r"riverbed reads version 1\): it was written by a newer riverbed"):
            store.load(2)
        skips = Skips()
        latest = store.latest_good(skips)
        assert latest is not None
        assert latest.id == 1
        assert [cid for cid, _ in skips.calls] == [2]


def test_a_flipped_version_byte_is_damage_not_a_new_version(backend: Backend) -> None:
    save_ids(backend, [1])
    with backend.raw() as raw:
        value = raw[state_key(1, "sink")]
        raw[state_key(1, "sink")] = value[:HEADER_SIZE + 1] + b"\x02" + value[HEADER_SIZE + 2:]
    with backend.open() as store, pytest.raises(CheckpointCorrupt, match="checksum mismatch"):
        store.load(1)


def test_without_a_hook_skips_are_logged(backend: Backend, caplog: pytest.LogCaptureFixture) -> None:
    save_ids(backend, [1, 2])
    with backend.raw() as raw:
        raw[state_key(2, "src")] = flip_middle(raw[state_key(2, "src")])
    with caplog.at_level(logging.WARNING, logger="riverbed.checkpoint"), backend.open() as store:
        latest = store.latest_good()
    assert latest is not None
    assert latest.id == 1
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert record.getMessage().startswith("skipping checkpoint 2 of the ")
    assert ": checkpoint 2, record 'src': checksum mismatch" in record.getMessage()


def test_no_good_checkpoint_gives_none(backend: Backend) -> None:
    with backend.open() as store:
        assert store.latest_good() is None
    save_ids(backend, [1])
    with backend.raw() as raw:
        del raw[manifest_key(1)]
    with backend.open() as store:
        skips = Skips()
        assert store.latest_good(skips) is None
        assert [cid for cid, _ in skips.calls] == [1]


def test_a_stray_key_in_the_namespace_is_a_foreign_store(backend: Backend) -> None:
    save_ids(backend, [1])
    with backend.raw() as raw:
        raw[b"ckpt/zz"] = b"someone else's"
    with backend.open() as store, pytest.raises(
            CheckpointForeign, match=r"holds the key b'ckpt/zz', which is in the checkpoint namespace .* a "
            r"directory of their own"):
        store.latest_good()


# ------------------------------------------------------- RocksDB specifics

OPEN_IN_CHILD = """
import sys
from riverbed.checkpoint import RocksDBStore, StoreLocked
try:
    store = RocksDBStore(sys.argv[1])
except StoreLocked as exc:
    print("StoreLocked:", exc)
    sys.exit(3)
latest = store.latest_good()
print("opened, latest", latest.id if latest else None)
store.close()
"""


def open_in_another_process(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", OPEN_IN_CHILD, str(path)], capture_output=True, text=True,
                          timeout=120, cwd=REPO, check=False)


def test_a_second_process_on_the_same_directory_gets_store_locked(tmp_path: Path) -> None:
    path = tmp_path / "ckpt"
    with RocksDBStore(path) as store:
        store.save(1, {}, job="j", time_ns=0)
        child = open_in_another_process(path)
        assert child.returncode == 3, child.stderr
        assert child.stdout.startswith(
            f"StoreLocked: the RocksDB checkpoint store at {path} is already opened by another process "
            "(or by another store in this process): RocksDB could not take its LOCK file (IO error: "
            "While lock file:")
        assert "stop the other job or close the other store first" in child.stdout
        with pytest.raises(StoreLocked, match=r"is already opened by another process .*lock hold by current"):
            RocksDBStore(path)
    child = open_in_another_process(path)
    assert (child.returncode, child.stdout) == (0, "opened, latest 1\n"), child.stderr


def test_errors_keep_no_iterator_alive_so_close_releases_the_lock(tmp_path: Path) -> None:
    # A live rocksdict iterator keeps the database (and its LOCK) open after close();
    # an error raised from a scan must not hold one in its traceback.
    path = tmp_path / "ckpt"
    save_ids(RocksBackend(path), [1])
    with RawRocks(path).db as raw:
        raw[state_key(1, "src")] = b"junk"
    store = RocksDBStore(path)
    with pytest.raises(CheckpointForeign) as raised:
        store.load(1)
    store.close()
    RocksDBStore(path).close()
    assert raised.value.checkpoint_id == 1


def test_a_read_only_store_reads_next_to_the_writer(tmp_path: Path) -> None:
    path = tmp_path / "ckpt"
    with RocksDBStore(path) as writer:
        save_ids_into(writer, [1, 2])
        with RocksDBStore(path, read_only=True) as reader:
            assert ids_in(reader) == [1, 2]
            assert reader.load(2).states == states_of(2)
            with pytest.raises(StoreError, match="was opened read_only=True: it cannot save or delete"):
                reader.save(3, {}, job="j", time_ns=0)


def test_an_unusable_path_is_a_store_io_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(StoreIOError, match=r"the RocksDB checkpoint store at .*file/ckpt: RocksDB failed "
                       r"while opening it: .*[Nn]ot a directory"):
        RocksDBStore(tmp_path / "file" / "ckpt")


def test_a_damaged_table_file_is_never_a_silent_partial_result(tmp_path: Path) -> None:
    path = tmp_path / "ckpt"
    rnd = random.Random(7)
    originals = {cid: {f"op/{i}": {"blob": rnd.randbytes(2000), "n": i} for i in range(40)}
                 for cid in (1, 2, 3)}
    with RocksDBStore(path) as store:
        for cid, states in originals.items():
            store.save(cid, states, job="j", time_ns=cid)
    tables = sorted(path.glob("*.sst"))
    assert tables, "close() flushes the checkpoints into table files"
    for table in tables:
        data = bytearray(table.read_bytes())
        middle = len(data) // 2
        data[middle:middle + 64] = bytes(64)
        table.write_bytes(bytes(data))
    with RocksDBStore(path) as store:
        outcomes: dict[int, str] = {}
        for cid, states in originals.items():
            try:
                outcomes[cid] = "intact" if store.load(cid).states == states else "ALTERED"
            except CheckpointCorrupt as exc:
                assert "is damaged: RocksDB reported 'Corruption: block checksum mismatch" in str(exc)
                assert str(exc).startswith(f"checkpoint {cid}: reading its records failed: ")
                outcomes[cid] = "corrupt"
        assert "ALTERED" not in outcomes.values()
        assert "corrupt" in outcomes.values(), "the damage was detected, not read around"
        statuses = {info.id: info.status for info in store.list()}
        assert statuses == {cid: "ok" if o == "intact" else "corrupt" for cid, o in outcomes.items()}
        skips = Skips()
        latest = store.latest_good(skips)
        newest_intact = max(cid for cid, o in outcomes.items() if o == "intact")
        assert latest is not None
        assert latest.id == newest_intact
        assert [cid for cid, _ in skips.calls] == [c for c in (3, 2, 1) if c > newest_intact]


def test_rocksdb_error_messages_are_mapped() -> None:
    from riverbed.checkpoint._rocksdb import _map_error

    where = "the RocksDB checkpoint store at /x"
    cases = {
        "IO error: While lock file: /x/LOCK: Resource temporarily unavailable": StoreLocked,
        "Corruption: block checksum mismatch": CheckpointCorrupt,
        "IO error: No space left on device: While appending to file: /x/000009.sst": StoreFull,
        "IO error: No such file or directory: While opening a file for sequentially reading: /x/CURRENT":
            StoreIOError,
        "Invalid argument: Column family not found": StoreIOError,
    }
    for message, kind in cases.items():
        error = _map_error(Exception(message), where, "testing")
        assert type(error) is kind, message
        assert message in str(error)


# ----------------------------------------------------------------- exports


def test_the_public_api_imports() -> None:
    assert ckpt.__all__
    for name in ckpt.__all__:
        assert hasattr(ckpt, name), name
    for error in (CheckpointCorrupt, CheckpointForeign, CheckpointVersionError, StoreLocked, StoreIOError):
        assert issubclass(error, CheckpointError)


def test_a_long_run_of_small_checkpoints_flushes_the_memtable_now_and_then(tmp_path: Path) -> None:
    # Each save drops the checkpoints beyond keep_last with a range deletion. Small states never
    # fill RocksDB's write buffer, so the deletions piled up in it and every save's iterators
    # walked them all: 0.5 ms a save at first, 23 ms after 2,000, memory growing with them.
    # The store writes the memtable out every FLUSH_EVERY such saves: a table file appears.
    from riverbed.checkpoint._rocksdb import FLUSH_EVERY

    path = tmp_path / "ck"
    with RocksDBStore(path, keep_last=3) as store:
        for cid in range(1, FLUSH_EVERY + 10):
            store.save(cid, {"op": {"count": cid}}, job="j", time_ns=cid)
        assert list(path.glob("*.sst")), "the memtable was never written out"
        assert store.latest_good() is not None and store.latest_good().id == FLUSH_EVERY + 9


def test_a_memtable_flush_that_fails_is_a_warning_and_the_save_stands(tmp_path: Path) -> None:
    # The save's write had committed when its flush failed (a full disk writing the table
    # file): raising said the save failed, and the ledger, not updated, later reported the
    # checkpoint it had dropped as lost.
    from riverbed.checkpoint import StoreWarning
    from riverbed.checkpoint._rocksdb import FLUSH_EVERY

    warnings: list[StoreWarning] = []
    store = RocksDBStore(tmp_path / "ck", keep_last=2, on_warning=warnings.append)
    real = store._db

    class FullDisk:
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def flush(self, *args: Any) -> None:
            raise Exception("IO error: No space left on device: While appending to file: 000123.sst")

    store._db = FullDisk()  # type: ignore[assignment]
    for cid in range(1, FLUSH_EVERY + 3):
        store.save(cid, {"op": {"n": cid}}, job="j", time_ns=cid)
    assert [w.kind for w in warnings] == ["flush"]
    assert "the checkpoints saved so far are safe" in warnings[0].message
    store._db = real
    store.close()
    with RocksDBStore(tmp_path / "ck", keep_last=2) as again:
        assert [(i.id, i.status) for i in again.list()] == [(FLUSH_EVERY + 1, "ok"), (FLUSH_EVERY + 2, "ok")]
        assert not again.lost


def test_a_directory_removed_under_an_open_store_fails_the_next_save(tmp_path: Path) -> None:
    # RocksDB wrote on into its open files, whose names were gone: every later save
    # "committed" (and its commit acknowledged MQTT messages), and a restart found nothing.
    import shutil

    store = RocksDBStore(tmp_path / "ckpt")
    store.save(1, {"op": 1}, job="j", time_ns=1)
    shutil.rmtree(tmp_path / "ckpt")
    with pytest.raises(StoreIOError, match="removed or replaced while the store was open"):
        store.save(2, {"op": 2}, job="j", time_ns=2)
    with contextlib.suppress(StoreIOError):  # (its log file is gone too)
        store.close()
    with RocksDBStore(tmp_path / "other") as store:  # and replaced by another directory
        (tmp_path / "other").rename(tmp_path / "moved")
        (tmp_path / "other").mkdir()
        with pytest.raises(StoreIOError, match="removed or replaced"):
            store.save(1, {"op": 1}, job="j", time_ns=1)


def test_a_file_given_as_the_directory_is_named_so(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    with pytest.raises(StoreIOError, match=r"afile: is a file, not a directory"):
        RocksDBStore(tmp_path / "afile")
    from riverbed.checkpoint._rocksdb import _map_error

    assert isinstance(_map_error(Exception("IO error: File too large: While appending"), "x", "y"), StoreFull)


def test_a_directory_of_other_files_is_refused_not_mixed_with_a_store(tmp_path: Path) -> None:
    """RocksDB would put its files among the user's: the store refuses, naming them."""
    home = tmp_path / "home"
    home.mkdir()
    for name in ("notes.txt", "photo.jpg"):
        (home / name).write_text("mine")
    with pytest.raises(StoreIOError, match=r"home: holds files that are not a checkpoint store's "
                                           r"\(notes\.txt, photo\.jpg\) and no store"):
        RocksDBStore(home)
    assert sorted(os.listdir(home)) == ["notes.txt", "photo.jpg"]  # nothing written there
    (tmp_path / "volume" / "lost+found").mkdir(parents=True)  # a file system's root: its own
    RocksDBStore(tmp_path / "volume").close()
    (tmp_path / "empty").mkdir()
    with RocksDBStore(tmp_path / "empty") as store:  # an empty directory, and a store, are fine
        store.save(1, {"op": 1}, job="j", time_ns=1)
    (tmp_path / "empty" / "notes.txt").write_text("mine")  # a file beside a store: still a store
    with RocksDBStore(tmp_path / "empty") as store:
        assert [info.id for info in store.list()] == [1]


def test_a_checkpoint_retention_dropped_after_the_record_fell_behind_is_not_lost(tmp_path: Path) -> None:
    # The record of committed ids could not be written at save 4 (which dropped checkpoint 1):
    # the next open said checkpoint 1 was "gone ... restore the directory from a backup".
    path = tmp_path / "ckpt"
    warnings: list[Any] = []
    with RocksDBStore(path, keep_last=3, on_warning=warnings.append) as store:
        for i in (1, 2, 3):
            store.save(i, {"op": i}, job="j", time_ns=i)
        blocker = path / "riverbed-committed.json.tmp"
        blocker.mkdir()  # the record cannot be replaced now
        store.save(4, {"op": 4}, job="j", time_ns=4)
        store.save(5, {"op": 5}, job="j", time_ns=5)
        store.save(6, {"op": 6}, job="j", time_ns=6)
        assert [w.kind for w in warnings] == ["ledger"]  # once, not at every save
        blocker.rmdir()
        store.save(7, {"op": 7}, job="j", time_ns=7)
        blocker.mkdir()
        store.save(8, {"op": 8}, job="j", time_ns=8)  # failing again after a success: told again
        assert [w.kind for w in warnings] == ["ledger", "ledger"]
        blocker.rmdir()
        store.save(9, {"op": 9}, job="j", time_ns=9)
        (path / "riverbed-committed.json.tmp").mkdir()
        store.save(10, {"op": 10}, job="j", time_ns=10)  # dropped 7, the record lists 9, 8, 7
        (path / "riverbed-committed.json.tmp").rmdir()
    warnings.clear()
    with RocksDBStore(path, keep_last=3, on_warning=warnings.append) as store:
        assert store.lost == () and not [w for w in warnings if w.kind == "lost"]
        assert [(i.id, i.status) for i in store.list()] == [(8, "ok"), (9, "ok"), (10, "ok")]
