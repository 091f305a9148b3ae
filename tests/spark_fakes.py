"""What the Spark-free bridge tests hand to the driver stage in Spark's place."""

from __future__ import annotations

from typing import Any


class FakeBatch:
    """A ``foreachBatch`` DataFrame holding an Arrow table: all the stage asks of it."""

    def __init__(self, table: Any) -> None:
        self.table = table

    def toArrow(self) -> Any:
        return self.table
