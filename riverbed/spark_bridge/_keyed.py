"""The keyed stage: a windowed operator hosted per key group in Spark's stateful processing.

Each key group (a hash of the partition key, modulo the number of groups)
holds one instance of the operator with its windows, exactly as the runtime
would run it, but seeing only its keys' tuples. Its state is the runtime's
own snapshot (operator, windows, watermarks, ended connections, clock),
stored as one binary value per group in Spark's RocksDB state store; a group
reads it once and writes it once per micro-batch, because every state call
is a round trip to the JVM.

Rows are sorted by their order key first: Spark does not keep per-key order
inside a micro-batch. Marks and watermarks reach every group (the routing
step copies them), so a group sees the whole stream's control items in order.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any

from ..checkpoint._codec import decode_value, encode_value
from ..graph import FrozenGraph
from ..runtime._sync import SyncGraph
from ._rows import KIND_TIME, KIND_TUPLE, decode, derived_ord, encode, item_of, kind_of

__all__ = ["KEYED_OUT_DDL", "ROUTED_DDL", "make_processor", "make_router"]

ROUTED_DDL = "ord BINARY, kind INT, time LONG, value LONG, data BINARY, grp INT"
KEYED_OUT_DDL = "ord BINARY, kind INT, time LONG, value LONG, data BINARY, stream INT, chan INT"


def group_of(key: Any, groups: int) -> int:
    """A key's group: stable across processes (Python's own str hash is salted per process)."""
    return zlib.crc32(encode(key)) % groups


def exit_rows(host: SyncGraph, cause: bytes, time: int) -> list[tuple[Any, ...]]:
    """What the host sent out while handling ``cause``: rows ``(port, ord, kind, time, value, data)``,
    ordered after ``cause`` in the order they were sent."""
    out: list[tuple[Any, ...]] = []
    for _op, port, entry in host.take_exits():
        if type(entry) is list:
            for tup in entry:
                out.append((port, derived_ord(cause, len(out)), KIND_TUPLE, time, 0, encode(tup)))
        else:
            kind, value = kind_of(entry)
            out.append((port, derived_ord(cause, len(out)), kind, time, value, None))
    return out


def make_router(graph: FrozenGraph, chain: list[str], entry: tuple[str, int], keyed: str,
                groups: int) -> Any:
    """The mapInPandas function: the stateless chain, then each row's key group."""
    inp = graph.operator(keyed).inputs[0]
    partition_by = inp.partition_by
    key_of = (lambda t: t[partition_by]) if isinstance(partition_by, str) else partition_by

    def route(batches: Iterator[Any]) -> Iterator[Any]:
        import pandas as pd

        host: SyncGraph | None = None
        for pdf in batches:
            out: list[tuple[Any, ...]] = []
            for ord_, kind, time, value, data in zip(pdf["ord"], pdf["kind"], pdf["time"],
                                                     pdf["value"], pdf["data"], strict=True):
                time = int(time)
                if chain:
                    if host is None:
                        host = SyncGraph(graph, chain, now=time)
                    host.advance(time)
                    item = item_of(int(kind), int(value), data)
                    if item is not None:
                        host.feed(*entry, [item] if int(kind) == KIND_TUPLE else item)
                    produced = [row[1:] for row in exit_rows(host, ord_, time)]
                    if int(kind) == KIND_TIME:
                        produced.append((ord_, KIND_TIME, time, 0, None))
                else:
                    produced = [(ord_, int(kind), time, int(value), data)]
                for row in produced:
                    if row[1] == KIND_TUPLE:
                        tup = decode(row[4])
                        g = group_of(key_of(tup), groups) if key_of is not None else 0
                        out.append((*row, g))
                    else:
                        out.extend((*row, g) for g in range(groups))
            yield pd.DataFrame(out, columns=["ord", "kind", "time", "value", "data", "grp"])

    return route


def make_processor(graph: FrozenGraph, keyed: str, entry: tuple[str, int]) -> Any:
    """The StatefulProcessor hosting operator ``keyed`` per key group."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class HostedOperator(StatefulProcessor):  # type: ignore[misc]
        def init(self, handle: Any) -> None:
            self.state = handle.getValueState("host", "blob BINARY")

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
            import pandas as pd

            group = int(key[0])
            frame = pd.concat(list(rows), ignore_index=True)
            frame = frame.sort_values("ord", kind="stable")
            stored = self.state.get() if self.state.exists() else None
            if stored is not None:
                state = decode_value(stored[0], checkpoint_id=0, key=f"{keyed}/{group}")
                host = SyncGraph(graph, [keyed], state=state)
            else:
                host = SyncGraph(graph, [keyed], now=int(frame["time"].iloc[0]))
            out: list[tuple[Any, ...]] = []
            for ord_, kind, time, value, data in zip(frame["ord"], frame["kind"], frame["time"],
                                                     frame["value"], frame["data"], strict=True):
                time = int(time)
                host.advance(time)
                item = item_of(int(kind), int(value), data)
                if item is not None:
                    host.feed(*entry, [item] if int(kind) == KIND_TUPLE else item)
                out.extend((*row[1:], row[0], group) for row in exit_rows(host, ord_, time))
            self.state.update((encode_value(host.state(), checkpoint_id=0, key=f"{keyed}/{group}"),))
            if out:
                yield pd.DataFrame(out, columns=["ord", "kind", "time", "value", "data", "stream",
                                                 "chan"])

        def close(self) -> None:
            pass

    return HostedOperator()
