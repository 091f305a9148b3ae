"""A Spark streaming DataFrame standing in for one of the graph's sources.

Spark reads the outside world (MQTT through `mqtt_source`, files, Kafka where
available); the graph's source operator stays in the graph as the port its
stream comes out of: its schema, its ``event_time`` (watermarks are derived
from the tuples by the runtime's own code, in the driver stage), its
consumers. Each row becomes a tuple with ``to_tuple`` in Spark's tasks; the
rows are ordered by ``order_by`` (a sequence the source assigns, such as the
MQTT spool's ``seq`` or a Kafka offset) and stamped with ``time_column`` (the
ingestion time), so a replayed micro-batch gives the same tuples, in the same
order, at the same times.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ._rows import KIND_TUPLE, encode, source_ord

__all__ = ["SparkInput", "file_input", "mqtt_input", "rate_input"]

_UNIT_NS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


@dataclass(frozen=True)
class SparkInput:
    """``frame`` feeds the graph's source; ``to_tuple(row_dict)`` makes a tuple of a row
    (None drops it, for example a malformed message already counted by the caller)."""

    frame: Any
    to_tuple: Callable[[dict[str, Any]], Any]
    order_by: str
    time_column: str
    time_unit: str = "ms"

    def rows(self, index: int) -> Any:
        """The frame as bridge rows (see `_rows`), converted in Spark's tasks."""
        if self.time_unit not in _UNIT_NS:
            raise ValueError(f"time_unit {self.time_unit!r}: expected one of {sorted(_UNIT_NS)}")
        to_tuple, order_by, time_column = self.to_tuple, self.order_by, self.time_column
        scale = _UNIT_NS[self.time_unit]

        def convert(batches: Iterator[Any]) -> Iterator[Any]:
            import pandas as pd  # type: ignore[import-untyped]

            for pdf in batches:
                out = []
                for row in pdf.to_dict("records"):
                    tup = to_tuple(row)
                    if tup is None:
                        continue
                    stamp = row[time_column]  # a pandas Timestamp is in ns already
                    time = stamp.value if hasattr(stamp, "value") else int(stamp) * scale
                    out.append((source_ord(time, index, int(row[order_by])), KIND_TUPLE, time, 0,
                                encode(tup)))
                yield pd.DataFrame(out, columns=["ord", "kind", "time", "value", "data"])

        from ._rows import ROW_DDL

        return self.frame.mapInPandas(convert, ROW_DDL)


def _json_payload(row: dict[str, Any]) -> Any:
    payload = row["payload"]
    try:
        value = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(value, dict):
        return None
    value.setdefault("topic", row["topic"])
    return value


def mqtt_input(spark: Any, *, topic: str, client_id: str, spool: str, host: str = "127.0.0.1",
               port: int = 1883, qos: int = 1, max_records_per_batch: int = 10_000,
               to_tuple: Callable[[dict[str, Any]], Any] | None = None, **options: Any) -> SparkInput:
    """MQTT messages (`mqtt_source`) as a graph source's stream: JSON objects by default (the
    topic added as ``topic``; a payload that is not a JSON object is dropped), ordered by
    the spool's sequence and stamped with the time each message was spooled."""
    from .mqtt_source import mqtt_stream

    frame = mqtt_stream(spark, topic=topic, client_id=client_id, spool=spool, host=host, port=port,
                        qos=qos, max_records_per_batch=max_records_per_batch, **options)
    return SparkInput(frame, to_tuple or _json_payload, "seq", "recv_ms", "ms")


def _rate_tuple(row: dict[str, Any]) -> Any:
    return {"value": int(row["value"]), "timestamp": int(row["timestamp"].value)}


def rate_input(spark: Any, *, rows_per_batch: int, start_ms: int = 0, advance_ms: int = 1000,
               partitions: int = 1) -> SparkInput:
    """Spark's deterministic ``rate-micro-batch`` source: tuples ``{value, timestamp}``
    (timestamp in ns), ``rows_per_batch`` a micro-batch, the batch's time advancing by
    ``advance_ms``; in the order of ``value``, stamped with ``timestamp``."""
    frame = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", rows_per_batch)
             .option("numPartitions", partitions).option("startTimestamp", start_ms)
             .option("advanceMillisPerBatch", advance_ms).load())
    return SparkInput(frame, _rate_tuple, "value", "timestamp", "ns")


def _plain_row(row: dict[str, Any]) -> Any:
    """A row as pandas hands it over, with Python values: numpy scalars unwrapped, NaN (a
    missing value pandas put in a number column) as None."""
    out = {}
    for k, raw in row.items():
        v = raw.item() if hasattr(raw, "item") and not isinstance(raw, str | bytes) else raw
        out[k] = None if isinstance(v, float) and math.isnan(v) else v
    return out


def file_input(spark: Any, path: str, *, format: str, schema: str, order_by: str, time_column: str,
               time_unit: str = "ms", max_files_per_trigger: int | None = None,
               to_tuple: Callable[[dict[str, Any]], Any] | None = None, **options: Any) -> SparkInput:
    """Spark's own file source (``format``: json, csv, parquet, ...; ``schema`` a DDL string)
    reading the files arriving under ``path``: each row a tuple (a dict of its columns, or
    ``to_tuple``'s), ordered by the ``order_by`` column and stamped with ``time_column``,
    which the data must carry (a file has no order Spark keeps across the tasks reading it)."""
    reader = spark.readStream.format(format).schema(schema)
    if max_files_per_trigger is not None:
        reader = reader.option("maxFilesPerTrigger", max_files_per_trigger)
    frame = reader.options(**options).load(path)
    return SparkInput(frame, to_tuple or _plain_row, order_by, time_column, time_unit)
