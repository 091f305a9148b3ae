"""The key groups' labels (`spread_labels`): Spark's hash decides them once per process."""

from __future__ import annotations

from typing import Any

from riverbed.spark_bridge._keyed import spread_labels


class _Conf:
    def get(self, key: str) -> str:
        assert key == "spark.sql.shuffle.partitions"
        return "3"


class _Rows:
    """``spark.range(n).selectExpr(...)``: ``p`` is ``g`` modulo 3, as a stand-in hash."""

    def __init__(self, n: int) -> None:
        self.n = n

    def selectExpr(self, *exprs: str) -> _Rows:
        return self

    def collect(self) -> list[dict[str, int]]:
        return [{"g": g, "p": g % 3} for g in range(self.n)]


class _Spark:
    def __init__(self) -> None:
        self.conf = _Conf()
        self.jobs = 0

    def range(self, start: int, end: int) -> Any:
        self.jobs += 1
        return _Rows(end)


def test_labels_are_asked_of_spark_once_per_partitions_and_groups() -> None:
    spark = _Spark()
    first = spread_labels(spark, 5)
    assert first == [0, 1, 2, 3, 4]  # round robin over the 3 partitions
    assert spread_labels(spark, 5) == first
    assert spark.jobs == 1  # no other test uses 3 shuffle partitions
    assert spread_labels(spark, 4) == [0, 1, 2, 3]
    assert spark.jobs == 2
