"""A Spark streaming DataFrame standing in for one of the graph's sources.

Spark reads the outside world (MQTT through `mqtt_source`, files, Kafka where
available); the graph's source operator stays in the graph as the port its
stream comes out of: its schema, its ``event_time`` (watermarks are derived
from the tuples by the runtime's own code, in the driver stage), its
consumers. Each row becomes a tuple with ``to_tuple`` in Spark's tasks; the
rows are submitted in the order of ``order_by`` (a sequence the source
assigns, such as the MQTT spool's ``seq`` or a Kafka offset), each stamped
with ``time_column`` (the ingestion time) or, where that is earlier than the
time of a row before it in that order, with the latest time so far (the
driver stage does it, `DriverStage.in_input_order`: a source's clock never
goes back), so a replayed micro-batch gives the same tuples, in the same
order, at the same times. Within a micro-batch the order is exact; a
micro-batch's rows all come after the ones before it, so a row Spark reads
in a later micro-batch than a row after it in ``order_by`` comes after it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._rows import KIND_TUPLE, derived_ord, encode, source_ord

if TYPE_CHECKING:  # riverbed.mqtt is imported by the MQTT input only (Spark's workers import this)
    from ..graph import Schema
    from ..mqtt import Format, PayloadDecoder

__all__ = ["SparkInput", "file_input", "mqtt_input", "rate_input"]

_UNIT_NS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


@dataclass(frozen=True)
class SparkInput:
    """``frame`` feeds the graph's source; ``to_tuple(row_dict)`` makes a tuple of a row
    (None drops it, for example a malformed message already counted by the caller; a list
    is the row's tuples, in order, for example the records of an MQTT message).
    ``order_by`` (integers >= 0) and ``time_column`` (in ``time_unit``: ns, us, ms or s, or a
    timestamp) are columns of ``frame``. ``endless``: the stream has no end (MQTT), so a
    query on it needs a processing-time trigger; one that runs until its sources end
    (``available_now``) is refused."""

    frame: Any
    to_tuple: Callable[[dict[str, Any]], Any]
    order_by: str
    time_column: str
    time_unit: str = "ms"
    endless: bool = False

    def __post_init__(self) -> None:
        if self.time_unit not in _UNIT_NS:  # here: a script's hook fails with exit 2, not in deploy
            raise ValueError(f"SparkInput time_unit {self.time_unit!r}: expected one of "
                             f"{', '.join(_UNIT_NS)}")

    def check_columns(self, source: str) -> None:
        """Refuse an ``order_by`` or ``time_column`` that ``frame`` lacks (`TranslationError`
        naming ``source``), before Spark runs anything: in a task it failed with a KeyError."""
        from ._errors import TranslationError

        try:
            columns = list(self.frame.columns)
        except AttributeError:  # not a DataFrame (a stand-in in tests): nothing to check
            return
        for what, column in (("order_by", self.order_by), ("time_column", self.time_column)):
            if column not in columns:
                raise TranslationError(source, f"SparkInput {what}={column!r}: the stream has no such "
                                               f"column; its columns are {', '.join(columns)}")

    def rows(self, index: int) -> Any:
        """The frame as bridge rows (see `_rows`), converted in Spark's tasks."""
        to_tuple, order_by, time_column = self.to_tuple, self.order_by, self.time_column
        scale = _UNIT_NS[self.time_unit]

        def convert(batches: Iterator[Any]) -> Iterator[Any]:
            import pandas as pd  # type: ignore[import-untyped]

            for pdf in batches:
                out: list[tuple[bytes, int, int, int, bytes]] = []
                for row in pdf.to_dict("records"):
                    tup = to_tuple(row)
                    if tup is None:
                        continue
                    stamp = row[time_column]  # a pandas Timestamp is in ns already
                    time = stamp.value if hasattr(stamp, "value") else int(stamp) * scale
                    ord_ = source_ord(time, index, int(row[order_by]))
                    if isinstance(tup, list):
                        out.extend((derived_ord(ord_, i), KIND_TUPLE, time, 0, encode(t))
                                   for i, t in enumerate(tup))
                    else:
                        out.append((ord_, KIND_TUPLE, time, 0, encode(tup)))
                yield pd.DataFrame(out, columns=["ord", "kind", "time", "value", "data"])

        from ._rows import ROW_DDL

        return self.frame.mapInPandas(convert, ROW_DDL)


class MqttRecords:
    """``to_tuple`` of `mqtt_input`: a spooled message's valid records, decoded in Spark's tasks
    by the decoder the reader checked it with when it spooled it (and reported what it
    refused then: counted, logged, dead-lettered), so the refused ones are left out here."""

    def __init__(self, decoder: PayloadDecoder) -> None:
        self.decoder = decoder

    def __call__(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        return self.decoder.decode(row["topic"], bytes(row["payload"]))[0]


def mqtt_input(spark: Any, *, topic: str, client_id: str, spool: str, host: str = "127.0.0.1",
               port: int = 1883, qos: int = 1, max_records_per_batch: int = 10_000,
               format: Format = "json", schema: Schema | Mapping[str, str] | None = None,
               topic_attribute: str | None = "topic", topic_levels: Mapping[str, int] | None = None,
               max_payload: int | None = None, separator: str = ",", raw_attribute: str = "payload",
               dead_letter_topic: str | None = None,
               to_tuple: Callable[[dict[str, Any]], Any] | None = None, **options: Any) -> SparkInput:
    """MQTT messages (`mqtt_source`) as a graph source's stream, decoded as `MQTTSource`
    decodes them (the same `PayloadDecoder`: ``format``, ``schema``, ``topic_attribute``,
    ``topic_levels``, ``max_payload``...; JSON objects with their topic as ``topic`` by
    default, a batch of records per message allowed), ordered by the spool's sequence and
    stamped with the time each message was spooled. Refused payloads and records are counted
    and logged by the reader, and published to ``dead_letter_topic`` if given, as
    `MQTTSource` does (`mqtt_source.read_status` has the counts). Connection options
    (``username``, ``password``, ``tls``, ``protocol``, ``connectTimeout``...) go to
    `mqtt_stream`. A ``to_tuple`` of one's own replaces the decoding: it gets each row
    (seq, topic, payload, recv_ms, qos, retain) and nothing is decoded nor reported. MQTT has
    no end: the query needs a processing-time trigger (``riverbed spark run --trigger '1
    second'``, ``deploy(..., available_now=False)``); without one it is refused."""
    from ..mqtt import DEFAULT_MAX_PAYLOAD, PayloadDecoder
    from .mqtt_source import mqtt_stream

    if to_tuple is not None:
        frame = mqtt_stream(spark, topic=topic, client_id=client_id, spool=spool, host=host, port=port,
                            qos=qos, max_records_per_batch=max_records_per_batch, **options)
        return SparkInput(frame, to_tuple, "seq", "recv_ms", "ms", endless=True)
    decoder = PayloadDecoder(format, schema, topic_attribute=topic_attribute, topic_levels=topic_levels,
                             max_payload=DEFAULT_MAX_PAYLOAD if max_payload is None else max_payload,
                             separator=separator, raw_attribute=raw_attribute)
    frame = mqtt_stream(spark, topic=topic, client_id=client_id, spool=spool, host=host, port=port,
                        qos=qos, max_records_per_batch=max_records_per_batch, decoder=decoder,
                        dead_letter_topic=dead_letter_topic, **options)
    return SparkInput(frame, MqttRecords(decoder), "seq", "recv_ms", "ms", endless=True)


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
    ``to_tuple``'s), submitted in the order of the ``order_by`` column (an integer >= 0) and
    stamped with ``time_column`` kept from going back along that order (the latest time so
    far), which the data must carry (a file has no order Spark keeps across the tasks reading
    it). A micro-batch's files come after the ones before (``max_files_per_trigger``): rows
    are in ``order_by`` order across files only where the files are in that order too."""
    reader = spark.readStream.format(format).schema(schema)
    if max_files_per_trigger is not None:
        reader = reader.option("maxFilesPerTrigger", max_files_per_trigger)
    frame = reader.options(**options).load(path)
    return SparkInput(frame, to_tuple or _plain_row, order_by, time_column, time_unit)
