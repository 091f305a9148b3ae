"""The RocksDB store on a damaged disk (issue 16): a damaged older table file fails no save and no
close, `list` reports damage instead of failing, committed checkpoints that vanish are reported,
a missing CURRENT file is refused before RocksDB can orphan the tables, and `riverbed checkpoints
repair` rebuilds the store. Damage is done as it happens: to the files, between a close and an open.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from riverbed.checkpoint import (
    CheckpointCorrupt,
    CheckpointError,
    MemoryStore,
    RocksDBStore,
    StoreIOError,
    StoreLocked,
    StoreWarning,
)
from riverbed.checkpoint._layout import id_prefix
from riverbed.cli import main

ROOT = Path(__file__).resolve().parent.parent


def big_states(cid: int) -> dict[str, Any]:
    """About 80 kB in 4 kB RocksDB blocks: damage to one block hits some records, not all."""
    return {f"op/{i}": {"blob": bytes([cid]) * 2000, "i": i} for i in range(40)}


def one_table_per_save(path: Path, ids: list[int], states: Any = big_states) -> list[Path]:
    """Each save in a session of its own: close flushes it into a table file of its own."""
    for cid in ids:
        with RocksDBStore(path, keep_last=3) as store:
            store.save(cid, states(cid), job="job", time_ns=cid)
    return sorted(path.glob("*.sst"))


def zero(table: Path, at: float, length: int = 64) -> None:
    data = bytearray(table.read_bytes())
    start = int(len(data) * at)
    data[start:start + length] = bytes(length)
    table.write_bytes(bytes(data))


class Notes(list[StoreWarning]):
    def kinds(self) -> list[str]:
        return [n.kind for n in self]


def damaged_oldest_table(path: Path) -> Path:
    """A store whose oldest table file is damaged (inside checkpoint 1), with four table files:
    enough for RocksDB to compact them as soon as it opens the store, and fail."""
    oldest = one_table_per_save(path, [1, 2, 3])[0]
    zero(oldest, 0.5)
    with RocksDBStore(path, keep_last=3) as store:  # its close may already meet the damage
        store.save(4, big_states(4), job="job", time_ns=4)
    return oldest


def wait_for_background_error(store: RocksDBStore) -> None:
    """RocksDB's background compaction reads the damaged table and fails: wait (with a deadline)
    for the background error that makes RocksDB refuse every write."""
    deadline = time.monotonic() + 30
    while not store._db.property_int_value("rocksdb.background-errors"):
        assert time.monotonic() < deadline, "RocksDB did not compact the four table files"
        time.sleep(0.002)


# ------------------------------------------------------------ a damaged older table file


def test_a_damaged_older_table_file_fails_no_save_and_no_close(tmp_path: Path) -> None:
    path = tmp_path / "ckpt"
    oldest = damaged_oldest_table(path)
    for cid in (5, 6, 7):  # run after run, as a job restarted each time would
        notes = Notes()
        store = RocksDBStore(path, keep_last=3, on_warning=notes.append)
        latest = store.latest_good()
        assert latest is not None and latest.id == cid - 1
        wait_for_background_error(store)
        store.save(cid, big_states(cid), job="job", time_ns=cid)  # refused before: "Corruption"
        store.close()  # raised CheckpointCorrupt before
        assert notes.kinds() == ["damaged"]
        message = notes[0].message
        assert f"the table file {oldest.name} (it holds checkpoint 1) is damaged" in message
        assert "automatic compaction off for this run, so checkpoints go on being saved" in message
        assert f"run `riverbed checkpoints repair {path}`" in message
    with RocksDBStore(path, read_only=True) as store:
        assert [(i.id, i.status) for i in store.list()] == [(5, "ok"), (6, "ok"), (7, "ok")]
        latest = store.latest_good()
        assert latest is not None and (latest.id, latest.states) == (7, big_states(7))


def test_close_reports_damage_as_a_warning_and_raises_only_typed_errors(tmp_path: Path) -> None:
    path = tmp_path / "ckpt"
    damaged_oldest_table(path)
    notes = Notes()
    store = RocksDBStore(path, keep_last=3, on_warning=notes.append)
    wait_for_background_error(store)
    store.close()  # the flush meets the background error; every save is in the synced log
    assert notes.kinds() == ["damaged"]
    assert "every checkpoint saved is in RocksDB's log and is recovered at the next open" in notes[0].message
    assert store.closed
    with RocksDBStore(path, keep_last=3, read_only=True) as store:  # the lock was released
        assert [i.id for i in store.list()] == [2, 3, 4]

    class FullDisk:
        def __init__(self, real: Any) -> None:
            self.real = real

        def flush(self) -> None:
            raise Exception("IO error: No space left on device: While appending to file: /x/000042.sst")

        def close(self) -> None:
            self.real.close()
            raise Exception("IO error: No space left on device")

    store = RocksDBStore(path, keep_last=3)
    store._db = FullDisk(store._db)  # type: ignore[assignment]
    with pytest.raises(StoreIOError, match=r"the disk is full.*, while closing it; free space and reopen"):
        store.close()
    RocksDBStore(path).close()  # closed anyway: the directory is free


# ------------------------------------------------------------------------- listing


def test_list_and_the_cli_report_damage_that_hides_older_ids(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "ckpt"
    # Checkpoint 2 is one small table block: damaging it stops every scan that passes it (and,
    # as RocksDB seeks in every level-0 table file, every read of checkpoint 1 too).
    tables = one_table_per_save(path, [1, 2, 3], lambda cid: big_states(cid) if cid != 2 else {"op": 2})
    zero(tables[1], 0.0)
    for ledger in (True, False):  # ids come from the store's record of saves, else from the tables
        if not ledger:
            (path / "riverbed-committed.json").unlink()
        notes = Notes()
        with RocksDBStore(path, keep_last=3, on_warning=notes.append) as store:
            infos = store.list()  # raised CheckpointCorrupt before
            assert [(i.id, i.status) for i in infos] == [(1, "corrupt"), (2, "corrupt"), (3, "ok")]
            assert infos[1].reason is not None and "block checksum mismatch" in infos[1].reason
            assert infos[1].reason.startswith("checkpoint 2: reading its records failed: ")
            # Without the record, ids below 1 may exist that no scan can reach: that is said.
            assert notes.kinds() == ([] if ledger else ["damaged"])
            latest = store.latest_good(lambda cid, exc: None)
            assert latest is not None and latest.id == 3
    assert main(["checkpoints", "list", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines.pop(0).startswith("warning: the checkpoints below 1 of the RocksDB checkpoint store at ")
    assert [line.split()[0] for line in lines] == ["1", "2", "3"]
    assert lines[1].split()[1:3] == ["?", "0"]
    assert "corrupt: checkpoint 2: reading its records failed" in lines[1]
    assert "run `riverbed checkpoints repair" in lines[1]
    assert main(["checkpoints", "show", str(path), "2"]) == 0
    assert "checkpoint 2 of job None, 0 bytes, corrupt: checkpoint 2" in capsys.readouterr().out
    assert main(["checkpoints", "show", str(path), "3"]) == 0
    assert "checkpoint 3 of job 'job', " in capsys.readouterr().out


def test_list_warns_about_ids_that_damage_hides_for_good(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "ckpt"
    zero(one_table_per_save(path, [1, 2, 3])[0], 0.0)  # the first block of the oldest table
    notes = Notes()
    with RocksDBStore(path, read_only=True, on_warning=notes.append) as store:
        assert [(i.id, i.status) for i in store.list()] == [(1, "corrupt"), (2, "ok"), (3, "ok")]
    assert notes == []  # the store's record of saves says no checkpoint was kept below 1
    (path / "riverbed-committed.json").unlink()  # a store written before there was one
    with RocksDBStore(path, read_only=True, on_warning=notes.append) as store:
        assert [(i.id, i.status) for i in store.list()] == [(1, "corrupt"), (2, "ok"), (3, "ok")]
    assert notes.kinds() == ["damaged"]
    assert notes[0].message.startswith(f"the checkpoints below 1 of the RocksDB checkpoint store at {path} "
                                       "cannot be listed: ")
    assert main(["checkpoints", "list", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("warning: the checkpoints below 1 of the RocksDB checkpoint store")
    assert out.count("\n") == 4


# --------------------------------------------------------------- lost checkpoints


SAVE_AND_DIE = """
import os, sys
from riverbed.checkpoint import RocksDBStore
store = RocksDBStore(sys.argv[1], keep_last=3)
for cid in (3, 4):
    store.save(cid, {"op": {"blob": bytes([cid]) * 3000}}, job="job", time_ns=cid)
os._exit(0)  # no close: checkpoints 3 and 4 are only in RocksDB's log
"""


def test_checkpoints_lost_with_the_rocksdb_log_are_reported(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "ckpt"
    one_table_per_save(path, [1, 2], lambda cid: {"op": {"blob": bytes([cid]) * 3000}})
    subprocess.run([sys.executable, "-c", SAVE_AND_DIE, str(path)], cwd=ROOT, check=True, timeout=60)
    (log,) = [p for p in path.glob("*.log") if p.stat().st_size > 0]
    data = bytearray(log.read_bytes())
    data[len(data) * 3 // 4] ^= 0xFF  # inside checkpoint 4's record
    log.write_bytes(bytes(data))
    notes = Notes()
    with RocksDBStore(path, keep_last=3, on_warning=notes.append) as store:
        assert 4 in store.lost and set(store.lost) <= {3, 4}
        assert notes.kinds() == ["lost"]
        assert notes[0].checkpoint_ids == store.lost
        assert f"checkpoint(s) {', '.join(map(str, store.lost))} of the RocksDB checkpoint store" in \
            notes[0].message
        assert "they were saved" in notes[0].message and "its log (*.log) is damaged" in notes[0].message
        assert store.newest_id() == 4  # ids go on above the lost ones
        latest = store.latest_good()
        assert latest is not None and latest.id == min(store.lost) - 1
        assert [(i.id, i.status) for i in store.list() if i.id in store.lost] == [
            (cid, "missing") for cid in store.lost]
    assert main(["checkpoints", "list", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("warning: checkpoint(s) ")
    assert "       4  ?             0 bytes  0 states  missing: checkpoint(s)" in out


def test_a_memory_store_reports_lost_checkpoints_the_same_way() -> None:
    records: dict[bytes, bytes] = {}
    ledger: dict[str, bytes] = {}
    with MemoryStore(records, ledger=ledger) as store:
        for cid in (1, 2, 3):
            store.save(cid, {"op": cid}, job="job", time_ns=cid)
    for key in [k for k in records if k.startswith(id_prefix(3))]:
        del records[key]  # behind the store's back
    notes = Notes()
    with MemoryStore(records, ledger=ledger, on_warning=notes.append) as store:
        assert (store.lost, notes.kinds(), store.newest_id()) == ((3,), ["lost"], 3)
        assert "checkpoint(s) 3 of the in-memory checkpoint store are gone" in notes[0].message
        assert "removed behind the store's back" in notes[0].message
        latest = store.latest_good()
        assert latest is not None and latest.id == 2
        store.save(4, {"op": 4}, job="job", time_ns=4)
    with MemoryStore(records, ledger=ledger, on_warning=notes.append) as store:
        assert store.lost == () and [i.id for i in store.list()] == [1, 2, 4]


def test_no_loss_no_warning_and_the_record_follows_retention_and_delete(tmp_path: Path) -> None:
    path = tmp_path / "ckpt"
    notes = Notes()
    with RocksDBStore(path, keep_last=2, on_warning=notes.append) as store:
        for cid in (1, 2, 3):
            store.save(cid, {"op": cid}, job="job", time_ns=cid)
        store.delete(3)
    with RocksDBStore(path, keep_last=2, on_warning=notes.append) as store:
        assert (store.lost, notes) == ((), [])
        assert store.newest_id() == 3  # 3 was committed, then deleted on purpose: not reused
        assert [i.id for i in store.list()] == [2]
    (path / "riverbed-committed.json").write_text("{not json")
    with RocksDBStore(path, keep_last=2, on_warning=notes.append) as store:
        assert notes.kinds() == ["ledger"]
        assert "riverbed-committed.json) cannot be read (it is not JSON" in notes[0].message
        store.save(4, {"op": 4}, job="job", time_ns=4)  # rewrites it
    notes.clear()
    with RocksDBStore(path, keep_last=2, on_warning=notes.append) as store:
        assert (store.lost, notes, store.newest_id()) == ((), [], 4)


# -------------------------------------------------------------- files and paths


def test_the_store_directory_is_owner_only_and_so_is_its_record(tmp_path: Path) -> None:
    previous = os.umask(0)  # whatever the umask, checkpoints are not for others to read
    try:
        with RocksDBStore(tmp_path / "ckpt") as store:
            store.save(1, {"op": "secret"}, job="job", time_ns=1)
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "ckpt").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "ckpt" / "riverbed-committed.json").stat().st_mode) == 0o600
    mine = tmp_path / "shared"
    mine.mkdir(mode=0o750)  # a directory the user made keeps the mode they chose
    RocksDBStore(mine).close()
    assert stat.S_IMODE(mine.stat().st_mode) == 0o750


def test_a_path_that_is_not_utf8_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / os.fsdecode(b"ckpt-\xff\xfe")
    with pytest.raises(StoreIOError, match=r"the path holds bytes that are not UTF-8 .*RocksDB's Python "
                                           r"binding takes only text paths: rename the directory"):
        RocksDBStore(bad)


# ------------------------------------------------------ missing CURRENT and repair


@contextlib.contextmanager
def store_without_current(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "ckpt"
    one_table_per_save(path, [1, 2], lambda cid: {"op": cid})
    subprocess.run([sys.executable, "-c", SAVE_AND_DIE, str(path)], cwd=ROOT, check=True, timeout=60)
    (path / "CURRENT").unlink()
    yield path


def test_a_missing_current_file_is_refused_without_touching_the_store(tmp_path: Path) -> None:
    with store_without_current(tmp_path) as path:
        before = sorted(os.listdir(path))
        for read_only in (False, True):
            with pytest.raises(CheckpointCorrupt) as info:
                RocksDBStore(path, read_only=read_only)
            message = str(info.value)
            assert "holds RocksDB table and log files but no CURRENT file" in message
            assert "wal_dir" not in message
            assert f"run `riverbed checkpoints repair {path}`" in message
        # Before, the read-write open wrote a new, empty MANIFEST and CURRENT, orphaning every table.
        assert sorted(os.listdir(path)) == before


def test_a_current_file_naming_a_missing_manifest_says_to_repair(tmp_path: Path) -> None:
    """It said only "RocksDB failed while opening it: IO error ... No such file" (a review)."""
    with store_without_current(tmp_path) as path:
        (path / "CURRENT").write_text("MANIFEST-999999\n")
        with pytest.raises(CheckpointCorrupt, match=re.escape(f"run `riverbed checkpoints repair {path}`")):
            RocksDBStore(path)


# What a process killed while RocksDB created the store left behind (seen by killing store
# creations at random instants): the first MANIFEST written, CURRENT not yet.
UNFINISHED_CREATIONS = [
    {"IDENTITY": b"id", "LOCK": b"", "LOG": b"log", "MANIFEST-000001": b""},
    {"IDENTITY": b"id", "LOCK": b"", "LOG": b"log", "MANIFEST-000001": b"\x00partial" * 7,
     "000001.dbtmp": b"MANIFEST-0000"},
    {"LOCK": b"", "LOG": b"log", "000000.dbtmp": b""},
]


@pytest.mark.parametrize("files", UNFINISHED_CREATIONS)
def test_a_store_whose_creation_was_killed_before_current_is_created_again(
        tmp_path: Path, files: dict[str, bytes]) -> None:
    """Found by the crash test under load: a job killed in its first moments left a store that
    every restart refused as having lost CURRENT, so the job could not come back by itself."""
    path = tmp_path / "ckpt"
    path.mkdir()
    for name, data in files.items():
        (path / name).write_bytes(data)
    with RocksDBStore(path) as store:
        assert store.latest_good() is None
        store.save(1, {"op": 1}, job="job", time_ns=1)
    with RocksDBStore(path) as store:
        latest = store.latest_good()
        assert latest is not None and latest.id == 1


def test_a_store_with_a_log_file_and_no_current_is_still_refused(tmp_path: Path) -> None:
    """Only the creation's own first MANIFEST is taken for an unfinished creation: a log file
    means the database was open and may hold checkpoints."""
    path = tmp_path / "ckpt"
    path.mkdir()
    for name in ("IDENTITY", "LOG", "MANIFEST-000001", "000004.log"):
        (path / name).write_bytes(b"x")
    with pytest.raises(CheckpointCorrupt, match="no CURRENT file"):
        RocksDBStore(path)


def test_repair_rebuilds_a_store_whose_current_file_is_gone(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with store_without_current(tmp_path) as path:
        assert main(["checkpoints", "repair", str(path)]) == 0
        out = capsys.readouterr().out.splitlines()
        assert out[0].startswith("before: the store could not be opened: the RocksDB checkpoint store at ")
        assert out[1] == f"repaired {path} with RocksDB's repair; damaged table files moved to " \
                         f"{path / 'lost'}: none"
        assert out[2] == "after: 3 checkpoint(s)"
        assert [line.split()[0] for line in out[3:6]] == ["2", "3", "4"]
        assert all(line.endswith(" ok") for line in out[3:6])
        assert out[-1] == "a job restarted on this directory resumes from checkpoint 4"
        notes = Notes()
        with RocksDBStore(path, on_warning=notes.append) as store:
            latest = store.latest_good()
            assert latest is not None and latest.id == 4 and notes == []


def test_repair_sets_a_damaged_table_aside_and_reports_what_it_dropped(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "ckpt"
    oldest = one_table_per_save(path, [1, 2, 3])[0]
    zero(oldest, 0.5)
    assert main(["checkpoints", "repair", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "before: 3 checkpoint(s)"
    assert out[1].split()[0] == "1" and "corrupt: " in out[1]
    assert out[4] == f"repaired {path} with RocksDB's repair; damaged table files moved to " \
                     f"{path / 'lost'}: {oldest.name}"
    assert out[5] == "after: 2 checkpoint(s)"
    assert out[-2:] == ["dropped by the repair: 1",
                        "a job restarted on this directory resumes from checkpoint 3"]
    assert (path / "lost" / oldest.name).exists()
    notes = Notes()
    with RocksDBStore(path, keep_last=3, on_warning=notes.append) as store:
        assert notes == []  # the repair reported the drop; the next job does not report it as lost
        store.save(4, big_states(4), job="job", time_ns=4)
        latest = store.latest_good()
        assert latest is not None and latest.id == 4


def test_repair_refuses_a_store_in_use(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "ckpt"
    one_table_per_save(path, [1], lambda cid: {"op": cid})
    with RocksDBStore(path):
        with pytest.raises(StoreLocked, match="is already opened by another process"):
            RocksDBStore.repair(path)
        assert main(["checkpoints", "repair", str(path)]) == 1
        assert capsys.readouterr().out.startswith("riverbed checkpoints repair: the RocksDB checkpoint "
                                                  f"store at {path} is already opened")
    assert main(["checkpoints", "repair", str(tmp_path / "nowhere")]) == 2


def test_corruption_advice_names_a_command_not_a_python_call() -> None:
    from riverbed.checkpoint._rocksdb import _map_error

    error = _map_error(Exception("Corruption: block checksum mismatch"), "the store at /x", "reading", "/x")
    assert isinstance(error, CheckpointError)
    assert "run `riverbed checkpoints repair /x`" in str(error)
    assert "rocksdict" not in str(error) and "Rdict" not in str(error)


def test_a_store_too_damaged_to_read_stops_run_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Damage that keeps `latest_good` from reading the store at all is no traceback (and,
    under --restarts, no crash loop): ``riverbed run`` refuses to start, exit 2."""
    ckpt, out = tmp_path / "ckpt", tmp_path / "alerts.jsonl"
    args = ["run", "examples/sensors.py", "-p", "seconds=1", "-p", f"out={out}", "--no-status",
            "--virtual-clock", "--checkpoint-dir", str(ckpt), "--checkpoint-period", "100ms",
            "--log-format", "console"]  # (JSON off a terminal: the message would be an event)
    monkeypatch.chdir(ROOT)
    assert main(args) == 0
    capsys.readouterr()

    def unreadable(self: RocksDBStore, on_skip: Any = None) -> Any:
        raise CheckpointCorrupt(f"{self._describe()} is damaged: a table block cannot be read; "
                                "run `riverbed checkpoints repair`")

    monkeypatch.setattr(RocksDBStore, "latest_good", unreadable)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        f"riverbed run: {ckpt}: the RocksDB checkpoint store at {ckpt} is damaged: a table block "
        "cannot be read; run `riverbed checkpoints repair` (nothing was restored, nothing ran)")
