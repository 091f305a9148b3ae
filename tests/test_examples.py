"""Every graph in examples/ runs, on the virtual clock, and writes what it says it writes."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from riverbed.checkpoint import MemoryStore
from riverbed.run import load_graph
from riverbed.runtime import Job, VirtualClock, run_graph
from riverbed.testing import run_until_crash

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _run(name: str, params: dict[str, object]) -> None:
    run_graph(load_graph(EXAMPLES / name, params), clock=VirtualClock())


def test_every_example_is_covered_here() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == [
        "parallel_panes.py", "per_file_totals.py", "sensor_join.py", "sensor_sites.py", "sensors.py",
        "sensors_mqtt.py", "stock_moving_average.py"]  # sensors_mqtt.py: tests/test_mqtt_demo.py


def test_sensors_alert_on_a_delta_window(tmp_path: Path) -> None:
    out = tmp_path / "alerts.jsonl"
    _run("sensors.py", {"sensors": 50, "seconds": 4, "out": str(out)})
    alerts = [json.loads(line) for line in out.read_text().splitlines()]
    assert alerts, "a random walk with jumps crosses the 1.5 degree delta somewhere"
    assert all(abs(a["end"] - a["start"]) > 1.5 for a in alerts)


def test_stock_moving_average_per_symbol_and_second(tmp_path: Path) -> None:
    out = tmp_path / "averages.csv"
    _run("stock_moving_average.py", {"seconds": 4, "symbols": 3, "out": str(out)})
    rows = list(csv.reader(out.read_text().splitlines()))
    assert {r[0] for r in rows} == {"SYM0", "SYM1", "SYM2"}
    for _sym, avg, low, high, volume in rows:
        assert float(low) <= float(avg) <= float(high) and int(volume) > 0


def test_sensor_join_pairs_readings_of_one_room_less_than_a_second_apart(tmp_path: Path) -> None:
    out = tmp_path / "comfort.csv"
    _run("sensor_join.py", {"seconds": 3, "rooms": 3, "out": str(out)})
    rows = list(csv.reader(out.read_text().splitlines()))
    assert rows and {r[0] for r in rows} == {"room-0", "room-1", "room-2"}
    assert all(float(r[4]) != float(r[1]) for r in rows)  # the Functor added the heat index


def test_sensor_sites_aggregates_one_round_of_each_sites_panes(tmp_path: Path) -> None:
    out = tmp_path / "sites.csv"
    _run("sensor_sites.py", {"sites": 3, "per_site": 4, "seconds": 2, "rate": 20, "out": str(out)})
    rows = list(csv.reader(out.read_text().splitlines()))
    # 20 readings a second for 2 s: 4 panes of 10 per sensor, so 4 rounds per site
    assert sorted({r[0] for r in rows}) == ["site-00", "site-01", "site-02"] and len(rows) == 12
    assert all(r[1] == "4" and float(r[3]) <= float(r[2]) <= float(r[4]) for r in rows)


def test_per_file_totals_one_line_per_file(tmp_path: Path) -> None:
    data = tmp_path / "sales"
    data.mkdir()
    (data / "a.csv").write_text("item,qty,amount\npen,2,3.5\nink,1,7.25\n")
    (data / "b.csv").write_text("item,qty,amount\npad,4,10.0\n")
    out = tmp_path / "totals.csv"
    _run("per_file_totals.py", {"input": str(data), "out": str(out)})
    rows = list(csv.reader(out.read_text().splitlines()))
    assert [(Path(r[0]).name, r[1], r[2]) for r in rows] == [("a.csv", "2", "3"), ("b.csv", "1", "4")]


def test_parallel_panes_are_the_same_panes_at_every_width(tmp_path: Path) -> None:
    files = {}
    for width in (1, 2, 3):
        out = tmp_path / f"panes-{width}.csv"
        _run("parallel_panes.py", {"width": width, "sensors": 30, "seconds": 25, "out": str(out)})
        files[width] = sorted(out.read_text().splitlines())
    rows = list(csv.reader(files[1]))
    # 10 readings a second for 25 s: panes starting at 0, 10 and 20 s for each of 30 sensors
    assert len(rows) == 90 and {r[1] for r in rows} == {"0", str(10 * 10**9), str(20 * 10**9)}
    assert sum(int(r[2]) for r in rows) == 30 * 250
    assert files[2] == files[1] and files[3] == files[1]


def test_per_file_totals_runs_on_its_sample_data(tmp_path: Path) -> None:
    out = tmp_path / "totals.csv"
    _run("per_file_totals.py", {"input": str(EXAMPLES / "data" / "sales"), "out": str(out)})
    rows = list(csv.reader(out.read_text().splitlines()))
    # the third file has its header only: no line for it
    assert [(Path(r[0]).name, r[1], r[2], r[3]) for r in rows] == [
        ("2026-01.csv", "3", "7", "20.75"), ("2026-02.csv", "2", "11", "30.4")]


@pytest.mark.parametrize(("name", "params", "stop_at"), [
    ("sensors.py", {"sensors": 20, "seconds": 40}, 7.311),
    ("parallel_panes.py", {"width": 2, "sensors": 20, "seconds": 40}, 13.05),
    ("sensor_sites.py", {"sites": 2, "per_site": 3, "seconds": 12, "rate": 20}, 5.52),
    ("sensor_join.py", {"seconds": 8, "rooms": 3}, 3.3),
    ("stock_moving_average.py", {"seconds": 6, "symbols": 3}, 2.0137),
])
def test_a_stop_and_restart_writes_what_an_uninterrupted_run_writes(
        tmp_path: Path, name: str, params: dict[str, object], stop_at: float) -> None:
    """README: "stop-and-restart output equals an uninterrupted run's". The examples' sources
    stamped the first round after a restart with the restored clock's time, which the last
    round before the stop had taken: every later row came one round early (a review)."""
    out = tmp_path / "out.txt"
    assert run_until_crash(Job(load_graph(EXAMPLES / name, {**params, "out": str(out)}),
                               clock=VirtualClock()), None)
    uninterrupted = out.read_text()
    out.unlink()
    store = MemoryStore(keep_last=100)

    def job() -> Job:
        return Job(load_graph(EXAMPLES / name, {**params, "out": str(out)}), clock=VirtualClock(),
                   checkpoints=store, checkpoint_period=1.0)

    stopped = job()
    assert run_until_crash(stopped, None, [(stop_at, lambda j: j.stop())])
    assert stopped.suspended  # at a checkpoint, which the restart continues from
    again = job()
    assert run_until_crash(again, None)
    assert again.restored_from is not None
    if name == "parallel_panes.py":  # the channels' rows reach the file in either order
        assert sorted(out.read_text().splitlines()) == sorted(uninterrupted.splitlines())
    else:
        assert uninterrupted and out.read_text() == uninterrupted
