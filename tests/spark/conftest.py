"""One local SparkSession for the whole test run (its start-up costs ~10 s)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from riverbed.spark_bridge import spark_session

    local = tmp_path_factory.mktemp("spark-local")
    session = spark_session("local[2]", app_name="riverbed-tests", local_dir=str(local))
    yield session
    for q in session.streams.active:
        q.stop()
    session.stop()


@pytest.fixture
def checkpoint_dir(tmp_path: Path) -> Path:
    return tmp_path / "checkpoint"
