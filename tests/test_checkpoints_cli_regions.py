"""`riverbed checkpoints` on the directory of a graph that declares consistent regions.

`--checkpoint-dir DIR` puts each declared region's store in ``DIR/<region>``. Before, `list`
and `show` on DIR failed with RocksDB's "No such file ... CURRENT" and left a rocksdict
config file in DIR; `repair` created an empty store at the top, next to the regions'; and the
regions' directories were made with the default mode, not owner-only as the README says.
"""

from __future__ import annotations

import stat
from pathlib import Path

from riverbed.run import checkpoints_command, run

GRAPH = """
from riverbed.graph import Graph, Schema
from riverbed.operators import Aggregate, Average, Count, FileSink, FileSource

def build(params):
    g = Graph("sensors", params)
    readings = g.source("readings", FileSource(params["input"], format="csv"),
                        schema=Schema(sensor="rstring", temp="float64"))
    panes = g.operator("panes", Aggregate(output={"avg": Average("temp"), "n": Count()},
                                          copy=("sensor",)),
                       [readings.window("tumbling, count(10), partitioned", partition_by="sensor")])
    g.sink("out", FileSink(params["out"], format="csv", transactional=True), [panes])
    g.consistent_region([readings], name="main", period=2.0)
    return g
"""


def _run_with_regions(tmp_path: Path) -> Path:
    script = tmp_path / "cr.py"
    script.write_text(GRAPH)
    data = tmp_path / "in.csv"
    data.write_text("".join(f"s{i % 3},{20 + i % 7}.5\n" for i in range(90)))
    ck = tmp_path / "ck" / "nested"  # a parent that does not exist yet either
    code = run(str(script), params=[f"input={data}", f"out={tmp_path / 'out.csv'}"], status=False,
               virtual_clock=True, checkpoint_dir=str(ck), echo=lambda _: None)
    assert code == 0
    return ck


def test_list_goes_through_each_regions_store_and_writes_nothing(tmp_path: Path) -> None:
    ck = _run_with_regions(tmp_path)
    before = sorted(p.name for p in ck.iterdir())
    lines: list[str] = []
    assert checkpoints_command("list", str(ck), None, echo=lines.append) == 0
    # (the run ends before its first periodic checkpoint: the region's store is empty)
    assert lines == [f"region main ({ck / 'main'}):", f"{ck / 'main'}: no checkpoints"]
    assert sorted(p.name for p in ck.iterdir()) == before == ["main"]


def test_show_and_repair_ask_for_a_regions_directory(tmp_path: Path) -> None:
    ck = _run_with_regions(tmp_path)
    for action in ("show", "repair"):
        lines: list[str] = []
        assert checkpoints_command(action, str(ck), None, echo=lines.append) == 2
        assert lines == [f"riverbed checkpoints {action}: {ck} holds one store per consistent region "
                         f"(main); give a region's directory, e.g. riverbed checkpoints {action} "
                         f"{ck / 'main'}"]
    assert sorted(p.name for p in ck.iterdir()) == ["main"]  # no store made at the top
    lines = []
    assert checkpoints_command("list", str(ck / "main"), None, echo=lines.append) == 0
    assert lines == [f"{ck / 'main'}: no checkpoints"]


def test_a_directory_without_a_store_is_refused_before_anything_is_opened(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    for action in ("list", "show", "repair"):
        lines: list[str] = []
        assert checkpoints_command(action, str(empty), None, echo=lines.append) == 2
        assert "holds no checkpoint store" in lines[0]
    assert list(empty.iterdir()) == []


def test_the_regions_stores_and_the_directories_above_them_are_owner_only(tmp_path: Path) -> None:
    ck = _run_with_regions(tmp_path)
    for directory in (tmp_path / "ck", ck, ck / "main"):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory


def test_a_directory_of_the_users_files_is_refused_for_declared_regions_too(tmp_path: Path) -> None:
    # Refused for a graph without regions (the store itself refuses), but a graph with regions
    # made DIR/<region> among the user's files (a review): an `rm -r` of the checkpoints would
    # take them too.
    script = tmp_path / "cr.py"
    script.write_text(GRAPH)
    data = tmp_path / "in.csv"
    data.write_text("".join(f"s{i % 3},{20 + i % 7}.5\n" for i in range(30)))
    home = tmp_path / "home"
    home.mkdir()
    (home / "thesis.txt").write_text("mine")
    said: list[str] = []
    code = run(str(script), params=[f"input={data}", f"out={tmp_path / 'out.csv'}"], status=False,
               virtual_clock=True, checkpoint_dir=str(home), echo=said.append)
    assert code == 2 and sorted(p.name for p in home.iterdir()) == ["thesis.txt"]
    assert any("holds files that are not checkpoints (thesis.txt)" in line for line in said), said
    (tmp_path / "volume" / "lost+found").mkdir(parents=True)  # a file system's own: accepted
    assert run(str(script), params=[f"input={data}", f"out={tmp_path / 'out2.csv'}"], status=False,
               virtual_clock=True, checkpoint_dir=str(tmp_path / "volume"), echo=said.append) == 0
