"""The extra conformance cases (tests/conformance/extra) through the keyed stage on a local Spark,
both flavors in one query. The public cases run in test_bridge.py, one query per flavor."""

from __future__ import annotations

from typing import Any

from riverbed.conformance import trace_records
from riverbed.spark_bridge import replay_on_spark
from tests.test_conformance import EXTRA_DIR, cases_of
from tests.trace_compare import mismatch


def test_the_extra_cases_through_the_keyed_stage(spark: Any) -> None:
    runs = [(c, flavor) for flavor in ("java", "cpp") for c in cases_of(EXTRA_DIR) if c.applies_to(flavor)]
    assert len(runs) == 4
    results = replay_on_spark(runs, spark=spark, rows_per_batch=16)
    failures = {f"{c.name}[{flavor}]": why for (c, flavor), events in zip(runs, results, strict=True)
                if (why := mismatch(dict(c.raw, order="by_key"), trace_records(c, events))) is not None}
    assert not failures, failures
