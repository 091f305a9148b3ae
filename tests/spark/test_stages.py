"""Chained keyed stages on a local Spark: two windowed operators keyed differently in one query."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from riverbed.run import load_graph
from riverbed.runtime import VirtualClock, run_graph
from riverbed.spark_bridge._deploy import deploy

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_sensor_sites_runs_as_two_keyed_stages_and_writes_the_runtimes_file(
        spark: Any, tmp_path: Path) -> None:
    params = {"sites": 3, "per_site": 4, "seconds": 4}
    ref, out = tmp_path / "runtime.csv", tmp_path / "spark.csv"
    run_graph(load_graph(EXAMPLES / "sensor_sites.py", {**params, "out": str(ref)}), clock=VirtualClock())
    d = deploy(load_graph(EXAMPLES / "sensor_sites.py", {**params, "out": str(out)}), spark,
               checkpoint=str(tmp_path / "ck"), max_records_per_batch=200, groups=2)
    d.await_termination()
    assert [(s.members, s.groups) for s in d.plan.stages] == [(["panes", "spread"], 2), (["sites"], 2)]
    assert d.stage.batches >= 5  # 960 readings, 200 a batch: panes and sites cross batches
    assert len(ref.read_text().splitlines()) == 24
    assert out.read_text() == ref.read_text()
