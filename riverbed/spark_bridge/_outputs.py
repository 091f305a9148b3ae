"""Spark's own writers standing in for the graph's sinks.

The mirror of `SparkInput`: the graph keeps its sink (a FileSink, say, which
the asyncio runtime runs), and the deployment replaces it by a
`SparkOutput`, so the stream into it is written by Spark's batch writer
(``parquet``, ``json``, ``orc``, ``csv``, ... : any ``DataFrameWriter``
format) where other Spark jobs read it.

Spark delivers a micro-batch at least once, so a write must be repeatable:
the sink's tuples of one commit of the driver stage go to their own
directory, ``<path>/commit=<n>`` (n counts the commits that had tuples),
written with ``mode("overwrite")``. The tuples are staged in the stage's
stored state before they are written (the sink is transactional), so a
crash between the two writes them again on restart, into the same
directory, as one file in the stream's order. ``spark.read.format(fmt).load(path)``
reads every commit, with a ``commit`` column that orders them. A run that starts
afresh (no stored driver-stage state) first removes the ``commit=<n>`` directories
an earlier run left under ``path`` (`clear_commits`), as a FileSink truncates its
file: numbered from 0 again, it overwrote only as many as it wrote, and reading
``path`` gave both runs' tuples mixed.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..graph import FrozenGraph, Operator, Punct, Schema, split_composite
from ._errors import TranslationError

__all__ = ["SparkOutput", "check_outputs", "clear_commits", "spark_ddl", "with_outputs"]

_SCALAR_DDL = {
    "int8": "BYTE", "int16": "SHORT", "int32": "INT", "int64": "LONG",
    "uint8": "SHORT", "uint16": "INT", "uint32": "LONG",
    "float32": "FLOAT", "float64": "DOUBLE", "boolean": "BOOLEAN",
    "rstring": "STRING", "ustring": "STRING", "blob": "BINARY",
    "timestamp": "LONG",  # ns since the epoch; Spark's TIMESTAMP holds only microseconds
}


@dataclass(frozen=True)
class SparkOutput:
    """Spark's ``format`` writer, with ``options``, writing a sink's stream under ``path``.

    ``ddl`` is the Spark schema of the written rows (default: the sink's input
    stream's declared schema, see `spark_ddl`); tuples are dicts with those
    attributes.
    """

    path: str
    format: str = "parquet"
    options: Mapping[str, str] = field(default_factory=dict)
    ddl: str | None = None


def spark_ddl(schema: Schema) -> str:
    """A riverbed schema as a Spark DDL string; a type Spark cannot hold exactly raises
    ValueError (uint64 and the decimal types)."""
    return ", ".join(f"`{name}` {_type_ddl(spl_type)}" for name, spl_type in schema.attributes)


def _type_ddl(spl_type: str) -> str:
    t = spl_type.strip()
    if t in _SCALAR_DDL:
        return _SCALAR_DDL[t]
    composite = split_composite(t)
    if composite is not None:
        kind, args = composite
        if kind == "map":
            return f"MAP<{_type_ddl(args[0])}, {_type_ddl(args[1])}>"
        return f"ARRAY<{_type_ddl(args[0])}>"  # a set becomes an array, its items sorted
    raise ValueError(f"{spl_type} has no exact Spark type")


def with_outputs(graph: FrozenGraph, outputs: Mapping[str, SparkOutput]) -> FrozenGraph:
    """``graph`` with each sink named in ``outputs`` replaced by its Spark writer; a name that
    is not a one-port sink, or a stream without a schema Spark can hold, is refused."""
    ops = []
    for odef in graph.operators:
        out = outputs.get(odef.name)
        if out is None:
            ops.append(odef)
            continue
        if odef.kind != "sink" or len(odef.inputs) != 1:
            raise TranslationError(odef.name, "a SparkOutput stands in for a sink with one input port")
        ddl = out.ddl if out.ddl is not None else _stream_ddl(graph, odef.name)
        ops.append(dataclasses.replace(odef, operator=SparkWriter(out, ddl)))
    unknown = sorted(set(outputs) - {o.name for o in graph.operators})
    if unknown:
        raise TranslationError(unknown[0], "no such sink in the graph (given as a SparkOutput)")
    return dataclasses.replace(graph, operators=tuple(ops))


def check_outputs(spark: Any, graph: FrozenGraph) -> None:
    """Refuse (`TranslationError` naming the sink) a SparkOutput whose ``ddl`` Spark cannot
    parse, or whose ``format`` and ``options`` cannot write rows of that schema (no such format,
    a type it has no column for, a bad option): an empty frame of the schema is written to a
    scratch directory. Unchecked, the first commit failed after a batch ran, saying
    "Py4JJavaError: An error occurred while calling o144.save." or "ParseException: "."""
    import tempfile

    for odef in graph.operators:
        writer = odef.operator
        if not isinstance(writer, SparkWriter):
            continue
        out = writer.output
        try:
            frame = spark.createDataFrame([], schema=writer.ddl)
        except Exception as exc:
            raise TranslationError(odef.name, f"SparkOutput ddl {writer.ddl!r}: Spark cannot parse "
                                              f"it: {_spark_message(exc)}") from None
        scratch = tempfile.mkdtemp(prefix="riverbed-output-check-")
        try:
            frame.write.format(out.format).options(**out.options).mode("overwrite").save(
                os.path.join(scratch, "out"))
        except Exception as exc:
            options = f" with options {dict(out.options)!r}" if out.options else ""
            raise TranslationError(odef.name, f"SparkOutput format {out.format!r}{options} cannot "
                                              f"write rows of {writer.ddl!r}: "
                                              f"{_spark_message(exc)}") from None
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


def _spark_message(exc: BaseException) -> str:
    """The first line of what Spark said (a Java error's own message, not py4j's call)."""
    java = getattr(exc, "java_exception", None)
    text = str(java.getMessage()) if java is not None else str(exc)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


_COMMIT_DIR = re.compile(r"commit=\d+")


def clear_commits(graph: FrozenGraph) -> list[str]:
    """Remove the ``commit=<n>`` directories under each SparkOutput's path (nothing else there):
    what a run starting afresh does first, its commits numbered from 0 again. Returns the
    directories removed."""
    removed = []
    for odef in graph.operators:
        if not isinstance(odef.operator, SparkWriter):
            continue
        path = odef.operator.output.path
        try:
            names = sorted(os.listdir(path))
        except FileNotFoundError:
            continue
        for name in names:
            target = os.path.join(path, name)
            if _COMMIT_DIR.fullmatch(name) and os.path.isdir(target):
                shutil.rmtree(target)
                removed.append(target)
    return removed


def _stream_ddl(graph: FrozenGraph, name: str) -> str:
    schemas = {graph.stream_schema(c.operator, c.port) for c in graph.operator(name).inputs[0].connections}
    if len(schemas) != 1 or None in schemas:
        raise TranslationError(name, "a SparkOutput needs the schema of its stream: declare one "
                                     "on the stream, or give SparkOutput(ddl=...)")
    (schema,) = schemas
    assert schema is not None
    try:
        return spark_ddl(schema)
    except ValueError as exc:
        raise TranslationError(name, f"a SparkOutput cannot write this stream: {exc}") from None


class SparkWriter(Operator):
    """The sink the deployment puts in place of a sink given a `SparkOutput` (runs in the
    driver stage): collects a commit's tuples, stages them in its snapshot, writes them when
    the stage's state is stored."""

    transactional = True

    def __init__(self, output: SparkOutput, ddl: str) -> None:
        self.output = output
        self.ddl = ddl
        self.written = 0  # commits written (with tuples), the next one's number
        self._pending: list[Any] = []
        self._staged: list[Any] | None = None

    def on_tuple(self, tup: Any, port: int) -> None:
        self._pending.append(tup)

    def on_punct(self, punct: Punct, port: int) -> None:
        pass  # a written commit holds tuples only

    def snapshot(self) -> Any:
        self._staged, self._pending = self._pending, []
        return {"written": self.written, "staged": self._staged}

    def restore(self, state: Any) -> None:
        self.written, staged = int(state["written"]), list(state["staged"])
        self._pending, self._staged = [], None
        if staged:  # stored, maybe not written before the crash: written (again) now
            self._write(staged)

    def on_checkpoint_committed(self, checkpoint_id: int) -> None:
        if self._staged is None:  # no snapshot since the last commit (a stage without a store)
            self._staged, self._pending = self._pending, []
        staged, self._staged = self._staged, None
        if staged:
            self._write(staged)

    def _write(self, tuples: list[Any]) -> None:
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.getOrCreate()  # the driver's session (not pickled with us)
        # One file a commit: its rows read back in the stream's order.
        frame = spark.createDataFrame([_plain(t) for t in tuples], schema=self.ddl).coalesce(1)
        target = os.path.join(self.output.path, f"commit={self.written}")
        (frame.write.format(self.output.format).options(**self.output.options)
         .mode("overwrite").save(target))
        self.written += 1


def _plain(tup: Any) -> Any:
    """Sets as sorted lists: Spark has arrays, not sets."""
    if isinstance(tup, dict) and any(isinstance(v, set | frozenset) for v in tup.values()):
        return {k: sorted(v) if isinstance(v, set | frozenset) else v for k, v in tup.items()}
    return tup
